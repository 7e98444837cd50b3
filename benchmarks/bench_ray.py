"""Job lanes on a Ray cluster against the same lanes run locally (the ``[ray]`` extra).

2 000 ``/bin/true`` jobs over 200 lanes (10 per lane), as ``bench_lanes`` runs them, once
through :func:`supervisor.open_ray_lanes` on a local two-node cluster
(``ray.cluster_utils.Cluster``: a head and one worker node, one CPU each; the lanes spread
over both, each node's agent runs its lanes in an embedded Core) and once through
:func:`lanes.open_lanes` with :class:`ProcessJobRunner` in this process. The agents are
started (one job per node) before the clock starts. The row is jobs/s; the per-job overhead
of Ray is ``1 / ours - 1 / peer``. On one machine the "nodes" share its cores, so this
measures the cost of the path (commands and events through Ray, an agent per node), not a
gain from more machines (README "Job lanes on a Ray cluster").

Skipped (no row) when Ray is not installed. ``python -m benchmarks.bench_ray [JOBS]``
prints the row; fewer jobs keep it short on a loaded machine.
"""

from __future__ import annotations

import contextlib
import os
import sys
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
NODES = 2
ARGV = ("/bin/true",)
#: Ray's path costs per job (two hops, an actor call per batch, pickling): at least half
#: the local rate on one machine (measured 0.64x and 0.84x at 2 000 jobs; at 200 jobs the
#: fixed round trips dominate and it is about 0.15x).
GOAL = 0.5


class _Tally:
    def __init__(self) -> None:
        self.bad: list[str] = []
        self.finished = 0

    def __call__(self, method: str, params: JSONObject) -> None:
        if method == "job.finished":
            self.finished += 1
            if params.get("status") != "ok":
                self.bad.append(f"{params.get('status')}: {params.get('error')}")

    def check(self, jobs: int, what: str) -> None:
        if self.finished != jobs or self.bad:
            raise RuntimeError(f"{what}: {self.finished} finished, not ok: {self.bad[:3]}")


async def _ray(roots: list[str], jobs: int) -> float:
    from supervisor import open_ray_lanes

    tally = _Tally()
    async with open_ray_lanes(on_event=tally) as lanes:
        # One job per node first: its agent starts outside the measured time.
        for root in roots[:NODES]:
            lanes.start_job(JobRequest(kind=JobKind.COMMAND, root=root, argv=ARGV))
        await lanes.wait_idle()
        started = time.perf_counter()
        for i in range(jobs):
            lanes.start_job(JobRequest(kind=JobKind.COMMAND, root=roots[i % LANES], argv=ARGV))
        await lanes.wait_idle()
        elapsed = time.perf_counter() - started
    tally.check(jobs + NODES, "ray lanes")
    return jobs / elapsed


async def _local(roots: list[str], jobs: int) -> float:
    tally = _Tally()
    async with open_lanes(ProcessJobRunner(), on_event=tally) as lanes:
        started = time.perf_counter()
        for i in range(jobs):
            lanes.start_job(JobRequest(kind=JobKind.COMMAND, root=roots[i % LANES], argv=ARGV))
        await lanes.wait_idle()
        elapsed = time.perf_counter() - started
    tally.check(jobs, "local lanes")
    return jobs / elapsed


def measure(*, rounds: int = 120, jobs: int = JOBS) -> list[dict[str, object]]:
    """Measure jobs/s of both; ``max(2, rounds // 60)`` pairs, one cluster for all.

    Returns:
        One row (jobs/s, higher is better), or none when Ray is not installed.
    """
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        return []
    pairs = max(2, rounds // 60)
    ours: list[float] = []
    local: list[float] = []
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        for _ in range(NODES - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as base:
            roots = [os.path.join(base, f"p{i:03d}") for i in range(LANES)]
            for root in roots:
                os.mkdir(root)
            for i in range(pairs):
                order = [(ours, _ray), (local, _local)]
                if i % 2:
                    order.reverse()
                for sink, fn in order:
                    sink.append(trio.run(fn, roots, jobs))
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        cluster.shutdown()
    overhead_ms = (1 / min(ours) - 1 / max(local)) * 1000 if ours and local else 0.0
    return [
        paired_row(
            f"{jobs} /bin/true jobs over {LANES} lanes on a {NODES}-node local Ray cluster"
            " (jobs/s; ratio > 1 = faster)",
            ours,
            local,
            unit="jobs/s",
            peer_name="the same lanes in this process",
            at_least=GOAL,
            note=f"Ray adds about {overhead_ms:.2f} ms per job (worst round)",
        )
    ]


if __name__ == "__main__":
    for r in measure(jobs=int(sys.argv[1]) if len(sys.argv) > 1 else JOBS):
        print(r)
