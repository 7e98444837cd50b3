"""A job's report channel: JSON lines on ``SUPERVISOR_REPORT_FD`` become ``job.progress`` and
``job.record`` (ide-backend-protocol ``mcpp-ide/job/progress``, ``mcpp-ide/job/record``)."""

from __future__ import annotations

import os
import sys
import textwrap
from typing import TYPE_CHECKING, Any, cast

import trio

from lanes import JobRequest, open_lanes
from supervisor import open_core
from supervisor._core._jobs import REPORT_FD_ENV, ProcessJobRunner
from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from protocol import JSONObject
    from supervisor import Core

PY = sys.executable

#: Reports three steps and two records; the records are written after the steps.
REPORTING = """
import json, os, stat
fd = int(os.environ["SUPERVISOR_REPORT_FD"])
assert fd == 3 and stat.S_ISFIFO(os.fstat(fd).st_mode)
with os.fdopen(fd, "w", buffering=1) as report:
    for step in range(1, 4):
        print(json.dumps({"progress": {"finished": step, "total": 3}}), file=report)
    print(json.dumps({"case": "a", "ok": True}), file=report)
    print(json.dumps({"case": "b", "ok": False, "text": "\\u00e9"}), file=report)
print("plain output")
"""


async def _execute(core: Core, command: str, payload: JSONObject) -> dict[str, Any]:
    return cast(
        "dict[str, Any]", await core.execute({"id": 1, "command": command, "payload": payload})
    )


async def _events_until_finished(core: Core, job_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with trio.fail_after(30):
        while not any(e["event"] == "job.finished" and e["jobId"] == job_id for e in events):
            response = await _execute(core, "job.waitEvents", {"timeoutMilliseconds": 5000})
            events.extend(response["data"]["events"])
    return events


async def test_a_reporting_job_sends_progress_and_records_through_the_core(
    tmp_path: os.PathLike[str],
) -> None:
    async with open_core() as core:
        started = await _execute(
            core,
            "job.start",
            {
                "kind": "test",
                "root": os.fspath(tmp_path),
                "argv": [PY, "-c", REPORTING],
                "report": True,
            },
        )
        assert started["ok"], started
        job_id = started["data"]["jobId"]
        events = [e for e in await _events_until_finished(core, job_id) if e["jobId"] == job_id]
    names = [e["event"] for e in events]
    assert names[0] == "job.started"
    assert names[-1] == "job.finished"
    assert events[-1]["status"] == "ok"
    progress = [(e["finished"], e["total"]) for e in events if e["event"] == "job.progress"]
    # Coalesced: the latest wins, never out of order, the last one is 3 of 3.
    assert progress == sorted(progress)
    assert progress[-1] == (3, 3)
    records = [e for e in events if e["event"] == "job.record"]
    assert [r["record"] for r in records] == [
        {"case": "a", "ok": True},
        {"case": "b", "ok": False, "text": "é"},
    ]
    # The 3/3 report came before the records, and is sent before them.
    assert names.index("job.record") > max(
        i for i, name in enumerate(names) if name == "job.progress"
    )
    output = "".join(e["text"] for e in events if e["event"] == "job.output")
    assert output == "plain output\n"


async def test_a_job_without_report_has_no_report_descriptor(tmp_path: os.PathLike[str]) -> None:
    async with open_core() as core:
        started = await _execute(
            core,
            "job.start",
            {
                "kind": "test",
                "root": os.fspath(tmp_path),
                "argv": [PY, "-c", "import os; print(os.environ.get('SUPERVISOR_REPORT_FD'))"],
            },
        )
        job_id = started["data"]["jobId"]
        events = await _events_until_finished(core, job_id)
    assert not [e for e in events if e["event"] in ("job.progress", "job.record")]
    assert "".join(e["text"] for e in events if e["event"] == "job.output") == "None\n"


async def test_job_start_refuses_a_report_that_is_not_a_boolean(
    tmp_path: os.PathLike[str],
) -> None:
    async with open_core() as core:
        response = await _execute(
            core,
            "job.start",
            {"kind": "test", "root": os.fspath(tmp_path), "argv": ["true"], "report": "yes"},
        )
        assert response["ok"] is False
        assert response["error"]["code"] == "invalid_request"
        assert response["error"]["details"]["field"] == "report"
        assert (await _execute(core, "job.list", {}))["data"] == []


HOSTILE = """
import os
report = os.fdopen(int(os.environ["SUPERVISOR_REPORT_FD"]), "wb")
report.write(b"x" * 200_000 + b"\\n")                           # 1: too long
report.write(b"not json\\n")                                     # 2
report.write(b"[1, 2]\\n")                                       # 3: not an object
report.write(b'{"progress": {"finished": 5, "total": 2}}\\n')    # 4: more than total
report.write(b'{"bad": "\\\\ud800"}\\n')                         # 5: a lone surrogate
report.write(b'{"progress": {"finished": 1, "total": 2}}\\n')
report.write(b'{"first": true}\\n')
for n in range(5000):                                            # a flood
    report.write(b'{"n": %d}\\n' % n)
report.write(b'{"progress": {"finished": 2, "total": 2}}')       # the last line: no newline
report.close()
print("done")
"""


async def test_hostile_reports_end_nothing_and_stay_bounded(tmp_path: os.PathLike[str]) -> None:
    events: list[tuple[str, JSONObject]] = []
    async with open_lanes(
        ProcessJobRunner(), on_event=lambda m, p: events.append((m, p)), max_records=50
    ) as lanes:
        job_id = lanes.start_job(
            JobRequest(kind="test", root=os.fspath(tmp_path), argv=(PY, "-c", HOSTILE), report=True)  # type: ignore[arg-type]
        )
        with trio.fail_after(30):
            await lanes.wait_idle()
    (finished,) = [p for m, p in events if m == "job.finished" and p["jobId"] == job_id]
    assert finished["status"] == "ok"
    records = [p for m, p in events if m == "job.record"]
    assert records[0]["record"] == {"first": True}
    assert [r["record"] for r in records[1:50]] == [{"n": n} for n in range(49)]
    # One notice at the end counts the rest.
    assert records[50:] == [{"jobId": job_id, "record": None, "droppedRecords": 5000 - 49}]
    progress = [(p["finished"], p["total"]) for m, p in events if m == "job.progress"]
    assert progress[-1] == (2, 2)
    assert (5, 2) not in progress
    stderr = "".join(
        str(p["text"]) for m, p in events if m == "job.output" and p["stream"] == "stderr"
    )
    assert stderr.count("ignored") == 2, stderr
    assert "report line 1 ignored: it is longer than 65536 bytes" in stderr
    assert "5 report lines were ignored" in stderr
    stdout = "".join(
        str(p["text"]) for m, p in events if m == "job.output" and p["stream"] == "stdout"
    )
    assert stdout == "done\n"
    assert [m for m, _ in events][-1] == "job.finished"


SLEEPER = """
import os, time
print(os.getpid(), flush=True)
time.sleep(60)
"""


def _fds(pid: int) -> set[int]:
    return {int(name) for name in os.listdir(f"/proc/{pid}/fd")}


def _environ(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read().split(b"\0")


async def test_the_report_descriptor_never_reaches_another_job(
    tmp_path: os.PathLike[str], monkeypatch: Any
) -> None:
    # A supervisor that is itself a reporting job: its own jobs must not inherit the name.
    monkeypatch.setenv(REPORT_FD_ENV, "3")
    tmp = os.fspath(tmp_path)
    roots = [os.path.join(tmp, name) for name in ("a", "b", "c")]
    for root in roots:
        os.mkdir(root)
    pids_by_job: dict[str, int] = {}
    all_started = trio.Event()

    def on_event(method: str, params: JSONObject) -> None:
        if method == "job.output" and params["stream"] == "stdout":
            pids_by_job[str(params["jobId"])] = int(str(params["text"]))
            if len(pids_by_job) == len(roots):
                all_started.set()

    async with open_lanes(ProcessJobRunner(), on_event=on_event) as lanes:
        job_ids = [
            lanes.start_job(
                JobRequest(
                    kind="command",  # type: ignore[arg-type]
                    root=root,
                    argv=(PY, "-c", SLEEPER),
                    report=report,
                )
            )
            for root, report in zip(roots, (False, True, False), strict=True)
        ]
        with trio.fail_after(30):
            await all_started.wait()
        pids = [pids_by_job[job_id] for job_id in job_ids]
        before, reporting, after = pids
        assert _fds(before) == {0, 1, 2}
        assert _fds(after) == {0, 1, 2}
        assert _fds(reporting) == {0, 1, 2, 3}
        assert b"SUPERVISOR_REPORT_FD=3" in _environ(reporting)
        for pid in (before, after):
            assert not [e for e in _environ(pid) if e.startswith(b"SUPERVISOR_REPORT_FD=")]
        await lanes.aclose()
    for pid in pids:
        assert runs_no_more(pid)


async def test_a_descendant_holding_the_report_pipe_does_not_stretch_the_job(
    tmp_path: os.PathLike[str],
) -> None:
    code = textwrap.dedent(
        """
        import os, subprocess, sys
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(3,),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        print(child.pid, flush=True)
        os.write(3, b'{"progress": {"finished": 1, "total": 1}}\\n')
        """
    )
    events: list[tuple[str, JSONObject]] = []
    async with open_lanes(
        ProcessJobRunner(drain_ms=100), on_event=lambda m, p: events.append((m, p))
    ) as lanes:
        lanes.start_job(
            JobRequest(kind="command", root=os.fspath(tmp_path), argv=(PY, "-c", code), report=True)  # type: ignore[arg-type]
        )
        with trio.fail_after(20):
            await lanes.wait_idle()
    (finished,) = [p for m, p in events if m == "job.finished"]
    assert finished["status"] == "ok"
    assert [(p["finished"], p["total"]) for m, p in events if m == "job.progress"] == [(1, 1)]
    grandchild = int(
        "".join(str(p["text"]) for m, p in events if m == "job.output" and p["stream"] == "stdout")
    )
    assert runs_no_more(grandchild)
