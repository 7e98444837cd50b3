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
    """A readiness gate: the session is ready once ``method`` arrived with ``match``."""

    id: NonEmpty
    until: Literal["notification"]
    method: _Method
    match: JsonObject | None = None


class SessionPolicy(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What a plugin-owned session's backend may ask of its server (plugin-contract.md)."""

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
    """How many per-workspace state directories to keep, and for how long."""

    max_entries: Annotated[int, msgspec.Meta(ge=1, le=MAX_STATE_ENTRIES)]
    max_age_days: Annotated[int, msgspec.Meta(ge=1, le=MAX_STATE_AGE_DAYS)]


class WorkspaceStateSpec(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """A per-workspace state directory ``root/name`` (plugin-contract.md "Plugin-owned
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
    """Restarts after crashes: at most ``maxCrashes`` per window, with backoff."""

    max_crashes: Annotated[int, msgspec.Meta(ge=1, le=MAX_CRASHES)] | None = None
    window_milliseconds: _Timeout | None = None
    initial_backoff_milliseconds: _Backoff | None = None
    max_backoff_milliseconds: _Backoff | None = None


class LspStartServer(Payload, kw_only=True):
    """``lsp.startServer``: start a server process and begin ``initialize``.

    Attributes:
        server_id: The caller's name for the server (echoed in events).
        executable: The program; ``arguments`` follow it.
        working_directory: Absolute.
        root_uri: The workspace root URI sent in ``initialize`` (default: the file URI of
            ``workingDirectory``).
        initialization_options: Pass-through JSON for ``initialize``.
        workspace_configuration: What ``workspace/configuration`` answers.
        restart: true, or a restart budget: restart after crashes.
        plugin_id: The plugin that owns the session (plugin-contract.md).
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
            process as a plugin declares it (plugin-contract.md "Process start"; checked by
            the command): ``{launch, arguments?, validationArguments?, runtimeDependencies?,
            initializationOptions?, requiresTools?, pluginDirectory, stateDirectory,
            workspaceStateDirectory?, logDirectory?, temporaryDirectory?, architecture?,
            settings?, tools?, backend?, owner?, toolDefinitions?, context?}``. With
            ``backend: true`` the backend starts in its state directory (no
            ``workingDirectory``/``rootUri``).
        contribution: ``{pluginID, context: {contextID, generation}}``: the plugin whose
            backend reaches this server with ``lithe/host/languageServer/*``, and the
            workspace context it runs for.
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
    session_id: str


class LspSessionRef(Payload, kw_only=True):
    """A command naming one session."""

    session_id: NonEmpty


class StopStep(msgspec.Struct, rename="camel", kw_only=True):
    """One step of a stop's timeline (see :data:`LSP_STOP_STEPS`); some carry details."""

    step: str
    at_milliseconds: int
    state: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str | None = None


class LspStopResult(Result, kw_only=True):
    """``lsp.stopServer``: every caller of one stop gets the same result."""

    session_id: str
    state: LspState
    generation: int
    timeline: list[StopStep]
    last_exit: JsonObject | None


class LspRestartResult(Result, kw_only=True):
    generation: int


class LspDestroyResult(Result, kw_only=True):
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
    """``lsp.snapshot``: the session's runtime state."""

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
    """``lsp.syncDocument``: open a document, or change it (full text or LSP ranges)."""

    session_id: NonEmpty
    uri: NonEmpty
    language_id: NonEmpty
    text: str | None = None
    content_changes: list[JsonObject] | None = None


class LspSyncDocumentResult(Result, kw_only=True):
    document_version: int
    changed: bool


class LspCloseDocument(Payload, kw_only=True):
    session_id: NonEmpty
    uri: NonEmpty


class LspCloseDocumentResult(Result, kw_only=True):
    closed: bool


class FileChange(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    uri: NonEmpty
    kind: Literal["created", "changed", "deleted"]


class LspWorkspaceFilesChanged(Payload, kw_only=True):
    session_id: NonEmpty
    changes: Annotated[list[FileChange], msgspec.Meta(min_length=1)]


class LspWorkspaceFilesChangedResult(Result, kw_only=True):
    sent: int


class LspClearDiagnosticsResult(Result, kw_only=True):
    cleared: int


class LspUpdateWorkspaceConfiguration(Payload, kw_only=True):
    session_id: NonEmpty
    workspace_configuration: JsonObject


class DeliveredResult(Result, kw_only=True):
    """Whether the server got it now (false: it gets it when it is initialized)."""

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
    operation_id: str


class LspCancelOperation(Payload, kw_only=True):
    session_id: NonEmpty
    operation_id: str


class ResponseError(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A JSON-RPC error object sent on to a language server: ``code`` is an LSP
    ``integer`` (32-bit signed)."""

    code: Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
    message: str
    data: JsonValue = None


class LspServerRequestResponse(Payload, kw_only=True):
    """``lsp.serverRequestResponse``: the host's answer to a ``serverRequest`` event:
    ``result``, or ``error {code, message, data?}`` (not both: checked by the command)."""

    session_id: NonEmpty
    request_id: NonEmpty
    result: JsonValue = None
    error: ResponseError | None = None


class LspWaitEvents(Payload, kw_only=True):
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
    Never dropped."""

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
    """The server answered ``initialize`` (once per generation): its ``capabilities``."""

    capabilities: JsonObject


class LspServerInfoChanged(_LspEvent, tag="serverInfoChanged", kw_only=True):
    """The server's ``initialize`` answer named it: its ``serverInfo`` (``{name,
    version?}``)."""

    server_info: JsonValue


class LspDiagnostics(_LspEvent, tag="diagnostics", kw_only=True):
    """The server published diagnostics for a document open in the session (and, when it
    gave a ``version``, for that version), or the session cleared them (``lsp.closeDocument``,
    ``lsp.clearDiagnostics``: an empty list). Informational: dropped first when the queue
    is full."""

    uri: str
    diagnostics: list[JsonValue]
    version: int | None = None


class LspRequestCompleted(_LspEvent, tag="requestCompleted", kw_only=True):
    """An ``lsp.request`` or ``lsp.functionRequest`` ended, exactly once.

    ``result``, or ``error {provider, sessionId, code, message, stage, method, uri?,
    details?}`` with ``code`` ``requestCancelled``, ``requestTimeout``,
    ``languageServerUnavailable`` (the server stopped or crashed under it; its exit detail
    when known), ``languageServerError`` (``details {code, message, data?}``: the server's
    JSON-RPC error) or ``internal``. Never dropped."""

    operation_id: str
    method: str
    result: JsonValue = None
    error: JsonObject | None = None
    function: JsonObject | None = None


class LspRequestProgress(_LspEvent, tag="requestProgress", kw_only=True):
    """A plugin function call (``lsp.functionRequest``) reported progress
    (plugin-contract.md "Plugin functions")."""

    operation_id: str
    result: JsonObject


class LspLog(_LspEvent, tag="log", kw_only=True):
    """Something to log: the server's ``window/logMessage`` or ``window/showMessage``
    (``source`` names it, ``level`` from its type), a line it wrote on stderr (``source``
    ``stderr``, level ``debug``; at most 100 a second, ``droppedLines`` counts the rest),
    or a note of the session's (``source`` ``supervisor`` or ``serverRequest``).
    Informational."""

    level: str
    source: str
    message: str
    dropped_lines: int | None = None


class LspProgress(_LspEvent, tag="progress", kw_only=True):
    """The server sent ``$/progress``: its ``token`` and ``value``. Informational."""

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
    ``lsp.serverRequestResponse`` (never dropped)."""

    request_id: str
    method: str
    params: JsonValue = None


class LspFact(_LspEvent, tag="fact", forbid_unknown_fields=False, kw_only=True):
    """A structured diagnostic fact (plugin-contract.md "Structured plugin diagnostics"):
    each start of the server (``languageServer/start``: ``operationFinished``, or
    ``operationFailed`` with a ``host.*`` code), a crash after it, and a plugin backend's
    own facts; a fact carries its own fields (categories only, never messages)."""

    catalog_event: str


class LspFunctionsChanged(_LspEvent, tag="functionsChanged", kw_only=True):
    """A plugin backend registered or unregistered functions (plugin-contract.md "Plugin
    functions")."""

    functions: list[JsonValue]
    removed: list[JsonValue]


class LspSubscriptionDisposed(_LspEvent, tag="subscriptionDisposed", kw_only=True):
    """A plugin backend's host subscription ended (``subscriptionID``)."""

    subscription_id: str = msgspec.field(name="subscriptionID")


class LspWorkspaceStatePruned(_LspEvent, tag="workspaceStatePruned", kw_only=True):
    """The per-workspace state directories a sweep deleted (after the start)."""

    names: list[str]


class LspHostRequest(_LspEvent, tag="hostRequest", kw_only=True):
    """A plugin backend asks the host; answer with ``lsp.hostResponse``."""

    method: str
    result: JsonObject


class LspHostRequestCancelled(_LspEvent, tag="hostRequestCancelled", kw_only=True):
    """A ``hostRequest`` the host has not answered was cancelled by the backend: answer it
    no more."""

    host_request_id: str = msgspec.field(name="hostRequestID")


class LspPluginStatus(_LspEvent, tag="pluginStatus", kw_only=True):
    """The owning plugin's ``lithe/host/languageServer/setStatus`` for this server."""

    state: Literal["preparing", "ready", "degraded", "failed"]
    message: str | None = None
    percentage: int | None = None


class LspFunctionProviderStartRequired(
    _LspEvent, tag="functionProviderStartRequired", kw_only=True
):
    """A relayed function call needs the providing plugin's backend started
    (plugin-contract.md "Cross-plugin calls")."""

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
#: The order rule (:class:`~._base.Ordered`): every command that sends the server something
#: or changes the session's documents takes effect in arrival order on its session
#: (``didOpen``/``didChange``/``didClose``, requests, notifications, answers to the server's
#: requests); snapshots, event waits and cancels are ordered with nothing.
ORDER = {
    "lsp.stopServer": _ENDS_SESSION,
    "lsp.restartServer": _ENDS_SESSION,
    "lsp.destroyServer": _ENDS_SESSION,
    "lsp.syncDocument": _ON_SESSION,
    "lsp.closeDocument": _ON_SESSION,
    "lsp.workspaceFilesChanged": _ON_SESSION,
    "lsp.clearDiagnostics": _ON_SESSION,
    "lsp.updateWorkspaceConfiguration": _ON_SESSION,
    "lsp.request": _ON_SESSION,
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
