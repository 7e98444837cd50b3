"""The ``debug.*`` commands: debug sessions over DAP as a Core service.

Reference: the Core API contract ``debug.*`` and the plugin contract "Debug adapters" / "Remote
attach";
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

from protocol import CoreError, echo

from .._api._base import decode_payload, encode_value
from .._api._debug import Adapter
from .._core._context import current_operation_id
from .._core._service import call_command, declared
from .._session._events import EventQueue
from .._session._registry import SessionRegistry
from ._session import (
    DEFAULT_CONNECT_TIMEOUT_MS,
    DEFAULT_INITIALIZE_TIMEOUT_MS,
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

    from .._api._debug import (
        DebugCancelOperation,
        DebugCreateSession,
        DebugDataBreakpointInfo,
        DebugExecute,
        DebugInspect,
        DebugListSessions,
        DebugRunInTerminalResponse,
        DebugSessionRef,
        DebugSetBreakpoints,
        DebugSetDataBreakpoints,
        DebugSetExceptionBreakpoints,
        DebugSetFunctionBreakpoints,
        DebugSetVariable,
        DebugStart,
        _Operation,
    )
    from .._core._service import CommandHandler, ServiceContext

__all__ = ("MAX_DEBUG_SESSIONS", "DebugService", "open_debug_service")

#: Sessions that may exist at once (terminated ones count until destroyed); then ``busy``.
MAX_DEBUG_SESSIONS: Final = 32

#: the plugin contract ``launch.endpoint.command`` for ``tcpLanguageServer``.
_COMMAND_RE: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: ``debug.inspect``'s fields that are ours, not the DAP request's arguments.
_OPERATION_FIELDS: Final = ("sessionId", "operationId", "timeoutMilliseconds", "kind")


def _invalid(message: str, field: str | None = None) -> CoreError:
    """``invalid_request``; ``field`` names the payload field at fault in ``details.field``."""
    return CoreError("invalid_request", message, None if field is None else {"field": field})


def parse_adapter(value: Adapter | JSONValue) -> AdapterSpec:
    """Check ``debug.createSession``'s ``adapter`` for what its declaration can not say.

    ``value`` is the decoded :class:`~supervisor._api._debug.Adapter`, or a JSON object (a
    plugin's ``debugAdapters[].adapter``), decoded here with the same declaration.
    ``executable`` may be left out only for ``tcpPort``: the session then connects to an
    adapter it does not own (``python -m debugpy --listen``), and ends only its socket.

    Raises:
        CoreError: ``invalid_request`` for what the declaration refuses, a field of another
            transport, a missing port, or a host that is not loopback.
    """
    adapter = value if isinstance(value, Adapter) else _decode_adapter(value)
    transport = adapter.transport or "stdio"
    language_server = _language_server_endpoint(adapter, transport)
    host = adapter.host or "127.0.0.1"
    if transport != "stdio":
        host = check_loopback(host)
    elif adapter.host is not None or adapter.port is not None:
        raise _invalid("adapter.host and adapter.port are for the TCP transports", "adapter.host")
    port = adapter.port
    if transport == "tcpPort" and port is None:
        raise _invalid("adapter.port is required for tcpPort", "adapter.port")
    argv: list[str] | None = None
    if transport == "tcpLanguageServer":
        # The adapter lives inside the language server: no process of its own.
        if adapter.executable is not None or port is not None or adapter.announce_prefix:
            raise _invalid(
                "adapter.executable, port and announcePrefix are not for tcpLanguageServer",
                "adapter.transport",
            )
    elif adapter.executable is not None or transport != "tcpPort":
        if adapter.executable is None:
            raise _invalid("adapter.executable is required", "adapter.executable")
        argv = [adapter.executable, *(adapter.arguments or [])]
    elif (
        adapter.arguments is not None
        or adapter.environment is not None
        or adapter.working_directory is not None
    ):
        raise _invalid("adapter arguments need an executable", "adapter.executable")
    prefix = adapter.announce_prefix
    if prefix is not None and transport != "tcpAnnounced":
        raise _invalid("adapter.announcePrefix is for tcpAnnounced", "adapter.announcePrefix")
    if adapter.announce_stream is not None and prefix is None:
        raise _invalid(
            "adapter.announceStream must be stdout or stderr, with tcpAnnounced",
            "adapter.announceStream",
        )
    return AdapterSpec(
        argv=argv,
        env=adapter.environment,
        cwd=adapter.working_directory,
        transport=transport,
        host=host,
        port=port,
        announce_prefix=prefix or "",
        announce_stream=adapter.announce_stream or "stdout",
        connect_timeout_ms=adapter.connect_timeout_milliseconds or DEFAULT_CONNECT_TIMEOUT_MS,
        initialize_timeout_ms=(
            adapter.initialize_timeout_milliseconds or DEFAULT_INITIALIZE_TIMEOUT_MS
        ),
        language_server=language_server,
    )


def _decode_adapter(value: JSONValue) -> Adapter:
    """A JSON ``adapter`` object as its declaration; refusals name ``adapter.<field>``."""
    try:
        adapter: Adapter = decode_payload("adapter", Adapter, value)
    except CoreError as exc:
        field = (exc.details or {}).get("field")
        where = "adapter" if field in (None, "payload") else f"adapter.{field}"
        raise _invalid(exc.message, where) from None
    return adapter


def _language_server_endpoint(
    adapter: Adapter, transport: str
) -> tuple[str, str, tuple[JSONValue, ...]] | None:
    """``tcpLanguageServer``'s ``{languageServerSessionId, command, commandArguments?}``."""
    given = {
        "languageServerSessionId": adapter.language_server_session_id,
        "command": adapter.command,
        "commandArguments": adapter.command_arguments,
    }
    if transport != "tcpLanguageServer":
        extra = sorted(name for name, value in given.items() if value is not None)
        if extra:
            raise _invalid(f"adapter.{extra[0]} is for tcpLanguageServer", f"adapter.{extra[0]}")
        return None
    for name in ("languageServerSessionId", "command"):
        if given[name] is None:
            raise _invalid(f"adapter.{name} is required for tcpLanguageServer", f"adapter.{name}")
    assert adapter.language_server_session_id is not None
    assert adapter.command is not None
    if not _COMMAND_RE.fullmatch(adapter.command):
        raise _invalid(
            "adapter.command must be 1-128 letters, digits, '.', '_', ':' or '-'",
            "adapter.command",
        )
    return (
        adapter.language_server_session_id,
        adapter.command,
        tuple(adapter.command_arguments or ()),
    )


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

    def _session(self, payload: _Operation | DebugSessionRef) -> DebugSession:
        return self._sessions.find(payload.session_id)

    # -- lifecycle -----------------------------------------------------------------------

    @declared
    async def _create_session(self, payload: DebugCreateSession) -> JSONValue:
        session_id = payload.session_id or self._sessions.new_id()
        adapter_id = payload.adapter_id
        spec = parse_adapter(payload.adapter)
        root_path = payload.root_path
        supports_rit = bool(payload.supports_run_in_terminal_request)
        handler = payload.run_in_terminal or "supervisor"
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
        created = await call_command(
            self.commands(),
            "debug.createSession",
            {"adapterId": adapter_id, "adapter": adapter, "rootPath": root_path},
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

    @declared
    async def _disconnect(self, payload: DebugSessionRef) -> JSONValue:
        session = self._session(payload)
        detail = await session.stop()
        return {"sessionId": session.session_id, "state": session.state.value, "terminated": detail}

    @declared
    async def _destroy_session(self, payload: DebugSessionRef) -> JSONValue:
        session = self._session(payload)
        if not session.ended:
            raise _invalid(
                f"Debug session {session.session_id!r} is {session.state.value}; "
                "disconnect it first"
            )
        self._sessions.remove(session.session_id)
        return {"sessionId": session.session_id, "destroyed": True}

    @declared
    async def _list_sessions(self, payload: DebugListSessions) -> JSONValue:
        return [s.describe() for s in self._sessions.values()]

    # -- operations ----------------------------------------------------------------------

    def _operation_fields(self, payload: _Operation) -> tuple[str | None, int | None]:
        # Defaults to the Core operation's id: the envelope's operationId, or the JSON-RPC
        # id through `supervisor serve`.
        return payload.operation_id or current_operation_id(), payload.timeout_milliseconds

    async def _start(self, payload: DebugStart, kind: str) -> JSONValue:
        command = f"debug.{kind}"
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        configuration = payload.configuration or {}
        return await session.run_operation(
            command,
            operation_id,
            timeout,
            lambda op: session.start(kind, configuration, op),
        )

    @declared
    async def _launch(self, payload: DebugStart) -> JSONValue:
        return await self._start(payload, "launch")

    @declared
    async def _attach(self, payload: DebugStart) -> JSONValue:
        return await self._start(payload, "attach")

    @declared
    async def _set_breakpoints(self, payload: DebugSetBreakpoints) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        path = payload.path
        breakpoints = normalize_source_breakpoints(payload.breakpoints or ())
        return await session.run_operation(
            "debug.setBreakpoints",
            operation_id,
            timeout,
            lambda op: session.set_source_breakpoints(path, breakpoints, op),
        )

    @declared
    async def _set_exception_breakpoints(self, payload: DebugSetExceptionBreakpoints) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        filters = normalize_exception_filters(payload.filters or ())
        return await session.run_operation(
            "debug.setExceptionBreakpoints",
            operation_id,
            timeout,
            lambda op: session.set_exception_filters(filters, op),
        )

    @declared
    async def _set_function_breakpoints(self, payload: DebugSetFunctionBreakpoints) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        breakpoints = normalize_function_breakpoints(payload.breakpoints or ())
        return await session.run_operation(
            "debug.setFunctionBreakpoints",
            operation_id,
            timeout,
            lambda op: session.set_function_breakpoints(breakpoints, op),
        )

    @declared
    async def _execute(self, payload: DebugExecute) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        command = payload.command
        thread_id = payload.thread_id
        single = bool(payload.single_thread)
        target_id = payload.target_id
        return await session.run_operation(
            "debug.execute",
            operation_id,
            timeout,
            lambda op: session.execute(command, thread_id, single, op, target_id),
        )

    @declared
    async def _set_variable(self, payload: DebugSetVariable) -> JSONValue:
        """``debug.setVariable {variablesReference, name, value}`` -> ``{operationId, result:
        {value, type, variablesReference, namedVariables, indexedVariables}}``."""
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        arguments: JSONObject = {
            "variablesReference": payload.variables_reference,
            "name": payload.name,
            "value": payload.value,
        }
        return await session.run_operation(
            "debug.setVariable",
            operation_id,
            timeout,
            lambda op: session.set_variable(arguments, op),
        )

    @declared
    async def _data_breakpoint_info(self, payload: DebugDataBreakpointInfo) -> JSONValue:
        """``debug.dataBreakpointInfo {name, variablesReference?, frameId?}`` ->
        ``{operationId, result: {dataId, description, accessTypes, canPersist}}``."""
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        arguments: JSONObject = {"name": payload.name}
        for name, value in (
            ("variablesReference", payload.variables_reference),
            ("frameId", payload.frame_id),
        ):
            if value is not None:
                arguments[name] = value
        return await session.run_operation(
            "debug.dataBreakpointInfo",
            operation_id,
            timeout,
            lambda op: session.data_breakpoint_info(arguments, op),
        )

    @declared
    async def _set_data_breakpoints(self, payload: DebugSetDataBreakpoints) -> JSONValue:
        """``debug.setDataBreakpoints {breakpoints: [{dataId, accessType?, condition?,
        hitCondition?, enabled?}]}`` -> ``{operationId, result: {breakpoints, sent}}``."""
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        breakpoints = normalize_data_breakpoints(payload.breakpoints or ())
        return await session.run_operation(
            "debug.setDataBreakpoints",
            operation_id,
            timeout,
            lambda op: session.set_data_breakpoints(breakpoints, op),
        )

    @declared
    async def _inspect(self, payload: DebugInspect) -> JSONValue:
        session = self._session(payload)
        operation_id, timeout = self._operation_fields(payload)
        kind = str(type(payload).__struct_config__.tag)
        arguments = _inspect_arguments(payload)
        return await session.run_operation(
            "debug.inspect", operation_id, timeout, lambda op: session.inspect(kind, arguments, op)
        )

    @declared
    async def _cancel_operation(self, payload: DebugCancelOperation) -> JSONValue:
        """``debug.cancelOperation``: a pending operation of the session, or one still in the
        session's line (it arrived before the cancel; it fails the same way, unsent).

        Ordered with nothing, so it never waits behind what it cancels; an operation of
        another session, an unknown or an ended one answers false and nothing changes.
        """
        session = self._sessions.find(payload.session_id)
        reason = payload.reason or "cancelled"
        if session.cancel_operation(payload.operation_id, reason):
            return {"cancelled": True}
        target = ("debug", payload.session_id)
        return {"cancelled": self._context.withdraw(target, payload.operation_id, reason)}

    @declared
    async def _run_in_terminal_response(self, payload: DebugRunInTerminalResponse) -> JSONValue:
        session = self._sessions.find(payload.session_id)
        request_id, success, message = payload.request_id, payload.success, payload.message
        process_id, shell_process_id = payload.process_id, payload.shell_process_id
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


def _inspect_arguments(payload: DebugInspect) -> JSONObject:
    """``debug.inspect``'s DAP arguments: its kind's fields, as the DAP request names them."""
    arguments: JSONObject = {
        name: value
        for name, value in encode_value(payload).items()
        if name not in _OPERATION_FIELDS
    }
    if "variableFilter" in arguments:
        arguments["filter"] = arguments.pop("variableFilter")
    if "path" in arguments:  # gotoTargets
        arguments = {"source": {"path": arguments.pop("path")}, **arguments}
    return arguments


@asynccontextmanager
async def open_debug_service(context: ServiceContext) -> AsyncIterator[DebugService]:
    """Open :class:`DebugService`; leaving the block stops every live debug session."""
    service = DebugService(context)
    try:
        yield service
    finally:
        await service.aclose()
