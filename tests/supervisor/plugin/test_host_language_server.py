"""``lithe/host/languageServer/*`` served by the supervisor (issue 17; plugin-contract.md
"Language server host methods"): a real backend process talks to a real server process
through the Core, which maps context + serverID to the server's session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor import open_core
from tests.supervisor.lsp._support import PY, as_obj, fake, start
from tests.supervisor.plugin.test_host_services import (
    BACKEND,
    PLUGIN,
    backend_notifications,
    code_of,
    host_calls,
    replies_of,
    send_calls,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.lsp._support import Session

PEERS = Path(BACKEND).resolve().parent
PREFIX = "lithe/host/languageServer/"
GRANTS: list[JSONValue] = [PREFIX + "request", PREFIX + "notify", PREFIX + "setStatus"]
REF: JSONObject = {"contextID": "w1", "generation": 1}
POLICY: JSONValue = {
    "requestMethods": ["test/sleep", "test/hang", "test/fail", "test/notify", "test/exit"],
    "forwardNotifications": ["custom/event"],
}


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    async with open_core(plugin_state_root=tmp_path / "state") as opened:
        await opened.call(
            "workspace.setContexts", {"contexts": [{"contextID": "w1", "folders": []}]}
        )
        yield opened


FUNCTIONS = {
    "version": 0,
    "functions": [{"id": "host.call"}, {"id": "host.cancel"}, {"id": "seen.get"}],
}


async def backend(core: Core, tmp: Path, grants: list[JSONValue]) -> Session:
    session = await start(
        core,
        [PY, BACKEND, json.dumps(FUNCTIONS)],
        str(tmp),
        pluginId=PLUGIN,
        hostServices=grants,
        shutdownTimeoutMilliseconds=2000,
    )
    await session.wait_state("ready")
    return session


async def server(
    core: Core, tmp: Path, plugin: str = PLUGIN, server_id: str = "py", **extra: Any
) -> Session:
    extra.setdefault("sessionPolicy", POLICY)
    session = await start(
        core,
        fake(),
        str(tmp),
        serverId=server_id,
        contribution={"pluginID": plugin, "context": REF},
        **extra,
    )
    await session.wait_state("ready")
    return session


def ls(host_method: str, /, **params: Any) -> JSONObject:
    return {"method": PREFIX + host_method, "params": {"context": REF, "serverID": "py", **params}}


async def test_request_and_notify_reach_the_server_of_the_context(
    core: Core, tmp_path: Path
) -> None:
    host = await backend(core, tmp_path, GRANTS)
    lang = await server(core, tmp_path)
    ok, failed, undeclared, bad_timeout, unknown_field, delivered = await host_calls(
        host,
        ls("request", method="test/sleep", params={"ms": 1}, timeoutMilliseconds=300_000),
        ls("request", method="test/fail", params={"code": -32099, "message": "nope"}),
        ls("request", method="textDocument/hover"),
        ls("request", method="test/sleep", timeoutMilliseconds=300_001),
        ls("request", method="test/sleep", extra=1),
        ls("notify", method="workspace/didChangeConfiguration", params={"settings": {}}),
    )
    assert ok["result"] == {"value": "slept"}
    assert as_obj(failed["error"])["code"] == -32023
    assert as_obj(as_obj(failed["error"])["data"])["details"] == {"code": -32099, "message": "nope"}
    assert code_of(undeclared) == "plugin.host.methodNotDeclared"
    assert code_of(bad_timeout) == "plugin.host.invalidParams"
    assert code_of(unknown_field) == "plugin.host.unsupportedOption"
    assert as_obj(as_obj(unknown_field["error"])["data"])["details"] == {"option": "extra"}
    assert delivered["result"] == {"delivered": True}
    (capabilities,) = await host_calls(host, {"method": "lithe/host/getCapabilities"})
    services = as_obj(as_obj(capabilities["result"])["services"])
    assert services["languageServer"] == {
        "methods": sorted(str(g) for g in GRANTS),
        "notifications": [PREFIX + "didChangeState", PREFIX + "didReceiveNotification"],
    }
    # Served here: the client never saw a hostRequest for them.
    assert not [e for e in host.seen if e["event"] == "hostRequest"]
    await lang.stop()
    await host.stop()


async def test_server_mapping_foreign_and_unavailable(core: Core, tmp_path: Path) -> None:
    host = await backend(core, tmp_path, GRANTS)
    await server(core, tmp_path, plugin="org.other", server_id="rs")
    no_session = await server(core, tmp_path, server_id="plain", sessionPolicy={})
    foreign, missing, stale, undeclared_session = await host_calls(
        host,
        {"method": PREFIX + "request", "params": {"context": REF, "serverID": "rs", "method": "x"}},
        ls("request", method="test/sleep"),
        {
            "method": PREFIX + "request",
            "params": {"context": {"contextID": "w1", "generation": 2}, "serverID": "py"},
        },
        {
            "method": PREFIX + "request",
            "params": {"context": REF, "serverID": "plain", "method": "test/sleep"},
        },
    )
    assert code_of(foreign) == "plugin.host.foreignContribution"
    assert as_obj(foreign["error"])["code"] == -32026
    assert code_of(missing) == "plugin.host.languageServerUnavailable"
    assert code_of(stale) == "plugin.host.contextExpired"
    # Granted only for a server that declares a session (requestMethods/forwardNotifications).
    assert code_of(undeclared_session) == "plugin.host.permissionDenied"
    assert no_session.id
    # Not granted: permissionDenied before anything else.
    await host.stop()
    other = await backend(core, tmp_path, [])
    (denied,) = await host_calls(other, ls("request", method="test/sleep"))
    assert code_of(denied) == "plugin.host.permissionDenied"
    await other.stop()


async def test_cancel_and_context_close_end_the_server_request(core: Core, tmp_path: Path) -> None:
    host = await backend(core, tmp_path, GRANTS)
    lang = await server(core, tmp_path)
    op = await host.call(
        "lsp.functionRequest",
        function={"pluginID": PLUGIN, "functionID": "host.cancel"},
        params={
            "method": PREFIX + "request",
            "params": ls("request", method="test/hang")["params"],
        },
    )
    cancelled = as_obj(as_obj((await host.completed(str(op["operationId"])))["result"])["value"])
    assert as_obj(cancelled["data"])["code"] == "plugin.host.cancelled"
    with trio.fail_after(20):
        while "test/hang" not in json.dumps(  # noqa: ASYNC110 - the server's own record
            (await lang.roundtrip("test/cancelled"))["result"]
        ):
            await trio.sleep(0.05)
    # Closing the context ends its request with contextExpired and cancels the server's.
    waiting = await send_calls(host, ls("request", method="test/hang"))
    await lang.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] == "ready")
    with trio.fail_after(20):
        while not (await lang.snapshot())["pendingRequests"]:  # noqa: ASYNC110 - poll
            await trio.sleep(0.02)
    await core.call("workspace.setContexts", {"contexts": []})
    (expired,) = await replies_of(host, waiting)
    assert code_of(expired) == "plugin.host.contextExpired"
    with trio.fail_after(20):
        while (await lang.snapshot())["pendingRequests"]:  # noqa: ASYNC110 - poll
            await trio.sleep(0.02)
    await lang.stop()
    await host.stop()


async def test_set_status(core: Core, tmp_path: Path) -> None:
    host = await backend(core, tmp_path, GRANTS)
    lang = await server(core, tmp_path, restart={"initialBackoffMilliseconds": 10})
    message = "é" * 600  # 1200 bytes: cut to 1024 on a character boundary
    # One after the other: requests sent at once are served concurrently.
    (first,) = await host_calls(
        host, ls("setStatus", state="preparing", message="importing", percentage=10)
    )
    second, bad_state, bad_percentage = await host_calls(
        host,
        ls("setStatus", state="preparing", message=message, percentage=100),
        ls("setStatus", state="busy"),
        ls("setStatus", state="ready", percentage=101),
    )
    assert first["result"] == second["result"] == {}
    assert code_of(bad_state) == code_of(bad_percentage) == "plugin.host.invalidParams"
    status = as_obj((await lang.snapshot())["pluginStatus"])
    assert status == {
        "generation": 1,
        "state": "preparing",
        "message": "é" * 512,
        "percentage": 100,
    }
    event = await lang.wait_for(
        lambda e: e["event"] == "pluginStatus" and e.get("percentage") == 100
    )
    assert event["state"] == "preparing"
    # A new generation starts without one.
    await lang.roundtrip("test/exit", {"code": 3})
    await lang.wait_for(
        lambda e: e["event"] == "stateChanged" and e["state"] == "ready" and e["generation"] == 2
    )
    assert (await lang.snapshot())["pluginStatus"] is None
    (third,) = await host_calls(host, ls("setStatus", state="degraded"))
    assert as_obj((await lang.snapshot())["pluginStatus"])["generation"] == 2
    # Removed when the server stops.
    await lang.stop()
    assert (await lang.snapshot())["pluginStatus"] is None
    assert third["result"] == {}
    await host.stop()


async def test_state_changes_and_forwarded_notifications_reach_the_backend(
    core: Core, tmp_path: Path
) -> None:
    host = await backend(core, tmp_path, GRANTS)
    lang = await server(core, tmp_path, restart={"initialBackoffMilliseconds": 10})
    states = await backend_notifications(host, PREFIX + "didChangeState", 2)
    assert [as_obj(n["params"]) for n in states[:2]] == [
        {"context": REF, "serverID": "py", "state": "starting", "generation": 1},
        {"context": REF, "serverID": "py", "state": "running", "generation": 1},
    ]
    big = "x" * (64 * 1024)
    for params in (
        {"method": "custom/event", "params": {"n": 1}},
        {"method": "custom/other", "params": {}},
        {"method": "custom/event", "params": {"b": big}},
    ):  # one after the other, so they are forwarded in this order
        await host_calls(host, ls("request", method="test/notify", params=params))
    forwarded = await backend_notifications(host, PREFIX + "didReceiveNotification", 2)
    assert [as_obj(n["params"]) for n in forwarded] == [
        {
            "context": REF,
            "serverID": "py",
            "generation": 1,
            "method": "custom/event",
            "params": {"n": 1},
        },
        {
            "context": REF,
            "serverID": "py",
            "generation": 1,
            "method": "custom/event",
            "truncated": True,
        },
    ]
    # A crash: crashed, then the new generation starts and runs; in-flight requests end.
    (gone,) = await host_calls(host, ls("request", method="test/exit", params={"code": 3}))
    assert code_of(gone) == "plugin.host.languageServerUnavailable"
    states = await backend_notifications(host, PREFIX + "didChangeState", 5)
    assert [(as_obj(n["params"])["state"], as_obj(n["params"])["generation"]) for n in states] == [
        ("starting", 1),
        ("running", 1),
        ("crashed", 1),
        ("starting", 2),
        ("running", 2),
    ]
    await lang.stop()
    states = await backend_notifications(host, PREFIX + "didChangeState", 6)
    assert as_obj(states[-1]["params"])["state"] == "stopped"
    await host.stop()


# -- end to end through `supervisor serve`, with pylsp and a launch plan -------------------------


async def test_backend_drives_pylsp_through_serve(tmp_path: Path) -> None:
    """Both processes start from launch plans (the backend: a runtime launch of a package
    file, in its state directory; pylsp: a systemCommand passing its validation probe); the
    backend asks pylsp for document symbols with lithe/host/languageServer/request and hears
    didChangeState, all through a `supervisor serve` child."""
    from tests.supervisor.cli.test_serve import serve_process
    from tests.supervisor.lsp._support import PYLSP
    from tests.supervisor.plugin.test_example_backends import ServeSession

    source = tmp_path / "m.py"
    source.write_text("def greet(name):\n    return name\n", encoding="utf-8")
    peers = PEERS
    async with serve_process(grace_s=20) as client:
        await client.initialize()
        declared = await client.request(
            "workspace.setContexts",
            {"contexts": [{"contextID": "w1", "folders": [{"path": str(tmp_path)}]}]},
        )
        assert as_obj(declared["result"])["revision"] == 1
        reply = await client.request(
            "lsp.startServer",
            {
                "serverId": "backend",
                "pluginId": PLUGIN,
                "hostServices": GRANTS,
                "shutdownTimeoutMilliseconds": 5000,
                "launchPlan": {
                    "backend": True,
                    "launch": {"kind": "runtime", "tool": "py", "entry": "plugin_backend.py"},
                    "arguments": [json.dumps(FUNCTIONS)],
                    "requiresTools": ["py"],
                    "tools": {"py": {"executable": PY}},
                    "pluginDirectory": str(peers),
                    "stateDirectory": str(tmp_path / "backend-state"),
                },
            },
        )
        host = ServeSession(client, str(as_obj(reply["result"])["sessionId"]))
        await host.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] == "ready")
        reply = await client.request(
            "lsp.startServer",
            {
                "serverId": "python",
                "workingDirectory": str(tmp_path),
                "rootUri": tmp_path.as_uri(),
                "environment": {"PATH": f"{Path(PYLSP).parent}:/usr/bin:/bin"},
                "sessionPolicy": {"requestMethods": ["textDocument/documentSymbol"]},
                "contribution": {"pluginID": PLUGIN, "context": REF},
                "launchPlan": {
                    "launch": {"kind": "systemCommand", "commands": ["no-such-pylsp", "pylsp"]},
                    "validationArguments": ["--version"],
                    "pluginDirectory": str(tmp_path / "package"),
                    "stateDirectory": str(tmp_path / "pylsp-state"),
                },
            },
        )
        pylsp = ServeSession(client, str(as_obj(reply["result"])["sessionId"]))
        await pylsp.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] == "ready")

        async def host_call(*requests: JSONObject) -> list[JSONObject]:
            result = await host.call(
                "lsp.functionRequest",
                function={"pluginID": PLUGIN, "functionID": "host.call"},
                params={"requests": list(requests)},
            )
            done = await host.completed(result["operationId"])
            replies = as_obj(done["result"])["value"]
            assert isinstance(replies, list)
            return [as_obj(r) for r in replies]

        request: JSONObject = {
            "method": PREFIX + "request",
            "params": {
                "context": REF,
                "serverID": "python",
                "method": "textDocument/documentSymbol",
                "params": {"textDocument": {"uri": source.as_uri()}},
            },
        }
        (symbols,) = await host_call(request)
        value = as_obj(symbols["result"])["value"]
        assert isinstance(value, list)
        assert "greet" in [as_obj(symbol)["name"] for symbol in value]
        with trio.fail_after(30):
            while True:
                got = await host.call(
                    "lsp.functionRequest",
                    function={"pluginID": PLUGIN, "functionID": "seen.get"},
                )
                seen = as_obj((await host.completed(got["operationId"]))["result"])
                notes = as_obj(seen["value"])["notifications"]
                assert isinstance(notes, list)
                states = [
                    as_obj(as_obj(n)["params"])
                    for n in notes
                    if as_obj(n)["method"] == PREFIX + "didChangeState"
                ]
                if states and states[-1]["state"] == "running":
                    break
                await trio.sleep(0.05)
        assert states[-1] == {
            "context": REF,
            "serverID": "python",
            "state": "running",
            "generation": 1,
        }
        await client.shut_down()
