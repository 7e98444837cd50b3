"""A debug adapter's last words reach the client on every stop path (issue 24).

tests/peers/dap_last_words.py sends a run of ``output`` events right after its ``disconnect``
answer (or from its SIGTERM handler, or on its way to a crash). Every one must come, in order,
before ``terminated``: on ``debug.disconnect``, the Core closing and a crash. The stop used to
close the adapter's pipes while it still talked.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from supervisor._dap._service import DebugService
from tests.supervisor.dap.test_sessions import Events, create

if TYPE_CHECKING:
    from protocol import JSONObject
    from supervisor._core._core import Core

PY = sys.executable
PEER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "peers")
LAST_WORDS = os.path.join(PEER, "dap_last_words.py")
OUTPUTS = 1000
WAIT_S = 60


def _adapter(*flags: str) -> JSONObject:
    return {"executable": PY, "arguments": [LAST_WORDS, f"--outputs={OUTPUTS}", *flags]}


def _check(events: list[JSONObject]) -> JSONObject:
    """Every last output, in order, before the one ``terminated``; returns it."""
    (terminated,) = [e for e in events if e["event"] == "terminated"]
    end = events.index(terminated)
    said = [
        e["output"]
        for e in events
        if e["event"] == "output" and str(e["output"]).startswith("last output")
    ]
    before = [
        e["output"]
        for e in events[:end]
        if e["event"] == "output" and str(e["output"]).startswith("last output")
    ]
    expected = [f"last output {i}/{OUTPUTS}\n" for i in range(1, OUTPUTS + 1)]
    assert before == expected, (len(before), len(said), before[-2:])
    assert said == before
    return terminated


async def _running(core: Core, *flags: str) -> tuple[str, Events]:
    session_id, _ = await create(core, _adapter(*flags))
    events = Events(core, session_id)
    await core.call("debug.launch", {"sessionId": session_id})
    return session_id, events


async def _all_events(events: Events) -> list[JSONObject]:
    await events.next("terminated")
    return events.seen


@pytest.mark.parametrize("mode", ["after disconnect", "from the SIGTERM handler"])
async def test_disconnect(mode: str) -> None:
    flags = ("--on-term",) if mode == "from the SIGTERM handler" else ()
    async with open_core() as core:
        session_id, events = await _running(core, *flags)
        detail = await core.call("debug.disconnect", {"sessionId": session_id})
        terminated = _check(await _all_events(events))
        assert terminated["reason"] == "disconnected"
        assert terminated["exitCode"] == 0
        assert isinstance(detail, dict)


async def test_crash() -> None:
    async with open_core() as core:
        session_id, events = await _running(core)
        await core.call(
            "debug.inspect", {"sessionId": session_id, "kind": "evaluate", "expression": "crash"}
        )
        terminated = _check(await _all_events(events))
        assert terminated["reason"] == "adapterExited"
        assert terminated["exitCode"] == 7
        assert terminated["stderrTail"] == ["last stderr line"]
        await core.call("debug.destroySession", {"sessionId": session_id})


@pytest.mark.parametrize("mode", ["after disconnect", "from the SIGTERM handler"])
async def test_core_close(mode: str) -> None:
    flags = ("--on-term",) if mode == "from the SIGTERM handler" else ()
    async with open_core() as core:
        session_id, events = await _running(core, *flags)
        service = next(s for s in core._services if isinstance(s, DebugService))
        queue = service._sessions[session_id].events
    seen = list(events.seen)
    while True:
        batch = queue.poll()
        polled = batch["events"]
        assert isinstance(polled, list)
        if not polled:
            break
        seen.extend(e for e in polled if isinstance(e, dict))
    terminated = _check(seen)
    assert terminated["reason"] == "supervisorClosing"


async def test_many_disconnects_at_once_lose_nothing() -> None:
    async with open_core() as core:
        running = [await _running(core) for _ in range(6)]

        async def disconnect(session_id: str, events: Events) -> None:
            await core.call("debug.disconnect", {"sessionId": session_id})
            _check(await _all_events(events))

        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                for session_id, events in running:
                    nursery.start_soon(disconnect, session_id, events)
