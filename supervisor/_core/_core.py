"""The Core: one root nursery, an operation registry and envelope dispatch.

Contract (the Core API contract "Envelope"): a request
``{id, operationId?, timeoutMilliseconds?, command, payload}`` runs one command inside its own
cancel scope, registered under its operation id. ``cancel(operation_id)`` cancels that scope;
a positive ``timeoutMilliseconds`` is the scope's deadline. Whatever happens, the request ends
exactly once: ``{id, ok: true, data}`` or ``{id, ok: false, error: {code, message}}`` with a
code from the catalog (``cancelled``, ``timed_out``, ``not_supported``, ...).

Everything the Core starts lives under its root nursery: the job lanes, and every operation's
processes (they are started inside the operation's scope, so cancelling the operation ends
them). Closing the Core cancels every operation, ends every lane, and only then returns.

:class:`CoreThread` runs a Core on its own thread for hosts that are not Trio programs; it is
the thread-safe synchronous facade of the reference C ABI (``execute_json``,
``cancel_operation``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
from concurrent.futures import Future, InvalidStateError
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Final, TypeAlias, final

import trio

from protocol import (
    MAX_ECHO_BYTES,
    MAX_MILLISECONDS,
    CoreError,
    EnvelopeError,
    EnvelopeRequest,
    check_request_values,
    envelope_error,
    envelope_ok,
    parse_envelope,
)

from .. import _api
from .._boundary import (
    cut_utf8,
    fault_point,
    internal_message,
    log_failure,
    raise_single,
    single_exception,
    split_failure,
)
from .._client._caller import CommandCaller
from .._handles import NoPublicConstructor
from .._process._reaper import reap_adopted_children, reap_orphans
from .._session._events import DEFAULT_EVENT_BUDGET_BYTES, DEFAULT_MAX_EVENTS, EventBudget
from .._session._operations import run_operation
from .._session._order import Sequencer, _current_turn, hold_turn
from .._version import __version__
from ._builtins import JobService, open_job_service, open_process_service
from ._context import _current_operation_id, current_operation_id
from ._registry import KINDS, LazyService
from ._service import OwnedResources, ServiceContext
from ._subscription import EVENT_SOURCES, EventSubscription

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from contextlib import AbstractAsyncContextManager
    from pathlib import Path
    from types import TracebackType

    from typing_extensions import Unpack

    from lanes import Lanes
    from protocol import JSONObject, JSONValue

    from .._client._dap import DapClient, DebugAdapterOptions
    from .._client._lsp import LanguageServerOptions, LspClient
    from .._client._sync import Portal, SyncDapClient, SyncLspClient
    from .._session._events import EventQueue
    from .._session._order import Target, Turn
    from ._policy import HostPolicy
    from ._service import CommandHandler, Service, ServiceFactory

__all__ = (
    "DEFAULT_SERVICES",
    "PROTOCOL_VERSION",
    "Core",
    "CoreThread",
    "SubmittedOperation",
    "current_operation_id",
    "open_core",
)

logger = logging.getLogger("supervisor.core")


#: ``core.ping``'s ``protocolVersion``.
PROTOCOL_VERSION: Final = 1
#: The services every Core opens, in order (closed in reverse order): ``process.run`` and the
#: job lanes at once, each session kind (:data:`~supervisor._core._registry.KINDS`: ``lsp``,
#: ``terminal``, ``debug``, ``workspace``, ``run``) when first used.
DEFAULT_SERVICES: Final[tuple[ServiceFactory, ...]] = (
    open_process_service,
    open_job_service,
    *KINDS,
)


def _version() -> str:
    return __version__


class _Unopened:
    """A service registered by name (:class:`LazyService`) that no one has needed yet."""

    __slots__ = ("factory", "lock")

    def __init__(self, factory: LazyService) -> None:
        self.factory = factory
        #: Held while it opens: the callers that need it at once wait for the one opening.
        self.lock = trio.Lock()


class _ServicesOf:
    """The Core's services by name, as its services see them (``ServiceContext.lookup``)."""

    __slots__ = ("_core",)

    def __init__(self, core: Core) -> None:
        self._core = core

    async def service(self, name: str) -> Service | None:
        return await self._core._service(name)

    def opened_service(self, name: str) -> Service | None:
        return self._core._named.get(name)


class _Operation:
    """One running command: its scope and, once finished, its data or its error."""

    __slots__ = ("cancel_requested", "done", "outcome", "scope")

    def __init__(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        self.cancel_requested = False
        self.done = False
        self.outcome: JSONValue | CoreError = None

    def finish(self, outcome: JSONValue | CoreError) -> None:
        # The first outcome stays (run_operation's rule: finished exactly once).
        if not self.done:
            self.done = True
            self.outcome = outcome


#: An envelope parsed where it arrived, with its turn (or the error that refused it).
_Arrived: TypeAlias = "tuple[EnvelopeRequest | EnvelopeError, Turn | None]"


@final
class SubmittedOperation(metaclass=NoPublicConstructor):
    """A command started by :meth:`Core.submit`, whose answer is awaited later."""

    __slots__ = ("_data", "_done", "_error")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._data: JSONValue = None
        self._error: CoreError | None = None

    def _finish(self, data: JSONValue, error: CoreError | None) -> None:
        self._data, self._error = data, error
        self._done.set()

    @property
    def done(self) -> bool:
        """Whether the command has ended (its answer is there)."""
        return self._done.is_set()

    async def result(self) -> JSONValue:
        """Wait for the command's end and return its data.

        Raises:
            CoreError: the command's error, as :meth:`Core.call` raises it (``cancelled``
                when the Core closed first).

        **Cancellation:** cancellable; the command goes on (cancel it by its operation id).
        """
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._data


@final
class Core(CommandCaller):
    """A running Core. Made by :func:`open_core`; it has no public constructor.

    Besides :meth:`call`, one typed helper per command (``await core.process_run(argv=[...])``
    returns a ``ProcessResult``; docs/commands.md lists them all).
    """

    def __init__(
        self,
        services: Sequence[Service],
        nursery: trio.Nursery | None = None,
        *,
        context: ServiceContext | None = None,
    ) -> None:
        #: The open services, in the order they opened.
        self._services: list[Service] = []
        #: Where :meth:`submit` runs operations and services opened on first use run (the
        #: Core's root nursery), and what those services are given.
        self._nursery = nursery
        self._context = context
        #: The open services by name (the prefix of their commands).
        self._named: dict[str, Service] = {}
        #: The services registered by name and not opened yet (:meth:`_register`).
        self._unopened: dict[str, _Unopened] = {}
        #: Each service opened on first use, while it runs: (stop it, it stopped).
        self._held: list[tuple[trio.Event, trio.Event]] = []
        #: The line of each target (docs/architecture.md "The order rule").
        self._sequencer = Sequencer()
        self._operations: dict[str, _Operation] = {}
        self._anonymous = itertools.count(1)
        self._closing = False
        #: Made by _close while operations run; the last one to end sets it. (Not one
        #: event per call: a keystroke's command would pay for making and setting it.)
        self._idle: trio.Event | None = None
        self._commands: dict[str, CommandHandler] = {
            "core.ping": self._ping,
            "core.sessions": self._sessions,
        }
        #: The bytes all event queues of this Core keep together (statistics: ``used``,
        #: ``peak``); None for a Core made without one.
        self.event_budget: EventBudget | None = None
        for service in services:
            self._adopt(service)

    @property
    def commands(self) -> tuple[str, ...]:
        """The command names this Core answers, sorted (a session kind's before it opens)."""
        declared = [name for name in _api.COMMANDS if name.partition(".")[0] in self._unopened]
        return tuple(sorted({*self._commands, *declared}))

    # -- services ------------------------------------------------------------------------

    def _adopt(self, service: Service) -> None:
        """Answer ``service``'s commands from now on."""
        commands = service.commands()
        for name in commands:
            if name in self._commands:
                raise RuntimeError(f"two services define the command {name!r}")
        self._commands.update(commands)
        self._services.append(service)
        for name in commands:
            self._named.setdefault(name.partition(".")[0], service)

    def _register(self, factory: LazyService) -> None:
        """Open ``factory``'s service when a command of it first arrives or a service asks
        for it by name (docs/architecture.md "Layers")."""
        if factory.name in self._named or factory.name in self._unopened:
            raise RuntimeError(f"two services are named {factory.name!r}")
        for name in _api.COMMANDS:
            if name.partition(".")[0] == factory.name and name in self._commands:
                raise RuntimeError(f"two services define the command {name!r}")
        self._unopened[factory.name] = _Unopened(factory)

    async def _service(self, name: str) -> Service | None:
        """The service ``name``, opened now if it is registered and not open yet."""
        service = self._named.get(name)
        if service is not None:
            return service
        unopened = self._unopened.get(name)
        if unopened is None:
            return None
        async with unopened.lock:
            service = self._named.get(name)
            if service is not None:
                return service  # opened while this task waited for the lock
            if self._closing:
                raise _closed_error()
            if self._nursery is None or self._context is None:
                raise RuntimeError("this Core opens no services (no nursery)")
            opened: Service = await self._nursery.start(self._hold, unopened.factory)
            del self._unopened[name]
            self._adopt(opened)
            return opened

    async def _hold(self, factory: LazyService, *, task_status: trio.TaskStatus[Service]) -> None:
        """Run one service opened on first use, until :meth:`_release`."""
        # Started from the operation that first needed the service: what the service runs
        # belongs to no operation and to no target's line.
        _current_operation_id.set(None)
        _current_turn.set(None)
        stop, stopped = trio.Event(), trio.Event()
        assert self._context is not None
        try:
            async with factory(self._context) as service:
                self._held.append((stop, stopped))
                task_status.started(service)
                await stop.wait()
        finally:
            stopped.set()

    async def _release(self) -> None:
        """Close the services opened on first use, in the reverse order of their opening.

        After :meth:`_close`, which ended what they run; shielded by the caller.
        """
        for stop, stopped in reversed(self._held):
            stop.set()
            await stopped.wait()

    async def _owner_ended(self, owner: str) -> None:
        # A plugin session ended: what other services keep for it goes too.
        with trio.CancelScope(shield=True):
            for service in list(self._services):
                if isinstance(service, OwnedResources):
                    await service.dispose_owner(owner)

    def _job_service(self) -> JobService:
        for service in self._services:
            if isinstance(service, JobService):
                return service
        raise RuntimeError("this Core has no job service")

    @property
    def lanes(self) -> Lanes:
        """The job lanes of this Core."""
        return self._job_service().lanes

    @property
    def job_events(self) -> EventQueue:
        """The queue of ``job.started`` / ``job.output`` / ``job.finished`` events.

        ``job.waitEvents`` and ``job.pollEvents`` drain it; ``supervisor serve`` forwards
        its events as notifications instead.
        """
        return self._job_service().events

    def active_operations(self) -> tuple[str, ...]:
        """The operation ids that are running now."""
        return tuple(self._operations)

    # -- session clients -----------------------------------------------------------------

    def language_server(
        self, argv: Sequence[str], *, root_uri: str, **options: Unpack[LanguageServerOptions]
    ) -> AbstractAsyncContextManager[LspClient]:
        """Start a language server: ``async with core.language_server(argv, root_uri=...)``.

        The block is entered once the server is ready (its handshake done) and gets an
        :class:`~supervisor.LspClient` (requests with typed results, documents,
        notifications, diagnostics); leaving it stops the server. See
        :func:`supervisor.open_lsp_client` for the options and errors
        (:class:`~supervisor.StartFailed` when it does not get ready).
        """
        from .._client._caller import SessionBlock
        from .._client._lsp import open_lsp_client

        return SessionBlock(
            open_lsp_client(self, argv, root_uri=root_uri, **options), "language_server"
        )

    def debug_adapter(
        self, argv: Sequence[str], **options: Unpack[DebugAdapterOptions]
    ) -> AbstractAsyncContextManager[DapClient]:
        """Start a debug adapter: ``async with core.debug_adapter(argv) as debug``.

        The block is entered once the adapter answered ``initialize`` and gets a
        :class:`~supervisor.DapClient` (``request``, ``wait_for_event``, ``wait_stopped``,
        ...); leaving it disconnects. See :func:`supervisor.open_dap_client` for the options
        and errors.
        """
        from .._client._caller import SessionBlock
        from .._client._dap import open_dap_client

        return SessionBlock(open_dap_client(self, argv, **options), "debug_adapter")

    # -- dispatch ------------------------------------------------------------------------

    def arrive(self, command: str, payload: object, operation_id: str | None = None) -> Turn | None:
        """Give a command its place in its target's line, where it arrives.

        docs/architecture.md "The order rule": commands on one target (a terminal, a
        language-server or debug session, a plugin backend, the job lanes; see the order
        column of docs/commands.md) take effect in the order they arrived. Call this
        synchronously where the command arrives -- the reader of a connection, the
        submitting thread's callback, the submitting task -- and pass the turn to
        :meth:`call`. Cheap: two dict operations; nothing when the command is ordered with
        nothing.

        Args:
            command: The command name.
            payload: Its payload, not decoded yet.
            operation_id: The id it will run under (:meth:`call`'s): a *named* command
                (:attr:`supervisor._api.Ordered.named`) whose payload has no
                ``operationId`` is known to its target by it, so its target's cancel finds
                it while it waits (:meth:`_withdraw`).

        Returns:
            The turn, or None for a command ordered with nothing (or whose payload names no
            target: its decoding refuses it before any effect).
        """
        target = _api.target_of(command, payload)
        if target is None:
            return None
        order = _api.COMMANDS[command].order
        assert order is not None  # it has a target
        turn = self._sequencer.arrive(target, ending=order.ending)
        if order.named and isinstance(payload, dict):
            named = payload.get("operationId")
            turn.name = named if isinstance(named, str) and named else operation_id
            turn.about = (command, payload)
        return turn

    def _withdraw(self, target: Target, name: str, why: str) -> bool:
        """End the operation on ``target`` named ``name`` before it takes its turn.

        What a target's own cancel (``lsp.cancelOperation``, ``debug.cancelOperation``)
        falls back on when its session knows no such operation yet: one still in line
        (:meth:`supervisor._session._order.Sequencer.withdraw`). Its handler, when its task
        gets there, ends it as its kind ends a cancelled operation, without its effect. A
        payload its declaration refuses is not withdrawn (it ends with that refusal).

        Args:
            target: The target, e.g. ``("lsp", "lsp-1")``.
            name: The operation's id as its target knows it (:meth:`arrive`).
            why: Its kind's reason (``"cancelled"``, ``"timedOut"``).

        Returns:
            True when such an operation waited and was withdrawn; False otherwise (nothing
            changed).
        """
        turn = self._sequencer.waiting_turn(target, name)
        if turn is None or not isinstance(turn.about, tuple):
            return False
        command, payload = turn.about
        try:
            check_request_values(payload)
            _api.validate_payload(command, payload)
        except CoreError:
            return False
        return turn.withdraw(why)

    async def call(
        self,
        command: str,
        payload: JSONObject,
        *,
        operation_id: str | None = None,
        timeout_ms: int | None = None,
        turn: Turn | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> JSONValue:
        """Run one command in its own cancel scope and return its data.

        Commands on one target take effect in the order they arrived (docs/architecture.md
        "The order rule"): awaited one after another from a task, they are in order by
        construction; to pipeline them from one task without waiting for answers, start each
        with ``await nursery.start(core.call, command, payload)``, which returns once the
        command has its place in its target's line (or use :meth:`submit`).

        Args:
            command: The command name, e.g. ``"process.run"``.
            payload: Its payload (a JSON object).
            operation_id: The id :meth:`cancel` knows it by; None makes it uncancellable by id.
            timeout_ms: A deadline in milliseconds from now, at most
                :data:`protocol.MAX_MILLISECONDS`; None or 0 for none.
            turn: Its place in line, when the caller took it where the command arrived
                (:meth:`arrive`); None: the command takes its place now.
            task_status: For ``nursery.start``: started once the command has its place in
                line.

        Returns:
            The command's data (JSON).

        Raises:
            CoreError: ``not_supported`` for an unknown command; ``invalid_request`` for a bad
                payload (one its declaration in :mod:`supervisor._api` does not decode, with
                ``details.field`` the path; a non-finite number or a lone surrogate anywhere
                in it included) or
                an operation id already active; ``cancelled`` after :meth:`cancel` or while
                the Core closes; ``timed_out`` after the deadline; ``internal`` when the
                command failed on something it did not foresee (the request is a supervision
                boundary: the traceback is logged, the message is ``"<Type>: <message>"``,
                bounded, and the Core goes on); or the command's own error. Every message
                is at most 1024 UTF-8 bytes.

        **Cancellation:** cancelling the caller cancels the command (its processes end) and
        raises :class:`trio.Cancelled` as usual; a command cancelled while it waits for its
        turn ends without its effect.
        """
        if turn is None:
            turn = self.arrive(command, payload, operation_id)
        task_status.started()
        try:
            return await self._call(command, payload, operation_id, timeout_ms, turn)
        finally:
            if turn is not None:
                turn.release()

    async def _call(
        self,
        command: str,
        payload: JSONObject,
        operation_id: str | None,
        timeout_ms: int | None,
        turn: Turn | None,
    ) -> JSONValue:
        handler = self._commands.get(command)
        if handler is None and command.partition(".")[0] not in self._unopened:
            raise _unknown(command)
        if self._closing:
            raise CoreError("cancelled", "The supervisor is shutting down")
        if operation_id is not None and operation_id in self._operations:
            raise CoreError(
                "invalid_request",
                f"Operation {cut_utf8(operation_id, MAX_ECHO_BYTES)!r} is already active",
            )
        if timeout_ms is not None and not 0 <= timeout_ms <= MAX_MILLISECONDS:
            raise CoreError(
                "invalid_request",
                f"timeoutMilliseconds must be from 0 to {MAX_MILLISECONDS}",
                {"field": "timeoutMilliseconds"},
            )
        operation = _Operation(trio.CancelScope())
        if timeout_ms:
            operation.scope.deadline = trio.current_time() + timeout_ms / 1000
        # An operation without an id still belongs to the registry, so closing the Core
        # cancels it; its private key can't collide with a caller's id.
        key = operation_id if operation_id is not None else f"\0anonymous-{next(self._anonymous)}"
        self._operations[key] = operation

        async def step() -> None:
            nonlocal handler
            check_request_values(payload)
            declared = _api.COMMANDS.get(command)
            decoded: object = payload
            if declared is not None:
                # The payload's declaration is its validation (one error shape).
                decoded = _api.decode_payload(command, declared.payload, payload)
            if handler is None:
                # A session kind not opened yet: now (docs/architecture.md "Layers").
                handler = await self._open_for(command)
            fault_point("request.dispatch")
            if turn is not None:
                await self._wait_turn(turn)
            if getattr(handler, _api.TAKES_DECLARATION, False):
                data = await handler(decoded)  # type: ignore[arg-type]
            else:
                data = await handler(payload)
            if _api.CHECK_RESULTS:
                _api.check_result(command, data)
            operation.finish(data)

        def caught() -> CoreError:
            # Only the operation's own scope: Core.cancel, the Core's close, or the deadline.
            if operation.cancel_requested:
                return _closed_error() if self._closing else _cancelled_error()
            return CoreError("timed_out", f"The operation exceeded its deadline of {timeout_ms} ms")

        def forget() -> None:
            del self._operations[key]
            if not self._operations and self._idle is not None:
                self._idle.set()

        token = _current_operation_id.set(operation_id)
        turn_token = hold_turn(turn)
        try:
            await run_operation(
                operation,
                step,
                scope=operation.scope,
                what=f"request {cut_utf8(command, MAX_ECHO_BYTES)!r}",
                finish=operation.finish,
                forget=forget,
                answer=_answer,
                internal=lambda exc: CoreError("internal", internal_message(exc)),
                caught=caught,
                ended=_cancelled_error,
            )
        finally:
            _current_turn.reset(turn_token)
            _current_operation_id.reset(token)
        if isinstance(operation.outcome, CoreError):
            raise operation.outcome
        return operation.outcome

    async def _open_for(self, command: str) -> CommandHandler:
        await self._service(command.partition(".")[0])
        handler = self._commands.get(command)
        if handler is None:
            raise _unknown(command)
        return handler

    async def _wait_turn(self, turn: Turn) -> None:
        """Wait until the operations ahead of this one on its target took their effect.

        A command that ends its target (:attr:`supervisor._api.Ordered.ending`) waits for an
        ending command ahead of it (a dispose behind a close: the close's stop ladder bounds
        it), but for any other operation at most :data:`supervisor._api.ENDING_TURN_WAIT_MS`
        at a time, then takes its effect anyway: a target stuck on a blocked write (a PTY
        whose program reads nothing, a server that does not read) can always be ended, and
        the operations still in line then find it ended.
        """
        if not turn.ending:
            await turn.wait()
            return
        while not turn.is_head:
            with trio.move_on_after(_api.ENDING_TURN_WAIT_MS / 1000):
                await turn.wait()
                return
            head = self._sequencer.head(turn.target)
            if head is None or not head.ending:
                return

    def submit(
        self,
        command: str,
        payload: JSONObject,
        *,
        operation_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> SubmittedOperation:
        """Start one command now, without waiting for it; its answer is awaited later.

        The command takes its place in its target's line at once, synchronously, so commands
        submitted one after another from one task take effect in that order
        (docs/architecture.md "The order rule"); they run in the Core's own nursery and end
        with the Core.

        Returns:
            A :class:`SubmittedOperation`; ``await op.result()`` gives the data or raises the
            command's :class:`CoreError`, as :meth:`call` would.

        Raises:
            RuntimeError: The Core has no nursery to run it in (a Core made outside
                :func:`open_core`).
        """
        if self._nursery is None:
            raise RuntimeError("this Core runs no operations of its own (no nursery)")
        submitted = SubmittedOperation._create()
        turn = self.arrive(command, payload, operation_id)
        self._nursery.start_soon(
            self._run_submitted, submitted, command, payload, operation_id, timeout_ms, turn
        )
        return submitted

    async def _run_submitted(
        self,
        submitted: SubmittedOperation,
        command: str,
        payload: JSONObject,
        operation_id: str | None,
        timeout_ms: int | None,
        turn: Turn | None,
    ) -> None:
        try:
            data = await self.call(
                command, payload, operation_id=operation_id, timeout_ms=timeout_ms, turn=turn
            )
        except CoreError as exc:
            submitted._finish(None, exc)
        except trio.Cancelled:
            submitted._finish(None, CoreError("cancelled", "The supervisor is shutting down"))
            raise
        except Exception as exc:
            contained = _contain(command, exc)
            assert isinstance(contained, CoreError)  # an Exception is always contained
            submitted._finish(None, contained)
        else:
            submitted._finish(data, None)

    async def execute(
        self, request: str | bytes | JSONObject, *, arrived: _Arrived | None = None
    ) -> JSONObject:
        """Run one envelope request and return its envelope response (never raises for it).

        Args:
            request: The envelope as JSON text or a decoded object (the Core API contract
            "Envelope").

        Returns:
            ``{id, ok: true, data}`` or ``{id, ok: false, error: {code, message, details?}}``.
            A request that can not be read is ``invalid_request`` with the cause ``supervisor
            serve`` names (:func:`protocol.parse_envelope`).

        **Cancellation:** as :meth:`call`.
        """
        if arrived is None:
            arrived = self.arrive_envelope(request)
        envelope, turn = arrived
        if isinstance(envelope, EnvelopeError):
            return envelope_error(envelope.request_id, envelope)
        try:
            data = await self.call(
                envelope.command,
                envelope.payload,
                operation_id=envelope.operation_id,
                timeout_ms=envelope.timeout_ms,
                turn=turn,
            )
        except Exception as exc:
            # A bug of ours around the command (its own failures are contained by call)
            # goes through the same boundary: the request still ends once, as `internal`.
            contained = _contain(envelope.command, exc)
            assert isinstance(contained, CoreError)  # an Exception is always contained
            return envelope_error(envelope.id, contained)
        return envelope_ok(envelope.id, data)

    def arrive_envelope(self, request: str | bytes | JSONObject) -> _Arrived:
        """Parse an envelope request and give its command its place in line (:meth:`arrive`).

        For :meth:`execute` of a request parsed where it arrived (``CoreThread``'s
        submitting callback).
        """
        try:
            envelope = parse_envelope(request)
        except EnvelopeError as exc:
            return exc, None
        return envelope, self.arrive(envelope.command, envelope.payload, envelope.operation_id)

    def cancel(self, operation_id: str) -> bool:
        """Cancel a running operation.

        Returns:
            True when the operation was active (it will end ``cancelled``), False otherwise.
        """
        operation = self._operations.get(operation_id)
        if operation is None:
            return False
        operation.cancel_requested = True
        operation.scope.cancel()
        return True

    async def _close(self) -> None:
        """Refuse new operations, then end every operation and every service at once.

        Running operations and services are ended concurrently, so the whole close costs one
        TERM grace, not one per kind of work. Shielded by the caller.
        """
        self._closing = True
        for operation in list(self._operations.values()):
            operation.cancel_requested = True
            operation.scope.cancel()
        async with trio.open_nursery() as nursery:
            if self._operations:
                self._idle = trio.Event()
                nursery.start_soon(self._idle.wait)
            for service in self._services:
                nursery.start_soon(service.aclose)

    # -- commands ------------------------------------------------------------------------

    async def _ping(self, payload: JSONObject) -> JSONValue:
        return {"protocolVersion": PROTOCOL_VERSION, "version": _version()}

    async def _sessions(self, payload: JSONObject) -> JSONValue:
        """``core.sessions``: every listing command's answer, each item with its uptime (a
        service not opened yet has nothing to list, and is not opened for it)."""
        from ._service import call_command

        commands = self._commands

        async def listed(command: str) -> list[JSONValue]:
            if command not in commands:
                return []
            items = await call_command(commands, command, {})
            assert isinstance(items, list)
            return [_with_uptime(item) for item in items]

        servers: list[JSONValue] = []
        for service in self._services:
            if "lsp.snapshot" not in service.commands():
                continue
            for session_id in getattr(service, "sessions", {}):
                snapshot = await call_command(commands, "lsp.snapshot", {"sessionId": session_id})
                assert isinstance(snapshot, dict)
                kept = ("sessionId", "serverId", "state", "generation", "pid", "documents")
                servers.append(_with_uptime({k: snapshot[k] for k in kept if k in snapshot}))
        return {
            "pid": os.getpid(),
            "uptimeMs": _uptime_ms(os.getpid()),
            "languageServers": servers,
            "debugSessions": await listed("debug.listSessions"),
            "terminals": await listed("terminal.list"),
            "jobs": await listed("job.list"),
            "runs": await listed("run.list"),
        }


def _uptime_ms(pid: object) -> int | None:
    """How long process ``pid`` has run, in milliseconds; None when unknown (or no pid)."""
    if not isinstance(pid, int) or isinstance(pid, bool):
        return None
    from .._process._procfs import read_stat

    stat = read_stat(pid)
    if stat is None or not stat.starttime:
        return None
    try:
        with open("/proc/uptime") as f:
            since_boot_s = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return max(0, round((since_boot_s - stat.starttime / ticks) * 1000))


def _with_uptime(item: JSONValue) -> JSONValue:
    if not isinstance(item, dict):
        return item
    pid = item.get("pid", item.get("adapterPid"))
    return {**item, "uptimeMs": _uptime_ms(pid)}


def _unknown(command: str) -> CoreError:
    return CoreError("not_supported", f"Unknown command: {cut_utf8(command, MAX_ECHO_BYTES)}")


def _closed_error() -> CoreError:
    return CoreError("cancelled", "The supervisor is shutting down")


def _request_id(arrived: _Arrived) -> str | int | None:
    envelope = arrived[0]
    return envelope.request_id if isinstance(envelope, EnvelopeError) else envelope.id


def _settle(future: Future[str], text: str) -> None:
    # A future is settled once: the command's own answer, or the close's.
    if not future.done():
        with contextlib.suppress(InvalidStateError):
            future.set_result(text)


def _dumps(response: JSONObject) -> str:
    return json.dumps(response, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _answer(failure: Exception) -> CoreError | None:
    """The command's own answer a failure of its request stands for, or None.

    A :class:`CoreError` (also alone in a group: raised in a nursery of the command) is the
    command's answer. Anything else is a failure we did not foresee, which the operation
    runner logs and ends ``internal`` (the request is a supervision boundary).
    """
    if isinstance(failure, CoreError):
        return failure
    if not isinstance(failure, ExceptionGroup):
        return None
    errors, others = failure.split(CoreError)
    if errors is None or others is not None:
        return None
    first: BaseException = errors.exceptions[0]
    while isinstance(first, ExceptionGroup):
        first = first.exceptions[0]
    assert isinstance(first, CoreError)
    return first


def _contain(command: str, exc: BaseException) -> BaseException:
    """What a failure becomes at a boundary of the Core's edge (outside an operation).

    The command's own answer (:func:`_answer`) stays as it is. Any other
    :class:`Exception` is logged with its traceback and becomes
    ``CoreError("internal", <type>: <message>)``, bounded, without the traceback.
    Cancellation, ``KeyboardInterrupt`` and ``SystemExit`` are returned as they are (with the
    ``internal`` error beside them when a failure came in the same group), so they propagate
    as Trio intends.
    """
    failure, rest = split_failure(exc)
    if failure is None:
        return exc
    error = _answer(failure)
    if error is None:
        log_failure(f"request {cut_utf8(command, MAX_ECHO_BYTES)!r}", failure)
        error = CoreError("internal", internal_message(failure))
    if rest is None:
        return error
    return BaseExceptionGroup("a request failed while it was cancelled", [error, rest])


def _cancelled_error() -> CoreError:
    return CoreError("cancelled", "The operation was cancelled")


@asynccontextmanager
async def open_core(
    *,
    trusted: bool = True,
    max_events: int = DEFAULT_MAX_EVENTS,
    services: Sequence[ServiceFactory] = DEFAULT_SERVICES,
    host_policy: HostPolicy | None = None,
    plugin_state_root: Path | None = None,
    event_budget_bytes: int = DEFAULT_EVENT_BUDGET_BYTES,
) -> AsyncIterator[Core]:
    """Start a Core and close it when the block ends.

    Args:
        trusted: False declares the workspace untrusted: ``build`` and ``test`` jobs end
            ``denied`` without starting (ide-backend-protocol ``initialize`` option).
        max_events: The bound of each event queue (job events, session events).
        services: The services to open (:data:`DEFAULT_SERVICES`).
        host_policy: The embedding host's decisions for plugin backends' host requests
            (:class:`~supervisor._plugin._host.HostPolicy`); None: allow all.
        plugin_state_root: Where plugin state directories and the host secret live; None:
            ``$XDG_STATE_HOME/trio-process-supervisor/plugins``.
        event_budget_bytes: The bytes every event queue of the Core keeps together (64 MiB;
            past it the queue that puts drops its oldest informational events, counted).

    Yields:
        The running :class:`Core`.

    Raises:
        BaseException: An exception raised in the block leaves it as itself, not wrapped in
            the exception groups of the nurseries it crossed (Trio's strict exception groups
            stay on inside); a group leaves only when it holds two or more.

    **Cancellation:** leaving the block, normally, by error or by cancellation, cancels every
    operation, ends every lane and waits (shielded, bounded by each process tree's own bounds)
    until every process the Core started is gone.
    """
    try:
        async with _open_core(
            trusted=trusted,
            max_events=max_events,
            services=services,
            host_policy=host_policy,
            plugin_state_root=plugin_state_root,
            event_budget_bytes=event_budget_bytes,
        ) as core:
            yield core
    except BaseExceptionGroup as group:
        raise_single(group)


@asynccontextmanager
async def _open_core(
    *,
    trusted: bool,
    max_events: int,
    services: Sequence[ServiceFactory],
    host_policy: HostPolicy | None,
    plugin_state_root: Path | None,
    event_budget_bytes: int = DEFAULT_EVENT_BUDGET_BYTES,
) -> AsyncIterator[Core]:
    # Invariant 8: processes left by supervisors that died (SIGKILL, crash) end at our start.
    reap_orphans()
    async with trio.open_nursery() as nursery:
        try:
            async with AsyncExitStack() as stack:
                core = Core((), nursery)
                context = ServiceContext(
                    nursery=nursery,
                    trusted=trusted,
                    max_events=max_events,
                    owner_ended=core._owner_ended,
                    host_policy=host_policy,
                    plugin_state_root=plugin_state_root,
                    lookup=_ServicesOf(core),
                    event_budget=EventBudget(event_budget_bytes),
                    withdraw=core._withdraw,
                )
                core._context = context
                core.event_budget = context.event_budget
                for factory in services:
                    if isinstance(factory, LazyService):
                        core._register(factory)
                    else:
                        core._adopt(await stack.enter_async_context(factory(context)))
                try:
                    yield core
                finally:
                    with trio.CancelScope(shield=True):
                        await core._close()
                        await core._release()
                # Leaving the stack closes the services in reverse order; each shields its
                # own cleanup (a scope must be exited by the scope that entered it, so the
                # stack can't be closed from inside a shield of ours).
        finally:
            nursery.cancel_scope.cancel()
            # Orphans that were re-parented to us (we are a child subreaper) and exited
            # after their tree was swept would otherwise stay zombies.
            reap_adopted_children()


@final
class CoreThread:
    """A Core on its own thread, for hosts that are not Trio programs.

    Use it as ``with CoreThread() as core:``; ``execute_json``, ``submit_json`` and
    ``cancel_operation`` may be called from any thread, concurrently. Leaving the block ends
    everything the Core started before it returns.

    Order (docs/architecture.md "The order rule"): commands on one target take effect in the
    order one thread made its calls. ``execute_json`` blocks until its answer, so a thread's
    calls are in order by construction; ``submit_json`` returns at once, having given the
    command its place in line, so a thread can pipeline keystrokes or document changes
    without waiting for each answer.

    Args:
        trusted: As for :func:`open_core`.
    """

    def __init__(self, *, trusted: bool = True) -> None:
        self._trusted = trusted
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._core: Core | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._error: BaseException | None = None
        #: Futures of submit_json whose command has not ended: failed at close if the Core
        #: ended first (a callback queued after the run's last pass never runs).
        self._submitted: set[Future[str]] = set()
        self._submitted_lock = threading.Lock()
        #: Runs the session clients' work on the Core's loop (``language_server``, ...).
        self._portal: Portal | None = None

    def __enter__(self) -> CoreThread:
        if self._thread is not None:
            raise RuntimeError("a CoreThread can be entered only once")
        self._thread = threading.Thread(target=self._run, name="supervisor-core", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError("the Core failed to start") from self._error
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """End everything the Core started and stop its thread; idempotent."""
        if self._thread is None:
            return
        if self._token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()
        self._token = None

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self._error = single_exception(exc)
            logger.exception("the Core thread failed")
        finally:
            self._ready.set()
            if self._portal is not None:
                self._portal.abandon()
            with self._submitted_lock:
                left, self._submitted = self._submitted, set()
            for future in left:
                _settle(future, _dumps(envelope_error(None, _closed_error())))

    async def _main(self) -> None:
        self._stop = trio.Event()
        async with open_core(trusted=self._trusted) as core:
            self._core = core
            self._token = trio.lowlevel.current_trio_token()
            # The session clients live in this nursery; it ends (each client stopping its
            # session, bounded) before the Core closes.
            async with trio.open_nursery() as clients:
                from .._client._sync import Portal

                assert self._thread is not None
                self._portal = Portal._create(self._token, clients, self._thread)
                self._ready.set()
                await self._stop.wait()
                clients.cancel_scope.cancel()

    def _require(self) -> tuple[Core, trio.lowlevel.TrioToken]:
        if self._core is None or self._token is None:
            raise RuntimeError("the CoreThread is not running")
        return self._core, self._token

    def execute_json(self, request: str) -> str:
        """Run one envelope request given as JSON text; return the JSON response text.

        Blocks the calling thread until the request ends (it always ends exactly once). Data
        that JSON can not carry (a non-finite number a peer sent) ends the request
        ``internal`` rather than writing invalid JSON. Text that can not be read (a ``NaN``
        token, nesting too deep...) is ``invalid_request`` with the cause ``supervisor
        serve`` answers it with and its JSON-RPC code in ``details.jsonrpcCode`` (-32700, or
        -32600 under the request's id when that was read).

        Raises:
            RuntimeError: The CoreThread is not running.
        """
        core, token = self._require()
        try:
            response = trio.from_thread.run(core.execute, request, trio_token=token)
        except trio.RunFinishedError as exc:
            raise RuntimeError("the CoreThread is not running") from exc
        try:
            return _dumps(response)
        except (TypeError, ValueError) as exc:
            request_id = response.get("id")
            contained = _contain("execute_json", exc)
            assert isinstance(contained, CoreError)  # an Exception is always contained
            return _dumps(
                envelope_error(request_id if isinstance(request_id, str | int) else None, contained)
            )

    def submit_json(self, request: str) -> Future[str]:
        """Start one envelope request given as JSON text; return a future of its response.

        Returns at once: the command has its place in its target's line before this returns
        (the submitting thread's order is kept: :class:`CoreThread`'s docstring), and the
        future gets the JSON response text -- exactly one, as ``execute_json`` returns it --
        when the command ends. If the CoreThread closes first, the response is the
        ``cancelled`` error.

        Raises:
            RuntimeError: The CoreThread is not running.
        """
        core, token = self._require()
        future: Future[str] = Future()
        with self._submitted_lock:
            self._submitted.add(future)
        try:
            # run_sync_soon callbacks run in the order they were queued (FIFO), so the
            # commands of one thread arrive in the order it submitted them.
            token.run_sync_soon(self._arrive, core, request, future)
        except trio.RunFinishedError as exc:
            with self._submitted_lock:
                self._submitted.discard(future)
            raise RuntimeError("the CoreThread is not running") from exc
        return future

    def _arrive(self, core: Core, request: str, future: Future[str]) -> None:
        arrived = core.arrive_envelope(request)
        nursery = core._nursery
        assert nursery is not None  # open_core gives the Core its nursery
        try:
            nursery.start_soon(self._execute_submitted, core, request, arrived, future)
        except RuntimeError:  # the nursery is closed: the Core has ended
            turn = arrived[1]
            if turn is not None:
                turn.release()
            self._settle(future, _dumps(envelope_error(_request_id(arrived), _closed_error())))

    async def _execute_submitted(
        self, core: Core, request: str, arrived: _Arrived, future: Future[str]
    ) -> None:
        try:
            response = await core.execute(request, arrived=arrived)
        except BaseException:
            self._settle(future, _dumps(envelope_error(_request_id(arrived), _closed_error())))
            raise
        try:
            text = _dumps(response)
        except (TypeError, ValueError) as exc:
            contained = _contain("submit_json", exc)
            assert isinstance(contained, CoreError)  # an Exception is always contained
            text = _dumps(envelope_error(_request_id(arrived), contained))
        self._settle(future, text)

    def _settle(self, future: Future[str], text: str) -> None:
        with self._submitted_lock:
            self._submitted.discard(future)
        _settle(future, text)

    def events(self, kind: str = "job", source_id: str | None = None) -> EventSubscription:
        """Receive a source's events as a blocking iterator, without a polling loop.

        ``for event in core.events("lsp", session_id): ...`` yields each event of that
        language-server session as ``lsp.waitEvents`` returns it, in order, blocking while
        there is none; ``core.events()`` does the same for the job lanes. The iteration ends
        when the subscription is closed (``close()``, or leaving ``with core.events(...)``),
        when the session or terminal is gone, or when this CoreThread closes. An iterator
        rather than a callback: nothing of the caller runs on the Core's thread, and the
        consumer sets the pace (the Core's queue of the source is bounded and reports
        dropped events; see :class:`EventSubscription`).

        Args:
            kind: ``"job"``, ``"lsp"``, ``"debug"`` or ``"terminal"``.
            source_id: The session id (``lsp``, ``debug``) or terminal id (``terminal``);
                None for ``job``.

        Returns:
            An :class:`EventSubscription`.

        Raises:
            ValueError: An unknown ``kind``, or ``source_id`` missing or given where the
                kind takes none.
            RuntimeError: The CoreThread is not running.
        """
        if kind not in EVENT_SOURCES:
            raise ValueError(f"kind must be one of {', '.join(EVENT_SOURCES)}, not {kind!r}")
        if (EVENT_SOURCES[kind][1] is None) != (source_id is None):
            raise ValueError(
                "job events take no source_id"
                if kind == "job"
                else f"{kind} events need a source_id"
            )
        core, token = self._require()
        return EventSubscription._create(core, token, kind, source_id)

    def language_server(
        self, argv: Sequence[str], *, root_uri: str, **options: Unpack[LanguageServerOptions]
    ) -> SyncLspClient:
        """Start a language server and return it once it is ready, as a blocking client.

        ``with core.language_server(["pylsp"], root_uri=root) as server:
        server.hover(uri, 0, 4)``. The methods are those of :class:`~supervisor.LspClient`,
        blocking, callable from any thread but the Core's; ``close()`` (or leaving the
        ``with``) stops the server, and so does closing this CoreThread.

        Args:
            argv: The server's program and arguments (no shell).
            root_uri: The workspace root URI sent in ``initialize``.
            **options: As :func:`supervisor.open_lsp_client` takes them.

        Raises:
            StartFailed: The server did not get ready (reason, exit code, stderr tail).
            RuntimeError: The CoreThread is not running.
        """
        from .._client._lsp import open_lsp_client
        from .._client._sync import SyncLspClient

        core, portal = self._require_portal()
        client, holder = portal.hold(
            lambda: open_lsp_client(core, argv, root_uri=root_uri, **options)
        )
        return SyncLspClient._create(portal, client, holder)

    def debug_adapter(
        self, argv: Sequence[str], **options: Unpack[DebugAdapterOptions]
    ) -> SyncDapClient:
        """Start a debug adapter and return it once it answered ``initialize``, as a
        blocking client (the methods of :class:`~supervisor.DapClient`; see
        :meth:`language_server`).

        Raises:
            StartFailed: The adapter did not get ready (reason, exit code, stderr tail).
            RuntimeError: The CoreThread is not running.
        """
        from .._client._dap import open_dap_client
        from .._client._sync import SyncDapClient

        core, portal = self._require_portal()
        client, holder = portal.hold(lambda: open_dap_client(core, argv, **options))
        return SyncDapClient._create(portal, client, holder)

    def _require_portal(self) -> tuple[Core, Portal]:
        core, _ = self._require()
        if self._portal is None:
            raise RuntimeError("the CoreThread is not running")
        return core, self._portal

    def cancel_operation(self, operation_id: str) -> int:
        """Cancel an operation from any thread.

        Returns:
            1 when the operation was active, 0 otherwise (the Core API contract
            ``lithe_core_cancel``).
        """
        core, token = self._require()
        try:
            active = trio.from_thread.run_sync(core.cancel, operation_id, trio_token=token)
        except trio.RunFinishedError:
            return 0
        return 1 if active else 0
