"""Output floods (goal 9 of the README's table).

A child writes 1 GB to stdout (``head -c 1000000000 /dev/zero``) under ``process.run``'s
default 16 MiB cap. Two figures:

- throughput: MB/s through ``process.run`` against the same child piped into
  ``cat > /dev/null`` (``/bin/sh -c 'head ... | cat > /dev/null'``). Goal: at least 0.6x.
- memory: the growth of the supervisor's peak RSS while draining, measured in a fresh
  interpreter (``VmHWM`` after the run minus before it, with Trio already running and one
  small run done first). Goal: at most 32 MiB, twice the 16 MiB cap: the kept bytes and
  their text, both alive while the text is decoded, which is the floor of a ``str`` result
  (without the small run first the set-up every run shares once, about 0.2 MiB, counted
  too and put it over).

Runs alternate ours / cat; figures are medians. ``python -m benchmarks.bench_flood``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import trio

from benchmarks._common import paired_ratios, row
from supervisor._process._oneshot import run_process

__all__ = ("measure",)

SIZE = 1_000_000_000
ARGV = ["head", "-c", str(SIZE), "/dev/zero"]
MEMORY_GOAL_MIB = 32
THROUGHPUT_GOAL = 0.6
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The peak is VmHWM, the high-water mark of this process's own memory map. ru_maxrss would
# not do: Linux carries it across fork and exec, so a probe started by a parent that had a
# larger peak would read that parent's peak as its own.
_MEMORY_PROBE = """
import json, sys, trio
from supervisor._process._oneshot import run_process

def peak_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

async def main():
    await trio.sleep(0)
    # A first, small run sets up what every run shares once (the spawn's libc bindings, the
    # watchdog): the growth measured is the flood's, not that.
    await run_process(["head", "-c", "100000", "/dev/zero"])
    before = peak_kib()
    result = await run_process(%r)
    after = peak_kib()
    print(json.dumps({"growth_kib": after - before, "truncated": result.truncated}))

trio.run(main)
"""


async def _ours_s() -> float:
    started = time.perf_counter()
    result = await run_process(ARGV)
    elapsed = time.perf_counter() - started
    if not result.truncated or result.exit_code != 0:
        raise RuntimeError(f"flood run failed: {result.exit_code} {result.stderr[:200]}")
    return elapsed


def _cat_s() -> float:
    started = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", " ".join(ARGV) + " | cat > /dev/null"], check=True)
    return time.perf_counter() - started


def _memory_growth_kib() -> int:
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE % (ARGV,)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(json.loads(out)["growth_kib"])


def measure(*, rounds: int = 200) -> list[dict[str, object]]:
    """Measure both figures; ``max(2, rounds // 60)`` runs of each side (1 GB each).

    Returns:
        Rows in the ``benchmarks._common.row`` format.
    """
    runs = max(2, rounds // 60)
    ours: list[float] = []
    cat: list[float] = []
    for i in range(runs):
        if i % 2:
            cat.append(_cat_s())
            ours.append(trio.run(_ours_s))
        else:
            ours.append(trio.run(_ours_s))
            cat.append(_cat_s())
    # Throughput ratio = cat's time / ours (higher is better).
    ratios = [1 / r for r in paired_ratios(ours, cat)]
    ratio = statistics.median(ratios)
    growth_mib = statistics.median(_memory_growth_kib() for _ in range(2)) / 1024
    return [
        row(
            "flood: 1 GB stdout under the 16 MiB cap (MB/s; ratio > 1 = faster)",
            ours=SIZE / 1e6 / statistics.median(ours),
            peer=SIZE / 1e6 / statistics.median(cat),
            unit="MB/s",
            peer_name="head | cat > /dev/null",
            ratio=ratio,
            goal=f">= {THROUGHPUT_GOAL}x",
            met=ratio >= THROUGHPUT_GOAL,
            ratios=ratios,
        ),
        row(
            "flood: supervisor peak RSS growth while draining 1 GB (MiB)",
            ours=growth_mib,
            peer=MEMORY_GOAL_MIB,
            unit="MiB",
            peer_name="bound: 32 MiB",
            ratio=growth_mib / MEMORY_GOAL_MIB,
            goal="<= 1.0x",
            met=growth_mib <= MEMORY_GOAL_MIB,
        ),
    ]


if __name__ == "__main__":
    for r in measure():
        print(r)
