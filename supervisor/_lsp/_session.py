"""One language-server session: its generations, handshake, requests, events and stop.

Contract (the Core API contract ``lsp.*``; LSP 3.17 "Lifecycle Messages" for the stop):

Cancel-scope tree of a session, all under the LSP service's nursery::

    session task (LspSession.run)       owns the session nursery
    |- one task per pending request       its own cancel scope: deadline, lsp.cancelOperation
    `- generation (one at a time)         a process tree + a JSON-RPC endpoint on its stdio
       |- stderr drain                    always reading, last lines kept in a bounded ring
       |- exit watcher, endpoint watcher  a crash cancels the generation's drive scope
       `- drive scope                     handshake, readiness gates, then waits

A plugin-owned session writes to its backend with the session's request timeout
as the endpoint's write timeout: a write blocked past it fails the generation as a transport
failure (``transportFailed``, stage ``relayWrite``; the plugin contract "Isolation between
backends"). When a plugin-owned generation ends, ``owner_ended(sessionId)`` disposes what
the Core keeps for that backend (its terminals).

A generation ends in exactly one way, decided once when its drive scope has ended: a stop
(requested by ``stop()``, or by an explicit restart) runs the stop ladder
(:func:`~supervisor._process._ladder.stop_ladder`) with the polite sequence -- ``shutdown``
bounded by ``shutdown_timeout_ms``, ``exit``, a wait -- as its polite step, then TERM and KILL
if needed; anything else is a failure: the tree is ended by the ladder without a polite step
and, with ``restart``, a new generation starts under the :class:`RestartBudget`. Either way
every request of that generation ends at once with ``languageServerUnavailable``. Each
generation has its own endpoint, and every handler checks that its generation is still the
current one, so late messages of an old process never reach the new one.

What a server says while it stops is never lost: its stdout (``window/logMessage`` after
``shutdown``, say) and its stderr are read through the whole ladder and drained until both
end (at most :data:`~supervisor._session.DRAIN_AFTER_EXIT_MS` once the tree is gone), and only
then is the end reported (``stateChanged``, ``lastExit``): on a stop, a restart, the Core
closing (it stops every session), a crash and an internal failure alike.

The stop is owned by the session, not by the caller of ``stop()``: it runs in the session
task, so a caller that gives up does not interrupt it, and a second ``stop()`` joins the first
and gets the same result and timeline, with no earlier kill.

Supervision boundaries (:mod:`supervisor._boundary`): the session is one, and each request is
one inside it. An unexpected exception in a task of the session (the stderr drain, the exit
and endpoint watchers, the handshake, the handler of a server notification, or the session's
own steps) is contained there: it is logged with its traceback, the session's pending
requests and function calls end once with "the session ended" (``languageServerUnavailable``),
the server is ended by the stop ladder (``shutdown`` and ``exit`` when its stdio still works,
then TERM, then KILL), and the session becomes ``failed`` with code ``internal`` and a crash
report (``{exceptionType, message, stderrTail}``) in its ``stateChanged`` event (``reason:
"internal"``), ``lastExit`` and ``lsp.snapshot``. The Core, serve and sibling sessions go on.
A failure inside one request's task ends only that request (``internal``); one inside the
handler of a request the server sent answers only that request (-32603, ``data.code:
"internal"``). Cancellation, ``KeyboardInterrupt`` and ``SystemExit`` propagate.

Restart policy: an internal failure is final -- ``failed`` without a restart, even with
``restart`` on, and it is not counted in the restart budget. It is a bug of ours, not the
server's crash; restarting would meet the same bug again, in a loop.

Fault points (tests and the chaos runner, :func:`~supervisor._boundary.fault_point`):
``lsp.reader`` (a server notification being handled), ``lsp.handshake`` (the start of the
handshake), ``lsp.request`` (one request's task, before it is sent), ``lsp.serverRequest``
(the handler of a request the server sent), ``lsp.stderr`` (each stderr chunk read),
``lsp.exitWatch`` (the exit watcher, once the server has exited). The plugin runtime of a
plugin-owned session adds ``plugin.*`` sites (:mod:`supervisor._plugin._session`).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import signal
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError, ErrorCode, JSONObject

from .._api._lsp import DEFAULT_REQUEST_TIMEOUT_MS, MAX_REQUEST_TIMEOUT_MS
from .._boundary import crash_report, fault_point, internal_message, log_failure, run_contained
from .._endpoint import (
    EndpointClosed,
    JSONRPCError,
    current_admission,
    method_not_found,
    open_jsonrpc_endpoint,
)
from .._plugin._session import CANCELLED_DATA, PluginRuntime, experimental_offer, route_fact
from .._plugin._subscriptions import LATEST_WINS
from .._process._tree import open_process_tree
from .._session import (
    DRAIN_AFTER_EXIT_MS,
    KILL_WAIT_MS,
    TERM_GRACE_MS,
    StderrRing,
    StopBounds,
    exit_detail,
    stop_ladder,
)
from .._session._events import DEFAULT_MAX_EVENTS
from .._session._operations import Operation, OperationTable, run_operation
from .._session._order import Sequencer, Turn
from .._session._resource import SessionResource
from .._session._stderr import DEFAULT_STDERR_LINE_BYTES, DEFAULT_STDERR_LINES
from ._client import DEFAULT_CLIENT_CAPABILITIES, ClientPolicy
from ._documents import DocumentStore
from ._state import (
    FACT_WINDOW_MS,
    FACTS_PER_WINDOW,
    STDERR_LOG_EVENTS_PER_WINDOW,
    STDERR_LOG_WINDOW_MS,
    LspInput,
    LspState,
    QueueShare,
    RateLimit,
    ReadinessTracker,
    RestartBudget,
    next_state,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from protocol import JSONValue, Request

    from .._endpoint import JSONRPCEndpoint
    from .._process._tree import ProcessTree, TreeEndReport
    from .._session._events import EventQueue
    from ._state import Gate
    from ._workspace_state import WorkspaceState

__all__ = (
    "DEFAULT_EXIT_WAIT_MS",
    "DEFAULT_INITIALIZE_TIMEOUT_MS",
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "DEFAULT_SERVICE_READY_ABSOLUTE_MS",
    "DEFAULT_SERVICE_READY_IDLE_MS",
    "DEFAULT_SHUTDOWN_TIMEOUT_MS",
    "EVENT_NOTIFICATIONS",
    "MAX_PENDING_FOR_READINESS",
    "MAX_REQUEST_TIMEOUT_MS",
    "LspServerSpec",
    "LspSession",
    "SessionPolicy",
)

logger = logging.getLogger("supervisor.lsp")

DEFAULT_SHUTDOWN_TIMEOUT_MS: Final = 3_000
DEFAULT_EXIT_WAIT_MS: Final = 2_000
DEFAULT_TERM_GRACE_MS: Final = TERM_GRACE_MS
DEFAULT_KILL_WAIT_MS: Final = KILL_WAIT_MS
DEFAULT_SERVICE_READY_IDLE_MS: Final = 45_000
DEFAULT_SERVICE_READY_ABSOLUTE_MS: Final = 600_000
#: Ours: the handshake bound when the caller gives none.
DEFAULT_INITIALIZE_TIMEOUT_MS: Final = 60_000
#: Requests that may wait for readiness; the next one is ``busy``.
MAX_PENDING_FOR_READINESS: Final = 128
#: A backend's requests for host terminals (ordered per terminal on its connection).
_HOST_TERMINAL_PREFIX: Final = "lithe/host/terminal/"
#: Lines of stderr kept for crash reports and snapshots, and the longest line kept (bytes).
STDERR_RING_LINES: Final = DEFAULT_STDERR_LINES
STDERR_LINE_BYTES: Final = DEFAULT_STDERR_LINE_BYTES
#: Longest ``log`` event message (bytes, cut on a character boundary).
LOG_MESSAGE_BYTES: Final = 8192
#: Server requests that may wait for the host's answer at once (``serverRequest`` events are
#: never dropped, so they are bounded here); the next one fails at once.
MAX_HOST_ANSWERS: Final = 16
#: How long the ``exit`` notification may wait for room in a full write queue.
_EXIT_NOTIFY_MS: Final = 200

#: Server notifications that are events of their own (``diagnostics``, ``log``,
#: ``progress``); ``forwardNotifications: ["*"]`` forwards every other one.
EVENT_NOTIFICATIONS: Final = frozenset(
    {"textDocument/publishDiagnostics", "window/logMessage", "window/showMessage", "$/progress"}
)
#: ``window/logMessage`` / ``window/showMessage`` ``MessageType`` (LSP 3.17) to our levels.
_MESSAGE_LEVELS: Final = {1: "error", 2: "warning", 3: "info", 4: "log", 5: "debug"}

#: The default declared client capabilities (:mod:`supervisor._lsp._client`).
CLIENT_CAPABILITIES: Final[JSONObject] = DEFAULT_CLIENT_CAPABILITIES


def _now_ms() -> float:
    return trio.current_time() * 1000


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes on a character boundary."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


@dataclass(frozen=True)
class SessionPolicy:
    """the plugin contract "Plugin-owned sessions": what a plugin backend may ask of a server."""

    request_methods: frozenset[str] = frozenset()
    commands: frozenset[str] = frozenset()
    serialized_commands: frozenset[str] = frozenset()
    forward_notifications: frozenset[str] = frozenset()


@dataclass(frozen=True)
class LspServerSpec:
    """A validated ``lsp.startServer`` payload (see ``_lsp_service.parse_start``).

    Durations are in milliseconds.
    """

    server_id: str
    argv: list[str]
    env: dict[str, str | None] | None
    cwd: str
    root_uri: str
    initialization_options: JSONValue = None
    workspace_configuration: JSONValue = None
    initialize_timeout_ms: int = DEFAULT_INITIALIZE_TIMEOUT_MS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    shutdown_timeout_ms: int = DEFAULT_SHUTDOWN_TIMEOUT_MS
    exit_wait_ms: int = DEFAULT_EXIT_WAIT_MS
    term_grace_ms: int = DEFAULT_TERM_GRACE_MS
    kill_wait_ms: int = DEFAULT_KILL_WAIT_MS
    service_ready_idle_ms: int = DEFAULT_SERVICE_READY_IDLE_MS
    service_ready_absolute_ms: int = DEFAULT_SERVICE_READY_ABSOLUTE_MS
    gates: tuple[Gate, ...] = ()
    policy: SessionPolicy = field(default_factory=SessionPolicy)
    restart: bool = False
    budget: RestartBudget = field(default_factory=RestartBudget)
    plugin_id: str | None = None
    #: ``hostServices``: the host services a plugin-owned session is granted
    #: (the plugin contract "Plugin functions").
    host_services: frozenset[str] = frozenset()
    #: The per-workspace state directory of this start and its retention, if the host
    #: keeps one (the plugin contract "State and retention").
    workspace_state: WorkspaceState | None = None
    #: The declared client capabilities and the server requests the host answers.
    client: ClientPolicy = field(default_factory=ClientPolicy)
    #: ``contribution``: the plugin that declares this server and the workspace context
    #: ``{contextID, generation}`` it runs for, so the plugin's backend reaches it with the
    #: ``lithe/host/languageServer/*`` methods (the plugin contract "Language server host
    #: methods"); None for a server no backend talks to.
    contribution: tuple[str, JSONObject] | None = None


@dataclass(eq=False)
class _HostAnswer:
    """A server request the host answers (``serverRequest`` / ``lsp.serverRequestResponse``)."""

    method: str
    done: trio.Event = field(default_factory=trio.Event)
    result: JSONValue = None
    error: JSONRPCError | None = None


@dataclass(eq=False)
class _Request(Operation):
    """One request to the server, completed exactly once (:class:`OperationTable`)."""

    method: str
    params: JSONValue
    uri: str | None
    generation: int
    emit_event: bool
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    started_at: float = 0.0
    end_reason: str | None = None
    waiting: bool = False
    #: ``sent`` of the message submitted before this one that was not yet handed to the
    #: endpoint when this one came: this one is written after it (the session's outbox
    #: keeps submission order, docs/architecture.md "The order rule").
    after: trio.Event | None = None
    #: Set when this request was handed to the endpoint, or ended without that.
    sent: trio.Event = field(default_factory=trio.Event)
    #: ``HostNotifications.mark()`` when it came (a plugin session): a host notification
    #: held back to merge (``lsp.hostNotify`` before it) is written first.
    after_notifications: int = 0


@dataclass(eq=False)
class _Generation:
    """One server process and everything tied to it."""

    number: int
    tree: ProcessTree | None = None
    endpoint: JSONRPCEndpoint | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    settled: trio.Event = field(default_factory=trio.Event)
    #: Set once ``initialize`` succeeded and its follow-ups (``initialized``, the open
    #: documents) were sent: from then until readiness, closed gates hold requests only.
    follow_ups_sent: trio.Event = field(default_factory=trio.Event)
    initialized: bool = False
    documents_sent: bool = False
    ready: bool = False
    ended: bool = False
    restart_requested: bool = False
    tracker: ReadinessTracker | None = None
    readiness_changed: trio.Event = field(default_factory=trio.Event)
    #: ``sent`` of the last request or function call submitted to this generation: what
    #: is submitted later is handed to the endpoint after it (see ``_Request.after``).
    last_sent: trio.Event | None = None
    failure: JSONObject | None = None
    started_at_ms: float = 0.0
    #: Set when the main process was seen exited, and when its stderr ended.
    exited: trio.Event = field(default_factory=trio.Event)
    stderr_done: trio.Event = field(default_factory=trio.Event)
    #: The server's last progress, log or show message text (a failure's underlyingMessage).
    last_message: str | None = None
    #: Notifications handled and stderr chunks read: the stop ladder's drain goes on while
    #: this grows.
    heard: int = 0


def _gates_closed(gen: _Generation) -> bool:
    """Whether the generation waits for readiness gates (after its handshake's follow-ups)."""
    return (
        gen.documents_sent and not gen.ready and gen.tracker is not None and not gen.tracker.ready
    )


async def _first_set(*events: trio.Event) -> None:
    """Wait until one of ``events`` is set."""
    if any(event.is_set() for event in events):
        await trio.lowlevel.checkpoint()
        return
    async with trio.open_nursery() as nursery:

        async def wait_one(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait_one, event)


class LspSession(SessionResource[JSONObject]):
    """A language-server session; made and driven by the LSP service.

    Events are bounded beyond the queue's own bound: structured facts by
    :data:`~supervisor._lsp._state.FACTS_PER_WINDOW` per minute (the plugin contract), and
    unclassified stderr lines, which always go to the stderr ring, become ``log`` events
    only within :data:`~supervisor._lsp._state.STDERR_LOG_EVENTS_PER_WINDOW` per second and
    while fewer than ``stderr_log_share`` such events wait undrained. Lines left out are
    counted: the next stderr ``log`` event carries ``droppedLines`` (at the end of stderr a
    last event does), and ``lsp.snapshot`` reports the totals.

    Args:
        session_id: Its id (``sessionId`` on the wire).
        spec: The validated start request.
        events: The session's event queue (``lsp.waitEvents`` / ``lsp.pollEvents``).
        stderr_log_share: Stderr ``log`` events that may wait undrained at a time; the
            service passes a quarter of the queue's bound, so stderr can never take more.
        owner_ended: ``await owner_ended(session_id)`` when a plugin-owned session's
            backend process has ended (each generation): what the Core keeps for that
            owner goes with it (the plugin contract "Plugin-owned native terminals": ending
            the backend session disposes its terminals). Shielded; it bounds itself.
    """

    def __init__(
        self,
        session_id: str,
        spec: LspServerSpec,
        events: EventQueue,
        *,
        stderr_log_share: int = DEFAULT_MAX_EVENTS // 4,
        owner_ended: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self._owner_ended = owner_ended
        self.spec = spec
        self.events = events
        #: Called with ``(session, event, params)`` for every ``stateChanged`` and
        #: ``serverNotification`` event, after it is queued (the service tells the owning
        #: plugin's backend); it must not block.
        self.observer: Callable[[LspSession, str, JSONObject], None] | None = None
        self.state = LspState.STARTING
        self.documents = DocumentStore()
        self.capabilities: JSONObject = {}
        self.server_info: JSONValue = None
        self.workspace_configuration: JSONValue = spec.workspace_configuration
        self.last_exit: JSONObject | None = None
        #: The last stderr lines of every generation (snapshots and crash reports).
        self.stderr = StderrRing(STDERR_RING_LINES, STDERR_LINE_BYTES, self._stderr_line)
        #: The generation whose stderr is being fed to the ring (lines of an older one
        #: go to the ring only, never to events).
        self._stderr_gen: _Generation | None = None
        self._stderr_rate = RateLimit(STDERR_LOG_EVENTS_PER_WINDOW, STDERR_LOG_WINDOW_MS)
        self._stderr_share = QueueShare(stderr_log_share)
        self._stderr_lines = 0
        self._stderr_not_queued = 0
        #: Lines left out since the last stderr ``log`` event (its ``droppedLines``).
        self._stderr_unreported = 0
        self._facts = RateLimit(FACTS_PER_WINDOW, FACT_WINDOW_MS)
        self._generation_count = 0
        self._gen: _Generation | None = None
        self._nursery: trio.Nursery | None = None
        self._requests: OperationTable[_Request] = OperationTable(self._request_completed)
        self._serialized: dict[str, _Request] = {}
        #: The lines of the host resources a backend's requests act on (its terminals):
        #: docs/architecture.md "The order rule", on the backend's connection.
        self._host_lines = Sequencer()
        self._host_answers: dict[str, _HostAnswer] = {}
        self._host_answer_count = 0
        self._waiting_for_ready = 0
        self._anonymous = 0
        self._stop_started_ms = 0.0
        self._timeline: list[JSONObject] = []
        self._backoff_scope: trio.CancelScope | None = None
        self._restart_started: trio.Event | None = None
        self._final = False
        #: The contained failure that ends the session (the first one), and where it was.
        self._crash: Exception | None = None
        self._crash_stage = ""
        self._crash_reported = False
        #: The plugin-function protocol of a plugin-owned session; None for a
        #: host-owned session, which neither offers nor accepts it.
        self.plugin: PluginRuntime | None = None
        if spec.plugin_id is not None:
            self.plugin = PluginRuntime(
                session_id,
                spec.plugin_id,
                spec.host_services,
                emit=self._emit,
                put_event=self.events.put,
                facts=self._facts,
            )

    # -- queries -------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The current generation number (1 for the first process)."""
        return self._generation_count

    @property
    def pid(self) -> int | None:
        """The current server process id, or None when none runs."""
        gen = self._gen
        if gen is None or gen.tree is None or gen.ended or gen.tree.returncode is not None:
            return None
        return gen.tree.pid

    def snapshot(self, *, include_diagnostics: bool = False) -> JSONObject:
        """``lsp.snapshot``: the session's runtime state (wire-shaped); with
        ``include_diagnostics`` each open document's latest diagnostics too."""
        now = _now_ms()
        pending: list[JSONValue] = [
            {
                "operationId": req.operation_id,
                "method": req.method,
                "generation": req.generation,
                "ageMilliseconds": math.floor(now - req.started_at),
            }
            for req in self._requests
            if req.outcome is None
        ]
        documents: list[JSONValue] = []
        for doc in self.documents.documents():
            entry: JSONObject = {
                "uri": doc.uri,
                "languageId": doc.language_id,
                "version": doc.version,
                "diagnosticCount": len(doc.diagnostics),
            }
            if include_diagnostics:
                entry["diagnostics"] = list(doc.diagnostics)
            documents.append(entry)
        gen = self._gen
        stderr_tail: list[JSONValue] = [*self.stderr.tail()]
        closed_gates: list[JSONValue] = []
        if gen is not None and gen.tracker is not None and not gen.ready:
            closed_gates = list(gen.tracker.closed_gates)
        return {
            "sessionId": self.session_id,
            "serverId": self.spec.server_id,
            "state": self.state.value,
            "generation": self.generation,
            "pid": self.pid,
            "documents": documents,
            "pendingRequests": pending,
            "capabilities": self.capabilities,
            "serverInfo": self.server_info,
            "closedGates": closed_gates,
            "lastExit": self.last_exit,
            "stderrTail": stderr_tail,
            "restart": {"enabled": self.spec.restart, **self.spec.budget.to_wire()},
            "stderr": {"lines": self._stderr_lines, "notQueued": self._stderr_not_queued},
            "facts": self._facts.to_wire(),
            **({"plugin": self.plugin.snapshot()} if self.plugin is not None else {}),
            "events": {
                "queued": self.events.statistics().queued,
                "dropped": self.events.statistics().dropped,
            },
        }

    def diagnostics(self, uri: str) -> list[JSONValue]:
        """The diagnostics kept for the open document ``uri`` (empty when none or not open)."""
        document = self.documents.get(uri)
        return list(document.diagnostics) if document is not None else []

    # -- events and state ----------------------------------------------------------------

    def _emit(self, event: str, params: JSONObject) -> None:
        payload: JSONObject = {
            "sessionId": self.session_id,
            "generation": self.generation,
            **params,
        }
        self.events.put(event, payload)
        if self.observer is not None and event in ("stateChanged", "serverNotification"):
            self.observer(self, event, payload)

    def _transition(self, event: LspInput, **detail: JSONValue) -> None:
        previous = self.state
        self.state = next_state(previous, event)
        if self.state is not previous:
            self._emit(
                "stateChanged",
                {"state": self.state.value, "previousState": previous.value, **detail},
            )

    def _mark(self, step: str, **detail: JSONValue) -> None:
        """Add a step to the stop timeline (milliseconds since the stop was requested)."""
        at = max(0, math.floor(_now_ms() - self._stop_started_ms))
        self._timeline.append({"step": step, "atMilliseconds": at, **detail})

    # -- the session task ----------------------------------------------------------------

    async def run(
        self,
        first_tree: ProcessTree | None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the session until it is stopped or has failed for good.

        The first event is ``stateChanged`` to ``starting`` (``previousState`` null), queued
        before this returns to ``nursery.start``, so every state the session passes through
        is an event, in order.

        Args:
            first_tree: The first server process, already started by the caller (so that a
                launch failure is the caller's error and nothing is left behind); None
                starts it here, where a launch failure is a failed generation (and, with
                ``restart``, is retried under the budget like a crash).

        **Cancellation:** cancelling it ends the current server with the tree cleanup
        (shielded, bounded) and ends every pending request ``languageServerUnavailable``.
        """
        initial: JSONObject = {"state": self.state.value, "previousState": None, "generation": 1}
        if first_tree is not None:
            initial["pid"] = first_tree.pid
        self._emit("stateChanged", initial)
        # Started at once: from here on the session task owns the tree.
        task_status.started()
        try:
            await run_contained(
                f"language-server session {self.session_id}",
                partial(self._run_nursery, first_tree),
                self._session_failed,
            )
        finally:
            if first_tree is not None:
                with trio.CancelScope(shield=True):
                    # A no-op unless we were cancelled before the first generation ran.
                    await stop_ladder(first_tree, self._stop_bounds())
            if self._restart_started is not None:
                self._restart_started.set()
            # Every stop (and wait_ended) wakes with the result _finish_stop recorded, or
            # this one when the session ended another way.
            self._mark_ended(self._result())

    async def _run_nursery(self, first_tree: ProcessTree | None) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                await self._generations(first_tree)
            finally:
                self._end_requests(None, "The language-server session ended")
                nursery.cancel_scope.cancel()

    async def _session_failed(self, exc: Exception) -> None:
        """The net under the session's own steps: a failure no inner boundary contained.

        The generation's own cleanup has ended its tree by then (TERM, then KILL: its stdio
        is gone, so no ``shutdown``); its requests have ended.
        """
        self._note_crash(None, "session", exc, logged=True)
        self._end_requests(None, "The language-server session ended")
        if not self._crash_reported:
            self._fail_internal(self._gen, None)
        self._final = True

    # -- supervision boundaries -----------------------------------------------------------

    @property
    def done(self) -> trio.Event:
        """Set once the session ended: the moment :attr:`ended` turns true."""
        return self._ended_event

    @property
    def _ending(self) -> bool:
        """True once a stop was asked or a contained failure ends the session."""
        return self.stop_started or self._crash is not None

    def _note_crash(
        self, gen: _Generation | None, stage: str, exc: Exception, *, logged: bool = False
    ) -> None:
        """Record a contained failure (the first one counts) and end ``gen``'s drive scope."""
        if not logged:
            log_failure(f"language-server session {self.session_id} ({stage})", exc)
        if self._crash is None:
            self._crash, self._crash_stage = exc, stage
        if gen is not None:
            gen.scope.cancel()

    async def _contained(
        self, gen: _Generation, stage: str, fn: Callable[[], Awaitable[None]]
    ) -> None:
        """Run one task of ``gen`` as part of the session's boundary."""

        async def failed(exc: Exception) -> None:
            self._note_crash(gen, stage, exc, logged=True)

        await run_contained(f"language-server session {self.session_id} ({stage})", fn, failed)

    def _fail_internal(self, gen: _Generation | None, returncode: int | None) -> None:
        """Report the contained failure: ``lastExit``, then ``failed`` with the crash report."""
        exc = self._crash
        assert exc is not None
        self._crash_reported = True
        # Final from here on: a stop() that comes now joins the end instead of adding steps.
        self._final = True
        failure: JSONObject = {
            **self._provider(),
            "code": "internal",
            "message": internal_message(exc),
            "stage": self._crash_stage,
            **exit_detail(returncode),
            "crashReport": crash_report(exc, self.stderr.tail()),
        }
        self.last_exit = {
            "generation": gen.number if gen is not None else self.generation,
            "reason": "failed",
            **failure,
        }
        self._transition(LspInput.INTERNAL, reason="internal", error=failure)

    async def _generations(self, first_tree: ProcessTree | None) -> None:
        tree: ProcessTree | None = first_tree
        while True:
            self._generation_count += 1
            gen = _Generation(self._generation_count, started_at_ms=_now_ms())
            self._gen = gen
            if self._restart_started is not None:
                self._restart_started.set()
                self._restart_started = None
            try:
                if tree is None:
                    tree = await open_process_tree(
                        self.spec.argv, cwd=self.spec.cwd, env=self.spec.env
                    )
            except CoreError as exc:
                gen.ended = True
                gen.settled.set()
                self._fail_without_process(gen, exc)
            else:
                gen.tree = tree
                await self._run_generation(gen, tree)
            tree = None
            if self._crash is not None:
                # An internal failure is final: a bug of ours would meet a restart again.
                if self.state is not LspState.FAILED:
                    self._fail_internal(gen, gen.tree.returncode if gen.tree else None)
                self._final = True
                return
            if self.state is LspState.FAILED and not self.spec.restart:
                # Failed for good: a stop that came meanwhile has nothing left to stop.
                self._final = True
                return
            if self.stop_started:
                self._finish_stop()
                return
            if gen.restart_requested:
                self.spec.budget.reset()
                # The new generation's first event carries its own number.
                self._transition(LspInput.RESTART, reason="restart", generation=self.generation + 1)
                continue
            delay_ms = self.spec.budget.record_crash(_now_ms())
            if delay_ms is None:
                self._final = True
                self._emit(
                    "log",
                    {
                        "level": "error",
                        "source": "supervisor",
                        "message": "restart budget spent; not restarting",
                    },
                )
                return
            with trio.CancelScope() as self._backoff_scope:
                await trio.sleep(delay_ms / 1000)
            self._backoff_scope = None
            if self.stop_started:
                self._finish_stop()
                return
            self._transition(
                LspInput.RESTART,
                reason="crash",
                backoffMilliseconds=delay_ms,
                generation=self.generation + 1,
            )

    async def _run_generation(self, gen: _Generation, tree: ProcessTree) -> None:
        assert tree.stdin is not None
        assert tree.stdout is not None
        assert tree.stderr is not None
        try:
            async with trio.open_nursery() as nursery:
                stderr = tree.stderr
                nursery.start_soon(
                    self._contained, gen, "stderr", partial(self._drain_stderr, gen, stderr)
                )
                async with open_jsonrpc_endpoint(
                    tree.stdin,
                    tree.stdout,
                    request_handler=partial(self._on_server_request, gen),
                    notification_handler=partial(self._on_server_notification, gen),
                    # How log lines name it: our concepts, not the endpoint's.
                    name=(
                        f"language server {self.spec.server_id} "
                        f"(session {self.session_id}, generation {gen.number})"
                    ),
                    # A backend's writes may stay blocked for the request timeout at most
                    # (the plugin contract "Isolation between backends": transportFailed).
                    # A language server is never ended for reading slowly (docs/architecture.md
                    # "Flow control"): it stalls only its own writer, its requests end
                    # at their deadlines, and a stop ends it by the ladder.
                    write_timeout_ms=(
                        self.spec.request_timeout_ms if self.plugin is not None else None
                    ),
                    cancelled_data=CANCELLED_DATA if self.plugin is not None else None,
                    # The end of stdout only stops reading: what was read before it (a
                    # last reply, a log message) is still handed on.
                    close_on_input_end=False,
                    admit_request=self._admit_server_request,
                ) as endpoint:
                    gen.endpoint = endpoint
                    nursery.start_soon(
                        self._contained, gen, "exitWatch", partial(self._watch_exit, gen, tree)
                    )
                    nursery.start_soon(
                        self._contained,
                        gen,
                        "endpointWatch",
                        partial(self._watch_endpoint, gen, endpoint),
                    )
                    with gen.scope:
                        if self.stop_started or gen.restart_requested:
                            gen.scope.cancel()
                        else:
                            self._transition(LspInput.SPAWNED, pid=tree.pid)
                        await self._contained(
                            gen, "handshake", partial(self._handshake, gen, endpoint)
                        )
                        await trio.sleep_forever()
                    # Decided once: a contained failure of ours ends the session; otherwise
                    # a requested stop wins over anything that happened meanwhile (an exit
                    # during a stop is not a crash).
                    if self._crash is not None:
                        await self._crash_generation(gen, tree, endpoint)
                    elif self.stop_started or gen.restart_requested:
                        await self._stop_generation(gen, tree, endpoint)
                    else:
                        await self._fail_generation(gen, tree, endpoint)
                nursery.cancel_scope.cancel()
        finally:
            gen.ended = True
            gen.settled.set()
            with trio.CancelScope(shield=True):
                # Idempotent: joins the end that already ran, or ends the tree now when we
                # got here by cancellation or by a bug (its readers are gone then).
                await stop_ladder(tree, self._stop_bounds())
                if self.plugin is not None and self._owner_ended is not None:
                    await self._owner_ended(self.session_id)
            self._end_requests(gen, "The language server stopped")

    # -- handshake and readiness -------------------------------------------------------

    def _initialize_params(self) -> JSONObject:
        params: JSONObject = {
            "processId": os.getpid(),
            "clientInfo": {"name": "trio-process-supervisor"},
            "rootUri": self.spec.root_uri,
            "rootPath": self.spec.cwd,
            "workspaceFolders": self._workspace_folders(),
            "capabilities": self.spec.client.capabilities,
            "trace": "off",
        }
        if self.plugin is not None:
            # Negotiation: only a plugin-owned session offers litheFunctions/litheLogging.
            params["capabilities"] = {
                **self.spec.client.capabilities,
                "experimental": experimental_offer(),
            }
        if self.spec.initialization_options is not None:
            params["initializationOptions"] = self.spec.initialization_options
        return params

    def _workspace_folders(self) -> list[JSONValue]:
        return [{"uri": self.spec.root_uri, "name": os.path.basename(self.spec.cwd) or "root"}]

    async def _handshake(self, gen: _Generation, endpoint: JSONRPCEndpoint) -> None:
        """``initialize``, its follow-ups and the readiness gates; any failure is recorded."""
        fault_point("lsp.handshake")
        # The tracker exists before initialize is sent: a gate's notification may be
        # dispatched before the initialize reply wakes us.
        gen.tracker = ReadinessTracker(
            self.spec.gates,
            _now_ms(),
            self.spec.service_ready_idle_ms,
            self.spec.service_ready_absolute_ms,
        )
        result = await self._send_initialize(gen, endpoint)
        if result is None:
            return
        self._take_initialize_result(gen, result)
        try:
            await self._after_initialize(gen, endpoint)
        except EndpointClosed as exc:
            # The server went away right after answering; the watchers say how.
            self._record_failure(
                gen, "crashed", f"the server's stdio ended: {exc.reason}", "initialize"
            )
            return
        if not await self._wait_service_ready(gen, gen.tracker):
            return
        # A stop (or restart) may have cancelled the drive scope after our last await had
        # already completed: it must win, or HANDSHAKE_DONE would follow STOP (found by the
        # chaos runner: a stop right after the first events of the handshake).
        await trio.lowlevel.checkpoint_if_cancelled()
        gen.ready = True
        gen.settled.set()
        self._transition(LspInput.HANDSHAKE_DONE)
        if self.plugin is not None:
            await self._contained(
                gen, "hostNotify", partial(self._send_host_notifications, endpoint)
            )

    async def _send_host_notifications(self, endpoint: JSONRPCEndpoint) -> None:
        """Write the plugin runtime's queued host notifications, in order, while the
        generation runs (the plugin contract "Host notifications"). An overflow of the queue
        raises :class:`~supervisor._plugin._subscriptions.NotificationOverflow`, which ends
        the session (a contained failure of this stage).

        A "latest wins" notification (``didChangeContexts``) at the head of the queue stays
        there until the backend has read everything written to it before: meanwhile later
        revisions replace it, and a backend that does not read gets only the latest once it
        reads again. Moved to the endpoint's write queue at once, each would have reached the
        backend (the pipe holds hundreds)."""
        assert self.plugin is not None
        queue = self.plugin.notifications
        while True:
            try:
                if await queue.peek() in LATEST_WINS:
                    await endpoint.wait_read_by_peer()
                method, params = await queue.get()
                await endpoint.notify(method, params)
                queue.written()
            except EndpointClosed:
                return  # the watchers say how the backend went

    async def _send_initialize(
        self, gen: _Generation, endpoint: JSONRPCEndpoint
    ) -> JSONObject | None:
        """The ``initialize`` result (``{}`` unless an object); None: the failure is recorded."""
        try:
            with trio.fail_after(self.spec.initialize_timeout_ms / 1000):
                result = await endpoint.request("initialize", self._initialize_params())
        except trio.TooSlowError:
            self._record_failure(
                gen,
                "initializeTimeout",
                f"initialize got no answer within {self.spec.initialize_timeout_ms} ms",
                "initialize",
                fact="host.timedOut",
            )
            return None
        except JSONRPCError as exc:
            gen.last_message = _cut(exc.message, LOG_MESSAGE_BYTES)
            self._record_failure(
                gen,
                "initializeFailed",
                f"initialize failed: {exc.code}: {_cut(exc.message, 1024)}",
                "initialize",
                fact="host.initializeFailed",
            )
            return None
        except EndpointClosed as exc:
            # The same code whichever of us and _watch_endpoint notes it first (framing
            # policy: a broken stream fails the session with a protocol error).
            broken = exc.reason.startswith("protocol error")
            self._record_failure(
                gen,
                "protocolError" if broken else "exitedEarly",
                f"the server ended before initialize succeeded ({exc.reason})",
                "initialize",
                fact="host.exitedEarly",
            )
            return None
        return result if isinstance(result, dict) else {}

    def _take_initialize_result(self, gen: _Generation, result: JSONObject) -> None:
        """Keep the server's capabilities and info, announce them, and end the start operation."""
        capabilities = result.get("capabilities")
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        gen.initialized = True
        self.spec.budget.handshake_done(_now_ms())
        # The languageServer/start operation ends when initialize succeeds.
        self._emit_fact(gen, "operationFinished", None)
        self._emit("featuresChanged", {"capabilities": self.capabilities})
        if self.plugin is not None:
            self.plugin.negotiate(gen.number, result)
        server_info = result.get("serverInfo")
        if server_info is not None:
            self.server_info = server_info
            self._emit("serverInfoChanged", {"serverInfo": server_info})

    async def _wait_service_ready(self, gen: _Generation, tracker: ReadinessTracker) -> bool:
        """Wait until every readiness gate opened; False (recorded) when a deadline passed."""
        tracker.restart_clock(_now_ms())
        while not tracker.ready:
            gen.readiness_changed = trio.Event()
            with trio.move_on_at(tracker.deadline_ms() / 1000):
                await gen.readiness_changed.wait()
            expired = tracker.expired(_now_ms())
            if expired is not None and not tracker.ready:
                self._record_failure(
                    gen,
                    "serviceReadyTimeout",
                    f"the server did not get ready ({expired} deadline); "
                    f"closed gates: {', '.join(tracker.closed_gates)}",
                    "serviceReady",
                    fact="host.timedOut",
                )
                return False
        return True

    async def _after_initialize(self, gen: _Generation, endpoint: JSONRPCEndpoint) -> None:
        """``initialized``, the workspace configuration, then the open documents.

        Raises:
            EndpointClosed: The server's stdio ended meanwhile.
        """
        await endpoint.notify("initialized", {})
        if self.workspace_configuration is not None:
            await endpoint.notify(
                "workspace/didChangeConfiguration", {"settings": self.workspace_configuration}
            )
        # Documents synced before the server was initialized, or open in an earlier
        # generation (a new generation is a new server), are opened now with their current
        # version and text; until `documents_sent`, syncs only update the store.
        while True:
            unsent = [d for d in self.documents.documents() if d.opened_in != gen.number]
            if not unsent:
                break
            for document in unsent:
                document.opened_in = gen.number
                document.diagnostics = []
                await endpoint.notify("textDocument/didOpen", document.did_open())
        gen.documents_sent = True
        gen.follow_ups_sent.set()

    def _provider(self) -> JSONObject:
        """Who failed, in every structured runtime error (the Core API contract
        ``lsp.pollEvents``)."""
        return {"provider": self.spec.server_id, "sessionId": self.session_id}

    def _underlying_message(self, gen: _Generation) -> str | None:
        """The server's own last word before a failure (the Core API contract: readiness failures
        keep "the final diagnostic snapshot in underlyingMessage"): its last progress,
        log or show message of this generation, else its last stderr line."""
        if gen.last_message is not None:
            return gen.last_message
        tail = self.stderr.tail(1) if gen is self._stderr_gen else []
        return tail[-1] if tail else None

    def _record_failure(
        self, gen: _Generation, code: str, message: str, stage: str, *, fact: str | None = None
    ) -> None:
        """Note why ``gen`` failed (the first reason wins) and end its drive scope."""
        if gen.failure is None:
            gen.failure = {**self._provider(), "code": code, "message": message, "stage": stage}
            underlying = self._underlying_message(gen)
            if underlying is not None:
                gen.failure["underlyingMessage"] = underlying
            if fact is not None:
                gen.failure["fact"] = fact
        gen.scope.cancel()

    async def _watch_exit(self, gen: _Generation, tree: ProcessTree) -> None:
        returncode = await tree.wait()
        gen.exited.set()
        fault_point("lsp.exitWatch")
        detail = describe_exit(returncode)
        if gen.initialized:
            self._record_failure(gen, "crashed", f"the server exited ({detail})", "running")
        else:
            self._record_failure(
                gen,
                "exitedEarly",
                f"the server exited before initialize succeeded ({detail})",
                "initialize",
                fact="host.exitedEarly",
            )

    async def _watch_endpoint(self, gen: _Generation, endpoint: JSONRPCEndpoint) -> None:
        await endpoint.wait_input_ended()
        reason = endpoint.close_reason or endpoint.input_end_reason or "closed"
        if reason == "eof":
            # The end of stdout and the exit are separate events: an exit that follows
            # within the drain time is the exit watcher's to report, with its exit detail.
            with trio.move_on_after(DRAIN_AFTER_EXIT_MS / 1000):
                await gen.exited.wait()
                return
        stage = "running" if gen.initialized else "initialize"
        if reason.startswith("protocol error"):
            code = "protocolError"
        elif reason == "write timeout" and self.plugin is not None:
            # A backend that stopped reading past the request timeout (the plugin contract
            # "Isolation between backends").
            code, stage = "transportFailed", "relayWrite"
            reason = f"a write stayed blocked for {self.spec.request_timeout_ms} ms"
        else:
            code = "crashed" if gen.initialized else "exitedEarly"
        fact = None if gen.initialized else "host.exitedEarly"
        self._record_failure(gen, code, f"the server's stdio ended: {reason}", stage, fact=fact)

    # -- ending a generation -----------------------------------------------------------

    async def _stop_generation(
        self, gen: _Generation, tree: ProcessTree, endpoint: JSONRPCEndpoint
    ) -> None:
        self._end_requests(gen, "The language server is stopping")
        if gen.restart_requested and self.state is not LspState.STOPPING:
            self._transition(LspInput.STOP, reason="restart")
        if not gen.initialized:
            self._mark("initializeCancelled")
        report = await self._end_server(gen, tree, endpoint)
        self.last_exit = {
            "generation": gen.number,
            "reason": "restart" if gen.restart_requested else "stopped",
            **exit_detail(report.returncode),
        }
        self._transition(LspInput.STOP_DONE, **exit_detail(report.returncode))

    async def _crash_generation(
        self, gen: _Generation, tree: ProcessTree, endpoint: JSONRPCEndpoint
    ) -> None:
        """End the session after a contained failure: requests end, the ladder, ``failed``."""
        if not self.stop_started:
            # The ladder's steps go to the timeline that stop() returns.
            self._stop_started_ms = _now_ms()
            self._mark("internalFailure", stage=self._crash_stage)
        self._end_requests(None, "The language-server session ended")
        report = await self._end_server(gen, tree, endpoint)
        self._fail_internal(gen, report.returncode)

    def _stop_bounds(self, *, polite: bool = True) -> StopBounds:
        """The stop ladder's bounds: the polite step is ``shutdown``, ``exit`` and the wait."""
        return StopBounds(
            polite_ms=(
                self.spec.shutdown_timeout_ms + _EXIT_NOTIFY_MS + self.spec.exit_wait_ms
                if polite
                else 0
            ),
            term_grace_ms=self.spec.term_grace_ms,
            kill_wait_ms=self.spec.kill_wait_ms,
            drain_ms=DRAIN_AFTER_EXIT_MS,
        )

    async def _output_ended(self, gen: _Generation, endpoint: JSONRPCEndpoint) -> None:
        """Returns once the server's stdout and stderr have ended and all they held was
        handed on (the ladder's drain)."""
        await endpoint.wait_input_ended()
        await gen.stderr_done.wait()

    @staticmethod
    def _heard(gen: _Generation, endpoint: JSONRPCEndpoint) -> int:
        """What the generation's readers have read so far (the drain's progress)."""
        return gen.heard + endpoint.statistics().frames_read

    async def _end_server(
        self, gen: _Generation, tree: ProcessTree, endpoint: JSONRPCEndpoint
    ) -> TreeEndReport:
        """End the server by the stop ladder, LSP's polite step being ``shutdown`` and
        ``exit`` while the stdio works (then TERM, then KILL), with stdout and stderr read
        throughout and drained; the steps go to the stop timeline."""

        async def polite() -> None:
            if gen.initialized and not endpoint.closed and endpoint.input_end_reason is None:
                self._mark("shutdownSent")
                try:
                    await endpoint.request(
                        "shutdown", None, timeout_ms=self.spec.shutdown_timeout_ms
                    )
                except trio.TooSlowError:
                    self._mark("shutdownTimedOut")
                except JSONRPCError as exc:
                    self._mark("shutdownFailed", code=exc.code)
                except EndpointClosed:
                    self._mark("shutdownUnanswered")
                else:
                    self._mark("shutdownAnswered")
            if not endpoint.closed:
                with trio.move_on_after(_EXIT_NOTIFY_MS / 1000):
                    try:
                        await endpoint.notify("exit")
                    except EndpointClosed:
                        return
                    self._mark("exitSent")

        report = await stop_ladder(
            tree,
            self._stop_bounds(),
            polite=polite,
            drained=partial(self._output_ended, gen, endpoint),
            progress=partial(self._heard, gen, endpoint),
        )
        # The report lists the pids it found alive at each step; a main process that died
        # of the group signal before the scan is known by its status instead.
        if report.terminated or report.killed or report.returncode == -signal.SIGTERM:
            self._mark("terminated", pids=list(report.terminated) or [tree.pid])
        if report.killed or report.returncode == -signal.SIGKILL:
            self._mark("killed", pids=list(report.killed) or [tree.pid])
        if report.unkillable:
            self._mark("unkillable", pids=list(report.unkillable))
        self._mark("exited", **exit_detail(report.returncode))
        return report

    async def _drain_after_exit(
        self, gen: _Generation, tree: ProcessTree, endpoint: JSONRPCEndpoint
    ) -> None:
        """After the server's exit: let what it wrote before be read, for a bounded time.

        The exit and the end of the pipes are separate events (a lifecycle rule). Its
        last replies and notifications (stdout) and stderr lines are handed on until both
        pipes end, or :data:`DRAIN_AFTER_EXIT_MS` after the exit at the latest (a
        grandchild holding a pipe open does not stretch it). A server whose stdout ended
        first gets the same time to exit.
        """
        if tree.returncode is None and endpoint.input_end_reason == "eof":
            with trio.move_on_after(DRAIN_AFTER_EXIT_MS / 1000):
                await gen.exited.wait()
        if tree.returncode is None:
            return
        exited_at = tree.exit_time if tree.exit_time is not None else trio.current_time()
        with trio.move_on_at(exited_at + DRAIN_AFTER_EXIT_MS / 1000):
            await self._output_ended(gen, endpoint)

    async def _fail_generation(
        self, gen: _Generation, tree: ProcessTree, endpoint: JSONRPCEndpoint
    ) -> None:
        failure = dict(gen.failure or {"code": "crashed", "message": "the server failed"})
        await self._drain_after_exit(gen, tree, endpoint)
        # Pending requests end now, not at their deadlines.
        self._end_requests(gen, str(failure["message"]), **exit_detail(tree.returncode))
        # What the main process left (or the server itself, when only its stdout ended).
        report = await stop_ladder(
            tree,
            self._stop_bounds(polite=False),
            drained=partial(self._output_ended, gen, endpoint),
            progress=partial(self._heard, gen, endpoint),
        )
        fact = failure.pop("fact", None)
        failure.update(exit_detail(report.returncode))
        self.last_exit = {"generation": gen.number, "reason": "failed", **failure}
        tail: list[JSONValue] = [*self.stderr.tail(10)]
        failure["stderrTail"] = tail
        self._emit_fact(gen, "operationFailed", fact if isinstance(fact, str) else None)
        self._transition(LspInput.FAILED, error=failure)

    def _fail_without_process(self, gen: _Generation, exc: CoreError) -> None:
        failure: JSONObject = {
            **self._provider(),
            "code": "launchFailed",
            "message": exc.message,
            "stage": "starting",
        }
        self.last_exit = {"generation": gen.number, "reason": "failed", **failure}
        self._emit_fact(gen, "operationFailed", launch_failure_code(exc))
        self._transition(LspInput.FAILED, error=failure)

    def _emit_fact(self, gen: _Generation, kind: str, start_code: str | None) -> None:
        """Queue one structured fact, if the session's fact rate admits it.

        the plugin contract "Structured plugin diagnostics": each start of a server is one
        ``languageServer/start`` operation, from launch until ``initialize`` succeeds; it
        ends ``operationFinished``, or ``operationFailed`` with one ``host.*`` code. A crash
        after that is one ``operationFailed`` fact of ``languageServer/run`` with the code
        ``host.crashed`` (ours: the reference names no code for a crash fact). A stop
        (user cancellation) records nothing. Facts carry categories only: ``kind``,
        ``operation``, ``code``, ``durationMs`` and the session's ids -- never stderr, exit
        details, paths or server messages. At most :data:`FACTS_PER_WINDOW` facts per
        :data:`FACT_WINDOW_MS` are queued per session; the rest are counted as dropped
        (``lsp.snapshot`` ``facts``).

        Args:
            gen: The generation the fact is about (its start time gives ``durationMs``).
            kind: ``"operationFinished"`` or ``"operationFailed"``.
            start_code: The ``host.*`` code of a failure; None for a finished start, or for a
                crash after initialize (``host.crashed``).
        """
        now = _now_ms()
        if not self._facts.admit(now):
            return
        params: JSONObject = {
            "catalogEvent": (
                "plugins.operation.finished"
                if kind == "operationFinished"
                else "plugins.operation.failed"
            ),
            "kind": kind,
            "operation": "languageServer/start",
            "durationMs": max(0, math.floor(now - gen.started_at_ms)),
        }
        if kind == "operationFailed":
            if gen.initialized:
                params["operation"] = "languageServer/run"
            params["code"] = start_code or "host.crashed"
        if self.spec.plugin_id is not None:
            # The host's facts about a plugin's server share the plugin's channel.
            params["level"] = "info" if kind == "operationFinished" else "error"
            route_fact(params, self.spec.plugin_id, self.session_id)
        self._emit("fact", params)

    # -- stop and restart ---------------------------------------------------------------

    def _result(self) -> JSONObject:
        return {
            "sessionId": self.session_id,
            "state": self.state.value,
            "generation": self.generation,
            "timeline": list(self._timeline),
            "lastExit": self.last_exit,
        }

    def _finish_stop(self) -> None:
        if self.state is LspState.FAILED:
            self._transition(LspInput.STOP)
        elif self.state is LspState.STOPPING:
            self._transition(LspInput.STOP_DONE)
        self._stop_result = self._result()

    async def stop(self) -> JSONObject:
        """Stop the session (``lsp.stopServer``); a second call joins the first.

        Returns:
            ``{sessionId, state, generation, timeline: [{step, atMilliseconds, ...}],
            lastExit}``; every caller gets the same result.

        **Cancellation:** the stop is the session's: cancelling the caller stops waiting,
        the stop goes on.
        """
        if not self.ended and not self._final and self._claim_stop():
            self._stop_started_ms = _now_ms()
            self._mark("stopRequested", state=self.state.value)
            if self.state in (LspState.STARTING, LspState.INITIALIZING, LspState.READY):
                self._transition(LspInput.STOP)
            if self._gen is not None:
                self._gen.scope.cancel()
            if self._backoff_scope is not None:
                self._backoff_scope.cancel()
        await self.wait_ended()
        assert self.stop_result is not None
        return self.stop_result

    async def restart(self) -> int:
        """Stop the current server and start a new generation; resets the restart budget.

        Returns:
            The new generation number.

        Raises:
            CoreError: ``invalid_request`` when the session is stopping or has ended.

        **Cancellation:** the restart goes on; the caller stops waiting.
        """
        gen = self._gen
        if self._ending or self.ended or gen is None:
            raise CoreError("invalid_request", f"session {self.session_id} is not running")
        if self._backoff_scope is not None:
            self.spec.budget.reset()
            self._backoff_scope.cancel()
        elif not gen.ended:
            gen.restart_requested = True
            gen.scope.cancel()
        # A second restart while the first waits joins it (a trio.Event has no truth value).
        if self._restart_started is None:
            self._restart_started = trio.Event()
        started = self._restart_started
        await started.wait()
        return self.generation

    # -- requests ----------------------------------------------------------------------

    def new_operation_id(self) -> str:
        """A fresh opaque operation id."""
        self._anonymous += 1
        return f"{self.session_id}-op-{self._anonymous}"

    def submit(
        self,
        method: str,
        params: JSONValue,
        *,
        operation_id: str,
        timeout_ms: int,
        uri: str | None = None,
        emit_event: bool = True,
    ) -> _Request:
        """Send a request to the server in a task of the session; it completes exactly once.

        Before readiness the request waits (at most :data:`MAX_PENDING_FOR_READINESS`); when
        no server runs it completes at once with ``languageServerUnavailable``.

        Raises:
            CoreError: ``invalid_request`` for an operation id already pending; ``busy`` when
                too many requests wait for readiness.
        """
        if operation_id in self._requests:
            raise CoreError("invalid_request", f"operation {operation_id!r} is already pending")
        gen = self._gen
        req = _Request(
            operation_id,
            method,
            params,
            uri,
            gen.number if gen is not None else 0,
            emit_event,
            started_at=_now_ms(),
        )
        if (
            gen is None
            or gen.ended
            or self._ending
            or self.state not in (LspState.STARTING, LspState.INITIALIZING, LspState.READY)
            or self._nursery is None
        ):
            self._finish(req, self._unavailable(req, "The language server is not running"))
            return req
        if not gen.ready and self._waiting_for_ready >= MAX_PENDING_FOR_READINESS:
            raise CoreError(
                "busy", f"{MAX_PENDING_FOR_READINESS} requests already wait for readiness"
            )
        req.scope.deadline = trio.current_time() + timeout_ms / 1000
        self._requests.add(req)
        if not gen.ready:
            req.waiting = True
            self._waiting_for_ready += 1
        # The session's outbox keeps submission order (docs/architecture.md "The order
        # rule"; the plugin contract "Plugin-owned sessions": requests that wait for the
        # gates go out in the order they were asked for): tasks wake in no set order, so
        # each request is written after the message submitted before it. A ready server's
        # requests wait for each other only until each is queued, a scheduler pass.
        req.after = self._chain(gen, req.sent)
        if self.plugin is not None:
            req.after_notifications = self.plugin.notifications.mark()
        self._nursery.start_soon(self._run_request, req, gen)
        return req

    def serialized_request(self, command: str) -> _Request | None:
        """The running or waiting request of a serialized command, if any."""
        req = self._serialized.get(command)
        return req if req is not None and req.outcome is None else None

    def register_serialized(self, command: str, req: _Request) -> None:
        """Make ``req`` the one later requests for ``command`` join while it is pending."""
        self._serialized[command] = req

    def cancel(self, operation_id: str) -> bool:
        """Cancel a pending request or function call (``$/cancelRequest`` is sent).

        Returns:
            False when no such request or call is pending.
        """
        if self.plugin is not None and self.plugin.cancel_call(operation_id):
            return True
        req = self._requests.get(operation_id)
        if req is None or req.outcome is not None:
            return False
        req.end_reason = "cancelled"
        req.scope.cancel()
        # Completed now, not when the task gets around to it.
        self._finish(req, self._cancelled(req))
        return True

    def cancel_unsent(self, method: str, *, operation_id: str, uri: str | None = None) -> None:
        """A request ``lsp.cancelOperation`` named while it still waited for its turn in the
        session's line: it completes now as :meth:`cancel` completes a running one (one
        ``requestCompleted``, ``requestCancelled``), and nothing is sent (no
        ``$/cancelRequest`` is needed)."""
        gen = self._gen
        req = _Request(operation_id, method, None, uri, gen.number if gen is not None else 0, True)
        req.end_reason = "cancelled"
        self._finish(req, self._cancelled(req))

    def _cancelled(self, req: _Request) -> JSONObject:
        # The outcome names of the plugin contract "Invocation", shared by every
        # requestCompleted of a session (envelope answers keep cancelled/timed_out).
        return self._error(req, "requestCancelled", "The request was cancelled")

    async def _run_request(self, req: _Request, gen: _Generation) -> None:
        """One request's task: the one operation path (:func:`run_operation`)."""
        try:
            await run_operation(
                req,
                partial(self._exchange, req, gen),
                scope=req.scope,
                what=f"language-server session {self.session_id} request {req.operation_id}",
                finish=partial(self._finish, req),
                forget=partial(self._requests.forget, req),
                internal=lambda exc: self._error(req, "internal", internal_message(exc)),
                caught=lambda: self._error(req, "requestTimeout", "The request timed out"),
                ended=lambda: self._unavailable(req, "The language-server session ended"),
            )
        finally:
            self._stop_waiting(req)

    async def _exchange(self, req: _Request, gen: _Generation) -> None:
        try:
            await self._exchange_in_order(req, gen)
        finally:
            req.sent.set()
            req.after = None  # no chain of ended requests is kept alive

    async def _exchange_in_order(self, req: _Request, gen: _Generation) -> None:
        if not gen.settled.is_set():
            await gen.settled.wait()
        if req.after is not None:
            await req.after.wait()
        if self.plugin is not None:
            await self.plugin.notifications.wait_written(req.after_notifications)
        self._stop_waiting(req)
        if req.outcome is None:
            # Only into a request still live: one that ended while it waited its turn (its
            # session ended) runs on only to say so or to cancel, and a fault there could not
            # end it internal (fault-injection chaos charged such a fault to it, once).
            fault_point("lsp.request")
        endpoint = gen.endpoint
        if gen.ended or not gen.ready or endpoint is None:
            self._finish(req, self._unavailable(req, "The language server stopped"))
            return
        params = req.params if isinstance(req.params, (dict, list)) else None
        # endpoint.request queues the frame before its first checkpoint, so the next
        # request, woken here, runs only once this one is queued.
        req.sent.set()
        try:
            result = await endpoint.request(req.method, params)
        except JSONRPCError as exc:
            message = _cut(exc.message, 1024)
            details: JSONObject = {"code": exc.code, "message": message}
            if exc.data is not None:
                details["data"] = exc.data
            self._finish(req, self._error(req, "languageServerError", message, details=details))
        except EndpointClosed as exc:
            returncode = gen.tree.returncode if gen.tree is not None else None
            message = "The language server stopped"
            if exc.reason.startswith(("protocol error", "read failed", "write")):
                message = f"The connection to the language server broke ({exc.reason})"
            self._finish(
                req, self._unavailable(req, _cut(message, 1024), **exit_detail(returncode))
            )
        else:
            self._finish(req, {"result": result})

    def _stop_waiting(self, req: _Request) -> None:
        if req.waiting:
            req.waiting = False
            self._waiting_for_ready -= 1

    def _error(self, req: _Request, code: str, message: str, **extra: JSONValue) -> JSONObject:
        error: JSONObject = {
            **self._provider(),
            "code": code,
            "message": message,
            "stage": "request",
            "method": req.method,
        }
        if req.uri is not None:
            error["uri"] = req.uri
        error.update(extra)
        return {"error": error}

    def _unavailable(self, req: _Request, message: str, **extra: JSONValue) -> JSONObject:
        return self._error(req, "languageServerUnavailable", message, **extra)

    def _finish(self, req: _Request, outcome: JSONObject) -> None:
        self._requests.finish(req, outcome)

    def _request_completed(self, req: _Request, outcome: JSONObject) -> None:
        """A request finished (once): its ``requestCompleted`` event, unless it has none."""
        if req.emit_event:
            self.events.put(
                "requestCompleted",
                {
                    "sessionId": self.session_id,
                    "generation": req.generation,
                    "operationId": req.operation_id,
                    "method": req.method,
                    **outcome,
                },
            )

    def _end_requests(self, gen: _Generation | None, message: str, **extra: JSONValue) -> None:
        """End every pending request of ``gen`` (all when None) with languageServerUnavailable.

        Function calls of a plugin-owned session end the same way: the session's terminal
        error (the plugin contract "Invocation").
        """
        if self.plugin is not None and (gen is None or gen is self._gen):
            self.plugin.end_generation(message, **extra)

        def unavailable(req: _Request) -> JSONObject | None:
            if gen is not None and req.generation != gen.number:
                return None
            req.end_reason = "unavailable"
            req.scope.cancel()
            return self._unavailable(req, message, **extra)

        self._requests.finish_all(unavailable)

    # -- plugin functions (the plugin contract "Plugin functions") ---------------------

    def start_function_call(
        self,
        *,
        operation_id: str,
        function_id: str,
        params: JSONObject,
        context: JSONValue,
        timeout_ms: int,
    ) -> None:
        """Start a checked function call in the session's nursery (``lsp.functionRequest``).

        Raises:
            CoreError: ``invalid_request`` for an operation id already pending;
                ``not_supported`` with ``details.code`` ``plugin.function.unavailable`` when no
                negotiated process runs.
        """
        gen = self._gen
        plugin = self.plugin
        if operation_id in self._requests:
            raise CoreError("invalid_request", f"operation {operation_id!r} is already pending")
        if (
            plugin is None
            or gen is None
            or gen.ended
            or gen.endpoint is None
            or self._ending
            or self._nursery is None
            or not plugin.negotiated
        ):
            raise CoreError(
                "not_supported",
                "the backend is not running a negotiated process",
                {"code": "plugin.function.unavailable"},
            )
        sent = trio.Event()
        plugin.start_call(
            self._nursery,
            gen.endpoint,
            operation_id=operation_id,
            function_id=function_id,
            params=params,
            context=context,
            timeout_ms=timeout_ms,
            after=self._chain(gen, sent),
            sent=sent,
        )

    @staticmethod
    def _chain(gen: _Generation, sent: trio.Event) -> trio.Event | None:
        """Put a message in the generation's outbox: returns ``sent`` of the message it must
        be written after (None when every earlier one is written), and makes ``sent`` the
        one later messages wait for."""
        previous = gen.last_sent
        gen.last_sent = sent
        return previous if previous is not None and not previous.is_set() else None

    @property
    def ready(self) -> bool:
        """True while a ready (handshake and gates done) server runs and no stop is asked."""
        gen = self._gen
        return gen is not None and gen.ready and not gen.ended and not self._ending

    # -- documents and notifications ---------------------------------------------------

    def endpoint_for_notify(self) -> JSONRPCEndpoint:
        """The endpoint of the running, initialized server.

        Raises:
            CoreError: ``invalid_request`` when no initialized server runs (the session is
                starting, stopping or has ended).
        """
        gen = self._gen
        if gen is None or gen.ended or not gen.initialized or gen.endpoint is None or self._ending:
            raise CoreError(
                "invalid_request",
                f"session {self.session_id} is {self.state.value}: no initialized server",
            )
        return gen.endpoint

    async def wait_outbox(self) -> bool:
        """Wait until every request and function call submitted before now was handed to the
        server (or ended without that): what a command sends or records after this goes
        after them (docs/architecture.md "The order rule"), a document change behind a
        request that waits for the ``initialize`` handshake included.

        Readiness gates hold requests only: the plugin contract "Plugin-owned sessions":
        "Until every gate has opened, request calls wait in order ... Notifications are never
        held." So once the handshake and its follow-ups are done and a gate is closed, this
        returns without waiting.

        Returns:
            Whether it waited (the session's state may have changed meanwhile).

        **Cancellation:** cancellable; nothing was sent.
        """
        waited = False
        while True:
            gen = self._gen
            last = None if gen is None else gen.last_sent
            if gen is None or last is None or last.is_set():
                return waited
            if _gates_closed(gen):
                return waited  # gates hold requests only
            waited = True
            if gen.follow_ups_sent.is_set():
                await last.wait()  # no gate to wait out: the request goes out once ready
            else:
                await _first_set(last, gen.follow_ups_sent)

    async def notify(self, method: str, params: JSONObject | list[JSONValue] | None) -> None:
        """Send a notification to the running, initialized server.

        Raises:
            CoreError: ``invalid_request`` when no initialized server runs, or its stdio
                closed meanwhile.

        **Cancellation:** waits only while the session's write queue is full (a server that
        stopped reading); cancelled then, nothing is sent.
        """
        endpoint = self.endpoint_for_notify()
        waited = await self.wait_outbox()
        if self.plugin is not None:
            # After a host notification held back to merge (lsp.hostNotify before it).
            mark = self.plugin.notifications.mark()
            if self.plugin.notifications.pending(mark):
                await self.plugin.notifications.wait_written(mark)
                waited = True
        if waited:
            endpoint = self.endpoint_for_notify()
        try:
            await endpoint.notify(method, params)
        except EndpointClosed as exc:
            raise CoreError(
                "invalid_request", f"session {self.session_id}: the server went away ({exc})"
            ) from None

    @property
    def initialized(self) -> bool:
        """True while an initialized server runs."""
        gen = self._gen
        return gen is not None and gen.initialized and not gen.ended

    @property
    def documents_live(self) -> int | None:
        """The generation whose server has been given the open documents, or None.

        Until then a sync only updates the store: the handshake opens every document
        after ``initialized``.
        """
        gen = self._gen
        if gen is None or gen.ended or not gen.documents_sent or self._ending:
            return None
        return gen.number

    def refuse_requests_if_ended(self) -> None:
        """Refuse a request at once when no server will answer it (issue 28).

        A session that failed (waiting for a restart or for good), is stopping or has stopped
        would only end the request afterwards with ``languageServerUnavailable``; the caller
        learns why now. Requests to a session still starting are accepted: they wait for
        readiness.

        Raises:
            CoreError: ``invalid_request`` whose message says why the session ended and whose
                details are ``{sessionId, state, lastExit, stderrTail}`` (``lastExit`` as in
                ``lsp.snapshot``: ``{generation, reason, code, message, stage, exitCode,
                signal, signalName, ...}``; ``stderrTail``: its last stderr lines).
        """
        if self.state in (LspState.STARTING, LspState.INITIALIZING, LspState.READY) and not (
            self._ending or self.ended
        ):
            return
        last = self.last_exit
        tail: list[JSONValue] = [*self.stderr.tail(10)]
        details: JSONObject = {
            "sessionId": self.session_id,
            "state": self.state.value,
            "lastExit": last,
            "stderrTail": tail,
        }
        if self.state is LspState.FAILED and last is not None:
            code, why = last.get("code"), last.get("message")
            message = f"session {self.session_id} failed ({code}): {why}"
        elif self._crash is not None and not self._crash_reported:
            # A contained failure ends it, and its state has not moved yet: say so, not
            # "initializing" (chaos --faults, seed 777002).
            why = internal_message(self._crash)
            details["lastExit"] = {"reason": "failed", "code": "internal", "message": why}
            message = f"session {self.session_id} failed (internal): {why}"
        else:
            message = f"session {self.session_id} is {self.state.value}: no server answers requests"
        raise CoreError("invalid_request", _cut(message, 1024), details)

    def check_open(self) -> None:
        """Refuse document commands when the session has ended or is stopping.

        Raises:
            CoreError: ``invalid_request`` naming the state.
        """
        if self._ending or self.ended or self._final:
            raise CoreError("invalid_request", f"session {self.session_id} is {self.state.value}")

    def sync_kind(self) -> int:
        """The server's ``textDocumentSync`` change kind (0 none, 1 full, 2 incremental)."""
        sync = self.capabilities.get("textDocumentSync")
        if isinstance(sync, dict):
            sync = sync.get("change")
        return sync if isinstance(sync, int) and not isinstance(sync, bool) else 1

    def emit_diagnostics(self, uri: str, version: int | None, diagnostics: list[JSONValue]) -> None:
        """Queue a ``diagnostics`` event for ``uri``."""
        params: JSONObject = {"uri": uri, "diagnostics": diagnostics}
        if version is not None:
            params["version"] = version
        self._emit("diagnostics", params)

    async def _on_server_notification(
        self, gen: _Generation, method: str, params: JSONValue | None
    ) -> None:
        """The reader's handler of server notifications: part of the session's boundary."""
        gen.heard += 1
        if gen is not self._gen or gen.ended:
            return  # a late message of an old process must not reach the new one
        try:
            fault_point("lsp.reader")
            await self._handle_notification(gen, method, params)
        except Exception as exc:
            # A bug of ours handling what the server sent: the session ends (failed,
            # internal), not the endpoint and not the Core.
            self._note_crash(gen, "reader", exc)

    async def _handle_notification(
        self, gen: _Generation, method: str, params: JSONValue | None
    ) -> None:
        tracker = gen.tracker
        if tracker is not None and not gen.ready:
            before = tracker.deadline_ms()
            if tracker.notification(method, params, _now_ms()) or tracker.deadline_ms() != before:
                gen.readiness_changed.set()
        text = _message_text(method, params)
        if text is not None:
            gen.last_message = _cut(text, LOG_MESSAGE_BYTES)
        if method == "textDocument/publishDiagnostics":
            document = self.documents.accept_diagnostics(params)
            if document is not None:
                version = params.get("version") if isinstance(params, dict) else None
                self.emit_diagnostics(
                    document.uri,
                    version if isinstance(version, int) else None,
                    list(document.diagnostics),
                )
        elif method in ("window/logMessage", "window/showMessage"):
            self._log_message(method, params)
        elif method == "$/progress" and isinstance(params, dict):
            self._emit("progress", {"token": params.get("token"), "value": params.get("value")})
        forward = self.spec.policy.forward_notifications
        if method in forward or ("*" in forward and method not in EVENT_NOTIFICATIONS):
            self._emit("serverNotification", {"method": method, "params": params})
        if self.plugin is not None and method.startswith("lithe/"):
            self.plugin.on_notification(method, params)

    def _log_message(self, method: str, params: JSONValue | None) -> None:
        kind = params.get("type") if isinstance(params, dict) else None
        message = params.get("message") if isinstance(params, dict) else None
        self._emit(
            "log",
            {
                "level": _MESSAGE_LEVELS.get(kind, "info") if isinstance(kind, int) else "info",
                "source": method,
                "message": _cut(message if isinstance(message, str) else "", LOG_MESSAGE_BYTES),
            },
        )

    async def _ask_host(self, method: str, params: JSONValue | None) -> JSONValue:
        """Forward a server request the host answers: a ``serverRequest {requestId, method,
        params}`` event, then wait for ``lsp.serverRequestResponse`` (at most the session's
        request timeout; past it the server gets -32803 RequestFailed)."""
        if len(self._host_answers) >= MAX_HOST_ANSWERS:
            # Never-dropped events must stay bounded: the server learns at once.
            raise JSONRPCError(
                ErrorCode.REQUEST_FAILED,
                f"{MAX_HOST_ANSWERS} requests already wait for the host's answer",
            )
        self._host_answer_count += 1
        request_id = f"sr-{self._host_answer_count}"
        pending = _HostAnswer(method)
        self._host_answers[request_id] = pending
        try:
            self._emit(
                "serverRequest", {"requestId": request_id, "method": method, "params": params}
            )
            with trio.move_on_after(self.spec.request_timeout_ms / 1000):
                await pending.done.wait()
        finally:
            del self._host_answers[request_id]
        if not pending.done.is_set():
            raise JSONRPCError(
                ErrorCode.REQUEST_FAILED,
                f"The host did not answer {method} within {self.spec.request_timeout_ms} ms",
            )
        if pending.error is not None:
            raise pending.error
        return pending.result

    def answer_server_request(
        self, request_id: str, result: JSONValue, error: JSONRPCError | None
    ) -> bool:
        """``lsp.serverRequestResponse``: the host's answer to a ``serverRequest`` event.

        Returns:
            True when the request was waiting; False for an unknown, late or second answer.
        """
        pending = self._host_answers.get(request_id)
        if pending is None or pending.done.is_set():
            return False
        pending.result = result
        pending.error = error
        pending.done.set()
        return True

    def _admit_server_request(self, request: Request) -> Turn | None:
        """A backend's request for one of its host terminals takes its place in that
        terminal's line where it arrives (the endpoint's admission, in arrival order), so a
        backend's ``close`` then ``reopen`` of a handle take effect in that order."""
        if self.plugin is None or not request.method.startswith(_HOST_TERMINAL_PREFIX):
            return None
        params = request.params
        handle = params.get("terminalID") if isinstance(params, dict) else None
        if not isinstance(handle, str):
            return None
        return self._host_lines.arrive(("terminal", handle))

    async def _on_server_request(
        self, gen: _Generation, method: str, params: JSONValue | None
    ) -> JSONValue:
        """A request the server sent: a boundary of its own.

        An unexpected failure answers only this request: -32603 with ``data.code``
        ``"internal"`` and a bounded message (the traceback goes to the log).
        """
        turn = current_admission.get()
        assert turn is None or isinstance(turn, Turn)
        try:
            if turn is not None:
                await turn.wait()
            fault_point("lsp.serverRequest")
            return await self._answer_server_request(gen, method, params)
        except JSONRPCError:
            raise
        except Exception as exc:
            log_failure(f"language-server session {self.session_id} handling {method!r}", exc)
            raise JSONRPCError(
                ErrorCode.INTERNAL_ERROR, internal_message(exc), {"code": "internal"}
            ) from None
        finally:
            if turn is not None:
                turn.release()

    async def _answer_server_request(
        self, gen: _Generation, method: str, params: JSONValue | None
    ) -> JSONValue:
        if gen is not self._gen or gen.ended or self._ending or gen.restart_requested:
            raise JSONRPCError(ErrorCode.REQUEST_FAILED, "The client session is stopping")
        if self.plugin is not None and method.startswith("lithe/"):
            return await self.plugin.on_request(method, params)
        if method in self.spec.client.host_requests:
            return await self._ask_host(method, params)
        if method == "workspace/workspaceFolders":
            return self._workspace_folders()
        if method == "window/showMessageRequest":
            # No user to choose an action: LSP's answer for "none chosen" is null; the
            # message itself still reaches the host.
            self._log_message(method, params)
            return None
        if method == "workspace/configuration":
            items = params.get("items") if isinstance(params, dict) else None
            if not isinstance(items, list):
                raise JSONRPCError(ErrorCode.INVALID_PARAMS, "params.items must be an array")
            answer: list[JSONValue] = []
            for item in items:
                section = item.get("section") if isinstance(item, dict) else None
                answer.append(
                    configuration_section(
                        self.workspace_configuration,
                        section if isinstance(section, str) else None,
                    )
                )
            return answer
        if method in (
            "window/workDoneProgress/create",
            "client/registerCapability",
            "client/unregisterCapability",
        ):
            return None
        # Said where the host sees it: a server that asks this believes we declared it.
        self._emit(
            "log",
            {
                "level": "warning",
                "source": "serverRequest",
                "message": _cut(f"{method} is not served (-32601)", LOG_MESSAGE_BYTES),
            },
        )
        raise method_not_found(method)

    async def _drain_stderr(self, gen: _Generation, stream: trio.abc.ReceiveStream) -> None:
        """Read stderr until it ends: lines into the ring and ``log`` events at debug level.

        Always reading keeps a chatty server from blocking on a full pipe.
        """
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                chunk = b""
            self._stderr_gen = gen
            if not chunk:
                self.stderr.feed_eof()
                gen.stderr_done.set()
                if self._stderr_unreported and gen is self._gen:
                    # Say how many lines were left out, once, at the end of this stderr.
                    self._queue_stderr_log(
                        f"{self._stderr_unreported} stderr lines were not queued as log "
                        "events (rate limit); the last ones are in lsp.snapshot stderrTail"
                    )
                return
            gen.heard += 1
            self.stderr.feed(bytes(chunk))
            fault_point("lsp.stderr")

    def note_states_pruned(self, names: list[str]) -> None:
        """Report the workspace state directories a sweep deleted (``workspaceStatePruned``
        ``{names}``)."""
        pruned: list[JSONValue] = [*names]
        self._emit("workspaceStatePruned", {"names": pruned})

    @property
    def stderr_tail(self) -> list[str]:
        """The last stderr lines kept (oldest first), of every generation."""
        return self.stderr.tail()

    def _stderr_line(self, text: str) -> None:
        # The ring has the line already: crash reports and snapshots need the last ones.
        self._stderr_lines += 1
        if self._stderr_gen is not self._gen:
            return
        stats = self.events.statistics()
        if self._stderr_share.has_room(stats.next_seq, stats.queued) and self._stderr_rate.admit(
            _now_ms()
        ):
            self._queue_stderr_log(text)
        else:
            self._stderr_not_queued += 1
            self._stderr_unreported += 1

    def _queue_stderr_log(self, message: str) -> None:
        """Queue a stderr ``log`` event at debug level, with ``droppedLines`` when some were."""
        params: JSONObject = {"level": "debug", "source": "stderr", "message": message}
        if self._stderr_unreported:
            params["droppedLines"] = self._stderr_unreported
            self._stderr_unreported = 0
        self._stderr_share.add(self.events.statistics().next_seq)
        self._emit("log", params)


def launch_failure_code(exc: CoreError) -> str:
    """The ``host.*`` fact code of a start that made no process (the plugin contract
    "Structured plugin diagnostics"): ``host.executableUnavailable`` when the executable or
    the working directory could not be resolved, ``host.planFailed`` when the launch plan
    could not be made (a ``plugin.launch.*``, template or tool refusal, a failed
    backend-resolved launch), ``host.launchFailed`` when the resolved process could not be
    started."""
    details = exc.details or {}
    spawn_errno = details.get("errno")
    if isinstance(spawn_errno, int) and spawn_errno not in (
        errno.ENOENT,
        errno.EACCES,
        errno.ENOTDIR,
    ):
        return "host.launchFailed"
    if "executable" in details or "cwd" in details:
        return "host.executableUnavailable"
    if exc.code in ("plugin.launch.missing", "plugin.runtime.missing"):
        # A launch plan's executable or tool that could not be resolved.
        return "host.executableUnavailable"
    if exc.code != "launch_failed":
        # A launch plan refused, or a backend-resolved launch that gave no usable answer.
        return "host.planFailed"
    return "host.launchFailed"


def launch_failure_fact(plugin_id: str, exc: CoreError, started_at_ms: float) -> JSONObject:
    """Route the fact of a plugin server's first start that made no process.

    ``lsp.startServer`` answers ``launch_failed`` and keeps no session, so the fact has no
    event queue: it goes to the plugin's channel only. Returns the fact.
    """
    fact: JSONObject = {
        "catalogEvent": "plugins.operation.failed",
        "level": "error",
        "kind": "operationFailed",
        "operation": "languageServer/start",
        "durationMs": max(0, math.floor(_now_ms() - started_at_ms)),
        "code": launch_failure_code(exc),
    }
    route_fact(fact, plugin_id, None)
    return fact


def _message_text(method: str, params: JSONValue | None) -> str | None:
    """The human text of a progress, log or show message notification, if it has one."""
    if not isinstance(params, dict):
        return None
    if method in ("window/logMessage", "window/showMessage"):
        message = params.get("message")
        return message if isinstance(message, str) and message else None
    if method == "$/progress":
        value = params.get("value")
        if isinstance(value, dict):
            parts = [value.get("title"), value.get("message")]
            text = ": ".join(p for p in parts if isinstance(p, str) and p)
            return text or None
    return None


def describe_exit(returncode: int) -> str:
    """``"exit code 3"`` or ``"signal 9 (SIGKILL)"``: a return code in a message."""
    detail = exit_detail(returncode)
    if detail.get("signal") is not None:
        return f"signal {detail['signal']} ({detail['signalName']})"
    return f"exit code {detail['exitCode']}"


def configuration_section(configuration: JSONValue, section: str | None) -> JSONValue:
    """The value of a dotted ``section`` path in ``configuration`` (None when absent).

    ``workspace/configuration`` items are answered this way (the plugin contract "Workspace
    configuration"); no section gives the whole configuration. A key that itself contains
    dots (``"python.analysis"`` stored flat) is found too.
    """
    if section is None or section == "":
        return configuration
    value = configuration
    if isinstance(value, dict) and section in value:
        return value[section]
    for part in section.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def dumps(value: JSONValue) -> int:
    """The size of ``value`` serialized as compact JSON, in bytes."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
