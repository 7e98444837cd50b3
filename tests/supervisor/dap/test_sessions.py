"""Debug sessions over DAP (issue 4), against debugpy and a small fake adapter."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from protocol import CoreError
from supervisor._process._tree import open_process_tree
from tests._procfs import runs_no_more
from tests.supervisor.cli.test_serve import serve_process

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue
    from supervisor._core._core import Core
    from supervisor._process._tree import ProcessTree

PY = sys.executable
FAKE = str(Path(__file__).parent.parent.parent / "peers" / "dap_fake.py")
WAIT_S = 60

TARGET = """\
import os


def add(a, b):
    total = a + b
    return total


numbers = [1, 2, 3]
result = add(numbers[0], 41)
print("result", result, os.getpid())
"""
BREAK_LINE = 5  # `total = a + b`


class Events:
    """Drains one session's events with ``debug.waitEvents`` and keeps all of them."""

    def __init__(self, core: Core, session_id: str) -> None:
        self.core = core
        self.session_id = session_id
        self.seen: list[JSONObject] = []
        self._taken: set[int] = set()

    async def next(self, name: str) -> JSONObject:
        """The first event called ``name`` not returned before (waiting for it)."""
        with trio.fail_after(WAIT_S):
            while True:
                for event in self.seen:
                    if event["event"] == name and event["seq"] not in self._taken:
                        self._taken.add(event["seq"])  # type: ignore[arg-type]
                        return event
                batch = await self.core.call(
                    "debug.waitEvents", {"sessionId": self.session_id, "timeoutMilliseconds": 5000}
                )
                assert isinstance(batch, dict)
                events = batch["events"]
                assert isinstance(events, list)
                self.seen.extend(e for e in events if isinstance(e, dict))

    def names(self, name: str) -> list[JSONObject]:
        return [e for e in self.seen if e["event"] == name]


def result_of(reply: JSONValue) -> JSONObject:
    assert isinstance(reply, dict)
    result = reply["result"]
    assert isinstance(result, dict)
    return result


async def create(core: Core, adapter: JSONObject, **extra: JSONValue) -> tuple[str, int | None]:
    reply = await core.call(
        "debug.createSession",
        {"adapterId": "test", "rootPath": os.getcwd(), "adapter": adapter, **extra},
    )
    assert isinstance(reply, dict)
    session_id = reply["sessionId"]
    pid = reply["adapterPid"]
    assert isinstance(session_id, str)
    assert pid is None or isinstance(pid, int)
    return session_id, pid


def debugpy_adapter() -> JSONObject:
    return {"executable": PY, "arguments": ["-m", "debugpy.adapter"]}


async def launch_to_breakpoint(core: Core, tmp_path: Path) -> tuple[str, int, Events, int]:
    target = tmp_path / "target.py"
    target.write_text(TARGET)
    session_id, adapter_pid = await create(core, debugpy_adapter())
    assert adapter_pid is not None
    events = Events(core, session_id)
    bp = await core.call(
        "debug.setBreakpoints",
        {
            "sessionId": session_id,
            "path": str(target),
            "breakpoints": [{"line": BREAK_LINE}, {"line": 11, "enabled": False}],
        },
    )
    assert result_of(bp)["sent"] is False  # kept until the adapter is initialized
    launched = await core.call(
        "debug.launch",
        {
            "sessionId": session_id,
            "operationId": "launch-1",
            "configuration": {
                "program": str(target),
                "console": "internalConsole",
                "cwd": str(tmp_path),
            },
        },
    )
    assert launched == {"operationId": "launch-1", "result": {"requestKind": "launch"}}
    stopped = await events.next("stopped")
    assert stopped["reason"] == "breakpoint"
    thread_id = stopped["threadId"]
    assert isinstance(thread_id, int)
    return session_id, adapter_pid, events, thread_id


async def test_debugpy_launch_stop_inspect_step_continue_to_exit(
    core: Core, tmp_path: Path
) -> None:
    session_id, adapter_pid, events, thread_id = await launch_to_breakpoint(core, tmp_path)
    capabilities = (await events.next("capabilities"))["capabilities"]
    assert isinstance(capabilities, dict)
    assert capabilities["supportsConfigurationDoneRequest"] is True
    sid: JSONObject = {"sessionId": session_id}

    stack = result_of(
        await core.call("debug.inspect", {**sid, "kind": "stackTrace", "threadId": thread_id})
    )
    frames = stack["stackFrames"]
    assert isinstance(frames, list)
    top = frames[0]
    assert isinstance(top, dict)
    assert (top["name"], top["line"]) == ("add", BREAK_LINE)
    frame_id = top["id"]
    scopes = result_of(
        await core.call("debug.inspect", {**sid, "kind": "scopes", "frameId": frame_id})
    )
    scope_list = scopes["scopes"]
    assert isinstance(scope_list, list)
    locals_ref = next(
        s["variablesReference"] for s in scope_list if isinstance(s, dict) and s["name"] == "Locals"
    )
    variables = result_of(
        await core.call(
            "debug.inspect", {**sid, "kind": "variables", "variablesReference": locals_ref}
        )
    )
    variable_list: Any = variables["variables"]
    values = {v["name"]: v["value"] for v in variable_list}
    assert values == {"a": "1", "b": "41"}
    evaluated = result_of(
        await core.call(
            "debug.inspect",
            {
                **sid,
                "kind": "evaluate",
                "expression": "__import__('os').getpid()",
                "frameId": frame_id,
            },
        )
    )
    debuggee_pid = int(str(evaluated["result"]))
    assert not runs_no_more(debuggee_pid)

    await core.call("debug.execute", {**sid, "command": "next", "operationId": "step"})
    stopped = await events.next("stopped")
    assert stopped["reason"] == "step"
    await core.call("debug.execute", {**sid, "command": "continue"})
    # debugpy may split one print into several `output` events ("result", " 42 ...\n").
    printed = str((await events.next("output"))["output"])
    while "result 42" not in printed:
        printed += str((await events.next("output"))["output"])
    terminated = await events.next("terminated")
    assert terminated["reason"] == "debuggeeTerminated"
    assert terminated["exitCode"] == 0, terminated
    assert runs_no_more(adapter_pid)
    assert runs_no_more(debuggee_pid)
    # Every operation ended exactly once.
    completed = [e["operationId"] for e in events.names("operationCompleted")]
    assert len(completed) == len(set(completed)) == 8
    assert not events.names("operationFailed")
    await core.call("debug.destroySession", sid)
    with pytest.raises(CoreError) as info:
        await core.call("debug.pollEvents", sid)
    assert info.value.code == "not_found"


async def test_debugpy_disconnect_while_paused_ends_debuggee_and_joins(
    core: Core, tmp_path: Path
) -> None:
    session_id, adapter_pid, events, _ = await launch_to_breakpoint(core, tmp_path)
    sid: JSONObject = {"sessionId": session_id}
    with pytest.raises(CoreError) as info:
        await core.call("debug.execute", {**sid, "command": "pause"})
    assert info.value.code == "invalid_request"  # refused, nothing sent
    with pytest.raises(CoreError) as info:
        await core.call("debug.destroySession", sid)
    assert info.value.code == "invalid_request"
    evaluated = result_of(
        await core.call(
            "debug.inspect", {**sid, "kind": "evaluate", "expression": "__import__('os').getpid()"}
        )
    )
    debuggee_pid = int(str(evaluated["result"]))
    results: list[JSONValue] = []

    async def disconnect() -> None:
        results.append(await core.call("debug.disconnect", sid))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(disconnect)
        nursery.start_soon(disconnect)
    assert results[0] == results[1]
    assert isinstance(results[0], dict)
    assert results[0]["state"] == "terminated"
    assert runs_no_more(adapter_pid)
    assert runs_no_more(debuggee_pid)
    await events.next("terminated")
    assert [e["state"] for e in events.names("stateChanged")][-2:] == ["terminating", "terminated"]
    await core.call("debug.destroySession", sid)


async def _listed(core: Core, session_id: str) -> JSONObject:
    """The session's entry in ``core.sessions`` (what a client that attaches reads)."""
    alive = await core.call("core.sessions", {})
    assert isinstance(alive, dict)
    sessions = alive["debugSessions"]
    assert isinstance(sessions, list)
    [entry] = [s for s in sessions if isinstance(s, dict) and s["sessionId"] == session_id]
    return entry


async def test_a_paused_session_gives_its_current_stop_to_a_client_that_attaches(
    core: Core, tmp_path: Path
) -> None:
    """Issue 30: while a session is paused its ``core.sessions`` (and ``debug.listSessions``)
    entry carries ``stop``, the ``stopped`` event that paused it -- the newest one, after a
    step -- so a client that did not see the event asks for the thread's stack again;
    once it runs, there is no ``stop``."""
    session_id, _, events, thread_id = await launch_to_breakpoint(core, tmp_path)
    sid: JSONObject = {"sessionId": session_id}
    fields = {"reason", "threadId", "allThreadsStopped", "description", "text", "hitBreakpointIds"}
    stopped = events.names("stopped")[-1]
    entry = await _listed(core, session_id)
    assert entry["state"] == "paused"
    stop = entry["stop"]
    assert isinstance(stop, dict)
    assert set(stop) == fields
    assert stop == {k: stopped[k] for k in fields}
    assert (stop["reason"], stop["threadId"]) == ("breakpoint", thread_id)
    listed = await core.call("debug.listSessions", {})
    assert isinstance(listed, list)
    assert [s["stop"] for s in listed if isinstance(s, dict)] == [stop]
    # The client that attaches asks for the stack of the stop's thread again.
    stack = result_of(
        await core.call(
            "debug.inspect", {**sid, "kind": "stackTrace", "threadId": stop["threadId"]}
        )
    )
    frames = stack["stackFrames"]
    assert isinstance(frames, list)
    assert as_line(frames[0]) == BREAK_LINE
    # A step: the newest stop replaces the first.
    await core.call("debug.execute", {**sid, "command": "next"})
    stepped = await events.next("stopped")
    entry = await _listed(core, session_id)
    assert entry["stop"] == {k: stepped[k] for k in fields}
    assert as_obj(entry["stop"])["reason"] == "step"
    # Running: no stop to give.
    await core.call("debug.execute", {**sid, "command": "continue"})
    await events.next("terminated")
    entry = await _listed(core, session_id)
    assert entry["state"] == "terminated"
    assert "stop" not in entry
    await core.call("debug.destroySession", sid)


def as_line(frame: JSONValue) -> JSONValue:
    assert isinstance(frame, dict)
    return frame["line"]


def as_obj(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict)
    return value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def listening_debuggee(tmp_path: Path) -> tuple[ProcessTree, int]:
    """A looping script under ``debugpy --listen`` on a free loopback port, waiting for a
    client to attach: the tree (the caller closes it) and the port."""
    script = tmp_path / "loop.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    port = free_port()
    debuggee = await open_process_tree(
        [PY, "-m", "debugpy", "--listen", f"127.0.0.1:{port}", "--wait-for-client", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return debuggee, port


async def test_debugpy_attach_over_loopback_tcp_leaves_debuggee_running(
    core: Core, tmp_path: Path
) -> None:
    debuggee, port = await listening_debuggee(tmp_path)
    try:
        session_id, adapter_pid = await create(
            core,
            {"transport": "tcpPort", "port": port, "connectTimeoutMilliseconds": 30_000},
        )
        assert adapter_pid is None  # we connect to the debuggee's adapter, we don't own it
        events = Events(core, session_id)
        await core.call(
            "debug.attach", {"sessionId": session_id, "configuration": {"justMyCode": True}}
        )
        threads = result_of(
            await core.call("debug.inspect", {"sessionId": session_id, "kind": "threads"})
        )
        assert threads["threads"]
        result = await core.call("debug.disconnect", {"sessionId": session_id})
        assert isinstance(result, dict)
        assert result["state"] == "terminated"
        await events.next("terminated")
        await trio.sleep(0.5)
        assert debuggee.returncode is None
        assert not runs_no_more(debuggee.pid)
    finally:
        await debuggee.aclose()


async def test_loopback_only_and_bad_payloads_start_nothing(core: Core) -> None:
    for adapter, code in (
        ({"transport": "tcpPort", "host": "10.1.2.3", "port": 5678}, "invalid_request"),
        ({"transport": "tcpPort", "host": "example.com", "port": 5678}, "invalid_request"),
        ({"transport": "tcpPort"}, "invalid_request"),
        ({"transport": "pipe", "executable": PY}, "invalid_request"),
        ({"executable": "/no/such/adapter"}, "launch_failed"),
    ):
        with pytest.raises(CoreError) as info:
            await create(core, adapter)  # type: ignore[arg-type]
        assert info.value.code == code, adapter
    assert await core.call("debug.listSessions", {}) == []


async def test_fake_crash_during_initialize_fails_pending_and_reports_exit(core: Core) -> None:
    session_id, _ = await create(core, {"executable": PY, "arguments": [FAKE, "crash-initialize"]})
    events = Events(core, session_id)
    with pytest.raises(CoreError) as info:
        await core.call("debug.launch", {"sessionId": session_id, "operationId": "l"})
    assert info.value.code == "cancelled"
    assert info.value.details is not None
    assert info.value.details["reason"] == "sessionEnded"
    terminated = await events.next("terminated")
    assert terminated["reason"] == "adapterExited"
    assert terminated["exitCode"] == 3
    assert "crashing during initialize" in str(terminated["stderrTail"])
    failed = events.names("operationFailed")
    assert [(e["operationId"], e["reason"]) for e in failed] == [("l", "sessionEnded")]
    assert not events.names("operationCompleted")


async def test_fake_never_answering_disconnect_is_ended(core: Core) -> None:
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "no-disconnect"]}
    )
    assert adapter_pid is not None
    events = Events(core, session_id)
    await core.call("debug.launch", {"sessionId": session_id})
    start = trio.current_time()
    result = await core.call("debug.disconnect", {"sessionId": session_id})
    took = trio.current_time() - start
    assert isinstance(result, dict)
    detail = result["terminated"]
    assert isinstance(detail, dict)
    assert detail["signal"] == 15  # ignored disconnect and stdin EOF; ended by SIGTERM
    assert detail["signalName"] == "SIGTERM"
    assert took >= 3.0  # 2 000 ms reply bound + 1 000 ms exit bound
    assert runs_no_more(adapter_pid)
    # Configuration ran on `initialized`: default exception filter, then configurationDone.
    await events.next("initialized")


async def test_a_second_disconnect_joins_and_does_not_hurry_the_first(core: Core) -> None:
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "no-disconnect"]}
    )
    assert adapter_pid is not None
    await core.call("debug.launch", {"sessionId": session_id})
    results: list[JSONValue] = []
    start = trio.current_time()

    async def disconnect(delay: float) -> None:
        await trio.sleep(delay)
        results.append(await core.call("debug.disconnect", {"sessionId": session_id}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(disconnect, 0)
        # During the first one's wait for the disconnect reply: it must not start the end.
        nursery.start_soon(disconnect, 0.5)
    took = trio.current_time() - start
    assert results[0] == results[1]
    assert isinstance(results[0], dict)
    detail = results[0]["terminated"]
    assert isinstance(detail, dict)
    assert detail["signalName"] == "SIGTERM"
    assert took >= 3.0  # the first stop's whole polite step ran: reply bound + exit bound
    assert runs_no_more(adapter_pid)


async def test_fake_late_response_after_cancel_and_timeout_changes_nothing(core: Core) -> None:
    session_id, _ = await create(core, {"executable": PY, "arguments": [FAKE, "late-response"]})
    events = Events(core, session_id)
    sid: JSONObject = {"sessionId": session_id}
    await core.call("debug.launch", sid)
    errors: list[CoreError] = []

    async def evaluate(operation_id: str, **extra: JSONValue) -> None:
        try:
            await core.call(
                "debug.inspect",
                {
                    **sid,
                    "kind": "evaluate",
                    "expression": "x",
                    "operationId": operation_id,
                    **extra,
                },
            )
        except CoreError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(evaluate, "held")
        with trio.fail_after(WAIT_S):
            # Polled: the fake adapter offers no event for "the request reached me".
            while await core.call(  # noqa: ASYNC110
                "debug.cancelOperation", {**sid, "operationId": "held", "reason": "cancelled"}
            ) != {"cancelled": True}:
                await trio.sleep(0.01)
    assert [e.code for e in errors] == ["cancelled"]
    await evaluate("deadline", timeoutMilliseconds=300)
    assert [e.code for e in errors] == ["cancelled", "timed_out"]
    # The late answers arrive (the fake answers on `cancel`); a normal request still works.
    plain = result_of(
        await core.call("debug.inspect", {**sid, "kind": "threads", "operationId": "after"})
    )
    assert plain == {"threads": []}
    while (await events.next("operationCompleted"))["operationId"] != "after":
        pass
    failed = [(e["operationId"], e["reason"]) for e in events.names("operationFailed")]
    completed = [e["operationId"] for e in events.names("operationCompleted")]
    assert failed == [("held", "cancelled"), ("deadline", "timedOut")]
    assert "held" not in completed
    assert "deadline" not in completed
    assert await core.call(
        "debug.cancelOperation", {**sid, "operationId": "held", "reason": "cancelled"}
    ) == {"cancelled": False}
    await core.call("debug.disconnect", sid)


async def test_fake_run_in_terminal_started_by_supervisor_and_ended_with_session(
    core: Core, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    program = tmp_path / "program.py"
    program.write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    )
    session_id, _ = await create(
        core,
        {"executable": PY, "arguments": [FAKE, "run-in-terminal", str(program)]},
        supportsRunInTerminalRequest=True,
    )
    events = Events(core, session_id)
    await core.call("debug.launch", {"sessionId": session_id})
    requested = await events.next("runInTerminalRequested")
    assert requested["handledBy"] == "supervisor"
    assert requested["env"] == {"FAKE_A": "1", "FAKE_B": "2"}
    pid = requested["processId"]
    assert isinstance(pid, int)
    assert not runs_no_more(pid)
    output = await events.next("output")
    assert f'"processId": {pid}' in str(output["output"])
    await core.call("debug.disconnect", {"sessionId": session_id})
    assert runs_no_more(pid)


async def host_terminal_session(core: Core) -> tuple[JSONObject, Events]:
    """A fake session whose launch asks to run the debuggee in a terminal, answered by the
    host (the Core's caller): ``{"sessionId": ...}`` and the session's events."""
    session_id, _ = await create(
        core,
        {"executable": PY, "arguments": [FAKE, "run-in-terminal", "unused.py"]},
        supportsRunInTerminalRequest=True,
        runInTerminal="host",
    )
    return {"sessionId": session_id}, Events(core, session_id)


async def test_fake_run_in_terminal_answered_by_host_once(core: Core, tmp_path: Path) -> None:
    sid, events = await host_terminal_session(core)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(functools.partial(core.call, "debug.launch", sid))
        requested = await events.next("runInTerminalRequested")
        assert requested["handledBy"] == "host"
        assert "processId" not in requested
        answer: JSONObject = {
            **sid,
            "requestId": requested["requestId"],
            "success": True,
            "processId": 4242,
        }
        assert await core.call("debug.runInTerminalResponse", answer) == {"accepted": True}
        assert await core.call("debug.runInTerminalResponse", answer) == {"accepted": False}
    output = await events.next("output")
    assert '"processId": 4242' in str(output["output"])
    await core.call("debug.disconnect", sid)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_fake_tcp_announced(core: Core, stream: str) -> None:
    mode = "tcp-announced" if stream == "stdout" else "tcp-announced-stderr"
    session_id, adapter_pid = await create(
        core,
        {
            "executable": PY,
            "arguments": [FAKE, mode, "PORT="],
            "transport": "tcpAnnounced",
            "announcePrefix": "PORT=",
            "announceStream": stream,
        },
    )
    sid: JSONObject = {"sessionId": session_id}
    await core.call("debug.launch", sid)
    evaluated = result_of(
        await core.call("debug.inspect", {**sid, "kind": "evaluate", "expression": "x"})
    )
    assert evaluated["result"] == "42"
    assert evaluated["namedVariables"] == 0  # the fake reports -3
    await core.call("debug.disconnect", sid)
    assert adapter_pid is not None
    assert runs_no_more(adapter_pid)


async def test_debugpy_through_serve(tmp_path: Path) -> None:
    target = tmp_path / "target.py"
    target.write_text(TARGET)
    async with serve_process() as client:
        await client.initialize()
        created = await client.request(
            "debug.createSession",
            {"adapterId": "debugpy", "rootPath": str(tmp_path), "adapter": debugpy_adapter()},
        )
        result = created["result"]
        assert isinstance(result, dict)
        sid: JSONObject = {"sessionId": result["sessionId"]}
        await client.request(
            "debug.setBreakpoints",
            {**sid, "path": str(target), "breakpoints": [{"line": BREAK_LINE}]},
        )
        launched = await client.request(
            "debug.launch",
            {
                **sid,
                "operationId": "L",
                "configuration": {"program": str(target), "console": "internalConsole"},
            },
        )
        assert "result" in launched, launched
        stopped: Any = None
        with trio.fail_after(WAIT_S):
            while stopped is None:
                batch = await client.request(
                    "debug.waitEvents", {**sid, "timeoutMilliseconds": 5000}
                )
                reply: Any = batch["result"]
                events: Any = reply["events"]
                stopped = next((e for e in events if e["event"] == "stopped"), None)
        stack = await client.request(
            "debug.inspect", {**sid, "kind": "stackTrace", "threadId": stopped["threadId"]}
        )
        stack_reply: Any = stack["result"]
        frames = stack_reply["result"]["stackFrames"]
        assert frames[0]["line"] == BREAK_LINE
        done = await client.request("debug.disconnect", sid)
        done_reply: Any = done["result"]
        assert done_reply["state"] == "terminated"
        await client.shut_down()
