"""Fault containment on many seeds: ``supervisor chaos --faults`` over N seeds, every fault
point accounted for.

``python -m benchmarks.chaos_faults [--seeds 10] [--rounds 200] [--first-seed 9000001]
[--json FILE]`` runs :func:`supervisor.testbed.run_chaos` with ``faults=True`` for ``--rounds``
rounds on each of ``--seeds`` consecutive seeds (a fresh Core per seed), then prints, per seed
and in all, the rounds run, the violations, and how often each fault point fired; last, the
fault points (:data:`supervisor._boundary.FAULT_SITES`) that never fired. The default seeds
are not CI's (``.ci/run`` derives its own from the commit). A seed's run stops at its first
violation, which is printed with the seed and round (reproduce it with ``supervisor chaos
--faults --seed S --iterations R+1``).

Exit status 0 when no seed found a violation and every fault point fired at least once.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import trio

from supervisor._boundary import FAULT_SITES
from supervisor.testbed import run_chaos

#: The first default seed: far from CI's (which come from commit hashes) and from 20261129.
FIRST_SEED = 9_000_001


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos_faults", description=__doc__)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--rounds", type=int, default=200, help="rounds per seed")
    p.add_argument("--first-seed", type=int, default=FIRST_SEED)
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    fired: dict[str, int] = {}
    per_seed: list[dict[str, object]] = []
    rounds = violations = 0
    started = time.monotonic()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        t0 = time.monotonic()
        report = trio.run(functools.partial(run_chaos, args.rounds, seed, faults=True))
        elapsed = time.monotonic() - t0
        rounds += report.iterations
        violations += len(report.violations)
        for site, count in report.faults_fired.items():
            fired[site] = fired.get(site, 0) + count
        per_seed.append(
            {
                "seed": seed,
                "rounds": report.iterations,
                "violations": report.violations,
                "faultsFired": sum(report.faults_fired.values()),
                "seconds": round(elapsed),
                "skipped": report.skipped,
            }
        )
        print(
            f"seed {seed}: {report.iterations} rounds, {len(report.violations)} violations,"
            f" {sum(report.faults_fired.values())} faults fired, {elapsed:.0f} s",
            flush=True,
        )
        for violation in report.violations:
            print(f"  violation: {violation}", flush=True)
    never = sorted(FAULT_SITES - set(fired))
    print(
        f"in all: {args.seeds} seeds, {rounds} rounds, {violations} violations,"
        f" {sum(fired.values())} faults fired at {len(fired)} of {len(FAULT_SITES)} fault"
        f" points, {time.monotonic() - started:.0f} s"
    )
    for site in sorted(FAULT_SITES):
        print(f"  {site}: {fired.get(site, 0)}")
    print(f"never fired: {', '.join(never) if never else 'none'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "seeds": per_seed,
                    "rounds": rounds,
                    "violations": violations,
                    "faultsFired": dict(sorted(fired.items())),
                    "neverFired": never,
                },
                f,
                indent=1,
            )
    return 0 if violations == 0 and not never else 1


if __name__ == "__main__":
    sys.exit(main())
