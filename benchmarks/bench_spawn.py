"""Spawn + wait of ``/bin/true``: ``process.run`` against ``subprocess.run`` and
``trio.run_process``.

Each round runs all three in a rotating order, after a warm-up, inside one Trio run;
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

import subprocess
import time

import trio

from benchmarks._common import paired_row
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


async def _trio_ms() -> float:
    started = time.perf_counter()
    await trio.run_process(ARGV, capture_stdout=True, capture_stderr=True, stdin=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000


async def _measure(rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"ours": [], "trio": [], "subprocess": []}

    async def one(name: str) -> float:
        if name == "ours":
            return await _ours_ms()
        if name == "trio":
            return await _trio_ms()
        return _subprocess_run_ms()

    order = ["ours", "trio", "subprocess"]
    for _ in range(WARMUP):
        for name in order:
            await one(name)
    for i in range(rounds):
        rotated = order[i % 3 :] + order[: i % 3]
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
    return [
        paired_row(
            "process.run /bin/true spawn+wait (time; ratio > 1 = slower)",
            samples["ours"],
            samples[peer],
            unit="ms",
            peer_name=name,
            at_most=GOAL if peer == "subprocess" else TRIO_GOAL,
        )
        for peer, name in (("subprocess", "subprocess.run"), ("trio", "trio.run_process"))
    ]


if __name__ == "__main__":
    for result in measure():
        print(result)
