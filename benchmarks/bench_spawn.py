"""Spawn + wait of ``/bin/true``: ``process.run`` against ``subprocess.run`` and
``trio.run_process``.

Each round runs all three in a rotating order, after a warm-up, inside one Trio run, with a
fourth contestant, not judged, printed as each row's note: a bare Trio spawn+wait (see
``_bare_ms``), what any Trio program pays before it owns anything;
figures are medians in milliseconds (time: a ratio above 1 means we are slower).
``process.run`` does more than its peers: a new session and group, the scope marker,
the executable lookup, a procfs walk for leftovers and the reaping pass. All three
capture stdout and stderr and give the child ``/dev/null`` as stdin, as
``process.run`` does. Goal 1 of the README's table: at most 1.15x ``subprocess.run`` and
0.95x ``trio.run_process`` (the second row). Ratios are medians of per-round
ratios (each round runs the three back to back), which a shared machine's bursts of load
disturb far less than a ratio of separate medians.

Run ``python -m benchmarks.bench_spawn`` to print the rows.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time

import trio

from benchmarks._common import paired_ratios, paired_row
from supervisor._process._oneshot import run_process

ARGV = ["/bin/true"]
WARMUP = 10
GOAL = 1.15
#: The goal against ``trio.run_process``.
TRIO_GOAL = 0.95


def _subprocess_run_ms() -> float:
    started = time.perf_counter()
    subprocess.run(ARGV, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000


async def _ours_ms() -> float:
    started = time.perf_counter()
    result = await run_process(ARGV)
    elapsed = (time.perf_counter() - started) * 1000
    assert result.exit_code == 0
    return elapsed


async def _bare_ms() -> float:
    """The floor of any Trio program: ``os.posix_spawn`` in a new session with the same three
    descriptors, both pipes read to EOF and the exit waited for through a pidfd, and nothing
    else (no marker, no ownership records, no leftovers check, no reaper)."""
    started = time.perf_counter()
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    err_r, err_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    dup2 = os.POSIX_SPAWN_DUP2
    pid = os.posix_spawn(  # noqa: ASYNC221  # the floor is the blocking call itself
        ARGV[0],
        ARGV,
        os.environ,
        file_actions=[(dup2, null, 0), (dup2, out_w, 1), (dup2, err_w, 2)],
        setsid=True,
    )
    for fd in (null, out_w, err_w):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    for fd in (out_r, err_r):
        while True:
            try:
                if not os.read(fd, 65536):
                    break
            except BlockingIOError:
                await trio.lowlevel.wait_readable(fd)
    await trio.lowlevel.wait_readable(pidfd)
    _, status = os.waitpid(pid, 0)  # noqa: ASYNC222  # the pidfd said it exited: no wait
    elapsed = (time.perf_counter() - started) * 1000
    for fd in (out_r, err_r, pidfd):
        trio.lowlevel.notify_closing(fd)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    return elapsed


async def _trio_ms() -> float:
    started = time.perf_counter()
    await trio.run_process(ARGV, capture_stdout=True, capture_stderr=True, stdin=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000


async def _measure(rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"ours": [], "trio": [], "subprocess": [], "bare": []}

    async def one(name: str) -> float:
        if name == "ours":
            return await _ours_ms()
        if name == "trio":
            return await _trio_ms()
        if name == "bare":
            return await _bare_ms()
        return _subprocess_run_ms()

    order = ["ours", "trio", "subprocess", "bare"]
    for _ in range(WARMUP):
        for name in order:
            await one(name)
    for i in range(rounds):
        rotated = order[i % 4 :] + order[: i % 4]
        for name in rotated:
            samples[name].append(await one(name))
    return samples


def measure(*, rounds: int = 200) -> list[dict[str, object]]:
    """Measure spawn+wait of /bin/true, interleaved; return one row per peer.

    Args:
        rounds: Timed rounds (each runs all three once), after a warm-up of 10.

    Returns:
        Rows ``{figure, ours, peer, unit, peer_name, ratio, goal, met}``; times in
        milliseconds, ``ratio`` above 1 means ours is slower.
    """
    samples = trio.run(_measure, rounds)
    bare = statistics.median(samples["bare"])
    return [
        paired_row(
            "process.run /bin/true spawn+wait (time; ratio > 1 = slower)",
            samples["ours"],
            samples[peer],
            unit="ms",
            peer_name=name,
            at_most=GOAL if peer == "subprocess" else TRIO_GOAL,
            note=(
                f"bare Trio spawn+wait (no ownership) {bare:.4g} ms,"
                f" {statistics.median(paired_ratios(samples['bare'], samples[peer])):.2f}x"
            ),
        )
        for peer, name in (("subprocess", "subprocess.run"), ("trio", "trio.run_process"))
    ]


if __name__ == "__main__":
    for result in measure():
        print(result)
