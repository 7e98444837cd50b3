"""``supervisor serve``: the Core as a JSON-RPC 2.0 server over the LSP base protocol.

Contract (ide-backend-protocol.schema.json, issue 2 §7):

- ``initialize`` comes first; any other request before it is answered -32002. Its result
  carries ``serverInfo {name, version}``, ``protocol: 1`` and the command list. The option
  ``initializationOptions.trusted: false`` declares the workspace untrusted (``build`` and
  ``test`` jobs end ``denied``).
- Every Core command is a method of the same name, params = payload. A command's error is a
  JSON-RPC error whose ``data.code`` is the Core code (``invalid_request``, ...), with the
  Core message as the message.
- Lanes push their ``job.started`` / ``job.output`` / ``job.finished`` notifications.
- ``$/cancelRequest`` answers the cancelled request with -32800 (the endpoint does that).
- ``shutdown`` waits for the requests in flight, ends every lane and process, then answers
  null; ``exit`` ends the server with 0 after ``shutdown`` and 1 otherwise. End of input
  without ``shutdown`` cleans up everything and exits 1, as does a broken frame header.
- stdout carries only frames: logs go to stderr, and the real fd 1 is pointed at stderr once
  the protocol stream has its own copy of it, so nothing else can write there by accident.
"""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError, ErrorCode, lookup_error

from ._core import PROTOCOL_VERSION, _version, open_core
from ._endpoint import JSONRPCError, current_request_id, open_jsonrpc_endpoint
from ._handles import take_over_stdio

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

    from ._core import Core
    from ._endpoint import JSONRPCEndpoint

__all__ = ("SERVER_NAME", "serve", "serve_stdio")

logger = logging.getLogger("supervisor.serve")

#: ``serverInfo.name`` in the ``initialize`` result.
SERVER_NAME: Final = "trio-process-supervisor"


def jsonrpc_error_from(error: CoreError) -> JSONRPCError:
    """Map a Core error to the JSON-RPC error ``supervisor serve`` answers with.

    The number is the code's ``jsonrpc_code`` in :data:`protocol.ERROR_CATALOG` (for example
    ``invalid_request`` -32602, ``not_supported`` -32601, ``cancelled`` -32800) and -32803
    (RequestFailed) for a code without one; ``data`` is ``{code, message, details?}`` with
    the Core code.
    """
    number = lookup_error(error.code).jsonrpc_code
    if number is None:
        number = int(ErrorCode.REQUEST_FAILED)
    return JSONRPCError(number, error.message, error.to_json())


class _Server:
    """One serve session: the lifecycle, the Core it opens at ``initialize``, in-flight work."""

    def __init__(self, nursery: trio.Nursery) -> None:
        from protocol import ServerLifecycle

        self._nursery = nursery
        self.lifecycle = ServerLifecycle()
        self.endpoint: JSONRPCEndpoint | None = None
        self._core: Core | None = None
        self._core_stop = trio.Event()
        self._core_closed = trio.Event()
        self._forwarder_done = trio.Event()
        self._in_flight = 0
        self._idle = trio.Event()
        self._idle.set()
        self.exited = trio.Event()
        self.exit_code = 1

    # -- requests ------------------------------------------------------------------------

    def admit_request(self, method: str) -> None:
        """Decide, in arrival order, whether a request may run (the endpoint's admission).

        The lifecycle is checked here rather than in the handler task because handler tasks
        start in no particular order: a request that arrived before ``shutdown`` must be
        served and waited for, never refused because its task happened to run later.
        """
        refusal = self.lifecycle.check_request(method)
        if refusal is ErrorCode.SERVER_NOT_INITIALIZED:
            raise JSONRPCError(int(refusal), "The server is not initialized")
        if refusal is not None:
            raise JSONRPCError(int(refusal), f"{method} is not allowed now")
        if method == "initialize":
            self.lifecycle.initialize_received()
        elif method == "shutdown":
            self.lifecycle.shutdown_received()
        else:
            self._in_flight += 1
            self._idle = trio.Event() if self._idle.is_set() else self._idle

    async def handle_request(self, method: str, params: JSONValue | None) -> JSONValue:
        if method == "initialize":
            return await self._initialize(params)
        if method == "shutdown":
            return await self._shutdown()
        try:
            if params is not None and not isinstance(params, dict):
                raise jsonrpc_error_from(CoreError("invalid_request", "params must be an object"))
            core = self._core
            assert core is not None, "admission refuses requests before initialize"
            try:
                # The JSON-RPC id is the operation id (DESIGN.md "Interfaces").
                request_id = current_request_id.get()
                return await core.call(
                    method,
                    params if params is not None else {},
                    operation_id=None if request_id is None else str(request_id),
                )
            except CoreError as exc:
                raise jsonrpc_error_from(exc) from None
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _initialize(self, params: JSONValue | None) -> JSONValue:
        try:
            trusted = _trusted_option(params)
            core: Core = await self._nursery.start(self._run_core, trusted)
        except BaseException:
            self.lifecycle.initialize_failed()
            raise
        self._core = core
        self.lifecycle.initialize_answered()
        self._nursery.start_soon(self._forward_job_events, core)
        return {
            "serverInfo": {"name": SERVER_NAME, "version": _version()},
            "protocol": PROTOCOL_VERSION,
            "commands": list(core.commands),
            "capabilities": {},
        }

    async def _shutdown(self) -> JSONValue:
        await self._idle.wait()
        await self.close_core()
        return None

    # -- notifications -------------------------------------------------------------------

    async def handle_notification(self, method: str, params: JSONValue | None) -> None:
        if self.lifecycle.should_drop_notification(method):
            logger.debug("dropped notification %s", method)
            return
        if method == "exit":
            self.exit_code = self.lifecycle.exit_received()
            self.exited.set()
            return
        logger.debug("ignored notification %s", method)

    # -- the Core and its events ---------------------------------------------------------

    async def _run_core(
        self, trusted: bool, *, task_status: trio.TaskStatus[Core] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with open_core(trusted=trusted) as core:
                task_status.started(core)
                await self._core_stop.wait()
        finally:
            self._core_closed.set()

    async def _forward_job_events(self, core: Core) -> None:
        """Send each job event as a notification, in order, until the end marker."""
        try:
            while True:
                batch = await core.job_events.wait(_FOREVER_MS)
                if await self._send_events(batch):
                    return
        finally:
            self._forwarder_done.set()

    async def _send_events(self, batch: JSONObject) -> bool:
        """Notify the client of each event; True when the end marker was among them."""
        events = batch.get("events")
        if batch.get("gap"):
            logger.warning("job events were dropped: the client did not keep up")
        assert isinstance(events, list)
        for event in events:
            assert isinstance(event, dict)
            name = event.get("event")
            if name == _END_OF_EVENTS:
                return True
            assert isinstance(name, str)
            if self.endpoint is not None and not self.endpoint.closed:
                params = {k: v for k, v in event.items() if k not in ("seq", "event")}
                await self.endpoint.notify(name, params)
        return False

    async def close_core(self) -> None:
        """End every lane and process, and flush the last job events; shielded, idempotent."""
        with trio.CancelScope(shield=True):
            self._core_stop.set()
            if self._core is not None:
                await self._core_closed.wait()
                if not self._forwarder_done.is_set():
                    # Every job has finished by now; the marker lets the forwarder send the
                    # last job.finished events before `shutdown` is answered.
                    self._core.job_events.put(_END_OF_EVENTS, {})
                    with trio.move_on_after(_FLUSH_TIMEOUT_S):
                        await self._forwarder_done.wait()


_FOREVER_MS: Final = 24 * 3600 * 1000
#: An event name no producer uses: it tells the forwarder that the Core has closed.
_END_OF_EVENTS: Final = "\0end"
#: How long the last job events may take to reach the client at shutdown.
_FLUSH_TIMEOUT_S: Final = 5.0


async def _set_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _trusted_option(params: JSONValue | None) -> bool:
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    if options is None:
        return True
    if not isinstance(options, dict):
        raise JSONRPCError(int(ErrorCode.INVALID_PARAMS), "initializationOptions must be an object")
    trusted = options.get("trusted", True)
    if not isinstance(trusted, bool):
        raise JSONRPCError(
            int(ErrorCode.INVALID_PARAMS), "initializationOptions.trusted must be a boolean"
        )
    return trusted


async def serve(receive_stream: trio.abc.ReceiveStream, send_stream: trio.abc.SendStream) -> int:
    """Serve one session over a pair of byte streams until ``exit`` or end of input.

    Args:
        receive_stream: Where the client's frames arrive (stdin in ``supervisor serve``).
        send_stream: Where frames are written (stdout).

    Returns:
        The exit status: 0 after ``shutdown`` then ``exit``, 1 otherwise (``exit`` without
        ``shutdown``, end of input, a broken frame header).

    **Cancellation:** cancelling it ends every lane and process (shielded, bounded) before it
    returns by raising :class:`trio.Cancelled`.
    """
    async with trio.open_nursery() as nursery:
        server = _Server(nursery)
        try:
            async with open_jsonrpc_endpoint(
                send_stream,
                receive_stream,
                request_handler=server.handle_request,
                notification_handler=server.handle_notification,
                admit_request=server.admit_request,
                name="client",
            ) as endpoint:
                server.endpoint = endpoint
                async with trio.open_nursery() as race:
                    race.start_soon(_set_when, server.exited, race.cancel_scope)
                    await endpoint.wait_closed()
                    race.cancel_scope.cancel()
                if not server.exited.is_set():
                    logger.info("the client went away: %s", endpoint.close_reason)
                    server.exit_code = 1
                await server.close_core()
        finally:
            await server.close_core()
            nursery.cancel_scope.cancel()
    return server.exit_code


def serve_stdio() -> int:
    """Run :func:`serve` on this process's stdin and stdout; return the exit status.

    SIGINT and SIGTERM end every lane and process first, then the server exits with 130 or
    143.
    """
    # Nothing but our frames may reach the client.
    protocol_in, protocol_out = take_over_stdio()

    async def main() -> int:
        receive = trio.lowlevel.FdStream(protocol_in)
        send = trio.lowlevel.FdStream(protocol_out)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            result: list[int] = []
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    result.append(await serve(receive, send))
                    nursery.cancel_scope.cancel()

                async def watch() -> None:
                    async for signum in signals:
                        logger.warning("received signal %d: ending everything", signum)
                        result.append(128 + signum)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(run)
                nursery.start_soon(watch)
        return result[0] if result else 1

    return trio.run(main)
