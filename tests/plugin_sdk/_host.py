"""A small test-side host for SDK backends, written on ``supervisor.open_jsonrpc_endpoint``.

It starts an example backend as a real process tree, plays Lithe's side of the
plugin-function protocol (initialize offers, register/unregister, getCapabilities,
credentials) and relays ``lithe/host/functions/*`` between backends like a minimal Core,
nesting each forwarded call in the task serving the caller's request, so cancelling the top
cancels every provider down the chain.
"""

from __future__ import annotations

import itertools
import os
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from supervisor import JSONRPCEndpoint, JSONRPCError, open_jsonrpc_endpoint, open_process_tree
from supervisor._process._procfs import all_pids, read_env_var
from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "backends"
_wire_ids = itertools.count(1)
CONTEXT: JSONObject = {"contextID": "w1", "generation": 1}


@dataclass
class Peer:
    """One running backend seen from the host."""

    plugin_id: str
    endpoint: JSONRPCEndpoint
    pid: int
    notifications: list[tuple[str, JSONValue]] = field(default_factory=list)
    requests: list[tuple[str, JSONValue]] = field(default_factory=list)
    relayed: list[dict[str, Any]] = field(default_factory=list)
    relay_cancelled: list[str] = field(default_factory=list)
    host_outstanding: int = 0
    host_max_outstanding: int = 0
    changed: trio.Event = field(default_factory=trio.Event)
    tree: Any = None
    initialize_result: Any = None

    def note(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def facts(self) -> list[dict[str, Any]]:
        return [p for m, p in self.notifications if m == "lithe/log" and isinstance(p, dict)]

    def progress(self) -> list[dict[str, Any]]:
        return [
            p
            for m, p in self.notifications
            if m == "lithe/function/progress" and isinstance(p, dict)
        ]

    async def wait_for(self, predicate: object, timeout_s: float = 30) -> None:
        assert callable(predicate)
        with trio.fail_after(timeout_s):
            while not predicate():
                await self.changed.wait()

    async def invoke(
        self, function_id: str, params: JSONObject | None = None, **kwargs: Any
    ) -> Any:
        call: JSONObject = {"functionID": function_id, "operationID": f"op-{next(_wire_ids)}"}
        if params is not None:
            call["params"] = params
        call.update(kwargs)
        return await self.endpoint.request("lithe/function/invoke", call)


def scoped_pids(backend_pid: int) -> set[int]:
    """Live processes started by the backend (their marker names the backend's instance)."""
    found = set()
    for pid in all_pids():
        marker = read_env_var(pid, "SUPERVISOR_SCOPE")
        if marker is not None and marker.startswith(f"{backend_pid}."):
            found.add(pid)
    return found


async def wait_gone(pids: set[int], timeout_s: float = 20) -> None:
    with trio.fail_after(timeout_s):
        while any(not runs_no_more(p) for p in pids):  # noqa: ASYNC110 - polling /proc, no event to wait on
            await trio.sleep(0.05)


class Host:
    """The plugins of one test: plugin ID -> Peer, and the relay between them."""

    def __init__(self) -> None:
        self.peers: dict[str, Peer] = {}
        self.exports = {
            "project.describe": "dev.example.exporter",
            "tool.version": "dev.example.tools",
        }
        self.credential_delay_s = 0.0

    @asynccontextmanager
    async def open_backend(
        self,
        script: str,
        plugin_id: str,
        *,
        initialize: bool = True,
        offer_functions: bool = True,
        stderr_sink: list[bytes] | None = None,
    ) -> AsyncIterator[Peer]:
        tree = await open_process_tree(
            [sys.executable, str(EXAMPLES / script)], cwd=str(EXAMPLES.parents[1])
        )
        assert tree.stdin is not None
        assert tree.stdout is not None
        assert tree.stderr is not None
        peer_box: list[Peer] = []

        async def on_request(method: str, params: JSONValue | None) -> JSONValue:
            return await self._handle(peer_box[0], method, params)

        async def on_notification(method: str, params: JSONValue | None) -> None:
            peer_box[0].notifications.append((method, params))
            peer_box[0].note()

        try:
            async with trio.open_nursery() as nursery:

                async def drain_stderr() -> None:
                    assert tree.stderr is not None
                    async for chunk in tree.stderr:
                        if stderr_sink is not None:
                            stderr_sink.append(bytes(chunk))

                nursery.start_soon(drain_stderr)
                async with open_jsonrpc_endpoint(
                    tree.stdin,
                    tree.stdout,
                    request_handler=on_request,
                    notification_handler=on_notification,
                    name=plugin_id,
                ) as endpoint:
                    peer = Peer(plugin_id, endpoint, tree.pid)
                    peer.tree = tree
                    peer_box.append(peer)
                    self.peers[plugin_id] = peer
                    if initialize:
                        experimental: JSONObject = {"litheLogging": {"versions": [0]}}
                        if offer_functions:
                            experimental["litheFunctions"] = {"versions": [0]}
                        peer.initialize_result = await endpoint.request(
                            "initialize",
                            {
                                "processId": os.getpid(),
                                "capabilities": {"experimental": experimental},
                            },
                        )
                        await endpoint.notify("initialized", {})
                    yield peer
                nursery.cancel_scope.cancel()
        finally:
            self.peers.pop(plugin_id, None)
            await tree.aclose()

    async def _handle(self, peer: Peer, method: str, params: JSONValue | None) -> JSONValue:
        peer.requests.append((method, params))
        peer.note()
        if method in ("lithe/function/register", "lithe/function/unregister"):
            return None
        if method == "lithe/host/getCapabilities":
            return {
                "protocolVersion": 0,
                "backendAuthority": "local",
                "services": {
                    "credentials": {"methods": ["lithe/host/credentials/get"], "notifications": []},
                    "functions": {
                        "methods": [
                            "lithe/host/functions/providers",
                            "lithe/host/functions/invoke",
                        ],
                        "notifications": [],
                    },
                },
                "limits": {"pendingHostRequests": 16},
            }
        if method == "lithe/host/credentials/get":
            peer.host_outstanding += 1
            peer.host_max_outstanding = max(peer.host_max_outstanding, peer.host_outstanding)
            try:
                await trio.sleep(self.credential_delay_s)
            finally:
                peer.host_outstanding -= 1
            return {"secret": "s"}
        if method == "lithe/host/functions/providers":
            assert isinstance(params, dict)
            provider = self.exports.get(str(params.get("functionID")))
            return {"providers": [{"pluginID": provider, "version": 1}] if provider else []}
        if method == "lithe/host/functions/invoke":
            return await self._relay(peer, params)
        raise JSONRPCError(-32601, f"unknown {method}", {"code": "plugin.host.unavailable"})

    async def _relay(self, caller: Peer, params: JSONValue | None) -> JSONValue:
        assert isinstance(params, dict)
        caller.relayed.append(params)
        provider = self.peers.get(str(params["pluginID"]))
        if provider is None:
            raise JSONRPCError(
                -32069, "not running", {"code": "plugin.function.providerUnavailable"}
            )
        forwarded: JSONObject = {
            "functionID": params["functionID"],
            "operationID": f"relay-{next(_wire_ids)}",
            "params": params.get("params", {}),
            "context": params["context"],
            "caller": {"pluginID": caller.plugin_id},
        }
        try:
            value = await provider.endpoint.request("lithe/function/invoke", forwarded)
        except trio.Cancelled:
            # The caller's $/cancelRequest cancelled this task; the endpoint has sent the
            # provider its own $/cancelRequest for the forwarded call.
            caller.relay_cancelled.append(str(forwarded["operationID"]))
            raise
        except JSONRPCError as exc:
            raise JSONRPCError(
                -32070,
                exc.message,
                {
                    "code": "plugin.function.failed",
                    "details": {
                        "pluginErrorCode": (exc.data or {}).get("code")
                        if isinstance(exc.data, dict)
                        else None
                    },
                },
            ) from None
        return {"value": value}
