"""``python -m benchmarks``: each module measured in a fresh interpreter, its rows in one table."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from benchmarks._ab import Side, compare, fresh_rows, render

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


#: Imported by every interpreter of a run whose PYTHONPATH holds it: the modules named in
#: BENCH_TEST_BROKEN fail to import there, so each gives a failed row, in whichever
#: interpreter measures it; the one named in BENCH_TEST_STUCK writes its interpreter's pid
#: to BENCH_TEST_STUCK_FILE and sleeps, importing it.
_BREAK = """
import os, sys, time

class _Broken:
    def find_spec(self, name, path=None, target=None):
        module = name.rpartition(".")[2]
        if module in os.environ.get("BENCH_TEST_BROKEN", "").split(","):
            raise ImportError("broken on purpose")
        if module == os.environ.get("BENCH_TEST_STUCK"):
            marker = os.environ["BENCH_TEST_STUCK_FILE"]
            with open(marker + ".part", "w") as f:
                f.write(str(os.getpid()))
            os.rename(marker + ".part", marker)
            time.sleep(600)
        return None

sys.meta_path.insert(0, _Broken())
"""


def _broken_env(tmp_path: Path, *modules: str, stuck: str = "") -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BREAK)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "BENCH_TEST_BROKEN": ",".join(modules),
        "BENCH_TEST_STUCK": stuck,
        "BENCH_TEST_STUCK_FILE": str(tmp_path / "stuck.pid"),
    }


def _refuse(token: str) -> object:
    raise AssertionError(f"{token} is not JSON (RFC 8259)")


def test_a_failed_row_is_written_as_strict_json(tmp_path: Path) -> None:
    """A row that failed to run was written with NaN figures, which strict JSON readers (jq,
    JSON.parse) refuse: its figures are null; the table and the exit status are as before."""
    out, markdown = tmp_path / "rows.json", tmp_path / "rows.md"
    outputs = ["--json", str(out), "--markdown", str(markdown)]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", *outputs, "bench_framing", "bench_tree"],
        cwd=ROOT,
        env=_broken_env(tmp_path, "bench_framing", "bench_tree"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    # Each module failed in its fresh interpreter, which wrote its row for this one to read.
    rows = json.loads(out.read_text(), parse_constant=_refuse)["rows"]
    assert [row["benchmark"] for row in rows] == ["bench_framing", "bench_tree"]
    for row in rows:
        assert row["failed"] is True
        assert "ImportError: broken on purpose" in row["figure"]
        assert (row["ours"], row["peer"], row["ratio"]) == (None, None, None)
    table = markdown.read_text()
    assert "| - | nan  | nan | nanx | - | **no** |" in table
    assert "0 of 2 goals met." in table
    assert "nan" in done.stdout  # the terminal's table too


def test_the_ab_harness_reads_a_failed_row_back(tmp_path: Path) -> None:
    """fresh_rows (the A/B harness's run of one side) reads the null figures of a failed row
    as NaN again, and the comparison marks the row FAILED."""
    rows, status = fresh_rows(
        sys.executable,
        ROOT,
        ["--quick", "bench_framing"],
        env=_broken_env(tmp_path, "bench_framing"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert status == 2
    assert rows is not None
    [row] = rows
    assert row["failed"] is True
    assert all(math.isnan(row[name]) for name in ("ours", "peer", "ratio"))
    old, new = Side("old", ROOT, sys.executable), Side("new", ROOT, sys.executable)
    old.runs, new.runs = [[dict(row)]], [[dict(row)]]
    table = compare(old, new, None)
    assert [item.verdict for item in table] == ["FAILED"]
    assert render(table, old, new, markdown=False).splitlines()[2].endswith("FAILED")


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended and was reaped (by this process if it is its parent now: a
    child subreaper adopts the orphans of its descendants)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return not os.path.exists(f"/proc/{pid}")


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_run_ended_by_a_signal_ends_its_module_and_leaves_nothing(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """The module measuring ends with the run, and nothing is left in the temporary
    directory: the rows' temporary file stayed behind when the run was killed (SIGKILL)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**_broken_env(tmp_path, stuck="bench_framing"), "TMPDIR": str(temp)}
    run = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "--quick", "bench_framing", "bench_tree"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        marker = tmp_path / "stuck.pid"
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert run.poll() is None, "the run ended before its module started"
            assert time.monotonic() < deadline, "the module never started"
            time.sleep(0.02)
        module = int(marker.read_text())
        run.send_signal(signum)
        assert run.wait(timeout=30) != 0
        deadline = time.monotonic() + 10
        while not _gone(module):
            assert time.monotonic() < deadline, (
                f"the module's interpreter {module} outlived the run"
            )
            time.sleep(0.02)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert sorted(p.name for p in temp.iterdir()) == []
