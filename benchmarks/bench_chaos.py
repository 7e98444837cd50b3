"""The long chaos run (5 000 seeded rounds with zero violations).

``python -m benchmarks.bench_chaos [--iterations N] [--seed S]`` runs the chaos runner
(:func:`supervisor.testbed.run_chaos`) for many rounds and prints its counts (the same run
as ``supervisor chaos --iterations 5000 --seed 5000``); under ``python -m benchmarks`` it
reports one row whose goal is zero violations (``--quick``: 20 rounds). CI runs 200 seeded
rounds instead (``.ci/run``). A round takes about 0.75 s on average on a shared two-core
machine (most rounds a fraction of a second; the few that draw a program ignoring SIGTERM or
``shutdown`` wait for its TERM grace or stop bounds), so the full run takes about an hour.
"""

from __future__ import annotations

import argparse
import sys
import time

import trio

from supervisor.testbed import ChaosReport, run_chaos

#: The benchmark's seed: fixed, so a failure is reproducible with `supervisor chaos --seed`.
SEED = 5000
ITERATIONS = 5000


def _run(iterations: int, seed: int) -> tuple[ChaosReport, float]:
    started = time.monotonic()
    report = trio.run(lambda: run_chaos(iterations, seed))
    return report, time.monotonic() - started


def measure(*, rounds: int = ITERATIONS) -> list[dict[str, object]]:
    """Run ``rounds`` chaos rounds; return one row (goal: zero violations).

    Args:
        rounds: Chaos rounds to run.

    Returns:
        Rows ``{figure, ours, peer, unit, peer_name, ratio, goal, met}``: ``ours`` is the
        number of violations, ``peer`` the goal (0).
    """
    report, elapsed = _run(rounds, SEED)
    print(f"# {report.summary()} in {elapsed:.0f} s", file=sys.stderr)
    return [
        {
            "figure": f"chaos violations in {report.iterations} rounds (seed {SEED})",
            "ours": float(len(report.violations)),
            "peer": 0.0,
            "unit": "",
            "peer_name": "goal",
            "ratio": float(len(report.violations)),
            "goal": "0",
            "met": report.ok and report.iterations == rounds,
        }
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the long chaos round from the command line; exit status 1 on a violation."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_chaos")
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    report, elapsed = _run(args.iterations, args.seed)
    print(f"{report.summary()} in {elapsed:.0f} s")
    for violation in report.violations:
        print(f"  violation: {violation}")
    if report.failing_steps:
        print("shortest failing step list:")
        for step in report.failing_steps:
            print(f"  {step.describe()}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
