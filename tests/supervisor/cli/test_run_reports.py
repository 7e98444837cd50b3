"""``supervisor run``: a job with ``report = true`` shows its progress in the live view, and
``--json`` carries its ``job.progress`` / ``job.record`` events."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from tests.supervisor.cli.test_run import supervisor_run
from tests.supervisor.cli.test_run_ux import Terminal, job, shown, terminal_env, write

if TYPE_CHECKING:
    from pathlib import Path

REPORTS = (
    "import json, os\n"
    "r = os.fdopen(int(os.environ['SUPERVISOR_REPORT_FD']), 'w', buffering=1)\n"
    "for i in range(1, 4): print(json.dumps({'progress': {'finished': i, 'total': 3}}), file=r)\n"
    "print(json.dumps({'case': 'a', 'ok': True}), file=r)\n"
    "print('plain')\n"
)


def test_json_carries_progress_and_records(tmp_path: Path) -> None:
    path = write(tmp_path / "lanes.toml", job("reporter", REPORTS, extra="report = true"))
    result = supervisor_run(path, "--json")
    assert result.returncode == 0, result.stderr
    events: list[dict[str, Any]] = [json.loads(line) for line in result.stdout.splitlines()]
    progress = [e for e in events if e["event"] == "job.progress"]
    assert progress[-1]["finished"] == progress[-1]["total"] == 3
    assert {(e["name"], e["lane"]) for e in progress} == {("reporter", events[0]["lane"])}
    (record,) = [e for e in events if e["event"] == "job.record"]
    assert record["record"] == {"case": "a", "ok": True}
    assert record["name"] == "reporter"
    names = [e["event"] for e in events]
    assert names.index("job.record") < names.index("job.finished")


def test_a_job_without_report_key_reports_nothing(tmp_path: Path) -> None:
    code = "import os; print(os.environ.get('SUPERVISOR_REPORT_FD'))"
    path = write(tmp_path / "lanes.toml", job("quiet", code))
    result = supervisor_run(path, "--json")
    assert result.returncode == 0, result.stderr
    events: list[dict[str, Any]] = [json.loads(line) for line in result.stdout.splitlines()]
    assert not [e for e in events if e["event"] in ("job.progress", "job.record")]
    assert [e["text"] for e in events if e["event"] == "job.output"] == ["None\n"]


def test_a_report_that_is_not_a_boolean_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "lanes.toml", job("bad", "pass", extra='report = "yes"'))
    result = supervisor_run(path)
    assert result.returncode == 2
    assert "report" in result.stderr


def test_the_live_view_shows_the_progress(tmp_path: Path) -> None:
    release = tmp_path / "release"
    code = (
        "import json, os, time\n"
        "r = os.fdopen(int(os.environ['SUPERVISOR_REPORT_FD']), 'w', buffering=1)\n"
        "print(json.dumps({'progress': {'finished': 2, 'total': 5}}), file=r)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.02)\n"
    )
    path = write(tmp_path / "lanes.toml", job("steps", code, extra="report = true"))
    term = Terminal([sys.executable, "-m", "supervisor", "run", path], terminal_env())
    try:
        term.pump(lambda s: any("running steps 2/5 (" in line for line in s.display))
        release.write_text("")
        assert term.finish() == 0
    finally:
        term.kill()
    after = "\n".join(shown(term.screen))
    assert " 2/5" not in after  # the live line is gone with the job
    assert os.path.exists(release)
