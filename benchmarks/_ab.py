"""A/B runs: this tree's rows against another commit's, interleaved in one run.

``python -m benchmarks --against REV [--repeat K] [--rows PATTERN] [MODULE ...]`` checks REV out
in a temporary git worktree, builds a virtual environment for it (``pip install -e
'TREE[bench]'`` from pip's local cache, every package it shares with this interpreter pinned
to the version installed here, so only our code differs), then runs each benchmark module K
times on each side, alternating which side goes first, each run a fresh ``python -m
benchmarks --json FILE MODULE`` in its own tree. The rows are matched by module, figure, peer
and unit.

What it compares is each row's judged figure -- the ratio to the row's peer measured in the
same run for ratio goals (``<= 1.3x``), the figure itself for absolute goals (``<= 1024 KiB``,
``0``) -- so a machine that is busier for one side than the other moves both sides' peers too.
For each row it prints the median of that figure on each side, ``new/old`` (the ratio of the
two medians) with its spread (the range of the K paired ratios, the interquartile range from
four pairs on), and its noise band: how far one run of either commit strayed from that
commit's own median (with K = 1, the half-width of the row's own per-round interquartile
range), at least 2 %. A row *moved* when ``new/old`` lies outside its band and every pair
agrees on the side; it is marked ``better`` or ``WORSE`` by the goal's direction.

Exit status: 2 when a row failed to run on either side, 1 when a row moved worse, else 0.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from typing import Any

__all__ = ("dump_json", "failed_row", "fresh_rows", "main_ab", "select_modules")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PROJECT = "trio-process-supervisor"
_MIN_BAND = 0.02
_RATIO_GOAL = re.compile(r"^\s*([<>])=\s*[\d.]+x\b")


def _log(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def select_modules(root: str, only: list[str], rows: str | None) -> list[str]:
    """The benchmark modules of the tree at ``root`` to run.

    Args:
        root: A checkout holding ``benchmarks/``.
        only: Module names (``bench_spawn`` or ``spawn``); empty means all.
        rows: A regular expression (case-insensitive) or None; when given, the modules whose
            name it matches, or, when it matches no name, those whose source text it matches
            (a figure's words are in its module's source).
    """
    folder = os.path.join(root, "benchmarks")
    names = sorted(
        name[:-3]
        for name in os.listdir(folder)
        if name.startswith("bench_") and name.endswith(".py")
    )
    if only:
        wanted = {n if n.startswith("bench_") else f"bench_{n}" for n in only}
        unknown = wanted - set(names)
        if unknown:
            raise SystemExit(f"no benchmark module {', '.join(sorted(unknown))} (have {names})")
        names = [n for n in names if n in wanted]
    if rows is not None:
        pattern = re.compile(rows, re.IGNORECASE)
        by_name = [name for name in names if pattern.search(name)]
        if by_name:
            return by_name
        kept = []
        for name in names:
            with open(os.path.join(folder, f"{name}.py"), encoding="utf-8") as f:
                if pattern.search(name) or pattern.search(f.read()):
                    kept.append(name)
        names = kept
    return names


def row_matches(row: dict[str, Any], rows: str | None) -> bool:
    """Whether a row is one ``--rows PATTERN`` asked for (its module name or its figure)."""
    if rows is None:
        return True
    pattern = re.compile(rows, re.IGNORECASE)
    return bool(
        pattern.search(str(row.get("benchmark", "")))
        or pattern.search(f"{row['figure']} (vs {row['peer_name']})")
    )


# -- building the old side -------------------------------------------------------------------


def _git(*args: str, cwd: str = _ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _bench_requirements(root: str, extras: tuple[str, ...]) -> list[str]:
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        optional = tomllib.load(f)["project"].get("optional-dependencies", {})
    found: list[str] = []
    for extra in extras:
        found.extend(r for r in optional.get(extra, []) if not r.startswith(_PROJECT))
    return found


def _constraints(path: str) -> None:
    """Pin every distribution installed here (but our own) to its version here."""
    pins = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name or name.lower().replace("_", "-") == _PROJECT:
            continue
        pins.add(f"{name}=={dist.version}")
    with open(path, "w") as f:
        f.write("\n".join(sorted(pins)) + "\n")


@dataclass
class Side:
    """One side of the comparison: a tree and the interpreter that runs its benchmarks."""

    label: str
    tree: str
    python: str
    runs: list[list[dict[str, Any]]] = field(default_factory=list)


def build_old(rev: str, workdir: str) -> Side:
    """Check ``rev`` out under ``workdir`` and build its environment; return its side."""
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    tree = os.path.join(workdir, "tree")
    venv = os.path.join(workdir, "venv")
    stamp = os.path.join(workdir, "built")
    python = os.path.join(venv, "bin", "python")
    with contextlib.suppress(OSError), open(stamp) as f:
        if f.read().strip() == sha and os.path.exists(python):
            _log(f"reusing {workdir} ({sha[:10]})")
            return Side(f"old {rev} ({sha[:10]})", tree, python)
    started = time.monotonic()
    if os.path.exists(tree):
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=_ROOT, check=False)
    _git("worktree", "add", "--detach", tree, sha)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    constraints = os.path.join(workdir, "constraints.txt")
    _constraints(constraints)
    extras = ["bench"]
    if importlib.util.find_spec("ray") is not None:
        extras.append("ray")
    # The peers this tree's benchmarks measure against, whether or not REV's extra lists them.
    peers = _bench_requirements(_ROOT, ("bench",))
    _log(f"building {rev} ({sha[:10]}) in {workdir}: pip install -e '.[{','.join(extras)}]'")
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-c",
            constraints,
            "-e",
            f"{tree}[{','.join(extras)}]",
            *peers,
        ],
        check=True,
    )
    with open(stamp, "w") as f:
        f.write(sha + "\n")
    _log(f"built in {time.monotonic() - started:.0f} s")
    return Side(f"old {rev} ({sha[:10]})", tree, python)


def remove_old(workdir: str) -> None:
    """Remove the temporary worktree and environment."""
    tree = os.path.join(workdir, "tree")
    if os.path.exists(tree):
        subprocess.run(
            ["git", "worktree", "remove", "--force", tree],
            cwd=_ROOT,
            check=False,
            capture_output=True,
        )
    shutil.rmtree(workdir, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=_ROOT, check=False, capture_output=True)


# -- running and comparing -------------------------------------------------------------------


def run_module(side: Side, module: str, extra: list[str], log: str) -> list[dict[str, Any]]:
    """Run one module on one side in a fresh interpreter; return its rows."""
    with open(log, "a") as f:
        f.write(f"\n===== {side.label}: {module}\n")
        f.flush()
        rows, _ = fresh_rows(
            side.python, side.tree, [*extra, module], stdout=f, stderr=subprocess.STDOUT
        )
    return rows if rows is not None else [failed_row(module, "no rows (see the log)")]


def fresh_rows(
    python: str, tree: str, args: list[str], **popen: Any
) -> tuple[list[dict[str, Any]] | None, int]:
    """``python -m benchmarks --json FILE *args`` in ``tree``, in a fresh interpreter.

    FILE is ``/dev/fd/N``: a file of this process that has no name (``O_TMPFILE``, or
    unlinked at once), handed to the child as its fd N. However either process ends, SIGKILL
    included, nothing is left behind; and the child needs no option an older tree lacks.

    Returns:
        Its rows (None when it wrote none), each figure that has no value NaN again
        (:func:`dump_json` wrote it as null), and its exit status. ``popen`` goes to
        :func:`subprocess.run` (where its output goes, ...).
    """
    with tempfile.TemporaryFile(prefix="bench-", suffix=".json") as out:
        fd = out.fileno()
        # run() kills the child on any exception here (KeyboardInterrupt, SystemExit).
        done = subprocess.run(
            [python, "-m", "benchmarks", "--json", f"/dev/fd/{fd}", *args],
            cwd=tree,
            check=False,
            pass_fds=(fd,),
            **popen,
        )
        # The child opened the file anew (its own offset): this one reads it from the start.
        out.seek(0)
        try:
            rows: list[dict[str, Any]] = json.load(out)["rows"]
        except (ValueError, KeyError, TypeError):
            return None, done.returncode
    for row in rows:
        for name in _FIGURES:
            if name in row and row[name] is None:
                row[name] = math.nan
    return rows, done.returncode


#: A row's numbers. A figure that has no value (a failed row's) is NaN in memory, so the
#: tables print it as they always did, and null in JSON, which has no NaN.
_FIGURES = ("ours", "peer", "ratio")


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def dump_json(document: Any, path: str) -> None:
    """Write ``document`` (rows, runs of rows) to ``path`` as strict JSON (RFC 8259).

    NaN and the infinities, which strict readers (jq, ``JSON.parse``) refuse, are written
    as null: a figure that has no value. :func:`fresh_rows` reads a row's null figures back
    as NaN.
    """
    with open(path, "w") as f:
        json.dump(_strict(document), f, indent=2, allow_nan=False)


def failed_row(module: str, why: str) -> dict[str, Any]:
    """The row of a module that gave none (its figure says why, cut to 120 characters).

    Its numbers are NaN: the tables print ``nan``, :func:`dump_json` writes null.
    """
    return {
        "benchmark": module,
        "figure": f"{module} failed: {why}"[:120],
        "ours": math.nan,
        "peer": math.nan,
        "unit": "",
        "peer_name": "-",
        "ratio": math.nan,
        "goal": "-",
        "met": False,
        "failed": True,
    }


def _key(row: dict[str, Any]) -> tuple[str, str, str, str]:
    return (str(row.get("benchmark")), row["figure"], row["peer_name"], row["unit"])


def _is_failed(row: dict[str, Any]) -> bool:
    return bool(row.get("failed")) or " failed: " in row["figure"]


def _judged(row: dict[str, Any]) -> tuple[float, int]:
    """The figure a row is judged by and its direction (+1 higher is better, -1 lower)."""
    goal = str(row["goal"])
    match = _RATIO_GOAL.match(goal)
    if match:
        return float(row["ratio"]), (1 if match.group(1) == ">" else -1)
    return float(row["ours"]), (1 if goal.lstrip().startswith(">") else -1)


def _spread_text(values: list[float]) -> str:
    if len(values) < 4:
        return f"{min(values):.2f}-{max(values):.2f}"
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.2f}-{q3:.2f}"


def _own_band(row: dict[str, Any]) -> float:
    spread = row.get("spread")
    value = float(row["ratio"])
    if not spread or not value:
        return _MIN_BAND
    try:
        low, high = (float(x) for x in str(spread).split("-"))
    except ValueError:
        return _MIN_BAND
    return max(_MIN_BAND, (high - low) / 2 / abs(value))


@dataclass
class Compared:
    """One row of the A/B table."""

    module: str
    figure: str
    peer: str
    unit: str = ""
    old: float = math.nan
    new: float = math.nan
    change: float = math.nan
    spread: str = ""
    band: float = math.nan
    verdict: str = ""


def compare(old: Side, new: Side, rows: str | None) -> list[Compared]:
    """Pair each row's runs of both sides (see the module docstring)."""
    order: list[tuple[str, str, str, str]] = []
    samples: dict[tuple[str, str, str, str], dict[str, list[dict[str, Any]]]] = {}
    for side in (new, old):
        for run in side.runs:
            for r in run:
                if not row_matches(r, rows):
                    continue
                key = _key(r)
                if key not in samples:
                    samples[key] = {"old": [], "new": []}
                    order.append(key)
                samples[key]["old" if side is old else "new"].append(r)
    table: list[Compared] = []
    for key in order:
        module, figure, peer, unit = key
        both = samples[key]
        item = Compared(module, figure, peer, unit)
        if any(_is_failed(r) for r in both["old"] + both["new"]):
            item.verdict = "FAILED"
            table.append(item)
            continue
        if not both["old"] or not both["new"]:
            item.verdict = "only new" if both["new"] else "only old"
            if both["new"]:
                item.new = statistics.median(_judged(r)[0] for r in both["new"])
            else:
                item.old = statistics.median(_judged(r)[0] for r in both["old"])
            table.append(item)
            continue
        direction = _judged(both["new"][0])[1]
        olds = [_judged(r)[0] for r in both["old"]]
        news = [_judged(r)[0] for r in both["new"]]
        item.old, item.new = statistics.median(olds), statistics.median(news)
        if item.old == item.new:
            item.change, item.spread, item.band, item.verdict = 1.0, "", 0.0, ""
            table.append(item)
            continue
        if item.old <= 0 or item.new <= 0:
            item.verdict = "better" if (item.new - item.old) * direction > 0 else "WORSE"
            table.append(item)
            continue
        item.change = item.new / item.old
        pairs = [n / o for n, o in zip(news, olds, strict=False) if o > 0 and n > 0]
        item.spread = _spread_text(pairs) if pairs else ""
        if len(olds) > 1 or len(news) > 1:
            item.band = max(
                _MIN_BAND,
                *(abs(math.log(v / item.old)) for v in olds if v > 0),
                *(abs(math.log(v / item.new)) for v in news if v > 0),
            )
        else:
            item.band = max(_own_band(both["old"][0]), _own_band(both["new"][0]))
        agree = all(p > 1 for p in pairs) or all(p < 1 for p in pairs)
        if abs(math.log(item.change)) > item.band and agree:
            item.verdict = "better" if (item.change > 1) == (direction > 0) else "WORSE"
        table.append(item)
    return table


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.4g}"


def render(table: list[Compared], old: Side, new: Side, markdown: bool) -> str:
    """The A/B table as text or Markdown."""
    head = ["row", "old", "new", "new/old (spread)", "band", "moved"]
    lines: list[str] = []
    body: list[list[str]] = []
    labels = [
        f"{item.module}: {item.figure} (vs {item.peer})"
        if markdown
        else f"{item.figure[:44]} (vs {item.peer[:22]})"
        for item in table
    ]
    # Rows told apart only by their unit (one figure in two units, as the framer rows of
    # older commits) or by words past the cut would read as one row printed twice.
    seen = collections.Counter(labels)
    for item, label in zip(table, labels, strict=True):
        change = "-" if math.isnan(item.change) else f"{item.change:.2f}x"
        if item.spread:
            change += f" ({item.spread})"
        band = "-" if math.isnan(item.band) else f"±{item.band * 100:.0f}%"
        body.append(
            [
                f"{label} [{item.unit}]" if seen[label] > 1 else label,
                _number(item.old),
                _number(item.new),
                change,
                band,
                item.verdict,
            ]
        )
    if markdown:
        lines.append(f"A/B: new = {new.label}, old = {old.label}, {len(new.runs)} run(s) each.")
        lines.append("")
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines.extend(
            "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in body
        )
    else:
        lines.append(f"new = {new.label}; old = {old.label}; {len(new.runs)} run(s) each")
        widths = (72, 9, 9, 22, 6)
        lines.append(
            f"{head[0]:{widths[0]}} {head[1]:>{widths[1]}} {head[2]:>{widths[2]}}"
            f" {head[3]:>{widths[3]}} {head[4]:>{widths[4]}}  {head[5]}"
        )
        lines.extend(
            f"{cells[0]:72} {cells[1]:>9} {cells[2]:>9} {cells[3]:>22} {cells[4]:>6}  {cells[5]}"
            for cells in body
        )
    return "\n".join(lines) + "\n"


def main_ab(
    rev: str,
    *,
    only: list[str],
    rows: str | None,
    repeat: int,
    quick: bool,
    workdir: str | None,
    markdown: str | None,
    json_path: str | None,
) -> int:
    """Run the A/B comparison (see the module docstring); return the exit status."""
    temporary = workdir is None
    work = workdir or tempfile.mkdtemp(prefix="bench-ab-")
    os.makedirs(work, exist_ok=True)
    # Outside the temporary folder, so that a failed row's output outlives it.
    fd, log = tempfile.mkstemp(prefix="bench-ab-", suffix=".log")
    os.close(fd)
    _log(f"each run's output goes to {log}")
    try:
        old = build_old(rev, work)
        new = Side("new (this tree)", _ROOT, sys.executable)
        modules = select_modules(_ROOT, only, rows)
        if not modules:
            raise SystemExit(f"no benchmark module matches {rows!r}")
        extra = ["--quick"] if quick else []
        for k in range(repeat):
            for side in (old, new):
                side.runs.append([])
            for index, module in enumerate(modules):
                sides = (new, old) if (k + index) % 2 == 0 else (old, new)
                for side in sides:
                    started = time.monotonic()
                    side.runs[-1].extend(run_module(side, module, extra, log))
                    _log(
                        f"run {k + 1}/{repeat} {module} {side.label.split()[0]}:"
                        f" {time.monotonic() - started:.1f} s"
                    )
        table = compare(old, new, rows)
        print(render(table, old, new, markdown=False), end="")
        if markdown:
            with open(markdown, "w") as f:
                f.write(render(table, old, new, markdown=True))
        if json_path:
            dump_json(
                {
                    "old": {"label": old.label, "runs": old.runs},
                    "new": {"label": new.label, "runs": new.runs},
                },
                json_path,
            )
        if not temporary:
            _log(f"kept {work}")
    finally:
        if temporary:
            remove_old(work)
    if any(item.verdict == "FAILED" for item in table):
        return 2
    return 1 if any(item.verdict == "WORSE" for item in table) else 0
