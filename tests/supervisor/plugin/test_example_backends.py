"""Plugin backends end to end (issue 6): the SDK's example backends driven by the supervisor.

The backends are the real programs in ``examples/backends/`` (written with
``supervisor.plugin_sdk``), started by ``lsp.startServer`` with ``pluginId`` and driven
through the Core's Python API and through ``supervisor serve`` with a plain framed client.
Every call's processes are found by the scope marker of the backend that started them
(``SUPERVISOR_SCOPE=<backend pid>.<start>/...``) and must be gone when the call ends.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from protocol import CoreError
from supervisor import open_core
from supervisor._process._procfs import all_pids, read_env_var
from tests._procfs import collect_if_adopted, runs_no_more
from tests.supervisor.lsp._support import PY, WAIT_S, Session, as_obj, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.cli.test_serve import Client

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "backends"
TOOLS = "dev.example.tools"
TOOL_FUNCTIONS = [
    "tool.compile",
    "tool.disableExtra",
    "tool.enableExtra",
    "tool.hostFlood",
    "tool.noisy",
    "tool.run",
    "tool.version",
]


# -- helpers --------------------------------------------------------------------------------


def scoped_pids(backend_pid: int) -> set[int]:
    """Live processes a backend started (their marker names the backend's instance)."""
    found = set()
    for pid in all_pids():
        marker = read_env_var(pid, "SUPERVISOR_SCOPE")
        if marker is not None and marker.startswith(f"{backend_pid}.") and not runs_no_more(pid):
            found.add(pid)
    return found


async def wait_scoped(backend_pid: int, count: int) -> set[int]:
    """Wait until the backend runs at least ``count`` processes (polling /proc: no event)."""
    with trio.fail_after(WAIT_S):
        while len(pids := scoped_pids(backend_pid)) < count:  # noqa: ASYNC110 - /proc poll
            await trio.sleep(0.05)
    return pids


async def wait_gone(pids: set[int]) -> None:
    with trio.fail_after(WAIT_S):
        while any(not runs_no_more(p) for p in pids):  # noqa: ASYNC110 - polling /proc, no event
            await trio.sleep(0.05)


def completions(session: Session, operation_id: str) -> list[JSONObject]:
    return [
        e
        for e in session.seen
        if e["event"] == "requestCompleted" and e["operationId"] == operation_id
    ]


def names(value: JSONValue) -> list[str]:
    """A JSON list of strings (function IDs), checked."""
    assert isinstance(value, list), value
    assert all(isinstance(item, str) for item in value), value
    return [str(item) for item in value]


def error_code(event: JSONObject) -> JSONValue:
    return as_obj(event["error"])["code"]


async def invoke(
    session: Session | ServeSession,
    function_id: str,
    params: JSONObject | None = None,
    **extra: JSONValue,
) -> str:
    payload: dict[str, JSONValue] = {
        "function": {"pluginID": TOOLS, "functionID": function_id},
        **extra,
    }
    if params is not None:
        payload["params"] = params
    operation_id = (await session.call("lsp.functionRequest", **payload))["operationId"]
    assert isinstance(operation_id, str)
    return operation_id


async def start_long_run(
    session: Session | ServeSession, backend_pid: int, **extra: JSONValue
) -> tuple[str, set[int]]:
    """Invoke ``tool.run`` for 100 000 steps 50 ms apart (``extra``: more params of
    ``lsp.functionRequest``) and wait until it reports progress and runs its process tree
    (a child and its grandchild): the operation id and the tree's pids."""
    op = await invoke(session, "tool.run", {"steps": 100_000, "delayMs": 50}, **extra)
    await session.wait_for(lambda e: e["event"] == "requestProgress" and e["operationId"] == op)
    return op, await wait_scoped(backend_pid, 2)


async def call(session: Session, function_id: str, params: JSONObject | None = None) -> JSONValue:
    """Invoke and wait: the call's ``result.value`` (fails on an error outcome)."""
    done = await session.completed(await invoke(session, function_id, params))
    assert "result" in done, done
    return as_obj(done["result"])["value"]


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


async def open_tools(core: Core, cwd: str, **extra: JSONValue) -> tuple[Session, int]:
    session = await start(
        core,
        [PY, str(EXAMPLES / "tool_runner.py")],
        cwd,
        pluginId=TOOLS,
        hostServices=["credentials"],
        shutdownTimeoutMilliseconds=5000,
        **extra,
    )
    starting = await session.wait_state("starting")
    pid = starting["pid"]
    assert isinstance(pid, int)
    await session.wait_state("ready")
    return session, pid


# -- through the Core (Python API) --------------------------------------------------------


async def test_negotiate_register_invoke_progress_and_host_requests(
    core: Core, tmp_path: Path
) -> None:
    s, backend_pid = await open_tools(core, str(tmp_path))
    # Negotiation: one functionsChanged with the SDK's declared functions, before ready.
    changed = [e for e in s.seen if e["event"] == "functionsChanged"]
    assert len(changed) == 1
    assert changed[0]["functions"] == TOOL_FUNCTIONS
    assert changed[0]["removed"] == []
    # Invoke a real tool with progress and a result.
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "a.py").write_text("x = 1\n")
    (project / "pkg" / "b.py").write_text("y = 2\n")
    (project / "pkg" / "bad.py").write_text("def broken(:\n")
    op = await invoke(s, "tool.compile", {"root": str(project)})
    done = await s.completed(op)
    assert as_obj(done["result"])["value"] == {"compiled": 2, "failed": ["pkg/bad.py"]}
    progress = [e for e in s.seen if e["event"] == "requestProgress" and e["operationId"] == op]
    assert [as_obj(e["result"])["percentage"] for e in progress] == [33, 67, 100]
    assert as_obj(progress[0]["result"])["message"] == "Compiled 1 of 3"
    assert len(completions(s, op)) == 1
    # A PluginError reaches the host as plugin.function.failed with its code.
    missing = await s.completed(await invoke(s, "tool.compile", {"root": str(tmp_path / "no")}))
    assert as_obj(missing["error"])["code"] == "plugin.function.failed"
    assert as_obj(missing["error"])["pluginErrorCode"] == "tool.rootMissing"
    # Console output of a handler never reaches the protocol stream.
    assert await call(s, "tool.noisy") == "quiet"
    # Register at run time: functionsChanged names the new function, which is callable.
    assert "tool.extra" in names(as_obj(await call(s, "tool.enableExtra"))["registered"])
    added = await s.wait_for(
        lambda e: e["event"] == "functionsChanged" and "tool.extra" in names(e["functions"])
    )
    assert added["removed"] == []
    assert await call(s, "tool.extra") == "extra"
    # Host requests: 20 concurrent credentials requests; the SDK keeps at most 16
    # unanswered, so the host never refuses one (plugin.host.limitExceeded).
    flood = await invoke(s, "tool.hostFlood", {"n": 20})
    answered: set[JSONValue] = set()
    with trio.fail_after(WAIT_S):
        while len(answered) < 20:
            await s.drain(2000)
            events = [e for e in s.seen if e["event"] == "hostRequest"]
            assert {e["method"] for e in events} == {"lithe/host/credentials/get"}
            pending = [
                as_obj(e["result"])
                for e in events
                if as_obj(e["result"])["hostRequestID"] not in answered
            ]
            assert len(pending) <= 16
            for request in pending:
                assert request["service"] == "credentials"
                await s.call(
                    "lsp.hostResponse",
                    hostRequestID=request["hostRequestID"],
                    result={"secret": "s"},
                )
                answered.add(request["hostRequestID"])
    assert as_obj(as_obj((await s.completed(flood))["result"])["value"]) == {"answered": 20}
    stopped = await s.stop()
    assert as_obj(stopped["lastExit"])["exitCode"] == 0
    assert not scoped_pids(backend_pid)


async def test_cancel_deadline_and_revocation_end_the_calls_trees(
    core: Core, tmp_path: Path
) -> None:
    s, backend_pid = await open_tools(core, str(tmp_path))
    # Cancel: lsp.cancelOperation -> requestCancelled once; the backend gets $/cancelRequest
    # and its call's tree (a child and its grandchild) ends.
    op, pids = await start_long_run(s, backend_pid, operationId="c1")
    assert (await s.call("lsp.cancelOperation", operationId=op))["cancelled"] is True
    assert error_code(await s.completed(op)) == "requestCancelled"
    await wait_gone(pids)
    # Deadline: requestTimeout, and the tree ends with the call.
    op, pids = await start_long_run(s, backend_pid, timeoutMilliseconds=3000)
    assert error_code(await s.completed(op)) == "requestTimeout"
    await wait_gone(pids)
    # Revocation: withdrawing a running function ends its call with plugin.function.revoked.
    await call(s, "tool.enableExtra")
    op = await invoke(s, "tool.extra", {"sleepMs": 600_000})
    pids = await wait_scoped(backend_pid, 1)
    assert "tool.extra" not in names(as_obj(await call(s, "tool.disableExtra"))["registered"])
    assert error_code(await s.completed(op)) == "plugin.function.revoked"
    removed = await s.wait_for(
        lambda e: e["event"] == "functionsChanged" and e["removed"] == ["tool.extra"]
    )
    assert "tool.extra" not in names(removed["functions"])
    await wait_gone(pids)
    with pytest.raises(CoreError) as refused:
        await invoke(s, "tool.extra")
    assert refused.value.code == "not_supported"
    assert refused.value.details == {"code": "plugin.function.unknown"}
    # Every call completed exactly once, and the backend still serves.
    for event in s.seen:
        if event["event"] == "requestCompleted":
            assert len(completions(s, str(event["operationId"]))) == 1
    assert await call(s, "tool.noisy") == "quiet"
    await s.stop()
    assert not scoped_pids(backend_pid)


async def test_backend_that_exits_mid_call(core: Core, tmp_path: Path) -> None:
    s, backend_pid = await open_tools(core, str(tmp_path))
    op, pids = await start_long_run(s, backend_pid)
    os.kill(backend_pid, signal.SIGKILL)
    done = await s.completed(op)
    assert error_code(done) == "languageServerUnavailable"
    await s.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] in ("failed", "stopped"))
    # The processes the dead backend's call started are gone too (sweep by ancestry).
    await wait_gone(pids | {backend_pid})
    collect_if_adopted(pids)  # orphans of the killed backend, ours as the host
    await s.drain(200)
    assert len(completions(s, op)) == 1


async def test_build_only_backend_does_not_negotiate(core: Core, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    s = await start(
        core,
        [PY, str(EXAMPLES / "build_only.py")],
        str(tmp_path),
        pluginId="dev.example.builder",
        hostServices=["credentials"],
    )
    await s.wait_state("ready")
    assert not [e for e in s.seen if e["event"] == "functionsChanged"]
    plugin = as_obj((await s.snapshot())["plugin"])
    assert plugin["functionsNegotiated"] is False
    assert plugin["loggingNegotiated"] is True
    with pytest.raises(CoreError) as refused:
        await s.call(
            "lsp.functionRequest",
            function={"pluginID": "dev.example.builder", "functionID": "builder.compile"},
        )
    assert refused.value.code == "not_supported"
    assert refused.value.details == {"code": "plugin.function.unavailable"}
    # It keeps serving its ordinary requests.
    built = await s.roundtrip(
        "workspace/executeCommand", {"command": "builder.compile", "arguments": [str(project)]}
    )
    assert built["result"] == {"exitCode": 0}
    assert (project / "__pycache__").is_dir()
    await s.stop()


# -- through `supervisor serve` -------------------------------------------------------------


class ServeSession:
    """A plugin-owned session driven through ``supervisor serve`` by the plain framed client."""

    def __init__(self, client: Client, session_id: str) -> None:
        self.client = client
        self.id = session_id
        self.seen: list[JSONObject] = []

    async def call(self, method: str, **params: JSONValue) -> JSONObject:
        reply = await self.client.request(method, {"sessionId": self.id, **params})
        assert "result" in reply, reply
        return as_obj(reply["result"])

    async def wait_for(self, predicate: Callable[[JSONObject], bool]) -> JSONObject:
        with trio.fail_after(WAIT_S):
            while True:
                for event in self.seen:
                    if predicate(event):
                        return event
                batch = await self.call("lsp.waitEvents", timeoutMilliseconds=5000)
                events = batch["events"]
                assert isinstance(events, list)
                self.seen.extend(as_obj(e) for e in events)

    async def completed(self, operation_id: JSONValue) -> JSONObject:
        return await self.wait_for(
            lambda e: e["event"] == "requestCompleted" and e["operationId"] == operation_id
        )


async def open_served_backend(
    client: Client, cwd: str, server_id: str, script: str, plugin_id: str, **extra: JSONValue
) -> tuple[ServeSession, int]:
    """Start examples/backends/``script`` as plugin ``plugin_id`` with serve's
    ``lsp.startServer`` (``extra``: more of its params) and wait until it is ready.

    Returns:
        The session, and the backend's pid.
    """
    reply = await client.request(
        "lsp.startServer",
        {
            "serverId": server_id,
            "executable": PY,
            "arguments": [str(EXAMPLES / script)],
            "workingDirectory": cwd,
            "rootUri": "file://" + cwd,
            "pluginId": plugin_id,
            "shutdownTimeoutMilliseconds": 5000,
            **extra,
        },
    )
    session = ServeSession(client, str(as_obj(reply["result"])["sessionId"]))
    starting = await session.wait_for(
        lambda e: e["event"] == "stateChanged" and e["state"] == "starting"
    )
    await session.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] == "ready")
    pid = starting["pid"]
    assert isinstance(pid, int)
    return session, pid


async def open_served_tools(client: Client, cwd: str) -> tuple[ServeSession, int]:
    await client.initialize()
    return await open_served_backend(
        client, cwd, "tools", "tool_runner.py", TOOLS, hostServices=["credentials"]
    )


def tool(function_id: str) -> JSONObject:
    return {"pluginID": TOOLS, "functionID": function_id}


async def test_through_serve(client: Client, tmp_path: Path) -> None:
    s, backend_pid = await open_served_tools(client, str(tmp_path))
    changed = await s.wait_for(lambda e: e["event"] == "functionsChanged")
    assert changed["functions"] == TOOL_FUNCTIONS
    # Register at run time, then invoke with progress and a result.
    op = (await s.call("lsp.functionRequest", function=tool("tool.enableExtra")))["operationId"]
    await s.completed(op)
    await s.wait_for(
        lambda e: e["event"] == "functionsChanged" and "tool.extra" in names(e["functions"])
    )
    op = (
        await s.call(
            "lsp.functionRequest", function=tool("tool.run"), params={"steps": 3, "delayMs": 20}
        )
    )["operationId"]
    done = await s.completed(op)
    assert as_obj(done["result"])["value"] == {"steps": 3, "exitCode": 0}
    progress = [e for e in s.seen if e["event"] == "requestProgress" and e["operationId"] == op]
    assert [as_obj(e["result"])["percentage"] for e in progress] == [33, 67, 100]
    # A host request answered with lsp.hostResponse.
    op = (await s.call("lsp.functionRequest", function=tool("tool.hostFlood"), params={"n": 1}))[
        "operationId"
    ]
    asked = await s.wait_for(lambda e: e["event"] == "hostRequest")
    host_request_id = as_obj(asked["result"])["hostRequestID"]
    await s.call("lsp.hostResponse", hostRequestID=host_request_id, result={"secret": "s"})
    assert as_obj((await s.completed(op))["result"])["value"] == {"answered": 1}
    # Cancel with lsp.cancelOperation: the backend gets $/cancelRequest, the tree ends.
    op, pids = await start_long_run(s, backend_pid)
    assert (await s.call("lsp.cancelOperation", operationId=op))["cancelled"] is True
    assert error_code(await s.completed(op)) == "requestCancelled"
    await wait_gone(pids)
    # Deadline.
    op, pids = await start_long_run(s, backend_pid, timeoutMilliseconds=2000)
    assert error_code(await s.completed(op)) == "requestTimeout"
    await wait_gone(pids)
    # Revocation.
    op = (
        await s.call(
            "lsp.functionRequest", function=tool("tool.extra"), params={"sleepMs": 600_000}
        )
    )["operationId"]
    pids = await wait_scoped(backend_pid, 1)
    await s.completed(
        (await s.call("lsp.functionRequest", function=tool("tool.disableExtra")))["operationId"]
    )
    assert error_code(await s.completed(op)) == "plugin.function.revoked"
    await wait_gone(pids)
    # Shutdown of serve stops the backend: nothing it or its calls started remains.
    await client.shut_down()
    await wait_gone({backend_pid})
    assert not scoped_pids(backend_pid)


async def test_serve_end_of_input_ends_backend_and_running_call(
    client: Client, tmp_path: Path
) -> None:
    s, backend_pid = await open_served_tools(client, str(tmp_path))
    _, pids = await start_long_run(s, backend_pid)
    # $/cancelRequest ends a serve request in flight (a blocking process.run) with -32800;
    # the function call it does not name keeps running.
    await client.send(
        {
            "jsonrpc": "2.0",
            "id": "wait-1",
            "method": "process.run",
            "params": {"argv": [PY, "-c", "import time; time.sleep(60)"]},
        }
    )
    await client.notify("$/cancelRequest", {"id": "wait-1"})
    cancelled = await client.reply_to("wait-1")
    assert as_obj(cancelled["error"])["code"] == -32800
    assert all(p in scoped_pids(backend_pid) for p in pids)
    # End of input without shutdown: serve cleans up everything and exits 1.
    await client.close_stdin()
    assert await client.wait_exit() == 1
    await wait_gone(pids | {backend_pid})
