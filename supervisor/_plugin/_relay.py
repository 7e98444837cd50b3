"""The cross-plugin relay (the plugin contract "Cross-plugin calls").

One :class:`FunctionRelay` per LSP service relays ``lithe/host/functions/providers`` and
``lithe/host/functions/invoke`` between plugin-owned sessions. The rules (snapshot, the
check order, bounds) are pure, in :mod:`supervisor._plugin._relay_state`; this module runs
the calls.

Structure, not bookkeeping: every relayed call is a task with its own cancel scope and a
nursery of its own for the calls made as its children. A call with no relayed parent (a new
chain) runs in the caller's handler task for its ``invoke`` request; a child call runs as a
task of its parent's nursery, so cancelling a call (the caller's ``$/cancelRequest``, its
deadline, its end, a snapshot change, its caller's session ending) cancels its children
down the chain. Each cancelled forwarded request makes the provider's endpoint send
``$/cancelRequest`` (the endpoint does it when the waiting task is cancelled). The relay
never retries a call.

Supervision boundaries: every relayed call is one. An unexpected exception while it runs (a
bug of ours; the fault point ``plugin.relay`` sits where a call is forwarded) ends that call
only, with ``internal`` (-32603, ``data.code: "internal"``) to its caller, and cancels its
children like any end; its parent, its siblings and both sessions go on. A failure in the
checks before a call exists is answered the same way by the calling session's handler.

The deadline (the plugin contract "Discovery and invocation"): a call still waiting for its
provider ends at once; a forwarded call is cancelled at the provider (``$/cancelRequest``,
the provider session's own timeout) and its children are cancelled, and it ends when the
provider answers, with ``plugin.host.timeout`` whatever the answer. A provider that has
still not answered :data:`GRACE_MS` after the deadline is left behind: the relay's own end
(the call's scope) ends the call with ``plugin.host.timeout`` itself.

Isolation between backends: each backend is written through its own endpoint, whose write
queue is bounded; a backend that stops reading only blocks the calls forwarded to it, and a
write blocked past the session's request timeout closes that endpoint: the session fails
as a transport failure (``transportFailed``, stage ``relayWrite``, see
:class:`~supervisor._lsp._session.LspSession`) and its calls end like those of any session
failure (a relayed call forwarded to it: ``plugin.function.providerUnavailable``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Final, Protocol

import trio

from .._boundary import fault_point, internal_message
from .._endpoint import EndpointClosed, JSONRPCError, ReplyWithoutResult
from .._session._operations import run_operation
from ._relay_state import (
    GRACE_MS,
    MAX_RELAYED_RESULT_BYTES,
    MAX_RESULT_BYTES,
    PROVIDER_START_MS,
    RelayRefusal,
    RelaySnapshot,
    check_invoke,
    check_still_allowed,
    declares_calls,
    parse_invoke,
    parse_providers,
    parse_snapshot,
    providers_result,
)
from ._state import function_failure, json_size

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from protocol import JSONObject, JSONValue

    from .._api._plugin import LspConfigureFunctionRelay
    from .._endpoint import JSONRPCEndpoint

__all__ = ("FunctionRelay", "ProviderHandle", "RelayCaller")

INVOKE_METHOD: Final = "lithe/function/invoke"


class RelayCaller(Protocol):
    """What the relay needs of a calling session (a :class:`PluginRuntime` is one)."""

    plugin_id: str
    session_id: str

    def emit_event(self, event: str, params: JSONObject) -> None:
        """Queue a runtime event on the calling session."""

    def serves_host_call(self, wire_id: str) -> bool:
        """True while the backend serves a host-started call with this ``operationID``."""


@dataclass(frozen=True)
class ProviderHandle:
    """A running provider that negotiated the protocol: its registered functions and endpoint."""

    functions: Collection[str]
    endpoint: JSONRPCEndpoint


@dataclass(eq=False)
class _RelayCall:
    """One relayed call: its chain, its scopes and its one outcome."""

    caller_id: str
    provider_id: str
    function_id: str
    context_id: str
    generation: int
    params: JSONObject
    #: The plugins of the chain before the provider, the caller included.
    chain: tuple[str, ...]
    wire_id: str
    deadline: float
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    nursery: trio.Nursery | None = None
    #: The calls made as its children (in its nursery, or in another parent's when
    #: parentOperationID was omitted): they end when it ends or its deadline passes.
    linked: list[_RelayCall] = field(default_factory=list)
    #: Its deadline passed: it takes no new children and ends ``plugin.host.timeout``.
    expired: bool = False
    refusal: RelayRefusal | None = None
    value: JSONValue = None
    has_value: bool = False
    done: trio.Event = field(default_factory=trio.Event)

    def end(self, refusal: RelayRefusal) -> None:
        """End the call with ``refusal`` unless it has an outcome; cancels its scope."""
        if not self.has_value and self.refusal is None:
            self.refusal = refusal
        self.scope.cancel()
        for child in self.linked:
            child.end(RelayRefusal("plugin.host.cancelled", "The parent call ended"))

    def answer(self) -> JSONValue:
        if self.refusal is not None:
            raise JSONRPCError(self.refusal.number, self.refusal.message, self.refusal.data())
        return {"value": self.value}


@dataclass(frozen=True)
class _Settled:
    """A relayed call as the operation runner sees it: done once it has its outcome."""

    call: _RelayCall

    @property
    def done(self) -> bool:
        return self.call.has_value or self.call.refusal is not None


class FunctionRelay:
    """The relay between the plugin-owned sessions of one Core.

    Args:
        lookup: ``lookup(pluginID)``: the provider's running, negotiated backend, or None.
    """

    def __init__(self, lookup: Callable[[str], ProviderHandle | None]) -> None:
        self._lookup = lookup
        self.snapshot = RelaySnapshot({}, {})
        self._changed = trio.Event()
        self._calls: set[_RelayCall] = set()
        #: (provider pluginID, wire operationID) -> the relayed call that provider serves.
        self._serving: dict[tuple[str, str], _RelayCall] = {}
        #: (caller sessionID, provider pluginID) -> calls waiting for that provider.
        self._waiting: dict[tuple[str, str], int] = {}
        self._announced: set[tuple[str, str]] = set()
        self._wire_ids = itertools.count(1)

    # -- the host's side ---------------------------------------------------------------

    def configure(self, payload: LspConfigureFunctionRelay | JSONObject) -> JSONObject:
        """``lsp.configureFunctionRelay``: set the snapshot (its declaration; a JSON object is
        decoded as the Core decodes it); end the calls it disallows.

        Returns:
            ``{plugins, contexts, endedCalls}``: counts.

        Raises:
            CoreError: ``invalid_request`` for a malformed snapshot.
        """
        snapshot = parse_snapshot(payload)
        self.snapshot = snapshot
        ended = 0
        for call in list(self._calls):
            refusal = check_still_allowed(
                snapshot,
                call.caller_id,
                call.provider_id,
                call.function_id,
                call.context_id,
                call.generation,
            )
            if refusal is not None and not call.done.is_set():
                call.end(refusal)
                ended += 1
        self.changed()
        return {
            "plugins": len(snapshot.plugins),
            "contexts": len(snapshot.contexts),
            "endedCalls": ended,
        }

    def changed(self) -> None:
        """A provider started, negotiated, registered or ended: wake waiting calls."""
        self._changed.set()
        self._changed = trio.Event()

    def withdrawn(self, provider_id: str, removed: Collection[str]) -> None:
        """A provider withdrew functions: their running calls end (providerUnavailable)."""
        for call in list(self._calls):
            if call.provider_id == provider_id and call.function_id in removed:
                call.end(
                    RelayRefusal(
                        "plugin.function.providerUnavailable",
                        f"{provider_id} withdrew {call.function_id}",
                    )
                )
        self.changed()

    def running_calls(self) -> int:
        """Relayed calls running now (waiting or forwarded)."""
        return len(self._calls)

    # -- the backends' requests ----------------------------------------------------------

    def granted(self, plugin_id: str) -> bool:
        """A plugin that declares at least one call may use ``lithe/host/functions/*``."""
        return declares_calls(self.snapshot, plugin_id)

    def providers(self, caller: RelayCaller, params: JSONValue) -> JSONValue:
        """``lithe/host/functions/providers``.

        Raises:
            RelayRefusal: -32018/-32602 for params, ``notDeclared``.
        """
        return providers_result(self.snapshot, caller.plugin_id, parse_providers(params))

    async def invoke(self, caller: RelayCaller, params: JSONValue) -> JSONValue:
        """``lithe/host/functions/invoke``: check, forward, answer ``{value}``.

        Runs in the caller's handler task for the request; the caller's ``$/cancelRequest``
        or the end of its session cancels that task and with it the call and its children.

        Raises:
            RelayRefusal: A check of the reference's table failed (nothing was forwarded).
            JSONRPCError: The call ended without a value (its code in ``data.code``).

        **Cancellation:** cancelling the task ends the call (``plugin.host.cancelled``),
        cancels its scope and so its children; the endpoint answers the caller -32800.
        """
        request = parse_invoke(params)
        parents, parent_running = self._parents(caller, request.parent_operation_id)
        chain: tuple[str, ...] = ()
        for parent in parents:
            chain += tuple(p for p in parent.chain if p not in chain)
        if caller.plugin_id not in chain:
            chain += (caller.plugin_id,)
        handle = self._lookup(request.plugin_id)
        check_invoke(
            self.snapshot,
            caller.plugin_id,
            request,
            provider_functions=handle.functions if handle is not None else None,
            parent_running=parent_running,
            chain=chain,
            caller_running=sum(1 for c in self._calls if c.caller_id == caller.plugin_id),
        )
        call = _RelayCall(
            caller.plugin_id,
            request.plugin_id,
            request.function_id,
            request.context_id,
            request.generation,
            request.params,
            chain,
            # Opaque and unique: never derived from anything the caller sent.
            f"relay-{next(self._wire_ids)}",
            trio.current_time() + request.timeout_ms / 1000,
        )
        call.scope.deadline = call.deadline + GRACE_MS / 1000
        self._calls.add(call)
        try:
            primary = parents[-1] if parents else None
            if primary is not None and primary.nursery is not None:
                # A child runs in its parent's nursery: the parent's end cancels it.
                for parent in parents:
                    parent.linked.append(call)
                primary.nursery.start_soon(self._run, call, caller)
                await call.done.wait()
            else:
                await self._run(call, caller)
        finally:
            if not call.done.is_set():
                # The caller cancelled it, or its session ended.
                call.end(RelayRefusal("plugin.host.cancelled", "The caller cancelled the call"))
            for parent in parents:
                if call in parent.linked:
                    parent.linked.remove(call)
        return call.answer()

    def _parents(self, caller: RelayCaller, parent_id: str | None) -> tuple[list[_RelayCall], bool]:
        """The call chain: the relayed calls the new call is a child of, and whether the
        named parent runs."""
        if parent_id is None:
            # Omitted: a child of every relayed call this backend serves now.
            return [
                c
                for (provider, _), c in self._serving.items()
                if provider == caller.plugin_id and not c.done.is_set() and not c.expired
            ], True
        served = self._serving.get((caller.plugin_id, parent_id))
        if served is not None:
            # Past its deadline a call is ending: it takes no new children.
            return (
                ([served], True) if not served.done.is_set() and not served.expired else ([], False)
            )
        # A call the host started directly: a new chain.
        return [], caller.serves_host_call(parent_id)

    async def _run(self, call: _RelayCall, caller: RelayCaller) -> None:
        """One relayed call's task: the one operation path (:func:`run_operation`)."""

        def refuse(refusal: RelayRefusal) -> None:
            if call.refusal is None and not call.has_value:
                call.refusal = refusal

        def forget() -> None:
            call.nursery = None
            self._serving.pop((call.provider_id, call.wire_id), None)
            self._calls.discard(call)

        try:
            await run_operation(
                _Settled(call),
                partial(self._run_scoped, call, caller),
                scope=call.scope,
                what=f"relayed call {call.wire_id} ({call.caller_id} -> {call.provider_id})",
                finish=refuse,
                forget=forget,
                internal=lambda exc: RelayRefusal("internal", internal_message(exc)),
                caught=lambda: RelayRefusal(
                    "plugin.host.timeout", "The relay ended the call after its deadline"
                ),
                ended=lambda: RelayRefusal("plugin.host.cancelled", "The call was cancelled"),
            )
        finally:
            for child in call.linked:
                child.end(RelayRefusal("plugin.host.cancelled", "The parent call ended"))
            call.done.set()

    async def _run_scoped(self, call: _RelayCall, caller: RelayCaller) -> None:
        # Runs under call.scope (run_operation enters it): the relay's own end, GRACE_MS
        # after the deadline, and every end()/cancel; the nursery holds the calls made as
        # this call's children.
        async with trio.open_nursery() as nursery:
            call.nursery = nursery
            nursery.start_soon(self._deadline_passes, call)
            await self._forward(call, caller)
            # Its ending cancels the calls made as its children.
            nursery.cancel_scope.cancel()

    @staticmethod
    async def _deadline_passes(call: _RelayCall) -> None:
        """At the deadline: the call takes no new children and the ones it has are cancelled.

        The provider is sent ``$/cancelRequest`` at the same moment (by the endpoint, see
        :meth:`_forward`); the call itself ends when the provider answers, or at the relay's
        own end :data:`GRACE_MS` later.
        """
        await trio.sleep_until(call.deadline)
        call.expired = True
        for child in list(call.linked):
            child.end(RelayRefusal("plugin.host.cancelled", "The parent call's deadline passed"))

    async def _forward(self, call: _RelayCall, caller: RelayCaller) -> None:
        """Wait for the provider, forward the call, and set the call's one outcome.

        The deadline: a call still waiting for its provider ends at once; a forwarded call
        is cancelled at the provider (``$/cancelRequest``, the provider session's own
        timeout) and ends when the provider answers, with ``plugin.host.timeout`` whatever
        the answer; a provider that does not answer is left to the relay's own end
        (``call.scope``, :data:`GRACE_MS` later).
        """
        with trio.move_on_at(call.deadline):
            try:
                endpoint = await self.wait_for_provider(caller, call.provider_id, call.function_id)
            except RelayRefusal as refusal:
                call.refusal = refusal
                return
        if call.expired or trio.current_time() >= call.deadline:
            call.refusal = RelayRefusal(
                "plugin.host.timeout", "The relayed call's deadline passed before its provider ran"
            )
            return
        fault_point("plugin.relay")
        forwarded: JSONObject = {
            "functionID": call.function_id,
            "operationID": call.wire_id,
            "params": call.params,
            "context": {"contextID": call.context_id, "generation": call.generation},
            # Written by the relay from the calling session's identity (The caller field).
            "caller": {"pluginID": call.caller_id},
        }
        self._serving[(call.provider_id, call.wire_id)] = call
        value: JSONValue = None
        failure: RelayRefusal | None = None
        try:
            value = await endpoint.request(INVOKE_METHOD, forwarded, cancel_at=call.deadline)
        except ReplyWithoutResult:
            failure = RelayRefusal(
                "plugin.function.invalidResult", "the provider answered without a result"
            )
        except JSONRPCError as exc:
            failed = function_failure(exc.message, exc.data)
            details: JSONObject | None = (
                {"pluginErrorCode": failed["pluginErrorCode"]}
                if "pluginErrorCode" in failed
                else None
            )
            failure = RelayRefusal("plugin.function.failed", str(failed["message"]), details)
        except EndpointClosed as exc:
            failure = RelayRefusal(
                "plugin.function.providerUnavailable",
                f"{call.provider_id}'s backend ended while the call ran: {exc.reason}",
            )
        else:
            size = json_size(value)
            if size > MAX_RESULT_BYTES:
                failure = RelayRefusal(
                    "plugin.function.invalidResult", f"the result is over {MAX_RESULT_BYTES} bytes"
                )
            elif size > MAX_RELAYED_RESULT_BYTES:
                failure = RelayRefusal(
                    "plugin.function.payloadTooLarge",
                    f"the result is over {MAX_RELAYED_RESULT_BYTES} bytes",
                )
        if call.refusal is not None:
            return  # ended meanwhile (a snapshot change, a withdrawal): that code stands
        if call.expired:
            # An answer after the deadline (to the $/cancelRequest sent then) is a timeout.
            call.refusal = RelayRefusal("plugin.host.timeout", "The relayed call's deadline passed")
        elif failure is not None:
            call.refusal = failure
        else:
            # null is a result.
            call.value, call.has_value = value, True

    async def wait_for_provider(
        self, caller: RelayCaller, provider_id: str, function_id: str
    ) -> JSONRPCEndpoint:
        """Providers that are not running: wait until the provider serves the function.

        Emits ``functionProviderStartRequired {result: {pluginID}}`` on the calling session
        once per waiting provider (again only after every call waiting for it has ended).

        Returns:
            The provider's endpoint.

        Raises:
            RelayRefusal: ``plugin.function.providerUnavailable`` after
                :data:`PROVIDER_START_MS` (30 000 ms).

        **Cancellation:** a plain wait; the call's deadline and scope still apply.
        """
        key = (caller.session_id, provider_id)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            with trio.move_on_after(PROVIDER_START_MS / 1000):
                while True:
                    changed = self._changed
                    handle = self._lookup(provider_id)
                    if handle is not None and function_id in handle.functions:
                        return handle.endpoint
                    if handle is None and key not in self._announced:
                        # Once per waiting provider, not once per waiting call.
                        self._announced.add(key)
                        caller.emit_event(
                            "functionProviderStartRequired", {"result": {"pluginID": provider_id}}
                        )
                    await changed.wait()
        finally:
            self._waiting[key] -= 1
            if self._waiting[key] == 0:
                del self._waiting[key]
                self._announced.discard(key)
        raise RelayRefusal(
            "plugin.function.providerUnavailable",
            f"{provider_id} did not serve {function_id} within {PROVIDER_START_MS} ms",
        )
