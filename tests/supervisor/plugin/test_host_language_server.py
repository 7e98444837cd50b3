"""``lithe/host/languageServer/*`` served by the supervisor (issue 17; plugin-contract.md
"Language server host methods"): a real backend process talks to a real server process
through the Core, which maps context + serverID to the server's session."""

from __future__ import annotations

import json
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
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.lsp._support import Session

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
