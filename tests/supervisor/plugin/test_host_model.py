"""The host-service foundation: workspace contexts, subscriptions, the dispatch table
(issue 17; plugin-contract.md "Workspace contexts and capability discovery", "Host
notifications")."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest
import trio

from protocol import CoreError
from supervisor._plugin._host import AllowAll, HostEnvironment, HostServices, RouteToClient
from supervisor._plugin._state import HOST_METHODS, HostRefusal
from supervisor._plugin._subscriptions import (
    DID_CHANGE_CONTEXTS,
    NOTIFY,
    HostNotifications,
    NotificationOverflow,
    Subscriptions,
)
from supervisor._plugin._workspace import WorkspaceContexts

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject, JSONValue


def one(context_id: str, *paths: str, **extra: JSONValue) -> JSONObject:
    return {"contextID": context_id, "folders": [{"path": p} for p in paths], **extra}


def test_generation_and_revision_rules(tmp_path: Path) -> None:
    revisions: list[int] = []
    contexts = WorkspaceContexts(tmp_path, on_revision=revisions.append)
    assert contexts.revision == 0
    reply = contexts.set_contexts({"contexts": [one("w1", "/a"), one("w2", "/b")]})
    assert reply == {
        "revision": 1,
        "contexts": [{"contextID": "w1", "generation": 1}, {"contextID": "w2", "generation": 1}],
    }
    # The same set again changes nothing: no new revision.
    assert contexts.set_contexts({"contexts": [one("w1", "/a"), one("w2", "/b")]})["revision"] == 1
    # New folders: the next generation; a context left out closes.
    reply = contexts.set_contexts({"contexts": [one("w1", "/a", "/c")]})
    assert reply == {"revision": 2, "contexts": [{"contextID": "w1", "generation": 2}]}
    # Another authority is a change too; a new name alone is a new revision only.
    remote: JSONObject = {"kind": "remote", "id": "ssh-1"}
    reply = contexts.set_contexts({"contexts": [one("w1", "/a", "/c", authority=remote)]})
    assert reply["contexts"] == [{"contextID": "w1", "generation": 3}]
    reply = contexts.set_contexts(
        {"contexts": [one("w1", "/a", "/c", authority=remote, name="renamed")]}
    )
    assert reply["contexts"] == [{"contextID": "w1", "generation": 3}]
    assert revisions == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"contexts": {}}, "contexts"),
        ({"contexts": [], "x": 1}, "contexts"),
        ({"contexts": [one("bad id", "/a")]}, "contexts[0].contextID"),
        ({"contexts": [one("w1", "relative")]}, "contexts[0].folders[0].path"),
        ({"contexts": [one("w1", "/a\0b")]}, "contexts[0].folders[0].path"),
        ({"contexts": [one("w1", "/a", authority={"kind": "remote"})]}, "contexts[0].authority"),
        ({"contexts": [{"contextID": "w1", "folders": [], "more": 1}]}, "contexts[0]"),
        ({"contexts": [one("w1", "/a"), one("w1", "/b")]}, "contexts"),
        ({"contexts": [one(f"w{n}") for n in range(257)]}, "contexts"),
        ({"contexts": [one("w1", "/a", name="n" * 1025)]}, "contexts[0].name"),
        ({"contexts": [one("w1", "/" + "p" * 4096)]}, "contexts[0].folders[0].path"),
        (
            {"contexts": [{"contextID": "w1", "folders": [{"path": "/a", "name": "é" * 513}]}]},
            "contexts[0].folders[0].name",
        ),
        (
            {"contexts": [one("w1", "/a", authority={"kind": "remote", "id": "r" * 1025})]},
            "contexts[0].authority",
        ),
    ],
)
def test_malformed_contexts_change_nothing(tmp_path: Path, payload: JSONObject, field: str) -> None:
    contexts = WorkspaceContexts(tmp_path)
    contexts.set_contexts({"contexts": [one("w0", "/z")]})
    with pytest.raises(CoreError) as refused:
        contexts.set_contexts(payload)
    assert refused.value.code == "invalid_request"
    assert refused.value.details == {"field": field}
    assert contexts.revision == 1
    assert [c.context_id for c in contexts.contexts] == ["w0"]


def test_resolve_refuses_closed_and_older_generations(tmp_path: Path) -> None:
    contexts = WorkspaceContexts(tmp_path)
    contexts.set_contexts({"contexts": [one("w1", "/a")]})
    assert contexts.resolve({"contextID": "w1", "generation": 1}).context_id == "w1"
    contexts.set_contexts({"contexts": [one("w1", "/b")]})
    references: list[JSONValue] = [
        {"contextID": "w1", "generation": 1},
        {"contextID": "w9", "generation": 1},
    ]
    for reference in references:
        with pytest.raises(HostRefusal) as expired:
            contexts.resolve(reference)
        assert (expired.value.number, expired.value.code) == (-32011, "plugin.host.contextExpired")
    with pytest.raises(HostRefusal) as malformed:
        contexts.resolve({"contextID": "w1"})
    assert malformed.value.code == "plugin.host.invalidParams"


def test_root_ids_are_stable_private_and_per_plugin(tmp_path: Path) -> None:
    contexts = WorkspaceContexts(tmp_path)
    contexts.set_contexts({"contexts": [one("w1", "/work/orders")]})
    context = contexts.contexts[0]
    folder = context.folders[0]
    first = contexts.root_id("p.one", folder)
    assert first.startswith("r")
    assert len(first) == 17
    assert "orders" not in first
    assert contexts.root_id("p.two", folder) != first
    # The host secret is kept (0600): a later Core gives the same ID.
    secret = tmp_path / "host-secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    again = WorkspaceContexts(tmp_path)
    assert again.root_id("p.one", folder) == first
    assert contexts.folder_of("p.one", context, first) == folder
    # A damaged secret file gives a secret of this process, not a failure.
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "host-secret").write_bytes(b"short")
    other = WorkspaceContexts(damaged)
    assert other.root_id("p.one", folder) == other.root_id("p.one", folder) != first
    with pytest.raises(HostRefusal) as unknown:
        contexts.folder_of("p.two", context, first)
    assert unknown.value.code == "plugin.host.notFound"


def test_paths_only_for_local_and_state_directory_only_from_get_context(tmp_path: Path) -> None:
    contexts = WorkspaceContexts(tmp_path / "state")
    remote: JSONObject = {"kind": "remote", "id": "c1"}
    contexts.set_contexts(
        {"contexts": [one("w1", "/a", name="one"), one("w2", "/b", authority=remote)]}
    )
    local, far = contexts.contexts
    listed = contexts.wire("p", local)
    assert set(listed) == {"contextID", "generation", "name", "authority", "folders"}
    assert listed["folders"] == [
        {"rootID": contexts.root_id("p", local.folders[0]), "name": "a", "path": "/a"}
    ]
    assert not (tmp_path / "state" / "p").exists()
    full = contexts.wire("p", local, state_directory=True)
    directory = str(full["stateDirectory"])
    assert os.path.isdir(directory)
    assert directory.startswith(str(tmp_path / "state" / "p" / "backend" / "workspaces"))
    assert "path" not in contexts.folders_wire("p", far)[0]  # type: ignore[operator]


async def test_closing_or_replacing_a_context_cancels_its_requests(tmp_path: Path) -> None:
    contexts = WorkspaceContexts(tmp_path)
    contexts.set_contexts({"contexts": [one("w1", "/a"), one("w2", "/b")]})
    w1, w2 = contexts.contexts
    outcomes: dict[str, str] = {}

    async def wait_in(context_id: str) -> None:
        context = w1 if context_id == "w1" else w2
        try:
            with contexts.bound(context):
                await trio.sleep_forever()
        except HostRefusal as refusal:
            outcomes[context_id] = refusal.code

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_in, "w1")
        nursery.start_soon(wait_in, "w2")
        await trio.testing.wait_all_tasks_blocked()
        contexts.set_contexts({"contexts": [one("w2", "/b", "/c")]})
    assert outcomes == {"w1": "plugin.host.contextExpired", "w2": "plugin.host.contextExpired"}
    assert not w1.scopes
    assert not w2.scopes


def test_subscription_sequences_and_disposal() -> None:
    sent: list[tuple[str, JSONObject]] = []
    disposed: list[str] = []
    subscriptions = Subscriptions(lambda method, params: sent.append((method, params)))
    a = subscriptions.open("w1", lambda: disposed.append("a"))
    b = subscriptions.open(None, lambda: disposed.append("b"))
    assert a.subscription_id != b.subscription_id
    assert subscriptions.publish(a.subscription_id, {"n": 1})
    assert subscriptions.publish(b.subscription_id, {"n": 1})
    assert subscriptions.publish(a.subscription_id, {"n": 2})
    assert [(m, p["subscriptionID"], p["sequence"]) for m, p in sent] == [
        (NOTIFY, a.subscription_id, 1),
        (NOTIFY, b.subscription_id, 1),
        (NOTIFY, a.subscription_id, 2),
    ]
    assert subscriptions.dispose_context("w1") == 1
    assert not subscriptions.publish(a.subscription_id, {"n": 3})  # nothing after disposal
    assert not subscriptions.dispose(a.subscription_id)
    assert subscriptions.close() == 1
    assert disposed == ["a", "b"]
    c = subscriptions.open()
    assert c.subscription_id not in (a.subscription_id, b.subscription_id)


async def test_notification_queue_coalesces_revisions_and_overflow_ends() -> None:
    queue = HostNotifications(bound=3)
    queue.put(DID_CHANGE_CONTEXTS, {"revision": 1})
    queue.put(NOTIFY, {"sequence": 1})
    queue.put(DID_CHANGE_CONTEXTS, {"revision": 2})
    assert await queue.get() == (DID_CHANGE_CONTEXTS, {"revision": 2})
    assert await queue.get() == (NOTIFY, {"sequence": 1})
    for n in range(4):
        queue.put(NOTIFY, {"sequence": n})
    with pytest.raises(NotificationOverflow):
        await queue.get()
    queue.clear()
    queue.put(NOTIFY, {"sequence": 9})
    assert await queue.get() == (NOTIFY, {"sequence": 9})


async def test_notification_queue_is_bounded_in_bytes_too() -> None:
    """Issue 25: a few large notifications overflow it as many small ones do."""
    queue = HostNotifications(bound=100, max_bytes=1000)
    queue.put(NOTIFY, {"event": "e" * 400})
    assert await queue.get() == (NOTIFY, {"event": "e" * 400})
    queue.put(NOTIFY, {"event": "e" * 400})
    queue.put(NOTIFY, {"event": "e" * 400})
    queue.put(NOTIFY, {"event": "e" * 400})  # past 1 000 bytes waiting
    with pytest.raises(NotificationOverflow, match="1000 bytes"):
        await queue.get()


async def test_a_peeked_latest_wins_notification_still_merges() -> None:
    # The sender peeks at the head and leaves it queued while the backend does not read.
    queue = HostNotifications()
    queue.put(DID_CHANGE_CONTEXTS, {"revision": 1})
    assert await queue.peek() == DID_CHANGE_CONTEXTS
    for revision in range(2, 31):
        queue.put(DID_CHANGE_CONTEXTS, {"revision": revision})
    assert len(queue) == 1
    assert await queue.get() == (DID_CHANGE_CONTEXTS, {"revision": 30})
    # Nothing else merges: a subscription's events each keep their sequence.
    queue.put(NOTIFY, {"sequence": 1})
    queue.put(NOTIFY, {"sequence": 2})
    assert len(queue) == 2


async def test_dispatch_table_and_policies(tmp_path: Path) -> None:
    async def handler(call: object) -> JSONValue:
        return None

    table = HostServices()
    table.register("lithe/host/x/y", handler)
    with pytest.raises(ValueError, match="already has a handler"):
        table.register("lithe/host/x/y", handler)
    assert table.get("lithe/host/x/y") is handler
    assert table.get("lithe/host/x/z") is None
    host = HostEnvironment.default(state_root=tmp_path)
    assert {
        "lithe/host/workspace/listContexts",
        "lithe/host/workspace/getContext",
        "lithe/host/workspace/getFolders",
    } <= host.table.methods
    # Outside a Core there are no services to reach.
    assert await host.service("terminal") is None
    assert host.opened_service("terminal") is None
    assert not AllowAll().routes_to_client("lithe/host/workspace/listContexts")
    assert RouteToClient().routes_to_client("lithe/host/workspace/listContexts")
    only = RouteToClient(["lithe/host/terminal/create"])
    assert only.routes_to_client("lithe/host/terminal/create")
    assert not only.routes_to_client("lithe/host/workspace/listContexts")


def test_every_method_core_admits_is_served_here_or_forwarded(tmp_path: Path) -> None:
    # plugin-contract.md "Workspace contexts and capability discovery": a listed method never
    # fails for want of a handler. What the supervisor serves is fixed; everything else Core
    # admits becomes a hostRequest for the client that granted it (reference-coverage I15).
    served = HostEnvironment.default(state_root=tmp_path).table.methods
    assert served == {
        "lithe/host/workspace/listContexts",
        "lithe/host/workspace/getContext",
        "lithe/host/workspace/getFolders",
        *(f"lithe/host/terminal/{name}" for name in ("create", "show", "close", "reopen")),
        "lithe/host/terminal/dispose",
        "lithe/host/terminal/onExit",
        "lithe/host/run/start",
        "lithe/host/run/stop",
        "lithe/host/debug/start",
        "lithe/host/languageServer/request",
        "lithe/host/languageServer/notify",
        "lithe/host/languageServer/setStatus",
    }
    # A handler only for a method Core checks, so nothing served skips Core's checks.
    assert served <= set(HOST_METHODS)
    # Credentials, documents, editor, window, file and search methods: the client's.
    forwarded = set(HOST_METHODS) - served
    assert {"lithe/host/credentials/get", "lithe/host/window/showError"} <= forwarded
