"""Start-up of the command line: ``supervisor --version``, ``exec -- /bin/true``, ``run`` of a
one-job file and ``serve`` until its ``initialize`` answer, each against a fresh interpreter
that runs ``/bin/true``.

The peer is ``python3 -c 'import subprocess; subprocess.run(["/bin/true"])'`` run by the same
interpreter as the supervisor (so both pay the same interpreter start, ``site`` and ``.pth``
files): what any Python tool pays to start and run one program. Each round runs the peer and
the four contestants back to back in a rotating order, after a warm-up; each figure is the
wall time from ``posix_spawn`` to the exit (``serve``: to the last byte of the ``initialize``
answer; its ``shutdown`` and ``exit`` are not timed), in milliseconds. Ratios are medians of
per-round ratios, which a shared machine's bursts of load disturb far less than a ratio of
separate medians. Every contestant runs with ``PYTHONDONTWRITEBYTECODE`` unset, so the
warm-up leaves the bytecode cache an installed package has (pip compiles it at install):
without it each start would also compile our modules from source.

Goals (issue 26): ``--version`` at most 2x the peer, ``exec`` and ``serve``'s first answer at
most 3x; ``run`` of one job at most 4x (it reads and checks a TOML file and opens the lanes and
their view before its job starts; our goal, not the issue's).

A sixth start, ``python -c 'import trio'`` by the same interpreter, is timed in the same rounds
and named in the notes of ``run`` and ``serve``: the floor of any start that runs on Trio
(``exec`` of a command that leaves nothing does not: ``supervisor/_process/_direct.py``).

Run ``python -m benchmarks bench_startup`` to print the rows.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import paired_row

WARMUP = 2
PEER_NAME = "python3 -c 'import subprocess; subprocess.run([\"/bin/true\"])'"
#: The goals, as ratios to the peer (issue 26).
VERSION_GOAL = 2.0
EXEC_GOAL = 3.0
SERVE_GOAL = 3.0
RUN_GOAL = 4.0
#: A contestant that takes longer than this is broken, not slow.
TIMEOUT_S = 60.0


def _command() -> list[str]:
    """The ``supervisor`` command of this interpreter: its console script when installed
    (what a user runs), ``python -m supervisor`` otherwise."""
    script = Path(sys.executable).with_name("supervisor")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "supervisor"]


#: The contestants' environment: ours, with the bytecode cache written and read.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _timed(argv: list[str], *, cwd: str | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        argv,
        env=_ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=cwd,
        timeout=TIMEOUT_S,
        check=False,
    )
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr[-400:]!r}")
    return elapsed


def _frame(message: dict[str, object]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _read_frame(fd: int) -> bytes:
    """Read one whole frame from ``fd`` (blocking)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError(f"serve closed its output before answering: {data!r}")
        data += chunk
    header, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in header.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RuntimeError("serve closed its output inside a frame")
        body += chunk
    return body[:length]


def _serve_ms(command: list[str]) -> float:
    """Start ``serve``, time it to its ``initialize`` answer, then end it politely."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [*command, "serve"],
        env=_ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize"}))
        process.stdin.flush()
        answer = json.loads(_read_frame(process.stdout.fileno()))
        elapsed = (time.perf_counter() - started) * 1000
        if "result" not in answer:
            raise RuntimeError(f"initialize failed: {answer!r}")
        process.stdin.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
        process.stdin.write(_frame({"jsonrpc": "2.0", "method": "exit"}))
        process.stdin.close()
        if process.wait(TIMEOUT_S) != 0:
            raise RuntimeError(f"serve exited {process.returncode} after shutdown and exit")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
    return elapsed


def _measure(rounds: int, workdir: str) -> dict[str, list[float]]:
    command = _command()
    run_file = os.path.join(workdir, "one.toml")
    with open(run_file, "w") as f:
        f.write('[[job]]\nname = "true"\nargv = ["/bin/true"]\n')
    contestants = {
        "peer": lambda: _timed(
            [sys.executable, "-c", "import subprocess; subprocess.run(['/bin/true'])"]
        ),
        "version": lambda: _timed([*command, "--version"]),
        "exec": lambda: _timed([*command, "exec", "--", "/bin/true"]),
        "run": lambda: _timed([*command, "run", run_file], cwd=workdir),
        "serve": lambda: _serve_ms(command),
        "trio": lambda: _timed([sys.executable, "-c", "import trio"]),
    }
    samples: dict[str, list[float]] = {name: [] for name in contestants}
    order = list(contestants)
    for _ in range(WARMUP):
        for name in order:
            contestants[name]()
    for i in range(rounds):
        k = i % len(order)
        for name in order[k:] + order[:k]:
            samples[name].append(contestants[name]())
    return samples


def measure(*, rounds: int = 15) -> list[dict[str, object]]:
    """Measure the four start-ups against the peer, interleaved; return one row each.

    Args:
        rounds: Timed rounds (each runs all five once), after a warm-up of 2.

    Returns:
        Rows ``{figure, ours, peer, unit, peer_name, ratio, goal, met}``; times in
        milliseconds, ``ratio`` above 1 means ours is slower.
    """
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as workdir:
        samples = _measure(rounds, workdir)
    peer = samples["peer"]
    note = f"peer {statistics.median(peer):.4g} ms: the interpreter's own start is most of it"
    trio_ms = statistics.median(samples["trio"])
    trio_ratio = statistics.median(t / p for t, p in zip(samples["trio"], peer, strict=True))
    floor = f"python -c 'import trio' alone: {trio_ms:.4g} ms, {trio_ratio:.2f}x the peer"
    notes = {"version": note, "run": floor, "serve": floor}
    return [
        paired_row(
            figure,
            samples[name],
            peer,
            unit="ms",
            peer_name=PEER_NAME,
            at_most=goal,
            note=notes.get(name),
        )
        for name, figure, goal in (
            ("version", "start-up: supervisor --version (time)", VERSION_GOAL),
            ("exec", "start-up: supervisor exec -- /bin/true (time)", EXEC_GOAL),
            ("run", "start-up: supervisor run of a one-job file (time)", RUN_GOAL),
            ("serve", "start-up: supervisor serve to its initialize answer (time)", SERVE_GOAL),
        )
    ]


if __name__ == "__main__":
    for result in measure():
        print(result)
