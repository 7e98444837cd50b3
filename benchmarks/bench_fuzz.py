"""The long structured fuzz run (issue 13): every command, valid, near-valid and hostile values.

``python -m benchmarks.bench_fuzz [--examples N] [--seed S] [--via core|serve] [--json]`` runs
the fuzz test's Hypothesis strategies (``tests/fuzz``) for N examples of 1-4 requests each
through the Core (``CoreThread``) and through ``supervisor serve`` (a real subprocess over
stdio), and prints the counts: requests, answers, session deaths (Core or serve no longer
answering ``core.ping``), peak resident size, processes left behind. Exit status 1 when a
property broke (the failing example is printed) or something was left behind. Under
``python -m benchmarks`` it reports one row whose goal is zero session deaths. It needs the
repository's ``tests`` package (run it from a clone, with the ``dev`` extra installed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from supervisor import CoreThread

#: Examples per driver of the stand-alone run (about 10 minutes on a shared 2-core machine).
EXAMPLES = 4000
SEED = 13


def _core_leftovers() -> list[int]:
    from supervisor import SCOPE_ENV
    from supervisor._process._marker import instance_id
    from supervisor._process._procfs import all_pids, read_env_var, read_stat

    prefix = instance_id() + "/"
    found = []
    for pid in all_pids():
        marker = read_env_var(pid, SCOPE_ENV)
        if marker is not None and marker.startswith(prefix) and pid != os.getpid():
            stat = read_stat(pid)
            if stat is not None and not stat.dead:
                found.append(pid)
    return found


def run(examples: int, seed: int, vias: list[str]) -> dict[str, dict[str, object]]:
    """Run the fuzz drivers; return each one's counts (``FuzzStats.to_json`` and more)."""
    from tests.fuzz.drivers import CoreDriver, ServeDriver, run_fuzz, serve_leftovers, workdir

    report: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp, workdir(tmp) as ctx:
        if "core" in vias:
            started = time.monotonic()
            with CoreThread() as core:
                stats = run_fuzz(
                    CoreDriver(core), ctx, max_examples=examples, seed=seed, derandomize=False
                )
            report["core"] = {
                **stats.to_json(),
                "leftoverProcesses": _core_leftovers(),
                "seconds": round(time.monotonic() - started),
            }
        if "serve" in vias:
            started = time.monotonic()
            driver = ServeDriver()
            try:
                stats = run_fuzz(driver, ctx, max_examples=examples, seed=seed, derandomize=False)
            finally:
                status = driver.close()
            report["serve"] = {
                **stats.to_json(),
                "exitStatus": status,
                "duplicateAnswers": driver.duplicates(),
                "leftoverProcesses": serve_leftovers(driver.process.pid),
                "seconds": round(time.monotonic() - started),
            }
    return report


def _ok(report: dict[str, dict[str, object]]) -> bool:
    return all(
        counts["sessionDeaths"] == 0
        and counts["requests"] == counts["answers"]
        and not counts["leftoverProcesses"]
        and not counts.get("duplicateAnswers")
        and counts.get("exitStatus", 0) == 0
        for counts in report.values()
    )


def measure(*, rounds: int = 150) -> list[dict[str, object]]:
    """Run ``rounds`` examples per driver; one row whose goal is zero session deaths."""
    report = run(rounds, SEED, ["core", "serve"])
    deaths = sum(int(str(counts["sessionDeaths"])) for counts in report.values())
    requests = sum(int(str(counts["requests"])) for counts in report.values())
    print(f"# fuzz: {json.dumps(report)}", file=sys.stderr)
    return [
        {
            "figure": f"fuzz session deaths in {requests} requests (Core and serve, seed {SEED})",
            "ours": float(deaths),
            "peer": 0.0,
            "unit": "",
            "peer_name": "goal",
            "ratio": float(deaths),
            "goal": "0",
            "met": _ok(report),
        }
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the long fuzz run from the command line; exit status 1 on a broken property."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_fuzz")
    parser.add_argument("--examples", type=int, default=EXAMPLES, help="examples per driver")
    parser.add_argument("--seed", type=int, default=SEED, help="Hypothesis seed")
    parser.add_argument(
        "--via", action="append", choices=("core", "serve"), help="driver (default: both)"
    )
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = run(args.examples, args.seed, args.via or ["core", "serve"])
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for via, counts in report.items():
            print(f"{via}: " + ", ".join(f"{key} {value}" for key, value in counts.items()))
        print(f"{time.monotonic() - started:.0f} s; {'ok' if _ok(report) else 'FAILED'}")
    return 0 if _ok(report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
