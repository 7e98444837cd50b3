"""The rest of core-api.md's ``debug.*`` surface (issue 16), each command against a real adapter:
``debug.setVariable``, ``gotoTargets`` + ``goto``, ``stepInTargets`` + ``stepIn`` with a
target, ``isFiltered`` frames and normalized exception details with debugpy; the capability
gates (step back, data breakpoints) refused before anything is sent; the data breakpoint
flow and the single-thread continue rule with the fake adapter (debugpy and lldb-vscode 14
have neither data breakpoints nor single-thread execution).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import pytest

from protocol import CoreError
from tests._procfs import runs_no_more
from tests.supervisor.dap.test_sessions import FAKE, Events, create, debugpy_adapter, result_of

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor._core._core import Core

PY = sys.executable

PROGRAM = """\
def inner(x):
    return x * 2


def outer():
    value = 10
    result = inner(value) + inner(1)
    return result


total = outer()
try:
    raise ValueError("boom")
except ValueError:
    pass
"""
VALUE_LINE, CALL_LINE = 6, 7


async def frames_of(core: Core, sid: JSONObject, thread_id: JSONValue) -> list[Any]:
    stack = result_of(
        await core.call("debug.inspect", {**sid, "kind": "stackTrace", "threadId": thread_id})
    )
    frames = stack["stackFrames"]
    assert isinstance(frames, list)
    return frames


async def locals_of(core: Core, sid: JSONObject, frame_id: int) -> tuple[int, dict[str, str]]:
    scopes: Any = result_of(
        await core.call("debug.inspect", {**sid, "kind": "scopes", "frameId": frame_id})
    )
    ref = next(s["variablesReference"] for s in scopes["scopes"] if s["name"] == "Locals")
    variables: Any = result_of(
        await core.call("debug.inspect", {**sid, "kind": "variables", "variablesReference": ref})
    )
    return ref, {v["name"]: v["value"] for v in variables["variables"]}


async def test_debugpy_set_variable_goto_step_in_target_and_exception_details(
    core: Core, tmp_path: Path
) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    session_id, adapter_pid = await create(core, debugpy_adapter())
    assert adapter_pid is not None
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await core.call(
        "debug.setBreakpoints", {**sid, "path": str(program), "breakpoints": [{"line": CALL_LINE}]}
    )
    await core.call("debug.setExceptionBreakpoints", {**sid, "filters": [{"filterId": "raised"}]})
    await core.call(
        "debug.launch",
        {**sid, "configuration": {"program": str(program), "console": "internalConsole"}},
    )
    stopped = await events.next("stopped")
    thread_id = stopped["threadId"]
    frames = await frames_of(core, sid, thread_id)
    assert (frames[0]["name"], frames[0]["line"]) == ("outer", CALL_LINE)
    assert all(f["isFiltered"] is False for f in frames)  # all user code, no class filters
    frame_id = frames[0]["id"]

    # setVariable: the adapter's normalized replacement.
    ref, values = await locals_of(core, sid, frame_id)
    assert values["value"] == "10"
    replaced = result_of(
        await core.call(
            "debug.setVariable", {**sid, "variablesReference": ref, "name": "value", "value": "21"}
        )
    )
    assert replaced["value"] == "21"
    assert replaced["type"] == "int"
    assert (replaced["namedVariables"], replaced["indexedVariables"]) == (0, 0)
    assert (await locals_of(core, sid, frame_id))[1]["value"] == "21"

    # Run to cursor backwards: gotoTargets, then goto with the chosen target.
    targets: Any = result_of(
        await core.call(
            "debug.inspect",
            {**sid, "kind": "gotoTargets", "path": str(program), "line": VALUE_LINE},
        )
    )
    assert targets["targets"], targets
    target = targets["targets"][0]
    assert target["line"] == VALUE_LINE
    await core.call("debug.execute", {**sid, "command": "goto", "targetId": target["id"]})
    stopped = await events.next("stopped")
    assert stopped["reason"] == "goto"
    assert (await frames_of(core, sid, thread_id))[0]["line"] == VALUE_LINE
    await core.call("debug.execute", {**sid, "command": "next"})
    await events.next("stopped")
    frames = await frames_of(core, sid, thread_id)
    assert frames[0]["line"] == CALL_LINE
    frame_id = frames[0]["id"]
    assert (await locals_of(core, sid, frame_id))[1]["value"] == "10"  # re-executed

    # Smart step into: stepInTargets, then stepIn with a target.
    step_targets: Any = result_of(
        await core.call("debug.inspect", {**sid, "kind": "stepInTargets", "frameId": frame_id})
    )
    labels = [t["label"] for t in step_targets["targets"]]
    assert any("inner" in label for label in labels), labels
    chosen = next(t for t in step_targets["targets"] if "inner" in t["label"])
    await core.call("debug.execute", {**sid, "command": "stepIn", "targetId": chosen["id"]})
    await events.next("stopped")
    assert (await frames_of(core, sid, thread_id))[0]["name"] == "inner"

    # Refused before anything is sent: capabilities debugpy lacks, targets where not allowed.
    refusals: list[tuple[JSONObject, str]] = [
        ({"command": "stepBack"}, "not_supported"),
        ({"command": "next", "targetId": 1}, "invalid_request"),
        ({"command": "goto"}, "invalid_request"),
    ]
    for payload, code in refusals:
        with pytest.raises(CoreError) as info:
            await core.call("debug.execute", {**sid, **payload})
        assert info.value.code == code, payload
    with pytest.raises(CoreError) as info:
        await core.call("debug.dataBreakpointInfo", {**sid, "name": "x", "frameId": frame_id})
    assert info.value.code == "not_supported"
    kept = result_of(
        await core.call("debug.setDataBreakpoints", {**sid, "breakpoints": [{"dataId": "d"}]})
    )
    assert kept == {"breakpoints": [{"dataId": "d", "enabled": True}], "sent": False}

    # The raised ValueError: normalized exception details.
    await core.call("debug.execute", {**sid, "command": "continue"})
    stopped = await events.next("stopped")
    while stopped["reason"] != "exception":
        await core.call("debug.execute", {**sid, "command": "continue"})
        stopped = await events.next("stopped")
    info_result: Any = result_of(
        await core.call(
            "debug.inspect", {**sid, "kind": "exceptionInfo", "threadId": stopped["threadId"]}
        )
    )
    assert info_result["exceptionId"] == "ValueError"
    assert info_result["description"] == "boom"
    assert info_result["breakMode"] == "always"
    details = info_result["details"]
    assert set(details) == {
        "message",
        "typeName",
        "fullTypeName",
        "evaluateName",
        "stackTrace",
        "innerException",
    }
    assert details["typeName"] == "ValueError"
    assert details["innerException"] == []

    await core.call("debug.execute", {**sid, "command": "continue"})
    terminated = await events.next("terminated")
    assert terminated["reason"] == "debuggeeTerminated"
    assert runs_no_more(adapter_pid)


async def test_fake_data_breakpoints_and_single_thread_continue(core: Core) -> None:
    session_id, adapter_pid = await create(core, {"executable": PY, "arguments": [FAKE, "threads"]})
    assert adapter_pid is not None
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    # Kept before configuration, then sent at configuration (enabled entries only).
    kept = result_of(
        await core.call(
            "debug.setDataBreakpoints",
            {
                **sid,
                "breakpoints": [
                    {"dataId": "b", "accessType": "write", "condition": "x > 1"},
                    {"dataId": "a", "enabled": False},
                ],
            },
        )
    )
    assert kept["sent"] is False
    kept_list: Any = kept["breakpoints"]
    assert [b["dataId"] for b in kept_list] == ["a", "b"]
    await core.call("debug.launch", {**sid, "configuration": {}})
    stopped = await events.next("stopped")
    assert stopped["threadId"] == 1
    info = result_of(
        await core.call(
            "debug.dataBreakpointInfo", {**sid, "name": "counter", "variablesReference": 7}
        )
    )
    assert info == {
        "dataId": "7/counter",
        "description": "counter",
        "accessTypes": ["write", "readWrite"],
        "canPersist": False,
    }
    sent = result_of(
        await core.call(
            "debug.setDataBreakpoints",
            {**sid, "breakpoints": [{"dataId": "7/counter", "accessType": "write"}]},
        )
    )
    assert sent["sent"] is True
    received: Any = result_of(
        await core.call("debug.inspect", {**sid, "kind": "evaluate", "expression": "received"})
    )
    data_requests = json.loads(received["result"])
    assert [r["arguments"] for r in data_requests] == [
        {"breakpoints": [{"dataId": "b", "accessType": "write", "condition": "x > 1"}]},
        {"breakpoints": [{"dataId": "7/counter", "accessType": "write"}]},
    ]

    # Thread 1 resumes alone; thread 2 stays stopped: the session stays paused.
    await core.call("debug.execute", {**sid, "command": "continue", "singleThread": True})
    continued = await events.next("continued")
    assert continued["allThreadsContinued"] is False
    listed: Any = await core.call("debug.listSessions", {})
    assert listed[0]["state"] == "paused"
    # A plain continue resumes everything.
    await core.call("debug.execute", {**sid, "command": "continue", "threadId": 2})
    continued = await events.next("continued")
    assert continued["allThreadsContinued"] is True
    listed = await core.call("debug.listSessions", {})
    assert listed[0]["state"] == "running"
    await core.call("debug.disconnect", sid)
    assert runs_no_more(adapter_pid)
