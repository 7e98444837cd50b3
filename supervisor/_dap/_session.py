"""One debug session: the adapter's process and transport, DAP correlation, operations.

Reference: the Core API contract ``debug.*`` (createSession, launch, breakpoints, execute, inspect,
cancelOperation, disconnect, destroySession, runInTerminal); the plugin contract "Debug
adapters" (transports ``stdio``, ``tcpPort``, ``tcpAnnounced``; loopback only) and "Remote
attach". Unlike the reference Core, the supervisor owns the adapter's process and transport.

Tasks (an adapter process or socket per session; one scope per pending operation):
:meth:`DebugSession.run` is started in the Core's root nursery and owns a
nursery with the *reader* (bytes -> :class:`protocol.DAPConnection` -> dispatch), the
*writer* (the only task that writes the transport; frames come through a bounded channel, so
an adapter that stops reading blocks only this session), drains of the adapter's stderr (a
bounded ring whose last lines go into the crash detail) and, for TCP transports, its stdout,
an exit watcher, and short tasks for configuration and reverse requests. Each operation runs
in the caller's task inside its own cancel scope.

Configuration (DAP "initialized" event, "Debug session start"; the Core API contract
``debug.setBreakpoints``): once the ``initialize`` response and the adapter's ``initialized``
event both came, in either order (netcoredbg and hxcpp-debugger send the event first;
:class:`~._state.ConfigurationSequence`), the session sends, each once and each after the
previous one's answer: the exception filters, function and data breakpoints, every source's
breakpoints in path order, then ``configurationDone`` when supported (without it,
``setExceptionBreakpoints`` comes last: :func:`~._state.configuration_requests`). A
``launch``/``attach`` accepted before the ``initialize`` response is held until it and goes
before the configuration when both may go; its answer may come after ``configurationDone``
(debugpy). A breakpoint or filter set made before the configuration began is part of it
(answer ``sent: false``); one made while it is sent goes right after it; later ones go
directly. A second ``initialized`` event changes nothing.

Exactly once: an operation is registered before its request is written; whoever finishes it
first (the response, ``debug.cancelOperation``, its deadline, the caller's cancellation, or
the end of the session) emits its one ``operationCompleted`` / ``operationFailed`` event, and
removes its pending request first, so a late response finds nothing and changes nothing.

Failures: every operation failure names its ``reason`` -- in the raised
:class:`~protocol.CoreError`'s ``details`` and in the ``operationFailed`` event, which also
carries the Core ``code`` -- one of :data:`OPERATION_FAILURE_REASONS`: ``refused`` (decided
before anything was sent), ``adapterError`` (the adapter answered ``success: false``),
``cancelled``, ``timedOut``, ``sessionEnded`` (code ``cancelled``, with ``sessionEndReason``:
the ``terminated`` event's reason), ``internal`` (code ``internal``: an exception of ours).

runInTerminal (the Core API contract ``debug.runInTerminalResponse``): refused unless the
session advertised ``supportsRunInTerminalRequest``. With ``runInTerminal: "supervisor"``
(the default) the session starts the program itself on a PTY of its own
(:class:`TerminalProcess`: no shell, the scope marker, its own session), for ``kind``
``integrated`` and ``external`` alike -- the supervisor has no window to open an external
terminal in -- answers with its ``processId``, forwards its output as ``output`` events
(``category: "stdout"``, ``requestId``), reports its exit as ``runInTerminalExited`` and ends
it with the session. With ``runInTerminal: "host"`` the host runs it and answers through
``debug.runInTerminalResponse``; a request still unanswered when the session disconnects is
failed toward the adapter, and any later answer is ignored.

startDebugging (DAP reverse request; debugpy's Python subprocesses): ``initialize`` declares
``supportsStartDebuggingRequest``; each request makes a child session (its own id, events and
operations; listed with ``parentSessionId``; the parent's breakpoints and ``terminateDebuggee``
policy) that runs in the parent's nursery and is stopped first when the parent stops. Its
adapter is the ``connect`` endpoint the configuration names, else the parent's TCP endpoint,
else a new adapter process from the parent's spec. Other reverse requests are refused; DAP
events outside the contract are forwarded as ``adapterEvent``.

Boundary: each session is a supervision boundary. An unexpected exception in one of its tasks
(reader, writer, stderr drain, exit watcher, ``initialize``, configuration, the stop after
``terminated``) ends that session only: it is logged with its traceback, the session's
processes end by the stop ladder (the adapter's input closed, TERM, KILL, the sweep; no
``disconnect``: the tasks that would carry it are gone), every pending operation fails once
(``sessionEnded``, ``sessionEndReason: "internal"``), the state becomes ``failed`` and the
``terminated`` event says ``reason: "internal"`` with a ``crashReport {exceptionType, message,
stderrTail}``. An unexpected exception inside one operation's body fails that operation only
(reason and code ``internal``); one inside a reverse request answers that request
``success: false``; one inside a runInTerminal terminal ends that terminal
(``runInTerminalExited`` with ``reason: "internal"``). Cancellation, ``KeyboardInterrupt`` and
``SystemExit`` propagate. Fault points: ``dap.reader`` (per message read), ``dap.writer``
(per frame written), ``dap.drain`` (per stderr chunk), ``dap.exit`` (the adapter's exit
seen), ``dap.initialize``, ``dap.configure``, ``dap.operation`` (before an operation's body),
``dap.reverse`` (a reverse request).

Stop: ``disconnect`` (``terminateDebuggee`` from the request kind)
with a 2 000 ms reply bound, then the stop ladder (:func:`~supervisor._session.stop_ladder`)
with the end of the adapter's input as its polite step -- its stdin closed (debugpy's adapter
exits only on stdin EOF), a socket's sending side shut down -- and a 1 000 ms exit bound, then
SIGTERM, SIGKILL and the sweep by marker, which also ends the debugpy launcher and a debuggee
we launched (they carry the marker). The reader and the stderr drain run through the whole
ladder and until the adapter's output ends (bounded by the ladder's drain), so the ``output``
events an adapter sends after ``disconnect`` come before ``terminated``; so does a crash's.
A second stop joins the first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import ipaddress
import itertools
import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final

import trio

from protocol import CoreError, JSONObject
from protocol._dap import DAPConnection, DAPEvent, DAPRequest, DAPResponse

from .._api._debug import MAX_OPERATION_TIMEOUT_MS
from .._boundary import (
    crash_report,
    fault_point,
    internal_message,
    log_failure,
    split_failure,
)
from .._process._tree import PIPE, open_process_tree
from .._session import (
    DRAIN_AFTER_EXIT_MS,
    TERM_GRACE_MS,
    StderrRing,
    StopBounds,
    exit_detail,
    stop_ladder,
)
from .._session._operations import Operation, OperationTable, run_operation
from .._session._order import effect_taken, withdrawn
from .._session._resource import SessionResource
from .._terminal._pty import EndBounds, TerminalProcess
from .._terminal._render import RetainedDisplay
from .._transport import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_PENDING_WRITES,
    DEFAULT_MAX_WRITE_BYTES,
    EndpointClosed,
    FramedTransport,
    _WriteQueue,
)
from ._state import (
    RESUMING,
    ConfigurationInput,
    ConfigurationRequest,
    ConfigurationState,
    DataBreakpoint,
    DebugInput,
    DebugLifecycle,
    DebugState,
    ExceptionFilter,
    FunctionBreakpoint,
    SetAction,
    SourceBreakpoint,
    check_execute,
    data_breakpoints_arguments,
    exception_breakpoints_arguments,
    function_breakpoints_arguments,
    normalize_capabilities,
    normalize_result,
    source_breakpoints_arguments,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from protocol import JSONValue

    #: Registers and starts a child session (DAP ``startDebugging``) in the given
    #: nursery; raises :class:`CoreError` (``busy``, ``launch_failed``) when it can not.
    StartChild = Callable[["DebugSession", "AdapterSpec", trio.Nursery], Awaitable["DebugSession"]]
    #: ``workspace/executeCommand`` on a language-server session (ServiceContext's).
    LanguageServerCommand = Callable[[str, str, list[JSONValue], int], Awaitable[JSONValue]]

    from .._process._tree import ProcessTree
    from .._session._events import EventQueue

__all__ = (
    "DEFAULT_CONNECT_TIMEOUT_MS",
    "DEFAULT_DISCONNECT_REPLY_MS",
    "DEFAULT_EXIT_WAIT_MS",
    "DEFAULT_INITIALIZE_TIMEOUT_MS",
    "DEFAULT_OPERATION_TIMEOUT_MS",
    "MAX_OPERATION_TIMEOUT_MS",
    "OPERATION_FAILURE_REASONS",
    "AdapterSpec",
    "DebugSession",
    "check_loopback",
)

logger = logging.getLogger("supervisor.dap")

#: Stop: wait for the ``disconnect`` reply (ours), in milliseconds.
DEFAULT_DISCONNECT_REPLY_MS: Final = 2_000
#: Stop: wait for the adapter's exit after its stdin closed (ours), in milliseconds.
DEFAULT_EXIT_WAIT_MS: Final = 1_000
#: TERM grace before SIGKILL for the adapter's tree (ours), in milliseconds: the ladder's.
DEFAULT_TERM_GRACE_MS: Final = TERM_GRACE_MS
#: An operation's default deadline (as a forwarded LSP request), in milliseconds.
DEFAULT_OPERATION_TIMEOUT_MS: Final = 60_000
#: How long a TCP transport may take to be reachable (or announced), in milliseconds.
DEFAULT_CONNECT_TIMEOUT_MS: Final = 10_000
#: How long an adapter has to answer ``initialize`` before the session ends
#: (``initializeTimeout``): an adapter that never answers must not hold a session, and the
#: ``debug.launch`` waiting on it, for ever.
DEFAULT_INITIALIZE_TIMEOUT_MS: Final = 30_000
#: Operations that may be pending at once per session; the next one waits for room (its
#: session's later operations wait behind it: docs/architecture.md "The order rule").
MAX_PENDING_OPERATIONS: Final = 128
#: Output drained after the adapter's exit; a held-open pipe must not stretch the stop.
_DRAIN_AFTER_EXIT_S: Final = DRAIN_AFTER_EXIT_MS / 1000
#: The adapter's stop ladder: its polite step is the end of its input (then its exit).
_STOP_BOUNDS: Final = StopBounds(polite_ms=DEFAULT_EXIT_WAIT_MS)
#: Adapter stderr kept for crash details: this many last lines, each cut to 512 bytes.
_STDERR_LINES: Final = 20
_STDERR_LINE_BYTES: Final = 512
#: An ``output`` event's text is cut to this many characters (the event says so).
_MAX_OUTPUT_CHARS: Final = 16_384
#: The longest announce line ``tcpAnnounced`` reads, in bytes.
_MAX_ANNOUNCE_LINE: Final = 1024
#: Pause between TCP connection attempts while an adapter starts listening, in seconds.
_CONNECT_RETRY_S: Final = 0.05
#: The PTY a runInTerminal program gets (an 80x24 integrated terminal).
_TERMINAL_ROWS: Final = 24
_TERMINAL_COLS: Final = 80
#: Ending a runInTerminal PTY: the terminal defaults (hang-up 1 000 ms, TERM grace
#: 2 000 ms, kill wait 1 000 ms, drain 500 ms).
_TERMINAL_END_BOUNDS: Final = EndBounds()

#: ``reason`` of a failure the supervisor decided before anything was sent.
REASON_REFUSED: Final = "refused"
#: Every ``reason`` an operation failure carries (``operationFailed`` and ``details``),
#: with its Core code (``refused`` and ``adapterError`` keep the code of the refusal).
_REASON_CODES: Final[dict[str, str]] = {
    "cancelled": "cancelled",
    "timedOut": "timed_out",
    "sessionEnded": "cancelled",
    "internal": "internal",
}
OPERATION_FAILURE_REASONS: Final = frozenset(
    {REASON_REFUSED, "adapterError", "cancelled", "timedOut", "sessionEnded", "internal"}
)


def _writer_fault_point() -> None:
    fault_point("dap.writer")


def check_loopback(host: str) -> str:
    """Accept only loopback endpoints: 127.0.0.0/8, ``::1`` or ``localhost``.

    Raises:
        CoreError: ``invalid_request`` for any other host (the plugin contract "Debug
            adapters": "TCP endpoints are loopback only").
    """
    if host.lower() == "localhost":
        return host
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise CoreError(
            "invalid_request",
            f"Debug adapter endpoints must be loopback (127.0.0.0/8, ::1, localhost): {host!r}",
            {"host": host},
        )
    return host.strip("[]")


@dataclass(frozen=True)
class AdapterSpec:
    """How to start and reach a debug adapter (``debug.createSession``'s ``adapter``).

    Attributes:
        argv: The adapter's program and arguments; None for ``tcpPort`` without an
            executable: connect to an adapter someone else runs (``debugpy --listen``), which
            the session then neither starts nor ends.
        env: Environment changes (None removes a variable).
        cwd: Working directory, or None for ours.
        transport: ``"stdio"``, ``"tcpPort"``, ``"tcpAnnounced"`` or ``"tcpLanguageServer"``
            (the adapter lives in a language server, which answers a command with its port).
        host: The loopback host to connect to (TCP transports).
        port: The port (``tcpPort``).
        announce_prefix: What the first line starts with before the port or
            ``host:port`` (``tcpAnnounced``).
        announce_stream: Where that line comes: ``"stdout"`` or ``"stderr"``
            (the plugin contract ``launch.endpoint.stream``).
        connect_timeout_ms: Bound on reaching the endpoint (or reading the announcement).
        initialize_timeout_ms: Bound on the adapter's answer to ``initialize``; past it the
            session ends with reason ``initializeTimeout``.
        language_server: ``tcpLanguageServer``: ``(sessionId, command, arguments)`` -- the
            language-server session whose ``workspace/executeCommand`` answers the port.
    """

    argv: list[str] | None
    env: dict[str, str | None] | None = None
    cwd: str | None = None
    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int | None = None
    announce_prefix: str = ""
    announce_stream: str = "stdout"
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    initialize_timeout_ms: int = DEFAULT_INITIALIZE_TIMEOUT_MS
    language_server: tuple[str, str, tuple[JSONValue, ...]] | None = None


#: ``debug.inspect`` kinds the adapter must have advertised.
_INSPECT_CAPABILITY: Final = {
    "exceptionInfo": "supportsExceptionInfoRequest",
    "stepInTargets": "supportsStepInTargetsRequest",
    "gotoTargets": "supportsGotoTargetsRequest",
}


class _SessionEnded(Exception):
    """A pending request ended because the session did (internal)."""


@dataclass
class _Pending:
    seq: int
    command: str
    done: trio.Event = field(default_factory=trio.Event)
    response: DAPResponse | None = None


@dataclass(eq=False)
class _Operation(Operation):
    """One debug operation; its outcome is its ``operationCompleted`` or
    ``operationFailed`` event's fields."""

    command: str
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    seq: int | None = None
    cancel_reason: str | None = None


@dataclass
class _TerminalRequest:
    request: DAPRequest
    answered: bool = False


def _cut(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def _int(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@final
class DebugSession(SessionResource[JSONObject]):
    """A debug session: made by the debug service (``debug.createSession``).

    Attributes:
        session_id: The session's id.
        adapter_id: DAP ``initialize.adapterID``.
        events: The session's ordered, bounded event queue.
        lifecycle: Its pure state (:class:`DebugLifecycle`).
        capabilities: The normalized capabilities, None until ``initialize`` is answered.
    """

    def __init__(
        self,
        *,
        session_id: str,
        adapter_id: str,
        spec: AdapterSpec,
        root_path: str,
        supports_run_in_terminal: bool,
        run_in_terminal_handler: str,
        events: EventQueue,
        parent: DebugSession | None = None,
        start_child: StartChild | None = None,
        language_server_command: LanguageServerCommand | None = None,
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self.adapter_id = adapter_id
        self.spec = spec
        self.root_path = root_path
        self.supports_run_in_terminal = supports_run_in_terminal
        self.run_in_terminal_handler = run_in_terminal_handler
        self.events = events
        self.lifecycle = DebugLifecycle()
        self.capabilities: JSONObject | None = None
        self._conn = DAPConnection(max_body_bytes=DEFAULT_MAX_BODY_BYTES)
        self._tree: ProcessTree | None = None
        self._socket: trio.SocketStream | None = None
        #: The byte loop (the one every framed peer has: ``supervisor._transport``), made
        #: once the adapter is reached. Its write queue is made now, so a stop before that
        #: has one to close. An adapter that reads slowly is waited for, never ended for it
        #: (docs/architecture.md "Flow control"): its operations end at their deadlines, and
        #: a stop ends it by the ladder (``disconnect`` bounded, stdin closed, TERM, KILL).
        self._transport: FramedTransport | None = None
        self._writes = _WriteQueue(DEFAULT_MAX_PENDING_WRITES, DEFAULT_MAX_WRITE_BYTES)
        self._pending: dict[int, _Pending] = {}
        self._operations: OperationTable[_Operation] = OperationTable(self._operation_finished)
        self._anonymous = itertools.count(1)
        #: Set (and dropped) when an operation leaves the table: a caller waiting for room.
        self._operation_room: trio.Event | None = None
        #: Operations waiting for room (:meth:`_wait_for_room`), by id: a cancel finds them.
        self._held_for_room: dict[str, _Operation] = {}
        self._terminal_ids = itertools.count(1)
        self._terminal_requests: dict[str, _TerminalRequest] = {}
        self._terminals: list[TerminalProcess] = []
        self._initialize_answered = trio.Event()
        #: Set (and replaced) whenever something a held operation waits for happened: the
        #: initialize response, a step of the configuration, the end of the transport.
        self._progress = trio.Event()
        self._stop_count = 0
        #: The ``stopped`` event that paused the session (``describe``'s ``stop``).
        self._last_stop: JSONObject | None = None
        self._transport_done = trio.Event()
        self._end_reason = "adapterExited"
        #: A ``debug.disconnect`` (or the debuggee's end) began the DAP stop sequence;
        #: the teardown (:meth:`_teardown`, the base's stop) follows it.
        self._disconnect_started = False
        self._terminated_detail: JSONObject | None = None
        self._stderr = StderrRing(_STDERR_LINES, _STDERR_LINE_BYTES)
        #: Set when each reader of the adapter (transport, stderr, a TCP adapter's stdout)
        #: has reached the end of its stream; the stop ladder's drain waits for them.
        self._readers_done: list[trio.Event] = []
        #: Chunks read by those readers so far (the drain goes on while it grows).
        self._heard = 0
        #: The unexpected exception that ended the session (state FAILED), if one did.
        self.failure: Exception | None = None
        self._running = False
        self._nursery: trio.Nursery | None = None
        self.source_breakpoints: dict[str, tuple[SourceBreakpoint, ...]] = {}
        self.function_breakpoints: tuple[FunctionBreakpoint, ...] = ()
        self.exception_filters: tuple[ExceptionFilter, ...] | None = None
        self.data_breakpoints: tuple[DataBreakpoint, ...] = ()
        #: The session whose adapter asked for this one (DAP ``startDebugging``), or None.
        self.parent = parent
        #: Sessions started for this one's ``startDebugging`` requests; they end with it.
        self.children: list[DebugSession] = []
        self._start_child = start_child
        self._language_server_command = language_server_command
        #: The endpoint a TCP transport reached (a child session reaches the same one).
        self._endpoint: tuple[str, int] | None = None
        if parent is not None:
            # A child debugs part of the same program: it starts with the parent's
            # breakpoints, and ends its debuggee when the parent would end its own.
            self.source_breakpoints = dict(parent.source_breakpoints)
            self.function_breakpoints = parent.function_breakpoints
            self.exception_filters = parent.exception_filters
            self.lifecycle.terminate_override = parent.lifecycle.terminate_debuggee
        #: When the start began (trio clock, ms) and whether its fact was recorded.
        self._started_at_ms = trio.current_time() * 1000
        self._start_fact_recorded = False

    # -- public state --------------------------------------------------------------------

    @property
    def state(self) -> DebugState:
        """The session's current state."""
        return self.lifecycle.state

    @property
    def adapter_pid(self) -> int | None:
        """The adapter's process id, or None when the session does not own a process."""
        return self._tree.pid if self._tree is not None else None

    def describe(self) -> JSONObject:
        """``{sessionId, adapterId, state, requestKind, adapterPid, parentSessionId?,
        childSessionIds?, reason?, crashReport?, stop?}``; ``stop`` (the ``stopped`` event
        that paused it) only in state ``paused``.

        ``parentSessionId`` only for a session started by an adapter's ``startDebugging``,
        ``childSessionIds`` only once such a session exists; ``reason: "internal"`` and
        ``crashReport`` only in state ``failed``.
        """
        data: JSONObject = {
            "sessionId": self.session_id,
            "adapterId": self.adapter_id,
            "state": self.state.value,
            "requestKind": self.lifecycle.request_kind,
            "adapterPid": self.adapter_pid,
        }
        if self.parent is not None:
            data["parentSessionId"] = self.parent.session_id
        if self.children:
            data["childSessionIds"] = [child.session_id for child in self.children]
        if self.failure is not None:
            data["reason"] = "internal"
            data["crashReport"] = self._crash_report()
        if self.state is DebugState.PAUSED and self._last_stop is not None:
            data["stop"] = dict(self._last_stop)
        return data

    def _crash_report(self) -> JSONObject:
        assert self.failure is not None
        return crash_report(self.failure, self._stderr.tail())

    def _emit(self, event: str, params: JSONObject | None = None) -> None:
        self.events.put(event, {"sessionId": self.session_id, **(params or {})})

    def _start_fact(self, code: str | None) -> None:
        """Record the adapter's start as one ``debugAdapter/start`` fact, once.

        the plugin contract "Structured plugin diagnostics": from launch until
        ``initialize`` succeeds; ``operationFinished``, or ``operationFailed`` with one
        ``host.*`` code (``host.timedOut``, ``host.initializeFailed``, ``host.exitedEarly``).
        A stop before that records nothing. Categories only: no stderr, path or message.
        """
        if self._start_fact_recorded:
            return
        self._start_fact_recorded = True
        fact: JSONObject = {
            "catalogEvent": (
                "plugins.operation.finished" if code is None else "plugins.operation.failed"
            ),
            "kind": "operationFinished" if code is None else "operationFailed",
            "operation": "debugAdapter/start",
            "durationMs": max(0, math.floor(trio.current_time() * 1000 - self._started_at_ms)),
        }
        if code is not None:
            fact["code"] = code
        self._emit("fact", fact)

    def _move(self, event: DebugInput) -> None:
        if self.lifecycle.handle(event):
            self._emit("stateChanged", {"state": self.state.value})

    # -- running -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the adapter, connect, send ``initialize``, and serve until the session ends.

        Reports started (``task_status``) once ``initialize`` is queued; a failure before
        that is raised to the starter and leaves nothing running.

        Raises:
            CoreError: ``launch_failed`` when the adapter can not be started or reached;
                ``invalid_request`` for a bad argv, env or cwd.

        **Cancellation:** cancelling it ends the session the hard way (no ``disconnect``):
        the adapter's tree is ended, shielded and bounded, before it returns.
        """
        try:
            await self._open_transport()
            try:
                await self._serve(task_status)
            except BaseException as exc:
                failure, rest = split_failure(exc)
                if failure is None or not self._running:
                    # Before it started, a failure is the starter's (its request's).
                    raise
                self._fail(failure)
                if rest is not None:
                    raise rest from None
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self._teardown()
                except Exception as exc:
                    # A bug in the teardown: logged; the tree's own close is idempotent
                    # and the session is marked ended by the teardown's own finally.
                    log_failure(f"debug session {self.session_id} teardown", exc)

    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._contained, self._write_loop)
            nursery.start_soon(self._contained, self._reading(self._read_loop))
            tree = self._tree
            if tree is not None:
                nursery.start_soon(self._contained, functools.partial(self._watch_exit, tree))
                if tree.stderr is not None:
                    drain = functools.partial(self._drain, tree.stderr, True)
                    nursery.start_soon(self._contained, self._reading(drain))
                if self._socket is not None and tree.stdout is not None:
                    drain = functools.partial(self._drain, tree.stdout, False)
                    nursery.start_soon(self._contained, self._reading(drain))
            self._emit("stateChanged", {"state": self.state.value})
            nursery.start_soon(self._contained, self._initialize)
            task_status.started()
            self._running = True
            await self._transport_done.wait()
            await self._teardown()
            nursery.cancel_scope.cancel()

    def _reading(self, reader: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """``reader``, noted as one the stop ladder's drain waits for."""
        done = trio.Event()
        self._readers_done.append(done)

        async def read() -> None:
            try:
                await reader()
            finally:
                done.set()

        return read

    async def _output_ended(self) -> None:
        """Returns once every reader of the adapter reached the end of its stream."""
        for done in self._readers_done:
            await done.wait()

    async def _contained(self, task: Callable[[], Awaitable[None]]) -> None:
        """Run one of the session's tasks inside the session's boundary.

        An unexpected exception ends the session (:meth:`_fail`), not the nursery: the
        teardown that follows ends the adapter and fails the pending operations.
        """
        try:
            await task()
        except BaseException as exc:
            failure, rest = split_failure(exc)
            if failure is None:
                raise
            self._fail(failure)
            if rest is not None:
                raise rest from None

    def _fail(self, failure: Exception) -> None:
        """The session's boundary caught ``failure``: the teardown ends it as ``failed``.

        After the session ended (its ``terminated`` event was emitted) a failure is only
        logged: the outcome was already reported.
        """
        log_failure(f"debug session {self.session_id}", failure)
        if self.ended or self._terminated_detail is not None:
            return
        if self.failure is None:
            self.failure = failure
        self._end_reason = "internal"
        if not self._transport_done.is_set():
            self._transport_done.set()
            self._wake()

    async def _open_transport(self) -> None:
        spec = self.spec
        if spec.argv is not None:
            tcp = spec.transport != "stdio"
            self._tree = await open_process_tree(
                spec.argv,
                cwd=spec.cwd,
                env=spec.env,
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
            )
            if not tcp:
                assert self._tree.stdin is not None
                assert self._tree.stdout is not None
                self._make_transport(self._tree.stdin, self._tree.stdout)
                return
        try:
            with trio.fail_after(spec.connect_timeout_ms / 1000):
                host, port = spec.host, spec.port
                if spec.transport == "tcpAnnounced":
                    host, port = await self._read_announcement()
                elif spec.transport == "tcpLanguageServer":
                    port = await self._ask_language_server()
                assert port is not None
                self._socket = await self._connect(host, port)
                self._endpoint = (host, port)
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await self._close_tree()
            if isinstance(exc, trio.TooSlowError):
                raise CoreError(
                    "launch_failed",
                    f"The debug adapter was not reachable within {spec.connect_timeout_ms} ms",
                    self._crash_details(),
                ) from None
            raise
        self._make_transport(self._socket, self._socket)

    def _make_transport(
        self, send_stream: trio.abc.SendStream, receive_stream: trio.abc.ReceiveStream
    ) -> None:
        self._transport = FramedTransport(
            send_stream,
            receive_stream,
            name=f"debug adapter {self.session_id}",
            before_write=_writer_fault_point,
            queue=self._writes,
        )

    async def _ask_language_server(self) -> int:
        """``tcpLanguageServer``: the port the language server answers its command with (an
        integer or a numeric string from 1 to 65535; the plugin contract "Debug adapters")."""
        assert self.spec.language_server is not None
        assert self._language_server_command is not None
        session_id, command, arguments = self.spec.language_server
        answer = await self._language_server_command(
            session_id, command, list(arguments), self.spec.connect_timeout_ms
        )
        if isinstance(answer, str) and answer.isascii() and answer.isdigit():
            answer = int(answer)
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 < answer < 65536:
            raise CoreError(
                "launch_failed",
                f"The language server answered {command} with no port (1-65535)",
                {"answer": str(answer)[:64]},
            )
        return answer

    async def _read_announcement(self) -> tuple[str, int]:
        tree = self._tree
        assert tree is not None
        stream = tree.stderr if self.spec.announce_stream == "stderr" else tree.stdout
        assert stream is not None
        line = bytearray()
        while b"\n" not in line:
            chunk = await stream.receive_some(_MAX_ANNOUNCE_LINE)
            if not chunk:
                raise CoreError(
                    "launch_failed",
                    "The debug adapter exited before it announced its port",
                    self._crash_details(),
                )
            line += chunk
            if len(line) > _MAX_ANNOUNCE_LINE and b"\n" not in line[:_MAX_ANNOUNCE_LINE]:
                raise CoreError("launch_failed", "The debug adapter's announce line is too long")
        # Bytes after the line are adapter output; only the announcement is ours.
        text = bytes(line).split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        prefix = self.spec.announce_prefix
        if not text.startswith(prefix):
            raise CoreError(
                "launch_failed",
                f"The debug adapter's first {self.spec.announce_stream} line does not start "
                "with the announce prefix",
                {"announcePrefix": prefix},
            )
        value = text[len(prefix) :].strip()
        host = self.spec.host
        if value.rsplit(":", 1)[-1] != value:
            host, value = value.rsplit(":", 1)
            try:
                host = check_loopback(host)
            except CoreError as exc:
                raise CoreError("launch_failed", exc.message, exc.details) from None
        if not value.isdigit() or not 0 < int(value) < 65536:
            raise CoreError("launch_failed", "The debug adapter announced an invalid port")
        return host, int(value)

    async def _connect(self, host: str, port: int) -> trio.SocketStream:
        # The adapter may still be starting: retry until the caller's deadline, but give up
        # at once when the adapter we started has exited.
        while True:
            try:
                return await trio.open_tcp_stream(host, port)
            except OSError as exc:
                if self._tree is not None and self._tree.returncode is not None:
                    raise CoreError(
                        "launch_failed",
                        f"The debug adapter exited before accepting a connection: {exc}",
                        self._crash_details(),
                    ) from None
                await trio.sleep(_CONNECT_RETRY_S)

    def _crash_details(self) -> JSONObject:
        details: JSONObject = {}
        tree = self._tree
        if tree is not None:
            details.update({"exitCode": None, **exit_detail(tree.returncode)})
        if self._stderr:
            tail: list[JSONValue] = [*self._stderr.tail()]
            details["stderrTail"] = tail
        return details

    async def _write_loop(self) -> None:
        transport = self._transport
        assert transport is not None
        try:
            await transport.write_loop(lambda _reason: self._end_transport("transportClosed"))
        finally:
            self._writes.close("the writer ended")

    async def _read_loop(self) -> None:
        transport = self._transport
        assert transport is not None
        reason = await transport.read_loop(self._conn, self._on_message)
        if reason.startswith("protocol error"):
            logger.warning("debug adapter %s broke the protocol: %s", self.session_id, reason)
            self._end_transport("protocolError")
        else:
            # The end of input however it came (EOF, a failed read, our own close): the
            # adapter exited or is leaving; its exit says how.
            self._end_transport(self._end_reason)

    def _on_message(self, message: DAPEvent | DAPRequest | DAPResponse) -> None:
        fault_point("dap.reader")
        self._dispatch(message)

    def _end_transport(self, reason: str) -> None:
        if not self._transport_done.is_set():
            if not self._disconnect_started:
                self._end_reason = reason
            self._transport_done.set()
            self._wake()

    async def _watch_exit(self, tree: ProcessTree) -> None:
        await tree.wait()
        fault_point("dap.exit")
        # Invariant 10: the exit and the end of the pipes are separate events; a descendant
        # holding the adapter's stdout must not keep the session alive.
        with trio.move_on_after(_DRAIN_AFTER_EXIT_S):
            await self._transport_done.wait()
        if not self._initialize_answered.is_set() and not self._disconnect_started:
            self._start_fact("host.exitedEarly")
        self._end_transport("adapterExited")

    async def _drain(self, stream: trio.abc.ReceiveStream, keep: bool) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                self._heard += 1
                fault_point("dap.drain")
                if keep:
                    self._stderr.feed(bytes(chunk))
        if keep:
            self._stderr.feed_eof()

    # -- requests ------------------------------------------------------------------------

    async def _send(self, frame: bytes) -> None:
        try:
            await self._writes.put(frame)
        except EndpointClosed:
            raise _SessionEnded from None

    async def _request(
        self,
        command: str,
        arguments: JSONValue = None,
        operation: _Operation | None = None,
        *,
        queued: Callable[[], None] | None = None,
    ) -> DAPResponse:
        """Send one request and wait for its answer; ``queued`` is called once its frame is
        in the writer's queue (before anything queued later)."""
        if self._transport_done.is_set():
            raise _SessionEnded
        seq, frame = self._conn.request(command, arguments)
        pending = _Pending(seq, command)
        self._pending[seq] = pending
        if operation is not None:
            operation.seq = seq
        try:
            await self._send(frame)
            # Queued in the writer's order: the next command on this session may send its
            # own while this one waits for its response (docs/architecture.md "The order
            # rule").
            effect_taken()
            if queued is not None:
                queued()
            await pending.done.wait()
        finally:
            # Removing the entry is what makes a late response harmless.
            self._pending.pop(seq, None)
            if operation is not None and pending.done.is_set():
                # Answered (or the session ended): nothing left to cancel. A request whose
                # wait was cancelled keeps its seq, so DAP `cancel` can name it.
                operation.seq = None
        if pending.response is None:
            raise _SessionEnded
        return pending.response

    def _send_cancel(self, seq: int) -> None:
        if not (self.capabilities or {}).get("supportsCancelRequest"):
            return
        _, frame = self._conn.request("cancel", {"requestId": seq})
        # Never blocking: it may be sent from a cancelled task (bounded by the requests
        # that were pending).
        self._writes.put_urgent(frame)

    # -- operations ----------------------------------------------------------------------

    def _outcome(
        self,
        operation: _Operation,
        *,
        result: JSONValue = None,
        message: str | None = None,
        reason: str | None = None,
        code: str | None = None,
        extra: JSONObject | None = None,
    ) -> JSONObject:
        """An operation's outcome: its ``operationCompleted`` params, or (with a
        ``message``) its ``operationFailed`` params with ``reason`` and ``code``."""
        if message is None:
            return {
                "operationId": operation.operation_id,
                "command": operation.command,
                "result": result,
            }
        params: JSONObject = {
            "operationId": operation.operation_id,
            "command": operation.command,
            "message": message,
        }
        reason = reason or REASON_REFUSED
        params["reason"] = reason
        params["code"] = code or _REASON_CODES.get(reason, "invalid_request")
        if extra:
            params.update(extra)
        return params

    def _settle(self, operation: _Operation, outcome: JSONObject) -> bool:
        """Finish ``operation`` with ``outcome`` unless it has finished already (its
        pending request forgotten, its event emitted)."""
        if operation.done:
            return False
        if operation.seq is not None:
            self._pending.pop(operation.seq, None)
        self._operations.forget(operation)
        return self._operations.finish(operation, outcome)

    def _operation_finished(self, operation: _Operation, outcome: JSONObject) -> None:
        # A failure always names its reason; a completion never does.
        self._emit("operationFailed" if "reason" in outcome else "operationCompleted", outcome)

    async def run_operation(
        self,
        command: str,
        operation_id: str | None,
        timeout_ms: int | None,
        body: Callable[[_Operation], Awaitable[JSONValue]],
    ) -> JSONValue:
        """Run one operation: registered, bounded, ended exactly once.

        Args:
            command: The ``debug.*`` command (named in the events).
            operation_id: The caller's id (``debug.cancelOperation`` uses it); None makes
                one up.
            timeout_ms: The operation's deadline in milliseconds (default 60 000).
            body: Sends the request(s) and returns the normalized result.

        Returns:
            ``{operationId, result}``.

        Raises:
            CoreError: every failure carries ``details {operationId, reason}``, and the
                ``operationFailed`` event the same ``reason`` and ``code``
                (:data:`OPERATION_FAILURE_REASONS`): ``refused`` (``invalid_request`` /
                ``not_supported`` / ``busy``: refused before anything was sent, e.g. a
                duplicate operation id, a step while running, a command the adapter did not
                advertise); ``adapterError`` (``invalid_request``, ``launch_failed`` for
                launch/attach: the adapter answered ``success: false``; details
                ``adapterMessage``); ``cancelled`` (``cancelled``: ``debug.cancelOperation``
                with reason cancelled, ``$/cancelRequest`` or the caller's cancellation);
                ``timedOut`` (``timed_out``: the deadline, or ``debug.cancelOperation`` with
                reason timedOut); ``sessionEnded`` (``cancelled``: the session ended first;
                details ``sessionEndReason`` is the ``terminated`` event's reason, such as
                ``adapterExited``, ``protocolError``, ``transportClosed``,
                ``disconnected``).

        **Cancellation:** cancelling the caller fails the operation (``operationFailed``,
        reason ``cancelled``), forgets its pending request and sends DAP ``cancel`` when the
        adapter supports it.
        """
        if operation_id is None:
            operation_id = f"{command}#{next(self._anonymous)}"
        withdrawn_as = withdrawn()
        if withdrawn_as is not None:
            return self._end_unsent(command, operation_id, withdrawn_as, timeout_ms)
        refused: JSONObject = {"operationId": operation_id, "reason": REASON_REFUSED}
        if operation_id in self._operations:
            raise CoreError(
                "invalid_request", f"Operation {operation_id!r} is already pending", refused
            )
        withdrawn_as = await self._wait_for_room(command, operation_id)
        if withdrawn_as is not None:
            return self._end_unsent(command, operation_id, withdrawn_as, timeout_ms)
        if operation_id in self._operations:
            raise CoreError(
                "invalid_request", f"Operation {operation_id!r} is already pending", refused
            )
        if not self.lifecycle.live:
            # Refused at once with why it ended (issue 28): the terminated event's detail.
            why: JSONObject = {**refused, "state": self.state.value}
            message = f"The debug session is {self.state.value}"
            if self._terminated_detail is not None:
                why["terminated"] = dict(self._terminated_detail)
                message += f" ({self._terminated_detail.get('reason')})"
            raise CoreError("invalid_request", message, why)
        operation = _Operation(operation_id, command)
        self._operations.add(operation)
        timeout = timeout_ms if timeout_ms is not None else DEFAULT_OPERATION_TIMEOUT_MS
        operation.scope.deadline = trio.current_time() + timeout / 1000
        # The adapter's own refusal, raised to the caller as it was (with its details).
        answered: list[tuple[JSONObject, CoreError]] = []

        async def step() -> None:
            fault_point("dap.operation")
            try:
                result = await body(operation)
            except _SessionEnded:
                ended: JSONObject = {"sessionEndReason": self._end_reason}
                message = "The debug session ended"
                self._settle(
                    operation,
                    self._outcome(operation, message=message, reason="sessionEnded", extra=ended),
                )
                return
            self._settle(operation, self._outcome(operation, result=result))

        def answer(exc: Exception) -> JSONObject | None:
            if not isinstance(exc, CoreError):
                return None
            failure = dict(exc.details or {})
            reason = failure.get("reason")
            if reason not in OPERATION_FAILURE_REASONS:
                reason = REASON_REFUSED
            assert isinstance(reason, str)
            failure.update(operationId=operation_id, reason=reason)
            outcome = self._outcome(operation, message=exc.message, reason=reason, code=exc.code)
            answered.append((outcome, CoreError(exc.code, exc.message, failure)))
            return outcome

        def caught() -> JSONObject:
            # The deadline (debug.cancelOperation finished it before it cancelled the scope).
            operation.cancel_reason = "timedOut"
            message = f"The operation exceeded its deadline of {timeout} ms"
            return self._outcome(operation, message=message, reason="timedOut")

        def after(by_scope: bool) -> None:
            if operation.seq is not None:
                self._send_cancel(operation.seq)

        def forget() -> None:
            self._operations.forget(operation)
            if self._operation_room is not None:
                self._operation_room.set()
                self._operation_room = None

        await run_operation(
            operation,
            step,
            scope=operation.scope,
            what=f"debug session {self.session_id} {command}",
            finish=functools.partial(self._settle, operation),
            forget=forget,
            answer=answer,
            internal=lambda exc: self._outcome(
                operation, message=internal_message(exc), reason="internal"
            ),
            caught=caught,
            ended=lambda: self._outcome(
                operation, message="The operation was cancelled", reason="cancelled"
            ),
            after=after,
        )
        return self._answer(operation, timeout, answered)

    def _answer(
        self,
        operation: _Operation,
        timeout: int,
        answered: list[tuple[JSONObject, CoreError]],
    ) -> JSONValue:
        """What :meth:`run_operation` gives its caller for a finished ``operation``."""
        outcome = operation.outcome
        assert outcome is not None
        reason = outcome.get("reason")
        if reason is None:
            return {"operationId": operation.operation_id, "result": outcome.get("result")}
        for answered_outcome, error in answered:
            if answered_outcome is outcome:
                raise error
        details: JSONObject = {"operationId": operation.operation_id, "reason": reason}
        message = outcome.get("message")
        assert isinstance(message, str)
        if reason == "sessionEnded":
            details["sessionEndReason"] = outcome.get("sessionEndReason")
            raise CoreError("cancelled", message, details)
        if reason == "internal":
            raise CoreError("internal", message, details)
        if reason == "cancelled":
            raise CoreError("cancelled", "The operation was cancelled", details)
        raise CoreError("timed_out", f"The operation timed out ({timeout} ms)", details)

    async def _wait_for_room(self, command: str, operation_id: str) -> str | None:
        """Hold a pipelining client back while :data:`MAX_PENDING_OPERATIONS` are pending:
        not refused, this operation takes its effect once an earlier one ended, and the
        session's later operations wait behind it. ``debug.cancelOperation`` finds it here
        too (it holds its turn but has no pending request yet).

        Returns:
            The reason of a cancel that named it meanwhile (it then ends unsent), or None.
        """
        if len(self._operations) < MAX_PENDING_OPERATIONS or not self.lifecycle.live:
            return None
        held = _Operation(operation_id, command)
        self._held_for_room.setdefault(operation_id, held)
        try:
            with held.scope:
                while len(self._operations) >= MAX_PENDING_OPERATIONS and self.lifecycle.live:
                    if self._operation_room is None:
                        self._operation_room = trio.Event()
                    await self._operation_room.wait()
        finally:
            if self._held_for_room.get(operation_id) is held:
                del self._held_for_room[operation_id]
        return held.cancel_reason

    def _end_unsent(
        self, command: str, operation_id: str, reason: str, timeout_ms: int | None
    ) -> JSONValue:
        """An operation ``debug.cancelOperation`` named while it still waited for its turn in
        the session's line: it fails now as :meth:`cancel_operation` fails a pending one
        (``operationFailed`` with ``reason``, the caller gets ``cancelled`` or
        ``timed_out``), and nothing is sent to the adapter."""
        operation = _Operation(operation_id, command, cancel_reason=reason)
        self._settle(operation, self._cancelled(operation, reason))
        timeout = timeout_ms if timeout_ms is not None else DEFAULT_OPERATION_TIMEOUT_MS
        return self._answer(operation, timeout, [])

    def _cancelled(self, operation: _Operation, reason: str) -> JSONObject:
        message = (
            "The operation was cancelled" if reason == "cancelled" else "The operation timed out"
        )
        return self._outcome(operation, message=message, reason=reason)

    def cancel_operation(self, operation_id: str, reason: str) -> bool:
        """``debug.cancelOperation``: fail a pending operation now.

        The pending request is removed first, then ``operationFailed`` is emitted with
        ``reason`` (``cancelled`` or ``timedOut``), then DAP ``cancel`` is sent when the
        adapter advertised ``supportsCancelRequest``; the waiting caller gets ``cancelled`` or
        ``timed_out``.

        Returns:
            True when the operation was pending.
        """
        operation = self._operations.get(operation_id)
        if operation is None:
            held = self._held_for_room.get(operation_id)
            if held is None or held.cancel_reason is not None:
                return False
            held.cancel_reason = reason  # it fails unsent (_wait_for_room)
            held.scope.cancel()
            return True
        if operation.done:
            return False
        seq = operation.seq
        operation.cancel_reason = reason
        self._settle(operation, self._cancelled(operation, reason))
        operation.scope.cancel()
        if seq is not None:
            self._send_cancel(seq)
        return True

    def _adapter_refused(self, response: DAPResponse, code: str = "invalid_request") -> CoreError:
        message = response.message or "failed"
        body = response.body
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            fmt = body["error"].get("format")  # type: ignore[union-attr]
            if isinstance(fmt, str):
                message = fmt
        return CoreError(
            code,
            f"The debug adapter refused {response.command}: {message}",
            {"command": response.command, "adapterMessage": message, "reason": "adapterError"},
        )

    # -- initialize, launch, configuration -----------------------------------------------

    async def _initialize(self) -> None:
        arguments: JSONObject = {
            "clientID": "trio-process-supervisor",
            "clientName": "trio-process-supervisor",
            "adapterID": self.adapter_id,
            "pathFormat": "path",
            "linesStartAt1": True,
            "columnsStartAt1": True,
            "supportsVariableType": True,
            "supportsVariablePaging": True,
            "supportsRunInTerminalRequest": self.supports_run_in_terminal,
            "supportsStartDebuggingRequest": self._start_child is not None,
            "locale": "en",
        }
        fault_point("dap.initialize")
        with trio.move_on_after(self.spec.initialize_timeout_ms / 1000) as deadline:
            try:
                response = await self._request("initialize", arguments)
            except _SessionEnded:
                return
        if deadline.cancelled_caught:
            logger.warning(
                "debug adapter %s did not answer initialize within %d ms",
                self.session_id,
                self.spec.initialize_timeout_ms,
            )
            self._start_fact("host.timedOut")
            self._end_transport("initializeTimeout")
            return
        if not response.success:
            logger.warning("debug adapter %s refused initialize", self.session_id)
            self._start_fact("host.initializeFailed")
            self._end_transport("initializeFailed")
            return
        self._start_fact(None)
        self.capabilities = normalize_capabilities(response.body)
        self._move(DebugInput.RECV_INITIALIZE_RESPONSE)
        self._emit("capabilities", {"capabilities": self.capabilities})
        self._initialize_answered.set()
        self._wake()
        self._configuration_input(ConfigurationInput.RECV_INITIALIZE_RESPONSE)

    async def start(self, kind: str, configuration: JSONObject, operation: _Operation) -> JSONValue:
        """``debug.launch`` / ``debug.attach``: held until ``initialize`` is answered.

        Its request goes before the configuration when both may go at once (the adapter sent
        ``initialized`` before its ``initialize`` response); its answer may come after
        ``configurationDone`` (debugpy), so only its request, not its answer, holds the
        configuration back.
        """
        if self.lifecycle.request_kind is not None:
            raise CoreError("invalid_request", "The debug session was already launched or attached")
        self.lifecycle.request_kind = kind
        sequence = self.lifecycle.configuration
        sequence.start_held = True
        try:
            await self._wait_until(self._initialize_answered.is_set)
            self._move(DebugInput.SEND_START)
            response = await self._request(
                kind, configuration, operation, queued=self._start_queued
            )
        except BaseException:
            if self.state in (DebugState.READY, DebugState.STARTING, DebugState.INITIALIZING):
                self.lifecycle.request_kind = None
                if self.state is DebugState.STARTING:
                    self._move(DebugInput.RECV_START_FAILED)
            raise
        finally:
            # Queued, refused, cancelled or ended: the configuration waits no more.
            self._start_queued()
        if not response.success:
            self.lifecycle.request_kind = None
            self._move(DebugInput.RECV_START_FAILED)
            raise self._adapter_refused(response, "launch_failed")
        self._move(DebugInput.RECV_START_RESPONSE)
        return {"requestKind": kind}

    def _start_queued(self) -> None:
        sequence = self.lifecycle.configuration
        if sequence.start_held:
            sequence.start_held = False
            self._configuration_moved()

    def _wake(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    async def _wait_until(self, ready: Callable[[], bool]) -> None:
        """Return once ``ready()`` holds.

        Raises:
            _SessionEnded: the session's transport ended first.
        """
        while not ready():
            if self._transport_done.is_set():
                raise _SessionEnded
            await self._progress.wait()

    def _configuration_input(self, event: ConfigurationInput) -> None:
        if self.lifecycle.configuration.handle(event):
            self._configuration_moved()

    def _configuration_moved(self) -> None:
        """Begin the configuration when it is due (once: :class:`ConfigurationSequence`).

        Its requests are planned here, synchronously, from the sets recorded so far, so a
        set recorded before is part of it and one made later waits for it.
        """
        self._wake()
        sequence = self.lifecycle.configuration
        if not sequence.due or self._nursery is None or self._transport_done.is_set():
            return
        if self._ending():
            return
        plan = sequence.begin(
            self.capabilities or {},
            exception_filters=self.exception_filters,
            function_breakpoints=self.function_breakpoints,
            data_breakpoints=self.data_breakpoints,
            source_breakpoints=self.source_breakpoints,
        )
        self._nursery.start_soon(self._contained, functools.partial(self._configure, plan))

    async def _configure(self, plan: tuple[ConfigurationRequest, ...]) -> None:
        """Send the configuration's requests, each after the previous one's answer (an
        adapter's refusal of one does not stop the others); the sets that waited for it go
        once its last request is queued."""
        fault_point("dap.configure")
        try:
            for index, request in enumerate(plan):
                last = index == len(plan) - 1
                await self._request(
                    request.command,
                    request.arguments,
                    queued=self._configuration_finished if last else None,
                )
        except _SessionEnded:
            return

    def _configuration_finished(self) -> None:
        self.lifecycle.configuration.finish()
        self._wake()

    async def _may_send_set(self, supported: bool) -> bool:
        """Whether a replaced set goes to the adapter: not before the configuration began
        (it is sent as part of it), right after it while it is being sent, directly once it
        was sent; never when the adapter does not support it."""
        sequence = self.lifecycle.configuration
        action = sequence.set_action
        if action is SetAction.RECORD or not supported:
            return False
        if action is SetAction.WAIT:
            await self._wait_until(lambda: sequence.state is ConfigurationState.CONFIGURED)
        return True

    async def set_source_breakpoints(
        self, path: str, breakpoints: tuple[SourceBreakpoint, ...], operation: _Operation
    ) -> JSONValue:
        """Replace one source's set; kept for the configuration until it was sent, then
        sent directly (:meth:`_may_send_set`)."""
        if breakpoints:
            self.source_breakpoints[path] = breakpoints
        else:
            self.source_breakpoints.pop(path, None)
        wire: list[JSONValue] = [bp.to_wire() for bp in breakpoints]
        if not await self._may_send_set(supported=True):
            return {"path": path, "breakpoints": wire, "sent": False}
        caps = self.capabilities or {}
        response = await self._request(
            "setBreakpoints", source_breakpoints_arguments(path, breakpoints, caps), operation
        )
        if not response.success:
            raise self._adapter_refused(response)
        reported = response.body.get("breakpoints") if isinstance(response.body, dict) else None
        answers = iter(reported if isinstance(reported, list) else [])
        for entry, bp in zip(wire, breakpoints, strict=True):
            if not bp.enabled or not isinstance(entry, dict):
                continue
            answer = next(answers, None)
            if isinstance(answer, dict):
                entry["verified"] = answer.get("verified") is True
                if _int(answer.get("id")) is not None:
                    entry["id"] = answer["id"]
                if isinstance(answer.get("message"), str):
                    entry["message"] = answer["message"]
        return {"path": path, "breakpoints": wire, "sent": True}

    async def set_function_breakpoints(
        self, breakpoints: tuple[FunctionBreakpoint, ...], operation: _Operation
    ) -> JSONValue:
        """Replace the function breakpoint set; sent only with ``supportsFunctionBreakpoints``."""
        self.function_breakpoints = breakpoints
        caps = self.capabilities or {}
        return await self._send_set(
            "breakpoints",
            [bp.to_wire() for bp in breakpoints],
            bool(caps.get("supportsFunctionBreakpoints")),
            "setFunctionBreakpoints",
            lambda: function_breakpoints_arguments(breakpoints, caps),
            operation,
        )

    async def set_exception_filters(
        self, filters: tuple[ExceptionFilter, ...], operation: _Operation
    ) -> JSONValue:
        """Replace the exception filter selection; sent when the adapter declared filters."""
        self.exception_filters = filters
        caps = self.capabilities or {}
        return await self._send_set(
            "filters",
            [f.to_wire() for f in filters],
            bool(caps.get("exceptionBreakpointFilters")),
            "setExceptionBreakpoints",
            lambda: exception_breakpoints_arguments(filters, caps),
            operation,
        )

    async def _send_set(
        self,
        key: str,
        wire: list[JSONValue],
        supported: bool,
        command: str,
        arguments: Callable[[], JSONObject],
        operation: _Operation,
    ) -> JSONValue:
        """Send a replaced set to the adapter when it supports it and the configuration
        allows (:meth:`_may_send_set`); the answer says whether it was sent (a set kept for
        later is sent with the configuration)."""
        if not await self._may_send_set(supported):
            return {key: wire, "sent": False}
        response = await self._request(command, arguments(), operation)
        if not response.success:
            raise self._adapter_refused(response)
        return {key: wire, "sent": True}

    # -- execute and inspect -------------------------------------------------------------

    async def execute(
        self,
        command: str,
        thread_id: int | None,
        single_thread: bool,
        operation: _Operation,
        target_id: int | None = None,
    ) -> JSONValue:
        """``debug.execute``: refused before sending unless the state and capabilities allow.

        After a resuming command the session is running -- unless only one thread resumed
        (``singleThread``, or ``allThreadsContinued: false`` in the adapter's answer): the
        other threads stay stopped, so the session stays paused (the Core API contract).
        """
        plan = check_execute(
            self.lifecycle, self.capabilities, command, thread_id, single_thread, target_id
        )
        stops_before = self._stop_count
        response = await self._request(plan.command, plan.arguments, operation)
        if not response.success:
            raise self._adapter_refused(response)
        # debugpy may report the step's `stopped` before it answers the step: the answer
        # then means nothing about the current state.
        if plan.command in RESUMING and self._stop_count == stops_before:
            all_threads = not single_thread
            body = response.body
            if plan.command == "continue" and isinstance(body, dict):
                all_threads = all_threads and body.get("allThreadsContinued") is not False
            thread = plan.arguments.get("threadId")
            self._resumed(thread if isinstance(thread, int) else None, all_threads)
        return {}

    def _resumed(self, thread_id: int | None, all_threads: bool) -> None:
        """One ``continued`` event; the state leaves paused only when every thread runs."""
        if not all_threads:
            if self.state is DebugState.PAUSED:
                self._emit("continued", {"threadId": thread_id, "allThreadsContinued": False})
            return
        if self.lifecycle.handle(DebugInput.RECV_CONTINUED):
            self._emit("continued", {"threadId": thread_id, "allThreadsContinued": True})
            self._emit("stateChanged", {"state": self.state.value})

    async def set_variable(self, arguments: JSONObject, operation: _Operation) -> JSONValue:
        """``debug.setVariable``: only while paused, after ``supportsSetVariable``."""
        self._require_paused("debug.setVariable", "supportsSetVariable")
        response = await self._request("setVariable", arguments, operation)
        if not response.success:
            raise self._adapter_refused(response)
        return normalize_result("setVariable", response.body)

    async def data_breakpoint_info(self, arguments: JSONObject, operation: _Operation) -> JSONValue:
        """``debug.dataBreakpointInfo``: only while paused, after ``supportsDataBreakpoints``."""
        self._require_paused("debug.dataBreakpointInfo", "supportsDataBreakpoints")
        response = await self._request("dataBreakpointInfo", arguments, operation)
        if not response.success:
            raise self._adapter_refused(response)
        return normalize_result("dataBreakpointInfo", response.body)

    async def set_data_breakpoints(
        self, breakpoints: tuple[DataBreakpoint, ...], operation: _Operation
    ) -> JSONValue:
        """Replace the data breakpoint set; sent only with ``supportsDataBreakpoints``."""
        self.data_breakpoints = breakpoints
        caps = self.capabilities or {}
        return await self._send_set(
            "breakpoints",
            [bp.to_wire() for bp in breakpoints],
            bool(caps.get("supportsDataBreakpoints")),
            "setDataBreakpoints",
            lambda: data_breakpoints_arguments(breakpoints, caps),
            operation,
        )

    def _require_paused(self, command: str, capability: str) -> None:
        if not (self.capabilities or {}).get(capability):
            raise CoreError("not_supported", f"{command}: the debug adapter lacks {capability}")
        if self.state is not DebugState.PAUSED:
            raise CoreError(
                "invalid_request", f"{command}: the session is {self.state.value}, not paused"
            )

    async def inspect(self, kind: str, arguments: JSONObject, operation: _Operation) -> JSONValue:
        """``debug.inspect``: ``arguments`` were validated by the service."""
        paused_only = kind in (
            "stackTrace",
            "scopes",
            "variables",
            "exceptionInfo",
            "stepInTargets",
            "gotoTargets",
        )
        state = self.state
        if paused_only and state is not DebugState.PAUSED:
            raise CoreError(
                "invalid_request", f"debug.inspect {kind}: the session is {state.value}, not paused"
            )
        if state not in (DebugState.RUNNING, DebugState.PAUSED):
            raise CoreError(
                "invalid_request", f"debug.inspect {kind}: the session is {state.value}"
            )
        capability = _INSPECT_CAPABILITY.get(kind)
        if capability is not None and not (self.capabilities or {}).get(capability):
            raise CoreError("not_supported", f"The debug adapter does not support {kind}")
        response = await self._request(kind, arguments, operation)
        if not response.success:
            raise self._adapter_refused(response)
        return normalize_result(kind, response.body)

    # -- inbound -------------------------------------------------------------------------

    def _dispatch(self, message: DAPEvent | DAPRequest | DAPResponse) -> None:
        if isinstance(message, DAPResponse):
            pending = self._pending.pop(message.request_seq, None)
            if pending is None:
                return  # late (cancelled, timed out) or unknown: ignored, never forwarded
            pending.response = message
            pending.done.set()
        elif isinstance(message, DAPEvent):
            self._on_event(message)
        else:
            assert self._nursery is not None
            self._nursery.start_soon(self._on_reverse_request, message)

    def _on_event(self, message: DAPEvent) -> None:
        body = message.body if isinstance(message.body, dict) else {}
        name = message.event
        if name == "initialized":
            self._emit("initialized")
            self._configuration_input(ConfigurationInput.RECV_INITIALIZED)
        elif name == "stopped":
            self._stop_count += 1
            thread = _int(body.get("threadId"))
            if thread is not None:
                self.lifecycle.selected_thread = thread
            changed = self.lifecycle.handle(DebugInput.RECV_STOPPED)
            hit = body.get("hitBreakpointIds")
            self._last_stop = {
                "reason": body.get("reason") if isinstance(body.get("reason"), str) else "unknown",
                "threadId": thread,
                "allThreadsStopped": body.get("allThreadsStopped") is True,
                "description": body.get("description")
                if isinstance(body.get("description"), str)
                else None,
                "text": body.get("text") if isinstance(body.get("text"), str) else None,
                "hitBreakpointIds": [i for i in hit if _int(i) is not None]
                if isinstance(hit, list)
                else [],
            }
            self._emit("stopped", dict(self._last_stop))
            if changed:
                self._emit("stateChanged", {"state": self.state.value})
        elif name == "continued":
            self._resumed(_int(body.get("threadId")), body.get("allThreadsContinued") is not False)
        elif name == "output":
            text = body.get("output")
            if isinstance(text, str):
                output, truncated = _cut(text, _MAX_OUTPUT_CHARS)
                category = body.get("category")
                params: JSONObject = {
                    "category": category if isinstance(category, str) else "console",
                    "output": output,
                }
                if truncated:
                    params["truncated"] = True
                self._emit("output", params)
        elif name == "thread":
            self._emit(
                "thread",
                {
                    "reason": body.get("reason") if isinstance(body.get("reason"), str) else "",
                    "threadId": _int(body.get("threadId")),
                },
            )
        elif name == "breakpoint":
            self._emit(
                "breakpoint",
                {
                    "reason": body.get("reason") if isinstance(body.get("reason"), str) else "",
                    "breakpoint": body.get("breakpoint"),
                },
            )
        elif name == "exited":
            self._emit("exited", {"exitCode": _int(body.get("exitCode"))})
        elif name == "terminated" and not self._disconnect_started and self._nursery is not None:
            # The debuggee is over: end the session as an IDE does (disconnect, then the
            # adapter). Our `terminated` event follows once everything is gone.
            self._nursery.start_soon(self._contained, self._stop_after_terminated)
        elif name not in ("initialized", "stopped", "continued", "terminated"):
            # Events outside our contract (process, module, loadedSource, an adapter's own
            # extensions) reach the client as they came: it may know what to do with them.
            self._emit("adapterEvent", {"name": name, "body": message.body})

    async def _stop_after_terminated(self) -> None:
        await self.stop(reason="debuggeeTerminated")

    async def _on_reverse_request(self, request: DAPRequest) -> None:
        try:
            fault_point("dap.reverse")
            await self._serve_reverse_request(request)
        except Exception as exc:
            # That request fails alone: the adapter is told, the session goes on.
            log_failure(f"debug session {self.session_id} reverse {request.command}", exc)
            await self._respond(request, success=False, message=internal_message(exc))

    async def _serve_reverse_request(self, request: DAPRequest) -> None:
        if request.command == "startDebugging" and self._start_child is not None:
            await self._start_debugging(request)
            return
        if request.command != "runInTerminal" or not self.supports_run_in_terminal:
            # Also a runInTerminal the client never advertised (initialize's
            # supportsRunInTerminalRequest): refused, nothing starts.
            await self._respond(
                request, success=False, message=f"{request.command} is not supported"
            )
            return
        arguments = request.arguments if isinstance(request.arguments, dict) else {}
        args = arguments.get("args")
        cwd = arguments.get("cwd")
        env = arguments.get("env")
        if (
            not isinstance(args, list)
            or not args
            or not all(isinstance(a, str) for a in args)
            or (cwd is not None and not isinstance(cwd, str))
            or (env is not None and not isinstance(env, dict))
        ):
            await self._respond(request, success=False, message="runInTerminal: invalid arguments")
            return
        argv = [a for a in args if isinstance(a, str)]
        env_changes: dict[str, str | None] = {}
        for key, value in (env or {}).items():
            env_changes[key] = value if isinstance(value, str) else None
        request_id = f"rit-{next(self._terminal_ids)}"
        event: JSONObject = {
            "requestId": request_id,
            "kind": arguments.get("kind")
            if arguments.get("kind") in ("integrated", "external")
            else "integrated",
            "title": arguments.get("title") if isinstance(arguments.get("title"), str) else "",
            "cwd": cwd if isinstance(cwd, str) else None,
            "args": list(argv),
            "env": {key: env_changes[key] for key in sorted(env_changes)},
            "argsCanBeInterpretedByShell": arguments.get("argsCanBeInterpretedByShell") is True,
            "handledBy": self.run_in_terminal_handler,
        }
        if self.run_in_terminal_handler == "host":
            self._terminal_requests[request_id] = _TerminalRequest(request)
            self._emit("runInTerminalRequested", event)
            return
        if self.stop_started:
            await self._respond(request, success=False, message="The debug session is ending")
            return
        assert self._nursery is not None
        try:
            # Both kinds get a PTY of ours: the supervisor has no window to open an
            # "external" terminal in, and a PTY is what an integrated terminal gives the
            # program (isatty, job control, SIGWINCH).
            process = await TerminalProcess.start(
                self._nursery,
                argv,
                cwd=cwd or None,
                env=env_changes,
                rows=_TERMINAL_ROWS,
                cols=_TERMINAL_COLS,
                display=RetainedDisplay(_TERMINAL_ROWS, _TERMINAL_COLS),
                on_output=functools.partial(self._terminal_output, request_id),
                on_exit=functools.partial(self._terminal_exited, request_id),
                on_failure=functools.partial(self._terminal_failed, request_id),
            )
        except CoreError as exc:
            event["error"] = exc.message
            self._emit("runInTerminalRequested", event)
            await self._respond(request, success=False, message=exc.message)
            return
        self._terminals.append(process)
        if self.stop_started:
            # The session ended during the spawn: nothing may outlive it.
            with trio.CancelScope(shield=True):
                await process.end(_TERMINAL_END_BOUNDS)
            await self._respond(request, success=False, message="The debug session is ending")
            return
        event["processId"] = process.pid
        self._emit("runInTerminalRequested", event)
        await self._respond(request, success=True, body={"processId": process.pid})

    async def _start_debugging(self, request: DAPRequest) -> None:
        """DAP ``startDebugging``: a child session of the same adapter, owned by this one.

        The child runs in this session's nursery, is listed by ``debug.listSessions`` (with
        ``parentSessionId``), has its own events, starts with this session's breakpoints and
        is stopped with it. The answer goes back once the child's adapter is reached; the
        child's ``launch``/``attach`` (with the adapter's ``configuration``) follows as an
        operation of the child.
        """
        arguments = request.arguments if isinstance(request.arguments, dict) else {}
        kind = arguments.get("request")
        configuration = arguments.get("configuration")
        if kind not in ("launch", "attach") or not isinstance(configuration, dict):
            await self._respond(request, success=False, message="startDebugging: invalid arguments")
            return
        assert isinstance(kind, str)
        assert self._start_child is not None
        assert self._nursery is not None
        if self._ending():
            await self._respond(request, success=False, message="The debug session is ending")
            return
        try:
            child = await self._start_child(self, self._child_spec(configuration), self._nursery)
        except CoreError as exc:
            await self._respond(request, success=False, message=exc.message)
            return
        self.children.append(child)
        name = configuration.get("name")
        self._emit(
            "childSessionStarted",
            {
                "childSessionId": child.session_id,
                "request": kind,
                "name": name if isinstance(name, str) else None,
            },
        )
        if self._ending():
            # This session began to end while the child started: the child ends too.
            await child.stop(reason="parentStopped")
            await self._respond(request, success=False, message="The debug session is ending")
            return
        await self._respond(request, success=True)
        try:
            await self._start_child_request(child, kind, configuration)
        except Exception as exc:
            # Answered already: a bug here is the child's (logged), not a second answer.
            log_failure(f"debug session {child.session_id} {kind}", exc)

    def _ending(self) -> bool:
        return self.stop_started or self._disconnect_started

    def _child_spec(self, configuration: JSONObject) -> AdapterSpec:
        """Where a child session's adapter is: a loopback ``connect`` endpoint named by the
        configuration (debugpy hands out its own client endpoint this way, as VS Code's
        Python extension expects), else this session's TCP endpoint (an adapter serving
        several clients), else a new adapter process from this session's spec."""
        spec = self.spec
        connect = configuration.get("connect")
        if isinstance(connect, dict) and _int(connect.get("port")) is not None:
            host = connect.get("host", "127.0.0.1")
            port = _int(connect.get("port"))
            if not isinstance(host, str) or port is None or not 0 < port < 65536:
                raise CoreError("invalid_request", "startDebugging: invalid connect endpoint")
            return AdapterSpec(
                argv=None,
                transport="tcpPort",
                host=check_loopback(host),
                port=port,
                connect_timeout_ms=spec.connect_timeout_ms,
                initialize_timeout_ms=spec.initialize_timeout_ms,
            )
        if self._endpoint is not None:
            host, port = self._endpoint
            return dataclasses.replace(spec, argv=None, transport="tcpPort", host=host, port=port)
        return spec

    async def _start_child_request(
        self, child: DebugSession, kind: str, configuration: JSONObject
    ) -> None:
        try:
            await child.run_operation(
                f"debug.{kind}", None, None, lambda op: child.start(kind, configuration, op)
            )
        except CoreError as exc:
            # The child's own operationFailed event reports it; the child stays listed.
            logger.warning(
                "debug session %s: child %s %s failed: %s",
                self.session_id,
                child.session_id,
                kind,
                exc.message,
            )

    async def _stop_children(self) -> None:
        """Stop every child session, concurrently; each stop is bounded and joinable."""
        async with trio.open_nursery() as nursery:
            for child in list(self.children):
                nursery.start_soon(functools.partial(child.stop, reason="parentStopped"))

    def _terminal_output(self, request_id: str, text: str) -> None:
        # A PTY merges stdout and stderr; the requestId tells which terminal wrote it.
        output, truncated = _cut(text, _MAX_OUTPUT_CHARS)
        params: JSONObject = {"category": "stdout", "output": output, "requestId": request_id}
        if truncated:
            params["truncated"] = True
        self._emit("output", params)

    def _terminal_exited(self, request_id: str, process: TerminalProcess) -> None:
        self._emit(
            "runInTerminalExited",
            {
                "requestId": request_id,
                "processId": process.pid,
                "exitCode": None,
                "signal": None,
                "signalName": None,
                **exit_detail(process.returncode),
            },
        )

    def _terminal_failed(
        self, request_id: str, process: TerminalProcess, failure: Exception
    ) -> None:
        """A runInTerminal terminal's task raised (logged): end that terminal only."""
        assert self._nursery is not None
        # Ended here, shielded, inside the session's nursery (which the teardown outlives
        # only after it): the teardown must not end it a second time concurrently.
        if process in self._terminals:
            self._terminals.remove(process)

        async def end() -> None:
            with trio.CancelScope(shield=True):
                try:
                    await process.end(_TERMINAL_END_BOUNDS)
                except Exception as exc:
                    log_failure(f"debug session {self.session_id} terminal {request_id}", exc)
                    await process.abort(_TERMINAL_END_BOUNDS)
            self._emit(
                "runInTerminalExited",
                {
                    "requestId": request_id,
                    "processId": process.pid,
                    "exitCode": None,
                    "signal": None,
                    "signalName": None,
                    **exit_detail(process.returncode),
                    "reason": "internal",
                    "crashReport": crash_report(failure),
                },
            )

        self._nursery.start_soon(end)

    async def _respond(
        self,
        request: DAPRequest,
        *,
        success: bool,
        body: JSONValue = None,
        message: str | None = None,
    ) -> None:
        frame = self._conn.respond(request, success=success, body=body, message=message)
        with contextlib.suppress(_SessionEnded):
            await self._send(frame)

    async def run_in_terminal_response(
        self,
        request_id: str,
        success: bool,
        process_id: int | None,
        shell_process_id: int | None,
        message: str | None,
    ) -> bool:
        """``debug.runInTerminalResponse``: answer the adapter once; duplicates are ignored.

        Returns:
            True when the answer was sent, False for a duplicate, late or unknown request.
        """
        entry = self._terminal_requests.get(request_id)
        if entry is None or entry.answered or not self.lifecycle.live:
            return False
        entry.answered = True
        del self._terminal_requests[request_id]
        body: JSONObject = {}
        if process_id is not None:
            body["processId"] = process_id
        if shell_process_id is not None:
            body["shellProcessId"] = shell_process_id
        await self._respond(entry.request, success=success, body=body or None, message=message)
        return True

    # -- stopping ------------------------------------------------------------------------

    async def stop(self, *, reason: str = "disconnected") -> JSONObject:
        """``debug.disconnect``: the DAP stop sequence; a second call joins the first.

        Returns:
            The ``terminated`` detail: ``{reason, exitCode, signal, signalName, forced,
            stderrTail?, crashReport?}`` (``signal`` a number, ``signalName`` its name).

        **Cancellation:** shielded and bounded: 2 000 ms for the reply, 1 000 ms for the
        adapter's exit, 2 000 ms TERM grace, then SIGKILL.
        """
        with trio.CancelScope(shield=True):
            if self._disconnect_started or self.stop_started:
                # A stop (or the session's own end) is in progress: join it; starting the
                # teardown now would cut the first stop's polite step short.
                await self.wait_ended()
            else:
                self._disconnect_started = True
                try:
                    await self._disconnect(reason)
                finally:
                    # Even when the polite step broke, the first caller ends everything.
                    await self._teardown()
            # The first caller ended everything; a later one (or a crash) joined it.
            detail = await self._teardown()
        return detail

    async def _disconnect(self, reason: str) -> None:
        """The DAP stop sequence's polite step: fail the pending terminal requests, then
        ``disconnect`` (each bounded by the disconnect-reply bound)."""
        self._end_reason = reason
        if self.lifecycle.live:
            self._move(DebugInput.SEND_DISCONNECT)
        # Children first: their adapters (or connections) may belong to this one.
        await self._stop_children()
        # the Core API contract: pending terminal requests fail when the session disconnects;
        # a host answer after this point is late and ignored.
        for request_id in list(self._terminal_requests):
            entry = self._terminal_requests.pop(request_id)
            entry.answered = True
            if not self._transport_done.is_set():
                with trio.move_on_after(DEFAULT_DISCONNECT_REPLY_MS / 1000):
                    await self._respond(
                        entry.request,
                        success=False,
                        message="The debug session is disconnecting",
                    )
        if not self._transport_done.is_set() and self._initialize_answered.is_set():
            arguments: JSONObject = {
                "restart": False,
                "terminateDebuggee": self.lifecycle.terminate_debuggee,
            }
            with trio.move_on_after(DEFAULT_DISCONNECT_REPLY_MS / 1000):
                with contextlib.suppress(_SessionEnded):
                    await self._request("disconnect", arguments)

    async def _close_input(self) -> None:
        self._writes.close("closed")
        for stream in (self._socket, self._tree.stdin if self._tree is not None else None):
            if stream is not None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.aclose()

    async def _end_input(self) -> None:
        """The ladder's polite step: the adapter's input ends, its output is still read.

        Its stdin is closed; a socket only stops sending (the adapter sees end of file and
        may still send its last events), or is closed when the writer still holds it.
        """
        self._writes.close("closed")  # what is queued is still written, then the writer ends
        if self._tree is not None and self._tree.stdin is not None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._tree.stdin.aclose()
        if self._socket is not None:
            try:
                await self._socket.send_eof()
            except (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await self._socket.aclose()

    def _heard_chunks(self) -> int:
        """Reads of the adapter's output so far: the transport's and the drains' (stderr,
        a TCP adapter's stdout); the stop ladder's drain goes on while it grows."""
        transport = self._transport
        return self._heard + (0 if transport is None else transport.chunks_read)

    async def _close_tree(self) -> JSONObject:
        tree = self._tree
        if tree is None:
            return {}
        report = await stop_ladder(
            tree,
            _STOP_BOUNDS,
            polite=self._end_input,
            drained=self._output_ended,
            progress=self._heard_chunks,
        )
        return {
            "exitCode": None,
            "signal": None,
            "signalName": None,
            **exit_detail(report.returncode),
            "forced": bool(report.killed),
        }

    async def _teardown(self) -> JSONObject:
        """End everything (idempotent, joinable): the adapter's tree, the socket, the
        runInTerminal processes; fail pending operations; emit ``terminated`` once.

        Returns:
            The ``terminated`` detail (:meth:`stop`); every caller gets the same one.

        **Cancellation:** shielded and bounded (see :meth:`stop`).
        """
        return await self._stop_once(self._end_everything, fallback=self._fallback_detail)

    def _fallback_detail(self) -> JSONObject:
        # The teardown itself broke (logged by run): the end is still recorded.
        return self._terminated_detail or {"reason": self._end_reason}

    async def _end_everything(self) -> JSONObject:
        """The teardown's steps, run once (:meth:`_teardown`)."""
        self._end_transport(self._end_reason)
        # Pending requests end now: their operations fail with "session ended".
        for pending in list(self._pending.values()):
            pending.done.set()
        self._pending.clear()
        # The adapter's tree and the runInTerminal PTYs end concurrently: the
        # bound is the longest of them, not their sum.
        detail: JSONObject = {}

        async def close_adapter() -> None:
            nonlocal detail
            detail = await self._close_tree()
            await self._close_input()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_adapter)
            nursery.start_soon(self._stop_children)
            for process in self._terminals:
                nursery.start_soon(process.end, _TERMINAL_END_BOUNDS)
        self._terminal_requests.clear()
        self._terminated_detail = {"reason": self._end_reason, **detail}
        if self._end_reason not in (
            "disconnected",
            "debuggeeTerminated",
            "supervisorClosing",
            "parentStopped",
        ):
            crash = self._crash_details()
            if "stderrTail" in crash:
                self._terminated_detail["stderrTail"] = crash["stderrTail"]
        if self.failure is not None:
            self._terminated_detail["reason"] = "internal"
            self._terminated_detail["crashReport"] = self._crash_report()
            self._move(DebugInput.FAILED_INTERNAL)
        else:
            self._move(DebugInput.RECV_ENDED)
        self._emit("terminated", dict(self._terminated_detail))
        return self._terminated_detail
