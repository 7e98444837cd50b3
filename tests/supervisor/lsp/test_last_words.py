"""A language server's last words reach the client on every stop path (issue 24).

tests/peers/lsp_last_words.py sends ``window/logMessage`` after its ``shutdown`` reply and
writes stderr lines until it exits (or says both from its SIGTERM handler, or on the way to a
crash). Every message must come, in order, as a ``log`` event before the event that reports
the end of that generation: on a stop, a restart, the Core closing and a crash. The stop path
lost 3 to 104 of 301 messages in 3 to 7 of 8 tries before the ladder drained (the pipes were
closed, and the end reported, while the server was still talking).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from supervisor._lsp._service import LspService
from tests.supervisor.lsp._support import PEERS, PY, Session, as_obj, start

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue
    from supervisor import Core

LAST_WORDS = os.path.join(PEERS, "lsp_last_words.py")
LOGS = 1000
#: Under the session's stderr log rate (100 a second), so each line is one event.
STDERR = 50
FAST: dict[str, JSONValue] = {"shutdownTimeoutMilliseconds": 500}


def _argv(*flags: str) -> list[str]:
    return [PY, LAST_WORDS, f"--logs={LOGS}", f"--stderr={STDERR}", *flags]


def _check(events: list[JSONObject], end: JSONObject) -> None:
    """Every last log message and stderr line of generation 1, in order, before ``end``."""
    before = events[: events.index(end)]
    logs = [
        e["message"]
        for e in before
        if e["event"] == "log" and e["source"] == "window/logMessage" and e["generation"] == 1
    ]
    lines = [
        e["message"]
        for e in before
        if e["event"] == "log" and e["source"] == "stderr" and e["generation"] == 1
    ]
    assert logs == [f"last log {i}/{LOGS}" for i in range(1, LOGS + 1)], (len(logs), logs[-3:])
    assert lines == [f"last stderr {i}/{STDERR}" for i in range(1, STDERR + 1)], lines[-3:]
    later = [e for e in events[events.index(end) :] if e["event"] == "log" and e["generation"] == 1]
    assert later == []


def _end_of_generation_1(events: list[JSONObject], state: str) -> JSONObject:
    return next(
        e
        for e in events
        if e["event"] == "stateChanged" and e["state"] == state and e["generation"] == 1
    )


@pytest.mark.parametrize("mode", ["after shutdown", "from the SIGTERM handler"])
async def test_stop(tmp_path: str, mode: str) -> None:
    flags = ("--on-term",) if mode == "from the SIGTERM handler" else ()
    async with open_core() as core:
        session = await start(core, _argv(*flags), str(tmp_path), **FAST)
        await session.wait_state("ready")
        result = await session.stop()
        assert result["state"] == "stopped"
        assert as_obj(result["lastExit"])["exitCode"] == 0
        await session.drain()
        _check(session.seen, _end_of_generation_1(session.seen, "stopped"))


async def test_restart(tmp_path: str) -> None:
    async with open_core() as core:
        session = await start(core, _argv(), str(tmp_path), **FAST)
        await session.wait_state("ready")
        assert (await session.call("lsp.restartServer"))["generation"] == 2
        await session.wait_for(lambda e: e["event"] == "stateChanged" and e["generation"] == 2)
        _check(session.seen, _end_of_generation_1(session.seen, "stopped"))
        await session.stop()


async def test_crash(tmp_path: str) -> None:
    async with open_core() as core:
        session = await start(core, _argv(), str(tmp_path))
        await session.wait_state("ready")
        await session.roundtrip("test/crash")
        failed = await session.wait_state("failed")
        assert as_obj(failed["error"])["exitCode"] == 7
        await session.drain()
        _check(session.seen, failed)


@pytest.mark.parametrize("mode", ["after shutdown", "from the SIGTERM handler"])
async def test_core_close(tmp_path: str, mode: str) -> None:
    """Closing the Core (serve's ``shutdown``, a host leaving ``open_core``) stops every
    session: the events queued while it stops are all there once it has closed."""
    flags = ("--on-term",) if mode == "from the SIGTERM handler" else ()
    core: Core
    async with open_core() as core:
        session = await start(core, _argv(*flags), str(tmp_path), **FAST)
        await session.wait_state("ready")
        service = next(s for s in core._services if isinstance(s, LspService))
        queue = service.sessions[session.id].events
    while True:
        batch = queue.poll()
        events = batch["events"]
        assert isinstance(events, list)
        if not events:
            break
        session.seen.extend(as_obj(e) for e in events)
    _check(session.seen, _end_of_generation_1(session.seen, "stopped"))


async def test_many_stops_at_once_lose_nothing(tmp_path: str) -> None:
    """Eight servers stopped together (the loaded case the issue measured)."""
    async with open_core() as core:
        sessions = [await start(core, _argv(), str(tmp_path), **FAST) for _ in range(8)]

        async def stop(session: Session) -> None:
            await session.wait_state("ready")
            await session.stop()
            await session.drain()
            _check(session.seen, _end_of_generation_1(session.seen, "stopped"))

        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(stop, session)
