"""A plugin run's last words are ``runOutput`` events before ``runExited`` (issue 24).

A run stopped (``run.stop``) or ended by the table closing (the Core closing) is ended by the
stop ladder while its output is still read: the lines its SIGTERM handler writes
(tests/peers/last_words.py; stderr goes to the same pipe) are all there, before its end.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor._plugin._run_state import RunStart
from supervisor._plugin._runs import RunTable

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject
    from supervisor._plugin._runs import Run

PEERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "peers")
LAST_WORDS = os.path.join(PEERS, "last_words.py")
LINES = 200
WAIT_S = 60


def _plan(cwd: str) -> RunStart:
    return RunStart(
        context={"contextID": "w1", "generation": 1},
        label="last words",
        executable=sys.executable,
        arguments=(LAST_WORDS, f"--lines={LINES}"),
        working_directory=cwd,
        environment={},
        temporary_files=(),
        rerun=None,
    )


def _events(run: Run, seen: list[JSONObject]) -> list[JSONObject]:
    while True:
        got = run.events.poll()["events"]
        assert isinstance(got, list)
        if not got:
            return seen
        seen.extend(e for e in got if isinstance(e, dict))


def _check(events: list[JSONObject]) -> None:
    names = [e["event"] for e in events]
    assert names.count("runExited") == 1
    assert names[-1] == "runExited"
    text = "".join(str(e["text"]) for e in events if e["event"] == "runOutput")
    for i in range(1, LINES + 1):
        assert text.count(f"last out {i}/{LINES}\n") == 1, (i, text[-200:])
        assert text.count(f"last err {i}/{LINES}\n") == 1, (i, text[-200:])
    assert text.count("last words done\n") == 1
    assert events[-1]["exitCode"] == 0


async def _up(run: Run, seen: list[JSONObject]) -> None:
    with trio.fail_after(WAIT_S):
        while "ready" not in "".join(str(e.get("text", "")) for e in seen):
            got = (await run.events.wait(1000))["events"]
            assert isinstance(got, list)
            seen.extend(e for e in got if isinstance(e, dict))


@pytest.mark.parametrize("path", ["stop", "table closing"])
async def test_sigterm_handler_lines_come_before_the_exit(tmp_path: Path, path: str) -> None:
    seen: list[JSONObject] = []

    async def exited(run: Run) -> None:
        return None

    async with trio.open_nursery() as nursery:
        table = RunTable(nursery, exited)
        run = await table.start(_plan(str(tmp_path)), plugin_id="p", session_id="s", generation=1)
        await _up(run, seen)
        if path == "stop":
            await table.stop(run)
        else:
            await table.aclose()
    _check(_events(run, seen))
