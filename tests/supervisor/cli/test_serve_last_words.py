"""``supervisor serve``: a running job's last words are ``job.output`` notifications before its
``job.finished``, when ``shutdown`` ends it and when the session ends without one (issue 24).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest

from tests.supervisor.cli.test_serve import serve_process

if TYPE_CHECKING:
    from protocol import JSONObject

LAST_WORDS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "peers", "last_words.py"
)
LINES = 200


def _check(messages: list[JSONObject], job_id: object) -> None:
    mine = [
        m
        for m in messages
        if str(m.get("method", "")).startswith("job.")
        and isinstance(m.get("params"), dict)
        and m["params"].get("jobId") == job_id  # type: ignore[union-attr]
    ]
    methods = [m["method"] for m in mine]
    assert methods.count("job.finished") == 1
    assert methods[-1] == "job.finished"
    text = {"stdout": "", "stderr": ""}
    for message in mine:
        params = message["params"]
        assert isinstance(params, dict)
        if message["method"] == "job.output":
            text[str(params["stream"])] += str(params["text"])
    for i in range(1, LINES + 1):
        assert text["stdout"].count(f"last out {i}/{LINES}\n") == 1, (i, text["stdout"][-200:])
        assert text["stderr"].count(f"last err {i}/{LINES}\n") == 1, (i, text["stderr"][-200:])
    assert text["stdout"].endswith("last words done\n")
    finished = mine[-1]["params"]
    assert isinstance(finished, dict)
    assert finished["status"] == "cancelled"


@pytest.mark.parametrize("end", ["shutdown", "exit without shutdown"])
async def test_a_running_jobs_last_words_are_sent(tmp_path: str, end: str) -> None:
    async with serve_process() as client:
        await client.initialize()
        started = await client.request(
            "job.start",
            {
                "kind": "command",
                "root": os.fspath(tmp_path),
                "argv": [sys.executable, LAST_WORDS, f"--lines={LINES}"],
            },
        )
        result = started["result"]
        assert isinstance(result, dict)
        job_id = result["jobId"]
        await client.wait_notification("job.output", jobId=job_id, text="ready\n")
        if end == "shutdown":
            assert (await client.request("shutdown"))["result"] is None
            await client.notify("exit")
            messages, status = await client.read_to_exit()
            assert status == 0
        else:
            await client.notify("exit")
            messages, status = await client.read_to_exit()
            assert status == 1
        _check(client.notifications + messages, job_id)
