"""The ``debug.*`` commands: debug sessions over DAP as a Core service.

Reference: core-api.md ``debug.*`` and plugin-contract.md "Debug adapters" / "Remote attach";
each command validates its whole payload before anything is sent or started, so bad input
starts and loses nothing. Sessions run in the Core's root nursery
(:meth:`DebugSession.run`), each a supervision boundary: an unexpected exception inside one
ends that session only (state ``failed``, ``terminated`` with ``reason: "internal"`` and a
``crashReport``; ``debug.listSessions`` shows both), never the Core. Closing the service
stops every live session with the DAP stop sequence, concurrently, shielded and bounded.

Operation commands (``debug.launch``, ``debug.attach``, ``debug.set*Breakpoints``,
``debug.dataBreakpointInfo``, ``debug.setVariable``, ``debug.execute``, ``debug.inspect``)
take an optional ``operationId`` and an optional ``timeoutMilliseconds`` (default 60 000, at
most 300 000), wait for the adapter, and return
``{operationId, result}``; the same outcome is queued as exactly one ``operationCompleted`` or
``operationFailed`` event. A failure's ``details`` and its ``operationFailed`` event carry
``reason`` (``refused``, ``adapterError``, ``cancelled``, ``timedOut``, ``sessionEnded`` with
``sessionEndReason``, ``internal``); see :meth:`DebugSession.run_operation`.

Events (``debug.waitEvents`` / ``debug.pollEvents``): ``stateChanged``, ``capabilities``,
``initialized``, ``output``, ``stopped``, ``continued``, ``thread``, ``breakpoint``,
``exited``, ``terminated``, ``runInTerminalRequested``, ``runInTerminalExited``,
``operationCompleted``, ``operationFailed``, ``childSessionStarted`` (``{childSessionId,
request, name}``: the adapter's ``startDebugging`` made a child session, listed with
``parentSessionId`` and stopped with its parent), ``adapterEvent`` (``{name, body}``: a DAP
event outside this list, forwarded as the adapter sent it).
"""

from __future__ import annotations

import re
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError, echo, invalid_field, read_int

from .._core._context import current_operation_id
from .._core._payload import (
    MAX_COUNT,
    optional_bool,
    optional_env,
    optional_path,
    optional_positive_int,
    optional_str,
    require_argv,
    require_path,
    require_str,
)
from .._session._events import EventQueue
from .._session._registry import SessionRegistry
from ._session import (
    DEFAULT_CONNECT_TIMEOUT_MS,
    DEFAULT_INITIALIZE_TIMEOUT_MS,
    MAX_OPERATION_TIMEOUT_MS,
    AdapterSpec,
    DebugSession,
    check_loopback,
)
from ._state import (
    normalize_data_breakpoints,
    normalize_exception_filters,
    normalize_function_breakpoints,
    normalize_source_breakpoints,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from protocol import JSONObject, JSONValue

    from .._core._service import CommandHandler, ServiceContext

__all__ = ("MAX_DEBUG_SESSIONS", "DebugService", "open_debug_service")

#: Sessions that may exist at once (terminated ones count until destroyed); then ``busy``.
MAX_DEBUG_SESSIONS: Final = 32

_TRANSPORTS: Final = ("stdio", "tcpPort", "tcpAnnounced", "tcpLanguageServer")
#: plugin-contract.md ``launch.endpoint.command`` for ``tcpLanguageServer``.
_COMMAND_RE: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_LANGUAGE_SERVER_FIELDS: Final = frozenset(
    {"languageServerSessionId", "command", "commandArguments"}
)
_INSPECT_FIELDS: Final = {
    "threads": frozenset(),
    "stackTrace": frozenset({"threadId", "startFrame", "levels"}),
    "scopes": frozenset({"frameId"}),
    "variables": frozenset({"variablesReference", "variableFilter", "start", "count"}),
    "evaluate": frozenset({"expression", "frameId", "context"}),
    "exceptionInfo": frozenset({"threadId"}),
    "stepInTargets": frozenset({"frameId"}),
    "gotoTargets": frozenset({"path", "line", "column"}),
}
_ALL_INSPECT_FIELDS: Final = frozenset().union(*_INSPECT_FIELDS.values())
_EVALUATE_CONTEXTS: Final = ("watch", "repl", "hover", "clipboard", "variables")


def _invalid(message: str, field: str | None = None) -> CoreError:
    """``invalid_request``; ``field`` names the payload field at fault in ``details.field``."""
    return CoreError("invalid_request", message, None if field is None else {"field": field})


def _optional_int(payload: JSONObject, name: str, *, minimum: int) -> int | None:
    # DAP's integers (ids, references, counts) are 32-bit in the adapters we meet.
    return read_int(payload, name, minimum=minimum, maximum=MAX_COUNT)


def _require_int(payload: JSONObject, name: str, *, minimum: int) -> int:
    value = _optional_int(payload, name, minimum=minimum)
    if value is None:
        raise invalid_field(name, f"{name} must be an integer >= {minimum}")
    return value


def _require_text(payload: JSONObject, name: str) -> str:
    # A replacement value may be empty (an empty string literal is typed as ""), unlike ids.
    value = payload.get(name)
    if not isinstance(value, str):
        raise invalid_field(name, f"{name} must be a string")
    return value


def parse_adapter(value: JSONValue) -> AdapterSpec:
    """Validate ``debug.createSession``'s ``adapter`` object.

    ``executable`` may be left out only for ``tcpPort``: the session then connects to an
    adapter it does not own (``python -m debugpy --listen``), and ends only its socket.

    Raises:
        CoreError: ``invalid_request`` for an unknown field, a bad type, an unknown
            transport, a missing port, or a host that is not loopback.
    """
    if not isinstance(value, dict):
        raise _invalid("adapter must be an object", "adapter")
    transport = value.get("transport", "stdio")
    if transport not in _TRANSPORTS:
        raise _invalid(
            "adapter.transport must be stdio, tcpPort, tcpAnnounced or tcpLanguageServer",
            "adapter.transport",
        )
    assert isinstance(transport, str)
    language_server = _language_server_endpoint(value, transport)
    host = optional_str(value, "host") or "127.0.0.1"
    if transport != "stdio":
        host = check_loopback(host)
    elif "host" in value or "port" in value:
        raise _invalid("adapter.host and adapter.port are for the TCP transports", "adapter.host")
    port = _optional_int(value, "port", minimum=1)
    if port is not None and port > 65535:
        raise _invalid("adapter.port must be at most 65535", "adapter.port")
    if transport == "tcpPort" and port is None:
        raise _invalid("adapter.port is required for tcpPort", "adapter.port")
    argv: list[str] | None = None
    if transport == "tcpLanguageServer":
        # The adapter lives inside the language server: no process of its own.
        if "executable" in value or "port" in value or "announcePrefix" in value:
            raise _invalid(
                "adapter.executable, port and announcePrefix are not for tcpLanguageServer",
                "adapter.transport",
            )
    elif value.get("executable") is not None or transport != "tcpPort":
        executable = require_path(value, "executable")
        arguments = value.get("arguments", [])
        argv = (
            require_argv({"arguments": [executable, *arguments]}, "arguments")
            if isinstance(arguments, list)
            else None
        )
        if argv is None:
            raise _invalid("adapter.arguments must be an array of strings", "adapter.arguments")
    elif "arguments" in value or "environment" in value or "workingDirectory" in value:
        raise _invalid("adapter arguments need an executable", "adapter.executable")
    prefix = optional_str(value, "announcePrefix")
    if prefix is not None and transport != "tcpAnnounced":
        raise _invalid("adapter.announcePrefix is for tcpAnnounced", "adapter.announcePrefix")
    stream = value.get("announceStream", "stdout")
    if stream not in ("stdout", "stderr") or ("announceStream" in value and prefix is None):
        raise _invalid(
            "adapter.announceStream must be stdout or stderr, with tcpAnnounced",
            "adapter.announceStream",
        )
    assert isinstance(stream, str)
    connect_timeout = optional_positive_int(
        value, "connectTimeoutMilliseconds", maximum=MAX_OPERATION_TIMEOUT_MS
    )
    initialize_timeout = optional_positive_int(
        value, "initializeTimeoutMilliseconds", maximum=MAX_OPERATION_TIMEOUT_MS
    )
    return AdapterSpec(
        argv=argv,
        env=optional_env(value, "environment"),
        cwd=optional_path(value, "workingDirectory"),
        transport=transport,
        host=host,
        port=port,
        announce_prefix=prefix or "",
        announce_stream=stream,
        connect_timeout_ms=connect_timeout or DEFAULT_CONNECT_TIMEOUT_MS,
        initialize_timeout_ms=initialize_timeout or DEFAULT_INITIALIZE_TIMEOUT_MS,
        language_server=language_server,
    )


def _language_server_endpoint(
    value: JSONObject, transport: str
) -> tuple[str, str, tuple[JSONValue, ...]] | None:
    """``tcpLanguageServer``'s ``{languageServerSessionId, command, commandArguments?}``."""
    if transport != "tcpLanguageServer":
        extra = sorted(set(value) & _LANGUAGE_SERVER_FIELDS)
        if extra:
            raise _invalid(f"adapter.{extra[0]} is for tcpLanguageServer", f"adapter.{extra[0]}")
        return None
    session_id = require_str(value, "languageServerSessionId")
    command = require_str(value, "command")
    if not _COMMAND_RE.fullmatch(command):
        raise _invalid(
            "adapter.command must be 1-128 letters, digits, '.', '_', ':' or '-'",
            "adapter.command",
        )
    arguments = value.get("commandArguments", [])
    if not isinstance(arguments, list) or len(arguments) > MAX_COUNT:
        raise _invalid("adapter.commandArguments must be an array", "adapter.commandArguments")
    return session_id, command, tuple(arguments)


class DebugService:
    """``debug.*``: debug sessions, each owning its adapter's process and transport."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._sessions: SessionRegistry[DebugSession] = SessionRegistry(
            "debug", "debug session", "sessionId", _events_of
        )

    def commands(self) -> Mapping[str, CommandHandler]:
        return {
            "debug.createSession": self._create_session,
            "debug.launch": self._launch,
            "debug.attach": self._attach,
            "debug.setBreakpoints": self._set_breakpoints,
            "debug.setExceptionBreakpoints": self._set_exception_breakpoints,
            "debug.setFunctionBreakpoints": self._set_function_breakpoints,
            "debug.dataBreakpointInfo": self._data_breakpoint_info,
            "debug.setDataBreakpoints": self._set_data_breakpoints,
            "debug.setVariable": self._set_variable,
            "debug.execute": self._execute,
            "debug.inspect": self._inspect,
            "debug.cancelOperation": self._cancel_operation,
            "debug.runInTerminalResponse": self._run_in_terminal_response,
            **self._sessions.event_commands("debug"),
            "debug.disconnect": self._disconnect,
            "debug.destroySession": self._destroy_session,
            "debug.listSessions": self._list_sessions,
        }

    @property
    def sessions(self) -> Mapping[str, DebugSession]:
        """The sessions by id (until ``debug.destroySession``)."""
        return self._sessions

    def _session(self, payload: JSONObject) -> DebugSession:
        return self._sessions.lookup(payload)

    # -- lifecycle -----------------------------------------------------------------------

    async def _create_session(self, payload: JSONObject) -> JSONValue:
        session_id = optional_str(payload, "sessionId")
        if session_id is None:
            session_id = self._sessions.new_id()
        elif not session_id:
            raise _invalid("sessionId must be a non-empty string", "sessionId")
        adapter_id = require_str(payload, "adapterId")
        spec = parse_adapter(payload.get("adapter"))
        root_path = require_path(payload, "rootPath")
        supports_rit = optional_bool(payload, "supportsRunInTerminalRequest", False)
        handler = payload.get("runInTerminal", "supervisor")
        if handler not in ("supervisor", "host"):
            raise _invalid("runInTerminal must be supervisor or host", "runInTerminal")
        assert isinstance(handler, str)
        if session_id in self._sessions:
            raise _invalid(f"A debug session {echo(session_id)} already exists")
        if len(self._sessions) >= MAX_DEBUG_SESSIONS:
            raise CoreError("busy", f"At most {MAX_DEBUG_SESSIONS} debug sessions may exist")
        session = DebugSession(
            session_id=session_id,
            adapter_id=adapter_id,
            spec=spec,
            root_path=root_path,
            supports_run_in_terminal=supports_rit,
            run_in_terminal_handler=handler,
            events=EventQueue(self._context.max_events, budget=self._context.event_budget),
            start_child=self._start_child,
            language_server_command=self._context.language_server_command,
        )
        # Reserved before the start so a concurrent create with the same id is refused.
        self._sessions.add(session_id, session)
        try:
            await self._context.nursery.start(session.run)
        except BaseException:
            self._sessions.remove(session_id)
            raise
        return {
            "sessionId": session_id,
            "state": session.state.value,
            "adapterPid": session.adapter_pid,
        }

    async def start_session(
        self,
        *,
        adapter: JSONObject,
        adapter_id: str,
        root_path: str,
        request: str,
        configuration: JSONObject,
    ) -> str:
        """A session on ``adapter``, launched or attached with ``configuration`` (a plugin
        backend's ``lithe/host/debug/start``); the answer waits for the adapter's response.

        Returns:
            The new session's id; the client drives it with the ``debug.*`` commands.

        Raises:
            CoreError: as ``debug.createSession`` and ``debug.launch``/``debug.attach``; a
                session whose launch or attach failed is stopped and forgotten.
        """
        created = await self._create_session(
            {"adapterId": adapter_id, "adapter": adapter, "rootPath": root_path}
        )
        assert isinstance(created, dict)
        session_id = str(created["sessionId"])
        session = self._sessions[session_id]
        try:
            await session.run_operation(
                f"debug.{request}",
                None,
                None,
                lambda op: session.start(request, configuration, op),
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                await session.stop()
            self._sessions.remove(session_id)
            raise
        return session_id

    async def _start_child(
        self, parent: DebugSession, spec: AdapterSpec, nursery: trio.Nursery
    ) -> DebugSession:
        """A child session for ``parent``'s DAP ``startDebugging``: registered under a new id
        and started in ``nursery`` (the parent's), so it can not outlive the parent.

        Raises:
            CoreError: ``busy`` past :data:`MAX_DEBUG_SESSIONS`; ``launch_failed`` when its
                adapter can not be started or reached (nothing stays registered).
        """
        if len(self._sessions) >= MAX_DEBUG_SESSIONS:
            raise CoreError("busy", f"At most {MAX_DEBUG_SESSIONS} debug sessions may exist")
        child = DebugSession(
            session_id=self._sessions.new_id(),
            adapter_id=parent.adapter_id,
            spec=spec,
            root_path=parent.root_path,
            supports_run_in_terminal=parent.supports_run_in_terminal,
            run_in_terminal_handler=parent.run_in_terminal_handler,
            events=EventQueue(self._context.max_events, budget=self._context.event_budget),
            parent=parent,
            start_child=self._start_child,
            language_server_command=self._context.language_server_command,
        )
        self._sessions.add(child.session_id, child)
        try:
            await nursery.start(child.run)
        except BaseException:
            self._sessions.remove(child.session_id)
            raise
        return child

    async def _disconnect(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        detail = await session.stop()
        return {"sessionId": session.session_id, "state": session.state.value, "terminated": detail}

    async def _destroy_session(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        if not session.ended:
            raise _invalid(
                f"Debug session {session.session_id!r} is {session.state.value}; "
                "disconnect it first"
            )
        self._sessions.remove(session.session_id)
        return {"sessionId": session.session_id, "destroyed": True}

    async def _list_sessions(self, payload: JSONObject) -> JSONValue:
        return [s.describe() for s in self._sessions.values()]

    # -- operations ----------------------------------------------------------------------

    def _operation_fields(self, payload: JSONObject) -> tuple[str | None, int | None]:
        # Defaults to the Core operation's id: the envelope's operationId, or the JSON-RPC
        # id through `supervisor serve`.
        operation_id = optional_str(payload, "operationId") or current_operation_id()
        if operation_id == "":
            raise _invalid("operationId must be a non-empty string", "operationId")
        timeout = optional_positive_int(
            payload, "timeoutMilliseconds", maximum=MAX_OPERATION_TIMEOUT_MS
        )
        return operation_id, timeout

    async def _start(self, payload: JSONObject, kind: str) -> JSONValue:
        command = f"debug.{kind}"
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        configuration = payload.get("configuration", {})
        if not isinstance(configuration, dict):
            raise _invalid("configuration must be an object", "configuration")
        return await session.run_operation(
            command,
            operation_id,
            timeout,
            lambda op: session.start(kind, configuration, op),
        )

    async def _launch(self, payload: JSONObject) -> JSONValue:
        return await self._start(payload, "launch")

    async def _attach(self, payload: JSONObject) -> JSONValue:
        return await self._start(payload, "attach")

    async def _set_breakpoints(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        path = require_str(payload, "path")
        breakpoints = normalize_source_breakpoints(payload.get("breakpoints", []))
        return await session.run_operation(
            "debug.setBreakpoints",
            operation_id,
            timeout,
            lambda op: session.set_source_breakpoints(path, breakpoints, op),
        )

    async def _set_exception_breakpoints(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        filters = normalize_exception_filters(payload.get("filters", []))
        return await session.run_operation(
            "debug.setExceptionBreakpoints",
            operation_id,
            timeout,
            lambda op: session.set_exception_filters(filters, op),
        )

    async def _set_function_breakpoints(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        breakpoints = normalize_function_breakpoints(payload.get("breakpoints", []))
        return await session.run_operation(
            "debug.setFunctionBreakpoints",
            operation_id,
            timeout,
            lambda op: session.set_function_breakpoints(breakpoints, op),
        )

    async def _execute(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        command = require_str(payload, "command")
        thread_id = _optional_int(payload, "threadId", minimum=0)
        single = optional_bool(payload, "singleThread", False)
        target_id = _optional_int(payload, "targetId", minimum=0)
        return await session.run_operation(
            "debug.execute",
            operation_id,
            timeout,
            lambda op: session.execute(command, thread_id, single, op, target_id),
        )

    async def _set_variable(self, payload: JSONObject) -> JSONValue:
        """``debug.setVariable {variablesReference, name, value}`` -> ``{operationId, result:
        {value, type, variablesReference, namedVariables, indexedVariables}}``."""
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        arguments: JSONObject = {
            "variablesReference": _require_int(payload, "variablesReference", minimum=1),
            "name": require_str(payload, "name"),
            "value": _require_text(payload, "value"),
        }
        return await session.run_operation(
            "debug.setVariable",
            operation_id,
            timeout,
            lambda op: session.set_variable(arguments, op),
        )

    async def _data_breakpoint_info(self, payload: JSONObject) -> JSONValue:
        """``debug.dataBreakpointInfo {name, variablesReference?, frameId?}`` ->
        ``{operationId, result: {dataId, description, accessTypes, canPersist}}``."""
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        arguments: JSONObject = {"name": require_str(payload, "name")}
        for name, minimum in (("variablesReference", 1), ("frameId", 0)):
            value = _optional_int(payload, name, minimum=minimum)
            if value is not None:
                arguments[name] = value
        return await session.run_operation(
            "debug.dataBreakpointInfo",
            operation_id,
            timeout,
            lambda op: session.data_breakpoint_info(arguments, op),
        )

    async def _set_data_breakpoints(self, payload: JSONObject) -> JSONValue:
        """``debug.setDataBreakpoints {breakpoints: [{dataId, accessType?, condition?,
        hitCondition?, enabled?}]}`` -> ``{operationId, result: {breakpoints, sent}}``."""
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        breakpoints = normalize_data_breakpoints(payload.get("breakpoints", []))
        return await session.run_operation(
            "debug.setDataBreakpoints",
            operation_id,
            timeout,
            lambda op: session.set_data_breakpoints(breakpoints, op),
        )

    async def _inspect(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        kind = require_str(payload, "kind")
        allowed = _INSPECT_FIELDS.get(kind)
        if allowed is None:
            raise _invalid(f"kind must be one of {', '.join(_INSPECT_FIELDS)}", "kind")
        extra = sorted((set(payload) & _ALL_INSPECT_FIELDS) - allowed)
        if extra:
            raise _invalid(f"debug.inspect {kind}: field {echo(extra[0])} is not allowed")
        arguments = _inspect_arguments(kind, payload)
        return await session.run_operation(
            "debug.inspect", operation_id, timeout, lambda op: session.inspect(kind, arguments, op)
        )

    async def _cancel_operation(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        operation_id = require_str(payload, "operationId")
        reason = payload.get("reason", "cancelled")
        if reason not in ("cancelled", "timedOut"):
            raise _invalid("reason must be cancelled or timedOut", "reason")
        assert isinstance(reason, str)
        return {"cancelled": session.cancel_operation(operation_id, reason)}

    async def _run_in_terminal_response(self, payload: JSONObject) -> JSONValue:
        session = self._session(payload)
        request_id = require_str(payload, "requestId")
        success = payload.get("success")
        if not isinstance(success, bool):
            raise _invalid("success must be a boolean", "success")
        process_id = optional_positive_int(payload, "processId")
        shell_process_id = optional_positive_int(payload, "shellProcessId")
        message = optional_str(payload, "message")
        if success and process_id is None and shell_process_id is None:
            raise _invalid("a successful runInTerminal answer needs processId or shellProcessId")
        accepted = await session.run_in_terminal_response(
            request_id, success, process_id, shell_process_id, message
        )
        return {"accepted": accepted}

    # -- events --------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop every live session (DAP stop sequence), concurrently; shielded and bounded.

        **Cancellation:** shielded; returns once every adapter tree is gone.
        """
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for session in list(self._sessions.values()):
                    if not session.ended:
                        nursery.start_soon(_stop_for_close, session)


def _events_of(session: DebugSession) -> EventQueue:
    return session.events


async def _stop_for_close(session: DebugSession) -> None:
    await session.stop(reason="supervisorClosing")


def _inspect_arguments(kind: str, payload: JSONObject) -> JSONObject:
    """Validate ``debug.inspect``'s kind-specific fields and build the DAP arguments."""
    if kind == "threads":
        return {}
    if kind in ("stackTrace", "exceptionInfo"):
        arguments: JSONObject = {"threadId": _require_int(payload, "threadId", minimum=0)}
        if kind == "stackTrace":
            for name in ("startFrame", "levels"):
                value = _optional_int(payload, name, minimum=0)
                if value is not None:
                    arguments[name] = value
        return arguments
    if kind in ("scopes", "stepInTargets"):
        return {"frameId": _require_int(payload, "frameId", minimum=0)}
    if kind == "gotoTargets":
        arguments = {
            "source": {"path": require_str(payload, "path")},
            "line": _require_int(payload, "line", minimum=1),
        }
        column = _optional_int(payload, "column", minimum=1)
        if column is not None:
            arguments["column"] = column
        return arguments
    if kind == "variables":
        arguments = {"variablesReference": _require_int(payload, "variablesReference", minimum=1)}
        variable_filter = payload.get("variableFilter")
        if variable_filter is not None:
            if variable_filter not in ("named", "indexed"):
                raise _invalid("variableFilter must be named or indexed", "variableFilter")
            arguments["filter"] = variable_filter
        start = _optional_int(payload, "start", minimum=0)
        if start is not None:
            arguments["start"] = start
        count = _optional_int(payload, "count", minimum=1)
        if count is not None:
            arguments["count"] = count
        return arguments
    expression = require_str(payload, "expression")
    arguments = {"expression": expression}
    frame_id = _optional_int(payload, "frameId", minimum=0)
    if frame_id is not None:
        arguments["frameId"] = frame_id
    context = payload.get("context")
    if context is not None:
        if context not in _EVALUATE_CONTEXTS:
            raise _invalid("context must be watch, repl, hover, clipboard or variables", "context")
        arguments["context"] = context
    return arguments


@asynccontextmanager
async def open_debug_service(context: ServiceContext) -> AsyncIterator[DebugService]:
    """Open :class:`DebugService`; leaving the block stops every live debug session."""
    service = DebugService(context)
    try:
        yield service
    finally:
        await service.aclose()
