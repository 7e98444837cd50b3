"""Job lanes at scale (goal 8 of the README's table, the lanes half).

2 000 ``/bin/true`` jobs over 200 lanes (one project root each, 10 jobs queued per lane),
through :func:`lanes.open_lanes` with the supervisor's :class:`ProcessJobRunner` (each job
a process tree: own session, marker, output pumped as ``job.output``, tree end, reaping),
against a plain Trio loop with the same concurrency: 200 tasks, each running its 10
commands one after another with ``trio.run_process`` (output captured, ``/dev/null``
stdin, the same working directory). Goal: ours at least 0.9x the plain loop's jobs/s.

Rounds alternate ours / plain; the figure is the median, the ratio the median of the
per-round ratios. Run ``python -m benchmarks.bench_lanes`` to print the rows.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from typing import TYPE_CHECKING

import trio

from benchmarks._common import paired_row
from lanes import JobKind, JobRequest, open_lanes
from supervisor._core._jobs import ProcessJobRunner

if TYPE_CHECKING:
    from protocol import JSONObject

__all__ = ("measure",)

JOBS = 2000
LANES = 200
ARGV = ("/bin/true",)
GOAL = 0.9


async def _ours(roots: list[str]) -> float:
    finished: list[str] = []

    def on_event(method: str, params: JSONObject) -> None:
        if method == "job.finished":
            status = params.get("status")
            finished.append(str(status))

    async with open_lanes(ProcessJobRunner(), on_event=on_event) as lanes:
        started = time.perf_counter()
        for i in range(JOBS):
            lanes.start_job(JobRequest(kind=JobKind.COMMAND, root=roots[i % LANES], argv=ARGV))
        await lanes.wait_idle()
        elapsed = time.perf_counter() - started
    bad = [status for status in finished if status != "ok"]
    if len(finished) != JOBS or bad:
        raise RuntimeError(f"lanes: {len(finished)} finished, not ok: {bad[:5]}")
    return JOBS / elapsed


async def _plain(roots: list[str]) -> float:
    async def lane(root: str) -> None:
        for _ in range(JOBS // LANES):
            await trio.run_process(
                ARGV, cwd=root, stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True
            )

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for root in roots:
            nursery.start_soon(lane, root)
    return JOBS / (time.perf_counter() - started)


def measure(*, rounds: int = 200) -> list[dict[str, object]]:
    """Measure jobs/s of both; ``rounds`` is scaled down: ``max(2, rounds // 60)`` pairs.

    Returns:
        One row in the ``benchmarks._common.row`` format (jobs/s, higher is better).
    """
    pairs = max(2, rounds // 60)
    ours: list[float] = []
    plain: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-lanes-") as base:
        roots = [os.path.join(base, f"p{i:03d}") for i in range(LANES)]
        for root in roots:
            os.mkdir(root)
        for i in range(pairs):
            order = [(ours, _ours), (plain, _plain)]
            if i % 2:
                order.reverse()
            for sink, fn in order:
                sink.append(trio.run(fn, roots))
    return [
        paired_row(
            f"{JOBS} /bin/true jobs over {LANES} lanes (jobs/s; ratio > 1 = faster)",
            ours,
            plain,
            unit="jobs/s",
            peer_name="plain Trio loop, same concurrency",
            at_least=GOAL,
        )
    ]


if __name__ == "__main__":
    for r in measure():
        print(r)
