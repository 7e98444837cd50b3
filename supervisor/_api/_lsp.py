"""``lsp.*``: language-server sessions, their documents, requests and events."""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeAlias

import msgspec

from ._base import (
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
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "EVENTS",
    "LSP_STATES",
    "LSP_STOP_STEPS",
    "MAX_BACKOFF_MS",
    "MAX_CRASHES",
    "MAX_REQUEST_TIMEOUT_MS",
    "MAX_SESSION_TIMEOUT_MS",
    "MAX_SHUTDOWN_TIMEOUT_MS",
    "MAX_STATE_AGE_DAYS",
    "MAX_STATE_ENTRIES",
    "ORDER",
    "LspEvent",
    "LspStartServer",
    "LspState",
)

#: The states of a session (``stateChanged``'s ``state``).
LspState: TypeAlias = Literal["starting", "initializing", "ready", "stopping", "stopped", "failed"]
LSP_STATES: dict[str, str] = {
    "starting": "the process is being started",
    "initializing": "initialize was sent; or the handshake is done and gates are still closed",
    "ready": "initialized was sent and every readiness gate opened",
    "stopping": "a stop runs: shutdown, exit, then the process-tree cleanup",
    "stopped": "stopped on request; terminal",
    "failed": "crashed, failed its handshake or readiness; terminal unless a restart follows",
}
#: The steps of ``lsp.stopServer``'s ``timeline``, in the order they can happen.
LSP_STOP_STEPS: dict[str, str] = {
    "stopRequested": "the stop began (``state``: the state it began in)",
    "initializeCancelled": "the server was still initializing: its initialize was cancelled",
    "shutdownSent": "the shutdown request was sent",
    "shutdownAnswered": "the server answered shutdown",
    "shutdownFailed": "the server answered shutdown with an error",
    "shutdownUnanswered": "the connection ended before the answer",
    "shutdownTimedOut": "no answer within shutdownTimeoutMilliseconds",
    "exitSent": "the exit notification was sent",
    "exited": "the server process exited (exitCode, signal)",
    "terminated": "the process tree was sent SIGTERM after the exit wait",
    "killed": "the process tree was sent SIGKILL after the TERM grace",
    "unkillable": "a process of the tree outlived SIGKILL (reported, not waited for)",
    "internalFailure": "the session failed inside (a supervisor bug); cleanup still ran",
}

# Each bound is written once, here; the session enforces the same constant
# (tests/core/test_declared_bounds.py keeps them together).
#: A forwarded request's deadline (``lsp.request``, ``requestTimeoutMilliseconds``): at most
#: 300 000 ms, the reference's bound for a forwarded language-server request (default 60 000).
MAX_REQUEST_TIMEOUT_MS: Final = 300_000
DEFAULT_REQUEST_TIMEOUT_MS: Final = 60_000
#: The session's other durations (handshake, readiness, crash window): at most an hour.
MAX_SESSION_TIMEOUT_MS: Final = 3_600_000
#: ``shutdownTimeoutMilliseconds``: at most a minute.
MAX_SHUTDOWN_TIMEOUT_MS: Final = 60_000
#: A restart's backoff: at most 10 minutes.
MAX_BACKOFF_MS: Final = 600_000
#: ``restart.maxCrashes``: at most 100 per window.
MAX_CRASHES: Final = 100
#: ``workspaceState.retention``: at most 64 state directories, kept at most a year.
MAX_STATE_ENTRIES: Final = 64
MAX_STATE_AGE_DAYS: Final = 365

_Timeout = Annotated[int, msgspec.Meta(ge=1, le=MAX_SESSION_TIMEOUT_MS)]
_RequestTimeout = Annotated[int, msgspec.Meta(ge=1, le=MAX_REQUEST_TIMEOUT_MS)]
_Backoff = Annotated[int, msgspec.Meta(ge=1, le=MAX_BACKOFF_MS)]
_Method = Annotated[str, msgspec.Meta(min_length=1)]


class Gate(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """A readiness gate: the session is ready once ``method`` arrived with ``match``.

    Attributes:
        id: The gate's name, unique among the session's gates (``closedGates`` lists the ones
            still closed).
        until: Always ``notification``: the gate opens when the server sends a notification.
        match: Values the notification's params must hold (a subset match); absent: any params.
    """

    id: NonEmpty
    until: Literal["notification"]
    method: _Method
    match: JsonObject | None = None


class SessionPolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a plugin-owned session's backend may ask of its server (the plugin contract).

    Attributes:
        request_methods: The LSP requests the plugin backend may send its server
            (``lsp.pluginServerRequest``): at most 64 names.
        commands: The ``workspace/executeCommand`` commands it may run (given exactly when
            ``requestMethods`` lists ``workspace/executeCommand``): at most 128.
        serialized_commands: Of those, the commands that run one at a time (a second call joins
            the running one): at most 128.
        forward_notifications: Server notifications forwarded to the backend
            (``didReceiveNotification``): at most 32.
        server_id: The server's id under the plugin contract (its languageID).
        gates: Readiness gates of the session (used when the start gives none).
        remote: ``unsupported``: the server is not started for a remote workspace
            (``workspaceAuthority: "remote"``); default ``supported``.
    """

    request_methods: Annotated[list[NonEmpty], msgspec.Meta(max_length=64)] | None = msgspec.field(
        default=None, name="requestMethods"
    )
    commands: Annotated[list[NonEmpty], msgspec.Meta(max_length=128)] | None = None
    serialized_commands: Annotated[list[NonEmpty], msgspec.Meta(max_length=128)] | None = (
        msgspec.field(default=None, name="serializedCommands")
    )
    forward_notifications: Annotated[list[NonEmpty], msgspec.Meta(max_length=32)] | None = (
        msgspec.field(default=None, name="forwardNotifications")
    )
    server_id: str | None = msgspec.field(default=None, name="serverID")
    gates: Annotated[list[Gate], msgspec.Meta(max_length=8)] | None = None
    remote: Literal["supported", "unsupported"] | None = None


class StateRetention(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """How many per-workspace state directories to keep, and for how long.

    Attributes:
        max_entries: State directories kept at most (the open ones count).
        max_age_days: State directories not used for longer than this many days are deleted.
    """

    max_entries: Annotated[int, msgspec.Meta(ge=1, le=MAX_STATE_ENTRIES)]
    max_age_days: Annotated[int, msgspec.Meta(ge=1, le=MAX_STATE_AGE_DAYS)]


class WorkspaceStateSpec(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """A per-workspace state directory ``root/name`` (the plugin contract "Plugin-owned
    sessions"); ``root`` absolute, ``name`` one path component (checked by the command).

    Attributes:
        root: The directory that holds the state directories (absolute, not ``/``).
        name: This workspace's directory in it: one path component, made before the start.
        retention: How many state directories to keep and for how long; older ones are
            pruned after the start (a ``workspaceStatePruned`` event says which).
        active_names: The directory names of the workspaces open now: never pruned.
    """

    root: Path
    name: Path
    retention: StateRetention | None = None
    active_names: list[NonEmpty] | None = None


class RestartBudget(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """Restarts after crashes: at most ``maxCrashes`` per window, with backoff.

    Attributes:
        max_crashes: Crashes within one window that spend the budget (default 5): the crash
            that spends it ends the session ``failed`` instead of restarting it.
        window_milliseconds: The sliding window crashes are counted in, in milliseconds
            (default 180 000).
        initial_backoff_milliseconds: The wait before the first restart, in milliseconds; it
            doubles per crash (default 500).
        max_backoff_milliseconds: The longest wait before a restart, in milliseconds
            (default 8 000).
    """

    max_crashes: Annotated[int, msgspec.Meta(ge=1, le=MAX_CRASHES)] | None = None
    window_milliseconds: _Timeout | None = None
    initial_backoff_milliseconds: _Backoff | None = None
    max_backoff_milliseconds: _Backoff | None = None


class LspStartServer(Payload, kw_only=True):
    """``lsp.startServer``: start a server process and begin ``initialize``.

    Attributes:
        server_id: The caller's name for the server (echoed in events).
        executable: The program; ``arguments`` follow it. Required unless ``launchPlan`` is
            given (then refused).
        working_directory: The server's working directory, absolute. Required, except for a
            plugin backend's ``launchPlan`` (``backend: true``), which starts in its state
            directory and refuses it.
        root_uri: The workspace root URI sent in ``initialize`` (default: the file URI of
            ``workingDirectory``).
        initialization_options: Pass-through JSON for ``initialize``.
        workspace_configuration: What ``workspace/configuration`` answers.
        restart: true, or a restart budget: restart after crashes.
        plugin_id: The plugin that owns the session (the plugin contract).
        host_services: Host services granted to the plugin (needs ``pluginId``).
        workspace_authority: ``"local"`` (default) or ``"remote"``: a server whose policy
            says ``remote: "unsupported"`` is refused (``not_supported``) for a remote one.
        workspace_state: ``{root, name, retention?: {maxEntries, maxAgeDays}, activeNames?}``:
            a per-workspace state directory made before the start, old ones pruned after
            (checked by the command).
        client_capabilities: The client capabilities sent in ``initialize`` (checked by
            the command).
        host_requests: Server requests the host answers itself (``serverRequest`` events,
            answered with ``lsp.serverRequestResponse``).
        launch_plan: Instead of ``executable``/``arguments``/``initializationOptions``: the
            process as a plugin declares it (the plugin contract "Process start"; checked by
            the command): ``{launch, arguments?, validationArguments?, runtimeDependencies?,
            initializationOptions?, requiresTools?, pluginDirectory, stateDirectory,
            workspaceStateDirectory?, logDirectory?, temporaryDirectory?, architecture?,
            settings?, tools?, backend?, owner?, toolDefinitions?, context?}``. With
            ``backend: true`` the backend starts in its state directory (no
            ``workingDirectory``/``rootUri``).
        contribution: ``{pluginID, context: {contextID, generation}}``: the plugin whose
            backend reaches this server with ``lithe/host/languageServer/*``, and the
            workspace context it runs for.
        arguments: The arguments after the executable (at most 4 096); refused with
            ``launchPlan``, which gives them.
        environment: Environment changes for the server (null removes a variable).
        initialize_timeout_milliseconds: How long the server may take to answer ``initialize``,
            in milliseconds (default 60 000).
        request_timeout_milliseconds: The default deadline of its requests (``lsp.request``), in
            milliseconds: 1 to 300 000 (default 60 000).
        shutdown_timeout_milliseconds: How long a stop waits for the ``shutdown`` answer, in
            milliseconds (default 3 000).
        service_ready_idle_timeout_milliseconds: With gates: the session fails when, before
            every gate opened, the server sends no changed ``$/progress`` for this long, in
            milliseconds (default 45 000).
        service_ready_absolute_timeout_milliseconds: With gates: the session fails when the
            gates are not all open this long after the handshake, in milliseconds (default 600
            000).
        gates: Readiness gates: the session is ``ready`` once each has opened (at most 8).
        session_policy: For a plugin-owned session: what its backend may ask of the server.
    """

    server_id: NonEmpty
    executable: Path | None = None
    arguments: Annotated[list[OsText], msgspec.Meta(max_length=4096)] | None = None
    environment: Env | None = None
    working_directory: Path | None = None
    root_uri: NonEmpty | None = None
    initialization_options: JsonValue = None
    workspace_configuration: JsonObject | None = None
    initialize_timeout_milliseconds: _Timeout | None = None
    request_timeout_milliseconds: _RequestTimeout | None = None
    shutdown_timeout_milliseconds: (
        Annotated[int, msgspec.Meta(ge=1, le=MAX_SHUTDOWN_TIMEOUT_MS)] | None
    ) = None
    service_ready_idle_timeout_milliseconds: _Timeout | None = None
    service_ready_absolute_timeout_milliseconds: _Timeout | None = None
    gates: Annotated[list[Gate], msgspec.Meta(max_length=8)] | None = None
    session_policy: SessionPolicy | None = None
    restart: bool | RestartBudget | None = None
    plugin_id: NonEmpty | None = None
    host_services: JsonValue = None
    workspace_authority: Literal["local", "remote"] | None = None
    workspace_state: WorkspaceStateSpec | None = None
    client_capabilities: JsonValue = None
    host_requests: JsonValue = None
    launch_plan: JsonObject | None = None
    contribution: JsonObject | None = None


class LspStartServerResult(Result, kw_only=True):
    """``lsp.startServer``: the new session, answered once its first process started (a
    program that can not start is this command's ``launch_failed``); it is then
    ``initializing``, and a ``stateChanged`` event says when it is ``ready`` or ``failed``."""

    session_id: str


class LspSessionRef(Payload, kw_only=True):
    """One language-server session, by id: ``lsp.stopServer`` (``shutdown``, ``exit``, then
    the bounded end of its process tree; a second stop joins the first),
    ``lsp.restartServer``, ``lsp.destroyServer``, ``lsp.clearDiagnostics`` (forget the
    diagnostics the session keeps for its open documents; the server is not told) and
    ``lsp.pollEvents`` (drain its events without waiting)."""

    session_id: NonEmpty


class StopStep(msgspec.Struct, rename="camel", kw_only=True):
    """One step of a stop's timeline (see :data:`LSP_STOP_STEPS`); some carry details.

    Attributes:
        step: What happened (the stop steps are listed under "Stop steps" below).
        at_milliseconds: When, in milliseconds since the stop began.
    """

    step: str
    at_milliseconds: int
    state: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str | None = None


class LspStopResult(Result, kw_only=True):
    """``lsp.stopServer``: every caller of one stop gets the same result.

    Attributes:
        timeline: The steps of the stop, in order.
        last_exit: How the server's process ended: ``{exitCode, signal, signalName}``; null when
            none ran.
    """

    session_id: str
    state: LspState
    generation: int
    timeline: list[StopStep]
    last_exit: JsonObject | None


class LspRestartResult(Result, kw_only=True):
    """``lsp.restartServer``: the current server is stopped and a new generation started;
    answered once the new one started (a second restart meanwhile joins the first). Refused
    (``invalid_request``) while the session stops or after it ended."""

    generation: int


class LspDestroyResult(Result, kw_only=True):
    """``lsp.destroyServer``: the stopped or failed session is forgotten (one failed and
    waiting to restart is ended first); a later command naming it is ``not_found``.

    Attributes:
        destroyed: Always true: an unknown session is ``not_found`` and one that is not
            ``stopped`` or ``failed`` is ``invalid_request`` (stop it first).
    """

    destroyed: bool


class LspSnapshot(Payload, kw_only=True):
    """``lsp.snapshot``: the session's runtime state.

    Attributes:
        session_id: The session.
        include_diagnostics: Also give each open document's latest diagnostics (its
            ``diagnostics``: the last ``textDocument/publishDiagnostics`` the server sent for
            it, as the ``diagnostics`` events carried them), so a client that attaches to a
            running server (an editor after a reload) shows them without waiting for the
            server to publish again. Default false: ``diagnosticCount`` only.
    """

    session_id: NonEmpty
    include_diagnostics: bool = False


class LspSnapshotResult(Result, kw_only=True):
    """``lsp.snapshot``: the session's runtime state.

    Attributes:
        server_id: The caller's name for the server (``lsp.startServer``'s ``serverId``).
        documents: The open documents: ``{uri, languageId, version, diagnosticCount}``, with
            ``diagnostics`` when asked (``includeDiagnostics``).
        pending_requests: Requests waiting for the server: ``{operationId, method, generation,
            ageMilliseconds}``.
        capabilities: The server's ``ServerCapabilities`` (empty before its ``initialize``
            answer).
        server_info: The server's ``serverInfo``, or null.
        closed_gates: The readiness gates not opened yet.
        last_exit: How the server's last process ended (``{exitCode, signal, signalName}``), or
            null.
        stderr_tail: The last lines the server wrote on stderr (bounded).
        events: The session's event queue, counted: ``{queued, dropped}`` (events waiting for
            a drain, and those dropped since the session started because nobody took them).
        restart: The restart policy: ``{enabled, maxCrashes, windowMilliseconds, ...}``.
        stderr: ``{lines, notQueued}``: stderr lines read, and those kept out of the event queue
            by its rate bound.
        facts: The session's structured diagnostic facts (plugin contract).
        plugin: For a plugin-owned session: its backend's state (functions, pending calls, host
            requests).
        plugin_status: For a server a plugin contributes: its ``setStatus`` of the current
            generation (``{generation, state, message?, percentage?}``), null when there is
            none; absent for other servers.
    """

    session_id: str
    server_id: str
    state: LspState
    generation: int
    pid: int | None
    documents: list[JsonObject]
    pending_requests: list[JsonObject]
    capabilities: JsonObject
    server_info: JsonValue
    closed_gates: list[str]
    last_exit: JsonObject | None
    stderr_tail: list[str]
    restart: JsonObject
    stderr: JsonObject
    facts: JsonObject
    events: JsonObject
    plugin: JsonObject | None = None
    #: A contributed server's ``setStatus`` of its current generation (``{generation,
    #: state, message?, percentage?}``); null when there is none; absent for other servers.
    plugin_status: JsonObject | None = None


class LspSyncDocument(Payload, kw_only=True):
    """``lsp.syncDocument``: open a document, or change it (full text or LSP ranges).

    Attributes:
        language_id: The LSP language id (``python``); needed when the document is opened.
        text: The whole text: opens the document, or replaces its text.
        content_changes: LSP ``TextDocumentContentChangeEvent`` ranges applied to the open text,
            in order (instead of ``text``).
    """

    session_id: NonEmpty
    uri: NonEmpty
    language_id: NonEmpty
    text: str | None = None
    content_changes: list[JsonObject] | None = None


class LspSyncDocumentResult(Result, kw_only=True):
    """``lsp.syncDocument``: the document's version now.

    Attributes:
        document_version: The version the server was (or will be) told: 1 when opened, one more
            per change.
        changed: False when the text was already that (nothing was sent).
    """

    document_version: int
    changed: bool


class LspCloseDocument(Payload, kw_only=True):
    """``lsp.closeDocument``: send ``textDocument/didClose`` for an open document and forget
    its version."""

    session_id: NonEmpty
    uri: NonEmpty


class LspCloseDocumentResult(Result, kw_only=True):
    """``lsp.closeDocument``: the document is closed and its diagnostics cleared.

    Attributes:
        closed: Always true: a document that is not open is ``not_found``.
    """

    closed: bool


class FileChange(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One changed file, as LSP ``FileEvent`` says it.

    Attributes:
        kind: ``created``, ``changed`` or ``deleted``.
    """

    uri: NonEmpty
    kind: Literal["created", "changed", "deleted"]


class LspWorkspaceFilesChanged(Payload, kw_only=True):
    """``lsp.workspaceFilesChanged``: files changed on disk, sent as
    ``workspace/didChangeWatchedFiles``.

    Attributes:
        changes: The changed files (at least one).
    """

    session_id: NonEmpty
    changes: Annotated[list[FileChange], msgspec.Meta(min_length=1)]


class LspWorkspaceFilesChangedResult(Result, kw_only=True):
    """``lsp.workspaceFilesChanged``: what was sent.

    Attributes:
        sent: The changes sent to the server (all of them, in one notification).
    """

    sent: int


class LspClearDiagnosticsResult(Result, kw_only=True):
    """``lsp.clearDiagnostics``: how many documents lost theirs.

    Attributes:
        cleared: Documents whose diagnostics were cleared (each gets a ``diagnostics`` event
            with an empty list).
    """

    cleared: int


class LspUpdateWorkspaceConfiguration(Payload, kw_only=True):
    """``lsp.updateWorkspaceConfiguration``: new settings for the server.

    Attributes:
        workspace_configuration: What ``workspace/configuration`` answers from now on; the
            server is told with ``workspace/didChangeConfiguration``.
    """

    session_id: NonEmpty
    workspace_configuration: JsonObject


class DeliveredResult(Result, kw_only=True):
    """Whether the server got it now (false: it gets it when it is initialized).

    Attributes:
        delivered: True when it went to the server now; false: it goes once the server is
            initialized.
    """

    delivered: bool


class LspRequest(Payload, kw_only=True):
    """``lsp.request``: send a request; it ends in one ``requestCompleted`` event."""

    session_id: NonEmpty
    operation_id: NonEmpty | None = None
    method: _Method
    params: JsonObject | list[JsonValue] | None = None
    timeout_milliseconds: _RequestTimeout | None = None


class LspNotify(Payload, kw_only=True):
    """``lsp.notify``: send a notification to the running, initialized server.

    Refused (``invalid_request``, ``details.field: "method"``) for the notifications the
    session sends itself, naming the command that does: ``textDocument/didOpen`` /
    ``didChange`` (``lsp.syncDocument``), ``textDocument/didClose`` (``lsp.closeDocument``),
    ``workspace/didChangeConfiguration`` (``lsp.updateWorkspaceConfiguration``),
    ``initialized``, ``exit`` and ``$/cancelRequest``. Refused with the reason when the
    session failed, stops or stopped, as ``lsp.request`` is.
    """

    session_id: NonEmpty
    method: _Method
    params: JsonObject | list[JsonValue] | None = None


class OperationResult(Result, kw_only=True):
    """``lsp.request`` / ``lsp.functionRequest``: the request was sent; exactly one
    ``requestCompleted`` event with this ``operationId`` carries its outcome."""

    operation_id: str


class LspCancelOperation(Payload, kw_only=True):
    """``lsp.cancelOperation``: cancel a pending ``lsp.request`` or function call
    (``$/cancelRequest`` is sent; its ``requestCompleted`` says ``requestCancelled``). One
    still waiting for its turn on the session behind earlier commands (a pipelining client)
    ends the same way, and the server never sees it.

    Attributes:
        operation_id: The ``operationId`` the request was answered with.
    """

    session_id: NonEmpty
    operation_id: str


class ResponseError(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A JSON-RPC error object sent on to a language server: ``code`` is an LSP
    ``integer`` (32-bit signed).

    Attributes:
        code: The JSON-RPC error code (a 32-bit signed integer).
        message: The error message.
        data: Extra JSON, passed through.
    """

    code: Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
    message: str
    data: JsonValue = None


class LspServerRequestResponse(Payload, kw_only=True):
    """``lsp.serverRequestResponse``: the host's answer to a ``serverRequest`` event:
    ``result``, or ``error {code, message, data?}`` (not both: checked by the command).

    Attributes:
        request_id: The ``requestId`` of the ``serverRequest`` event answered.
        result: The result to send the server (JSON).
        error: Or the error to send it.
    """

    session_id: NonEmpty
    request_id: NonEmpty
    result: JsonValue = None
    error: ResponseError | None = None


class LspWaitEvents(Payload, kw_only=True):
    """``lsp.waitEvents``: wait until the session has events, or the timeout passes."""

    session_id: NonEmpty
    timeout_milliseconds: WaitMilliseconds | None = None


# -- events ------------------------------------------------------------------------------


class _LspEvent(Event, kw_only=True):
    session_id: str
    generation: int


class LspStateChanged(_LspEvent, tag="stateChanged", kw_only=True):
    """The session moved to another state (see Session states).

    The first event of a session is ``starting`` (``previousState`` null, ``pid``); each
    restart begins again at ``starting`` with the new ``generation`` (``reason``
    ``restart`` or ``crash``, ``backoffMilliseconds``). ``failed`` carries ``error``:
    ``{provider, sessionId, code, message, stage, exitCode, signal, signalName,
    stderrTail, underlyingMessage?, crashReport?}`` (``code``: ``exitedEarly``,
    ``crashed``, ``initializeTimeout``, ``initializeFailed``, ``protocolError``,
    ``serviceReadyTimeout``, ``launchFailed``, ``internal``); ``stopped`` carries the exit.
    Never dropped.

    Attributes:
        previous_state: The state before; null for the first.
        reason: Why, when it ended or failed (``exitedEarly``, ``crashed``,
            ``initializeTimeout``, ...).
        error: When a start failed: ``{code, message}``.
        backoff_milliseconds: Before a restart after a crash: how long until it, in
            milliseconds.
    """

    state: LspState
    previous_state: LspState | None
    reason: str | None = None
    error: JsonObject | None = None
    pid: int | None = None
    backoff_milliseconds: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str | None = None


class LspFeaturesChanged(_LspEvent, tag="featuresChanged", kw_only=True):
    """The server answered ``initialize`` (once per generation): its ``capabilities``.

    Attributes:
        capabilities: The server's ``ServerCapabilities`` from its ``initialize`` answer.
    """

    capabilities: JsonObject


class LspServerInfoChanged(_LspEvent, tag="serverInfoChanged", kw_only=True):
    """The server's ``initialize`` answer named it: its ``serverInfo`` (``{name,
    version?}``).

    Attributes:
        server_info: The server's ``serverInfo`` (``{name, version?}``).
    """

    server_info: JsonValue


class LspDiagnostics(_LspEvent, tag="diagnostics", kw_only=True):
    """The server published diagnostics for a document open in the session (and, when it
    gave a ``version``, for that version), or the session cleared them (``lsp.closeDocument``,
    ``lsp.clearDiagnostics``: an empty list). Informational: dropped first when the queue
    is full.

    Attributes:
        diagnostics: The LSP ``Diagnostic`` objects, as the server sent them; empty when
            cleared.
        version: The document version they are for, when the server said.
    """

    uri: str
    diagnostics: list[JsonValue]
    version: int | None = None


class LspRequestCompleted(_LspEvent, tag="requestCompleted", kw_only=True):
    """An ``lsp.request`` or ``lsp.functionRequest`` ended, exactly once.

    ``result``, or ``error {provider, sessionId, code, message, stage, method, uri?,
    details?}`` with ``code`` ``requestCancelled``, ``requestTimeout``,
    ``languageServerUnavailable`` (the server stopped or crashed under it; its exit detail
    when known), ``languageServerError`` (``details {code, message, data?}``: the server's
    JSON-RPC error) or ``internal``. Never dropped.

    Attributes:
        result: The server's result (absent with ``error``).
        error: Why it failed: the server's JSON-RPC error, or the supervisor's ``{code,
            message}`` (timed out, cancelled, the session ended).
        function: For a plugin function call: its outcome under the plugin contract.
    """

    operation_id: str
    method: str
    result: JsonValue = None
    error: JsonObject | None = None
    function: JsonObject | None = None


class LspRequestProgress(_LspEvent, tag="requestProgress", kw_only=True):
    """A plugin function call (``lsp.functionRequest``) reported progress
    (the plugin contract "Plugin functions").

    Attributes:
        result: The progress report (``operationID`` and the plugin's normalized fields).
    """

    operation_id: str
    result: JsonObject


class LspLog(_LspEvent, tag="log", kw_only=True):
    """Something to log: the server's ``window/logMessage`` or ``window/showMessage``
    (``source`` names it, ``level`` from its type), a line it wrote on stderr (``source``
    ``stderr``, level ``debug``; at most 100 a second, ``droppedLines`` counts the rest),
    or a note of the session's (``source`` ``supervisor`` or ``serverRequest``).
    Informational.

    Attributes:
        level: ``error``, ``warning``, ``info``, ``log`` or ``debug``.
        source: Where it came from: ``window/logMessage``, ``window/showMessage``, ``stderr``,
            ``supervisor`` or ``serverRequest``.
        message: The text (one line of stderr, or the server's message).
        dropped_lines: Stderr lines dropped by the rate bound before this one.
    """

    level: str
    source: str
    message: str
    dropped_lines: int | None = None


class LspProgress(_LspEvent, tag="progress", kw_only=True):
    """The server sent ``$/progress``: its ``token`` and ``value``. Informational.

    Attributes:
        token: The progress token.
        value: The progress value (``WorkDoneProgressBegin``/``Report``/``End``, or the server's
            own).
    """

    token: JsonValue
    value: JsonValue


class LspServerNotification(_LspEvent, tag="serverNotification", kw_only=True):
    """The server sent a notification the session forwards: one that
    ``sessionPolicy.forwardNotifications`` names (``["*"]``: every notification that is
    not an event of its own, as the session clients ask)."""

    method: str
    params: JsonValue = None


class LspServerRequest(_LspEvent, tag="serverRequest", kw_only=True):
    """The server sent a request named in ``hostRequests``; answer it with
    ``lsp.serverRequestResponse`` (never dropped).

    Attributes:
        request_id: The id to answer with ``lsp.serverRequestResponse``.
    """

    request_id: str
    method: str
    params: JsonValue = None


class LspFact(_LspEvent, tag="fact", forbid_unknown_fields=False, kw_only=True):
    """A structured diagnostic fact (the plugin contract "Structured plugin diagnostics"):
    each start of the server (``languageServer/start``: ``operationFinished``, or
    ``operationFailed`` with a ``host.*`` code), a crash after it, and a plugin backend's
    own facts; a fact carries its own fields (categories only, never messages).

    Attributes:
        catalog_event: The fact's event name in the plugin contract's catalog.
    """

    catalog_event: str


class LspFunctionsChanged(_LspEvent, tag="functionsChanged", kw_only=True):
    """A plugin backend registered or unregistered functions (the plugin contract "Plugin
    functions").

    Attributes:
        functions: The functions registered now.
        removed: The functions no longer registered.
    """

    functions: list[JsonValue]
    removed: list[JsonValue]


class LspSubscriptionDisposed(_LspEvent, tag="subscriptionDisposed", kw_only=True):
    """A plugin backend's host subscription ended (``subscriptionID``)."""

    subscription_id: str = msgspec.field(name="subscriptionID")


class LspWorkspaceStatePruned(_LspEvent, tag="workspaceStatePruned", kw_only=True):
    """The per-workspace state directories a sweep deleted (after the start).

    Attributes:
        names: The state directories deleted.
    """

    names: list[str]


class LspHostRequest(_LspEvent, tag="hostRequest", kw_only=True):
    """A plugin backend asks the host; answer with ``lsp.hostResponse``.

    Attributes:
        result: ``{hostRequestID, service, params}``: the request's id (answer it with
            ``lsp.hostResponse``), the host service and its params.
    """

    method: str
    result: JsonObject


class LspHostRequestCancelled(_LspEvent, tag="hostRequestCancelled", kw_only=True):
    """A ``hostRequest`` the host has not answered was cancelled by the backend: answer it
    no more."""

    host_request_id: str = msgspec.field(name="hostRequestID")


class LspPluginStatus(_LspEvent, tag="pluginStatus", kw_only=True):
    """The owning plugin's ``lithe/host/languageServer/setStatus`` for this server.

    Attributes:
        message: What it is doing, for a person.
        percentage: How far, 0 to 100.
    """

    state: Literal["preparing", "ready", "degraded", "failed"]
    message: str | None = None
    percentage: int | None = None


class LspFunctionProviderStartRequired(
    _LspEvent, tag="functionProviderStartRequired", kw_only=True
):
    """A relayed function call needs the providing plugin's backend started
    (the plugin contract "Cross-plugin calls").

    Attributes:
        result: ``{pluginID}``: the plugin whose backend must be started.
    """

    result: JsonObject


LspEvent: TypeAlias = (
    LspStateChanged
    | LspFeaturesChanged
    | LspServerInfoChanged
    | LspDiagnostics
    | LspRequestCompleted
    | LspRequestProgress
    | LspLog
    | LspProgress
    | LspServerNotification
    | LspServerRequest
    | LspFact
    | LspFunctionsChanged
    | LspSubscriptionDisposed
    | LspWorkspaceStatePruned
    | LspHostRequest
    | LspHostRequestCancelled
    | LspFunctionProviderStartRequired
    | LspPluginStatus
)


class LspEvents(Result, kw_only=True):
    """``lsp.waitEvents`` / ``lsp.pollEvents``."""

    events: list[LspEvent]
    gap: bool


_ON_SESSION = Ordered("lsp", "sessionId")
_ENDS_SESSION = Ordered("lsp", "sessionId", ending=True)
#: A request ``lsp.cancelOperation`` finds while it waits for its turn.
_NAMED_ON_SESSION = Ordered("lsp", "sessionId", named=True)
#: The order rule (:class:`~._base.Ordered`): every command that sends the server something
#: or changes the session's documents takes effect in arrival order on its session
#: (``didOpen``/``didChange``/``didClose``, requests, notifications, answers to the server's
#: requests); snapshots, event waits and cancels are ordered with nothing (a cancel must not
#: wait behind what it cancels: it finds a request still in line by its ``operationId``).
ORDER = {
    "lsp.stopServer": _ENDS_SESSION,
    "lsp.restartServer": _ENDS_SESSION,
    "lsp.destroyServer": _ENDS_SESSION,
    "lsp.syncDocument": _ON_SESSION,
    "lsp.closeDocument": _ON_SESSION,
    "lsp.workspaceFilesChanged": _ON_SESSION,
    "lsp.clearDiagnostics": _ON_SESSION,
    "lsp.updateWorkspaceConfiguration": _ON_SESSION,
    "lsp.request": _NAMED_ON_SESSION,
    "lsp.notify": _ON_SESSION,
    "lsp.serverRequestResponse": _ON_SESSION,
}

COMMANDS = {
    "lsp.startServer": (LspStartServer, LspStartServerResult),
    "lsp.stopServer": (LspSessionRef, LspStopResult),
    "lsp.restartServer": (LspSessionRef, LspRestartResult),
    "lsp.destroyServer": (LspSessionRef, LspDestroyResult),
    "lsp.snapshot": (LspSnapshot, LspSnapshotResult),
    "lsp.syncDocument": (LspSyncDocument, LspSyncDocumentResult),
    "lsp.closeDocument": (LspCloseDocument, LspCloseDocumentResult),
    "lsp.workspaceFilesChanged": (LspWorkspaceFilesChanged, LspWorkspaceFilesChangedResult),
    "lsp.clearDiagnostics": (LspSessionRef, LspClearDiagnosticsResult),
    "lsp.updateWorkspaceConfiguration": (LspUpdateWorkspaceConfiguration, DeliveredResult),
    "lsp.request": (LspRequest, OperationResult),
    "lsp.notify": (LspNotify, DeliveredResult),
    "lsp.cancelOperation": (LspCancelOperation, CancelledResult),
    "lsp.serverRequestResponse": (LspServerRequestResponse, AcceptedResult),
    "lsp.waitEvents": (LspWaitEvents, LspEvents),
    "lsp.pollEvents": (LspSessionRef, LspEvents),
}
EVENTS = {"lsp": LspEvent}
#: What ends each event stream of this module (docs/commands.md "Events").
STREAMS = {
    "lsp": "A session's stream goes on across restarts. It has ended once ``stateChanged``"
    " reached ``stopped`` (``lsp.stopServer``), or ``failed`` with no restart to follow"
    ' (``restart`` off, an ``internal`` failure, or after the ``log`` "restart budget spent;'
    ' not restarting"); ``lsp.request`` and ``lsp.notify`` are then refused at once with'
    " the reason. After ``lsp.destroyServer`` a wait answers ``not_found``.",
}
