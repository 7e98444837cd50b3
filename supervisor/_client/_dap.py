"""The debug-session client for Trio: DAP requests with results, typed events, stop helpers.

``async with core.debug_adapter(["python", "-m", "debugpy.adapter"]) as debug:`` starts the
adapter with ``debug.createSession``, returns once it answered ``initialize`` (or raises
:class:`StartFailed` with the reason, exit status and stderr tail), and disconnects and
forgets the session when the block ends.

``await debug.request(command, arguments)`` takes a DAP request as the Debug Adapter
Protocol names it (https://microsoft.github.io/debug-adapter-protocol/specification) and
runs it as the ``debug.*`` operation that owns it, so the session's state, breakpoints and
capabilities checks stay the supervisor's: ``launch``/``attach``, the ``set*Breakpoints``
requests, ``dataBreakpointInfo``, ``setVariable``, the run control requests (``continue``,
``next``, ``stepIn``, ``stepOut``, ``pause``, ``stepBack``, ``goto``, ``restart``,
``terminate``) and the inspection requests (``threads``, ``stackTrace``, ``scopes``,
``variables``, ``evaluate``, ``exceptionInfo``, ``stepInTargets``, ``gotoTargets``);
``disconnect`` is :meth:`DapClient.stop`. Arguments those operations do not take are not
sent. Results are the operation's (the adapter's body, normalized: docs/commands.md
``debug.inspect``).

Events are pumped as for the language-server client (:mod:`._lsp`): each one is handed out
once by :meth:`DapClient.wait_for_event`, and a session that ended ends every wait.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypedDict, final

import msgspec
import trio

from protocol import CoreError

from .._api._debug import (
    DebugCapabilities,
    DebugContinued,
    DebugDisconnectResult,
    DebugEvents,
    DebugOutput,
    DebugStateChanged,
    DebugStopped,
    DebugTerminated,
)
from .._boundary import raise_single
from .._handles import NoPublicConstructor
from ._caller import check_options, renamed_option
from ._errors import RequestFailed, SessionFailed, StartFailed

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence

    from typing_extensions import Unpack

    from protocol import JSONObject, JSONValue

    from .._api._debug import DebugEvent
    from ._caller import CommandCaller

__all__ = (
    "DEBUG_COMMANDS",
    "EVENT_HISTORY",
    "DapClient",
    "DebugAdapterOptions",
    "open_dap_client",
)

#: Events kept for :meth:`DapClient.wait_for_event` (the oldest go first).
EVENT_HISTORY: Final = 4096
_WAIT_MS: Final = 60_000
#: The states of a session whose adapter answered ``initialize`` and still runs.
_LIVE: Final = frozenset({"ready", "starting", "running", "paused"})
_CANCEL_BOUND_S: Final = 5.0

_EXECUTE: Final = frozenset(
    {"continue", "next", "stepIn", "stepOut", "pause", "stepBack", "goto", "restart", "terminate"}
)
#: DAP request -> (``debug.*`` command, extra fixed fields, DAP argument -> our field).
_OPERATIONS: Final[dict[str, tuple[str, JSONObject, dict[str, str]]]] = {
    "setFunctionBreakpoints": ("debug.setFunctionBreakpoints", {}, {"breakpoints": "breakpoints"}),
    "setDataBreakpoints": ("debug.setDataBreakpoints", {}, {"breakpoints": "breakpoints"}),
    "dataBreakpointInfo": (
        "debug.dataBreakpointInfo",
        {},
        {"name": "name", "variablesReference": "variablesReference", "frameId": "frameId"},
    ),
    "setVariable": (
        "debug.setVariable",
        {},
        {"variablesReference": "variablesReference", "name": "name", "value": "value"},
    ),
    "threads": ("debug.inspect", {"kind": "threads"}, {}),
    "stackTrace": (
        "debug.inspect",
        {"kind": "stackTrace"},
        {"threadId": "threadId", "startFrame": "startFrame", "levels": "levels"},
    ),
    "scopes": ("debug.inspect", {"kind": "scopes"}, {"frameId": "frameId"}),
    "variables": (
        "debug.inspect",
        {"kind": "variables"},
        {
            "variablesReference": "variablesReference",
            "filter": "variableFilter",
            "start": "start",
            "count": "count",
        },
    ),
    "evaluate": (
        "debug.inspect",
        {"kind": "evaluate"},
        {"expression": "expression", "frameId": "frameId", "context": "context"},
    ),
    "exceptionInfo": ("debug.inspect", {"kind": "exceptionInfo"}, {"threadId": "threadId"}),
    "stepInTargets": ("debug.inspect", {"kind": "stepInTargets"}, {"frameId": "frameId"}),
    "gotoTargets": (
        "debug.inspect",
        {"kind": "gotoTargets"},
        {"line": "line", "column": "column"},
    ),
}
#: Every DAP request :meth:`DapClient.request` takes.
DEBUG_COMMANDS: Final = frozenset(
    {"launch", "attach", "setBreakpoints", "setExceptionBreakpoints", "disconnect"}
    | _EXECUTE
    | set(_OPERATIONS)
)


class DebugAdapterOptions(TypedDict, total=False):
    """What :func:`open_dap_client` (``core.debug_adapter``) takes besides argv.

    Attributes:
        adapter_id: The DAP ``adapterID`` sent in ``initialize`` (default: the program's
            file name).
        root_path: The workspace root, absolute (default: the current directory).
        session_id: The session's id (default: one the Core makes).
        env: Variables to set (a None value removes one); the wire's ``environment``.
        cwd: The adapter's working directory, absolute; the wire's ``workingDirectory``.
        transport: ``"stdio"`` (default), ``"tcpAnnounced"`` (the adapter prints its port on
            a line starting with ``announce_prefix``) or ``"tcpPort"`` (``port``).
        port: The loopback port of ``tcpPort``.
        announce_prefix: The prefix of the announcement line of ``tcpAnnounced``.
        announce_stream: ``"stdout"`` (default) or ``"stderr"``.
        connect_timeout_ms: How long connecting may take (milliseconds).
        initialize_timeout_ms: How long ``initialize`` may take (milliseconds; 30 000).
        environment: The older name of ``env`` (deprecated).
        working_directory: The older name of ``cwd`` (deprecated).
    """

    adapter_id: str
    root_path: str
    session_id: str
    env: Mapping[str, str | None]
    cwd: str
    transport: Literal["stdio", "tcpAnnounced", "tcpPort"]
    port: int
    announce_prefix: str
    announce_stream: Literal["stdout", "stderr"]
    connect_timeout_ms: int
    initialize_timeout_ms: int
    environment: Mapping[str, str | None]
    working_directory: str


@dataclass
class _Received:
    event: DebugEvent
    raw: JSONObject
    taken: bool = False


def _pick(arguments: Mapping[str, JSONValue], names: Mapping[str, str]) -> JSONObject:
    return {ours: arguments[theirs] for theirs, ours in names.items() if theirs in arguments}


def _source_path(arguments: Mapping[str, JSONValue]) -> JSONValue:
    source = arguments.get("source")
    return source.get("path") if isinstance(source, dict) else None


def _operation(command: str, arguments: Mapping[str, JSONValue]) -> tuple[str, JSONObject]:
    """The ``debug.*`` command and its payload fields for a DAP request.

    Raises:
        ValueError: ``command`` is not one the session runs as an operation.
    """
    if command in ("launch", "attach"):
        return f"debug.{command}", {"configuration": dict(arguments)}
    if command in _EXECUTE:
        fields = _pick(
            arguments,
            {"threadId": "threadId", "singleThread": "singleThread", "targetId": "targetId"},
        )
        return "debug.execute", {"command": command, **fields}
    if command == "setBreakpoints":
        breakpoints = arguments.get("breakpoints")
        if breakpoints is None and isinstance(arguments.get("lines"), list):
            lines = arguments["lines"]
            assert isinstance(lines, list)
            breakpoints = [{"line": line} for line in lines]
        return "debug.setBreakpoints", {
            "path": _source_path(arguments),
            "breakpoints": breakpoints if breakpoints is not None else [],
        }
    if command == "setExceptionBreakpoints":
        filters: list[JSONValue] = []
        ids = arguments.get("filters")
        if isinstance(ids, list):
            filters += [{"filterId": name} for name in ids]
        options = arguments.get("filterOptions")
        if isinstance(options, list):
            filters += [
                _pick(o, {"filterId": "filterId", "condition": "condition"})
                for o in options
                if isinstance(o, dict)
            ]
        return "debug.setExceptionBreakpoints", {"filters": filters}
    if command in _OPERATIONS:
        name, fixed, names = _OPERATIONS[command]
        fields = {**fixed, **_pick(arguments, names)}
        if command == "gotoTargets":
            fields["path"] = _source_path(arguments)
        return name, fields
    raise ValueError(
        f"{command!r} is not a DAP request the debug session runs; it takes "
        + ", ".join(sorted(DEBUG_COMMANDS))
    )


def _ended(session_id: str, adapter_id: str, detail: JSONObject, *, start: bool) -> SessionFailed:
    reason = str(detail.get("reason") or "terminated")
    exit_code = detail.get("exitCode")
    signal = detail.get("signal")
    tail = detail.get("stderrTail")
    kind = StartFailed if start else SessionFailed
    status = ""
    if isinstance(exit_code, int):
        status = f" (exit code {exit_code})"
    elif isinstance(signal, int):
        status = f" (signal {detail.get('signalName') or signal})"
    what = "did not get ready" if start else "ended"
    return kind(
        f"{adapter_id} {what}: {reason}{status}",
        session_id=session_id,
        reason=reason,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        signal=signal if isinstance(signal, int) else None,
        stderr_tail=[str(line) for line in tail] if isinstance(tail, list) else [],
        details=detail,
    )


@final
class DapClient(metaclass=NoPublicConstructor):
    """A debug session whose adapter answered ``initialize``, as requests and typed events.

    Made by :func:`open_dap_client` (``core.debug_adapter(...)``); it has no public
    constructor.

    Attributes:
        session_id: The session's id (``sessionId`` of the ``debug.*`` commands).
        adapter_id: The adapter's ``adapterID``.
        state: The session's state as the last event said (``ready``, ``running``,
            ``paused``, ``terminated``, ...).
        capabilities: The adapter's capabilities (normalized ``initialize`` answer).
        output: Every ``output`` event (the debuggee's and the adapter's), in order.
        terminated: The ``terminated`` event once the session ended, else None.
    """

    def __init__(self, core: CommandCaller, session_id: str, adapter_id: str, state: str) -> None:
        self._core = core
        self.session_id = session_id
        self.adapter_id = adapter_id
        self.state = state
        self.capabilities: JSONObject = {}
        self.output: list[DebugOutput] = []
        self.terminated: DebugTerminated | None = None
        self._events: deque[_Received] = deque(maxlen=EVENT_HISTORY)
        self._changed = trio.Event()
        self._failure: SessionFailed | None = None
        self._ready = state in _LIVE

    async def request(
        self,
        command: str,
        arguments: Mapping[str, JSONValue] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> JSONValue:
        """Run a DAP request as the session's operation and return its result.

        Args:
            command: The DAP command (``"launch"``, ``"stackTrace"``, ``"continue"``, ...;
                :data:`DEBUG_COMMANDS`).
            arguments: Its DAP arguments.
            timeout_ms: The operation's deadline in milliseconds (default 60 000).

        Returns:
            The operation's result (``{}`` for run control; the normalized body otherwise).

        Raises:
            ValueError: ``command`` is not one of :data:`DEBUG_COMMANDS`.
            RequestFailed: The operation failed; ``code`` is its reason (``adapterError``
                when the adapter answered ``success: false``, ``timedOut``, ``cancelled``,
                ``sessionEnded``, ``refused``) and ``details`` the Core's.
            SessionFailed: The session had ended (at once, with the ``terminated`` detail).

        **Cancellation:** cancelling the caller fails the operation and sends DAP
        ``cancel`` when the adapter supports it.
        """
        if command == "disconnect":
            result = await self.stop()
            return {"terminated": result.terminated}
        name, fields = _operation(command, arguments or {})
        self._raise_if_ended()
        payload: JSONObject = {"sessionId": self.session_id, **fields}
        if timeout_ms is not None:
            payload["timeoutMilliseconds"] = timeout_ms
        try:
            answer = await self._core.call(name, payload)
        except CoreError as exc:
            raise self._failed(command, exc) from None
        assert isinstance(answer, dict)
        return answer.get("result")

    async def wait_for_event(
        self, name: str, predicate: Callable[[DebugEvent], bool] | None = None
    ) -> DebugEvent:
        """The next event called ``name`` (matching ``predicate``) not taken before.

        Each event is handed out once: one that arrived before the call and was not taken
        counts. Names: ``stopped``, ``continued``, ``output``, ``thread``, ``breakpoint``,
        ``exited``, ``terminated``, ``stateChanged``, ``operationCompleted``, ...
        (docs/commands.md, ``debug`` events).

        Raises:
            SessionFailed: The session ended before one came (except for ``terminated``,
                which is returned).

        **Cancellation:** a plain wait; bound it with :func:`trio.fail_after`.
        """
        while True:
            for received in self._events:
                if received.taken or received.raw.get("event") != name:
                    continue
                if predicate is None or predicate(received.event):
                    received.taken = True
                    return received.event
            self._raise_if_ended()
            await self._changed.wait()

    async def wait_stopped(self, thread_id: int | None = None) -> DebugStopped:
        """The next ``stopped`` event (of ``thread_id``, or of all threads); see
        :meth:`wait_for_event`."""
        event = await self.wait_for_event(
            "stopped",
            lambda e: (
                thread_id is None
                or (
                    isinstance(e, DebugStopped)
                    and (e.thread_id == thread_id or e.all_threads_stopped)
                )
            ),
        )
        assert isinstance(event, DebugStopped)
        return event

    async def wait_continued(self) -> DebugContinued:
        """The next ``continued`` event; see :meth:`wait_for_event`."""
        event = await self.wait_for_event("continued")
        assert isinstance(event, DebugContinued)
        return event

    async def wait_terminated(self) -> DebugTerminated:
        """Wait until the session ended; its ``terminated`` event (reason, exit status)."""
        while self.terminated is None:
            if self._failure is not None and self._failure.reason == "destroyed":
                raise self._failure
            await self._changed.wait()
        return self.terminated

    async def stop(self) -> DebugDisconnectResult:
        """Disconnect (DAP ``disconnect``, then the bounded end of the adapter's tree).

        A second call, or the end of the ``async with`` block, joins the first.
        """
        result = await self._core.debug_disconnect(session_id=self.session_id)
        self.state = result.state
        return result

    # -- the pump --------------------------------------------------------------------------

    async def _pump(self) -> None:
        while True:
            try:
                batch = await self._core.call(
                    "debug.waitEvents",
                    {"sessionId": self.session_id, "timeoutMilliseconds": _WAIT_MS},
                )
            except CoreError as exc:
                self._failure = self._failure or SessionFailed(
                    f"{self.adapter_id}: the session is gone ({exc.message})",
                    session_id=self.session_id,
                    reason="destroyed",
                )
                self._changed.set()
                return
            typed = msgspec.convert(batch, DebugEvents, strict=True)
            assert isinstance(batch, dict)
            raw_events = batch.get("events")
            assert isinstance(raw_events, list)
            for event, raw in zip(typed.events, raw_events, strict=True):
                assert isinstance(raw, dict)
                self._route(event, raw)
            self._changed.set()
            self._changed = trio.Event()

    def _route(self, event: DebugEvent, raw: JSONObject) -> None:
        self._events.append(_Received(event, raw))
        if isinstance(event, DebugStateChanged):
            self.state = event.state
            if event.state in _LIVE:
                self._ready = True
        elif isinstance(event, DebugCapabilities):
            self.capabilities = event.capabilities
        elif isinstance(event, DebugOutput):
            self.output.append(event)
        elif isinstance(event, DebugTerminated):
            self.terminated = event
            detail = {k: v for k, v in raw.items() if k not in ("seq", "event", "sessionId")}
            self._failure = _ended(self.session_id, self.adapter_id, detail, start=not self._ready)

    def _raise_if_ended(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _wait_ready(self) -> None:
        while not self._ready:
            if self._failure is not None:
                detail = self._failure.details
                raise _ended(self.session_id, self.adapter_id, detail, start=True)
            await self._changed.wait()

    def _failed(self, command: str, exc: CoreError) -> Exception:
        details = exc.details or {}
        terminated = details.get("terminated")
        if isinstance(terminated, dict):
            failure = _ended(self.session_id, self.adapter_id, terminated, start=False)
            failure.message = f"{command}: {exc.message}"
            failure.args = (failure.message,)
            return failure
        reason = details.get("reason")
        if not isinstance(reason, str) or "operationId" not in details:
            return exc  # refused before it was an operation: a bad argument
        return RequestFailed(
            f"{command} on {self.adapter_id} failed ({reason}): {exc.message}",
            session_id=self.session_id,
            code=reason,
            method=command,
            details={"code": exc.code, "message": exc.message, **details},
        )

    async def _close(self) -> None:
        for command in ("debug.disconnect", "debug.destroySession"):
            # Gone already, or the Core is closing (it ends the session itself).
            with contextlib.suppress(CoreError):
                await self._core.call(command, {"sessionId": self.session_id})


@asynccontextmanager
async def open_dap_client(
    core: CommandCaller, argv: Sequence[str], **options: Unpack[DebugAdapterOptions]
) -> AsyncIterator[DapClient]:
    """Start a debug adapter and yield it once it answered ``initialize``; disconnect after.

    Args:
        core: The running Core.
        argv: The adapter's program and arguments (no shell), e.g.
            ``[sys.executable, "-m", "debugpy.adapter"]``.
        **options: See :class:`DebugAdapterOptions`.

    Yields:
        The ready :class:`DapClient` (state ``ready``: launch or attach next).

    Raises:
        StartFailed: The adapter did not get ready: it could not be started (``reason``
            ``launchFailed``), exited (``adapterExited``, with its exit code and stderr
            tail), refused or timed out ``initialize``. Nothing of it is left running.
        CoreError: A bad argument (``invalid_request`` naming the field).

    **Cancellation:** leaving the block, however it happens, disconnects (DAP
    ``disconnect``, then TERM and KILL of the adapter's tree, bounded) and forgets the
    session.
    """
    if not argv:
        raise ValueError("argv must name the adapter's program")
    check_options(options, DebugAdapterOptions, "debug_adapter")
    adapter_id = options.get("adapter_id") or os.path.basename(argv[0])
    adapter: JSONObject = {"executable": argv[0], "arguments": list(argv[1:])}
    if (env := renamed_option(options, "env", "environment", "debug_adapter")) is not None:
        adapter["environment"] = dict(env)
    if (cwd := renamed_option(options, "cwd", "working_directory", "debug_adapter")) is not None:
        adapter["workingDirectory"] = cwd
    if "transport" in options:
        adapter["transport"] = options["transport"]
    if "port" in options:
        adapter["port"] = options["port"]
    if "announce_prefix" in options:
        adapter["announcePrefix"] = options["announce_prefix"]
    if "announce_stream" in options:
        adapter["announceStream"] = options["announce_stream"]
    if "connect_timeout_ms" in options:
        adapter["connectTimeoutMilliseconds"] = options["connect_timeout_ms"]
    if "initialize_timeout_ms" in options:
        adapter["initializeTimeoutMilliseconds"] = options["initialize_timeout_ms"]
    payload: JSONObject = {
        "adapterId": adapter_id,
        "adapter": adapter,
        "rootPath": options.get("root_path") or os.getcwd(),
    }
    if "session_id" in options:
        payload["sessionId"] = options["session_id"]
    try:
        created = await core.call("debug.createSession", payload)
    except CoreError as exc:
        if exc.code != "launch_failed":
            raise
        tail = (exc.details or {}).get("stderrTail")
        raise StartFailed(
            f"{adapter_id} could not be started: {exc.message}",
            reason="launchFailed",
            stderr_tail=[str(line) for line in tail] if isinstance(tail, list) else [],
            details=exc.details,
        ) from exc
    assert isinstance(created, dict)
    client = DapClient._create(core, str(created["sessionId"]), adapter_id, str(created["state"]))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._pump)
            try:
                await client._wait_ready()
                yield client
            finally:
                with trio.CancelScope(shield=True):
                    await client._close()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise_single(group)
