"""The SDK side of the host services (issue 17; plugin-sdk-node.md "Backend API", "Host
services", "Native terminal API", "Testing"): host-notification handlers, subscriptions,
the workspace/terminal/run wrappers, the state store and the shipped in-memory host."""

from __future__ import annotations

import importlib.util
import json
import os
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import JSONRPCError
from supervisor.plugin_sdk import (
    HostError,
    PluginSdkError,
    create_backend,
    open_state_store,
)
from supervisor.plugin_sdk.testing import HostFailure, TestHost, open_test_host

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor.plugin_sdk import Backend, CallContext

CONTEXT: JSONObject = {
    "contextID": "w1",
    "generation": 1,
    "name": "orders",
    "authority": {"kind": "local"},
    "folders": [{"rootID": "r0", "name": "orders", "path": "/tmp"}],
    "stateDirectory": "/tmp/state",
}
REF: JSONObject = {"contextID": "w1", "generation": 1}


def backend_with_events(seen: list[tuple[str, JSONValue]]) -> Backend:
    backend = create_backend("events", "1.0.0")

    async def on_refresh(params: JSONObject) -> None:
        seen.append(("command", params))

    async def on_contexts(params: JSONObject) -> None:
        seen.append(("contexts", params))

    async def on_exit(params: JSONObject) -> None:
        seen.append(("didExit", params))

    backend.on_command("db.refresh", on_refresh)
    backend.on_contexts_changed(on_contexts)
    backend.on_host_notification("lithe/host/run/didExit", on_exit)
    return backend


async def test_host_notifications_reach_their_handlers_in_order() -> None:
    seen: list[tuple[str, JSONValue]] = []
    backend = backend_with_events(seen)
    for reserved in ("lithe/host/commands/didRun", "textDocument/didOpen"):
        with pytest.raises(PluginSdkError) as refused:
            backend.on_host_notification(reserved, backend_with_events([])._contexts_handlers[0])
        assert refused.value.code == "sdk.reservedMethod"
    async with open_test_host(backend, contexts=[CONTEXT]) as host:
        await host.command("db.refresh", CONTEXT)
        await host.command("db.other")  # no handler: ignored
        await host.notify("lithe/host/unknown/thing", {"x": 1})  # unknown: ignored
        await host.set_contexts([])
        await host.notify("lithe/host/run/didExit", {"runID": "run-1", "exitCode": 0})
        await host.command("db.refresh")
        with trio.fail_after(10):
            while len(seen) < 4:  # noqa: ASYNC110 - the handlers append
                await trio.sleep(0.01)
    assert seen == [
        ("command", {"commandID": "db.refresh", "workspaceContext": REF}),
        ("contexts", {"revision": 2}),
        ("didExit", {"runID": "run-1", "exitCode": 0}),
        ("command", {"commandID": "db.refresh", "workspaceContext": None}),
    ]


def wrapper_backend(
    results: dict[str, JSONValue], events: list[tuple[JSONObject, JSONObject]]
) -> Backend:
    backend = create_backend("wrappers", "1.0.0")

    @backend.function("use.workspace")
    async def use_workspace(params: JSONObject, context: CallContext) -> JSONValue:
        listed = await context.host.workspace.list_contexts()
        whole = as_dict(listed["contexts"])[0]
        got = await context.host.workspace.get_context(whole)  # a whole context is reduced
        folders = await context.host.workspace.get_folders(REF)
        try:
            await context.host.workspace.get_folders({"contextID": "w1", "generation": 9})
        except HostError as exc:
            results["expired"] = [exc.code, exc.rpc_code]
        return {"listed": listed, "got": got, "folders": folders}

    @backend.function("use.terminal")
    async def use_terminal(params: JSONObject, context: CallContext) -> JSONValue:
        created = await context.host.terminal.create(
            REF,
            "bash",
            ["-c", "exit 0"],
            title="t",
            cwd={"rootID": "r0", "path": ""},
            env={"A": "1", "B": None},
            show=False,
        )
        # The older keyword still works (one Python name per concept: env, as context.run).
        with pytest.warns(DeprecationWarning, match="environment= is deprecated; use env="):
            await context.host.terminal.create(
                REF,
                "bash",
                ["-c", "exit 0"],
                title="t",
                cwd={"rootID": "r0", "path": ""},
                environment={"A": "1", "B": None},
                show=False,
            )
        with pytest.raises(TypeError, match="not both"):
            await context.host.terminal.create(REF, "bash", env={}, environment={})

        async def on_event(event: JSONObject, info: JSONObject) -> None:
            events.append((event, info))

        subscription = await context.host.terminal.on_exit(
            REF, str(created["terminalID"]), on_event
        )
        results["subscription"] = subscription.id
        with trio.fail_after(10):
            while len(events) < 3:  # noqa: ASYNC110 - the router appends
                await trio.sleep(0.01)
        await subscription.dispose()
        await context.host.terminal.close(REF, "t-1", retained_context_bytes=0)
        await context.host.terminal.reopen(REF, "t-1", show=True)
        await context.host.terminal.show(REF, "t-1")
        await context.host.terminal.dispose(REF, "t-1")
        return created

    @backend.function("use.run")
    async def use_run(params: JSONObject, context: CallContext) -> JSONValue:
        process: JSONObject = {
            "executable": {"kind": "tool", "tool": "python"},
            "arguments": [],
            "workingDirectory": "",
            "environment": {},
        }
        run_id = await context.host.run.start(CONTEXT, "Run it", process)
        await context.host.run.stop(run_id=run_id)
        try:
            await context.host.run.stop()
        except PluginSdkError as exc:
            results["stop"] = exc.code
        return run_id

    return backend


def as_dict(value: JSONValue) -> list[JSONObject]:
    assert isinstance(value, list)
    return [v for v in value if isinstance(v, dict)]


async def test_workspace_wrappers_and_context_expiry() -> None:
    results: dict[str, JSONValue] = {}
    async with open_test_host(wrapper_backend(results, []), contexts=[CONTEXT]) as host:
        out = await host.invoke("use.workspace", {})
    assert isinstance(out, dict)
    listed = out["listed"]
    assert isinstance(listed, dict)
    assert "stateDirectory" not in as_dict(listed["contexts"])[0]
    assert out["got"] == CONTEXT
    assert out["folders"] == {"folders": CONTEXT["folders"]}
    assert results["expired"] == ["plugin.host.contextExpired", -32011]
    sent = [p for m, p in host.requests if m == "lithe/host/workspace/getContext"]
    assert sent == [{"context": REF}]


async def test_terminal_wrappers_and_subscription_routing() -> None:
    results: dict[str, JSONValue] = {}
    events: list[tuple[JSONObject, JSONObject]] = []
    backend = wrapper_backend(results, events)
    holder: list[TestHost] = []

    async def create(params: JSONObject) -> JSONValue:
        return {"terminalID": "t-1", "generation": 1}

    async def on_exit(params: JSONObject) -> JSONValue:
        host = holder[0]
        subscription_id = host.open_subscription("lithe/host/terminal/onExit")
        # An event before the answer waits for it; a lost one (sequence 2) is a gap.
        await host.publish(subscription_id, {"type": "exit", "generation": 1})
        host._sequences[subscription_id] += 1
        return {"subscriptionID": subscription_id}

    async def plain(params: JSONObject) -> JSONValue:
        return None

    async def closed(params: JSONObject) -> JSONValue:
        return {"retainedContextBytes": 0}

    async with open_test_host(backend, contexts=[CONTEXT]) as host:
        holder.append(host)
        host.handle("lithe/host/terminal/create", create)
        host.handle("lithe/host/terminal/onExit", on_exit)
        for name in ("show", "dispose"):
            host.handle(f"lithe/host/terminal/{name}", plain)
        host.handle("lithe/host/terminal/close", closed)

        async def reopen(params: JSONObject) -> JSONValue:
            return {"terminalID": "t-1", "generation": 2, "restoredContextBytes": 0}

        host.handle("lithe/host/terminal/reopen", reopen)

        async def publish_later() -> None:
            with trio.fail_after(10):
                while "subscription" not in results:  # noqa: ASYNC110 - set by the backend
                    await trio.sleep(0.01)
            subscription_id = str(results["subscription"])
            await host.publish(subscription_id, {"type": "exit", "generation": 2})
            await host.publish(subscription_id, {"type": "exit", "generation": 3})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publish_later)
            reply = await host.invoke("use.terminal", {})
        assert reply == {"terminalID": "t-1", "generation": 1}
        subscription_id = str(results["subscription"])
        # Disposed: the host forgot it, and nothing more is published.
        assert subscription_id not in host.subscriptions
        assert not await host.publish(subscription_id, {"type": "exit"})
    assert [(e["generation"], i["sequence"], i["gap"]) for e, i in events] == [
        (1, 1, False),
        (2, 3, True),
        (3, 4, False),
    ]
    sent = dict(host.requests)
    creates = [p for m, p in host.requests if m == "lithe/host/terminal/create"]
    assert len(creates) == 2  # env= and the older environment= send the same request
    assert (
        creates[0]
        == creates[1]
        == {
            "context": REF,
            "executable": "bash",
            "arguments": ["-c", "exit 0"],
            "title": "t",
            "cwd": {"rootID": "r0", "path": ""},
            "environment": {"A": "1", "B": None},
            "show": False,
        }
    )
    assert sent["lithe/host/terminal/close"] == {
        "context": REF,
        "terminalID": "t-1",
        "retainedContextBytes": 0,
    }
    assert sent["lithe/host/terminal/reopen"] == {"context": REF, "terminalID": "t-1", "show": True}


async def test_run_wrappers_and_host_failures() -> None:
    results: dict[str, JSONValue] = {}

    async def start(params: JSONObject) -> JSONValue:
        if params.get("label") != "Run it":
            raise HostFailure("plugin.host.invalidParams", "bad label")
        return {"runID": "run-7"}

    async def stop(params: JSONObject) -> JSONValue:
        return None

    async with open_test_host(wrapper_backend(results, [])) as host:
        host.handle("lithe/host/run/start", start)
        host.handle("lithe/host/run/stop", stop)
        assert await host.invoke("use.run", {}) == "run-7"
        capabilities = await host._serve("lithe/host/getCapabilities", {})
        assert isinstance(capabilities, dict)
        services = capabilities["services"]
        assert isinstance(services, dict)
        assert services["run"] == {
            "methods": ["lithe/host/run/start", "lithe/host/run/stop"],
            "notifications": [],
        }
    assert results["stop"] == "sdk.host.invalidParams"
    assert ("lithe/host/run/stop", {"runID": "run-7"}) in host.requests
    start_params = dict(host.requests)["lithe/host/run/start"]
    assert isinstance(start_params, dict)
    assert start_params["context"] == REF


async def test_the_test_host_bounds_pending_requests() -> None:
    backend = create_backend("bounded", "1.0.0")
    release = trio.Event()

    async def slow(params: JSONObject) -> JSONValue:
        await release.wait()
        return None

    @backend.function("many")
    async def many(params: JSONObject, context: CallContext) -> JSONValue:
        outcomes: list[str] = []

        endpoint = context.host._backend._endpoint
        assert endpoint is not None

        async def raw() -> None:
            try:
                await endpoint.request("lithe/host/slow/wait", {})
                outcomes.append("ok")
            except JSONRPCError as exc:
                outcomes.append(str(exc.data))

        async with trio.open_nursery() as nursery:
            for _ in range(17):
                nursery.start_soon(raw)
            with trio.fail_after(10):
                while not outcomes:  # noqa: ASYNC110 - the 17th fails first
                    await trio.sleep(0.01)
            release.set()
        return [*sorted(outcomes)]

    async with open_test_host(backend) as host:
        host.handle("lithe/host/slow/wait", slow)
        outcomes = await host.invoke("many", {})
    assert isinstance(outcomes, list)
    assert outcomes.count("ok") == 16
    assert "plugin.host.limitExceeded" in str(outcomes)


async def test_state_store_is_atomic_and_refuses_the_package(tmp_path: Path) -> None:
    store = await open_state_store(tmp_path / "state", package_directory=tmp_path / "pkg")
    await store.set("cache", {"n": 1})
    await store.set("other", [1, 2])
    await store.delete("other")
    await store.delete("missing")
    assert store.get("cache") == {"n": 1}
    assert json.loads((tmp_path / "state" / "state.json").read_text()) == {"cache": {"n": 1}}
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["state.json"]  # no temp left
    again = await open_state_store(str(tmp_path / "state"), package_directory=tmp_path / "pkg")
    assert again.all() == {"cache": {"n": 1}}
    with pytest.raises(PluginSdkError) as not_json:
        await again.set("x", float("nan"))
    assert not_json.value.code == "sdk.stateStore.invalidValue"
    assert again.all() == {"cache": {"n": 1}}
    (tmp_path / "pkg" / "data").mkdir(parents=True)
    for directory, code in (
        (tmp_path / "pkg" / "data", "sdk.stateStore.invalidDirectory"),
        (tmp_path / "pkg", "sdk.stateStore.invalidDirectory"),
        ("relative/dir", "sdk.stateStore.invalidDirectory"),
    ):
        with pytest.raises(PluginSdkError) as refused:
            await open_state_store(directory, package_directory=tmp_path / "pkg")
        assert refused.value.code == code
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "state.json").write_text("[1]")
    with pytest.raises(PluginSdkError) as corrupt:
        await open_state_store(tmp_path / "bad", package_directory=tmp_path / "pkg")
    assert corrupt.value.code == "sdk.stateStore.corrupt"
    assert os.stat(tmp_path / "state").st_mode & 0o077 == 0


def load_workbench() -> Backend:
    """examples/backends/workbench.py's backend (imported: it listens only as a script)."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "backends")
    spec = importlib.util.spec_from_file_location(
        "workbench_example", os.path.join(path, "workbench.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    backend: Backend = module.backend
    return backend


async def test_the_workbench_example_against_the_test_host(tmp_path: Path) -> None:
    """How a backend author tests with the shipped host: examples/backends/workbench.py's
    command and context handlers and its state store, without the supervisor."""
    context: JSONObject = {**CONTEXT, "stateDirectory": str(tmp_path / "w1-state")}
    async with open_test_host(load_workbench(), contexts=[context]) as host:
        await host.command("workbench.hello", context)
        await host.set_contexts([context])
        state = await host.invoke("workbench.state", {}, context=REF)
        with pytest.raises(JSONRPCError) as refused:
            await host.invoke("workbench.terminal", {})
    assert state == {
        "contextsRevision": 2,
        "commands": [{"commandID": "workbench.hello", "workspaceContext": REF}],
        "lastTerminalExit": None,
    }
    assert refused.value.data == {"code": "workbench.noContext"}
