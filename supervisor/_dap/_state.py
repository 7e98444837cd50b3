"""The pure part of a debug session: its state table, capabilities and breakpoint sets.

Nothing here does I/O or imports trio, so every rule is tested without a process
(tests/supervisor/dap/test_state.py). :mod:`supervisor._dap._session` drives it.

Reference: the Core API contract, the ``debug.*`` paragraphs (createSession, launch, breakpoints,
execute, inspect, disconnect) and DAP
(https://microsoft.github.io/debug-adapter-protocol/specification).

State table (in the manner of h11's ``_state.py``): ``_TRANSITIONS[(state, input)] ->
state``. A local input
(something we are about to do) that the table lacks raises :class:`LocalProtocolError` and
moves the machine to ``ERROR`` -- the session checks with :meth:`DebugLifecycle.can` first, so
that means a bug of ours. Remote inputs (the adapter's events) that the table lacks for the
current state are ignored: an adapter that sends ``stopped`` while we are already
disconnecting must not break the session.

The configuration (DAP "initialized" event and "Debug session start") has a table of its own,
:class:`ConfigurationSequence`, beside the session's: it is due once *both* the
``initialize`` response and the ``initialized`` event came, in either order (netcoredbg and
hxcpp-debugger send the event before the response), and it is sent exactly once
(:func:`configuration_requests` is its content and order).

Breakpoint sets follow the Core API contract: the complete set is replaced on every call, kept
sorted
and de-duplicated, disabled entries are kept but never sent, and only the fields the
adapter's capabilities allow are sent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Final, TypeAlias, TypeVar

from protocol import CoreError, ErrorCode, LocalProtocolError, StateMachine

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from protocol import JSONObject, JSONValue

    from .._api._debug import (
        DataBreakpoint as DataBreakpointDeclaration,
        ExceptionFilter as ExceptionFilterDeclaration,
        FunctionBreakpoint as FunctionBreakpointDeclaration,
        SourceBreakpoint as SourceBreakpointDeclaration,
    )

__all__ = (
    "CAPABILITY_FLAGS",
    "ConfigurationInput",
    "ConfigurationRequest",
    "ConfigurationSequence",
    "ConfigurationState",
    "DataBreakpoint",
    "DebugInput",
    "DebugLifecycle",
    "DebugState",
    "ExceptionFilter",
    "FunctionBreakpoint",
    "SetAction",
    "SourceBreakpoint",
    "check_execute",
    "configuration_requests",
    "data_breakpoints_arguments",
    "exception_breakpoints_arguments",
    "function_breakpoints_arguments",
    "normalize_capabilities",
    "normalize_data_breakpoints",
    "normalize_exception_filters",
    "normalize_function_breakpoints",
    "normalize_result",
    "normalize_source_breakpoints",
    "source_breakpoints_arguments",
)


class DebugState(enum.StrEnum):
    """The states of a debug session (wire values are the ``stateChanged`` event's ``state``)."""

    #: The adapter runs and ``initialize`` was sent; capabilities are unknown.
    INITIALIZING = "initializing"
    #: ``initialize`` was answered; no launch or attach has been sent yet.
    READY = "ready"
    #: ``launch`` or ``attach`` was sent and is not answered yet.
    STARTING = "starting"
    #: The debuggee runs.
    RUNNING = "running"
    #: A thread stopped (breakpoint, step, pause, exception).
    PAUSED = "paused"
    #: ``disconnect`` was begun; the adapter is being ended.
    TERMINATING = "terminating"
    #: The adapter is gone; only ``debug.destroySession`` is left.
    TERMINATED = "terminated"
    #: We broke our own table (a bug); the session is ended like TERMINATED.
    ERROR = "error"
    #: An unexpected exception inside the session (a supervision boundary caught it); the
    #: session is ended like TERMINATED, its ``terminated`` event says ``reason: "internal"``
    #: with a ``crashReport``.
    FAILED = "failed"


class DebugInput(enum.Enum):
    """What moves a session: ``SEND_*`` are ours, ``RECV_*`` are the adapter's."""

    RECV_INITIALIZE_RESPONSE = "recv_initialize_response"
    SEND_START = "send_start"
    RECV_START_RESPONSE = "recv_start_response"
    RECV_START_FAILED = "recv_start_failed"
    RECV_STOPPED = "recv_stopped"
    RECV_CONTINUED = "recv_continued"
    SEND_DISCONNECT = "send_disconnect"
    RECV_ENDED = "recv_ended"
    #: The session's boundary caught an unexpected exception and the session ended.
    FAILED_INTERNAL = "failed_internal"


_S = DebugState
_I = DebugInput
_LIVE: Final = (_S.INITIALIZING, _S.READY, _S.STARTING, _S.RUNNING, _S.PAUSED)

_TRANSITIONS: Final[dict[tuple[DebugState, DebugInput], DebugState]] = {
    (_S.INITIALIZING, _I.RECV_INITIALIZE_RESPONSE): _S.READY,
    # A launch accepted during initialization is sent after the initialize response.
    (_S.READY, _I.SEND_START): _S.STARTING,
    (_S.STARTING, _I.RECV_START_RESPONSE): _S.RUNNING,
    # A refused launch leaves the session ready for another try (or a disconnect).
    (_S.STARTING, _I.RECV_START_FAILED): _S.READY,
    # debugpy reports the first stop (stopOnEntry, an early breakpoint) before it answers
    # launch; the later launch response must not turn PAUSED back into RUNNING.
    (_S.STARTING, _I.RECV_STOPPED): _S.PAUSED,
    (_S.PAUSED, _I.RECV_START_RESPONSE): _S.PAUSED,
    (_S.RUNNING, _I.RECV_STOPPED): _S.PAUSED,
    (_S.PAUSED, _I.RECV_STOPPED): _S.PAUSED,
    (_S.PAUSED, _I.RECV_CONTINUED): _S.RUNNING,
    (_S.RUNNING, _I.RECV_CONTINUED): _S.RUNNING,
    (_S.TERMINATING, _I.RECV_ENDED): _S.TERMINATED,
    (_S.TERMINATED, _I.RECV_ENDED): _S.TERMINATED,
    (_S.ERROR, _I.RECV_ENDED): _S.ERROR,
    (_S.FAILED, _I.RECV_ENDED): _S.FAILED,
    (_S.FAILED, _I.FAILED_INTERNAL): _S.FAILED,
}
for _state in _LIVE:
    _TRANSITIONS[(_state, _I.SEND_DISCONNECT)] = _S.TERMINATING
    _TRANSITIONS[(_state, _I.RECV_ENDED)] = _S.TERMINATED
for _state in (*_LIVE, _S.TERMINATING):
    _TRANSITIONS[(_state, _I.FAILED_INTERNAL)] = _S.FAILED
del _state

_LOCAL_INPUTS: Final = frozenset({_I.SEND_START, _I.SEND_DISCONNECT})


class DebugLifecycle:
    """The state of one debug session as a transition table (pure).

    Attributes:
        state: The current :class:`DebugState`.
        request_kind: ``"launch"`` or ``"attach"`` once one was accepted, else None.
        configuration: The session's :class:`ConfigurationSequence`.
        selected_thread: The thread of the last ``stopped`` event (None before any stop and
            after ``continued`` for all threads); stepping needs one.
        terminate_override: The ``terminateDebuggee`` a child session (DAP
            ``startDebugging``) inherits from its parent, or None to derive it here.
    """

    def __init__(self) -> None:
        self._machine = StateMachine(
            _TRANSITIONS,
            DebugState.INITIALIZING,
            error=DebugState.ERROR,
            local_inputs=_LOCAL_INPUTS,
            name="debug session",
        )
        self.request_kind: str | None = None
        self.selected_thread: int | None = None
        self.terminate_override: bool | None = None
        #: The session's configuration, a table of its own (it runs beside launch/attach).
        self.configuration = ConfigurationSequence()

    @property
    def state(self) -> DebugState:
        """The current :class:`DebugState`."""
        return self._machine.state

    @state.setter
    def state(self, value: DebugState) -> None:
        self._machine.state = value

    def can(self, event: DebugInput) -> bool:
        """Whether ``event`` is a transition of the current state."""
        return self._machine.can(event)

    def handle(self, event: DebugInput) -> bool:
        """Apply ``event``.

        Returns:
            True when the state changed.

        Raises:
            LocalProtocolError: ``event`` is one of ours (``SEND_*``) and not allowed now;
                the state becomes ``ERROR``.
        """
        return self._machine.process(event)

    @property
    def terminate_debuggee(self) -> bool:
        """DAP ``disconnect.terminateDebuggee``: launch True; attach or never started False;
        a child session's is its parent's (a launched program's subprocess is ours too)."""
        if self.terminate_override is not None and self.request_kind is not None:
            return self.terminate_override
        return self.request_kind == "launch"

    @property
    def live(self) -> bool:
        """Whether the session is before ``terminating``."""
        return self.state in _LIVE


# -- capabilities ----------------------------------------------------------------------------

#: The DAP ``Capabilities`` flags the normalized ``capabilities`` event carries, as booleans.
CAPABILITY_FLAGS: Final = (
    "supportsConfigurationDoneRequest",
    "supportsConditionalBreakpoints",
    "supportsHitConditionalBreakpoints",
    "supportsLogPoints",
    "supportsFunctionBreakpoints",
    "supportsDataBreakpoints",
    "supportsExceptionFilterOptions",
    "supportsExceptionOptions",
    "supportsSetVariable",
    "supportsRestartRequest",
    "supportsTerminateRequest",
    "supportsStepBack",
    "supportsExceptionInfoRequest",
    "supportsCancelRequest",
    "supportsSingleThreadExecutionRequests",
    "supportsStepInTargetsRequest",
    "supportsGotoTargetsRequest",
    "supportsEvaluateForHovers",
)


def normalize_capabilities(body: JSONValue) -> JSONObject:
    """Normalize the ``initialize`` response body into the ``capabilities`` event.

    Every flag of :data:`CAPABILITY_FLAGS` is present and a boolean (absent or not ``true``
    is ``false``); ``exceptionBreakpointFilters`` is a list of
    ``{filter, label, default, supportsCondition}`` in the adapter's order, with malformed
    entries dropped.
    """
    source = body if isinstance(body, dict) else {}
    out: JSONObject = {name: source.get(name) is True for name in CAPABILITY_FLAGS}
    filters: list[JSONValue] = []
    raw = source.get("exceptionBreakpointFilters")
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("filter"), str):
            continue
        label = item.get("label")
        filters.append(
            {
                "filter": item["filter"],
                "label": label if isinstance(label, str) else item["filter"],
                "default": item.get("default") is True,
                "supportsCondition": item.get("supportsCondition") is True,
            }
        )
    out["exceptionBreakpointFilters"] = filters
    return out


# -- breakpoints -----------------------------------------------------------------------------


def _invalid(message: str) -> CoreError:
    return CoreError("invalid_request", message)


def _trimmed(value: str | None) -> str | None:
    """A breakpoint's text field trimmed; an empty text is absent."""
    return (value.strip() or None) if value is not None else None


def _key_text(value: str, where: str) -> str:
    """A breakpoint's key (a name, a filter id, a data id): trimmed, and not empty then."""
    text = value.strip()
    if not text:
        raise _invalid(f"{where} must be a non-empty string")
    return text


_E = TypeVar("_E")
_D = TypeVar("_D")


def _normalized(
    items: Sequence[_D],
    make: Callable[[_D, str], _E],
    key: Callable[[_E], tuple[int, int] | str],
    where: str,
) -> tuple[_E, ...]:
    """The one breakpoint-set rule (the Core API contract): each decoded entry made (its
    texts trimmed, an empty text absent), entries of one key collapsed into the last one given
    (the caller's latest intent), the set sorted by its key."""
    by_key: dict[tuple[int, int] | str, _E] = {}
    for index, item in enumerate(items):
        entry = make(item, f"{where}[{index}]")
        by_key[key(entry)] = entry
    return tuple(by_key[k] for k in sorted(by_key, key=lambda k: (isinstance(k, str), k)))


#: One optional field of a breakpoint kind: ``(attribute, wire name, capability)``; the
#: field reaches the adapter only when it negotiated the capability (None: always).
_WireField: TypeAlias = tuple[str, str, str | None]
_CONDITION: Final[_WireField] = ("condition", "condition", "supportsConditionalBreakpoints")
_HIT_CONDITION: Final[_WireField] = (
    "hit_condition",
    "hitCondition",
    "supportsHitConditionalBreakpoints",
)


class _WireForms:
    """The two wire forms of a breakpoint kind, from its table: :attr:`KEY` (attribute, wire
    name) and :attr:`FIELDS` (its optional fields, in wire order)."""

    KEY: ClassVar[tuple[str, str]]
    FIELDS: ClassVar[tuple[_WireField, ...]]
    enabled: bool

    def to_wire(self) -> JSONObject:
        """The normalized wire form (camelCase, ``enabled``, absent optional fields left
        out)."""
        out: JSONObject = {self.KEY[1]: getattr(self, self.KEY[0]), "enabled": self.enabled}
        for attribute, name, _capability in self.FIELDS:
            value = getattr(self, attribute)
            if value is not None:
                out[name] = value
        return out

    def to_adapter(self, capabilities: JSONObject) -> JSONObject:
        """The DAP form sent to the adapter: only the fields its capabilities allow."""
        out: JSONObject = {self.KEY[1]: getattr(self, self.KEY[0])}
        for attribute, name, capability in self.FIELDS:
            value = getattr(self, attribute)
            if value is not None and (capability is None or capabilities.get(capability)):
                out[name] = value
        return out


def _sent(breakpoints: Sequence[_WireForms], capabilities: JSONObject) -> list[JSONValue]:
    """The enabled entries of a set in the adapter's form."""
    return [bp.to_adapter(capabilities) for bp in breakpoints if bp.enabled]


@dataclass(frozen=True, order=True)
class SourceBreakpoint(_WireForms):
    """One source breakpoint as the session keeps it (one-based line and column).

    Ordering is ``(line, column or 0, ...)``; the set is keyed by ``(line, column)``.
    """

    KEY: ClassVar[tuple[str, str]] = ("line", "line")
    FIELDS: ClassVar[tuple[_WireField, ...]] = (
        ("column", "column", None),
        _CONDITION,
        _HIT_CONDITION,
        ("log_message", "logMessage", "supportsLogPoints"),
    )

    line: int
    column: int | None = None
    enabled: bool = True
    condition: str | None = None
    hit_condition: str | None = None
    log_message: str | None = None


def normalize_source_breakpoints(
    items: Sequence[SourceBreakpointDeclaration],
) -> tuple[SourceBreakpoint, ...]:
    """One source's breakpoints (``debug.setBreakpoints``, decoded), sorted by line then
    column (no column first), one per ``(line, column)``; see :func:`_normalized`."""
    return _normalized(
        items,
        lambda d, _where: SourceBreakpoint(
            line=d.line,
            column=d.column,
            enabled=d.enabled is not False,
            condition=_trimmed(d.condition),
            hit_condition=_trimmed(d.hit_condition),
            log_message=_trimmed(d.log_message),
        ),
        lambda bp: (bp.line, bp.column or 0),
        "breakpoints",
    )


def source_breakpoints_arguments(
    path: str, breakpoints: tuple[SourceBreakpoint, ...], capabilities: JSONObject
) -> JSONObject:
    """The DAP ``setBreakpoints`` arguments for one source: enabled entries only, and only
    the optional fields the adapter's capabilities allow."""
    sent = _sent(breakpoints, capabilities)
    return {"source": {"path": path}, "breakpoints": sent, "sourceModified": False}


@dataclass(frozen=True, order=True)
class FunctionBreakpoint(_WireForms):
    """One function breakpoint, keyed and ordered by ``name``."""

    KEY: ClassVar[tuple[str, str]] = ("name", "name")
    FIELDS: ClassVar[tuple[_WireField, ...]] = (_CONDITION, _HIT_CONDITION)

    name: str
    enabled: bool = True
    condition: str | None = None
    hit_condition: str | None = None


def normalize_function_breakpoints(
    items: Sequence[FunctionBreakpointDeclaration],
) -> tuple[FunctionBreakpoint, ...]:
    """Function breakpoints (decoded), sorted by name, one per name (:func:`_normalized`).

    Raises:
        CoreError: ``invalid_request`` for a name that is blank once trimmed.
    """
    return _normalized(
        items,
        lambda d, where: FunctionBreakpoint(
            _key_text(d.name, f"{where}.name"),
            d.enabled is not False,
            _trimmed(d.condition),
            _trimmed(d.hit_condition),
        ),
        lambda bp: bp.name,
        "breakpoints",
    )


def function_breakpoints_arguments(
    breakpoints: tuple[FunctionBreakpoint, ...], capabilities: JSONObject
) -> JSONObject:
    """DAP ``setFunctionBreakpoints`` arguments: enabled entries, allowed fields only."""
    return {"breakpoints": _sent(breakpoints, capabilities)}


@dataclass(frozen=True, order=True)
class ExceptionFilter(_WireForms):
    """One exception filter selection, keyed and ordered by ``filter_id`` (its adapter form
    is :func:`exception_breakpoints_arguments`', not :meth:`to_adapter`)."""

    KEY: ClassVar[tuple[str, str]] = ("filter_id", "filterId")
    FIELDS: ClassVar[tuple[_WireField, ...]] = (("condition", "condition", None),)

    filter_id: str
    enabled: bool = True
    condition: str | None = None


def normalize_exception_filters(
    items: Sequence[ExceptionFilterDeclaration],
) -> tuple[ExceptionFilter, ...]:
    """Exception filters (decoded), sorted by filter id, one per id (:func:`_normalized`).

    Raises:
        CoreError: ``invalid_request`` for a filter id that is blank once trimmed.
    """
    return _normalized(
        items,
        lambda d, where: ExceptionFilter(
            _key_text(d.filter_id, f"{where}.filterId"),
            d.enabled is not False,
            _trimmed(d.condition),
        ),
        lambda f: f.filter_id,
        "filters",
    )


def default_exception_filters(capabilities: JSONObject) -> tuple[ExceptionFilter, ...]:
    """The adapter's declared defaults, used until a client configures a selection."""
    filters = capabilities.get("exceptionBreakpointFilters")
    chosen = [
        ExceptionFilter(str(item["filter"]))
        for item in (filters if isinstance(filters, list) else [])
        if isinstance(item, dict) and item.get("default") is True
    ]
    return tuple(sorted(set(chosen)))


def exception_breakpoints_arguments(
    filters: tuple[ExceptionFilter, ...], capabilities: JSONObject
) -> JSONObject:
    """DAP ``setExceptionBreakpoints`` arguments: enabled filters; conditions travel as
    ``filterOptions`` only when the adapter negotiated ``supportsExceptionFilterOptions``."""
    enabled = [f for f in filters if f.enabled]
    if capabilities.get("supportsExceptionFilterOptions"):
        plain: list[JSONValue] = [f.filter_id for f in enabled if f.condition is None]
        options: list[JSONValue] = [
            {"filterId": f.filter_id, "condition": f.condition}
            for f in enabled
            if f.condition is not None
        ]
        return {"filters": plain, "filterOptions": options}
    return {"filters": [f.filter_id for f in enabled]}


_ACCESS_TYPES: Final = ("read", "write", "readWrite")


@dataclass(frozen=True, order=True)
class DataBreakpoint(_WireForms):
    """One data breakpoint (an adapter-owned ``dataId`` from ``debug.dataBreakpointInfo``),
    keyed and ordered by ``data_id``."""

    KEY: ClassVar[tuple[str, str]] = ("data_id", "dataId")
    FIELDS: ClassVar[tuple[_WireField, ...]] = (
        ("access_type", "accessType", None),
        _CONDITION,
        _HIT_CONDITION,
    )

    data_id: str
    enabled: bool = True
    access_type: str | None = None
    condition: str | None = None
    hit_condition: str | None = None


def normalize_data_breakpoints(
    items: Sequence[DataBreakpointDeclaration],
) -> tuple[DataBreakpoint, ...]:
    """Data breakpoints (decoded), sorted by ``dataId``, one per id (:func:`_normalized`).

    Raises:
        CoreError: ``invalid_request`` for a data id that is blank once trimmed.
    """
    return _normalized(
        items,
        lambda d, where: DataBreakpoint(
            _key_text(d.data_id, f"{where}.dataId"),
            d.enabled is not False,
            d.access_type,
            _trimmed(d.condition),
            _trimmed(d.hit_condition),
        ),
        lambda bp: bp.data_id,
        "breakpoints",
    )


def data_breakpoints_arguments(
    breakpoints: tuple[DataBreakpoint, ...], capabilities: JSONObject
) -> JSONObject:
    """DAP ``setDataBreakpoints`` arguments: enabled entries; conditions only when allowed."""
    return {"breakpoints": _sent(breakpoints, capabilities)}


# -- configuration ---------------------------------------------------------------------------


class ConfigurationState(enum.StrEnum):
    """Where a session's DAP configuration is.

    DAP, "initialized" event: the client configures (breakpoints, exception filters,
    ``configurationDone``) once the adapter sent the event, "but not before the initialize
    request has finished"; an adapter that sends the event first is answered as if it came
    second.
    """

    #: Neither the ``initialize`` response nor the ``initialized`` event has come.
    AWAITING_BOTH = "awaitingBoth"
    #: The ``initialize`` response came (capabilities known); the event has not.
    AWAITING_EVENT = "awaitingEvent"
    #: The ``initialized`` event came before the ``initialize`` response.
    AWAITING_RESPONSE = "awaitingResponse"
    #: Both came: the configuration may begin (once no ``launch``/``attach`` is held).
    DUE = "due"
    #: The configuration requests are being sent, one after the other's answer.
    CONFIGURING = "configuring"
    #: Its last request (``configurationDone`` when supported) is queued to the adapter.
    CONFIGURED = "configured"


class ConfigurationInput(enum.Enum):
    """What moves a configuration: ``RECV_*`` are the adapter's, ``SEND_*`` ours."""

    RECV_INITIALIZE_RESPONSE = "recv_initialize_response"
    RECV_INITIALIZED = "recv_initialized"
    #: The configuration begins (its requests are planned from the sets recorded so far).
    SEND_CONFIGURATION = "send_configuration"
    #: Its last request was queued.
    SEND_CONFIGURATION_DONE = "send_configuration_done"


_C = ConfigurationState
_CI = ConfigurationInput
#: A second ``initialized`` event (or one after the configuration) is a remote input the table
#: lacks: ignored, so a session is configured once.
_CONFIGURATION_TRANSITIONS: Final[
    dict[tuple[ConfigurationState, ConfigurationInput], ConfigurationState]
] = {
    (_C.AWAITING_BOTH, _CI.RECV_INITIALIZE_RESPONSE): _C.AWAITING_EVENT,
    (_C.AWAITING_BOTH, _CI.RECV_INITIALIZED): _C.AWAITING_RESPONSE,
    (_C.AWAITING_EVENT, _CI.RECV_INITIALIZED): _C.DUE,
    (_C.AWAITING_RESPONSE, _CI.RECV_INITIALIZE_RESPONSE): _C.DUE,
    (_C.DUE, _CI.SEND_CONFIGURATION): _C.CONFIGURING,
    (_C.CONFIGURING, _CI.SEND_CONFIGURATION_DONE): _C.CONFIGURED,
}
_CONFIGURATION_LOCAL: Final = frozenset({_CI.SEND_CONFIGURATION, _CI.SEND_CONFIGURATION_DONE})


class SetAction(enum.Enum):
    """What a ``debug.set*Breakpoints`` / ``debug.setExceptionBreakpoints`` does now."""

    #: Before the configuration began: kept, and sent as part of it (answer ``sent: false``).
    RECORD = "record"
    #: While the configuration is sent: sent directly once it is (its own sets went first).
    WAIT = "wait"
    #: After the configuration: sent directly.
    SEND = "send"


@dataclass(frozen=True)
class ConfigurationRequest:
    """One request of the configuration: the DAP command and its arguments."""

    command: str
    arguments: JSONObject | None = None


def configuration_requests(
    capabilities: JSONObject,
    *,
    exception_filters: tuple[ExceptionFilter, ...] | None,
    function_breakpoints: tuple[FunctionBreakpoint, ...],
    data_breakpoints: tuple[DataBreakpoint, ...],
    source_breakpoints: dict[str, tuple[SourceBreakpoint, ...]],
) -> tuple[ConfigurationRequest, ...]:
    """The configuration's requests, in the order they are sent, each once.

    the Core API contract: the exception filters (the client's selection, else the adapter's
    ``default: true`` filters) when the adapter declared ``exceptionBreakpointFilters``;
    ``setFunctionBreakpoints`` with ``supportsFunctionBreakpoints`` and a set;
    ``setDataBreakpoints`` with ``supportsDataBreakpoints`` and a set; ``setBreakpoints`` for
    every source in path order; ``configurationDone`` with
    ``supportsConfigurationDoneRequest``.

    Without ``supportsConfigurationDoneRequest``, DAP ("initialized" event) has the client
    send ``setExceptionBreakpoints`` anyway, and older adapters take it as the end of the
    configuration: it then comes last, after the breakpoints (an empty ``filters`` when
    the adapter declared none).
    """
    filters = exception_filters
    if filters is None:
        filters = default_exception_filters(capabilities)
    done = bool(capabilities.get("supportsConfigurationDoneRequest"))
    exceptions = ConfigurationRequest(
        "setExceptionBreakpoints", exception_breakpoints_arguments(filters, capabilities)
    )
    out: list[ConfigurationRequest] = []
    if done and capabilities.get("exceptionBreakpointFilters"):
        out.append(exceptions)
    if capabilities.get("supportsFunctionBreakpoints") and function_breakpoints:
        arguments = function_breakpoints_arguments(function_breakpoints, capabilities)
        out.append(ConfigurationRequest("setFunctionBreakpoints", arguments))
    if capabilities.get("supportsDataBreakpoints") and data_breakpoints:
        arguments = data_breakpoints_arguments(data_breakpoints, capabilities)
        out.append(ConfigurationRequest("setDataBreakpoints", arguments))
    for path in sorted(source_breakpoints):
        arguments = source_breakpoints_arguments(path, source_breakpoints[path], capabilities)
        out.append(ConfigurationRequest("setBreakpoints", arguments))
    out.append(ConfigurationRequest("configurationDone") if done else exceptions)
    return tuple(out)


class ConfigurationSequence:
    """A debug session's DAP configuration as a transition table (pure).

    It is *due* once the ``initialize`` response and the ``initialized`` event both came
    (either order) and no ``launch``/``attach`` is held: one accepted before the
    ``initialize`` response is sent first, then the configuration, so the adapter sees
    them in the order the client gave them. It begins once
    (:meth:`begin`, which plans its requests from the sets recorded so far) and ends once
    its last request is queued (:meth:`finish`); a second ``initialized`` event changes
    nothing.

    Attributes:
        start_held: A ``launch``/``attach`` was accepted and its request is not queued yet.
    """

    def __init__(self) -> None:
        self._machine = StateMachine(
            _CONFIGURATION_TRANSITIONS,
            ConfigurationState.AWAITING_BOTH,
            local_inputs=_CONFIGURATION_LOCAL,
            name="debug configuration",
        )
        self.start_held = False

    @property
    def state(self) -> ConfigurationState:
        """The current :class:`ConfigurationState`."""
        return self._machine.state

    def handle(self, event: ConfigurationInput) -> bool:
        """Apply an adapter's input (``RECV_*``).

        Returns:
            True when the state changed (a repeated input changes nothing).

        Raises:
            LocalProtocolError: ``event`` is one of ours and not allowed now.
        """
        return self._machine.process(event)

    @property
    def due(self) -> bool:
        """Whether the configuration may begin now."""
        return self.state is ConfigurationState.DUE and not self.start_held

    @property
    def set_action(self) -> SetAction:
        """What a breakpoint or exception filter set does now (:class:`SetAction`)."""
        if self.state is ConfigurationState.CONFIGURED:
            return SetAction.SEND
        if self.state is ConfigurationState.CONFIGURING:
            return SetAction.WAIT
        return SetAction.RECORD

    def begin(
        self,
        capabilities: JSONObject,
        *,
        exception_filters: tuple[ExceptionFilter, ...] | None,
        function_breakpoints: tuple[FunctionBreakpoint, ...],
        data_breakpoints: tuple[DataBreakpoint, ...],
        source_breakpoints: dict[str, tuple[SourceBreakpoint, ...]],
    ) -> tuple[ConfigurationRequest, ...]:
        """Begin the configuration: its requests (:func:`configuration_requests`), from the
        sets recorded until now.

        Raises:
            LocalProtocolError: it is not due (begun already, or a start is held).
        """
        if self.start_held:
            raise LocalProtocolError(
                "the configuration waits for the held launch or attach",
                error_code=ErrorCode.INVALID_REQUEST,
            )
        self._machine.process(ConfigurationInput.SEND_CONFIGURATION)
        return configuration_requests(
            capabilities,
            exception_filters=exception_filters,
            function_breakpoints=function_breakpoints,
            data_breakpoints=data_breakpoints,
            source_breakpoints=source_breakpoints,
        )

    def finish(self) -> None:
        """The configuration's last request was queued.

        Raises:
            LocalProtocolError: it was not begun, or finished already.
        """
        self._machine.process(ConfigurationInput.SEND_CONFIGURATION_DONE)


# -- execute ---------------------------------------------------------------------------------

#: ``debug.execute`` commands and the DAP request each becomes.
EXECUTE_COMMANDS: Final = {
    "continue": "continue",
    "pause": "pause",
    "next": "next",
    "stepIn": "stepIn",
    "stepOut": "stepOut",
    "stepBack": "stepBack",
    "goto": "goto",
    "restart": "restart",
    "terminate": "terminate",
}
#: Commands after which the debuggee runs until the next ``stopped``.
RESUMING: Final = frozenset({"continue", "next", "stepIn", "stepOut", "stepBack", "goto"})
_SESSION_LEVEL: Final = frozenset({"restart", "terminate"})
_CAPABILITY_OF: Final = {
    "restart": "supportsRestartRequest",
    "terminate": "supportsTerminateRequest",
    "stepBack": "supportsStepBack",
    "goto": "supportsGotoTargetsRequest",
}


@dataclass(frozen=True)
class ExecutePlan:
    """What ``debug.execute`` sends: the DAP command and its arguments."""

    command: str
    arguments: JSONObject = field(default_factory=dict)


def check_execute(
    lifecycle: DebugLifecycle,
    capabilities: JSONObject | None,
    command: str,
    thread_id: int | None,
    single_thread: bool,
    target_id: int | None = None,
) -> ExecutePlan:
    """Decide what a ``debug.execute`` sends, or refuse it before anything is sent.

    Rules (the Core API contract ``debug.execute``, "Smart step into and run to cursor"):
    ``next``/``stepIn``/``stepOut``/``stepBack``/``goto``/``continue`` only while paused
    with a thread (the given one, else the last stopped thread); ``pause`` only while
    running; ``stepBack`` only with ``supportsStepBack``; ``goto`` needs ``targetId`` (from
    ``debug.inspect`` ``gotoTargets``) and ``supportsGotoTargetsRequest``; ``stepIn`` takes
    an optional ``targetId`` (from ``stepInTargets``) with ``supportsStepInTargetsRequest``;
    ``restart``/``terminate`` only when the adapter advertised them, as session-level
    requests without a thread; ``singleThread`` only with
    ``supportsSingleThreadExecutionRequests``.

    Raises:
        CoreError: ``invalid_request`` for an unknown command, a wrong state, or a
            ``targetId`` missing (goto) or not allowed; ``not_supported`` for a capability
            the adapter did not advertise.
    """
    if command not in EXECUTE_COMMANDS:
        raise _invalid(f"debug.execute: unknown command {command!r}")
    caps = capabilities or {}
    state = lifecycle.state
    if target_id is not None and command not in ("goto", "stepIn"):
        raise _invalid(f"debug.execute {command}: targetId is for goto and stepIn")
    if command == "goto" and target_id is None:
        raise _invalid("debug.execute goto: targetId is required (debug.inspect gotoTargets)")
    if command in _CAPABILITY_OF and not caps.get(_CAPABILITY_OF[command]):
        raise CoreError("not_supported", f"The debug adapter does not support {command}")
    if (
        target_id is not None
        and command == "stepIn"
        and not caps.get("supportsStepInTargetsRequest")
    ):
        raise CoreError("not_supported", "The debug adapter does not support stepInTargets")
    if command in _SESSION_LEVEL:
        if state not in (DebugState.RUNNING, DebugState.PAUSED):
            raise _invalid(f"debug.execute {command}: the session is {state.value}")
        return ExecutePlan(EXECUTE_COMMANDS[command])
    if single_thread and not caps.get("supportsSingleThreadExecutionRequests"):
        raise CoreError("not_supported", "The debug adapter does not support singleThread")
    if command == "pause":
        if state is not DebugState.RUNNING:
            raise _invalid(f"debug.execute pause: the session is {state.value}, not running")
        thread = thread_id if thread_id is not None else lifecycle.selected_thread
        arguments: JSONObject = {"threadId": thread if thread is not None else 0}
    else:
        if state is not DebugState.PAUSED:
            raise _invalid(f"debug.execute {command}: the session is {state.value}, not paused")
        thread = thread_id if thread_id is not None else lifecycle.selected_thread
        if thread is None:
            raise _invalid(f"debug.execute {command}: no thread is selected")
        arguments = {"threadId": thread}
        if target_id is not None:
            arguments["targetId"] = target_id
    if single_thread:
        arguments["singleThread"] = True
    return ExecutePlan(EXECUTE_COMMANDS[command], arguments)


# -- inspect results -------------------------------------------------------------------------


def _count(value: JSONValue) -> int:
    """Named/indexed variable counts: never negative, 0 when absent or invalid."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def _ref(value: JSONValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def _text(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None


def _objects(body: JSONValue, name: str) -> list[JSONObject]:
    items = body.get(name) if isinstance(body, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _source(value: JSONValue) -> JSONValue:
    if not isinstance(value, dict):
        return None
    return {"name": _text(value.get("name")), "path": _text(value.get("path"))}


def _int_or_none(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def normalize_result(kind: str, body: JSONValue) -> JSONObject:
    """Normalize a response body of ``debug.inspect`` (``kind``) into our result shape.

    Shapes: ``threads`` ``{threads: [{id, name}]}``; ``stackTrace`` ``{stackFrames: [{id,
    name, line, column, source: {name, path} | null, presentationHint}], totalFrames}``;
    ``scopes`` ``{scopes: [{name, variablesReference, namedVariables, indexedVariables,
    expensive}]}``; ``variables`` ``{variables: [{name, value, type, evaluateName,
    variablesReference, namedVariables, indexedVariables}]}``; ``evaluate`` ``{result, type,
    variablesReference, namedVariables, indexedVariables}``; ``exceptionInfo``
    ``{exceptionId, description, breakMode, details: {message, typeName, fullTypeName,
    evaluateName, stackTrace, innerException: [...]} | null}``; ``stepInTargets`` /
    ``gotoTargets`` ``{targets: [{id, label, line, column, endLine, endColumn}]}``;
    ``setVariable`` ``{value, type, variablesReference, namedVariables, indexedVariables}``;
    ``dataBreakpointInfo`` ``{dataId, description, accessTypes, canPersist}``. Stack frames
    carry ``isFiltered``. Counts and references are never negative (0 when absent or
    invalid); lines and columns are one-based as DAP sends them.
    """
    normalize = _NORMALIZERS.get(kind)
    if normalize is None:
        raise ValueError(f"unknown inspect kind {kind!r}")
    return normalize(body, body if isinstance(body, dict) else {})


def _normalized_threads(body: JSONValue, source: JSONObject) -> JSONObject:
    return {
        "threads": [
            {"id": _int_or_none(t.get("id")), "name": _text(t.get("name")) or ""}
            for t in _objects(body, "threads")
        ]
    }


def _normalized_stack_trace(body: JSONValue, source: JSONObject) -> JSONObject:
    frames: list[JSONValue] = [
        {
            "id": _int_or_none(f.get("id")),
            "name": _text(f.get("name")) or "",
            "line": _int_or_none(f.get("line")),
            "column": _int_or_none(f.get("column")),
            "source": _source(f.get("source")),
            "presentationHint": _text(f.get("presentationHint")),
            "isFiltered": _is_filtered(f),
        }
        for f in _objects(body, "stackFrames")
    ]
    total = _int_or_none(source.get("totalFrames"))
    return {"stackFrames": frames, "totalFrames": total if total is not None else len(frames)}


def _normalized_scopes(body: JSONValue, source: JSONObject) -> JSONObject:
    return {
        "scopes": [
            {
                "name": _text(s.get("name")) or "",
                "variablesReference": _ref(s.get("variablesReference")),
                "namedVariables": _count(s.get("namedVariables")),
                "indexedVariables": _count(s.get("indexedVariables")),
                "expensive": s.get("expensive") is True,
            }
            for s in _objects(body, "scopes")
        ]
    }


def _normalized_variables(body: JSONValue, source: JSONObject) -> JSONObject:
    return {
        "variables": [
            {
                "name": _text(v.get("name")) or "",
                "value": _text(v.get("value")) or "",
                "type": _text(v.get("type")),
                "evaluateName": _text(v.get("evaluateName")),
                "variablesReference": _ref(v.get("variablesReference")),
                "namedVariables": _count(v.get("namedVariables")),
                "indexedVariables": _count(v.get("indexedVariables")),
            }
            for v in _objects(body, "variables")
        ]
    }


def _normalized_evaluate(body: JSONValue, source: JSONObject) -> JSONObject:
    return {
        "result": _text(source.get("result")) or "",
        "type": _text(source.get("type")),
        "variablesReference": _ref(source.get("variablesReference")),
        "namedVariables": _count(source.get("namedVariables")),
        "indexedVariables": _count(source.get("indexedVariables")),
    }


def _normalized_exception_info(body: JSONValue, source: JSONObject) -> JSONObject:
    mode = source.get("breakMode")
    return {
        "exceptionId": _text(source.get("exceptionId")) or "",
        "description": _text(source.get("description")),
        "breakMode": mode if mode in _BREAK_MODES else "never",
        "details": _exception_details(source.get("details"), _MAX_INNER_DEPTH),
    }


def _normalized_targets(body: JSONValue, source: JSONObject) -> JSONObject:
    return {
        "targets": [
            {
                "id": _int_or_none(t.get("id")),
                "label": _text(t.get("label")) or "",
                "line": _int_or_none(t.get("line")),
                "column": _int_or_none(t.get("column")),
                "endLine": _int_or_none(t.get("endLine")),
                "endColumn": _int_or_none(t.get("endColumn")),
            }
            for t in _objects(body, "targets")
            if _int_or_none(t.get("id")) is not None
        ]
    }


def _normalized_set_variable(body: JSONValue, source: JSONObject) -> JSONObject:
    return {
        "value": _text(source.get("value")) or "",
        "type": _text(source.get("type")),
        "variablesReference": _ref(source.get("variablesReference")),
        "namedVariables": _count(source.get("namedVariables")),
        "indexedVariables": _count(source.get("indexedVariables")),
    }


def _normalized_data_breakpoint_info(body: JSONValue, source: JSONObject) -> JSONObject:
    access = source.get("accessTypes")
    return {
        "dataId": _text(source.get("dataId")),
        "description": _text(source.get("description")) or "",
        "accessTypes": [a for a in access if a in _ACCESS_TYPES]
        if isinstance(access, list)
        else [],
        "canPersist": source.get("canPersist") is True,
    }


#: ``debug.inspect`` kind -> its normalizer (``normalize_result``).
_NORMALIZERS: Final[dict[str, Callable[[JSONValue, JSONObject], JSONObject]]] = {
    "threads": _normalized_threads,
    "stackTrace": _normalized_stack_trace,
    "scopes": _normalized_scopes,
    "variables": _normalized_variables,
    "evaluate": _normalized_evaluate,
    "exceptionInfo": _normalized_exception_info,
    "stepInTargets": _normalized_targets,
    "gotoTargets": _normalized_targets,
    "setVariable": _normalized_set_variable,
    "dataBreakpointInfo": _normalized_data_breakpoint_info,
}


_BREAK_MODES: Final = ("never", "always", "unhandled", "userUnhandled")
#: Nested ``innerException`` levels kept; deeper ones are cut (the result says so).
_MAX_INNER_DEPTH: Final = 8


def _is_filtered(frame: JSONObject) -> bool:
    """the Core API contract "isFiltered": presentation metadata only. Without class filters (only
    Java defines them) a frame is filtered when the adapter itself marks it as not the
    user's code: frame hint ``subtle``, or source hint ``deemphasize``."""
    source = frame.get("source")
    source_hint = source.get("presentationHint") if isinstance(source, dict) else None
    return frame.get("presentationHint") == "subtle" or source_hint == "deemphasize"


def _exception_details(value: JSONValue, depth: int) -> JSONObject | None:
    """DAP ``ExceptionDetails`` normalized: ``{message, typeName, fullTypeName,
    evaluateName, stackTrace, innerException: [...]}`` (absent texts are null, nested
    details normalized alike, at most :data:`_MAX_INNER_DEPTH` levels)."""
    if not isinstance(value, dict):
        return None
    inner = value.get("innerException")
    nested: list[JSONValue] = []
    if depth > 0 and isinstance(inner, list):
        for item in inner:
            normalized = _exception_details(item, depth - 1)
            if normalized is not None:
                nested.append(normalized)
    out: JSONObject = {
        name: _text(value.get(name))
        for name in ("message", "typeName", "fullTypeName", "evaluateName", "stackTrace")
    }
    out["innerException"] = nested
    if depth == 0 and isinstance(inner, list) and inner:
        out["innerExceptionCut"] = True
    return out
