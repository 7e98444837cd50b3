"""The plugin side of a plugin-owned language-server session (host side).

A session started by ``lsp.startServer`` with ``pluginId`` gets one :class:`PluginRuntime`.
It implements the plugin contract "Plugin functions": negotiation in ``initialize``
(``litheFunctions`` and ``litheLogging``), the function registry (register/unregister),
``lsp.functionRequest`` calls with an opaque wire ``operationID`` and progress mapped back,
host requests (``lithe/host/*``: answered by Core or turned into ``hostRequest`` events that
``lsp.hostResponse`` answers), ``lsp.hostNotify``, and ``lithe/log`` facts ("Structured
plugin diagnostics"). The rules themselves are pure, in :mod:`supervisor._plugin._state`.

Supervision boundaries: every function call is one (an unexpected exception in its task ends
that call with ``internal``, once; the session goes on), and so is every request the backend
sends (answered -32603 ``data.code: "internal"`` by the session's handler). A failure while
handling a notification of the backend ends the session (see
:class:`~supervisor._lsp._session.LspSession`). Fault points: ``plugin.call`` (a function
call's task, before it is sent), ``plugin.hostRequest`` (a ``lithe/`` request of the backend),
``plugin.notification`` (a ``lithe/`` notification of the backend); the relay adds
``plugin.relay``.

Cancel scopes: every function call is a task in the session's nursery with its own cancel
scope (deadline, ``lsp.cancelOperation``, revocation, the session's end); cancelling it makes
the endpoint send ``$/cancelRequest`` to the backend. Every host request runs in the
endpoint's handler task for that request, whose scope the backend's ``$/cancelRequest``
cancels. ``lithe/host/functions/*`` go to the Core's relay
(:class:`~supervisor._plugin._relay.FunctionRelay`), which forwards relayed calls itself.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

from .._boundary import fault_point, internal_message
from .._endpoint import EndpointClosed, JSONRPCError, ReplyWithoutResult, method_not_found
from .._session._operations import Operation, OperationTable, run_operation
from ._host import HostCall
from ._relay_state import RelayRefusal
from ._state import (
    FUNCTION_RESULT_BYTES,
    HOST_RESULT_BYTES,
    MAX_PENDING_HOST_REQUESTS,
    FunctionRegistry,
    HostRefusal,
    RegistrationError,
    _wire_list,
    capabilities_result,
    check_host_notification,
    check_host_request,
    function_failure,
    host_failure,
    json_size,
    negotiate_functions,
    negotiate_logging,
    normalize_progress,
    validate_log_fact,
)
from ._subscriptions import DID_CHANGE_CONTEXTS, HostNotifications, Subscriptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject, JSONValue

    from .._endpoint import JSONRPCEndpoint
    from .._session._rate import RateLimit
    from ._host import HostEnvironment, HostHandler
    from ._relay import FunctionRelay

__all__ = ("INVOKE_METHOD", "PluginRuntime", "experimental_offer", "plugin_channel", "route_fact")

logger = logging.getLogger("supervisor.plugins")
_LEVELS: Final = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def plugin_channel(plugin_id: str) -> str:
    """The log channel of a plugin's facts: ``plugins/<id>/host`` (the plugin contract
    "Structured plugin diagnostics")."""
    return f"plugins/{plugin_id}/host"


def route_fact(fact: JSONObject, plugin_id: str, session_id: str | None) -> None:
    """Add the installed plugin's ID and channel to ``fact`` and write it to the log.

    One writer for every fact of a plugin, the backend's own (``lithe/log``) and the host's
    (``languageServer/start``): the ``supervisor.plugins`` logger, at the fact's ``level``
    (info when it has none), with the fact (``pluginId`` and ``channel`` included) in the
    record's ``plugin_fact`` attribute, so a handler can file it under its channel. One
    logger for all plugins: a logger per plugin ID would be kept for the process's life.
    """
    fact["pluginId"] = plugin_id
    fact["channel"] = plugin_channel(plugin_id)
    level = fact.get("level")
    logger.log(
        _LEVELS.get(level, logging.INFO) if isinstance(level, str) else logging.INFO,
        "%s plugin=%s session=%s %s",
        fact.get("catalogEvent"),
        plugin_id,
        session_id,
        " ".join(f"{k}={v}" for k, v in fact.items() if k not in ("catalogEvent", "channel")),
        extra={"plugin_fact": dict(fact)},
    )


INVOKE_METHOD: Final = "lithe/function/invoke"
#: Cross-plugin calls: the relay's methods, answered by :class:`FunctionRelay`.
RELAY_METHODS: Final = frozenset({"lithe/host/functions/providers", "lithe/host/functions/invoke"})
#: ``error.data`` of a host request the backend cancelled (-32800).
CANCELLED_DATA: Final[JSONObject] = {"code": "plugin.host.cancelled"}


def experimental_offer() -> JSONObject:
    """``capabilities.experimental`` a plugin-owned session offers in ``initialize``."""
    return {"litheFunctions": {"versions": [0]}, "litheLogging": {"versions": [0]}}


#: The plugin log's reason of each outcome the operation runner makes (internal, deadline,
#: session ended).
_RUNNER_REASONS: Final = {
    "internal": "internal",
    "requestTimeout": "timeout",
    "languageServerUnavailable": "unavailable",
}


def _runner_reason(outcome: JSONObject) -> str:
    error = outcome.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return _RUNNER_REASONS.get(code, "unavailable") if isinstance(code, str) else "unavailable"


def _cancelled_call() -> JSONObject:
    """The outcome of a cancelled call (the plugin contract "Invocation")."""
    return {"error": {"code": "requestCancelled", "message": "The call was cancelled"}}


@dataclass(eq=False)
class _Call(Operation):
    """One function call; completed exactly once (one ``requestCompleted``)."""

    wire_id: str
    function_id: str
    generation: int
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    end_reason: str | None = None
    #: ``HostNotifications.mark()`` when the call started: they go out first.
    after_notifications: int = 0


@dataclass(eq=False)
class _HostRequest:
    """One host request waiting for ``lsp.hostResponse``."""

    host_request_id: str
    method: str
    generation: int
    done: trio.Event = field(default_factory=trio.Event)
    result: JSONValue = None
    error: tuple[int, str, JSONObject] | None = None


class PluginRuntime:
    """The plugin-function protocol of one plugin-owned session.

    Args:
        session_id: The session's id.
        plugin_id: ``lsp.startServer.pluginId``.
        grants: ``lsp.startServer.hostServices``, validated.
        emit: Queues a session event (``emit(event, params)``, sessionId and generation
            are added).
        put_event: Queues an event as given (for events naming their own generation).
        facts: The session's fact rate limit (600 per minute, shared with host facts).
    """

    def __init__(
        self,
        session_id: str,
        plugin_id: str,
        grants: frozenset[str],
        *,
        emit: Callable[[str, JSONObject], None],
        put_event: Callable[[str, JSONObject], None],
        facts: RateLimit,
    ) -> None:
        self.session_id = session_id
        self.plugin_id = plugin_id
        self.grants = grants
        self._emit = emit
        self._put_event = put_event
        self._facts = facts
        self.version: int | None = None
        self.registry: FunctionRegistry | None = None
        self.logging = False
        self._generation = 0
        self._rejected_warned = False
        self._calls: OperationTable[_Call] = OperationTable(self._call_completed)
        self._by_wire: dict[str, _Call] = {}
        self._host: dict[str, _HostRequest] = {}
        self._wire_ids = itertools.count(1)
        self._host_ids = itertools.count(1)
        self.facts_rejected = 0
        #: The Core's relay (set by the LSP service); None: no relay, -32010 for its methods.
        self.relay: FunctionRelay | None = None
        #: The Core's host services (set by the LSP service); None: every host request
        #: goes to the client as ``hostRequest``.
        self.host: HostEnvironment | None = None
        #: Host notifications to the running backend, in order (the session sends them).
        self.notifications = HostNotifications()
        #: The live subscriptions of the running backend process.
        self.subscriptions = Subscriptions(self.notify_backend)
        self._serving = 0

    # -- lifecycle -----------------------------------------------------------------------

    def negotiate(self, generation: int, initialize_result: JSONValue) -> None:
        """Negotiation: read the backend's answer; publish ``functionsChanged`` when agreed.

        Called once per generation after ``initialize`` succeeded. A new generation is a
        new process: it negotiates afresh and gets a new rejected-warning allowance.
        """
        self._generation = generation
        self._rejected_warned = False
        negotiated = negotiate_functions(initialize_result)
        self.logging = negotiate_logging(initialize_result)
        if negotiated is None:
            self.version, self.registry = None, None
            return
        self.version, ids = negotiated
        self.registry = FunctionRegistry(ids)
        self._emit("functionsChanged", {"functions": _wire_list(ids), "removed": []})
        if self.relay is not None:
            self.relay.changed()  # calls waiting for this provider may go ahead

    def end_generation(self, message: str, **extra: JSONValue) -> None:
        """The process ended: end every call with the session's terminal error.

        Its registry goes with it; host requests end with their handler tasks (the
        endpoint closing cancels them); its subscriptions are disposed and its queued host
        notifications dropped, so a replacement process never hears of them.
        """
        self.version, self.registry = None, None
        self.subscriptions.close()
        self.notifications.clear()
        if self.relay is not None:
            self.relay.changed()
        for call in self._calls:
            self._finish(
                call,
                {"error": {"code": "languageServerUnavailable", "message": message, **extra}},
                "unavailable",
            )

    @property
    def generation(self) -> int:
        """The backend process's generation (0 before the first negotiation)."""
        return self._generation

    def notify_backend(self, method: str, params: JSONObject) -> None:
        """Queue a host notification to the running backend (dropped when none runs)."""
        if self.negotiated:
            self.notifications.put(method, params)

    def contexts_changed(self, revision: int) -> None:
        """The open workspace contexts changed: ``didChangeContexts`` to a backend granted
        ``workspace``; subscriptions of closed contexts are disposed."""
        host = self.host
        if host is None:
            return
        open_ids = {c.context_id for c in host.contexts.contexts}
        for context_id in {s.context_id for s in self.subscriptions.live()}:
            if context_id is not None and context_id not in open_ids:
                self.subscriptions.dispose_context(context_id)
        if "workspace" in self.grants:
            self.notify_backend(DID_CHANGE_CONTEXTS, {"revision": revision})

    @property
    def negotiated(self) -> bool:
        """True while the running process has negotiated ``litheFunctions``."""
        return self.registry is not None

    def snapshot(self) -> JSONObject:
        """The ``plugin`` part of ``lsp.snapshot``."""
        return {
            "pluginId": self.plugin_id,
            "hostServices": _wire_list(self.grants),
            "functionsNegotiated": self.negotiated,
            "loggingNegotiated": self.logging,
            "functions": _wire_list(self.registry.sorted_ids() if self.registry else []),
            "runningCalls": _wire_list(call.operation_id for call in self._calls),
            "pendingHostRequests": _wire_list(self._host),
            "servedHostRequests": self._serving,
            "subscriptions": len(self.subscriptions),
            "factsRejected": self.facts_rejected,
        }

    # -- calls -----------------------------------------------------------------------

    def emit_event(self, event: str, params: JSONObject) -> None:
        """Queue a session event (for the relay: ``functionProviderStartRequired``)."""
        self._emit(event, params)

    def serves_host_call(self, wire_id: str) -> bool:
        """True while the backend serves a host-started call with this wire ``operationID``."""
        return wire_id in self._by_wire

    def is_pending(self, operation_id: str) -> bool:
        """True while a call with this host operation id runs."""
        return operation_id in self._calls

    def start_call(
        self,
        nursery: trio.Nursery,
        endpoint: JSONRPCEndpoint,
        *,
        operation_id: str,
        function_id: str,
        params: JSONObject,
        context: JSONValue,
        timeout_ms: int,
        after: trio.Event | None = None,
        sent: trio.Event | None = None,
    ) -> None:
        """Invocation: send ``lithe/function/invoke`` in a task of ``nursery``.

        The wire ``operationID`` is fresh and opaque (never derived from ``operation_id``).
        ``after``: the invoke is written only once this is set (the message submitted to the
        session before it is written: the session's outbox order). ``sent`` is set once the
        invoke was handed to the endpoint, or the call ended without that.

        Raises:
            CoreError: ``invalid_request`` for an operation id already running.
        """
        if operation_id in self._calls:
            raise CoreError("invalid_request", f"operation {operation_id!r} is already pending")
        # Opaque: a counter of this runtime, not the host's id (Invocation).
        wire_id = f"fn-{next(self._wire_ids)}"
        call = _Call(operation_id, wire_id, function_id, self._generation)
        call.scope.deadline = trio.current_time() + timeout_ms / 1000
        self._calls.add(call)
        self._by_wire[wire_id] = call
        invoke: JSONObject = {"functionID": function_id, "operationID": wire_id, "params": params}
        if context is not None:
            invoke["context"] = context
        # Host notifications queued before the call reach the backend before its invoke.
        call.after_notifications = self.notifications.mark()
        nursery.start_soon(
            self._run_call, call, endpoint, invoke, after, trio.Event() if sent is None else sent
        )

    async def _run_call(
        self,
        call: _Call,
        endpoint: JSONRPCEndpoint,
        invoke: JSONObject,
        after: trio.Event | None,
        sent: trio.Event,
    ) -> None:
        """One call's task: the one operation path (:func:`run_operation`)."""

        def error(code: str, message: str) -> JSONObject:
            return {"error": {"code": code, "message": message}}

        try:
            await run_operation(
                call,
                partial(self._invoke, call, endpoint, invoke, after, sent),
                scope=call.scope,
                what=f"plugin session {self.session_id} call {call.operation_id}",
                finish=lambda outcome: self._finish(call, outcome, _runner_reason(outcome)),
                forget=partial(self._calls.forget, call),
                internal=lambda exc: error("internal", internal_message(exc)),
                caught=lambda: error("requestTimeout", "The call timed out"),
                ended=lambda: error("languageServerUnavailable", "The session ended"),
            )
        finally:
            sent.set()

    async def _invoke(
        self,
        call: _Call,
        endpoint: JSONRPCEndpoint,
        invoke: JSONObject,
        after: trio.Event | None,
        sent: trio.Event,
    ) -> None:
        if after is not None:
            await after.wait()
        # Host notifications queued before the call reach the backend before its invoke.
        await self.notifications.wait_written(call.after_notifications)
        if _ended_by_session(call):
            # The session's end ended it before it was sent: no backend is left to
            # invoke, and nothing of it may fail any more (chaos --faults, seed 9000006).
            # A call cancelled that early is still invoked, then cancelled.
            return
        fault_point("plugin.call")
        # endpoint.request queues the frame before its first checkpoint, so what is
        # woken by `sent` is written after it.
        sent.set()
        try:
            result = await endpoint.request(INVOKE_METHOD, invoke)
        except ReplyWithoutResult:
            # No result is not a null result (Invocation).
            self._finish(
                call,
                {
                    "error": {
                        "code": "plugin.function.invalidResult",
                        "message": "the backend answered without a result",
                    }
                },
                "invalidResult",
            )
        except JSONRPCError as exc:
            self._finish(call, {"error": function_failure(exc.message, exc.data)}, "failed")
        except EndpointClosed as exc:
            self._finish(
                call,
                {
                    "error": {
                        "code": "languageServerUnavailable",
                        "message": f"The backend's stdio ended: {exc.reason}",
                    }
                },
                "unavailable",
            )
        else:
            if json_size(result) > FUNCTION_RESULT_BYTES:
                self._finish(
                    call,
                    {
                        "error": {
                            "code": "plugin.function.invalidResult",
                            "message": f"the result is over {FUNCTION_RESULT_BYTES} bytes",
                        }
                    },
                    "invalidResult",
                )
            else:
                # null is a result (Invocation).
                self._finish(call, {"result": {"value": result}}, "result")

    def _finish(self, call: _Call, outcome: JSONObject, reason: str) -> None:
        """Complete ``call`` once; forget it; cancel its task (which sends $/cancelRequest)."""
        if call.done:
            return
        call.end_reason = reason
        # Every terminal path removes the association, so a later withdrawal or a late
        # progress report cannot reach a new call that reuses the host id.
        self._calls.forget(call)
        self._by_wire.pop(call.wire_id, None)
        call.scope.cancel()
        self._calls.finish(call, outcome)

    def _call_completed(self, call: _Call, outcome: JSONObject) -> None:
        """A call finished (once): its ``requestCompleted`` event."""
        self._put_event(
            "requestCompleted",
            {
                "sessionId": self.session_id,
                "generation": call.generation,
                "operationId": call.operation_id,
                "method": INVOKE_METHOD,
                "function": {"pluginID": self.plugin_id, "functionID": call.function_id},
                **outcome,
            },
        )

    def cancel_call(self, operation_id: str) -> bool:
        """``lsp.cancelOperation`` of a call: ``requestCancelled``; False when not running."""
        call = self._calls.get(operation_id)
        if call is None:
            return False
        self._finish(call, _cancelled_call(), "cancelled")
        return True

    def cancel_uninvoked(self, operation_id: str, function_id: str) -> None:
        """A call ``lsp.cancelOperation`` named while it still waited for its turn in the
        session's line: it completes now as :meth:`cancel_call` completes a running one
        (one ``requestCompleted``, ``requestCancelled``), and nothing is sent."""
        call = _Call(operation_id, "", function_id, self._generation, end_reason="cancelled")
        self._calls.finish(call, _cancelled_call())

    # -- backend requests and notifications -------------------------------------------

    async def on_request(self, method: str, params: JSONValue) -> JSONValue:
        """A request from the backend whose method starts with ``lithe/``.

        Raises:
            JSONRPCError: The refusal or the host's failure (see the reference's codes).
        """
        fault_point("plugin.hostRequest")
        if method in ("lithe/function/register", "lithe/function/unregister"):
            return self._registration(method, params)
        if method in RELAY_METHODS:
            return await self._relay_request(method, params)
        try:
            if not self.negotiated and not method.startswith(("lithe/build/",)):
                # The protocol was not negotiated: nothing of it exists for this process.
                raise HostRefusal(
                    -32601, "plugin.host.unavailable", "litheFunctions was not negotiated"
                )
            entry = check_host_request(method, params, self.grants)
        except HostRefusal as refusal:
            raise JSONRPCError(refusal.number, refusal.message, refusal.data()) from None
        body: JSONObject = params if isinstance(params, dict) else {}
        if method == "lithe/host/getCapabilities":
            assert self.version is not None
            capabilities = capabilities_result(self.version, self.grants)
            services = capabilities.get("services")
            if self.relay is not None and self.relay.granted(self.plugin_id):
                assert isinstance(services, dict)
                services["functions"] = {
                    "methods": _wire_list(sorted(RELAY_METHODS)),
                    "notifications": [],
                }
            return capabilities
        if method == "lithe/host/subscriptions/dispose":
            subscription_id = str(body["subscriptionID"])
            if not self.subscriptions.dispose(subscription_id):
                # Not one of ours: the client's, which hears of it to stop its work.
                self._emit("subscriptionDisposed", {"subscriptionID": subscription_id})
            return None
        self._check_pending()
        handler = self._handler(method)
        try:
            if handler is not None:
                return await self._serve(method, body, handler)
            return await self._forward(method, entry.service, body)
        except HostRefusal as refusal:
            raise JSONRPCError(refusal.number, refusal.message, refusal.data()) from None

    def _check_pending(self) -> None:
        """At most :data:`MAX_PENDING_HOST_REQUESTS` unanswered: forwarded, served here and
        relayed calls together.

        Raises:
            JSONRPCError: -32014 ``plugin.host.limitExceeded``.
        """
        if len(self._host) + self._serving >= MAX_PENDING_HOST_REQUESTS:
            raise JSONRPCError(
                -32014,
                f"{MAX_PENDING_HOST_REQUESTS} host requests are already pending",
                {"code": "plugin.host.limitExceeded"},
            )

    def _handler(self, method: str) -> HostHandler | None:
        host = self.host
        if host is None or host.policy.routes_to_client(method):
            return None
        return host.table.get(method)

    async def _serve(self, method: str, params: JSONObject, handler: HostHandler) -> JSONValue:
        """Serve a host request here; one naming a context ends when the context does.

        Raises:
            HostRefusal: The handler's refusal, or ``contextExpired``.
        """
        host = self.host
        assert host is not None
        self._serving += 1
        try:
            if "context" not in params:
                return await handler(HostCall(method, params, self, host))
            context = host.contexts.resolve(params["context"])
            result: JSONValue = None
            with host.contexts.bound(context):
                result = await handler(HostCall(method, params, self, host, context))
            return result
        finally:
            self._serving -= 1

    async def _forward(self, method: str, service: str, params: JSONObject) -> JSONValue:
        """A host request for the client; bound to its context once the host declared any.

        A host that never declared contexts (``workspace.setContexts``) keeps them to
        itself: the context is passed on unchecked.
        """
        host = self.host
        if host is None or host.contexts.revision == 0 or "context" not in params:
            return await self._host_request(method, service, params)
        context = host.contexts.resolve(params["context"])
        result: JSONValue = None
        with host.contexts.bound(context):
            result = await self._host_request(method, service, params)
        return result

    async def _relay_request(self, method: str, params: JSONValue) -> JSONValue:
        """Cross-plugin calls: ``lithe/host/functions/providers`` and ``.../invoke``.

        Refusals before the relay's own checks: not negotiated -32601; a plugin whose
        snapshot entry declares no call -32010 ``plugin.host.permissionDenied``.

        Raises:
            JSONRPCError: The refusal, or the relayed call's failure (``data.code``).
        """
        if not self.negotiated:
            raise JSONRPCError(
                -32601, "litheFunctions was not negotiated", {"code": "plugin.host.unavailable"}
            )
        relay = self.relay
        if relay is None or not relay.granted(self.plugin_id):
            raise JSONRPCError(
                -32010,
                f"{self.plugin_id} declares no call to another plugin's function",
                {"code": "plugin.host.permissionDenied"},
            )
        try:
            if method == "lithe/host/functions/providers":
                return relay.providers(self, params)
            # A relayed call is one of the session's unanswered host requests.
            self._check_pending()
            self._serving += 1
            try:
                return await relay.invoke(self, params)
            finally:
                self._serving -= 1
        except RelayRefusal as refusal:
            raise JSONRPCError(refusal.number, refusal.message, refusal.data()) from None

    def _registration(self, method: str, params: JSONValue) -> JSONValue:
        registry = self.registry
        if registry is None:
            raise method_not_found(method)
        try:
            if method == "lithe/function/register":
                registry.register(params)
                removed: list[str] = []
            else:
                removed = registry.unregister(params)
        except RegistrationError as exc:
            raise JSONRPCError(
                -32602, str(exc), {"code": "plugin.function.invalidRegistration"}
            ) from None
        self._emit(
            "functionsChanged",
            {"functions": _wire_list(registry.sorted_ids()), "removed": _wire_list(removed)},
        )
        if self.relay is not None:
            # Relayed calls of a withdrawn function end (providerUnavailable); new
            # registrations wake calls waiting for this provider.
            self.relay.withdrawn(self.plugin_id, removed)
        for call in self._calls:
            if call.function_id in removed:
                self._finish(
                    call,
                    {
                        "error": {
                            "code": "plugin.function.revoked",
                            "message": f"{call.function_id} was withdrawn while the call ran",
                        }
                    },
                    "revoked",
                )
        return None

    async def _host_request(self, method: str, service: str, params: JSONObject) -> JSONValue:
        host_request_id = f"{self.session_id}-host-{next(self._host_ids)}"
        pending = _HostRequest(host_request_id, method, self._generation)
        self._host[host_request_id] = pending
        self._emit(
            "hostRequest",
            {
                "method": method,
                "result": {"hostRequestID": host_request_id, "service": service, "params": params},
            },
        )
        try:
            await pending.done.wait()
        finally:
            if self._host.pop(host_request_id, None) is not None:
                # Not answered: the backend cancelled it ($/cancelRequest, answered -32800
                # plugin.host.cancelled by the endpoint) or the session ended.
                self._emit("hostRequestCancelled", {"hostRequestID": host_request_id})
        if pending.error is not None:
            number, message, data = pending.error
            raise JSONRPCError(number, message, data)
        return pending.result

    def host_response(
        self, host_request_id: str, result: JSONValue, error: JSONObject | None
    ) -> None:
        """``lsp.hostResponse``: answer a pending host request with ``result`` or ``error``
        (an ``error`` with a ``null`` result is the error).

        Raises:
            CoreError: ``invalid_request`` for an unknown, answered or cancelled id, both
                or a malformed ``error``, or a result over the host result bound.
        """
        pending = self._host.get(host_request_id)
        if pending is None:
            raise CoreError("invalid_request", f"no pending host request {host_request_id!r}")
        if result is not None and error is not None:
            raise CoreError("invalid_request", "give result or error, not both")
        if error is not None:
            pending.error = host_failure(error)
        else:
            if json_size(result) > HOST_RESULT_BYTES:
                raise CoreError("invalid_request", f"result is over {HOST_RESULT_BYTES} bytes")
            pending.result = result
        del self._host[host_request_id]
        pending.done.set()

    def on_notification(self, method: str, params: JSONValue) -> None:
        """``lithe/function/progress`` and ``lithe/log`` from the backend; others dropped."""
        fault_point("plugin.notification")
        if method == "lithe/function/progress":
            report = normalize_progress(params) if self.negotiated else None
            if report is None:
                return
            wire_id, normalized = report
            call = self._by_wire.get(wire_id)
            if call is None or call.outcome is not None:
                return  # a late report of a call that ended: dropped
            self._put_event(
                "requestProgress",
                {
                    "sessionId": self.session_id,
                    "generation": call.generation,
                    "operationId": call.operation_id,
                    "result": {"operationID": call.operation_id, **normalized},
                },
            )
        elif method == "lithe/log":
            self._log_fact(params)

    def _log_fact(self, params: JSONValue) -> None:
        fact = validate_log_fact(params, self.registry) if self.logging else None
        if fact is None:
            self.facts_rejected += 1
            if not self._rejected_warned:
                self._rejected_warned = True
                category = "malformed" if self.logging else "unnegotiated"
                logger.warning(
                    "plugins.diagnostics.rejected plugin=%s session=%s category=%s",
                    self.plugin_id,
                    self.session_id,
                    category,
                )
                self._emit(
                    "fact",
                    {
                        "catalogEvent": "plugins.diagnostics.rejected",
                        "level": "warning",
                        "category": category,
                        "pluginId": self.plugin_id,
                    },
                )
            return
        if not self._facts.admit(math.floor(trio.current_time() * 1000)):
            return
        wire_id = fact.pop("operationId", None)
        if isinstance(wire_id, str):
            call = self._by_wire.get(wire_id)
            if call is not None:
                # Only a still-active wire request correlates (Structured plugin diagnostics).
                fact["operationId"] = call.operation_id
        route_fact(fact, self.plugin_id, self.session_id)
        self._emit("fact", fact)

    def check_notify(self, method: str, params: JSONValue) -> None:
        """``lsp.hostNotify``'s method, grant, params and size checks.

        Raises:
            CoreError: ``invalid_request``.
        """
        check_host_notification(method, params, self.grants)


def _ended_by_session(call: _Call) -> bool:
    """Whether ``call`` ended because its session is ending (``languageServerUnavailable``)."""
    outcome = call.outcome
    error = outcome.get("error") if outcome is not None else None
    return isinstance(error, dict) and error.get("code") == "languageServerUnavailable"
