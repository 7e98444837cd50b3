"""The fixed costs of ``supervisor run --ray`` on a local three-node cluster, phase by phase.

``python -m benchmarks.ray_costs [JOBS] [ROUNDS]`` starts a three-node local cluster
(``ray.cluster_utils.Cluster``, one CPU per node), writes a lanes file of JOBS ``/bin/true``
jobs over 10 projects (``bench_ray.write_run_file``), and per round prints:

- ``local``: the whole command run here (``supervisor run FILE --json``), seconds;
- ``ray``: the whole command with ``--ray ADDRESS`` (a warm cluster), seconds, and the time
  from its start to its first ``job.finished`` line;
- the phases of the same run driven in one process: joining (``connect_cluster``), the
  agents up (every agent answered ``describe``), the first event after the first
  submission, all jobs finished, the end-of-run sweep, and stopping the agents.

A diagnostic for README "Job lanes on a Ray cluster" (not a benchmark row:
``bench_ray.py`` holds those).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from benchmarks.bench_ray import run_command, write_run_file

_PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
import trio
from lanes import JobKind, JobRequest
from supervisor._ray._executor import connect_cluster, open_ray_executor
roots = json.loads(sys.argv[2])
jobs = int(sys.argv[3])
marks = {}
t_import = time.perf_counter()
cluster = connect_cluster(sys.argv[1], [(r, None) for r in roots])
marks["join"] = time.perf_counter() - t_import
marks["import"] = t_import - t0

async def main():
    first = trio.Event()
    def on_event(method, params):
        if method == "job.finished" and not first.is_set():
            marks["first_event"] = time.perf_counter() - t_submit
            first.set()
    t = time.perf_counter()
    async with open_ray_executor(cluster) as executor:
        marks["agents"] = time.perf_counter() - t
        async with executor.open_lanes(on_event=on_event) as lanes:
            t_submit = time.perf_counter()
            for i in range(jobs):
                lanes.start_job(JobRequest(kind=JobKind.COMMAND, root=roots[i % len(roots)],
                                           argv=("/bin/true",)))
            await lanes.wait_idle()
            marks["jobs"] = time.perf_counter() - t_submit
        t = time.perf_counter()
        await executor.leftover_processes(500)
        marks["sweep"] = time.perf_counter() - t
        t_stop = time.perf_counter()
    marks["stop"] = time.perf_counter() - t_stop

trio.run(main)
t = time.perf_counter()
cluster.disconnect()
marks["leave"] = time.perf_counter() - t
print(json.dumps({k: round(v, 3) for k, v in marks.items()}))
"""


def main(jobs: int = 50, rounds: int = 3) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1, labels={"zone": "b"})
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory(prefix="ray-costs-") as base:
            path, roots = write_run_file(base, jobs)
            for _ in range(rounds):
                local, _ = run_command(path)
                ray_s, first = run_command(path, "--ray", cluster.address)
                out = subprocess.run(
                    [sys.executable, "-c", _PHASES, cluster.address, json.dumps(roots), str(jobs)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                phases = json.loads(out.stdout.strip().splitlines()[-1])
                print(
                    json.dumps(
                        {
                            "local_s": round(local, 3),
                            "ray_s": round(ray_s, 3),
                            "ray_first_finished_s": None if first is None else round(first, 3),
                            "phases_s": phases,
                        }
                    ),
                    flush=True,
                )
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
