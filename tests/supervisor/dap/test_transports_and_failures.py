"""Debug sessions (issue 4), the second round: runInTerminal in a PTY, TCP to an adapter we
start, exceptionInfo and terminate against debugpy, an adapter that stops reading, a broken
frame, ``$/cancelRequest`` through ``supervisor serve``, and the failure reasons."""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING, Any

import pytest
import trio

from protocol import CoreError
from tests._procfs import runs_no_more
from tests.supervisor.cli.test_serve import serve_process
from tests.supervisor.dap.test_sessions import (
    FAKE,
    PY,
    WAIT_S,
    Events,
    create,
    debugpy_adapter,
    free_port,
    host_terminal_session,
    listening_debuggee,
    result_of,
)

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor._core._core import Core

PROGRAM = """\
import os
import sys

print("tty", os.isatty(1), flush=True)
value = 41
value += 1
print("value", value, flush=True)
"""

RAISES = """\
def fail():
    raise ValueError("boom")


try:
    fail()
except ValueError:
    pass
print("after")
"""


async def launch(
    core: Core, session_id: str, configuration: JSONObject, operation_id: str = "launch"
) -> None:
    await core.call(
        "debug.launch",
        {"sessionId": session_id, "operationId": operation_id, "configuration": configuration},
    )


async def test_debugpy_integrated_terminal_runs_in_a_supervised_pty(
    core: Core, tmp_path: Path
) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    session_id, adapter_pid = await create(
        core, debugpy_adapter(), supportsRunInTerminalRequest=True
    )
    events = Events(core, session_id)
    sid: JSONObject = {"sessionId": session_id}
    await core.call(
        "debug.setBreakpoints", {**sid, "path": str(program), "breakpoints": [{"line": 6}]}
    )
    await launch(
        core,
        session_id,
        {"program": str(program), "console": "integratedTerminal", "cwd": str(tmp_path)},
    )
    requested = await events.next("runInTerminalRequested")
    assert requested["handledBy"] == "supervisor"
    assert requested["kind"] == "integrated"
    launcher_pid = requested["processId"]
    assert isinstance(launcher_pid, int)
    stopped = await events.next("stopped")
    assert stopped["reason"] == "breakpoint"
    evaluated = result_of(
        await core.call(
            "debug.inspect",
            {**sid, "kind": "evaluate", "expression": "__import__('os').getpid()"},
        )
    )
    debuggee_pid = int(str(evaluated["result"]))
    assert not runs_no_more(debuggee_pid)
    # The program's output reaches us through the PTY (isatty is true there).
    # A PTY read may end anywhere in the line, so its text can span several events; the
    # adapter's own output events (no requestId) are interleaved with them.
    printed = ""
    while "tty True" not in printed:
        output = await events.next("output")
        if output.get("requestId") == requested["requestId"]:
            printed += str(output["output"])
    await core.call("debug.disconnect", sid)
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)
    assert runs_no_more(launcher_pid)
    assert runs_no_more(debuggee_pid)


async def test_run_in_terminal_refused_unless_advertised(core: Core, tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print('never')\n")
    session_id, _ = await create(
        core, {"executable": PY, "arguments": [FAKE, "run-in-terminal", str(program)]}
    )
    events = Events(core, session_id)
    await core.call("debug.launch", {"sessionId": session_id})
    output = await events.next("output")
    reply = json.loads(str(output["output"]))
    assert reply["success"] is False  # the client never advertised supportsRunInTerminalRequest
    assert not events.names("runInTerminalRequested")
    await core.call("debug.disconnect", {"sessionId": session_id})


async def test_host_terminal_request_fails_at_disconnect_and_late_answer_ignored(
    core: Core,
) -> None:
    sid, events = await host_terminal_session(core)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(core.call, "debug.launch", sid))
        requested = await events.next("runInTerminalRequested")
        # The fake answers launch after our (failed) terminal reply, so launch completes.
        await core.call("debug.disconnect", sid)
    answer: JSONObject = {
        **sid,
        "requestId": requested["requestId"],
        "success": True,
        "processId": 4242,
    }
    assert await core.call("debug.runInTerminalResponse", answer) == {"accepted": False}


async def test_debugpy_adapter_we_start_over_tcp_port(core: Core, tmp_path: Path) -> None:
    program = tmp_path / "short.py"
    program.write_text("print('over tcp', 6 * 7)\n")
    port = free_port()
    session_id, adapter_pid = await create(
        core,
        {
            "executable": PY,
            "arguments": ["-m", "debugpy.adapter", "--host", "127.0.0.1", "--port", str(port)],
            "transport": "tcpPort",
            "port": port,
            "connectTimeoutMilliseconds": 30_000,
        },
    )
    assert adapter_pid is not None
    events = Events(core, session_id)
    await launch(core, session_id, {"program": str(program), "console": "internalConsole"})
    terminated = await events.next("terminated")
    printed = "".join(str(e["output"]) for e in events.names("output") if e["category"] == "stdout")
    assert "over tcp 42" in printed
    assert terminated["reason"] == "debuggeeTerminated"
    assert runs_no_more(adapter_pid)
    # The adapter's port is closed afterwards.
    with pytest.raises(OSError, match="onnect"):
        await trio.open_tcp_stream("127.0.0.1", port)


async def test_debugpy_exception_info_refused_restart_and_terminate(
    core: Core, tmp_path: Path
) -> None:
    program = tmp_path / "raises.py"
    program.write_text(RAISES)
    session_id, adapter_pid = await create(core, debugpy_adapter())
    events = Events(core, session_id)
    sid: JSONObject = {"sessionId": session_id}
    filters = result_of(
        await core.call(
            "debug.setExceptionBreakpoints",
            {**sid, "filters": [{"filterId": "uncaught"}, {"filterId": "raised"}]},
        )
    )
    assert filters["sent"] is False  # kept for the configuration on `initialized`
    await launch(core, session_id, {"program": str(program), "console": "internalConsole"})
    stopped = await events.next("stopped")
    assert stopped["reason"] == "exception"
    thread_id = stopped["threadId"]
    info = result_of(
        await core.call("debug.inspect", {**sid, "kind": "exceptionInfo", "threadId": thread_id})
    )
    assert "ValueError" in str(info["exceptionId"])
    assert info["breakMode"] in ("always", "unhandled", "userUnhandled")
    capabilities = (await events.next("capabilities"))["capabilities"]
    assert isinstance(capabilities, dict)
    evaluated = result_of(
        await core.call(
            "debug.inspect", {**sid, "kind": "evaluate", "expression": "__import__('os').getpid()"}
        )
    )
    debuggee_pid = int(str(evaluated["result"]))
    if not capabilities.get("supportsRestartRequest"):
        with pytest.raises(CoreError) as refused:
            await core.call(
                "debug.execute", {**sid, "command": "restart", "operationId": "restart"}
            )
        assert refused.value.code == "not_supported"
        assert refused.value.details == {"operationId": "restart", "reason": "refused"}
        failed = await events.next("operationFailed")
        assert (failed["operationId"], failed["reason"], failed["code"]) == (
            "restart",
            "refused",
            "not_supported",
        )
    # The adapter's own refusal says so.
    with pytest.raises(CoreError) as refused:
        await core.call(
            "debug.inspect",
            {**sid, "operationId": "bad", "kind": "evaluate", "expression": "no_such_name"},
        )
    assert refused.value.code == "invalid_request"
    assert refused.value.details is not None
    assert (refused.value.details["operationId"], refused.value.details["reason"]) == (
        "bad",
        "adapterError",
    )
    failed = await events.next("operationFailed")
    assert (failed["operationId"], failed["reason"], failed["code"]) == (
        "bad",
        "adapterError",
        "invalid_request",
    )
    assert capabilities["supportsTerminateRequest"] is True
    await core.call("debug.execute", {**sid, "command": "terminate", "operationId": "end"})
    terminated = await events.next("terminated")
    assert terminated["reason"] == "debuggeeTerminated"
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)
    assert runs_no_more(debuggee_pid)


async def _evaluate_more_than_a_pipe_holds(core: Core, session_id: str) -> JSONValue:
    """An evaluate request (operation ``big``) of 1 MiB: far more than a pipe holds, so a
    writer to an adapter that does not read blocks in the middle of it."""
    return await core.call(
        "debug.inspect",
        {
            "sessionId": session_id,
            "operationId": "big",
            "kind": "evaluate",
            "expression": "x" * (1 << 20),
        },
    )


async def test_adapter_that_stops_reading_stalls_only_its_session(core: Core) -> None:
    stalled, stalled_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "stop-reading"]}
    )
    healthy, _ = await create(core, {"executable": PY, "arguments": [FAKE, "normal"]})
    await core.call("debug.launch", {"sessionId": stalled})
    await core.call("debug.launch", {"sessionId": healthy})
    errors: list[CoreError] = []

    async def big_evaluate() -> None:
        try:
            await _evaluate_more_than_a_pipe_holds(core, stalled)
        except CoreError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(big_evaluate)
        # Another session (and the Core) keep working meanwhile.
        for _ in range(3):
            evaluated = result_of(
                await core.call(
                    "debug.inspect", {"sessionId": healthy, "kind": "evaluate", "expression": "x"}
                )
            )
            assert evaluated["result"] == "42"
        result = await core.call("debug.disconnect", {"sessionId": stalled})
    assert isinstance(result, dict)
    detail = result["terminated"]
    assert isinstance(detail, dict)
    assert detail["reason"] == "disconnected"
    assert detail["signal"] == 15  # it read nothing, not even stdin EOF: ended by SIGTERM
    assert detail["signalName"] == "SIGTERM"
    assert stalled_pid is not None
    assert runs_no_more(stalled_pid)
    assert [(e.code, e.details) for e in errors] == [
        (
            "cancelled",
            {"operationId": "big", "reason": "sessionEnded", "sessionEndReason": "disconnected"},
        )
    ]
    await core.call("debug.disconnect", {"sessionId": healthy})


async def _ended_by_session(
    error: CoreError, events: Events, operation_id: str, end_reason: str
) -> None:
    """``error`` cancelled ``operation_id`` because its session ended with ``end_reason``,
    and the session's ``terminated`` event gives that same reason."""
    assert error.code == "cancelled"
    assert error.details == {
        "operationId": operation_id,
        "reason": "sessionEnded",
        "sessionEndReason": end_reason,
    }
    terminated = await events.next("terminated")
    assert terminated["reason"] == end_reason


async def test_an_adapter_that_stops_reading_is_never_ended_for_it(core: Core) -> None:
    """Issue 25: no write timeout ends a debug session any more (it used to end it
    ``adapterNotReading`` after 10 s). The blocked operation ends at its own deadline, the
    session stays up, and a stop ends the adapter by the ladder."""
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "stop-reading"]}
    )
    events = Events(core, session_id)
    await core.call("debug.launch", {"sessionId": session_id})
    started = trio.current_time()
    with pytest.raises(CoreError) as info:
        await core.call(
            "debug.inspect",
            {
                "sessionId": session_id,
                "operationId": "big",
                "kind": "evaluate",
                "expression": "x" * (1 << 20),
            },
            timeout_ms=12_000,
        )
    assert info.value.code == "timed_out"
    assert trio.current_time() - started >= 11.5  # past the old 10 s write timeout
    batch = await core.call("debug.pollEvents", {"sessionId": session_id})
    assert isinstance(batch, dict)
    assert isinstance(batch["events"], list)
    events.seen.extend(e for e in batch["events"] if isinstance(e, dict))
    assert events.names("terminated") == []
    result = await core.call("debug.disconnect", {"sessionId": session_id})
    assert isinstance(result, dict)
    detail = result["terminated"]
    assert isinstance(detail, dict)
    assert detail["reason"] == "disconnected"
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)


async def test_broken_frame_ends_session_with_protocol_error_once(core: Core) -> None:
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "broken-header"]}
    )
    events = Events(core, session_id)
    with pytest.raises(CoreError) as info:
        await core.call("debug.launch", {"sessionId": session_id, "operationId": "l"})
    await _ended_by_session(info.value, events, "l", "protocolError")
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)
    failed = [(e["operationId"], e["reason"]) for e in events.names("operationFailed")]
    assert failed == [("l", "sessionEnded")]
    assert not events.names("operationCompleted")
    with pytest.raises(CoreError) as info:
        await core.call("debug.inspect", {"sessionId": session_id, "kind": "threads"})
    assert info.value.code == "invalid_request"
    assert info.value.details is not None
    assert info.value.details["reason"] == "refused"


async def test_an_oversized_frame_ends_the_session_as_a_language_server_would(
    core: Core,
) -> None:
    """The byte loop is the one language servers have (``supervisor._transport``): a frame
    announced past the 64 MiB body limit is refused from its header, before its body is read,
    and ends the session ``protocolError`` once, leaving nothing running."""
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "oversized"]}
    )
    events = Events(core, session_id)
    with trio.fail_after(WAIT_S), pytest.raises(CoreError) as info:
        await core.call("debug.launch", {"sessionId": session_id, "operationId": "l"})
    await _ended_by_session(info.value, events, "l", "protocolError")
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)


async def test_stray_text_between_frames_is_skipped_and_the_session_goes_on(
    core: Core, caplog: pytest.LogCaptureFixture
) -> None:
    """An adapter that prints stray lines between its frames (a debug ``print`` on stdout)
    keeps working, as a language server does: the stray bytes are skipped and counted in a
    warning that never shows them."""
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "stray-text"]}
    )
    with trio.fail_after(WAIT_S):
        await core.call("debug.launch", {"sessionId": session_id, "operationId": "l"})
        threads = await core.call("debug.inspect", {"sessionId": session_id, "kind": "threads"})
    assert isinstance(threads, dict)
    skipped = [r.getMessage() for r in caplog.records if "stray text" in r.getMessage()]
    assert skipped
    assert all("a stray print" not in message for message in skipped)
    await core.call("debug.disconnect", {"sessionId": session_id})
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)


async def test_stray_text_past_its_bound_ends_the_session_as_a_language_server_would(
    core: Core,
) -> None:
    """More than 64 KiB of text with no frame in it is an adapter that does not speak DAP on
    that stream (the same bound a language server has, ``supervisor._transport``): the
    session ends ``protocolError`` once, the launch waiting on it is cancelled with that
    reason, the answer written after the flood is never taken for one, and the adapter
    (which would sleep for ever) is ended."""
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "stray-flood"]}
    )
    events = Events(core, session_id)
    with trio.fail_after(WAIT_S), pytest.raises(CoreError) as info:
        await core.call("debug.launch", {"sessionId": session_id, "operationId": "l"})
    await _ended_by_session(info.value, events, "l", "protocolError")
    assert not events.names("operationCompleted")
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)


async def test_an_adapter_that_never_answers_initialize_ends_at_its_deadline(core: Core) -> None:
    """An adapter that reads its input and never answers ``initialize`` used to keep its
    session ``initializing`` for ever, and a ``debug.launch`` waiting on it. Past
    ``initializeTimeoutMilliseconds`` the session ends (``initializeTimeout``), the waiting
    launch ends once with it, and the adapter is gone."""
    silent: JSONObject = {
        "executable": PY,
        "arguments": ["-c", "import sys\nwhile sys.stdin.buffer.read(1): pass"],
        "initializeTimeoutMilliseconds": 300,
    }
    session_id, adapter_pid = await create(core, silent)
    events = Events(core, session_id)
    with trio.fail_after(WAIT_S), pytest.raises(CoreError) as info:
        await core.call("debug.launch", {"sessionId": session_id, "operationId": "l"})
    await _ended_by_session(info.value, events, "l", "initializeTimeout")
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)


async def test_cancel_request_through_serve_cancels_pending_operation(core: Core) -> None:
    # `core` only reaps: should serve die, its adapter is re-parented to this process.
    del core
    async with serve_process() as client:
        await client.initialize()
        created: Any = await client.request(
            "debug.createSession",
            {
                "adapterId": "fake",
                "rootPath": os.getcwd(),
                "adapter": {"executable": PY, "arguments": [FAKE, "late-response"]},
            },
        )
        sid: JSONObject = {"sessionId": created["result"]["sessionId"]}
        assert "result" in await client.request("debug.launch", sid)
        seen: list[Any] = []

        async def drain() -> None:
            batch: Any = await client.request("debug.pollEvents", sid)
            seen.extend(batch["result"]["events"])

        cancelled_ids: set[str] = set()
        with trio.fail_after(WAIT_S):
            for attempt in range(1, 50):
                request_id = f"evaluate-{attempt}"
                await client.send(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": "debug.inspect",
                        # The Core passes no envelope id to handlers: name it twice.
                        "params": {
                            **sid,
                            "operationId": request_id,
                            "kind": "evaluate",
                            "expression": "x",
                        },
                    }
                )
                # Polled: nothing tells a serve client "the request reached the adapter".
                await trio.sleep(0.05 * attempt)
                await client.notify("$/cancelRequest", {"id": request_id})
                reply: Any = await client.reply_to(request_id)
                assert reply["error"]["code"] == -32800, reply
                # Cancelled before it reached the debug service, the reply has no Core code.
                assert reply["error"].get("data", {"code": "cancelled"})["code"] == "cancelled"
                await drain()
                if any(
                    e["event"] == "operationFailed" and e["operationId"] == request_id for e in seen
                ):
                    cancelled_ids.add(request_id)
                    break
        (request_id,) = cancelled_ids
        failed = [e for e in seen if e["event"] == "operationFailed"]
        assert [(e["operationId"], e["reason"], e["code"]) for e in failed][-1] == (
            request_id,
            "cancelled",
            "cancelled",
        )
        # DAP `cancel` reached the adapter; its late answer changed nothing.
        with trio.fail_after(WAIT_S):
            while not any(e["event"] == "output" and "cancel" in e["output"] for e in seen):
                await trio.sleep(0.05)
                await drain()
        assert not any(
            e["event"] == "operationCompleted" and e["operationId"] == request_id for e in seen
        )
        assert "result" in await client.request("debug.disconnect", sid)
        await client.shut_down()


async def test_debugpy_attach_through_serve_leaves_debuggee_running(
    core: Core, tmp_path: Path
) -> None:
    # `core` reaps: debugpy --listen runs its adapter as a child of the debuggee, which
    # this (subreaper) test process inherits when the debuggee's tree ends.
    debuggee, port = await listening_debuggee(tmp_path)
    try:
        async with serve_process() as client:
            await client.initialize()
            created: Any = await client.request(
                "debug.createSession",
                {
                    "adapterId": "debugpy",
                    "rootPath": str(tmp_path),
                    "adapter": {
                        "transport": "tcpPort",
                        "port": port,
                        "connectTimeoutMilliseconds": 30_000,
                    },
                },
            )
            sid: JSONObject = {"sessionId": created["result"]["sessionId"]}
            attached = await client.request(
                "debug.attach", {**sid, "configuration": {"justMyCode": True}}
            )
            assert "result" in attached, attached
            threads: Any = await client.request("debug.inspect", {**sid, "kind": "threads"})
            assert threads["result"]["result"]["threads"]
            done: Any = await client.request("debug.disconnect", sid)
            assert done["result"]["state"] == "terminated"
            await client.shut_down()
            assert debuggee.returncode is None
            assert not runs_no_more(debuggee.pid)
    finally:
        with trio.CancelScope(shield=True):
            await debuggee.aclose()


LSP_FAKE = os.path.join(os.path.dirname(FAKE), "lsp_fake.py")


async def test_tcp_language_server_adapter_lives_in_the_language_server(
    core: Core, tmp_path: Path
) -> None:
    """plugin-contract.md ``tcpLanguageServer`` (issue 16): the language server answers a
    command with the port of the debug adapter it hosts (as JDT LS hosts the Java Debug Server)."""
    started = await core.call(
        "lsp.startServer",
        {
            "serverId": "fake",
            "executable": PY,
            "arguments": [LSP_FAKE],
            "workingDirectory": str(tmp_path),
            "rootUri": "file://" + str(tmp_path),
        },
    )
    assert isinstance(started, dict)
    lsp_id = started["sessionId"]
    adapter: JSONObject = {
        "transport": "tcpLanguageServer",
        "languageServerSessionId": lsp_id,
        "command": "test.startDebugServer",
    }
    session_id, adapter_pid = await create(core, adapter)
    assert adapter_pid is None  # the language server owns the adapter
    sid: JSONObject = {"sessionId": session_id}
    await core.call("debug.launch", sid)
    evaluated = result_of(
        await core.call("debug.inspect", {**sid, "kind": "evaluate", "expression": "x"})
    )
    assert evaluated["result"] == "42"
    await core.call("debug.disconnect", sid)
    # Bad endpoints start nothing.
    refused: list[tuple[JSONObject, str]] = [
        ({**adapter, "languageServerSessionId": "lsp-99"}, "not_found"),
        ({**adapter, "command": "has space"}, "invalid_request"),
        ({**adapter, "executable": PY}, "invalid_request"),
        ({"executable": PY, "command": "x"}, "invalid_request"),
        ({**adapter, "command": "test.unknown"}, "launch_failed"),
    ]
    for bad, code in refused:
        with pytest.raises(CoreError) as info:
            await create(core, bad)
        assert info.value.code == code, bad
    await core.call("lsp.stopServer", {"sessionId": lsp_id})
