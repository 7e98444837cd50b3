"""Host services the supervisor serves itself, through the Core with a real backend
(issue 17; plugin-contract.md "Workspace contexts and capability discovery", "Host
notifications", "Host services")."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest
import trio

from protocol import CoreError
from supervisor import open_core
from supervisor._plugin._host import RouteToClient
from tests.supervisor.cli.test_serve import serve_process
from tests.supervisor.lsp._support import PY, as_obj, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.lsp._support import Session

BACKEND = os.path.join(os.path.dirname(__file__), "..", "..", "peers", "plugin_backend.py")
PLUGIN = "com.example.tool"
FUNCTIONS = {
    "version": 0,
    "functions": [{"id": "host.call"}, {"id": "seen.get"}, {"id": "late.reply"}],
}


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    async with open_core(plugin_state_root=tmp_path / "state") as opened:
        yield opened


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


async def send_calls(session: Session, *requests: JSONObject) -> str:
    """The backend sends ``requests`` at once; the operation id of the call doing it."""
    op = (
        await session.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "host.call"},
            params={"requests": list(requests)},
        )
    )["operationId"]
    assert isinstance(op, str)
    return op


async def replies_of(session: Session, op: str) -> list[JSONObject]:
    """The replies the backend got, in the order it sent the requests."""
    replies = as_obj((await session.completed(op))["result"])["value"]
    assert isinstance(replies, list)
    return [as_obj(r) for r in replies]


async def host_calls(session: Session, *requests: JSONObject) -> list[JSONObject]:
    """The backend sends ``requests`` at once; their replies, in order."""
    return await replies_of(session, await send_calls(session, *requests))


async def backend_notifications(session: Session, method: str, count: int) -> list[JSONObject]:
    with trio.fail_after(20):
        while True:
            op = (
                await session.call(
                    "lsp.functionRequest",
                    function={"pluginID": PLUGIN, "functionID": "seen.get"},
                )
            )["operationId"]
            assert isinstance(op, str)
            seen = as_obj(as_obj((await session.completed(op))["result"])["value"])
            notes = seen["notifications"]
            assert isinstance(notes, list)
            found = [as_obj(n) for n in notes if as_obj(n)["method"] == method]
            if len(found) >= count:
                return found
            await trio.sleep(0.05)


def code_of(reply: JSONObject) -> JSONValue:
    return as_obj(as_obj(reply["error"])["data"])["code"]


async def test_workspace_methods_are_served_here(core: Core, tmp_path: Path) -> None:
    root = tmp_path / "orders"
    root.mkdir()
    declared = as_obj(
        await core.call(
            "workspace.setContexts",
            {"contexts": [{"contextID": "w1", "name": "orders", "folders": [{"path": str(root)}]}]},
        )
    )
    assert declared == {"revision": 1, "contexts": [{"contextID": "w1", "generation": 1}]}
    session = await backend(core, tmp_path, ["workspace"])
    ref: JSONObject = {"contextID": "w1", "generation": 1}
    listed, got, folders = await host_calls(
        session,
        {"method": "lithe/host/workspace/listContexts"},
        {"method": "lithe/host/workspace/getContext", "params": {"context": ref}},
        {"method": "lithe/host/workspace/getFolders", "params": {"context": ref}},
    )
    contexts = as_obj(listed["result"])["contexts"]
    assert isinstance(contexts, list)
    entry = as_obj(contexts[0])
    assert "stateDirectory" not in entry
    assert entry["authority"] == {"kind": "local"}
    folder_list = as_obj(folders["result"])["folders"]
    assert isinstance(folder_list, list)
    folder = as_obj(folder_list[0])
    context = as_obj(got["result"])
    state = str(context["stateDirectory"])
    assert await trio.Path(state).is_dir()
    assert state.startswith(str(tmp_path / "state" / PLUGIN))
    assert context["folders"] == folder_list == entry["folders"]
    assert folder["path"] == str(root)
    assert str(folder["rootID"]).startswith("r")
    # Nothing reached the client: no hostRequest event.
    assert not [e for e in session.seen if e["event"] == "hostRequest"]
    # A change tells the backend (workspace grant) and expires the old generation.
    await core.call(
        "workspace.setContexts",
        {"contexts": [{"contextID": "w1", "folders": [{"path": str(root)}, {"path": "/"}]}]},
    )
    notes = await backend_notifications(session, "lithe/host/workspace/didChangeContexts", 1)
    assert notes[-1]["params"] == {"revision": 2}
    (old,) = await host_calls(
        session, {"method": "lithe/host/workspace/getFolders", "params": {"context": ref}}
    )
    assert as_obj(old["error"])["code"] == -32011
    assert code_of(old) == "plugin.host.contextExpired"
    await session.stop()


async def _set_contexts(core: Core, session: Session | None, root: Path, n: int) -> int:
    """Change the one open context (its folders) with ``workspace.setContexts``; the new
    revision."""
    folders: list[JSONValue] = [{"path": str(root)}]
    folders += [{"path": "/"}] * (n % 2)
    changed = as_obj(
        await core.call(
            "workspace.setContexts",
            {"contexts": [{"contextID": "w1", "name": f"orders {n}", "folders": folders}]},
        )
    )
    revision = changed["revision"]
    assert isinstance(revision, int)
    return revision


async def _host_notify_contexts(core: Core, session: Session | None, root: Path, n: int) -> int:
    """A host with its own workspace model sends the change itself (``lsp.hostNotify``)."""
    if session is not None:
        notified = await session.call(
            "lsp.hostNotify",
            method="lithe/host/workspace/didChangeContexts",
            params={"revision": n + 1},
        )
        assert notified == {"delivered": True}
    return n + 1


#: How to make each "latest wins" host notification go out, once, by every path a change
#: takes (plugin-contract.md "Host services": "context revisions coalesce to the latest").
LATEST_WINS_CAUSES = {
    "lithe/host/workspace/didChangeContexts": {
        "setContexts": _set_contexts,
        "hostNotify": _host_notify_contexts,
    },
}


def test_every_latest_wins_notification_is_tested() -> None:
    from supervisor._plugin._subscriptions import LATEST_WINS

    assert set(LATEST_WINS_CAUSES) == LATEST_WINS


@pytest.mark.parametrize(
    ("method", "path"),
    [(method, path) for method, paths in sorted(LATEST_WINS_CAUSES.items()) for path in paths],
)
async def test_latest_wins_notifications_merge_while_the_backend_does_not_read(
    core: Core, tmp_path: Path, method: str, path: str
) -> None:
    root = tmp_path / "orders"
    root.mkdir()
    cause = LATEST_WINS_CAUSES[method][path]
    await _set_contexts(core, None, root, 0)
    session = await backend(core, tmp_path, ["workspace"])
    # The backend stops reading for 3 s, and says so first.
    op = (
        await session.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "late.reply"},
            params={"ms": 3000, "announce": True},
        )
    )["operationId"]
    assert isinstance(op, str)
    await session.wait_for(lambda e: e["event"] == "requestProgress" and e["operationId"] == op)
    latest = 0
    for n in range(1, 31):
        latest = await cause(core, session, root, n)
        await trio.sleep(0.02)  # the changes come apart: the sender runs between them
    await session.completed(op)
    with trio.fail_after(20):
        while True:
            notes = await backend_notifications(session, method, 1)
            if notes[-1]["params"] == {"revision": latest}:
                break
            await trio.sleep(0.05)
    # The one written before the pause (the pipe took it), then only the latest.
    assert len(notes) <= 2, notes
    await session.stop()


async def test_what_follows_a_held_host_notification_is_written_after_it(
    core: Core, tmp_path: Path
) -> None:
    """The order rule with a merging queue: a notification of the caller's own sent after
    ``lsp.hostNotify`` on the same session goes out after the held ``didChangeContexts``."""
    session = await backend(core, tmp_path, ["workspace"])
    op = (
        await session.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "late.reply"},
            params={"ms": 2000, "announce": True},
        )
    )["operationId"]
    assert isinstance(op, str)
    await session.wait_for(lambda e: e["event"] == "requestProgress" and e["operationId"] == op)
    for n in range(1, 6):
        await _host_notify_contexts(core, session, tmp_path, n)
    sent = await session.call("lsp.notify", method="custom/after", params={})
    assert sent == {"delivered": True}
    await session.completed(op)
    method = "lithe/host/workspace/didChangeContexts"
    op = (
        await session.call(
            "lsp.functionRequest", function={"pluginID": PLUGIN, "functionID": "seen.get"}
        )
    )["operationId"]
    assert isinstance(op, str)
    seen = as_obj(as_obj((await session.completed(op))["result"])["value"])
    arrivals = seen["arrivals"]
    assert isinstance(arrivals, list)
    order = [a for a in arrivals if isinstance(a, str) and a.startswith((method, "custom/"))]
    assert order[-1] == "custom/after None", order
    notifications = seen["notifications"]
    assert isinstance(notifications, list)
    contexts = [as_obj(n) for n in notifications if as_obj(n)["method"] == method]
    assert contexts[-1]["params"] == {"revision": 6}
    await session.stop()


async def test_a_forwarded_request_ends_when_its_context_closes(core: Core, tmp_path: Path) -> None:
    await core.call("workspace.setContexts", {"contexts": [{"contextID": "w1", "folders": []}]})
    session = await backend(core, tmp_path, ["lithe/host/window/showInformation"])
    ref: JSONObject = {"contextID": "w1", "generation": 1}
    op = await send_calls(
        session,
        {"method": "lithe/host/window/showInformation", "params": {"context": ref, "text": "a"}},
        {
            "method": "lithe/host/window/showInformation",
            "params": {"context": {"contextID": "w2", "generation": 1}, "text": "b"},
        },
    )
    event = await session.wait_for(lambda e: e["event"] == "hostRequest")
    await core.call("workspace.setContexts", {"contexts": []})
    replies = await replies_of(session, op)
    cancelled = await session.wait_for(lambda e: e["event"] == "hostRequestCancelled")
    assert cancelled["hostRequestID"] == as_obj(event["result"])["hostRequestID"]
    assert [code_of(r) for r in replies] == [
        "plugin.host.contextExpired",
        "plugin.host.contextExpired",
    ]
    await session.stop()


async def test_route_to_client_forwards_as_before(tmp_path: Path) -> None:
    async with open_core(host_policy=RouteToClient(), plugin_state_root=tmp_path) as core:
        session = await backend(core, tmp_path, ["workspace"])
        op = await send_calls(session, {"method": "lithe/host/workspace/listContexts"})
        event = await session.wait_for(lambda e: e["event"] == "hostRequest")
        assert as_obj(event["result"])["service"] == "workspace"
        await session.call(
            "lsp.hostResponse",
            hostRequestID=as_obj(event["result"])["hostRequestID"],
            result={"revision": 7, "contexts": []},
        )
        replies = await replies_of(session, op)
        assert replies == [{"result": {"revision": 7, "contexts": []}}]
        await session.stop()


async def test_serve_takes_the_host_requests_option(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    async with serve_process() as client:
        params: JSONObject = {"capabilities": {}, "initializationOptions": {"hostRequests": "x"}}
        refused = await client.request("initialize", params)
        assert as_obj(refused["error"])["code"] == -32602
    for choice in ("serve", "client"):
        async with serve_process() as client:
            await client.initialize(hostRequests=choice)
            reply = await client.request(
                "workspace.setContexts", {"contexts": [{"contextID": "w1", "folders": []}]}
            )
            assert reply["result"] == {
                "revision": 1,
                "contexts": [{"contextID": "w1", "generation": 1}],
            }
            await client.shut_down()


async def test_unanswered_host_requests_end_with_the_session(core: Core, tmp_path: Path) -> None:
    session = await backend(core, tmp_path, ["lithe/host/window/showInformation"])
    request: JSONObject = {
        "method": "lithe/host/window/showInformation",
        "params": {"context": {"contextID": "any", "generation": 1}, "text": "hello"},
    }
    await send_calls(session, request)
    event = await session.wait_for(lambda e: e["event"] == "hostRequest")
    host_request_id = as_obj(event["result"])["hostRequestID"]
    await session.stop()
    cancelled = await session.wait_for(lambda e: e["event"] == "hostRequestCancelled")
    assert cancelled["hostRequestID"] == host_request_id
    with pytest.raises(CoreError) as late:
        await session.call("lsp.hostResponse", hostRequestID=host_request_id, result=None)
    assert late.value.code == "invalid_request"
    assert as_obj((await session.snapshot())["plugin"])["pendingHostRequests"] == []


async def test_a_host_notification_overflow_ends_the_session(core: Core, tmp_path: Path) -> None:
    """More than 128 host notifications waiting for a backend end its session rather than
    grow without bound or lose one (plugin-contract.md "Public document, file and window
    methods": notifications have a 128-entry per-session queue)."""
    from supervisor._lsp._service import LspService

    session = await backend(core, tmp_path, [])
    service = next(s for s in core._services if isinstance(s, LspService))
    plugin = service.sessions[session.id].plugin
    assert plugin is not None
    subscription = plugin.subscriptions.open()
    for n in range(129):  # at once: the sender gets no chance to write one
        plugin.subscriptions.publish(subscription.subscription_id, {"n": n})
    failed = await session.wait_state("failed")
    error = as_obj(failed["error"])
    assert (error["code"], error["stage"]) == ("internal", "hostNotify")
    assert "129" not in str(error["message"])
    assert "128 host notifications" in str(error["message"])


async def test_relayed_calls_count_among_the_unanswered_host_requests(
    core: Core, tmp_path: Path
) -> None:
    """A session holds at most 16 unanswered host requests, relayed calls included
    (plugin-contract.md "Host services"): a relayed call waiting for its provider and 15
    requests the client has not answered leave room for none."""
    await core.call(
        "lsp.configureFunctionRelay",
        {
            "plugins": [
                {
                    "pluginID": PLUGIN,
                    "enabled": True,
                    "exports": [],
                    "calls": [{"id": "far.fn", "version": 1}],
                },
                {
                    "pluginID": "com.example.far",
                    "enabled": True,
                    "exports": [{"id": "far.fn", "version": 1}],
                    "calls": [],
                },
            ],
            "contexts": [{"contextID": "w1", "generation": 1, "authority": "local"}],
        },
    )
    session = await backend(core, tmp_path, ["credentials"])
    relayed: JSONObject = {
        "method": "lithe/host/functions/invoke",
        "params": {
            "pluginID": "com.example.far",
            "functionID": "far.fn",
            "context": {"contextID": "w1", "generation": 1},
        },
    }
    first = await send_calls(session, relayed)
    await session.wait_for(lambda e: e["event"] == "functionProviderStartRequired")
    asks: list[JSONObject] = [
        {"method": "lithe/host/credentials/get", "params": {"key": f"k{n}"}} for n in range(16)
    ]
    rest = await send_calls(session, *asks)
    with trio.fail_after(30):
        while len([e for e in session.seen if e["event"] == "hostRequest"]) < 15:
            await session.drain(1000)
    pending = [e for e in session.seen if e["event"] == "hostRequest"]
    for event in pending:
        await session.call(
            "lsp.hostResponse", hostRequestID=as_obj(event["result"])["hostRequestID"]
        )
    replies = await replies_of(session, rest)
    refused = [r for r in replies if "error" in r]
    assert len(refused) == 1
    assert as_obj(refused[0]["error"])["code"] == -32014
    assert code_of(refused[0]) == "plugin.host.limitExceeded"
    await session.stop()
    # The call that relayed ended with the session.
    ended = await session.completed(first)
    assert as_obj(ended["error"])["code"] == "languageServerUnavailable"
