"""Run every benchmark and print one table: ``python -m benchmarks [--json FILE] [--quick]``.

Each ``benchmarks/bench_*.py`` module exposes ``measure(*, rounds) -> list[row]``; a row holds
one figure measured side by side with a peer in the same run (medians after warm-up) and the
ratio between them. Figures are ratios on purpose: these machines are shared and noisy, so an
absolute time says little, while ours-versus-peer in one run is stable.

The last line counts the goals met; the exit status is 0 only when every goal is met.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import sys
import time
from typing import Any

import benchmarks


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; return 0 when every goal is met, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("only", nargs="*", help="benchmark module names (default: all)")
    args = parser.parse_args(argv)

    names = sorted(
        m.name
        for m in pkgutil.iter_modules(benchmarks.__path__)
        if m.name.startswith("bench_") and (not args.only or m.name in args.only)
    )
    rows: list[dict[str, Any]] = []
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        started = time.monotonic()
        kwargs = {"rounds": 20} if args.quick else {}
        rows.extend({"benchmark": name, **row} for row in module.measure(**kwargs))
        print(f"# {name}: {time.monotonic() - started:.1f} s", file=sys.stderr)

    header = f"{'figure':58} {'ours':>12} {'peer':>12} {'ratio':>7}  {'goal':10} met"
    print(f"machine: {_machine()}")
    print(header)
    print("-" * len(header))
    for row in rows:
        ours = f"{row['ours']:.4g} {row['unit']}"
        peer = f"{row['peer']:.4g}"
        figure = f"{row['figure']} (vs {row['peer_name']})"
        print(
            f"{figure[:58]:58} {ours:>12} {peer:>12} {row['ratio']:>6.2f}x  "
            f"{row['goal']:10} {'yes' if row['met'] else 'NO'}"
        )
    met = sum(1 for row in rows if row["met"])
    print(f"{met} of {len(rows)} goals met")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": _machine(), "rows": rows}, f, indent=2)
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
