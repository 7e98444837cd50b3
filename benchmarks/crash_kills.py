"""Crash cleanup without a window: a seeded loop of SIGKILLs of ``supervisor serve``.

``python -m benchmarks.crash_kills [--kills 200] [--seed S] [--json FILE]``

Each round starts ``supervisor serve`` (its guardian and its worker, as an editor starts it),
starts one to three testbed ``escape-artist`` programs through it -- as jobs or as
``process.run`` calls, each with a random escape trick (``setsid``, ``pgrp``, ``env-i``,
``double-fork``, ``window``, ``all``) and escapees whose parent stays alive or exits at once
(``--orphan``: re-parented to the worker) -- then waits a random 0-1.5 s and SIGKILLs the
guardian (the pid the client started; four rounds in five) or the worker. It then reads
``/proc/<pid>/stat`` of every process whose command line names the round's scratch directory
(each escapee does, even one killed before it wrote its pid) until none is alive -- a zombie is
not alive: ``kill(pid, 0)`` would still answer for it -- and records how long that took.

The run fails when any process outlives its round's kill by 2 s (the design invariant 14). It
prints the rounds, the processes the artists started, the survivors, and the time from the
kill to the last escapee gone (median, 95th percentile, maximum). Exit status 0 when nothing
survived.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Final

from protocol import Frame, FrameDecoder
from supervisor._process._guardian import serving_pid
from supervisor.testbed import program_argv

PY = sys.executable
#: the design invariant 14.
BOUND_S: Final = 2.0
#: How long a round looks for survivors after its kill, in seconds.
WATCH_S: Final = 5.0
_PR_SET_CHILD_SUBREAPER: Final = 36
TRICKS: Final = ("setsid", "pgrp", "env-i", "double-fork", "window", "all")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def tagged(tag: bytes) -> list[int]:
    """Live processes whose command line holds ``tag``."""
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if tag in cmdline and _alive(int(name)):
            found.append(int(name))
    return found


class _Serve:
    """``supervisor serve`` with blocking, hand-framed JSON-RPC (answers are not read)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [PY, "-m", "supervisor", "--log-level", "ERROR", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._ids = 0

    def send(self, method: str, params: Any) -> None:
        self._ids += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body.encode())
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        decoder = FrameDecoder()
        assert self.process.stdout is not None
        while True:
            event = decoder.next_event()
            if isinstance(event, Frame):
                message: dict[str, Any] = json.loads(event.body)
                if "id" in message:
                    return message
                continue
            data = self.process.stdout.read1(65536)  # type: ignore[attr-defined]
            if not data:
                assert self.process.stderr is not None
                tail = self.process.stderr.read().decode(errors="replace")[-2000:]
                raise EOFError(f"serve {self.process.pid} ended ({self.process.wait()}): {tail}")
            decoder.receive_data(data)


def one_round(rng: random.Random, workdir: str) -> dict[str, Any]:
    """Start serve and its artists, SIGKILL it at a random moment; what survived, how long."""
    serve = _Serve()
    tag = workdir.encode()
    artists: list[str] = []
    try:
        serve.send("initialize", {"capabilities": {}})
        serve.answer()
        for number in range(rng.randint(1, 3)):
            trick = rng.choice(TRICKS)
            orphan = rng.random() < 0.5
            artists.append(f"{trick}{' orphan' if orphan else ''}")
            argv = program_argv(
                "escape-artist",
                trick=trick,
                orphan=orphan,
                pid_file=os.path.join(workdir, f"artist-{number}.pids"),
                count=6,
            )
            if rng.random() < 0.5:
                root = os.path.join(workdir, f"root-{number}")
                os.makedirs(root, exist_ok=True)
                serve.send("job.start", {"kind": "test", "root": root, "argv": argv})
            else:
                serve.send("process.run", {"argv": argv})
        time.sleep(rng.uniform(0.0, 1.5))
        worker = serving_pid(serve.process.pid)
        victim = "worker" if rng.random() < 0.2 and worker != serve.process.pid else "serve"
        started = sum(_count_lines(os.path.join(workdir, n)) for n in os.listdir(workdir))
        os.kill(worker if victim == "worker" else serve.process.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        gone_after: float | None = None
        while time.monotonic() - killed_at < WATCH_S:
            if not tagged(tag):
                gone_after = time.monotonic() - killed_at
                break
            time.sleep(0.005)
        survivors = tagged(tag)
        return {
            "artists": artists,
            "victim": victim,
            "processesStarted": started,
            "goneAfterMs": None if gone_after is None else round(gone_after * 1000, 1),
            "survivors": survivors,
        }
    finally:
        for pid in tagged(tag):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if serve.process.poll() is None:
            serve.process.kill()
        serve.process.wait()
        for stream in (serve.process.stdin, serve.process.stdout, serve.process.stderr):
            with contextlib.suppress(OSError):
                assert stream is not None
                stream.close()


def _count_lines(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def _reap_adopted() -> None:
    """Collect the exit status of processes re-parented to this one (when it is a subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.crash_kills", description=__doc__)
    p.add_argument("--kills", type=int, default=200)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    # What a killed round leaves comes to this process, which collects it (no zombie pile).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    rounds: list[dict[str, Any]] = []
    started = time.monotonic()
    for index in range(args.kills):
        rng = random.Random(f"{seed}-{index}")
        with tempfile.TemporaryDirectory(prefix="supervisor-kill-") as workdir:
            result = one_round(rng, workdir)
        _reap_adopted()
        rounds.append(result)
        late = result["goneAfterMs"] is None or result["goneAfterMs"] > BOUND_S * 1000
        if late or result["survivors"]:
            print(f"round {index}: {result}", flush=True)
    times = [r["goneAfterMs"] for r in rounds if r["goneAfterMs"] is not None]
    late = [r for r in rounds if r["goneAfterMs"] is None or r["goneAfterMs"] > BOUND_S * 1000]
    summary = {
        "seed": seed,
        "kills": len(rounds),
        "killedWorker": sum(r["victim"] == "worker" for r in rounds),
        "processesStarted": sum(r["processesStarted"] for r in rounds),
        "survivors": sum(len(r["survivors"]) for r in rounds),
        "roundsOverBound": len(late),
        "goneAfterMs": {
            "median": round(statistics.median(times), 1) if times else None,
            "p95": round(statistics.quantiles(times, n=20)[18], 1) if len(times) >= 20 else None,
            "max": max(times) if times else None,
        },
        "seconds": round(time.monotonic() - started),
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**summary, "rounds": rounds}, f, indent=1)
    return 0 if not late and not summary["survivors"] else 1


if __name__ == "__main__":
    sys.exit(main())
