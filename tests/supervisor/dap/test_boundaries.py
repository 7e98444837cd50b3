"""Debug sessions as supervision boundaries, and the drain after the adapter's exit.

An unexpected exception inside one session's task ends that session only: ``failed``, its
``terminated`` event with ``reason: "internal"`` and a crash report, its adapter gone, its
pending operations failed once; a sibling session and the Core go on. One inside an
operation fails that operation only; one inside a reverse request answers that request
``success: false``. Real adapters (``tests/peers/dap_fake.py``); the suite's leak guard proves
that nothing outlives a test.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
import trio

from protocol import CoreError
from supervisor._boundary import FaultPlan
from tests._faults import armed
from tests._procfs import runs_no_more
from tests.supervisor.dap.test_sessions import (
    FAKE,
    PY,
    WAIT_S,
    Events,
    create,
    result_of,
)

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject
    from supervisor._core._core import Core


def fake(mode: str, *args: str) -> JSONObject:
    return {"executable": PY, "arguments": [FAKE, mode, *args]}


async def _listed(core: Core, session_id: str) -> JSONObject:
    sessions = await core.call("debug.listSessions", {})
    assert isinstance(sessions, list)
    for entry in sessions:
        assert isinstance(entry, dict)
        if entry["sessionId"] == session_id:
            return entry
    raise AssertionError(f"no session {session_id}")


async def _sibling_works(core: Core) -> None:
    session_id, adapter_pid = await create(core, fake("normal"))
    sid: JSONObject = {"sessionId": session_id}
    await core.call("debug.launch", sid)
    threads = result_of(await core.call("debug.inspect", {**sid, "kind": "threads"}))
    assert threads == {"threads": []}
    await core.call("debug.disconnect", sid)
    await core.call("debug.destroySession", sid)
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)


@pytest.mark.parametrize(
    ("site", "mode"),
    [
        ("dap.initialize", "normal"),
        ("dap.writer", "normal"),
        ("dap.reader", "normal"),
        ("dap.configure", "normal"),
        ("dap.drain", "stderr"),
        # The adapter exits while a child holds its output open: the exit watcher sees the
        # exit first.
        ("dap.exit", "exit-leaving-child"),
    ],
)
async def test_a_failure_inside_a_session_ends_that_session_only(
    core: Core, site: str, mode: str
) -> None:
    plan = FaultPlan(sites=(site,))
    with armed(plan):
        session_id, adapter_pid = await create(core, fake(mode))
        events = Events(core, session_id)
        sid: JSONObject = {"sessionId": session_id}
        launch_error: CoreError | None = None
        try:
            await core.call("debug.launch", {**sid, "operationId": "l"})
        except CoreError as exc:
            launch_error = exc
        terminated = await events.next("terminated")
    assert plan.fired == [site]
    assert terminated["reason"] == "internal"
    report = terminated["crashReport"]
    assert isinstance(report, dict)
    assert (report["exceptionType"], report["message"]) == (
        "InjectedFault",
        f"injected fault at {site}",
    )
    assert isinstance(report["stderrTail"], list)
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)
    listed = await _listed(core, session_id)
    assert (listed["state"], listed["reason"], listed["crashReport"]) == (
        "failed",
        "internal",
        report,
    )
    # The launch ended exactly once: answered, or failed because the session ended (or was
    # refused when the session had already failed).
    failed = [e for e in events.names("operationFailed") if e["operationId"] == "l"]
    completed = [e for e in events.names("operationCompleted") if e["operationId"] == "l"]
    if launch_error is None:
        assert (len(completed), len(failed)) == (1, 0)
    elif launch_error.code == "cancelled":
        assert launch_error.details is not None
        assert launch_error.details["sessionEndReason"] == "internal"
        assert (len(completed), len(failed)) == (0, 1)
    else:
        assert launch_error.code == "invalid_request"
        assert (completed, failed) == ([], [])
    await _sibling_works(core)
    assert await core.call("core.ping", {})
    await core.call("debug.destroySession", sid)


async def test_a_pending_operation_ends_once_when_its_session_fails(core: Core) -> None:
    session_id, adapter_pid = await create(core, fake("late-response"))
    events = Events(core, session_id)
    sid: JSONObject = {"sessionId": session_id}
    await core.call("debug.launch", sid)
    errors: list[CoreError] = []

    async def evaluate() -> None:
        try:
            await core.call(
                "debug.inspect",
                {**sid, "kind": "evaluate", "expression": "x", "operationId": "held"},
            )
        except CoreError as exc:
            errors.append(exc)

    plan = FaultPlan(sites=("dap.reader",))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(evaluate)
        # The fake holds the answer to evaluate; the next message it writes (the answer to
        # this threads request) makes the reader raise while evaluate is pending.
        await trio.sleep(0.2)
        with armed(plan):
            with pytest.raises(CoreError) as info:
                await core.call("debug.inspect", {**sid, "kind": "threads", "operationId": "t"})
            terminated = await events.next("terminated")
    assert plan.fired == ["dap.reader"]
    assert info.value.code == "cancelled"
    assert terminated["reason"] == "internal"
    assert [e.code for e in errors] == ["cancelled"]
    assert errors[0].details is not None
    assert errors[0].details["sessionEndReason"] == "internal"
    failed = [(e["operationId"], e["reason"]) for e in events.names("operationFailed")]
    assert sorted(failed) == [("held", "sessionEnded"), ("t", "sessionEnded")]
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)
    assert await core.call("core.ping", {})
    await core.call("debug.destroySession", sid)


async def test_a_failure_inside_one_operation_fails_that_operation_only(core: Core) -> None:
    session_id, _ = await create(core, fake("normal"))
    events = Events(core, session_id)
    sid: JSONObject = {"sessionId": session_id}
    await core.call("debug.launch", sid)
    plan = FaultPlan(sites=("dap.operation",))
    with armed(plan), pytest.raises(CoreError) as info:
        await core.call("debug.inspect", {**sid, "kind": "threads", "operationId": "bad"})
    assert info.value.code == "internal"
    assert info.value.details == {"operationId": "bad", "reason": "internal"}
    assert "InjectedFault" in info.value.message
    failed = await events.next("operationFailed")
    assert (failed["operationId"], failed["reason"], failed["code"]) == (
        "bad",
        "internal",
        "internal",
    )
    # The session goes on.
    assert (await _listed(core, session_id))["state"] == "running"
    threads = result_of(await core.call("debug.inspect", {**sid, "kind": "threads"}))
    assert threads == {"threads": []}
    await core.call("debug.disconnect", sid)


async def test_a_failure_inside_a_reverse_request_answers_it_and_the_session_goes_on(
    core: Core, tmp_path: Path
) -> None:
    program = tmp_path / "never_started.py"
    program.write_text("print('should not run')\n")
    session_id, _ = await create(
        core, fake("run-in-terminal", str(program)), supportsRunInTerminalRequest=True
    )
    events = Events(core, session_id)
    sid: JSONObject = {"sessionId": session_id}
    plan = FaultPlan(sites=("dap.reverse",))
    with armed(plan):
        await core.call("debug.launch", sid)
        while True:
            output = await events.next("output")
            if "terminalReply" in str(output["output"]):
                break
    assert plan.fired == ["dap.reverse"]
    assert json.loads(str(output["output"]))["success"] is False
    assert not events.names("runInTerminalRequested")
    assert (await _listed(core, session_id))["state"] == "running"
    threads = result_of(await core.call("debug.inspect", {**sid, "kind": "threads"}))
    assert threads == {"threads": []}
    await core.call("debug.disconnect", sid)


async def test_an_adapter_that_answers_and_exits_at_once_loses_nothing(core: Core) -> None:
    """Its launch response, its ``output`` event and its stderr line, all written just
    before it exits, reach us: the session drains the adapter's output after its exit."""
    session_id, adapter_pid = await create(core, fake("say-and-exit"))
    events = Events(core, session_id)
    sid: JSONObject = {"sessionId": session_id}
    launched = result_of(await core.call("debug.launch", sid))
    assert launched == {"requestKind": "launch"}
    output = await events.next("output")
    assert output["output"] == "last words\n"
    terminated = await events.next("terminated")
    assert terminated["reason"] == "adapterExited"
    assert (terminated["exitCode"], terminated["signal"], terminated["signalName"]) == (
        0,
        None,
        None,
    )
    assert terminated["stderrTail"] == ["last stderr line"]
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)
    with trio.fail_after(WAIT_S):
        await core.call("debug.destroySession", sid)


async def test_a_failure_inside_a_run_in_terminal_terminal_ends_that_terminal_only(
    core: Core, tmp_path: Path
) -> None:
    program = tmp_path / "program.py"
    program.write_text(
        "import time\nprint('hello from the terminal', flush=True)\ntime.sleep(600)\n"
    )
    session_id, _ = await create(
        core, fake("run-in-terminal", str(program)), supportsRunInTerminalRequest=True
    )
    events = Events(core, session_id)
    sid: JSONObject = {"sessionId": session_id}
    plan = FaultPlan(sites=("terminal.reader",))
    with armed(plan):
        await core.call("debug.launch", sid)
        requested = await events.next("runInTerminalRequested")
        exited = await events.next("runInTerminalExited")
    assert plan.fired == ["terminal.reader"]
    pid = requested["processId"]
    assert isinstance(pid, int)
    assert (exited["requestId"], exited["processId"]) == (requested["requestId"], pid)
    assert exited["reason"] == "internal"
    report = exited["crashReport"]
    assert isinstance(report, dict)
    assert report["exceptionType"] == "InjectedFault"
    assert runs_no_more(pid)
    # The session goes on.
    assert (await _listed(core, session_id))["state"] == "running"
    threads = result_of(await core.call("debug.inspect", {**sid, "kind": "threads"}))
    assert threads == {"threads": []}
    await core.call("debug.disconnect", sid)
