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
    ``workspace/executeCommand`` ``command`` with ``commandArguments``).

    Attributes:
        executable: The adapter program (absolute or on ``PATH``); left out only for ``tcpPort``
            to an adapter the supervisor does not own.
        arguments: Its arguments (at most 4 096).
        environment: Environment changes for it (null removes a variable).
        working_directory: Its working directory (absolute).
        transport: How DAP flows: ``stdio`` (default), ``tcpPort`` (connect to ``port``),
            ``tcpAnnounced`` (the adapter prints its port), ``tcpLanguageServer`` (a language
            server answers a command with the port).
        host: The TCP host: loopback only (default 127.0.0.1); not for ``stdio``.
        port: The TCP port, 1 to 65 535 (``tcpPort``).
        announce_prefix: ``tcpAnnounced``: the first line of the announce stream starts with
            this; what follows is the port (or ``host:port``).
        announce_stream: ``tcpAnnounced``: where the adapter prints it, ``stdout`` (default) or
            ``stderr``.
        connect_timeout_milliseconds: How long to reach a TCP adapter, in milliseconds (default
            10 000).
        initialize_timeout_milliseconds: How long the adapter may take to answer ``initialize``,
            in milliseconds (default 30 000); past it the session ends ``initializeTimeout``.
        language_server_session_id: ``tcpLanguageServer``: the language-server session that
            hosts the adapter.
        command: ``tcpLanguageServer``: the ``workspace/executeCommand`` command that answers
            the port.
        command_arguments: ``tcpLanguageServer``: that command's arguments.
    """

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
    """``debug.createSession``: start (or connect to) an adapter and send ``initialize``.

    Attributes:
        adapter_id: DAP ``initialize``'s ``adapterID`` (``python``, ``lldb``, ...).
        adapter: How to start and reach the adapter.
        root_path: The workspace root (absolute): where a launch's relative paths are meant
            from.
        supports_run_in_terminal_request: Tell the adapter (in ``initialize``) that
            ``runInTerminal`` may be asked (default false).
        run_in_terminal: Who runs a ``runInTerminal`` request: ``supervisor`` (default: on a PTY
            of its own) or ``host`` (a ``runInTerminalRequested`` event, answered with
            ``debug.runInTerminalResponse``).
    """

    session_id: NonEmpty | None = None
    adapter_id: NonEmpty
    adapter: Adapter
    root_path: Path
    supports_run_in_terminal_request: bool | None = None
    run_in_terminal: Literal["supervisor", "host"] | None = None


class DebugCreateSessionResult(Result, kw_only=True):
    """``debug.createSession``: the new session, answered once the adapter runs (or is
    reached) and ``initialize`` is queued to it; its readiness and capabilities come as
    events."""

    session_id: str
    state: DebugState
    adapter_pid: int | None


class DebugSessionRef(Payload, kw_only=True):
    """One debug session, by id: ``debug.disconnect`` (end the debug session and its
    adapter), ``debug.destroySession`` (forget a session that has ended;
    ``invalid_request`` before: disconnect it first) and ``debug.pollEvents`` (drain its
    events without waiting)."""

    session_id: NonEmpty


class _Operation(Payload, kw_only=True):
    """The fields of every debug operation: it ends in one ``operationCompleted`` or
    ``operationFailed`` event and its result."""

    session_id: NonEmpty
    operation_id: NonEmpty | None = None
    timeout_milliseconds: _OperationTimeout | None = None


class DebugStart(_Operation, kw_only=True):
    """``debug.launch`` / ``debug.attach``: start the debuggee (DAP ``launch``) or attach to
    one (DAP ``attach``), once per session. Sent once the adapter answered ``initialize``
    (held until then); the breakpoints and exception filters the session keeps go after the
    adapter's ``initialized``, then ``configurationDone``.

    Attributes:
        configuration: The launch or attach configuration, passed to the adapter as it is
            (``program``, ``args``, ...: the adapter's own).
    """

    configuration: JsonObject | None = None


class SourceBreakpoint(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """One source breakpoint.

    Attributes:
        line: Its line (one-based).
        column: Its column (one-based).
        log_message: A logpoint: print this (``{expressions}`` interpolated) instead of stopping
            (sent only to an adapter that announced logpoints).
    """

    line: _OneBased
    column: _OneBased | None = None
    enabled: bool | None = None
    condition: str | None = None
    hit_condition: str | None = None
    log_message: str | None = None


class DebugSetBreakpoints(_Operation, kw_only=True):
    """``debug.setBreakpoints``: replace one source's breakpoints.

    Attributes:
        path: The source file (absolute).
        breakpoints: The file's breakpoints from now on (replacing the earlier set); empty or
            absent clears them.
    """

    path: NonEmpty
    breakpoints: list[SourceBreakpoint] | None = None


class ExceptionFilter(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """One exception filter chosen.

    Attributes:
        filter_id: The filter's id, as the adapter's capabilities list it.
    """

    filter_id: NonEmpty
    enabled: bool | None = None
    condition: str | None = None


class DebugSetExceptionBreakpoints(_Operation, kw_only=True):
    """``debug.setExceptionBreakpoints``: choose the exception filters.

    Attributes:
        filters: The exception filters on from now on (ids from the adapter's
            ``exceptionBreakpointFilters``); absent: the adapter's defaults.
    """

    filters: list[ExceptionFilter] | None = None


class FunctionBreakpoint(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """One function breakpoint.

    Attributes:
        name: The function's name, as the adapter reads it.
    """

    name: NonEmpty
    enabled: bool | None = None
    condition: str | None = None
    hit_condition: str | None = None


class DebugSetFunctionBreakpoints(_Operation, kw_only=True):
    """``debug.setFunctionBreakpoints``: replace the session's function breakpoints.

    Attributes:
        breakpoints: The session's function breakpoints from now on (replacing the earlier set).
    """

    breakpoints: list[FunctionBreakpoint] | None = None


class DebugExecute(_Operation, kw_only=True):
    """``debug.execute``: run control.

    Attributes:
        command: The run-control request (``continue``, ``next``, ``stepIn``, ...); the adapter
            must support it.
        single_thread: Resume only ``threadId``, not every thread (adapters that announced
            ``supportsSingleThreadExecutionRequests``).
        target_id: ``stepIn`` / ``goto``: the target (from ``stepInTargets`` / ``gotoTargets``).
    """

    command: Literal[
        "continue", "pause", "next", "stepIn", "stepOut", "stepBack", "goto", "restart", "terminate"
    ]
    thread_id: _Id | None = None
    single_thread: bool | None = None
    target_id: _Id | None = None


class _Inspect(_Operation, tag_field="kind", kw_only=True):
    pass


class InspectThreads(_Inspect, tag="threads", kw_only=True):
    """``debug.inspect`` ``threads``: the debuggee's threads (DAP ``threads``)."""


class InspectStackTrace(_Inspect, tag="stackTrace", kw_only=True):
    """``debug.inspect`` ``stackTrace``: a thread's frames.

    Attributes:
        start_frame: The first frame to give (0: the top).
        levels: How many frames at most (absent: all).
    """

    thread_id: _Id
    start_frame: _Id | None = None
    levels: _Id | None = None


class InspectScopes(_Inspect, tag="scopes", kw_only=True):
    """``debug.inspect`` ``scopes``: a frame's scopes (DAP ``scopes``); each has the
    ``variablesReference`` a ``variables`` inspection takes."""

    frame_id: _Id


class InspectVariables(_Inspect, tag="variables", kw_only=True):
    """``debug.inspect`` ``variables``: what a variables reference holds.

    Attributes:
        variable_filter: ``named`` or ``indexed`` children only (DAP ``filter``).
        start: The first indexed child to give.
        count: How many indexed children at most.
    """

    variables_reference: _OneBased
    variable_filter: Literal["named", "indexed"] | None = None
    start: _Id | None = None
    count: _OneBased | None = None


class InspectEvaluate(_Inspect, tag="evaluate", kw_only=True):
    """``debug.inspect`` ``evaluate``: an expression in a frame.

    Attributes:
        expression: The expression, in the debuggee's language.
        context: Where it is evaluated for (``watch``, ``repl``, ``hover``, ``clipboard``,
            ``variables``).
    """

    expression: str
    frame_id: _Id | None = None
    context: Literal["watch", "repl", "hover", "clipboard", "variables"] | None = None


class InspectExceptionInfo(_Inspect, tag="exceptionInfo", kw_only=True):
    """``debug.inspect`` ``exceptionInfo``: the exception a thread stopped on (DAP
    ``exceptionInfo``; needs the adapter's ``supportsExceptionInfoRequest``)."""

    thread_id: _Id


class InspectStepInTargets(_Inspect, tag="stepInTargets", kw_only=True):
    """``debug.inspect`` ``stepInTargets``: the calls of a frame's line a step-in may enter
    (DAP ``stepInTargets``; needs ``supportsStepInTargetsRequest``)."""

    frame_id: _Id


class InspectGotoTargets(_Inspect, tag="gotoTargets", kw_only=True):
    """``debug.inspect`` ``gotoTargets``: where execution may jump to in a source line.

    Attributes:
        path: The source file (absolute).
        line: The line (one-based).
        column: The column (one-based).
    """

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
    """``debug.setVariable``: replace one visible variable's value in its container.

    Attributes:
        name: The variable's name in that reference.
        value: The new value, as an expression the adapter parses.
    """

    variables_reference: _OneBased
    name: NonEmpty
    value: str


class DebugDataBreakpointInfo(_Operation, kw_only=True):
    """``debug.dataBreakpointInfo``: the adapter's data breakpoint identity of a variable.

    Attributes:
        name: The variable (or expression) a data breakpoint would watch.
    """

    name: NonEmpty
    variables_reference: _OneBased | None = None
    frame_id: _Id | None = None


class DataBreakpoint(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """One data breakpoint.

    Attributes:
        data_id: What to watch: a ``dataId`` from ``debug.dataBreakpointInfo``.
        access_type: Stop on ``read``, ``write`` or ``readWrite`` (default: the adapter's).
    """

    data_id: NonEmpty
    enabled: bool | None = None
    access_type: Literal["read", "write", "readWrite"] | None = None
    condition: str | None = None
    hit_condition: str | None = None


class DebugSetDataBreakpoints(_Operation, kw_only=True):
    """``debug.setDataBreakpoints``: replace the session's data breakpoints.

    Attributes:
        breakpoints: The session's data breakpoints from now on (replacing the earlier set).
    """

    breakpoints: list[DataBreakpoint] | None = None


class OperationOutcome(Result, kw_only=True):
    """A debug operation's result: its id and the normalized adapter result.

    Attributes:
        result: The adapter's response body, normalized for the operation.
    """

    operation_id: str
    result: JsonValue = None


class DebugCancelOperation(Payload, kw_only=True):
    """``debug.cancelOperation``: end a running operation (DAP ``cancel`` when the adapter
    supports it), or one still waiting for its turn on the session behind earlier ones (it
    then fails the same way and nothing of it reaches the adapter).

    Attributes:
        reason: How the operation ends: ``cancelled`` (default) or ``timedOut``.
    """

    session_id: NonEmpty
    operation_id: NonEmpty
    reason: Literal["cancelled", "timedOut"] | None = None


class DebugRunInTerminalResponse(Payload, kw_only=True):
    """``debug.runInTerminalResponse``: the host's answer to ``runInTerminalRequested``.

    Attributes:
        request_id: The ``requestId`` of the ``runInTerminalRequested`` event answered.
        success: Whether the host started the program.
        process_id: The started process's id.
        shell_process_id: The shell's process id, when it ran under one.
        message: Why it failed (with ``success: false``).
    """

    session_id: NonEmpty
    request_id: NonEmpty
    success: bool
    process_id: _OneBased | None = None
    shell_process_id: _OneBased | None = None
    message: str | None = None


class DebugDisconnectResult(Result, kw_only=True):
    """``debug.disconnect``: how the session ended.

    Attributes:
        terminated: How the session ended: ``{reason, exitCode, ...}`` as its ``terminated``
            event says.
    """

    session_id: str
    state: DebugState
    terminated: JsonObject


class DebugDestroyResult(Result, kw_only=True):
    """``debug.destroySession``: the ended session is forgotten (a later command naming it
    is ``not_found``).

    Attributes:
        destroyed: Always true: an unknown session is ``not_found`` and one that has not
            ended is ``invalid_request``.
    """

    session_id: str
    destroyed: bool


class DebugSessionInfo(Result, kw_only=True):
    """One debug session as ``debug.listSessions`` and ``core.sessions`` give it.

    Attributes:
        stop: While the session is ``paused``: the ``stopped`` event that paused it
            (``{reason, threadId, allThreadsStopped, description, text, hitBreakpointIds}``),
            so a client that attaches (an editor after a reload) shows where it stopped and
            asks for threads and the stack again; absent otherwise.
        adapter_id: DAP ``adapterID``.
        request_kind: ``launch`` or ``attach`` once one was sent; null before.
        parent_session_id: The session whose adapter started this one (``startDebugging``).
        child_session_ids: Sessions started for this one's ``startDebugging`` requests.
        reason: In state ``failed``: ``internal``.
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
    """``debug.waitEvents``: wait until the session has events, or the timeout passes."""

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
    """The adapter answered ``initialize``: its capabilities (normalized).

    Attributes:
        capabilities: The adapter's DAP ``Capabilities``, normalized: every ``supports*`` flag a
            boolean, ``exceptionBreakpointFilters`` a list (possibly empty).
    """

    capabilities: JsonObject


class DebugInitialized(_DebugEvent, tag="initialized", kw_only=True):
    """The adapter sent DAP ``initialized``: once its ``initialize`` answer came too (in
    either order), the session sends the exception filters and breakpoints it keeps and
    ``configurationDone``, once."""


class DebugStopped(_DebugEvent, tag="stopped", kw_only=True):
    """A thread (or all of them) stopped: DAP ``stopped`` (breakpoint, step, pause,
    exception, ...); the session is ``paused``.

    Attributes:
        reason: Why, as the adapter said (``breakpoint``, ``step``, ``pause``, ``exception``,
            ...; ``unknown`` when it gave none).
        all_threads_stopped: True when every thread stopped, not only ``threadId``.
        description: The adapter's description of the stop, for a person.
        text: More text (an exception's message), for a person.
        hit_breakpoint_ids: The ids of the breakpoints that were hit (as the adapter numbered
            them).
    """

    reason: str
    thread_id: int | None
    all_threads_stopped: bool
    description: str | None
    text: str | None
    hit_breakpoint_ids: list[int]


class DebugContinued(_DebugEvent, tag="continued", kw_only=True):
    """Threads resumed: DAP ``continued``, or a resuming ``debug.execute`` the adapter
    answered.

    Attributes:
        all_threads_continued: True when every thread resumed, not only ``threadId``.
    """

    thread_id: int | None
    all_threads_continued: bool


class DebugOutput(_DebugEvent, tag="output", kw_only=True):
    """The debuggee or the adapter wrote output (DAP ``output``: ``category`` ``stdout``,
    ``stderr``, ``console``, ...), or a runInTerminal process did (``requestId``).
    Informational.

    Attributes:
        category: DAP ``category``: ``stdout``, ``stderr``, ``console``, ``important``,
            ``telemetry``, ...
        output: The text (at most 16 384 characters).
        truncated: True when the text was cut to that bound.
        request_id: For output of a ``runInTerminal`` process the supervisor runs: that
            request's id.
    """

    category: str
    output: str
    truncated: bool | None = None
    request_id: str | None = None


class DebugThread(_DebugEvent, tag="thread", kw_only=True):
    """A thread started or exited (DAP ``thread``). Informational.

    Attributes:
        reason: ``started`` or ``exited`` (or the adapter's own word).
    """

    reason: str
    thread_id: int | None


class DebugBreakpoint(_DebugEvent, tag="breakpoint", kw_only=True):
    """The adapter changed a breakpoint (DAP ``breakpoint``: verified, moved, removed).

    Attributes:
        reason: ``changed``, ``new`` or ``removed`` (DAP).
        breakpoint: The breakpoint as the adapter sent it (``verified``, ``line``, ``message``,
            ...).
    """

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
    ``forced`` (it needed a signal), and ``stderrTail`` when it did not end on request.

    Attributes:
        reason: Why it ended: one of the reasons listed above.
    """

    reason: str


class DebugRunInTerminalRequested(_DebugEvent, tag="runInTerminalRequested", kw_only=True):
    """The adapter asked to run the debuggee in a terminal (DAP ``runInTerminal``):
    ``handledBy`` ``supervisor`` (started on a PTY: ``processId``, or ``error``) or
    ``host`` (answer with ``debug.runInTerminalResponse``; never dropped).

    Attributes:
        request_id: The request's id: ``debug.runInTerminalResponse`` answers it (``handledBy:
            "host"``), and the process's output and exit carry it.
        kind: DAP ``kind``: ``integrated`` or ``external`` (the supervisor runs both on a PTY).
        title: The terminal title the adapter asked for.
        cwd: The working directory asked for.
        args: The command line asked for.
        env: Environment changes asked for (null removes a variable).
        args_can_be_interpreted_by_shell: DAP ``argsCanBeInterpretedByShell``: the adapter
            allows a shell to read ``args``.
        handled_by: ``supervisor`` (it runs the process) or ``host`` (the client must, and
            answer).
        process_id: When the supervisor started it: the process id.
        error: When the supervisor could not start it: why.
    """

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
    """A process the supervisor started for ``runInTerminal`` ended.

    Attributes:
        request_id: The ``runInTerminal`` request the process was started for.
        process_id: Its process id.
        reason: ``internal`` when a failure inside its terminal ended it (with ``crashReport``);
            absent when it ended by itself or with the session.
    """

    request_id: str
    process_id: int | None
    exit_code: int | None
    signal: int | None
    signal_name: str | None
    reason: str | None = None
    crash_report: JsonObject | None = None


class DebugOperationCompleted(_DebugEvent, tag="operationCompleted", kw_only=True):
    """A debug operation (launch, breakpoints, execute, inspect, ...) succeeded: exactly
    one of this or ``operationFailed`` per operation, with the command's ``result``.

    Attributes:
        command: The operation's command (``launch``, ``setBreakpoints``, ``next``,
            ``stackTrace``, ...).
        result: Its result, normalized for the operation (the adapter's response body).
    """

    operation_id: str
    command: str
    result: JsonValue = None


class DebugOperationFailed(
    _DebugEvent, tag="operationFailed", forbid_unknown_fields=False, kw_only=True
):
    """A debug operation failed: exactly one of this or ``operationCompleted`` per
    operation; ``reason`` (``refused``, ``adapterError``, ``cancelled``, ``timedOut``,
    ``sessionEnded``, ``internal``) and the catalog ``code``.

    Attributes:
        command: The operation's command.
        message: Why, for a person.
        reason: ``refused`` (the adapter or the session's state refused it), ``cancelled``,
            ``timedOut``, ``sessionEnded`` or ``internal``.
        code: The catalog code for it: ``invalid_request``, ``cancelled``, ``timed_out``,
            ``internal``, ...
    """

    operation_id: str
    command: str
    message: str
    reason: str
    code: str


class DebugAdapterEvent(_DebugEvent, tag="adapterEvent", kw_only=True):
    """An adapter event the session does not interpret, passed on (informational).

    Attributes:
        name: The DAP event's name.
        body: Its body, passed through.
    """

    name: str
    body: JsonValue = None


class DebugFact(_DebugEvent, tag="fact", forbid_unknown_fields=False, kw_only=True):
    """A structured diagnostic fact of the adapter's start (the plugin contract "Structured
    plugin diagnostics": ``debugAdapter/start``); a fact carries its own fields.

    Attributes:
        catalog_event: The fact's event name in the plugin contract's catalog.
    """

    catalog_event: str


class DebugChildSessionStarted(_DebugEvent, tag="childSessionStarted", kw_only=True):
    """The adapter's ``startDebugging`` started a child session (ended with this one).

    Attributes:
        child_session_id: The new session's id (a debug session of its own: its events are in
            its queue).
        request: ``launch`` or ``attach``, as the adapter asked.
        name: The child configuration's ``name``, when it has one.
    """

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
    """``debug.waitEvents`` / ``debug.pollEvents``: the session's events in order; ``gap``
    when some were dropped since the last drain."""

    events: list[DebugEvent]
    gap: bool


_ON_SESSION = Ordered("debug", "sessionId")
_ENDS_SESSION = Ordered("debug", "sessionId", ending=True)
#: An operation ``debug.cancelOperation`` finds while it waits for its turn.
_OPERATION = Ordered("debug", "sessionId", named=True)
#: The order rule (:class:`~._base.Ordered`): what is sent to one debug adapter takes effect
#: in arrival order (``createSession`` with a caller's ``sessionId`` first); event waits,
#: listings and cancels are ordered with nothing (a cancel must not wait behind what it
#: cancels: it finds an operation still in line by its ``operationId``).
ORDER = {
    "debug.createSession": _ON_SESSION,
    "debug.launch": _OPERATION,
    "debug.attach": _OPERATION,
    "debug.setBreakpoints": _OPERATION,
    "debug.setExceptionBreakpoints": _OPERATION,
    "debug.setFunctionBreakpoints": _OPERATION,
    "debug.execute": _OPERATION,
    "debug.inspect": _OPERATION,
    "debug.setVariable": _OPERATION,
    "debug.dataBreakpointInfo": _OPERATION,
    "debug.setDataBreakpoints": _OPERATION,
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
