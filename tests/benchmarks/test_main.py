"""``python -m benchmarks``: each module measured in a fresh interpreter, its rows in one table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_RUN = """
import sys
from benchmarks.__main__ import main
status = main(sys.argv[1:])
print(sorted(name for name in sys.modules if name.startswith("benchmarks.bench_")))
raise SystemExit(status)
"""


def _run(tmp_path: Path, *args: str) -> tuple[list[dict[str, object]], str]:
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, "-c", _RUN, "--quick", "--json", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 2: a row failed to run
    rows: list[dict[str, object]] = json.loads(out.read_text())["rows"]
    return rows, done.stdout.splitlines()[-1]


def test_each_module_runs_in_a_fresh_interpreter(tmp_path: Path) -> None:
    rows, imported = _run(tmp_path, "bench_framing", "bench_tree")
    assert {row["benchmark"] for row in rows} == {"bench_framing", "bench_tree"}
    assert not any(row.get("failed") for row in rows)
    # The table's process measured nothing itself: neither module was imported there.
    assert imported == "[]"


def test_in_process_runs_them_in_this_interpreter(tmp_path: Path) -> None:
    rows, imported = _run(tmp_path, "--in-process", "bench_framing", "bench_tree")
    assert {row["benchmark"] for row in rows} == {"bench_framing", "bench_tree"}
    assert imported == "['benchmarks.bench_framing', 'benchmarks.bench_tree']"


def test_a_rows_pattern_may_start_with_a_dash(tmp_path: Path) -> None:
    """The pattern reaches each module's interpreter whole (it was read as an option there,
    and every module failed to run)."""
    rows, _ = _run(tmp_path, "--rows=-process|framer", "bench_framing", "bench_tree")
    assert rows
    assert not any(row.get("failed") for row in rows)


def test_usage_errors_end_at_once_with_2(tmp_path: Path) -> None:
    for args in (
        ["bench_nosuch"],
        ["--rows", "(", "bench_tree"],
        ["--json", str(tmp_path / "no" / "such" / "dir.json"), "bench_tree"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks", "--quick", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr
        assert "goals met" not in done.stdout  # nothing was measured
