"""``supervisor serve``: the Core as a JSON-RPC 2.0 server over the LSP base protocol.

Contract (the IDE backend protocol):

- ``initialize`` comes first; any other request before it is answered -32002. Its result
  carries ``serverInfo {name, version}``, ``protocol: 1`` and the command list. The option
  ``initializationOptions.trusted: false`` declares the workspace untrusted (``build`` and
  ``test`` jobs end ``denied``). ``initializationOptions.hostRequests`` says who serves plugin
  backends' ``lithe/host/*`` requests: ``"serve"`` (the default: the supervisor serves those
  it has handlers for, consenting to every program start, and forwards the others as
  ``hostRequest`` events) or ``"client"`` (every one is forwarded to the client as a
  ``hostRequest`` event, answered with ``lsp.hostResponse``).
- Every Core command is a method of the same name, params = payload. A command's error is a
  JSON-RPC error whose ``data.code`` is the Core code (``invalid_request``, ...), with the
  Core message as the message.
- Lanes push their ``job.started`` / ``job.output`` / ``job.finished`` notifications, and
  ``job.progress`` / ``job.record`` for a job started with ``report: true``. A notification
  whose job lost events before it (the client did not keep up) carries ``dropped`` and
  ``droppedBytes``.
- A slow client never ends the session (docs/architecture.md "Flow control"): only the end of
  input, a broken pipe or ``exit`` do. While the client does not read, answers and
  notifications wait, bounded in bytes; a job or terminal whose output is not taken is paused;
  other informational events are coalesced with drop counts; the reader takes no new request
  until there is room again.
- ``$/cancelRequest`` answers the cancelled request with -32800 (the endpoint does that).
- ``shutdown`` waits for the requests in flight (a ``*.waitEvents`` long poll answers at once,
  with an empty batch, as if its timeout had passed), ends every lane and process, then
  answers null; ``exit`` ends the server with 0 after ``shutdown`` and 1 otherwise. End of input
  without ``exit`` cleans up everything and exits 1, as does a broken frame header.
- Every request received is answered exactly once, so no client waits forever, however the
  session ends: ``exit`` after ``shutdown`` waits for ``shutdown``'s reply; ``exit`` without
  ``shutdown``, the end of input, a broken frame header and SIGINT/SIGTERM cancel what is
  still running (answered with the Core code ``cancelled``), then the Core closes (its last
  ``job.finished`` events are sent) and the output is flushed, each step bounded.
- stdout carries only frames: logs go to stderr, and the real fd 1 is pointed at stderr once
  the protocol stream has its own copy of it, so nothing else can write there by accident.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from typing import TYPE_CHECKING, Final

import trio

from protocol import (
    MAX_ECHO_BYTES,
    CoreError,
    ErrorCode,
    LifecycleState,
    check_request_values,
    cut_utf8,
    lookup_error,
)

from .._core._core import PROTOCOL_VERSION, _version, open_core
from .._core._policy import AllowAll, RouteToClient
from .._endpoint import (
    EndpointClosed,
    JSONRPCError,
    current_admission,
    current_request_id,
    open_jsonrpc_endpoint,
)
from .._flow import current_answer_room
from .._handles import take_over_stdio
from .._process._tree import DEFAULT_KILL_WAIT_MS, DEFAULT_TERM_GRACE_MS
from .._session._order import Turn

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from protocol import JSONObject, JSONValue, Request

    from .._core._core import Core
    from .._core._policy import HostPolicy
    from .._endpoint import JSONRPCEndpoint

__all__ = ("SERVER_NAME", "SERVE_MAX_REQUESTS_IN_FLIGHT", "serve", "serve_stdio")

logger = logging.getLogger("supervisor.serve")

#: ``serverInfo.name`` in the ``initialize`` result.
SERVER_NAME: Final = "trio-process-supervisor"
#: Requests of the client in flight at once (ours); past it a request is refused ``busy``.
#: High because an editor pipelines: a burst of keystrokes or document changes on one
#: target waits for its turn in line, each a small task; their bytes count against the
#: endpoint's in-flight byte budget as well.
SERVE_MAX_REQUESTS_IN_FLIGHT: Final = 4096


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
        #: When the last job events must have been written by (set when the Core closed).
        self._events_deadline: float | None = None
        #: Core commands admitted and not finished: ``shutdown`` waits for them.
        self._in_flight = 0
        self._idle = trio.Event()
        self._idle.set()
        #: Every admitted request whose handler has not returned (so not yet answered).
        self._unanswered = 0
        self._answered = trio.Event()
        self._answered.set()
        self._request_scopes: set[trio.CancelScope] = set()
        #: The scopes of ``*.waitEvents`` calls in flight: ``shutdown`` ends them with an
        #: empty batch instead of waiting out their timeouts.
        self._long_polls: set[trio.CancelScope] = set()
        self._polls_ended = False
        #: Why the session is ending early (requests are then cancelled), or None.
        self._ending: str | None = None
        self.exited = trio.Event()
        self.exit_code = 1

    # -- requests ------------------------------------------------------------------------

    def admit_request(self, request: Request) -> Turn | None:
        """Decide, in arrival order, whether a request may run (the endpoint's admission).

        The lifecycle is checked here rather than in the handler task because handler tasks
        start in no particular order: a request that arrived before ``shutdown`` must be
        served and waited for, never refused because its task happened to run later. An
        admitted request is counted here for the same reason: the session only ends once
        every admitted request was answered. For the same reason a Core command takes its
        place in its target's line here (docs/architecture.md "The order rule"): commands
        on one terminal or session take effect in the order they arrived.

        Returns:
            The command's turn (:meth:`Core.arrive`), given back to :meth:`handle_request`
            through the endpoint's ``current_admission``; None when it has none.
        """
        method = request.method
        refusal = self.lifecycle.check_request(method)
        if refusal is ErrorCode.SERVER_NOT_INITIALIZED:
            # Said so a client that pipelines its first requests behind `initialize` knows
            # what to change, not only what went wrong.
            raise JSONRPCError(
                int(refusal),
                f"{cut_utf8(method, MAX_ECHO_BYTES)}: the server is not initialized yet: send"
                " initialize and wait for its response before sending other requests",
            )
        if refusal is not None:
            # Said with its cause: the code alone (-32600) does not tell a client which rule
            # it broke.
            if method == "initialize":
                # LSP 3.17, "Initialize Request": it may only be sent once.
                why = "initialize was already received: it may only be sent once per session"
            elif self.lifecycle.state is LifecycleState.SHUTTING_DOWN:
                why = (
                    f"{cut_utf8(method, MAX_ECHO_BYTES)}: shutdown was already received:"
                    " only the exit notification is accepted now"
                )
            else:
                why = f"{cut_utf8(method, MAX_ECHO_BYTES)}: exit was received: the server is ending"
            raise JSONRPCError(int(refusal), why)
        if self._ending is not None:
            raise _ending_error(self._ending)
        if method == "initialize":
            self.lifecycle.initialize_received()
        elif method == "shutdown":
            self.lifecycle.shutdown_received()
        else:
            self._in_flight += 1
            self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._unanswered += 1
        self._answered = trio.Event() if self._answered.is_set() else self._answered
        core = self._core
        if core is None or method in ("initialize", "shutdown"):
            return None
        # The JSON-RPC id is the operation id (see _dispatch), so a cancel can name a
        # request still in line by it.
        return core.arrive(method, request.params, str(request.id))

    async def handle_request(self, method: str, params: JSONValue | None) -> JSONValue:
        """Run one admitted request in a scope the end of the session can cancel."""
        turn = current_admission.get()
        assert turn is None or isinstance(turn, Turn)
        try:
            return await self._handle(method, params, turn)
        finally:
            if turn is not None:
                # Also when the request ended before the Core took it (cancelled at once).
                turn.release()

    async def _handle(self, method: str, params: JSONValue | None, turn: Turn | None) -> JSONValue:
        scope = trio.CancelScope()
        self._request_scopes.add(scope)
        if self._ending is not None:
            scope.cancel()
        try:
            with scope:
                return await self._dispatch(method, params, turn)
            # Only _end_requests cancels this scope ($/cancelRequest cancels the endpoint's).
            raise _ending_error(self._ending or "cancelled")
        finally:
            self._request_scopes.discard(scope)
            self._unanswered -= 1
            if self._unanswered == 0:
                self._answered.set()

    async def _dispatch(
        self, method: str, params: JSONValue | None, turn: Turn | None
    ) -> JSONValue:
        if method == "initialize":
            return await self._initialize(params)
        if method == "shutdown":
            return await self._shutdown()
        try:
            if params is not None and not isinstance(params, dict):
                raise jsonrpc_error_from(
                    CoreError("invalid_request", "params must be an object", {"field": "params"})
                )
            core = self._core
            assert core is not None, "admission refuses requests before initialize"
            try:
                # The JSON-RPC id is the operation id, so ``$/cancelRequest`` can name it.
                request_id = current_request_id.get()
                operation_id = None if request_id is None else str(request_id)
                payload = params if params is not None else {}
                if not method.endswith(".waitEvents"):
                    return await core.call(method, payload, operation_id=operation_id, turn=turn)
                with trio.CancelScope() as poll:
                    if self._polls_ended:
                        # Admitted before `shutdown`, started after it (tasks start in no
                        # particular order).
                        poll.cancel()
                    self._long_polls.add(poll)
                    try:
                        return await core.call(
                            method, payload, operation_id=operation_id, turn=turn
                        )
                    finally:
                        self._long_polls.discard(poll)
                # Ended by `shutdown`: what a timeout with nothing queued answers.
                return {"events": [], "gap": False}
            except CoreError as exc:
                raise jsonrpc_error_from(exc) from None
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _initialize(self, params: JSONValue | None) -> JSONValue:
        try:
            trusted = _trusted_option(params)
            policy = _host_policy_option(params)
            core: Core = await self._nursery.start(self._run_core, trusted, policy)
        except BaseException:
            # An `exit` while the Core opened has moved the lifecycle on already.
            if self.lifecycle.state is LifecycleState.INITIALIZING:
                self.lifecycle.initialize_failed()
            raise
        self._core = core
        self._nursery.start_soon(self._forward_job_events, core)
        if self._ending is not None:
            # The session started to end while the Core opened (`exit`, for example): the
            # Core is closed with the session, and this is the one answer.
            raise _ending_error(self._ending)
        self.lifecycle.initialize_answered()
        return {
            "serverInfo": {"name": SERVER_NAME, "version": _version()},
            "protocol": PROTOCOL_VERSION,
            "commands": list(core.commands),
            "capabilities": {},
        }

    async def _shutdown(self) -> JSONValue:
        # A long poll would hold `shutdown` for up to its timeout (days, at most): it
        # answers now, as if its timeout had passed with nothing queued.
        self._polls_ended = True
        for poll in self._long_polls:
            poll.cancel()
        await self._idle.wait()
        await self.close_core()
        return None

    # -- notifications -------------------------------------------------------------------

    async def handle_notification(self, method: str, params: JSONValue | None) -> None:
        if self.lifecycle.should_drop_notification(method):
            logger.debug("dropped notification %s", method)
            return
        if method == "exit":
            exit_code = self.lifecycle.exit_received()
            if self._ending is None:
                self.exit_code = exit_code
                if exit_code != 0:
                    # Decided here, in arrival order, so no request admitted from now on (nor
                    # an `initialize` finishing now) can slip past the end of the session.
                    self._ending = "exit without shutdown"
            self.exited.set()
            return
        logger.debug("ignored notification %s", method)

    # -- the end of the session ----------------------------------------------------------

    async def run_session(self, endpoint: JSONRPCEndpoint, interrupt: trio.Event | None) -> bool:
        """Serve until ``exit``, the end of input or ``interrupt``, then end everything.

        Every request received is answered before the output is closed, so no client
        waits forever: after ``shutdown`` then ``exit``, by waiting for them (``shutdown``'s
        reply waits for the requests before it); otherwise by cancelling them. Then every
        lane and process ends, the last job events are sent and the output is flushed.

        Returns:
            Whether the output was flushed within :data:`_FLUSH_TIMEOUT_S`.
        """
        interrupted = interrupt.wait if interrupt is not None else None
        await _first_of(self.exited.wait, endpoint.wait_input_ended, interrupted)
        if self._ending is None and self.exited.is_set() and not _is_set(interrupt):
            await _first_of(self._answered.wait, interrupted)
        reason = self._end_reason(endpoint, interrupt)
        if reason is None:
            await self.close_core()
        else:
            # At once, not one after the other: the requests' process trees and the lanes'
            # then share one TERM grace instead of taking one each.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._end_requests, reason)
                nursery.start_soon(self.close_core)
        return await self._flush(endpoint)

    def _end_reason(self, endpoint: JSONRPCEndpoint, interrupt: trio.Event | None) -> str | None:
        """Why requests in flight are cancelled; None for ``exit`` after ``shutdown``."""
        if self._ending is not None:
            return self._ending
        if _is_set(interrupt):
            return "interrupted"
        if self.exited.is_set():
            return None
        why = endpoint.input_end_reason or endpoint.close_reason or "closed"
        logger.info("the client went away: %s", why)
        return "end of input" if why == "eof" else why

    async def _end_requests(self, reason: str) -> None:
        """Cancel every request still running and wait, bounded, until each one answered."""
        self._ending = reason
        self.exit_code = 1
        for scope in self._request_scopes:
            scope.cancel()
        with trio.move_on_after(_ANSWER_TIMEOUT_S):
            await self._answered.wait()
        if self._unanswered:
            logger.warning(
                "%d cancelled requests still run after %.0f s and may go unanswered",
                self._unanswered,
                _ANSWER_TIMEOUT_S,
            )

    async def _flush(self, endpoint: JSONRPCEndpoint) -> bool:
        with trio.move_on_after(_FLUSH_TIMEOUT_S):
            # EndpointClosed: the writer is gone, so there is nothing left to wait for.
            with contextlib.suppress(EndpointClosed):
                await endpoint.flush()
            return True
        logger.warning(
            "the client did not read the last frames within %.0f s: dropped", _FLUSH_TIMEOUT_S
        )
        return False

    # -- the Core and its events ---------------------------------------------------------

    async def _run_core(
        self,
        trusted: bool,
        policy: HostPolicy,
        *,
        task_status: trio.TaskStatus[Core] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with open_core(trusted=trusted, host_policy=policy) as core:
                task_status.started(core)
                await self._core_stop.wait()
        finally:
            self._core_closed.set()

    async def _forward_job_events(self, core: Core) -> None:
        """Send each job event as a notification, in order, until the end marker.

        Flow control: each drain takes only what the endpoint's write queue has room for, so
        while the client does not read, job events wait in their queue, where a job's output
        not taken pauses its pipes and the rest is coalesced (supervisor._flow).
        """
        try:
            while True:
                room = self.endpoint.answer_room() if self.endpoint is not None else None
                token = current_answer_room.set(room)
                try:
                    batch = await core.job_events.wait(_FOREVER_MS)
                finally:
                    current_answer_room.reset(token)
                try:
                    if await self._send_events(batch):
                        return
                finally:
                    if room is not None:
                        room.release()
        finally:
            self._forwarder_done.set()

    async def _send_events(self, batch: JSONObject) -> bool:
        """Notify the client of each event; True when done (the end marker, or no output)."""
        events = batch.get("events")
        if batch.get("gap"):
            # Each job's next event says how many of its events went (dropped, droppedBytes).
            logger.info("job events were dropped: the client did not keep up")
        assert isinstance(events, list)
        for event in events:
            assert isinstance(event, dict)
            name = event.get("event")
            if name == _END_OF_EVENTS:
                return True
            assert isinstance(name, str)
            if self.endpoint is not None and not self.endpoint.closed:
                params = {k: v for k, v in event.items() if k not in ("seq", "event")}
                try:
                    await self.endpoint.notify(name, params)
                except EndpointClosed:
                    return True
        return False

    async def close_core(self) -> None:
        """End every lane and process, and flush the last job events; shielded, idempotent.

        A second call (``shutdown`` and the end of the session may both make one) waits for
        the same end and the same bound as the first.
        """
        with trio.CancelScope(shield=True):
            self._core_stop.set()
            if self._core is None:
                return
            await self._core_closed.wait()
            if self._events_deadline is None:
                self._events_deadline = trio.current_time() + _FLUSH_TIMEOUT_S
                if not self._forwarder_done.is_set():
                    # Every job has finished by now; the marker lets the forwarder send the
                    # last job.finished events before `shutdown` is answered.
                    self._core.job_events.put(_END_OF_EVENTS, {})
            with trio.move_on_at(self._events_deadline):
                await self._forwarder_done.wait()


_FOREVER_MS: Final = 24 * 3600 * 1000
#: An event name no producer uses: it tells the forwarder that the Core has closed.
_END_OF_EVENTS: Final = "\0end"
#: How long the last job events, and then the last frames, may take to reach the client
#: when the session ends (each; a client that stops reading must not hold the exit).
_FLUSH_TIMEOUT_S: Final = 5.0
#: How long cancelled requests get to end and answer when the session ends early: a
#: request's processes end within the TERM grace plus the kill wait, plus a margin.
_ANSWER_TIMEOUT_S: Final = (DEFAULT_TERM_GRACE_MS + DEFAULT_KILL_WAIT_MS) / 1000 + 2.0


def _ending_error(reason: str) -> JSONRPCError:
    return jsonrpc_error_from(CoreError("cancelled", f"The server is ending: {reason}"))


def _is_set(event: trio.Event | None) -> bool:
    return event is not None and event.is_set()


async def _first_of(*waits: Callable[[], Awaitable[object]] | None) -> None:
    """Return as soon as one of ``waits`` (None entries are skipped) returns."""
    async with trio.open_nursery() as nursery:
        for wait in waits:
            if wait is not None:
                nursery.start_soon(_cancel_after, wait, nursery.cancel_scope)


async def _cancel_after(wait: Callable[[], Awaitable[object]], scope: trio.CancelScope) -> None:
    await wait()
    scope.cancel()


def _trusted_option(params: JSONValue | None) -> bool:
    try:
        # Refused here rather than accepted and failing later when something re-encodes it.
        check_request_values(params, "params")
    except CoreError as exc:
        raise jsonrpc_error_from(exc) from None
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


def _host_policy_option(params: JSONValue | None) -> HostPolicy:
    """``initializationOptions.hostRequests``: ``"serve"`` (default) or ``"client"``."""
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    choice = options.get("hostRequests", "serve") if isinstance(options, dict) else "serve"
    if choice == "serve":
        return AllowAll()
    if choice == "client":
        return RouteToClient()
    raise JSONRPCError(
        int(ErrorCode.INVALID_PARAMS),
        'initializationOptions.hostRequests must be "serve" or "client"',
    )


async def serve(
    receive_stream: trio.abc.ReceiveStream,
    send_stream: trio.abc.SendStream,
    *,
    interrupt: trio.Event | None = None,
) -> int:
    """Serve one session over a pair of byte streams until ``exit``, end of input or interrupt.

    Every request received is answered exactly once before the output closes, so no client
    waits forever. ``exit`` after ``shutdown`` waits for ``shutdown``'s reply. ``exit``
    without ``shutdown``, the end of input, a broken frame header (reading stops there) and
    ``interrupt`` cancel every request still running: each is answered -32800 with
    ``error.data.code`` ``cancelled`` (or with its result, if it finished first), within
    :data:`_ANSWER_TIMEOUT_S` (5 s). Then every lane and process ends, the last job events
    (``job.finished`` of the jobs that ended) are sent, and the output is flushed; each of
    these two waits on the client is bounded by :data:`_FLUSH_TIMEOUT_S` (5 s), past which
    what it did not read is dropped.

    Args:
        receive_stream: Where the client's frames arrive (stdin in ``supervisor serve``).
        send_stream: Where frames are written (stdout).
        interrupt: Set it to end the session as described above (``supervisor serve`` sets
            it on SIGINT or SIGTERM); None: no such event.

    Returns:
        The exit status: 0 after ``shutdown`` then ``exit``, 1 otherwise (``exit`` without
        ``shutdown``, end of input, a broken frame header, ``interrupt``).

    **Cancellation:** cancelling it ends every lane and process (shielded, bounded) before it
    returns by raising :class:`trio.Cancelled`; requests in flight are not answered then.
    """
    async with trio.open_nursery() as nursery:
        server = _Server(nursery)
        try:
            with trio.CancelScope() as output_scope:
                async with open_jsonrpc_endpoint(
                    send_stream,
                    receive_stream,
                    request_handler=server.handle_request,
                    notification_handler=server.handle_notification,
                    admit_request=server.admit_request,
                    name="client",
                    close_on_input_end=False,
                    # The Core checks every value and names the field it refuses.
                    finite_only=False,
                    # However loaded, the client can always end the session.
                    exempt_methods=frozenset({"shutdown"}),
                    # An editor pipelines: keystrokes and document changes wait for their
                    # turn on their target (docs/architecture.md "The order rule") without
                    # being refused; the in-flight byte budget still bounds their memory.
                    max_inbound_concurrency=SERVE_MAX_REQUESTS_IN_FLIGHT,
                ) as endpoint:
                    server.endpoint = endpoint
                    if not await server.run_session(endpoint, interrupt):
                        # Leaving by cancellation drops what the client did not read rather
                        # than waiting out the endpoint's closing write bound (10 s) as well.
                        output_scope.cancel()
                        await trio.lowlevel.checkpoint()
        finally:
            await server.close_core()
            nursery.cancel_scope.cancel()
    return server.exit_code


async def run_until_signalled(body: Callable[[trio.Event], Awaitable[int]], *, first: str) -> int:
    """Run ``body(interrupt)`` and return its exit status, or ``128 + signum`` once signalled.

    The first SIGINT or SIGTERM logs ``first`` (a format with one ``%d``, the signal) and sets
    ``interrupt``, so the body ends as it ends on an interrupt (answers what it has, ends what
    it started); a second one cancels the body at once (its shielded cleanup still runs). The
    stdio server and the listening backend share it, so both end the same way on a signal.
    Returns 1 if the body was cancelled before it returned a status.
    """
    interrupt = trio.Event()
    signalled: list[int] = []
    result: list[int] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                result.append(await body(interrupt))
                nursery.cancel_scope.cancel()

            async def watch() -> None:
                async for signum in signals:
                    if signalled:
                        logger.warning("received signal %d again: ending now", signum)
                        nursery.cancel_scope.cancel()
                        return
                    logger.warning(first, signum)
                    signalled.append(signum)
                    interrupt.set()

            nursery.start_soon(run)
            nursery.start_soon(watch)
    if signalled:
        return 128 + signalled[0]
    return result[0] if result else 1


def serve_stdio() -> int:
    """Run :func:`serve` on this process's stdin and stdout; return the exit status.

    The first SIGINT or SIGTERM ends the session like an interrupt of :func:`serve` (every
    request received is answered, every lane and process ends, the output is flushed), then
    the server exits with 130 or 143. A second one stops waiting on requests and on the
    client at once (the processes still end, shielded and bounded).
    """
    # Nothing but our frames may reach the client.
    protocol_in, protocol_out = take_over_stdio()

    async def main() -> int:
        receive = trio.lowlevel.FdStream(protocol_in)
        send = trio.lowlevel.FdStream(protocol_out)
        return await run_until_signalled(
            lambda interrupt: serve(receive, send, interrupt=interrupt),
            first="received signal %d: cancelling the requests, ending everything",
        )

    return trio.run(main)
