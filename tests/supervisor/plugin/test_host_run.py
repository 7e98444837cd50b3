"""lithe/host/run/start|stop and debug/start served by the supervisor (issue 17), end to end
through the Core with a real backend process (tests/peers/plugin_backend.py), real runs, and
debugpy as the plugin's debug adapter (plugin-contract.md "Run and debug sessions").
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from tests._procfs import runs_no_more
from tests.supervisor.lsp._support import PY, as_obj, start
from tests.supervisor.plugin.test_example_backends import ServeSession

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.cli.test_serve import Client
    from tests.supervisor.lsp._support import Session

BACKEND = os.path.join(os.path.dirname(__file__), "..", "..", "peers", "plugin_backend.py")
PLUGIN = "com.example.runner"
FUNCS = ["host.call", "host.cancel", "seen.get"]
CTX: JSONObject = {"contextID": "w1", "generation": 1}
GRANTS: JSONValue = ["lithe/host/run/start", "lithe/host/debug/start"]


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


async def prepare(core: Core, tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "app").mkdir(parents=True)
    await core.call(
        "workspace.setContexts",
        {"contexts": [{"contextID": "w1", "folders": [{"path": str(workspace)}]}]},
    )
    await core.call(
        "run.configurePlugin",
        {
            "pluginId": PLUGIN,
            "requiresTools": ["python", "node"],
            "tools": {"python": sys.executable, "node": None},
            "debugAdapters": [
                {
                    "id": "py",
                    "requests": ["launch"],
                    "adapter": {
                        "executable": sys.executable,
                        "arguments": ["-m", "debugpy.adapter"],
                    },
                    "configurations": {"launch": {"console": "internalConsole"}},
                }
            ],
        },
    )
    return workspace


async def backend(core: Core, cwd: Path) -> Session:
    answer = {"version": 0, "functions": [{"id": f} for f in FUNCS]}
    session = await start(
        core,
        [PY, BACKEND, json.dumps(answer), json.dumps({"version": 0})],
        str(cwd),
        pluginId=PLUGIN,
        hostServices=GRANTS,
        shutdownTimeoutMilliseconds=2000,
    )
    await session.wait_state("ready")
    return session


async def host_calls(session: Session, *requests: tuple[str, JSONValue]) -> list[JSONObject]:
    """The backend sends every request at once; their replies, in order."""
    op = (
        await session.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "host.call"},
            params={"requests": [{"method": m, "params": p} for m, p in requests]},
        )
    )["operationId"]
    assert isinstance(op, str)
    replies = as_obj((await session.completed(op))["result"])["value"]
    assert isinstance(replies, list)
    return [as_obj(r) for r in replies]


async def notifications(session: Session) -> list[JSONObject]:
    op = (
        await session.call(
            "lsp.functionRequest", function={"pluginID": PLUGIN, "functionID": "seen.get"}
        )
    )["operationId"]
    assert isinstance(op, str)
    seen = as_obj(as_obj((await session.completed(op))["result"])["value"])
    got = seen["notifications"]
    assert isinstance(got, list)
    return [as_obj(n) for n in got]


async def did_exits(session: Session, count: int) -> list[JSONObject]:
    """The backend's run/didExit notifications, once it has ``count`` (polled: the backend
    only reports what it has read)."""
    with trio.fail_after(30):
        while True:
            exits = [
                as_obj(n["params"])
                for n in await notifications(session)
                if n["method"] == "lithe/host/run/didExit"
            ]
            if len(exits) >= count:
                return exits
            await trio.sleep(0.05)


async def run_events(core: Core, run_id: str) -> list[JSONObject]:
    """Every event of the run until ``runExited``."""
    events: list[JSONObject] = []
    with trio.fail_after(30):
        while not events or events[-1]["event"] != "runExited":
            got = as_obj(
                await core.call("run.waitEvents", {"runId": run_id, "timeoutMilliseconds": 1000})
            )
            batch = got["events"]
            assert isinstance(batch, list)
            events += [as_obj(e) for e in batch]
    return events


def run_params(code: str, **overrides: JSONValue) -> JSONObject:
    params: JSONObject = {
        "context": CTX,
        "label": "Run app",
        "process": {
            "executable": {"kind": "tool", "tool": "python"},
            "arguments": ["-c", code],
            "workingDirectory": "app",
            "environment": {},
        },
    }
    params.update(overrides)
    return params


def data(reply: JSONObject) -> JSONObject:
    return as_obj(as_obj(reply["error"])["data"])


PRINT_AND_EXIT = "import os, sys; print(os.getcwd()); print(open(sys.argv[1]).read()); sys.exit(7)"


async def test_a_run_starts_reports_output_and_exits_once(core: Core, tmp_path: Path) -> None:
    workspace = await prepare(core, tmp_path)
    s = await backend(core, tmp_path)
    started, bad_label, undeclared, unresolved, expired, foreign = await host_calls(
        s,
        (
            "lithe/host/run/start",
            run_params(
                PRINT_AND_EXIT,
                process={
                    "executable": {"kind": "tool", "tool": "python"},
                    "arguments": ["-c", PRINT_AND_EXIT, "${temporaryFile:note.txt}"],
                    "workingDirectory": "app",
                    "environment": {},
                },
                temporaryFiles=[{"name": "note.txt", "contents": "from the plugin"}],
                rerun={"function": "seen.get", "data": {"again": True}},
            ),
        ),
        ("lithe/host/run/start", run_params("pass", label="")),
        (
            "lithe/host/run/start",
            run_params(
                "pass",
                process={
                    "executable": {"kind": "tool", "tool": "ruby"},
                    "arguments": [],
                    "workingDirectory": "app",
                    "environment": {},
                },
            ),
        ),
        (
            "lithe/host/run/start",
            run_params(
                "pass",
                process={
                    "executable": {"kind": "tool", "tool": "node"},
                    "arguments": [],
                    "workingDirectory": "app",
                    "environment": {},
                },
            ),
        ),
        ("lithe/host/run/start", run_params("pass", context={"contextID": "w1", "generation": 2})),
        ("lithe/host/run/stop", {"runID": "run-99-00000000"}),
    )
    run_id = as_obj(started["result"])["runID"]
    assert isinstance(run_id, str)
    assert as_obj(bad_label["error"])["code"] == -32602
    assert data(bad_label) == {
        "code": "plugin.host.invalidParams",
        "details": {"code": "plugin.run.invalidStart", "field": "label"},
    }
    assert data(undeclared)["details"] == {
        "code": "plugin.run.invalidStart",
        "field": "process.executable.tool",
    }
    assert data(unresolved) == {
        "code": "plugin.host.toolUnresolved",
        "details": {"tool": "node", "reason": "notFound"},
    }
    assert data(expired)["code"] == "plugin.host.contextExpired"
    assert data(foreign)["code"] == "plugin.host.notFound"
    events = await run_events(core, run_id)
    assert events[0]["event"] == "runStarted"
    assert events[0]["label"] == "Run app"
    output = "".join(str(e["text"]) for e in events if e["event"] == "runOutput")
    assert output.splitlines() == [str(workspace / "app"), "from the plugin"]
    assert events[-1] == {**events[-1], "runId": run_id, "exitCode": 7}
    assert await did_exits(s, 1) == [{"runID": run_id, "exitCode": 7}]
    # The context closes: run/stop takes none, and answers null for an ended run.
    await core.call("workspace.setContexts", {"contexts": []})
    (stopped,) = await host_calls(s, ("lithe/host/run/stop", {"runID": run_id}))
    assert stopped == {"result": None}
    listed = await core.call("run.list", {})
    assert isinstance(listed, list)
    (entry,) = [as_obj(x) for x in listed]
    rerun: JSONObject = {"function": "seen.get", "data": {"again": True}}
    assert entry == {
        **entry,
        "runId": run_id,
        "state": "ended",
        "exit": {"exitCode": 7},
        "rerun": rerun,
    }
    await trio.sleep(0.2)
    assert len(await did_exits(s, 1)) == 1  # one didExit per run
    await s.stop()


SLEEPER = (
    "import subprocess, sys, time;"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
    "print(p.pid, flush=True); time.sleep(600)"
)


async def test_a_run_outlives_its_backend_and_a_new_backend_is_not_told(
    core: Core, tmp_path: Path
) -> None:
    await prepare(core, tmp_path)
    first = await backend(core, tmp_path)
    (started,) = await host_calls(first, ("lithe/host/run/start", run_params(SLEEPER)))
    run_id = str(as_obj(started["result"])["runID"])
    got = as_obj(await core.call("run.waitEvents", {"runId": run_id, "timeoutMilliseconds": 30000}))
    pids = [as_obj(e)["pid"] for e in got["events"] if as_obj(e)["event"] == "runStarted"]  # type: ignore[union-attr]
    main_pid = pids[0]
    assert isinstance(main_pid, int)
    await first.stop()  # the backend exits; the run goes on
    assert not runs_no_more(main_pid)
    second = await backend(core, tmp_path)
    # Another backend of the plugin may stop it (runs belong to the plugin); cancelling
    # such a stop still stops it (here the Run window's Stop button ends it).
    stopped = as_obj(await core.call("run.stop", {"runId": run_id}))
    assert stopped["state"] == "ended"
    assert stopped["exit"] == {"signal": 15}
    assert runs_no_more(main_pid)
    await trio.sleep(0.2)
    assert not [n for n in await notifications(second) if n["method"] == "lithe/host/run/didExit"]
    await second.stop()


async def test_debug_start_on_the_plugins_own_adapter(core: Core, tmp_path: Path) -> None:
    workspace = await prepare(core, tmp_path)
    (workspace / "app" / "main.py").write_text("import time\ntime.sleep(600)\n")
    s = await backend(core, tmp_path)
    launch: JSONObject = {
        "context": CTX,
        "label": "Debug app",
        "adapter": "py",
        "request": "launch",
        "configuration": {"program": str(workspace / "app" / "main.py")},
    }
    started, foreign, unknown, attach, reserved = await host_calls(
        s,
        ("lithe/host/debug/start", launch),
        ("lithe/host/debug/start", {**launch, "adapter": "org.other/py"}),
        ("lithe/host/debug/start", {**launch, "adapter": f"{PLUGIN}/node"}),
        ("lithe/host/debug/start", {**launch, "request": "attach"}),
        ("lithe/host/debug/start", {**launch, "configuration": {"noDebug": True}}),
    )
    assert data(foreign) == {
        "code": "plugin.host.notFound",
        "details": {"code": "plugin.debug.foreignAdapter", "field": "adapter"},
    }
    assert as_obj(data(unknown)["details"])["code"] == "plugin.debug.unknownAdapter"
    assert data(attach)["details"] == {"code": "plugin.debug.invalidStart", "field": "request"}
    assert data(reserved)["details"] == {
        "code": "plugin.debug.invalidStart",
        "field": "configuration.noDebug",
    }
    session_id = as_obj(started["result"])["sessionID"]
    sessions = as_obj({"s": await core.call("debug.listSessions", {})})["s"]
    assert isinstance(sessions, list)
    (listed,) = [as_obj(x) for x in sessions if as_obj(x)["sessionId"] == session_id]
    assert listed["state"] not in ("terminated", "failed")
    (stopped,) = await host_calls(s, ("lithe/host/run/stop", {"sessionID": session_id}))
    assert stopped == {"result": None}
    sessions = as_obj({"s": await core.call("debug.listSessions", {})})["s"]
    assert isinstance(sessions, list)
    assert all(
        as_obj(x)["state"] == "terminated" for x in sessions if as_obj(x)["sessionId"] == session_id
    )
    await s.stop()


REAL_PYTHON = os.path.realpath(sys.executable)


def executable_and_arguments(pid: int) -> tuple[str, list[bytes]]:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return os.readlink(f"/proc/{pid}/exe"), cmdline.read().split(b"\0")[1:-1]


async def configure_runtime_adapter(core: Core, python: str | None) -> None:
    """The plugin's adapter ``py`` started by runSelectedRuntime of the tool ``python``,
    which the user's runtime selection resolves to ``python`` (None: to nothing)."""
    await core.call(
        "run.configurePlugin",
        {
            "pluginId": PLUGIN,
            "requiresTools": ["python"],
            "tools": {"python": python},
            "debugAdapters": [
                {
                    "id": "py",
                    "launch": {"kind": "runSelectedRuntime", "tool": "python"},
                    "adapter": {"arguments": ["-m", "debugpy.adapter"]},
                }
            ],
        },
    )


async def test_debug_start_with_the_selected_runtime(core: Core, tmp_path: Path) -> None:
    workspace = await prepare(core, tmp_path)
    (workspace / "app" / "main.py").write_text("import time\ntime.sleep(600)\n")
    s = await backend(core, tmp_path)
    launch: JSONObject = {
        "context": CTX,
        "label": "Debug app",
        "adapter": "py",
        "request": "launch",
        "configuration": {"program": str(workspace / "app" / "main.py")},
    }
    await configure_runtime_adapter(core, None)
    (unresolved,) = await host_calls(s, ("lithe/host/debug/start", launch))
    assert data(unresolved) == {
        "code": "plugin.host.toolUnresolved",
        "details": {"tool": "python", "reason": "notFound"},
    }
    await configure_runtime_adapter(core, sys.executable)
    (started,) = await host_calls(s, ("lithe/host/debug/start", launch))
    session_id = as_obj(started["result"])["sessionID"]
    sessions = as_obj({"s": await core.call("debug.listSessions", {})})["s"]
    assert isinstance(sessions, list)
    (listed,) = [as_obj(x) for x in sessions if as_obj(x)["sessionId"] == session_id]
    adapter_pid = listed["adapterPid"]
    assert isinstance(adapter_pid, int)
    # The adapter runs the executable the selection resolved, with the declared arguments.
    assert executable_and_arguments(adapter_pid) == (REAL_PYTHON, [b"-m", b"debugpy.adapter"])
    await host_calls(s, ("lithe/host/run/stop", {"sessionID": session_id}))
    assert runs_no_more(adapter_pid)
    await s.stop()


async def started_run(core: Core, session: Session, code: str = SLEEPER) -> tuple[str, int]:
    """A run of ``code`` started by ``session``'s backend: its runID and main pid."""
    (started,) = await host_calls(session, ("lithe/host/run/start", run_params(code)))
    run_id = str(as_obj(started["result"])["runID"])
    got = as_obj(await core.call("run.pollEvents", {"runId": run_id}))
    events = got["events"]
    assert isinstance(events, list)
    pid = as_obj(events[0])["pid"]
    assert isinstance(pid, int)
    return run_id, pid


async def test_a_restarted_backend_is_not_told_of_an_earlier_run(
    core: Core, tmp_path: Path
) -> None:
    await prepare(core, tmp_path)
    s = await backend(core, tmp_path)
    run_id, pid = await started_run(core, s)
    assert (await s.call("lsp.restartServer"))["generation"] == 2
    await s.wait_state("ready")
    await core.call("run.stop", {"runId": run_id})
    assert runs_no_more(pid)
    await trio.sleep(0.2)
    assert not [n for n in await notifications(s) if n["method"] == "lithe/host/run/didExit"]
    await s.stop()


async def test_a_cancelled_stop_still_stops(core: Core, tmp_path: Path) -> None:
    await prepare(core, tmp_path)
    s = await backend(core, tmp_path)
    run_id, pid = await started_run(core, s)
    op = (
        await s.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "host.cancel"},
            params={"method": "lithe/host/run/stop", "params": {"runID": run_id}},
        )
    )["operationId"]
    assert isinstance(op, str)
    error = as_obj(as_obj((await s.completed(op))["result"])["value"])
    assert as_obj(error["data"])["code"] == "plugin.host.cancelled"
    (exited,) = await did_exits(s, 1)
    assert exited == {"runID": run_id, "signal": 15}
    assert runs_no_more(pid)
    await s.stop()


class Refuse:
    """A host whose user withholds consent to every program."""

    def routes_to_client(self, method: str) -> bool:
        return False

    async def consent(self, request: object) -> bool:
        return False

    async def show(self, request: object) -> None:
        return None


async def test_withheld_consent_starts_nothing(tmp_path: Path) -> None:
    async with open_core(host_policy=Refuse()) as core:
        await prepare(core, tmp_path)
        s = await backend(core, tmp_path)
        (refused,) = await host_calls(s, ("lithe/host/run/start", run_params("pass")))
        assert as_obj(refused["error"])["code"] == -32010
        assert data(refused)["code"] == "plugin.host.permissionDenied"
        assert await core.call("run.list", {}) == []
        await s.stop()


async def test_through_serve(client: Client, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "app").mkdir(parents=True)
    await client.initialize()
    configure: tuple[tuple[str, JSONObject], ...] = (
        (
            "workspace.setContexts",
            {"contexts": [{"contextID": "w1", "folders": [{"path": str(workspace)}]}]},
        ),
        (
            "run.configurePlugin",
            {"pluginId": PLUGIN, "requiresTools": ["python"], "tools": {"python": sys.executable}},
        ),
    )
    for method, params in configure:
        assert "result" in await client.request(method, params)
    answer = {"version": 0, "functions": [{"id": f} for f in FUNCS]}
    reply = await client.request(
        "lsp.startServer",
        {
            "serverId": "runner",
            "executable": PY,
            "arguments": [BACKEND, json.dumps(answer), json.dumps({"version": 0})],
            "workingDirectory": str(tmp_path),
            "rootUri": "file://" + str(tmp_path),
            "pluginId": PLUGIN,
            "hostServices": GRANTS,
            "shutdownTimeoutMilliseconds": 2000,
        },
    )
    session = ServeSession(client, str(as_obj(reply["result"])["sessionId"]))
    await session.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] == "ready")

    async def backend_call(function_id: str, params: JSONObject) -> JSONValue:
        started = await session.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": function_id},
            params=params,
        )
        done = await session.completed(started["operationId"])
        return as_obj(done["result"])["value"]

    replies = await backend_call(
        "host.call",
        {
            "requests": [
                {"method": "lithe/host/run/start", "params": run_params("raise SystemExit(4)")}
            ]
        },
    )
    assert isinstance(replies, list)
    run_id = as_obj(as_obj(replies[0])["result"])["runID"]
    with trio.fail_after(30):
        while True:
            seen = as_obj(await backend_call("seen.get", {}))
            exits = [
                as_obj(n)["params"]
                for n in seen["notifications"]  # type: ignore[union-attr]
                if as_obj(n)["method"] == "lithe/host/run/didExit"
            ]
            if exits:
                break
            await trio.sleep(0.05)
    assert exits == [{"runID": run_id, "exitCode": 4}]
    listed = as_obj(await client.request("run.list", {}))["result"]
    assert isinstance(listed, list)
    assert as_obj(listed[0])["exit"] == {"exitCode": 4}
    await session.call("lsp.stopServer")


async def test_closing_the_core_ends_its_runs(tmp_path: Path) -> None:
    async with open_core() as core:
        await prepare(core, tmp_path)
        s = await backend(core, tmp_path)
        _, pid = await started_run(core, s)
        assert not runs_no_more(pid)
    assert runs_no_more(pid)
