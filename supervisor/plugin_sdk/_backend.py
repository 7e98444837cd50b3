"""A Trio plugin backend: the backend side of Lithe's plugin-function protocol.

Implements the plugin contract "Plugin backend", "Plugin functions" (Negotiation,
Registration and withdrawal, Invocation, Progress, Host services), the caller's side of
"Cross-plugin calls", and "Structured plugin diagnostics" (the automatic terminal facts),
as a Trio twin of the Node plugin SDK contract's core (its "Rules that keep Lithe in charge" are
enforced here).

Cancel-scope tree of a backend (everything has an owner, nothing outlives ``serve``)::

    serve()                          the endpoint's nursery: one task per inbound request
    `- lithe/function/invoke         the endpoint's per-request scope ($/cancelRequest)
       `- the call's nursery         CallContext.cancel_scope: revocation, shutdown, the
          |                          handler's end (work it left running stops)
          |- handler                 context.run() / context.open_process(): process trees
          `- context.start_soon()    background work of the call, also ended with it

A process tree is ended (polite-free: SIGTERM, grace, SIGKILL, sweep) whenever the scope
that opened it ends; ``ProcessTree.aclose`` is shielded and bounded, so a cancelled call
still leaves no process behind. ``shutdown`` cancels every call and waits for them; ``exit``
and the end of input close the endpoint, which cancels every handler task.
"""

from __future__ import annotations

import logging
import math
import signal
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final, NamedTuple, NoReturn, TypeAlias, TypeVar

import trio

from protocol import ErrorCode

from .._endpoint import EndpointClosed, JSONRPCEndpoint, JSONRPCError, open_jsonrpc_endpoint
from .._handles import take_over_stdio
from .._process._oneshot import DEFAULT_MAX_OUTPUT_BYTES, ProcessResult, run_process
from .._process._tree import PIPE, ProcessTree, open_process_tree
from ._errors import HostError, PluginError, PluginSdkError
from ._services import (
    EventHandler,
    Subscription,
    SubscriptionRouter,
    _Run,
    _Subscriptions,
    _Terminal,
    _Workspace,
    subscribe,
)
from ._wire import (
    ERROR_MESSAGE_BYTES,
    MAX_FUNCTIONS,
    MAX_PENDING_HOST_REQUESTS,
    Negotiated,
    cut_utf8,
    encode_result,
    is_function_id,
    is_parent_operation_id,
    log_fact,
    log_operation,
    negotiate,
    normalize_progress,
)

if TYPE_CHECKING:
    import os
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

    from protocol import JSONObject, JSONValue, Params

__all__ = (
    "Backend",
    "CallContext",
    "Diagnostics",
    "FunctionHandler",
    "Host",
    "HostNotificationHandler",
    "create_backend",
)

logger = logging.getLogger("supervisor.plugin_sdk")

#: ``await handler(params, context) -> result`` (any JSON value; None is a result).
FunctionHandler: TypeAlias = "Callable[[JSONObject, CallContext], Awaitable[JSONValue]]"
#: ``await hook(initialize_params, negotiated)``.
InitializeHook: TypeAlias = "Callable[[JSONValue | None, Negotiated], Awaitable[None]]"
#: ``await hook()``.
ShutdownHook: TypeAlias = "Callable[[], Awaitable[None]]"
#: Ordinary LSP request / notification handlers: ``await handler(params)``.
RequestHandler: TypeAlias = "Callable[[JSONValue | None], Awaitable[JSONValue]]"
NotificationHandler: TypeAlias = "Callable[[JSONValue | None], Awaitable[None]]"
#: Host notification handlers (``on_command``, ``on_contexts_changed``,
#: ``on_host_notification``): ``await handler(params)`` with the notification's params
#: (``on_command``: ``{commandID, workspaceContext}``).
HostNotificationHandler: TypeAlias = "Callable[[JSONObject], Awaitable[None]]"

_F = TypeVar("_F", bound="Callable[..., Awaitable[Any]]")

#: Lifecycle methods the SDK owns (LSP "Lifecycle Messages").
_LIFECYCLE: Final = frozenset({"initialize", "initialized", "shutdown", "exit"})
#: The JSON-RPC number a failed function answers with: LSP's RequestFailed (-32803); the
#: host reads the outcome from ``error.message`` and ``error.data.code``, not the number.
_FUNCTION_FAILED_NUMBER: Final = ErrorCode.REQUEST_FAILED
#: The message of a failure that is not a PluginError: paths and tracebacks never reach
#: the UI (the Node plugin SDK contract "Results and errors").
_GENERIC_FAILURE: Final = "The function failed."
#: How long ``shutdown`` waits for cancelled calls to end (their trees are bounded by the
#: TERM grace plus the kill wait; this only bounds a handler that shields itself).
_SHUTDOWN_WAIT_S: Final = 10.0
#: Bounded waits for the last frames (the answer to ``shutdown``, a final fact).
_FINAL_WRITE_S: Final = 5.0
#: Host notifications the SDK routes itself (``on_host_notification`` refuses them).
_ROUTED_NOTIFICATIONS: Final = frozenset(
    {
        "lithe/host/subscriptions/notify",
        "lithe/host/commands/didRun",
        "lithe/host/workspace/didChangeContexts",
    }
)
_KEY_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")


def _presentable(failure: BaseException) -> BaseException:
    """The PluginError a failed call reports: ``failure``, or the first PluginError of an
    exception group whose every leaf is one (a handler's nursery, or work it started with
    ``context.start_soon``: a Trio ``Promise.all``). A group with anything else in it stays
    a generic failure, logged whole."""
    if isinstance(failure, BaseExceptionGroup):
        plugin_errors, rest = failure.split(PluginError)
        if plugin_errors is not None and rest is None:
            first: BaseException = plugin_errors
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            return first
    return failure


def _monotonic_ms(start: float) -> int:
    return max(0, math.floor((trio.current_time() - start) * 1000))


class _Call:
    """One running ``lithe/function/invoke``: what revocation and shutdown need."""

    __slots__ = ("function_id", "operation_id", "revoked", "scope", "settled")

    def __init__(self, function_id: str, operation_id: str) -> None:
        self.function_id = function_id
        self.operation_id = operation_id
        self.scope: trio.CancelScope | None = None
        self.revoked = False
        self.settled = False


class _InvokeRequest(NamedTuple):
    """A ``lithe/function/invoke`` that passed its checks."""

    function_id: str
    operation_id: str
    params: JSONObject
    handler: FunctionHandler
    workspace_context: JSONObject | None
    caller: JSONObject | None


def _read_workspace_context(raw_context: JSONValue | None) -> JSONObject | None:
    """The invoke's workspace context, or None when it is absent or malformed."""
    if isinstance(raw_context, dict):
        try:
            return _wire_context(raw_context)
        except PluginSdkError:
            return None
    return None


def _read_caller(raw_caller: JSONValue | None) -> JSONObject | None:
    """The invoke's ``caller`` (``{pluginID}``), or None unless it is exactly that shape."""
    if (
        isinstance(raw_caller, dict)
        and set(raw_caller) == {"pluginID"}
        and isinstance(raw_caller["pluginID"], str)
    ):
        return {"pluginID": raw_caller["pluginID"]}
    return None


class Diagnostics:
    """Typed diagnostics: the handled ``degraded`` / ``recovered`` facts (``lithe/log``).

    There is no free-text log API: a fact carries an operation, a stable code and an
    optional count, never a message ("Structured plugin diagnostics").
    """

    def __init__(self, backend: Backend, operation_id: str | None) -> None:
        self._backend = backend
        self._operation_id = operation_id

    async def degraded(self, operation: str, code: str, count: int | None = None) -> None:
        """Record that ``operation`` fell back to a degraded result (a WARN fact).

        Args:
            operation: A function ID (at most 64 bytes) or an SDK stage.
            code: Stable category, 1-64 ASCII letters, digits or ``._:/-$``.
            count: Optional affected item count.

        Raises:
            ValueError: A field breaks the contract; nothing is sent.
        """
        await self._backend._send_fact(
            log_fact("degraded", operation, code=code, count=count, operation_id=self._operation_id)
        )

    async def recovered(self, operation: str, code: str, count: int | None = None) -> None:
        """Record that ``operation`` recovered (a WARN fact); arguments as :meth:`degraded`."""
        await self._backend._send_fact(
            log_fact(
                "recovered", operation, code=code, count=count, operation_id=self._operation_id
            )
        )


class _Functions:
    """``host.functions``: the relay's discovery and invocation (caller's side)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def providers(self, function_id: str) -> JSONValue:
        """``lithe/host/functions/providers``: ``{providers: [{pluginID, version}]}``.

        Raises:
            PluginSdkError: ``sdk.functions.invalidCall`` for a malformed function ID.
            HostError: ``plugin.host.unavailable`` (sent nothing) when the session may not
                call the relay; any refusal of the host.
        """
        if not is_function_id(function_id):
            raise PluginSdkError("sdk.functions.invalidCall", "functionID is not a function ID")
        method = "lithe/host/functions/providers"
        await self._host._require_supported(method)
        return await self._host.request(method, {"functionID": function_id})

    async def invoke(
        self,
        context: Mapping[str, object],
        *,
        plugin_id: str,
        function_id: str,
        params: JSONObject | None = None,
        timeout_ms: int | None = None,
        parent_operation_id: str | None = None,
    ) -> JSONValue:
        """``lithe/host/functions/invoke``: call another plugin's exported function.

        Inside a function handler the call's ``operationID`` is sent as
        ``parentOperationID`` (an explicit one wins), so the host makes the new call a
        child of the call being served: cancelling that call cancels this one.

        Args:
            context: ``{contextID, generation}`` of a workspace context (extra keys of a
                whole context are dropped).
            plugin_id: The provider's plugin ID.
            function_id: The exported function.
            params: A JSON object; not sent when None (the host reads ``{}``).
            timeout_ms: Positive milliseconds; the host defaults it to 60 000 and caps it
                at 600 000. Passed on as given.
            parent_operation_id: Overrides the automatic parent.

        Returns:
            ``{value}``; ``value`` is the provider's result (None is a result).

        Raises:
            PluginSdkError: ``sdk.functions.invalidCall`` / ``sdk.host.invalidContext``
                for a malformed call; nothing is sent.
            HostError: The relay's refusal or failure (``plugin.function.callCycle``,
                ``plugin.function.failed`` with ``details.pluginErrorCode``, ...).

        **Cancellation:** the host is sent ``$/cancelRequest``; the call fails there with
        ``plugin.host.cancelled`` and its own children are cancelled down the chain.
        """
        call = _invoke_params(
            context,
            plugin_id,
            function_id,
            params,
            timeout_ms,
            parent_operation_id if parent_operation_id is not None else self._host._parent,
        )
        method = "lithe/host/functions/invoke"
        await self._host._require_supported(method)
        return await self._host.request(method, call)


def _invoke_params(
    context: Mapping[str, object],
    plugin_id: object,
    function_id: object,
    params: object,
    timeout_ms: object,
    parent: object,
) -> JSONObject:
    if not isinstance(plugin_id, str) or not plugin_id or len(plugin_id.encode()) > 256:
        raise PluginSdkError("sdk.functions.invalidCall", "pluginID must be a nonempty string")
    if not is_function_id(function_id):
        raise PluginSdkError("sdk.functions.invalidCall", "functionID is not a function ID")
    assert isinstance(function_id, str)
    call: JSONObject = {
        "pluginID": plugin_id,
        "functionID": function_id,
        "context": _wire_context(context),
    }
    if params is not None:
        if not isinstance(params, dict):
            raise PluginSdkError("sdk.functions.invalidCall", "params must be a JSON object")
        call["params"] = params
    if timeout_ms is not None:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
            raise PluginSdkError(
                "sdk.functions.invalidCall", "timeoutMilliseconds must be a positive integer"
            )
        call["timeoutMilliseconds"] = timeout_ms
    if parent is not None:
        if not is_parent_operation_id(parent):
            raise PluginSdkError(
                "sdk.functions.invalidCall", "parentOperationID must be a string of 1..128 bytes"
            )
        assert isinstance(parent, str)
        call["parentOperationID"] = parent
    return call


def _wire_context(context: object) -> JSONObject:
    if not isinstance(context, dict):
        raise PluginSdkError("sdk.host.invalidContext", "a context is {contextID, generation}")
    context_id = context.get("contextID")
    generation = context.get("generation")
    if (
        not isinstance(context_id, str)
        or not context_id
        or isinstance(generation, bool)
        or not isinstance(generation, int)
        or generation < 0
    ):
        raise PluginSdkError("sdk.host.invalidContext", "a context is {contextID, generation}")
    return {"contextID": context_id, "generation": generation}


class _Credentials:
    """``host.credentials``: the plugin's secrets in the platform store."""

    def __init__(self, host: Host) -> None:
        self._host = host

    @staticmethod
    def _check_key(key: object) -> str:
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or not set(key) <= _KEY_CHARS:
            raise PluginSdkError("sdk.host.invalidParams", "a key is 1-128 of [A-Za-z0-9._:-]")
        return key

    async def get(self, key: str) -> str | None:
        """The stored secret, or None. Raises HostError / PluginSdkError."""
        result = await self._host.request(
            "lithe/host/credentials/get", {"key": self._check_key(key)}
        )
        if isinstance(result, dict) and isinstance(result.get("secret"), str):
            secret = result["secret"]
            assert isinstance(secret, str)
            return secret
        return None

    async def set(self, key: str, secret: str) -> None:
        """Store ``secret`` (at most 16 KiB) under ``key``."""
        if len(str(secret).encode("utf-8")) > 16 * 1024:
            raise PluginSdkError("sdk.host.invalidParams", "a secret is a string of <= 16 KiB")
        await self._host.request(
            "lithe/host/credentials/set", {"key": self._check_key(key), "secret": secret}
        )

    async def delete(self, key: str) -> None:
        """Delete the secret under ``key`` (also when nothing is stored)."""
        await self._host.request("lithe/host/credentials/delete", {"key": self._check_key(key)})


class Host:
    """Host services (``lithe/host/*``), optionally bound to one function call.

    At most 16 host requests of a backend are unanswered at once; further ones wait here
    for a free slot instead of being refused by the host. Bound to a call
    (``context.host``), requests run in that call's scope, so the ones left unanswered are
    cancelled (``$/cancelRequest``) when the call ends, and relayed calls carry the call's
    ``operationID`` as ``parentOperationID``.

    Attributes:
        functions: ``providers(function_id)``, ``invoke(context, ...)``.
        credentials: ``get(key)``, ``set(key, secret)``, ``delete(key)``.
        workspace: ``list_contexts()``, ``get_context(context)``, ``get_folders(context)``.
        terminal: ``create``, ``show``, ``close``, ``reopen``, ``dispose``, ``on_exit``.
        run: ``start(context, label, process, ...)``, ``stop(run_id=|session_id=)``.
        subscriptions: ``dispose(subscription_id)``.
    """

    def __init__(self, backend: Backend, parent_operation_id: str | None = None) -> None:
        self._backend = backend
        self._parent = parent_operation_id if is_parent_operation_id(parent_operation_id) else None
        self.functions = _Functions(self)
        self.credentials = _Credentials(self)
        self.workspace = _Workspace(self)
        self.terminal = _Terminal(self)
        self.run = _Run(self)
        self.subscriptions = _Subscriptions(self)

    async def subscribe(
        self, method: str, params: JSONObject | None, on_event: EventHandler | None = None
    ) -> Subscription:
        """Any ``lithe/host/*`` method that answers ``{subscriptionID}``; its events go to
        ``await on_event(event, {subscriptionID, sequence, gap})``, in order.

        Raises:
            HostError: As :meth:`request`, or ``plugin.host.failed`` without an ID.
        """
        return await subscribe(self, method, params, on_event)

    @property
    def negotiated(self) -> bool:
        """True when the host offered litheFunctions in this session."""
        return self._backend.functions_version is not None

    async def request(
        self, method: str, params: Params | None = None, *, timeout_ms: float | None = None
    ) -> JSONValue:
        """Send any ``lithe/host/*`` request and return its result.

        Args:
            method: A ``lithe/host/*`` method.
            params: Its params.
            timeout_ms: Optional local deadline in milliseconds; when it passes the host
                is sent ``$/cancelRequest`` and ``plugin.host.timeout`` is raised.

        Raises:
            PluginSdkError: ``sdk.host.invalidMethod`` for a method outside ``lithe/host/``
                (the Node plugin SDK contract, "No calls back into Lithe's dispatch": a backend
                never asks Lithe to dispatch a function or a build).
            HostError: ``plugin.host.unavailable`` without litheFunctions (nothing sent);
                the host's refusal or failure; ``plugin.host.cancelled`` when the session
                ended before the answer.

        **Cancellation:** waiting for a slot or for the answer is safe to cancel; an
        answer not yet received is cancelled at the host with ``$/cancelRequest``.
        """
        if not str(method).startswith("lithe/host/"):
            raise PluginSdkError("sdk.host.invalidMethod", "host requests are lithe/host/* only")
        endpoint = self._backend._endpoint
        if self._backend.functions_version is None or endpoint is None:
            # Negotiation failed or no session: refused locally, nothing is sent.
            await trio.lowlevel.checkpoint()
            raise HostError("plugin.host.unavailable", "The host offers no host services.")
        async with self._backend._host_slots:
            try:
                return await endpoint.request(method, params, timeout_ms=timeout_ms)
            except JSONRPCError as exc:
                raise HostError.from_wire(exc.code, exc.message, exc.data) from None
            except EndpointClosed as exc:
                raise HostError(
                    "plugin.host.cancelled", f"The session ended ({exc.reason})."
                ) from None
            except trio.TooSlowError:
                raise HostError("plugin.host.timeout", "The host request timed out.") from None

    async def capabilities(self) -> JSONValue:
        """``lithe/host/getCapabilities``, asked once per session and then cached."""
        backend = self._backend
        if backend._capabilities is None:
            backend._capabilities = await self.request("lithe/host/getCapabilities", {})
        return backend._capabilities

    async def supports(self, method: str) -> bool:
        """True when this session may call ``method`` (from :meth:`capabilities`)."""
        if self._backend.functions_version is None:
            await trio.lowlevel.checkpoint()
            return False
        capabilities = await self.capabilities()
        services = capabilities.get("services") if isinstance(capabilities, dict) else None
        if not isinstance(services, dict):
            return False
        short = method.removeprefix("lithe/host/")
        for service in services.values():
            methods = service.get("methods") if isinstance(service, dict) else None
            if isinstance(methods, list) and (method in methods or short in methods):
                return True
        return False

    async def _require_supported(self, method: str) -> None:
        if not await self.supports(method):
            raise HostError("plugin.host.unavailable", f"This session may not call {method}.")


class CallContext:
    """What a function handler gets besides its params: one running call.

    Attributes:
        function_id: The function being called.
        operation_id: The opaque wire ``operationID`` chosen by the host; never derive
            anything from it.
        workspace_context: ``{contextID, generation}`` of the page's window, or None.
        caller: ``{pluginID}`` of the plugin whose relayed call this is, or None for a call
            the host started (or when the field is not exactly ``{pluginID}``). Written by
            the host; it can not be forged.
        cancel_scope: The call's scope. It is cancelled when the host cancels the call
            (``$/cancelRequest``: a cancel, its deadline, a revocation), when the function
            is withdrawn here, on ``shutdown``, ``exit`` and end of input, and when the
            handler settles (work it left running stops). ``cancel_scope.cancel()`` ends
            the call from inside.
        host: :class:`Host` bound to this call.
        diagnostics: :class:`Diagnostics` correlated with this call.
    """

    def __init__(
        self,
        backend: Backend,
        call: _Call,
        nursery: trio.Nursery,
        workspace_context: JSONObject | None,
        caller: JSONObject | None,
    ) -> None:
        self._backend = backend
        self._call = call
        self._nursery = nursery
        self.function_id = call.function_id
        self.operation_id = call.operation_id
        self.workspace_context = workspace_context
        self.caller = caller
        self.cancel_scope: trio.CancelScope = nursery.cancel_scope
        self.host = Host(backend, call.operation_id)
        self.diagnostics = Diagnostics(backend, call.operation_id)

    @property
    def cancelled(self) -> bool:
        """True once the call's scope was cancelled (the Node SDK's ``signal.aborted``)."""
        return self.cancel_scope.cancel_called

    async def progress(self, message: str | None = None, percentage: float | None = None) -> None:
        """Report progress (``lithe/function/progress``).

        Args:
            message: Cut to 1024 UTF-8 bytes on a character boundary.
            percentage: Rounded to a whole number and clamped to 0..100.

        A report after the call settled, or after the session ended, is dropped.

        **Cancellation:** waits only while the write queue is full.
        """
        endpoint = self._backend._endpoint
        if self._call.settled or endpoint is None or endpoint.closed:
            await trio.lowlevel.checkpoint()
            return
        report = normalize_progress(message, percentage)
        report["operationID"] = self.operation_id
        with suppress(EndpointClosed):
            await endpoint.notify("lithe/function/progress", report)

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str | None] | None = None,
        stdin: bytes | None = None,
        timeout_ms: int | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> ProcessResult:
        """Run ``argv`` (no shell) as a process tree bound to this call; collect its output.

        A thin use of :func:`supervisor.run_process` (itself built on
        ``open_process_tree``) inside the call's scope: cancelling or ending the call ends
        the whole tree, including descendants that left its group or session. The
        supervisor's scope marker is always set in the child's environment, whatever
        ``env`` says, so the host can still find what a killed backend left.

        Args:
            argv: Program and arguments.
            cwd: Working directory; default: the backend's.
            env: Changes to the backend's environment (None removes a variable).
            stdin: Bytes written to stdin, which is then closed; None: ``/dev/null``.
            timeout_ms: Deadline from the spawn in milliseconds; the result then has
                ``timed_out``. None: only the call's own scope bounds it.
            max_output_bytes: Bytes kept per stream (default 16 MiB).
            on_output: Called synchronously with ``("stdout" | "stderr", chunk)``.

        Returns:
            :class:`supervisor.ProcessResult` (``exit_code``, ``stdout``, ``stderr``, ...).

        Raises:
            protocol.CoreError: ``invalid_request`` / ``launch_failed``; nothing started.

        **Cancellation:** the tree is ended (shielded, bounded) and ``trio.Cancelled``
        propagates.
        """
        return await run_process(
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_ms=timeout_ms,
            max_output_bytes=max_output_bytes,
            on_output=on_output,
        )

    @asynccontextmanager
    async def open_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str | None] | None = None,
        stdin: int = PIPE,
        stdout: int = PIPE,
        stderr: int = PIPE,
    ) -> AsyncIterator[ProcessTree]:
        """Start ``argv`` as a process tree for streaming use; end it when the block ends.

        For a tool whose output drives progress: read ``tree.stdout`` inside the block,
        ``await tree.wait()`` for its exit. Leaving the block -- normally, by an error, or
        because the call was cancelled -- ends the tree (SIGTERM to its group, grace,
        SIGKILL, sweep by marker and ancestry; shielded and bounded).

        Args:
            argv, cwd, env: As for :meth:`run`.
            stdin, stdout, stderr: ``supervisor.PIPE`` / ``DEVNULL`` (``STDOUT`` for stderr).

        Yields:
            The running :class:`supervisor.ProcessTree`.

        Raises:
            protocol.CoreError: ``invalid_request`` / ``launch_failed``; nothing started.
        """
        tree = await open_process_tree(
            argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr
        )
        try:
            yield tree
        finally:
            await tree.aclose()

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``fn(*args)`` in the background of this call, in the call's own nursery.

        It is cancelled when the call ends (result, error or cancellation): background
        work never outlives its call. An exception it raises fails the call.
        """
        self._nursery.start_soon(fn, *args)


class Backend:
    """A plugin backend: its functions, hooks and the session with the host.

    Create it with :func:`create_backend`, declare functions with :meth:`function`, then
    :meth:`listen` (stdio) or ``await`` :meth:`serve` (any pair of byte streams).

    Attributes:
        name: ``serverInfo.name``.
        version: ``serverInfo.version``.
        functions_version: 0 once the host offered litheFunctions, else None.
        logging_version: 0 once the host offered litheLogging, else None.
        host: :class:`Host` not bound to any call (no parent for relayed calls).
        diagnostics: :class:`Diagnostics` not bound to any call.
    """

    def __init__(
        self,
        name: str,
        version: str,
        *,
        capabilities: JSONObject | None = None,
        functions: bool = True,
    ) -> None:
        self.name = name
        self.version = version
        self._answer_functions = functions
        self._server_capabilities: JSONObject = dict(capabilities or {})
        self._functions: dict[str, FunctionHandler] = {}
        self._initialize_hooks: list[InitializeHook] = []
        self._shutdown_hooks: list[ShutdownHook] = []
        self._request_handlers: dict[str, RequestHandler] = {}
        self._notification_handlers: dict[str, NotificationHandler] = {}
        self._command_handlers: dict[str, HostNotificationHandler] = {}
        self._contexts_handlers: list[HostNotificationHandler] = []
        self._host_notification_handlers: dict[str, HostNotificationHandler] = {}
        self._router = SubscriptionRouter()
        self._suppressed: set[str] = set()
        self.functions_version: int | None = None
        self.logging_version: int | None = None
        # "new" -> "initializing" -> "ready" -> "shutdown"
        self._state = "new"
        self._endpoint: JSONRPCEndpoint | None = None
        self._calls: set[_Call] = set()
        self._calls_idle = trio.Event()
        self._calls_idle.set()
        self._exit_requested: trio.Event | None = None
        self._host_slots: trio.Semaphore = trio.Semaphore(MAX_PENDING_HOST_REQUESTS)
        self._capabilities: JSONValue | None = None
        self.host = Host(self)
        self.diagnostics = Diagnostics(self, None)

    # -- declaring ------------------------------------------------------------------------

    def function(self, function_id: str) -> Callable[[_F], _F]:
        """Decorator: declare ``function_id``, offered in the ``initialize`` answer.

        Usage::

            @backend.function("snapshot.refresh")
            async def refresh(params, context): ...

        Raises:
            PluginSdkError: ``sdk.functions.invalidId`` for a malformed or duplicate ID,
                or past 256 functions; ``sdk.notListening`` once the session is ready
                (use :meth:`register_function` then).
        """

        def decorate(handler: _F) -> _F:
            if self._state not in ("new", "initializing"):
                raise PluginSdkError(
                    "sdk.notListening", "function() declares before initialize; use register"
                )
            self._add_local(function_id, handler)
            return handler

        return decorate

    def _add_local(self, function_id: str, handler: FunctionHandler) -> None:
        if not is_function_id(function_id):
            raise PluginSdkError(
                "sdk.functions.invalidId",
                "a function ID is dot-separated lowerCamelCase segments of <= 128 bytes",
            )
        if function_id in self._functions:
            raise PluginSdkError("sdk.functions.invalidId", f"{function_id} is already declared")
        if len(self._functions) >= MAX_FUNCTIONS:
            raise PluginSdkError("sdk.functions.invalidId", "a session holds at most 256 functions")
        self._functions[function_id] = handler

    async def register_function(self, function_id: str, handler: FunctionHandler) -> None:
        """Add a function: locally before the ``initialize`` answer, else with
        ``lithe/function/register``.

        Raises:
            PluginSdkError: As for :meth:`function`.
            HostError: The host refused (``plugin.function.invalidRegistration``, or
                ``-32601`` when the protocol was not negotiated); the function is not kept.

        **Cancellation:** if cancelled while the host has not answered, the function stays
        declared locally (the host may or may not have registered it).
        """
        self._add_local(function_id, handler)
        if self._state in ("new", "initializing"):
            await trio.lowlevel.checkpoint()
            return
        try:
            await self._registry_request(
                "lithe/function/register", {"functions": [{"id": function_id}]}
            )
        except HostError:
            self._functions.pop(function_id, None)
            raise

    async def unregister_function(self, function_id: str) -> None:
        """Withdraw a function; its running calls are revoked (their scopes cancelled).

        Before the ``initialize`` answer this only changes the initial list; later the host
        is sent ``lithe/function/unregister``.

        Raises:
            PluginSdkError: ``sdk.functions.invalidId`` when it is not declared.
            HostError: The host refused.
        """
        if function_id not in self._functions:
            raise PluginSdkError("sdk.functions.invalidId", f"{function_id} is not declared")
        del self._functions[function_id]
        if self._state in ("new", "initializing"):
            self._revoke_local(function_id)
            await trio.lowlevel.checkpoint()
            return
        try:
            # The host must see the withdrawal before any reply of a running call: it is
            # the host that revokes them (plugin.function.revoked, then $/cancelRequest to
            # us). A call cancelled here first would answer before the unregister arrives
            # and be reported as an ordinary failure instead.
            await self._registry_request("lithe/function/unregister", {"ids": [function_id]})
        finally:
            # Calls the host's $/cancelRequest has not ended yet end now: nothing of a
            # withdrawn function keeps running, even when the host refused or went away.
            self._revoke_local(function_id)

    def _revoke_local(self, function_id: str) -> None:
        for call in list(self._calls):
            if call.function_id == function_id and call.scope is not None:
                call.revoked = True
                call.scope.cancel()

    async def _registry_request(self, method: str, params: JSONObject) -> None:
        endpoint = self._endpoint
        if endpoint is None or self.functions_version is None:
            await trio.lowlevel.checkpoint()
            raise HostError(
                "plugin.host.unavailable", "litheFunctions was not negotiated", rpc_code=-32601
            )
        try:
            await endpoint.request(method, params)
        except JSONRPCError as exc:
            raise HostError.from_wire(exc.code, exc.message, exc.data) from None
        except EndpointClosed as exc:
            raise HostError("plugin.host.cancelled", f"The session ended ({exc.reason}).") from None

    @property
    def function_ids(self) -> list[str]:
        """The declared function IDs, sorted."""
        return sorted(self._functions)

    def on_initialize(self, hook: InitializeHook) -> InitializeHook:
        """Run ``await hook(params, negotiated)`` before the ``initialize`` answer.

        It may call :meth:`register_function` to change the initial list. Usable as a
        decorator.
        """
        self._initialize_hooks.append(hook)
        return hook

    def on_shutdown(self, hook: ShutdownHook) -> ShutdownHook:
        """Run ``await hook()`` on ``shutdown``, after every call ended. A decorator too."""
        self._shutdown_hooks.append(hook)
        return hook

    def on_request(self, method: str, handler: RequestHandler) -> None:
        """Serve an ordinary LSP request (``textDocument/hover``, ...).

        Raises:
            PluginSdkError: ``sdk.reservedMethod`` for lifecycle and ``lithe/*`` methods.
        """
        self._check_ordinary(method)
        self._request_handlers[method] = handler

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        """Receive an ordinary LSP notification; lifecycle and ``lithe/*`` are reserved."""
        self._check_ordinary(method)
        self._notification_handlers[method] = handler

    def on_command(self, command_id: str, handler: HostNotificationHandler) -> None:
        """Run ``await handler({commandID, workspaceContext})`` when the user runs one of the
        plugin's commands (``lithe/host/commands/didRun``; ``workspaceContext`` is
        ``{contextID, generation}`` or None). The host waits for no result."""
        self._command_handlers[command_id] = handler

    def on_contexts_changed(self, handler: HostNotificationHandler) -> None:
        """Run ``await handler({revision})`` when workspace contexts open, close or change
        (``lithe/host/workspace/didChangeContexts``); call ``host.workspace.list_contexts``."""
        self._contexts_handlers.append(handler)

    def on_host_notification(self, method: str, handler: HostNotificationHandler) -> None:
        """Receive another ``lithe/host/*`` notification (``lithe/host/run/didExit``, one a
        later host adds) as ``await handler(params)``. Unknown ones are ignored.

        Raises:
            PluginSdkError: ``sdk.reservedMethod`` for a method outside ``lithe/host/`` or
                one the SDK routes itself (subscriptions, commands, contexts).
        """
        if not method.startswith("lithe/host/") or method in _ROUTED_NOTIFICATIONS:
            raise PluginSdkError("sdk.reservedMethod", f"{method} is not a host notification")
        self._host_notification_handlers[method] = handler

    async def _host_notification(self, method: str, params: JSONValue | None) -> None:
        """A ``lithe/host/*`` notification: routed in order; unknown ones ignored."""
        body: JSONObject = params if isinstance(params, dict) else {}
        if method == "lithe/host/subscriptions/notify":
            await self._router.deliver(body)
            return
        handlers: list[HostNotificationHandler] = []
        argument: JSONObject = body
        if method == "lithe/host/commands/didRun":
            command_id = body.get("commandID")
            handler = (
                self._command_handlers.get(command_id) if isinstance(command_id, str) else None
            )
            if handler is not None:
                handlers.append(handler)
            context = body.get("context")
            argument = {
                "commandID": command_id,
                "workspaceContext": _wire_context(context) if isinstance(context, dict) else None,
            }
        elif method == "lithe/host/workspace/didChangeContexts":
            handlers.extend(self._contexts_handlers)
        elif method in self._host_notification_handlers:
            handlers.append(self._host_notification_handlers[method])
        for handler in handlers:
            try:
                await handler(argument)
            except Exception:
                logger.exception("host notification handler for %s failed", method)
                await self._fact_quietly(
                    log_fact(
                        "operationFailed", "notification", duration_ms=0, code="handler.exception"
                    )
                )

    @staticmethod
    def _check_ordinary(method: str) -> None:
        if method in _LIFECYCLE or method.startswith(("lithe/", "$/")):
            raise PluginSdkError("sdk.reservedMethod", f"{method} is reserved for the SDK")

    def suppress_success_diagnostics(self, operation: str) -> None:
        """Send no ``operationFinished`` fact for ``operation`` (a frequent read or poll);
        its failures are still recorded."""
        self._suppressed.add(operation)

    async def send_request(
        self, method: str, params: Params | None = None, *, timeout_ms: float | None = None
    ) -> JSONValue:
        """Send an ordinary LSP request to the host.

        Raises:
            PluginSdkError: ``sdk.reservedMethod`` for ``lithe/*`` and lifecycle methods
                (the Node plugin SDK contract, "No calls back into Lithe's dispatch": host
                services go through :attr:`host`); ``sdk.notListening`` without a session.
            supervisor.JSONRPCError: The host answered with an error.
        """
        self._check_ordinary(method)
        return await self._require_endpoint().request(method, params, timeout_ms=timeout_ms)

    async def send_notification(self, method: str, params: Params | None = None) -> None:
        """Send an ordinary LSP notification; ``lithe/*`` is refused as for requests."""
        self._check_ordinary(method)
        await self._require_endpoint().notify(method, params)

    def _require_endpoint(self) -> JSONRPCEndpoint:
        if self._endpoint is None or self._endpoint.closed:
            raise PluginSdkError("sdk.notListening", "the backend has no session")
        return self._endpoint

    # -- serving --------------------------------------------------------------------------

    def listen(self) -> int:
        """Serve stdin/stdout until ``exit`` or the end of input; return the exit status.

        Rule 3 ("stdout belongs to the protocol"): the protocol keeps private copies of
        fds 0 and 1, fd 1 is then pointed at stderr (so ``print``, a library or a child
        that inherits it writes to stderr) and fd 0 at ``/dev/null``. SIGTERM and SIGINT
        end every call and every process first.

        Returns:
            0 after ``shutdown`` then ``exit`` (or end of input after ``shutdown``), 1 for
            ``exit`` or end of input without ``shutdown`` (LSP), 128+signal on a signal.
            Use as ``raise SystemExit(backend.listen())``.
        """
        protocol_in, protocol_out = take_over_stdio()

        async def main() -> int:
            receive = trio.lowlevel.FdStream(protocol_in)
            send = trio.lowlevel.FdStream(protocol_out)
            status: list[int] = []
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async with trio.open_nursery() as nursery:

                    async def run() -> None:
                        status.append(await self.serve(receive, send))
                        nursery.cancel_scope.cancel()

                    async def watch() -> None:
                        async for signum in signals:
                            status.append(128 + signum)
                            nursery.cancel_scope.cancel()
                            return

                    nursery.start_soon(run)
                    nursery.start_soon(watch)
            return status[0] if status else 1

        return trio.run(main)

    async def serve(
        self, receive_stream: trio.abc.ReceiveStream, send_stream: trio.abc.SendStream
    ) -> int:
        """Serve one session over a pair of byte streams (LSP base-protocol framing).

        Returns when the host sends ``exit`` or the input ends; every call is cancelled
        and every process tree it opened is ended before this returns.

        Returns:
            The exit status, as for :meth:`listen`.

        **Cancellation:** as ``exit``: every call ends, with its processes.
        """
        self._exit_requested = trio.Event()
        async with open_jsonrpc_endpoint(
            send_stream,
            receive_stream,
            request_handler=self._handle_request,
            notification_handler=self._handle_notification,
            name="host",
        ) as endpoint:
            self._endpoint = endpoint
            async with trio.open_nursery() as watchers:

                async def wait_closed() -> None:
                    await endpoint.wait_closed()
                    watchers.cancel_scope.cancel()

                async def wait_exit() -> None:
                    assert self._exit_requested is not None
                    await self._exit_requested.wait()
                    watchers.cancel_scope.cancel()

                watchers.start_soon(wait_closed)
                watchers.start_soon(wait_exit)
        # Leaving the endpoint cancelled every handler task; each call's process trees were
        # ended on the way out (shielded, bounded).
        self._endpoint = None
        self._router.clear()
        return 0 if self._state == "shutdown" else 1

    async def _handle_notification(self, method: str, params: JSONValue | None) -> None:
        if method == "exit":
            if self._exit_requested is not None:
                self._exit_requested.set()
            return
        if method == "initialized" or method.startswith("$/"):
            return
        if method.startswith("lithe/host/"):
            if self._state == "ready" and self.functions_version is not None:
                await self._host_notification(method, params)
            return
        handler = self._notification_handlers.get(method)
        if handler is None or self._state != "ready":
            logger.debug("notification %s ignored", method)
            return
        try:
            await handler(params)
        except Exception:
            logger.exception("notification handler for %s failed", method)
            await self._fact_quietly(
                log_fact("operationFailed", "notification", duration_ms=0, code="handler.exception")
            )

    async def _handle_request(self, method: str, params: JSONValue | None) -> JSONValue:
        if method == "initialize":
            return await self._initialize(params)
        if self._state in ("new", "initializing"):
            raise JSONRPCError(
                ErrorCode.SERVER_NOT_INITIALIZED,
                f"{method}: the backend is not initialized yet: send initialize and wait for"
                " its response before sending other requests",
            )
        if self._state == "shutdown":
            raise JSONRPCError(ErrorCode.INVALID_REQUEST, "The backend is shutting down")
        if method == "shutdown":
            return await self._shutdown()
        if method == "lithe/function/invoke":
            if self.functions_version is None:
                raise JSONRPCError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")
            return await self._invoke(params)
        handler = self._request_handlers.get(method)
        if handler is None:
            raise JSONRPCError(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")
        return await handler(params)

    async def _initialize(self, params: JSONValue | None) -> JSONValue:
        if self._state != "new":
            raise JSONRPCError(ErrorCode.INVALID_REQUEST, "initialize was already sent")
        negotiated = negotiate(params)
        if not self._answer_functions:
            # A build-only backend never answers litheFunctions, even when offered
            # (the plugin contract "Plugin functions": the host then sends it no calls).
            negotiated = Negotiated(None, negotiated.logging_version)
        if negotiated.logging_version is None:
            # The official SDKs require the litheLogging offer (the Node plugin SDK contract
            # "Logging"): refuse the host instead of running without typed diagnostics.
            raise JSONRPCError(
                ErrorCode.INVALID_PARAMS,
                "The host does not offer litheLogging version 0",
                {"code": "sdk.logging.required"},
            )
        self._state = "initializing"
        self.functions_version = negotiated.functions_version
        self.logging_version = negotiated.logging_version
        start = trio.current_time()
        try:
            for hook in self._initialize_hooks:
                await hook(params, negotiated)
        except Exception:
            logger.exception("initialize hook failed")
            self._state = "new"
            await self._fact_quietly(
                log_fact(
                    "operationFailed",
                    "initialize",
                    duration_ms=_monotonic_ms(start),
                    code="hook.exception",
                )
            )
            raise JSONRPCError(
                ErrorCode.INTERNAL_ERROR, "The backend failed to initialize"
            ) from None
        experimental: JSONObject = {"litheLogging": {"version": negotiated.logging_version}}
        if self.functions_version is not None:
            experimental["litheFunctions"] = {
                "version": self.functions_version,
                "functions": [{"id": function_id} for function_id in sorted(self._functions)],
            }
        capabilities: JSONObject = dict(self._server_capabilities)
        user_experimental = capabilities.get("experimental")
        merged: JSONObject = dict(user_experimental) if isinstance(user_experimental, dict) else {}
        merged.update(experimental)
        capabilities["experimental"] = merged
        self._state = "ready"
        return {
            "capabilities": capabilities,
            "serverInfo": {"name": self.name, "version": self.version},
        }

    async def _shutdown(self) -> JSONValue:
        self._state = "shutdown"
        for call in list(self._calls):
            if call.scope is not None:
                call.scope.cancel()
        with trio.move_on_after(_SHUTDOWN_WAIT_S):
            await self._calls_idle.wait()
        for hook in self._shutdown_hooks:
            try:
                await hook()
            except Exception:
                logger.exception("shutdown hook failed")
        return None

    # -- calls ----------------------------------------------------------------------------

    async def _invoke(self, params: JSONValue | None) -> JSONValue:
        """Run one ``lithe/function/invoke``: the function's value, or a JSONRPCError."""
        request = self._read_invoke(params)
        call = _Call(request.function_id, request.operation_id)
        operation = log_operation(request.function_id)
        start = trio.current_time()
        value, failure = await self._run_call(call, request)
        if failure is not None:
            await self._report_failure(call, operation, start, failure)
        return await self._report_result(call, operation, start, value)

    def _read_invoke(self, params: JSONValue | None) -> _InvokeRequest:
        """The invoke's parts, or the JSONRPCError that refuses it before anything runs."""
        if not isinstance(params, dict):
            raise JSONRPCError(ErrorCode.INVALID_PARAMS, "invoke params must be an object")
        function_id = params.get("functionID")
        operation_id = params.get("operationID")
        call_params = params.get("params", {})
        if not isinstance(function_id, str) or not isinstance(operation_id, str):
            raise JSONRPCError(ErrorCode.INVALID_PARAMS, "functionID and operationID are required")
        if call_params is None:
            call_params = {}
        if not isinstance(call_params, dict):
            raise JSONRPCError(
                ErrorCode.INVALID_PARAMS,
                "params must be a JSON object",
                {"code": "plugin.function.invalidParams"},
            )
        handler = self._functions.get(function_id)
        if handler is None:
            raise JSONRPCError(
                ErrorCode.METHOD_NOT_FOUND,
                f"Function not registered: {cut_utf8(function_id, 128)}",
                {"code": "plugin.function.unknown"},
            )
        return _InvokeRequest(
            function_id,
            operation_id,
            call_params,
            handler,
            _read_workspace_context(params.get("context")),
            _read_caller(params.get("caller")),
        )

    async def _run_call(
        self, call: _Call, request: _InvokeRequest
    ) -> tuple[JSONValue, BaseException | None]:
        """Run the handler in the call's own nursery: its value, or what it failed with."""
        self._calls.add(call)
        self._calls_idle = trio.Event()
        failure: BaseException | None = None
        value: JSONValue = None
        try:
            try:
                async with trio.open_nursery() as nursery:
                    call.scope = nursery.cancel_scope
                    context = CallContext(
                        self, call, nursery, request.workspace_context, request.caller
                    )
                    try:
                        value = await request.handler(request.params, context)
                    except Exception as exc:
                        failure = exc
                    # Work the handler left running ends with its call (the Node plugin SDK
                    # contract,
                    # "Work ends with its call").
                    nursery.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                _cancelled, rest = group.split(trio.Cancelled)
                if rest is None:
                    raise
                failure = rest
        finally:
            call.settled = True
            self._calls.discard(call)
            if not self._calls:
                self._calls_idle.set()
        return value, failure

    async def _report_result(
        self, call: _Call, operation: str, start: float, value: JSONValue
    ) -> JSONValue:
        """Answer ``value`` with its ``operationFinished`` fact, unless withdrawn or not JSON."""
        if call.revoked:
            raise JSONRPCError(
                ErrorCode.REQUEST_CANCELLED,
                "The function was withdrawn",
                {"code": "plugin.function.revoked"},
            )
        if self._state == "shutdown":
            raise JSONRPCError(ErrorCode.REQUEST_CANCELLED, "The backend is shutting down")
        try:
            encode_result(value)
        except ValueError:
            await self._send_fact(
                log_fact(
                    "operationFailed",
                    "result-encoding",
                    duration_ms=_monotonic_ms(start),
                    code="result.invalid",
                    operation_id=call.operation_id,
                )
            )
            raise JSONRPCError(_FUNCTION_FAILED_NUMBER, _GENERIC_FAILURE) from None
        if operation not in self._suppressed and call.function_id not in self._suppressed:
            await self._send_fact(
                log_fact(
                    "operationFinished",
                    operation,
                    duration_ms=_monotonic_ms(start),
                    operation_id=call.operation_id,
                )
            )
        return value

    async def _report_failure(
        self, call: _Call, operation: str, start: float, failure: BaseException
    ) -> NoReturn:
        """Send the ``operationFailed`` fact, then raise the failure's JSONRPCError."""
        failure = _presentable(failure)
        if isinstance(failure, PluginError):
            code = "plugin.error"
            message = cut_utf8(failure.message, ERROR_MESSAGE_BYTES)
            data: JSONValue = {"code": failure.code}
        else:
            # Anything else is reported generically: no path or traceback reaches the UI;
            # the traceback goes to stderr for the plugin's author.
            logger.error("function %s failed", call.function_id, exc_info=failure)
            code = "handler.exception"
            message = _GENERIC_FAILURE
            data = None
        # The fact precedes the answer on the same ordered write queue, so its operationId
        # still names an active call at the host.
        await self._send_fact(
            log_fact(
                "operationFailed",
                operation,
                duration_ms=_monotonic_ms(start),
                code=code,
                operation_id=call.operation_id,
            )
        )
        raise JSONRPCError(_FUNCTION_FAILED_NUMBER, message, data)

    async def _send_fact(self, fact: JSONObject) -> None:
        endpoint = self._endpoint
        if self.logging_version is None or endpoint is None or endpoint.closed:
            await trio.lowlevel.checkpoint()
            return
        with suppress(EndpointClosed):
            await endpoint.notify("lithe/log", fact)

    async def _fact_quietly(self, fact: JSONObject) -> None:
        with trio.move_on_after(_FINAL_WRITE_S):
            await self._send_fact(fact)


def create_backend(
    name: str,
    version: str,
    *,
    capabilities: JSONObject | None = None,
    functions: bool = True,
) -> Backend:
    """Create a plugin backend (the Node plugin SDK contract ``createBackend``).

    Args:
        name: Reported as ``serverInfo.name``.
        version: Reported as ``serverInfo.version``.
        capabilities: Standard LSP server capabilities; the SDK adds its negotiated
            ``experimental.litheFunctions`` and ``experimental.litheLogging``.
        functions: False makes a build-only backend: it never answers ``litheFunctions``,
            so the host refuses function calls for it (``plugin.function.unavailable``)
            and a ``lithe/function/invoke`` that still arrives is answered -32601.

    Returns:
        A :class:`Backend`; declare functions, then ``raise SystemExit(backend.listen())``.
    """
    return Backend(name, version, capabilities=capabilities, functions=functions)
