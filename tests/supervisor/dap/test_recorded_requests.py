"""What the supervisor sends a debug adapter, and in which order, asserted on the requests
the fake adapter (tests/peers/dap_fake.py ``record`` modes) received (issue 16): the first
configuration flow (core-api.md: exception filters, function breakpoints only with
``supportsFunctionBreakpoints``, sources in path order, ``configurationDone`` only when
supported -- without it ``setExceptionBreakpoints`` last --, nothing before ``initialized``;
tests/supervisor/dap/test_configuration.py has the adapters that order it differently),
``debug.launch``'s configuration, the variables paging fields, the normalized adapter
events, the command result vs event shapes, and the process identifiers of a host's
``runInTerminal`` answer.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import TYPE_CHECKING, Any

import pytest
import trio

from protocol import CoreError
from tests._procfs import runs_no_more
from tests.supervisor.dap.test_sessions import (
    FAKE,
    Events,
    create,
    host_terminal_session,
    result_of,
)

if TYPE_CHECKING:
    from protocol import JSONObject
    from supervisor._core._core import Core

PY = sys.executable
WAIT_S = 30


async def received(core: Core, sid: JSONObject) -> list[Any]:
    """The requests the fake received so far, oldest first (``command`` and ``arguments``),
    without the ``evaluate`` requests asking for them."""
    answer: Any = result_of(
        await core.call("debug.inspect", {**sid, "kind": "evaluate", "expression": "received"})
    )
    requests = json.loads(answer["result"])
    assert isinstance(requests, list)
    return [r for r in requests if r["arguments"] != {"expression": "received"}]


async def disconnect(core: Core, sid: JSONObject, adapter_pid: int | None) -> None:
    await core.call("debug.disconnect", sid)
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)


def commands(requests: list[Any]) -> list[str]:
    return [r["command"] for r in requests]


async def keep_breakpoints(core: Core, sid: JSONObject) -> None:
    """Source breakpoints for two files (set in reverse path order) and a function
    breakpoint, before configuration: kept, not sent."""
    for path, line in (("/z/last.py", 4), ("/a/first.py", 2)):
        kept = result_of(
            await core.call(
                "debug.setBreakpoints", {**sid, "path": path, "breakpoints": [{"line": line}]}
            )
        )
        assert kept["sent"] is False
    kept = result_of(
        await core.call("debug.setFunctionBreakpoints", {**sid, "breakpoints": [{"name": "main"}]})
    )
    assert kept["sent"] is False


async def test_first_configuration_sends_filters_functions_sources_in_order(core: Core) -> None:
    session_id, adapter_pid = await create(core, {"executable": PY, "arguments": [FAKE, "record"]})
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await keep_breakpoints(core, sid)
    configuration: JSONObject = {"name": "Run it", "program": "/a/first.py", "justMyCode": False}
    await core.call("debug.launch", {**sid, "configuration": configuration})
    await events.next("stopped")  # the fake stops thread 1 on configurationDone
    requests = await received(core, sid)
    # Nothing configured before the adapter's `initialized` (sent when launch arrives); the
    # adapter's default exception filter (no selection was made) first, then function
    # breakpoints, then every source in path order, then configurationDone.
    assert commands(requests) == [
        "initialize",
        "launch",
        "setExceptionBreakpoints",
        "setFunctionBreakpoints",
        "setBreakpoints",
        "setBreakpoints",
        "configurationDone",
    ]
    assert requests[1]["arguments"] == configuration  # the configuration, as given
    assert requests[2]["arguments"] == {"filters": ["uncaught"]}
    assert requests[3]["arguments"] == {"breakpoints": [{"name": "main"}]}
    assert [r["arguments"]["source"]["path"] for r in requests[4:6]] == [
        "/a/first.py",
        "/z/last.py",
    ]
    await disconnect(core, sid, adapter_pid)


async def test_without_configuration_done_exception_filters_come_last(
    core: Core,
) -> None:
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "record-plain"]}
    )
    sid: JSONObject = {"sessionId": session_id}
    await keep_breakpoints(core, sid)
    await core.call("debug.attach", {**sid, "configuration": {"name": "Attach", "port": 1}})
    # The plain fake never stops: wait until the configuration's last request arrived (the
    # flow is sequential, so anything sent before it has arrived too). Without
    # configurationDone, DAP has the client send setExceptionBreakpoints anyway (older
    # adapters take it as the end of the configuration): last, and empty here.
    with trio.fail_after(WAIT_S):
        while "setExceptionBreakpoints" not in commands(requests := await received(core, sid)):  # noqa: ASYNC110 - the adapter's own record
            await trio.sleep(0.05)
    assert commands(requests) == [
        "initialize",
        "attach",
        "setBreakpoints",
        "setBreakpoints",
        "setExceptionBreakpoints",
    ]
    assert requests[1]["arguments"] == {"name": "Attach", "port": 1}
    assert requests[4]["arguments"] == {"filters": []}
    # A function breakpoint set now is kept, still not sent.
    kept = result_of(
        await core.call("debug.setFunctionBreakpoints", {**sid, "breakpoints": [{"name": "g"}]})
    )
    assert kept["sent"] is False
    assert await received(core, sid) == requests
    await disconnect(core, sid, adapter_pid)


async def test_variables_paging_is_mapped_and_refused_for_other_kinds(core: Core) -> None:
    session_id, adapter_pid = await create(core, {"executable": PY, "arguments": [FAKE, "record"]})
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await core.call("debug.launch", {**sid, "configuration": {}})
    await events.next("stopped")
    await core.call(
        "debug.inspect",
        {
            **sid,
            "kind": "variables",
            "variablesReference": 9,
            "variableFilter": "indexed",
            "start": 0,
            "count": 25,
        },
    )
    await core.call("debug.inspect", {**sid, "kind": "variables", "variablesReference": 8})
    before = await received(core, sid)
    assert [r["arguments"] for r in before if r["command"] == "variables"] == [
        {"variablesReference": 9, "filter": "indexed", "start": 0, "count": 25},
        {"variablesReference": 8},
    ]
    # The paging fields belong to variables alone; bad values are refused too. Nothing
    # reaches the adapter.
    refused: list[JSONObject] = [
        {"kind": "evaluate", "expression": "1", "start": 1},
        {"kind": "scopes", "frameId": 1, "count": 2},
        {"kind": "threads", "variableFilter": "named"},
        {"kind": "stackTrace", "threadId": 1, "variableFilter": "indexed"},
        {"kind": "variables", "variablesReference": 9, "variableFilter": "all"},
        {"kind": "variables", "variablesReference": 9, "start": -1},
        {"kind": "variables", "variablesReference": 9, "count": 0},
    ]
    for payload in refused:
        with pytest.raises(CoreError) as caught:
            await core.call("debug.inspect", {**sid, **payload})
        assert caught.value.code == "invalid_request", payload
    assert await received(core, sid) == before
    await disconnect(core, sid, adapter_pid)


async def test_continued_breakpoint_thread_and_exited_events_are_normalized(core: Core) -> None:
    session_id, adapter_pid = await create(core, {"executable": PY, "arguments": [FAKE, "record"]})
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await core.call("debug.launch", {**sid, "configuration": {}})
    await events.next("stopped")
    await core.call("debug.inspect", {**sid, "kind": "evaluate", "expression": "events"})
    continued = await events.next("continued")
    assert (continued["threadId"], continued["allThreadsContinued"]) == (1, True)
    changed = await events.next("breakpoint")
    assert changed["reason"] == "changed"
    assert changed["breakpoint"] == {"id": 5, "verified": True, "line": 3}
    thread = await events.next("thread")
    assert (thread["reason"], thread["threadId"]) == ("started", 3)
    exited = await events.next("exited")
    assert exited["exitCode"] == 7
    # In the adapter's order, and `continued` resumed the paused session.
    names = [e["event"] for e in events.seen]
    at = names.index("continued")
    assert names[at : at + 5] == ["continued", "stateChanged", "breakpoint", "thread", "exited"]
    assert events.seen[at + 1]["state"] == "running"
    await disconnect(core, sid, adapter_pid)


async def test_commands_answer_their_result_and_events_go_to_wait_events(core: Core) -> None:
    """Our shape (core-api.md's ``{sessionId, state, outboundFrames, events}`` differs on
    purpose): an operation answers ``{operationId, result}``; its ``operationCompleted``
    event carries the same result, and every event is drained with ``debug.waitEvents``."""
    session_id, adapter_pid = await create(core, {"executable": PY, "arguments": [FAKE, "record"]})
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    answer = await core.call(
        "debug.launch", {**sid, "operationId": "launch-1", "configuration": {}}
    )
    assert answer == {"operationId": "launch-1", "result": {"requestKind": "launch"}}
    completed = await events.next("operationCompleted")
    assert completed["operationId"] == "launch-1"
    assert completed["command"] == "debug.launch"
    assert completed["result"] == {"requestKind": "launch"}
    assert {e["sessionId"] for e in events.seen} == {session_id}
    await disconnect(core, sid, adapter_pid)


async def test_run_in_terminal_answer_process_identifiers_are_validated(core: Core) -> None:
    sid, events = await host_terminal_session(core)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(core.call, "debug.launch", sid))
        requested = await events.next("runInTerminalRequested")
        base: JSONObject = {**sid, "requestId": requested["requestId"], "success": True}
        bad: list[tuple[JSONObject, str | None]] = [
            ({"processId": 0}, "processId"),
            ({"processId": -7}, "processId"),
            ({"processId": "4242"}, "processId"),
            ({"processId": True}, "processId"),
            ({"processId": 4.5}, "processId"),
            ({"processId": 4242, "shellProcessId": 0}, "shellProcessId"),
            ({}, None),  # success without any process identifier
        ]
        for fields, field in bad:
            with pytest.raises(CoreError) as caught:
                await core.call("debug.runInTerminalResponse", {**base, **fields})
            assert caught.value.code == "invalid_request", fields
            if field is not None:
                assert (caught.value.details or {}).get("field") == field
        # The refused answers completed nothing: a valid one is still accepted, once.
        answer: JSONObject = {**base, "processId": 4242, "shellProcessId": 4241}
        assert await core.call("debug.runInTerminalResponse", answer) == {"accepted": True}
    output = await events.next("output")
    reply = json.loads(str(output["output"]))
    assert reply == {
        "terminalReply": {"processId": 4242, "shellProcessId": 4241},
        "success": True,
    }
    await core.call("debug.disconnect", sid)
