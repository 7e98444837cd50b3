"""``supervisor serve`` pushes a reporting job's ``job.progress`` and ``job.record``
(ide-backend-protocol ``mcpp-ide/job/progress``, ``mcpp-ide/job/record``) as notifications."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tests.supervisor.cli.test_serve import _field, serve_process

if TYPE_CHECKING:
    from pathlib import Path

PY = sys.executable

REPORTS = (
    "import json, os\n"
    "r = os.fdopen(int(os.environ['SUPERVISOR_REPORT_FD']), 'w', buffering=1)\n"
    "print(json.dumps({'progress': {'finished': 1, 'total': 2}}), file=r)\n"
    "print(json.dumps({'case': 'a', 'ok': True}), file=r)\n"
    "print(json.dumps({'progress': {'finished': 2, 'total': 2}}), file=r)\n"
)


async def test_progress_and_records_are_pushed_as_notifications(
    tmp_path: Path,
) -> None:
    async with serve_process() as client:
        await client.initialize()
        job = await client.request(
            "job.start",
            {"kind": "test", "root": str(tmp_path), "argv": [PY, "-c", REPORTS], "report": True},
        )
        job_id = _field(job, "result", "jobId")
        record = await client.wait_notification("job.record", jobId=job_id)
        assert _field(record, "params", "record") == {"case": "a", "ok": True}
        finished = await client.wait_notification("job.finished", jobId=job_id)
        assert _field(finished, "params", "status") == "ok"
        progress = [
            note["params"] for note in client.notifications if note["method"] == "job.progress"
        ]
        assert progress[-1] == {"jobId": job_id, "finished": 2, "total": 2}
        await client.shut_down()
