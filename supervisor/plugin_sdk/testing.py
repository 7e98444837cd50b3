"""An in-memory host for testing a backend without the supervisor or Lithe (the Node plugin SDK
contract
"Testing": the bounded in-memory host).

::

    from supervisor.plugin_sdk.testing import open_test_host

    async def test_refresh():
        backend = make_backend()          # your create_backend(...) with its functions
        async with open_test_host(backend, contexts=[CONTEXT]) as host:
            assert await host.invoke("snapshot.refresh", {}) == {...}
            await host.command("db.refresh", CONTEXT)

The backend runs in this Trio task tree, over in-memory streams, with the host side of the
protocol played here: ``initialize`` offering litheFunctions and litheLogging, ``lithe/host/
getCapabilities`` (listing the methods this host has handlers for), subscription disposal,
``workspace/listContexts|getContext|getFolders`` on :attr:`TestHost.contexts` (older
generations and closed contexts are ``plugin.host.contextExpired``), ``credentials/*`` in
:attr:`TestHost.credentials`, and any method you give a handler with :meth:`TestHost.handle`.
Everything is bounded like the real host: at most 16 unanswered host requests (the 17th is
``plugin.host.limitExceeded``). Every request and notification the backend sends is recorded
(:attr:`TestHost.requests`, :attr:`TestHost.notifications`).
"""

from __future__ import annotations

import itertools
import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import trio
import trio.testing

from .._endpoint import JSONRPCError, method_not_found, open_jsonrpc_endpoint
from ._wire import HOST_ERRORS, MAX_PENDING_HOST_REQUESTS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

    from protocol import JSONObject, JSONValue

    from .._endpoint import JSONRPCEndpoint
    from ._backend import Backend

__all__ = ("HostFailure", "TestHost", "open_test_host")

#: ``await handler(params) -> result``; raise :class:`HostFailure` to fail the request.
TestHandler = "Callable[[JSONObject], Awaitable[JSONValue]]"
_BUILT_IN: Final = (
    "lithe/host/getCapabilities",
    "lithe/host/subscriptions/dispose",
    "lithe/host/workspace/listContexts",
    "lithe/host/workspace/getContext",
    "lithe/host/workspace/getFolders",
    "lithe/host/credentials/get",
    "lithe/host/credentials/set",
    "lithe/host/credentials/delete",
)


class HostFailure(Exception):
    """A host failure a test handler raises: ``code`` (``plugin.host.*``), message, details."""

    def __init__(self, code: str, message: str, details: JSONObject | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def to_wire(self) -> JSONRPCError:
        data: JSONObject = {"code": self.code}
        if self.details is not None:
            data["details"] = self.details
        return JSONRPCError(HOST_ERRORS.get(self.code, -32603), self.message, data)


class TestHost:
    """The host side of one backend session; made by :func:`open_test_host`.

    Attributes:
        requests: ``(method, params)`` of every request the backend sent, in order.
        notifications: ``(method, params)`` of every notification it sent (``lithe/log``,
            ``lithe/function/progress``, ...).
        contexts: The open workspace contexts (whole contexts, as ``getContext`` answers).
        revision: The revision of :attr:`contexts`.
        credentials: The stored secrets by key.
        subscriptions: The live subscriptions: ID -> the method that made it.
        initialize_result: The backend's ``initialize`` answer.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, contexts: Iterable[JSONObject]) -> None:
        self.requests: list[tuple[str, JSONValue]] = []
        self.notifications: list[tuple[str, JSONValue]] = []
        self.contexts: list[JSONObject] = [dict(c) for c in contexts]
        self.revision = 1
        self.credentials: dict[str, str] = {}
        self.subscriptions: dict[str, str] = {}
        self.initialize_result: JSONValue = None
        self._handlers: dict[str, Callable[[JSONObject], Awaitable[JSONValue]]] = {}
        self._sequences: dict[str, int] = {}
        self._subscription_ids = itertools.count(1)
        self._operation_ids = itertools.count(1)
        self._pending = 0
        self._endpoint: JSONRPCEndpoint | None = None
        self._changed = trio.Event()

    # -- what a test does -----------------------------------------------------------------

    def handle(self, method: str, handler: Callable[[JSONObject], Awaitable[JSONValue]]) -> None:
        """Serve ``method`` with ``await handler(params)`` (listed by getCapabilities)."""
        self._handlers[method] = handler

    def open_subscription(self, method: str) -> str:
        """A new subscription ID (for a handler whose method answers ``{subscriptionID}``)."""
        subscription_id = f"sub-{next(self._subscription_ids)}"
        self.subscriptions[subscription_id] = method
        self._sequences[subscription_id] = 0
        return subscription_id

    async def publish(self, subscription_id: str, event: JSONObject) -> bool:
        """Send one event of a live subscription with its next sequence; False once it was
        disposed (nothing follows a disposal)."""
        if subscription_id not in self.subscriptions:
            return False
        self._sequences[subscription_id] += 1
        await self.notify(
            "lithe/host/subscriptions/notify",
            {
                "subscriptionID": subscription_id,
                "sequence": self._sequences[subscription_id],
                "event": event,
            },
        )
        return True

    async def invoke(
        self,
        function_id: str,
        params: JSONObject | None = None,
        *,
        context: JSONObject | None = None,
        timeout_ms: float | None = None,
    ) -> JSONValue:
        """``lithe/function/invoke``; the function's result as the backend answered it.

        Raises:
            supervisor.JSONRPCError: The backend's failure (``error.data.code``).
        """
        call: JSONObject = {
            "functionID": function_id,
            "operationID": f"test-op-{next(self._operation_ids)}",
        }
        if params is not None:
            call["params"] = params
        if context is not None:
            call["context"] = context
        return await self._require().request("lithe/function/invoke", call, timeout_ms=timeout_ms)

    async def command(self, command_id: str, context: JSONObject | None = None) -> None:
        """The user ran one of the plugin's commands (``lithe/host/commands/didRun``)."""
        params: JSONObject = {"commandID": command_id}
        if context is not None:
            params["context"] = {
                "contextID": context["contextID"],
                "generation": context["generation"],
            }
        await self.notify("lithe/host/commands/didRun", params)

    async def set_contexts(self, contexts: Iterable[JSONObject]) -> int:
        """Replace the open contexts and tell the backend (``didChangeContexts``)."""
        self.contexts = [dict(c) for c in contexts]
        self.revision += 1
        await self.notify("lithe/host/workspace/didChangeContexts", {"revision": self.revision})
        return self.revision

    async def notify(self, method: str, params: JSONObject) -> None:
        """Send a notification to the backend."""
        await self._require().notify(method, params)

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 10) -> None:
        """Wait until ``predicate()`` holds; it is checked after every message."""
        with trio.fail_after(timeout_s):
            while not predicate():
                await self._changed.wait()

    # -- the host side ----------------------------------------------------------------------

    def _require(self) -> JSONRPCEndpoint:
        assert self._endpoint is not None, "the test host is not open"
        return self._endpoint

    def _note(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _on_notification(self, method: str, params: JSONValue | None) -> None:
        self.notifications.append((method, params))
        self._note()

    async def _on_request(self, method: str, params: JSONValue | None) -> JSONValue:
        self.requests.append((method, params))
        self._note()
        body: JSONObject = params if isinstance(params, dict) else {}
        if method in ("lithe/function/register", "lithe/function/unregister"):
            return None
        if self._pending >= MAX_PENDING_HOST_REQUESTS:
            raise HostFailure(
                "plugin.host.limitExceeded", "16 host requests are already pending"
            ).to_wire()
        self._pending += 1
        try:
            return await self._serve(method, body)
        except HostFailure as failure:
            raise failure.to_wire() from None
        finally:
            self._pending -= 1

    async def _serve(self, method: str, params: JSONObject) -> JSONValue:
        handler = self._handlers.get(method)
        if handler is not None:
            return await handler(params)
        if method == "lithe/host/getCapabilities":
            return self._capabilities()
        if method == "lithe/host/subscriptions/dispose":
            self.subscriptions.pop(str(params.get("subscriptionID")), None)
            return None
        if method == "lithe/host/workspace/listContexts":
            listed: list[JSONValue] = [
                {k: v for k, v in c.items() if k != "stateDirectory"} for c in self.contexts
            ]
            return {"revision": self.revision, "contexts": listed}
        if method == "lithe/host/workspace/getContext":
            return self._context(params)
        if method == "lithe/host/workspace/getFolders":
            return {"folders": self._context(params).get("folders", [])}
        if method == "lithe/host/credentials/get":
            secret = self.credentials.get(str(params.get("key")))
            return None if secret is None else {"secret": secret}
        if method == "lithe/host/credentials/set":
            self.credentials[str(params.get("key"))] = str(params.get("secret"))
            return None
        if method == "lithe/host/credentials/delete":
            self.credentials.pop(str(params.get("key")), None)
            return None
        raise method_not_found(method)

    def _context(self, params: JSONObject) -> JSONObject:
        reference = params.get("context")
        if not isinstance(reference, dict):
            raise HostFailure("plugin.host.invalidParams", "context is required")
        for context in self.contexts:
            if context.get("contextID") == reference.get("contextID"):
                if context.get("generation") == reference.get("generation"):
                    return context
                break
        raise HostFailure("plugin.host.contextExpired", "the context closed or changed")

    def _capabilities(self) -> JSONObject:
        services: dict[str, list[str]] = {}
        for method in (*_BUILT_IN, *self._handlers):
            service = method.removeprefix("lithe/host/").split("/", 1)[0]
            services.setdefault(service, [])
            if method not in services[service]:
                services[service].append(method)
        return {
            "protocolVersion": 0,
            "backendAuthority": "local",
            "services": {
                name: {"methods": [*sorted(methods)], "notifications": []}
                for name, methods in sorted(services.items())
            },
            "limits": {"pendingHostRequests": MAX_PENDING_HOST_REQUESTS},
        }


@asynccontextmanager
async def open_test_host(
    backend: Backend, *, contexts: Iterable[JSONObject] = ()
) -> AsyncIterator[TestHost]:
    """Serve ``backend`` in memory against a :class:`TestHost`, initialized and ready.

    Leaving the block sends ``shutdown`` and ``exit`` and waits for the backend to end, so
    every process it started has ended too.
    """
    host = TestHost(contexts)
    to_backend_send, to_backend_receive = trio.testing.memory_stream_one_way_pair()
    from_backend_send, from_backend_receive = trio.testing.memory_stream_one_way_pair()
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def run_backend() -> None:
            try:
                await backend.serve(to_backend_receive, from_backend_send)
            finally:
                await from_backend_send.aclose()
                done.set()

        nursery.start_soon(run_backend)
        async with open_jsonrpc_endpoint(
            to_backend_send,
            from_backend_receive,
            request_handler=host._on_request,
            notification_handler=host._on_notification,
            name="test-host",
        ) as endpoint:
            host._endpoint = endpoint
            host.initialize_result = await endpoint.request(
                "initialize",
                {
                    "processId": os.getpid(),
                    "capabilities": {
                        "experimental": {
                            "litheFunctions": {"versions": [0]},
                            "litheLogging": {"versions": [0]},
                        }
                    },
                },
            )
            await endpoint.notify("initialized", {})
            try:
                yield host
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await endpoint.request("shutdown", None)
                    await endpoint.notify("exit", None)
                    await done.wait()
        nursery.cancel_scope.cancel()
