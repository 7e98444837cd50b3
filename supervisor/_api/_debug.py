"""``debug.*``: debug sessions (DAP), their operations and events."""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeAlias

import msgspec

from ._base import (
    MAX_COUNT,
    AcceptedResult,
    CancelledResult,
    Env,
    Event,
    JsonObject,
    JsonValue,
    NonEmpty,
    Ordered,
    OsText,
    Path,
    Payload,
    Result,
    WaitMilliseconds,
)

__all__ = (
    "COMMANDS",
    "DEBUG_STATES",
    "EVENTS",
    "MAX_OPERATION_TIMEOUT_MS",
    "ORDER",
    "DebugEvent",
    "DebugInspect",
    "DebugState",
)

DebugState: TypeAlias = Literal[
    "initializing",
    "ready",
    "starting",
    "running",
    "paused",
    "terminating",
    "terminated",
    "error",
    "failed",
]
DEBUG_STATES: dict[str, str] = {
    "initializing": "the adapter runs and initialize was sent; capabilities are unknown",
    "ready": "initialize was answered; no launch or attach sent yet",
    "starting": "launch or attach was sent and is not answered yet",
    "running": "the debuggee runs",
    "paused": "a thread stopped (breakpoint, step, pause, exception)",
    "terminating": "disconnect was begun; the adapter is being ended",
    "terminated": "the adapter is gone; only debug.destroySession is left",
    "error": "the session broke its own state table (a bug); ended like terminated",
    "failed": "an unexpected exception inside the session; ended like terminated, its "
    "terminated event says reason internal with a crashReport",
}

#: An operation's bound (ours): 1 ms to 5 minutes.
#: An operation's longest deadline (ours; as a forwarded LSP request), in milliseconds.
MAX_OPERATION_TIMEOUT_MS: Final = 300_000
_OperationTimeout = Annotated[int, msgspec.Meta(ge=1, le=MAX_OPERATION_TIMEOUT_MS)]
_Id = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
_OneBased = Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)]


class Adapter(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """How to reach the adapter: start ``executable`` and speak over stdio, or connect to a
    loopback TCP port (``tcpPort``; ``executable`` optional) or the port it announces
    (``tcpAnnounced``, on a line of ``announceStream`` starting with ``announcePrefix``), or
    ask a language-server session for the port of the adapter it hosts (``tcpLanguageServer``:
    ``workspace/executeCommand`` ``command`` with ``commandArguments``)."""

    executable: Path | None = None
    arguments: Annotated[list[OsText], msgspec.Meta(max_length=4096)] | None = None
    environment: Env | None = None
    working_directory: Path | None = None
    transport: Literal["stdio", "tcpPort", "tcpAnnounced", "tcpLanguageServer"] | None = None
    host: NonEmpty | None = None
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    announce_prefix: str | None = None
    announce_stream: Literal["stdout", "stderr"] | None = None
    connect_timeout_milliseconds: _OperationTimeout | None = None
    initialize_timeout_milliseconds: _OperationTimeout | None = None
    language_server_session_id: NonEmpty | None = None
    command: NonEmpty | None = None
    command_arguments: list[JsonValue] | None = None


class DebugCreateSession(Payload, kw_only=True):
    """``debug.createSession``: start (or connect to) an adapter and send ``initialize``."""

    session_id: NonEmpty | None = None
    adapter_id: NonEmpty
    adapter: Adapter
    root_path: Path
    supports_run_in_terminal_request: bool | None = None
    run_in_terminal: Literal["supervisor", "host"] | None = None


class DebugCreateSessionResult(Result, kw_only=True):
    session_id: str
    state: DebugState
    adapter_pid: int | None


class DebugSessionRef(Payload, kw_only=True):
    session_id: NonEmpty


class _Operation(Payload, kw_only=True):
    """The fields of every debug operation: it ends in one ``operationCompleted`` or
    ``operationFailed`` event and its result."""

    session_id: NonEmpty
    operation_id: NonEmpty | None = None
    timeout_milliseconds: _OperationTimeout | None = None


class DebugStart(_Operation, kw_only=True):
    """``debug.launch`` / ``debug.attach``: the adapter's launch configuration."""

    configuration: JsonObject | None = None


class SourceBreakpoint(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    line: _OneBased
    column: _OneBased | None = None
    enabled: bool | None = None
    condition: str | None = None
    hit_condition: str | None = None
    log_message: str | None = None


class DebugSetBreakpoints(_Operation, kw_only=True):
    """``debug.setBreakpoints``: replace one source's breakpoints."""

    path: NonEmpty
    breakpoints: list[SourceBreakpoint] | None = None


class ExceptionFilter(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    filter_id: NonEmpty
    enabled: bool | None = None
    condition: str | None = None


class DebugSetExceptionBreakpoints(_Operation, kw_only=True):
    filters: list[ExceptionFilter] | None = None


class FunctionBreakpoint(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    name: NonEmpty
    enabled: bool | None = None
    condition: str | None = None
    hit_condition: str | None = None


class DebugSetFunctionBreakpoints(_Operation, kw_only=True):
    breakpoints: list[FunctionBreakpoint] | None = None


class DebugExecute(_Operation, kw_only=True):
    """``debug.execute``: run control."""

    command: Literal[
        "continue", "pause", "next", "stepIn", "stepOut", "stepBack", "goto", "restart", "terminate"
    ]
    thread_id: _Id | None = None
    single_thread: bool | None = None
    target_id: _Id | None = None


class _Inspect(_Operation, tag_field="kind", kw_only=True):
    pass


class InspectThreads(_Inspect, tag="threads", kw_only=True):
    pass


class InspectStackTrace(_Inspect, tag="stackTrace", kw_only=True):
    thread_id: _Id
    start_frame: _Id | None = None
    levels: _Id | None = None


class InspectScopes(_Inspect, tag="scopes", kw_only=True):
    frame_id: _Id


class InspectVariables(_Inspect, tag="variables", kw_only=True):
    variables_reference: _OneBased
    variable_filter: Literal["named", "indexed"] | None = None
    start: _Id | None = None
    count: _OneBased | None = None


class InspectEvaluate(_Inspect, tag="evaluate", kw_only=True):
    expression: str
    frame_id: _Id | None = None
    context: Literal["watch", "repl", "hover", "clipboard", "variables"] | None = None


class InspectExceptionInfo(_Inspect, tag="exceptionInfo", kw_only=True):
    thread_id: _Id


class InspectStepInTargets(_Inspect, tag="stepInTargets", kw_only=True):
    frame_id: _Id


class InspectGotoTargets(_Inspect, tag="gotoTargets", kw_only=True):
    path: NonEmpty
    line: _OneBased
    column: _OneBased | None = None


#: ``debug.inspect``: one of its kinds, told by ``kind``.
DebugInspect: TypeAlias = (
    InspectThreads
    | InspectStackTrace
    | InspectScopes
    | InspectVariables
    | InspectEvaluate
    | InspectExceptionInfo
    | InspectStepInTargets
    | InspectGotoTargets
)


class DebugSetVariable(_Operation, kw_only=True):
    """``debug.setVariable``: replace one visible variable's value in its container."""

    variables_reference: _OneBased
    name: NonEmpty
    value: str


class DebugDataBreakpointInfo(_Operation, kw_only=True):
    """``debug.dataBreakpointInfo``: the adapter's data breakpoint identity of a variable."""

    name: NonEmpty
    variables_reference: _OneBased | None = None
    frame_id: _Id | None = None


class DataBreakpoint(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    data_id: NonEmpty
    enabled: bool | None = None
    access_type: Literal["read", "write", "readWrite"] | None = None
    condition: str | None = None
    hit_condition: str | None = None


class DebugSetDataBreakpoints(_Operation, kw_only=True):
    """``debug.setDataBreakpoints``: replace the session's data breakpoints."""

    breakpoints: list[DataBreakpoint] | None = None


class OperationOutcome(Result, kw_only=True):
    """A debug operation's result: its id and the normalized adapter result."""

    operation_id: str
    result: JsonValue = None


class DebugCancelOperation(Payload, kw_only=True):
    session_id: NonEmpty
    operation_id: NonEmpty
    reason: Literal["cancelled", "timedOut"] | None = None


class DebugRunInTerminalResponse(Payload, kw_only=True):
    """``debug.runInTerminalResponse``: the host's answer to ``runInTerminalRequested``."""

    session_id: NonEmpty
    request_id: NonEmpty
    success: bool
    process_id: _OneBased | None = None
    shell_process_id: _OneBased | None = None
    message: str | None = None


class DebugDisconnectResult(Result, kw_only=True):
    session_id: str
    state: DebugState
    terminated: JsonObject


class DebugDestroyResult(Result, kw_only=True):
    session_id: str
    destroyed: bool


class DebugSessionInfo(Result, kw_only=True):
    """One debug session as ``debug.listSessions`` and ``core.sessions`` give it.

    Attributes:
        stop: While the session is ``paused``: the ``stopped`` event that paused it
            (``{reason, threadId, allThreadsStopped, description, text, hitBreakpointIds}``),
            so a client that attaches (an editor after a reload) shows where it stopped and
            asks for threads and the stack again; absent otherwise.
    """

    session_id: str
    adapter_id: str
    state: DebugState
    request_kind: str | None
    adapter_pid: int | None
    parent_session_id: str | None = None
    child_session_ids: list[str] | None = None
    reason: str | None = None
    crash_report: JsonObject | None = None
    stop: JsonObject | None = None


class DebugListSessions(Payload, kw_only=True):
    """``debug.listSessions {}``."""


class DebugWaitEvents(Payload, kw_only=True):
    session_id: NonEmpty
    timeout_milliseconds: WaitMilliseconds | None = None


# -- events ------------------------------------------------------------------------------


class _DebugEvent(Event, kw_only=True):
    session_id: str


class DebugStateChanged(_DebugEvent, tag="stateChanged", kw_only=True):
    """The session moved to another state (see Session states): ``initializing`` when it
    is created, ``ready`` once the adapter answered ``initialize``, ... , ``terminated``
    (or ``failed``) just before its ``terminated`` event."""

    state: DebugState


class DebugCapabilities(_DebugEvent, tag="capabilities", kw_only=True):
    """The adapter answered ``initialize``: its capabilities (normalized)."""

    capabilities: JsonObject


class DebugInitialized(_DebugEvent, tag="initialized", kw_only=True):
    """The adapter sent DAP ``initialized``: once its ``initialize`` answer came too (in
    either order), the session sends the exception filters and breakpoints it keeps and
    ``configurationDone``, once."""


class DebugStopped(_DebugEvent, tag="stopped", kw_only=True):
    """A thread (or all of them) stopped: DAP ``stopped`` (breakpoint, step, pause,
    exception, ...); the session is ``paused``."""

    reason: str
    thread_id: int | None
    all_threads_stopped: bool
    description: str | None
    text: str | None
    hit_breakpoint_ids: list[int]


class DebugContinued(_DebugEvent, tag="continued", kw_only=True):
    """Threads resumed: DAP ``continued``, or a resuming ``debug.execute`` the adapter
    answered."""

    thread_id: int | None
    all_threads_continued: bool


class DebugOutput(_DebugEvent, tag="output", kw_only=True):
    """The debuggee or the adapter wrote output (DAP ``output``: ``category`` ``stdout``,
    ``stderr``, ``console``, ...), or a runInTerminal process did (``requestId``).
    Informational."""

    category: str
    output: str
    truncated: bool | None = None
    request_id: str | None = None


class DebugThread(_DebugEvent, tag="thread", kw_only=True):
    """A thread started or exited (DAP ``thread``). Informational."""

    reason: str
    thread_id: int | None


class DebugBreakpoint(_DebugEvent, tag="breakpoint", kw_only=True):
    """The adapter changed a breakpoint (DAP ``breakpoint``: verified, moved, removed)."""

    reason: str
    breakpoint: JsonValue


class DebugExited(_DebugEvent, tag="exited", kw_only=True):
    """The debuggee exited (DAP ``exited``): its exit code."""

    exit_code: int | None


class DebugTerminated(_DebugEvent, tag="terminated", forbid_unknown_fields=False, kw_only=True):
    """The session ended: exactly once, its last event (sessions never restart).

    ``reason``: ``debuggeeTerminated``, ``disconnected``, ``adapterExited``,
    ``initializeTimeout``, ``initializeFailed``, ``protocolError``, ``adapterNotReading``,
    ``transportClosed``, ``parentStopped``, ``supervisorClosing`` or ``internal`` (with
    ``crashReport``); then the adapter's ``exitCode``, ``signal``, ``signalName``,
    ``forced`` (it needed a signal), and ``stderrTail`` when it did not end on request."""

    reason: str


class DebugRunInTerminalRequested(_DebugEvent, tag="runInTerminalRequested", kw_only=True):
    """The adapter asked to run the debuggee in a terminal (DAP ``runInTerminal``):
    ``handledBy`` ``supervisor`` (started on a PTY: ``processId``, or ``error``) or
    ``host`` (answer with ``debug.runInTerminalResponse``; never dropped)."""

    request_id: str
    kind: str | None
    title: str
    cwd: str | None
    args: list[str]
    env: dict[str, str | None]
    args_can_be_interpreted_by_shell: bool
    handled_by: str
    process_id: int | None = None
    error: str | None = None


class DebugRunInTerminalExited(_DebugEvent, tag="runInTerminalExited", kw_only=True):
    """A process the supervisor started for ``runInTerminal`` ended."""

    request_id: str
    process_id: int | None
    exit_code: int | None
    signal: int | None
    signal_name: str | None
    reason: str | None = None
    crash_report: JsonObject | None = None


class DebugOperationCompleted(_DebugEvent, tag="operationCompleted", kw_only=True):
    """A debug operation (launch, breakpoints, execute, inspect, ...) succeeded: exactly
    one of this or ``operationFailed`` per operation, with the command's ``result``."""

    operation_id: str
    command: str
    result: JsonValue = None


class DebugOperationFailed(
    _DebugEvent, tag="operationFailed", forbid_unknown_fields=False, kw_only=True
):
    """A debug operation failed: exactly one of this or ``operationCompleted`` per
    operation; ``reason`` (``refused``, ``adapterError``, ``cancelled``, ``timedOut``,
    ``sessionEnded``, ``internal``) and the catalog ``code``."""

    operation_id: str
    command: str
    message: str
    reason: str
    code: str


class DebugAdapterEvent(_DebugEvent, tag="adapterEvent", kw_only=True):
    """An adapter event the session does not interpret, passed on (informational)."""

    name: str
    body: JsonValue = None


class DebugFact(_DebugEvent, tag="fact", forbid_unknown_fields=False, kw_only=True):
    """A structured diagnostic fact of the adapter's start (plugin-contract.md "Structured
    plugin diagnostics": ``debugAdapter/start``); a fact carries its own fields."""

    catalog_event: str


class DebugChildSessionStarted(_DebugEvent, tag="childSessionStarted", kw_only=True):
    """The adapter's ``startDebugging`` started a child session (ended with this one)."""

    child_session_id: str
    request: str
    name: str | None


DebugEvent: TypeAlias = (
    DebugStateChanged
    | DebugCapabilities
    | DebugInitialized
    | DebugStopped
    | DebugContinued
    | DebugOutput
    | DebugThread
    | DebugBreakpoint
    | DebugExited
    | DebugTerminated
    | DebugRunInTerminalRequested
    | DebugRunInTerminalExited
    | DebugOperationCompleted
    | DebugOperationFailed
    | DebugAdapterEvent
    | DebugChildSessionStarted
    | DebugFact
)


class DebugEvents(Result, kw_only=True):
    events: list[DebugEvent]
    gap: bool


_ON_SESSION = Ordered("debug", "sessionId")
_ENDS_SESSION = Ordered("debug", "sessionId", ending=True)
#: The order rule (:class:`~._base.Ordered`): what is sent to one debug adapter takes effect
#: in arrival order (``createSession`` with a caller's ``sessionId`` first); event waits,
#: listings and cancels are ordered with nothing.
ORDER = {
    "debug.createSession": _ON_SESSION,
    "debug.launch": _ON_SESSION,
    "debug.attach": _ON_SESSION,
    "debug.setBreakpoints": _ON_SESSION,
    "debug.setExceptionBreakpoints": _ON_SESSION,
    "debug.setFunctionBreakpoints": _ON_SESSION,
    "debug.execute": _ON_SESSION,
    "debug.inspect": _ON_SESSION,
    "debug.setVariable": _ON_SESSION,
    "debug.dataBreakpointInfo": _ON_SESSION,
    "debug.setDataBreakpoints": _ON_SESSION,
    "debug.runInTerminalResponse": _ON_SESSION,
    "debug.disconnect": _ENDS_SESSION,
    "debug.destroySession": _ENDS_SESSION,
}

COMMANDS = {
    "debug.createSession": (DebugCreateSession, DebugCreateSessionResult),
    "debug.launch": (DebugStart, OperationOutcome),
    "debug.attach": (DebugStart, OperationOutcome),
    "debug.setBreakpoints": (DebugSetBreakpoints, OperationOutcome),
    "debug.setExceptionBreakpoints": (DebugSetExceptionBreakpoints, OperationOutcome),
    "debug.setFunctionBreakpoints": (DebugSetFunctionBreakpoints, OperationOutcome),
    "debug.execute": (DebugExecute, OperationOutcome),
    "debug.inspect": (DebugInspect, OperationOutcome),
    "debug.setVariable": (DebugSetVariable, OperationOutcome),
    "debug.dataBreakpointInfo": (DebugDataBreakpointInfo, OperationOutcome),
    "debug.setDataBreakpoints": (DebugSetDataBreakpoints, OperationOutcome),
    "debug.cancelOperation": (DebugCancelOperation, CancelledResult),
    "debug.runInTerminalResponse": (DebugRunInTerminalResponse, AcceptedResult),
    "debug.waitEvents": (DebugWaitEvents, DebugEvents),
    "debug.pollEvents": (DebugSessionRef, DebugEvents),
    "debug.disconnect": (DebugSessionRef, DebugDisconnectResult),
    "debug.destroySession": (DebugSessionRef, DebugDestroyResult),
    "debug.listSessions": (DebugListSessions, list[DebugSessionInfo]),
}
EVENTS = {"debug": DebugEvent}
#: What ends each event stream of this module (docs/commands.md "Events").
STREAMS = {
    "debug": "``terminated`` is a session's last event, exactly once (sessions never"
    " restart); operations are then refused at once with its detail. After"
    " ``debug.destroySession`` a wait answers ``not_found``.",
}
