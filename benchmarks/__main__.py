"""Run every benchmark and print one table: ``python -m benchmarks [--json FILE] [--quick]
[--rows PATTERN] [MODULE ...]``; ``--against REV`` compares this tree with another commit
(``benchmarks/_ab.py``).

Each ``benchmarks/bench_*.py`` module exposes ``measure(*, rounds) -> list[row]``; a row holds
one figure measured side by side with a peer in the same run (medians after warm-up) and the
ratio between them (``benchmarks._common.row``; ``spread`` is the interquartile range of the
per-round ratios where a module measures pairs). A module that fails becomes one failed row;
the others still run. Each module runs in a fresh interpreter, as the A/B harness runs it
(``--in-process``: one after another in this one): what a module leaves behind -- its heap,
its threads, what it imported -- weighed on the next (after ``bench_fuzz``, a Trio worker
thread and 70 000 more objects, the asyncio client of ``bench_jsonrpc`` ran in its other
speed mode). Figures are ratios on purpose: these machines are shared and noisy, so an
absolute time says little, while ours-versus-peer in one run is stable.

The last line counts the goals met. Exit status: 0 when every goal is met, 1 when a goal is
missed, 2 when a row failed to run (a module raised, or a benchmark it needs is missing).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import platform
import re
import signal
import subprocess
import sys
import time
from typing import Any

import benchmarks
from benchmarks._ab import (
    dump_json,
    failed_row,
    fresh_rows,
    main_ab,
    row_matches,
    select_modules,
)

#: Rounds for modules whose own default is a long stand-alone run, so that the whole suite
#: stays under 10 minutes. ``python -m benchmarks.bench_chaos`` runs
#: its full 5 000 rounds (about 0.75 s each on average) on its own.
_SUITE_ROUNDS = {"bench_chaos": 60}


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


def _markdown(rows: list[dict[str, Any]], met: int) -> str:
    lines = [
        f"Measured with `python -m benchmarks` on {time.strftime('%Y-%m-%d')}: {_machine()}.",
        "",
        "| figure | peer | ours | peer's | ratio (IQR) | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(text: object) -> str:
        # A "|" inside a cell (a shell pipeline in a peer's name) would split the column.
        return str(text).replace("|", "\\|")

    for row in rows:
        spread = f" ({row['spread']})" if row.get("spread") else ""
        note = f" -- {row['note']}" if row.get("note") else ""
        lines.append(
            f"| {cell(row['figure'])}{cell(note)} | {cell(row['peer_name'])}"
            f" | {row['ours']:.4g} {row['unit']}"
            f" | {row['peer']:.4g} | {row['ratio']:.2f}x{spread} | {row['goal']}"
            f" | {'yes' if row['met'] else '**no**'} |"
        )
    lines += ["", f"{met} of {len(rows)} goals met.", ""]
    return "\n".join(lines)


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(benchmarks.__file__)))


def _run_fresh(name: str, *, quick: bool, rows: str | None) -> list[dict[str, Any]]:
    """One module's rows, measured in a fresh interpreter (its progress lines still shown).

    The interpreter ends with this one: killed if this one is interrupted or ends by
    SIGTERM (see :func:`_end_on_sigterm`), sent SIGKILL by the kernel if this one dies. Its
    rows come through a file with no name (:func:`~benchmarks._ab.fresh_rows`), so however
    this one ends, nothing is left behind.
    """
    args = ["--in-process", "--module-of-run"]
    args += ["--quick"] if quick else []
    args += [f"--rows={rows}"] if rows else []  # "=": a pattern may start with "-"
    result, status = fresh_rows(
        sys.executable,
        _ROOT,
        [*args, name],
        stdout=subprocess.DEVNULL,
        preexec_fn=_die_with_parent,
    )
    return result if result is not None else [failed_row(name, f"no rows (exit status {status})")]


def _die_with_parent() -> None:
    # In the child, between fork and exec. This process spawns from its main thread (the
    # death signal follows the thread that forked), so it fires when this process dies.
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def _end_on_sigterm() -> None:
    """SIGTERM ends this process as an exception, so the module measuring is killed and
    waited for (by default SIGTERM ends this one at once, and the kernel kills the child)."""

    def raise_exit(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, raise_exit)


def _writable(path: str) -> bool:
    """Whether ``path`` can be written (checked before a run of minutes, not after it)."""
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError:
        return False
    if not existed:
        os.unlink(path)
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; return 0 when every goal is met, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    parser.add_argument(
        "--markdown", metavar="FILE", help="also write the table as Markdown (for the README)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument(
        "--rows",
        metavar="PATTERN",
        help="only the rows whose module name or figure matches PATTERN (a regular expression,"
        " case-insensitive); only the modules whose name or source it matches run",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="A/B: build REV in a temporary git worktree and environment and run both commits'"
        " rows interleaved; print each row's new/old ratio (benchmarks/_ab.py)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, metavar="K", help="with --against: runs per side (3)"
    )
    parser.add_argument(
        "--workdir",
        metavar="DIR",
        help="with --against: build REV in DIR and keep it (reused when it holds REV already)",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the modules one after another in this interpreter (default: each in a fresh one)",
    )
    # One module of a run in its fresh interpreter: the run reports failures, not it.
    parser.add_argument("--module-of-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "only", nargs="*", help="benchmark module names, bench_spawn or spawn (default: all)"
    )
    args = parser.parse_args(argv)
    if args.rows is not None:
        try:
            re.compile(args.rows)
        except re.error as exc:
            print(f"--rows {args.rows!r} is not a regular expression: {exc}", file=sys.stderr)
            return 2
    for option, path in (("--json", args.json), ("--markdown", args.markdown)):
        if path and not args.against and not _writable(path):
            print(f"{option} {path}: can not write there", file=sys.stderr)
            return 2
    if args.against:
        return main_ab(
            args.against,
            only=args.only,
            rows=args.rows,
            repeat=args.repeat,
            quick=args.quick,
            workdir=args.workdir,
            markdown=args.markdown,
            json_path=args.json,
        )

    root = _ROOT
    known = {m.name for m in pkgutil.iter_modules(benchmarks.__path__)}
    try:
        selected = select_modules(root, args.only, args.rows)
    except SystemExit as exc:  # a module name that does not exist: a usage error
        print(exc, file=sys.stderr)
        return 2
    names = [n for n in selected if n in known]
    if not names:
        print(f"no benchmark module matches {args.rows!r}", file=sys.stderr)
        return 2
    fresh = not args.in_process and len(names) > 1
    if fresh:
        _end_on_sigterm()
    rows: list[dict[str, Any]] = []
    for name in names:
        started = time.monotonic()
        if fresh:
            # Its progress, and its time, are printed by the fresh interpreter.
            rows.extend(_run_fresh(name, quick=args.quick, rows=args.rows))
            continue
        if args.quick:
            kwargs = {"rounds": 20}
        elif name in _SUITE_ROUNDS:
            kwargs = {"rounds": _SUITE_ROUNDS[name]}
        else:
            kwargs = {}
        try:
            module = importlib.import_module(f"benchmarks.{name}")
            rows.extend(
                r
                for r in ({"benchmark": name, **row} for row in module.measure(**kwargs))
                if row_matches(r, args.rows)
            )
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            rows.append(failed_row(name, f"{type(exc).__name__}: {exc}"))
        print(f"# {name}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)

    header = f"{'figure':58} {'ours':>14} {'peer':>10} {'ratio':>7} {'spread':>10}  {'goal':9} met"
    print(f"machine: {_machine()}")
    print(header)
    print("-" * len(header))
    for row in rows:
        ours = f"{row['ours']:.4g} {row['unit']}"
        peer = f"{row['peer']:.4g}"
        figure = f"{row['figure']} (vs {row['peer_name']})"
        print(
            f"{figure[:58]:58} {ours:>14} {peer:>10} {row['ratio']:>6.2f}x"
            f" {row.get('spread', ''):>10}  {row['goal']:9} {'yes' if row['met'] else 'NO'}"
        )
        if row.get("note"):
            print(f"    note: {row['note']}")
    met = sum(1 for row in rows if row["met"])
    print(f"{met} of {len(rows)} goals met")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(_markdown(rows, met))
    if args.json:
        dump_json({"machine": _machine(), "rows": rows}, args.json)
    failed = sum(1 for row in rows if row.get("failed"))
    if failed:
        if not args.module_of_run:
            print(f"{failed} row(s) failed to run", file=sys.stderr)
        return 2
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
