"""Job lanes on a Ray cluster against the same lanes run locally (the ``[ray]`` extra).

2 000 ``/bin/true`` jobs over 200 lanes (10 per lane), as ``bench_lanes`` runs them, once
through :func:`supervisor.open_ray_lanes` on a local two-node cluster
(``ray.cluster_utils.Cluster``: a head and one worker node, one CPU each; the lanes spread
over both, each node's agent runs the lanes a local run has) and once through
:func:`lanes.open_lanes` with :class:`ProcessJobRunner` in this process. The agents are
started (one job per node) before the clock starts. The row is jobs/s; the per-job overhead
of Ray is ``1 / ours - 1 / peer``. On one machine the "nodes" share its cores, so this
measures the cost of the path (commands and events through Ray, an agent per node), not a
gain from more machines (README "Job lanes on a Ray cluster").

Three rows on a warm three-node local cluster (a head and two workers, one CPU each) measure
the fixed costs of a small run:

- the whole command ``supervisor run FILE --ray ADDRESS --json`` on :data:`SMALL_JOBS`
  ``/bin/true`` jobs over :data:`SMALL_PROJECTS` projects, less the cluster join, against the
  same command run locally (goal: at most 3x);
- the join itself (``import ray``, ``ray.init`` on the running cluster, leaving), against a
  floor of 1 s;
- the time from submitting one ``/bin/true`` job to its ``job.finished`` with the agents up,
  against the same locally (goal: at most 200 ms).

The runner joins each cluster as a driver on its head, and a runner's own node runs its lanes
in the runner's process (README "Job lanes on a Ray cluster"): the whole-command row is that
real command. The 2 000-job row and the first-event row measure Ray's path itself, so every
lane there runs in an agent, the head's too (:func:`_agents_only`).

Skipped (no row) when Ray is not installed. ``python -m benchmarks.bench_ray [JOBS]``
prints the row; fewer jobs keep it short on a loaded machine.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

import trio

from benchmarks._common import paired_row, row
from lanes import JobKind, JobRequest, open_lanes
from supervisor._core._jobs import ProcessJobRunner

if TYPE_CHECKING:
    from collections.abc import Iterator

    from protocol import JSONObject
    from supervisor._ray._executor import RayCluster

__all__ = ("measure",)

JOBS = 2000
LANES = 200
NODES = 2
ARGV = ("/bin/true",)
#: Ray's path costs per job (two hops, an actor call per batch, pickling): at least half
#: the local rate on one machine (measured 0.64x and 0.84x at 2 000 jobs; at 200 jobs the
#: fixed round trips dominate and it is about 0.15x).
GOAL = 0.5
#: The small run of the fixed-cost rows: jobs, and the projects (lanes) they spread over.
SMALL_JOBS = 50
SMALL_PROJECTS = 10
#: The whole small command on the cluster, less the join, against the same run locally.
WHOLE_GOAL = 3.0
#: Joining a running cluster (import, connect, leave), seconds.
JOIN_GOAL_S = 1.0
#: Submission to the first ``job.finished`` of a trivial job, agents up, milliseconds.
FIRST_EVENT_GOAL_MS = 200.0


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


@contextlib.contextmanager
def _agents_only() -> Iterator[None]:
    """Every node's lanes in its agent, the runner's own node's too: the rows that measure
    Ray's path (commands and events through Ray and an agent) take it on every lane, as they
    did before the runner's node ran its lanes in the runner's process."""
    from supervisor._ray import _executor

    saved = _executor._driver_node_id
    _executor._driver_node_id = lambda address: None
    try:
        yield
    finally:
        _executor._driver_node_id = saved


async def _ray(roots: list[str], jobs: int) -> float:
    from supervisor import open_ray_lanes

    tally = _Tally()
    with _agents_only():
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


def write_run_file(base: str, jobs: int = SMALL_JOBS) -> tuple[str, list[str]]:
    """A lanes file of ``jobs`` ``/bin/true`` jobs over :data:`SMALL_PROJECTS` projects in
    ``base``; returns its path and the projects' roots."""
    roots = [os.path.join(base, f"p{p}") for p in range(SMALL_PROJECTS)]
    for root in roots:
        os.makedirs(root, exist_ok=True)
    lines: list[str] = []
    for i in range(jobs):
        lines += ["[[job]]", f'name = "j{i}"', f'project = "p{i % SMALL_PROJECTS}"']
        lines += ['kind = "command"', 'argv = ["/bin/true"]', ""]
    path = os.path.join(base, "run.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path, roots


def run_command(path: str, *extra: str) -> tuple[float, float | None]:
    """``supervisor run PATH --json EXTRA``: its wall time and the time to its first
    ``job.finished`` line, seconds.

    Raises:
        RuntimeError: The command did not exit 0.
    """
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "run", path, "--json", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = None
    assert proc.stdout is not None
    assert proc.stderr is not None
    for line in proc.stdout:
        if first is None and '"job.finished"' in line:
            first = time.perf_counter() - started
    err = proc.stderr.read()
    code = proc.wait()
    if code != 0:
        raise RuntimeError(f"supervisor run {' '.join(extra)} exited {code}: {err[-2000:]}")
    return time.perf_counter() - started, first


#: Join and leave as ``supervisor run --ray`` does on a node of a running cluster: it leaves
#: by ending its process (``_cli._main.end_process``), not by ``ray.shutdown``.
_JOIN = (
    "import logging, os, sys, ray\n"
    "ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False,"
    " logging_level=logging.WARNING, configure_logging=False)\n"
    "os._exit(0)\n"
)


def _join_s(address: str) -> float:
    """Joining the running cluster as the runner does, less a bare interpreter's start."""
    from supervisor._ray._executor import _DRIVER_CONFIG

    # The runner's driver settings (its ``ray.shutdown`` is 0.03 s with them, 0.28 without).
    env = {**os.environ, **_DRIVER_CONFIG}

    def wall(*argv: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, *argv], check=True, capture_output=True, env=env)
        return time.perf_counter() - started

    return max(0.0, wall("-c", _JOIN, address) - wall("-c", "pass"))


async def _first_event_ms(root: str, cluster: RayCluster | None, tries: int) -> list[float]:
    """Submission to ``job.finished`` of one ``/bin/true`` job, ``tries`` times, one after
    the other, in milliseconds; on the cluster (its agents up first) or locally."""
    done = trio.Event()

    def on_event(method: str, params: JSONObject) -> None:
        if method == "job.finished":
            done.set()

    request = JobRequest(kind=JobKind.COMMAND, root=root, argv=ARGV)
    times: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        if cluster is None:
            lanes: Any = await stack.enter_async_context(
                open_lanes(ProcessJobRunner(), on_event=on_event)
            )
        else:
            from supervisor._ray._executor import open_ray_executor

            executor = await stack.enter_async_context(open_ray_executor(cluster))
            await executor.wait_agents()
            lanes = await stack.enter_async_context(executor.open_lanes(on_event=on_event))
        for _ in range(tries + 1):
            done = trio.Event()
            started = time.perf_counter()
            lanes.start_job(request)
            await done.wait()
            times.append((time.perf_counter() - started) * 1000)
            await lanes.wait_idle()
    return times[1:]  # the first one warms the lane (and on Ray, its agent's first spawn)


def measure_fixed_costs(*, pairs: int = 5, tries: int = 20) -> list[dict[str, object]]:
    """The three fixed-cost rows (module docstring) on their own three-node cluster.

    Returns:
        The rows, or none when Ray is not installed.
    """
    try:
        import ray
        from ray.cluster_utils import Cluster

        from supervisor._ray._executor import connect_cluster
    except ImportError:
        return []
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    whole: list[float] = []
    local: list[float] = []
    joins: list[float] = []
    firsts: list[float] = []
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as base:
            path, roots = write_run_file(base)
            run_command(path, "--ray", cluster.address)  # the cluster's first driver: warm-up
            for i in range(pairs):
                order = [(whole, ("--ray", cluster.address)), (local, ())]
                if i % 2:
                    order.reverse()
                for sink, extra in order:
                    sink.append(run_command(path, *extra)[0])
                joins.append(_join_s(cluster.address))
            local_first = trio.run(_first_event_ms, roots[0], None, tries)
            joined = connect_cluster(cluster.address, [(roots[0], None)])
            joined.local_node_id = None  # through an agent, as the row says (_agents_only)
            try:
                firsts = trio.run(_first_event_ms, roots[0], joined, tries)
            finally:
                joined.disconnect()
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        cluster.shutdown()
    join = statistics.median(joins)
    # Each whole command less the median join, not less the join measured beside it: the two
    # are separate processes, and pairing one sample of each added both one's noise to every
    # round's ratio.
    less_join = [w - join for w in whole]
    first_ms = statistics.median(firsts)
    return [
        paired_row(
            f"supervisor run of {SMALL_JOBS} /bin/true jobs over {SMALL_PROJECTS} projects"
            " with --ray on a warm 3-node local cluster, less the join (s; ratio < 1 = faster)",
            less_join,
            local,
            unit="s",
            peer_name="the same command locally",
            at_most=WHOLE_GOAL,
            note=f"whole command {statistics.median(whole):.2f} s with the join",
        ),
        row(
            "joining a running Ray cluster: import ray, ray.init, leave (s)",
            ours=join,
            peer=JOIN_GOAL_S,
            unit="s",
            peer_name="a floor of 1 s",
            ratio=join / JOIN_GOAL_S,
            goal=f"<= {JOIN_GOAL_S:g} s",
            met=join <= JOIN_GOAL_S,
        ),
        row(
            "submission to job.finished of one /bin/true job on a warm 3-node Ray cluster (ms)",
            ours=first_ms,
            peer=statistics.median(local_first),
            unit="ms",
            peer_name="the same lanes in this process",
            ratio=first_ms / statistics.median(local_first),
            goal=f"<= {FIRST_EVENT_GOAL_MS:g} ms",
            met=first_ms <= FIRST_EVENT_GOAL_MS,
        ),
    ]


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
        *measure_fixed_costs(pairs=max(5, rounds // 24)),
        paired_row(
            f"{jobs} /bin/true jobs over {LANES} lanes on a {NODES}-node local Ray cluster"
            " (jobs/s; ratio > 1 = faster)",
            ours,
            local,
            unit="jobs/s",
            peer_name="the same lanes in this process",
            at_least=GOAL,
            note=f"Ray adds about {overhead_ms:.2f} ms per job (worst round)",
        ),
    ]


if __name__ == "__main__":
    if sys.argv[1:] == ["fixed"]:
        rows = measure_fixed_costs()
    else:
        rows = measure(jobs=int(sys.argv[1]) if len(sys.argv) > 1 else JOBS)
    for r in rows:
        print(r)
