"""A JSON-RPC 2.0 endpoint over a pair of Trio byte streams.

Strategy: this module only moves bytes and routes messages. Framing (the LSP base
protocol) and JSON-RPC parsing live in :mod:`protocol`, which is sans-I/O; the endpoint
feeds it what ``receive_some`` returns and acts on the events it gives back.

Tasks, all in one nursery owned by :func:`open_jsonrpc_endpoint`:

- the *reader* pulls bytes, routes replies to the waiting :meth:`JSONRPCEndpoint.request`
  callers, starts one task per inbound request and queues inbound notifications;
- the *writer* is the only task that touches the send stream: it takes every frame that is
  queued, joins them into one buffer and writes it, so frames never interleave and a burst of
  replies costs one system call instead of one each;
- the *notification dispatcher* runs the notification handler on one notification at a time,
  in arrival order (LSP's ``didOpen``/``didChange`` ordering depends on it);
- one *handler task* per inbound request, each inside its own cancel scope, so that
  ``$/cancelRequest`` cancels exactly that request; each is a supervision boundary, so a
  handler's bug is answered -32603 (``data.code`` ``internal``) and ends that request only.

Flow control, not a write timeout (docs/architecture.md "Flow control"): a peer that reads
slowly, or not at all for a while, is never taken for a dead one.
The write queue is bounded in frames and in bytes; past it, our requests and notifications
wait, and a drain of queued events takes only the room left
(:data:`supervisor._flow.current_answer_room`, set for every handler). Answers and refusals we
owe the peer wait in the same line without a task and without stopping the reader, within an
owed budget; past it answers wait in their handler tasks (counted) and the reader admits no new
request (it stops reading: backpressure on a peer that reads none of our answers). The reader
never waits behind our own frames: a peer blocked writing to us reads nothing of them (the
mutual block, docs/architecture.md "Flow control"). The endpoint closes only
when the peer is gone: end of input, a failed read or write (a broken pipe), a broken frame
header, or its owner closing it. ``write_timeout_ms`` is opt-in, for the one peer whose
contract asks for it (a plugin backend that stays blocked past its request timeout,
the plugin contract "Isolation between backends").

Every background task runs in a cancel scope of its own rather than in the nursery's, because
the caller's ``async with`` body runs in the nursery too and a transport failure must stop our
tasks without cancelling the caller.

Exactly-once bookkeeping is the sans-I/O :class:`protocol.JSONRPCConnection`'s: it numbers our
requests, matches each reply to a pending request at most once, refuses a reused or excess
inbound id, never answers a broken reply, and frames each inbound request's one answer. What
is left here is I/O: the waiter of each pending request (entered *before* its frame is
queued; whoever removes it -- the reply, the caller's cancellation, the close -- wakes it), the
cancel scope of each inbound request, and the reads and writes.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NoReturn, TypeAlias, final

import trio

from protocol import (
    CANCEL_METHOD,
    MAX_ECHO_BYTES,
    CancelReceived,
    ErrorCode,
    ErrorObject,
    ErrorResponse,
    JSONRPCConnection,
    MessageRefused,
    Notification,
    NotificationReceived,
    ReplyIgnored,
    ReplyReceived,
    Request,
    RequestReceived,
    Response,
    encode_frame,
    encode_message,
)
from protocol._errors import MissingResultError

from ._boundary import cut_utf8, internal_message, log_failure, split_failure
from ._flow import current_answer_room
from ._handles import NoPublicConstructor
from ._transport import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_PENDING_WRITES,
    DEFAULT_MAX_WRITE_BYTES,
    EndpointClosed,
    FramedTransport,
    _WriteQueue,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from protocol import JSONValue, Params, RequestId

__all__ = (
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_INFLIGHT_BYTES",
    "DEFAULT_MAX_WRITE_BYTES",
    "EndpointClosed",
    "EndpointStatistics",
    "JSONRPCEndpoint",
    "JSONRPCError",
    "NotificationHandler",
    "ReplyWithoutResult",
    "RequestHandler",
    "current_admission",
    "current_request_id",
    "method_not_found",
    "open_jsonrpc_endpoint",
)

logger = logging.getLogger("supervisor.endpoint")

#: The id of the inbound request whose handler is running (None outside a handler): the
#: handler signature stays ``(method, params)``, and the rare handler that needs the id (to
#: use it as an operation id, for example) reads it here.
current_request_id: contextvars.ContextVar[RequestId | None] = contextvars.ContextVar(
    "current_request_id", default=None
)
#: What ``admit_request`` returned for the inbound request whose handler is running (None
#: outside a handler, or without an ``admit_request``).
current_admission: contextvars.ContextVar[object] = contextvars.ContextVar(
    "current_admission", default=None
)

#: How long the last frames may take when the endpoint is closed gracefully, and how long a
#: shielded answer (a failure met while cancelled) may wait for room: a peer that reads nothing
#: must not hold up its owner's exit.
_CLOSING_WRITE_S: Final = 10.0
#: Default number of inbound requests whose handlers may run at once.
DEFAULT_MAX_INBOUND_CONCURRENCY: Final = 128
#: Default budget of frame-body bytes held by inbound requests whose handlers run (96 MiB):
#: without it, 128 requests of 64 MiB could be held at once. A held request costs up to twice
#: its body (its decoded value and an onward copy, e.g. a document re-encoded for a language
#: server), so this budget is 192 MiB of serve's documented 512 MiB total (README "Memory
#: bounds"). One request alone is always admitted (it passed the frame limit).
DEFAULT_MAX_INFLIGHT_BYTES: Final = 96 * 1024 * 1024

#: Inbound notifications waiting for the dispatcher; past this the reader stops reading,
#: which is backpressure on the peer that sends them.
_NOTIFICATION_QUEUE_SIZE: Final = 128
#: Frames (or bytes) of a burst -- callers woken by one read, each queueing its next
#: request -- that a caller writes itself before the burst ends, so that the peer works on
#: them while the rest are made: with one write at the end the peer sat idle until then
#: (echo peer, 64 in flight: 0.84 of the client's time busy, 2 writes per 64 frames now
#: keeps it at 1.0). 32 measured best against 8, 16 and 24 frames and 2 and 4 KiB.
_BURST_FRAMES: Final = 32
_BURST_BYTES: Final = 64 * 1024
#: ``wait_read_by_peer`` polls the pipe's fill this often at first, then backs off to the max.
_PEER_READ_POLL_FIRST_S: Final = 0.001
_PEER_READ_POLL_MAX_S: Final = 0.05

#: ``await request_handler(method, params) -> result``
RequestHandler: TypeAlias = "Callable[[str, JSONValue | None], Awaitable[JSONValue]]"
#: ``await notification_handler(method, params)``
NotificationHandler: TypeAlias = "Callable[[str, JSONValue | None], Awaitable[None]]"


class JSONRPCError(Exception):
    """A JSON-RPC error object (JSON-RPC 2.0 §5.1), in both directions.

    :meth:`JSONRPCEndpoint.request` raises it when the peer answers with an error response.
    A request handler raises it to answer with that error instead of a result.

    Args:
        code: The error code, an ``int`` (see :class:`protocol.ErrorCode`).
        message: A short description.
        data: Optional extra JSON data, sent as ``error.data``.
    """

    def __init__(self, code: int, message: str, data: JSONValue | None = None) -> None:
        super().__init__(code, message, data)
        self.code = int(code)
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ReplyWithoutResult(JSONRPCError):
    """The peer answered a request with neither ``result`` nor ``error``.

    Raised by :meth:`JSONRPCEndpoint.request`. It is a :class:`JSONRPCError` (code -32600,
    "Invalid Request": the reply is not a valid JSON-RPC 2.0 response object), so a caller
    that only knows error replies treats it as one; a caller for whom a missing result
    means something catches it first (the plugin contract "Invocation": no result is
    ``plugin.function.invalidResult``, while a ``null`` result is a result).
    """

    def __init__(self) -> None:
        super().__init__(
            ErrorCode.INVALID_REQUEST, "the reply carried neither a result nor an error"
        )


def method_not_found(method: str) -> JSONRPCError:
    """The error a request handler raises for a method it does not implement.

    Usage: ``raise method_not_found(method)`` at the end of a handler's dispatch.

    Args:
        method: The method name the peer asked for.

    Returns:
        A :class:`JSONRPCError` with code -32601 (JSON-RPC 2.0 §5.1 "Method not found").
    """
    return JSONRPCError(
        ErrorCode.METHOD_NOT_FOUND, f"Method not found: {cut_utf8(method, MAX_ECHO_BYTES)}"
    )


@dataclass(frozen=True, slots=True)
class EndpointStatistics:
    """A snapshot of an endpoint's queues and counters (trio's ``statistics()`` convention).

    Attributes:
        pending_requests: Outbound requests waiting for their reply.
        running_handlers: Inbound requests whose handler has not answered yet.
        queued_writes: Frames waiting for the writer.
        queued_write_bytes: Bytes of those frames.
        outbound_bytes: Bytes on their way to the peer: frames queued, answers waiting for
            room in the queue, and room reserved by drains of queued events.
        frames_written: Frames the writer has handed to the send stream.
        writes: ``send_all`` calls the writer made (fewer than frames when it coalesced).
        frames_read: Frames the reader decoded.
        ignored_replies: Replies that matched no pending request (late, duplicate, unknown).
    """

    pending_requests: int
    running_handlers: int
    queued_writes: int
    frames_written: int
    writes: int
    frames_read: int
    ignored_replies: int
    queued_write_bytes: int = 0
    outbound_bytes: int = 0


class _Pending:
    """One outbound request waiting for its reply; completed at most once.

    A hand-rolled one-shot wait (what ``trio.Event`` does, minus its parking lot): this
    is the per-request hot path.
    """

    __slots__ = ("cancel_sent", "error", "no_result", "owner", "queued", "reply", "task")

    def __init__(self, owner: JSONRPCEndpoint) -> None:
        #: Counts, in ``_woken``, the callers it wakes that have not run yet.
        self.owner = owner
        self.reply: Response | ErrorResponse | None = None
        self.error: str | None = None
        #: The reply named this request but carried neither result nor error.
        self.no_result = False
        self.queued = False
        #: ``$/cancelRequest`` was sent for it while its caller went on waiting.
        self.cancel_sent = False
        self.task: trio.lowlevel.Task | None = None

    def finish(self) -> None:
        """Wake the waiter, if it is waiting; ``reply`` or ``error`` is already set."""
        task, self.task = self.task, None
        if task is not None:
            self.owner._woken += 1
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        if self.reply is not None or self.error is not None or self.no_result:
            await trio.lowlevel.checkpoint()
            return
        self.task = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        # Only finish() reschedules it (an abort raises Cancelled instead).
        self.owner._woken -= 1


class _Inbound:
    """One inbound request being handled: its cancel scope, whether the peer cancelled, and
    what its admission returned."""

    __slots__ = ("admission", "body_bytes", "cancelled_by_peer", "scope")

    def __init__(self, body_bytes: int, admission: object) -> None:
        self.scope = trio.CancelScope()
        self.cancelled_by_peer = False
        self.body_bytes = body_bytes
        self.admission = admission


def _error_response(
    request_id: RequestId | None, code: int, message: str, data: JSONValue = None
) -> ErrorResponse:
    return ErrorResponse(id=request_id, error=ErrorObject(code=code, message=message, data=data))


def _internal_response(request_id: RequestId | None, failure: BaseException) -> ErrorResponse:
    """The -32603 answer to a request whose handler failed: a bounded one-line message in
    ``error.message`` and ``error.data`` ``{code: "internal", message}``; no traceback."""
    message = internal_message(failure)
    return _error_response(
        request_id,
        ErrorCode.INTERNAL_ERROR,
        message,
        {"code": "internal", "message": message},
    )


def _id_key(request_id: object) -> tuple[type, object]:
    # The JSON type is part of an id's identity: "1" and 1 are different requests, and
    # Python's 1 == 1.0 == True must not make them collide either.
    return (type(request_id), request_id)


class _AnswerRoom:
    """Room reserved in the write queue for one answer (or one batch of notifications) that
    a drain of queued events is making (:class:`supervisor._flow.AnswerRoom`).

    The endpoint sets one for every request handler (:data:`supervisor._flow.
    current_answer_room`) and releases it once the handler returned; then the answer's frame
    is counted instead.
    """

    __slots__ = ("_queue", "granted")

    def __init__(self, queue: _WriteQueue) -> None:
        self._queue = queue
        self.granted = 0

    async def take(self, wanted: int) -> int:
        grant = await self._queue.reserve(wanted)
        self.granted += grant
        return grant

    def take_nowait(self, wanted: int) -> int:
        grant = self._queue.reserve_nowait(wanted)
        self.granted += grant
        return grant

    def release(self) -> None:
        """Give back what was reserved (idempotent)."""
        granted, self.granted = self.granted, 0
        self._queue.release(granted)


@final
class JSONRPCEndpoint(metaclass=NoPublicConstructor):
    """One side of a JSON-RPC 2.0 session over the LSP base protocol.

    Create it with :func:`open_jsonrpc_endpoint`; it has no public constructor. It is both
    a client (:meth:`request`, :meth:`notify`) and a server (the handlers given to
    :func:`open_jsonrpc_endpoint`).
    """

    def __init__(
        self,
        send_stream: trio.abc.SendStream,
        receive_stream: trio.abc.ReceiveStream,
        *,
        request_handler: RequestHandler,
        notification_handler: NotificationHandler | None,
        name: str,
        max_pending_writes: int,
        write_timeout_ms: float | None,
        max_body_bytes: int,
        max_inbound_concurrency: int,
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
        max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES,
        admit_request: Callable[[Request], object] | None = None,
        cancelled_data: JSONValue = None,
        close_on_input_end: bool = True,
        finite_only: bool = True,
        exempt_methods: frozenset[str] = frozenset(),
    ) -> None:
        self.name = name
        self._exempt = exempt_methods
        self._close_on_input_end = close_on_input_end
        self._admit_request = admit_request
        self._cancelled_data = cancelled_data
        self._transport = FramedTransport(
            send_stream,
            receive_stream,
            name=name,
            max_pending_writes=max_pending_writes,
            max_write_bytes=max_write_bytes,
            write_timeout_ms=write_timeout_ms,
        )
        self._request_handler = request_handler
        self._notification_handler = notification_handler
        self._closing_write_s = (
            _CLOSING_WRITE_S if write_timeout_ms is None else write_timeout_ms / 1000
        )
        self._max_body_bytes = max_body_bytes
        self._max_inbound = max_inbound_concurrency
        self._max_inflight_bytes = max_inflight_bytes
        #: Frame-body bytes of the inbound requests whose handlers run.
        self._inflight_bytes = 0
        self._conn = JSONRPCConnection(
            max_body_bytes=max_body_bytes,
            max_inbound=max_inbound_concurrency,
            finite_only=finite_only,
            exempt_methods=exempt_methods,
        )
        self._pending: dict[int, _Pending] = {}
        #: Callers whose reply came (their task rescheduled) and that have not run yet.
        self._woken = 0
        #: Handler tasks whose answer waits for room in the write queue.
        self._answers_waiting = 0
        self._inbound: dict[tuple[type, object], _Inbound] = {}
        #: The transport's write queue (an alias: it is on every hot path).
        self._queue = self._transport.queue
        self._notifications_in, self._notifications_out = trio.open_memory_channel[Notification](
            _NOTIFICATION_QUEUE_SIZE
        )
        self._closed_event = trio.Event()
        self._close_reason: str | None = None
        self._input_end_reason: str | None = None
        #: Set once nothing more will be received and every notification received before
        #: that was dispatched (or the endpoint closed).
        self._input_done = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._task_scopes: set[trio.CancelScope] = set()
        self._ignored_replies = 0

    # -- public API ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the endpoint has closed (see :attr:`close_reason`)."""
        return self._close_reason is not None

    @property
    def close_reason(self) -> str | None:
        """Why the endpoint closed (the :class:`EndpointClosed` reasons), or None while open."""
        return self._close_reason

    @property
    def input_end_reason(self) -> str | None:
        """Why reading stopped while the endpoint stays open, or None.

        Only an endpoint opened with ``close_on_input_end=False`` sets it: ``"eof"``,
        ``"closed"`` (our side closed the stream it reads), ``"protocol error: ..."`` or
        ``"read failed: ..."``.
        """
        return self._input_end_reason

    async def request(
        self,
        method: str,
        params: Params | None = None,
        *,
        timeout_ms: float | None = None,
        cancel_at: float | None = None,
    ) -> JSONValue:
        """Send a request and wait for its reply.

        The request gets a fresh integer id (ids are never reused by an endpoint). Its pending
        entry exists before the frame is queued, so a reply that arrives at once is not lost.

        Args:
            method: The JSON-RPC method.
            params: The params (an object or an array), or None to send none.
            timeout_ms: Give up after this many milliseconds; None waits for ever.
            cancel_at: A :func:`trio.current_time` at which the peer is sent
                ``$/cancelRequest`` if it has not answered, while this call goes on waiting
                for its answer (the peer's reply to a cancelled request, or a late result).
                The caller bounds that wait with its own scope. None: no such time.

        Returns:
            The reply's ``result``.

        Raises:
            ReplyWithoutResult: The peer's reply carried neither result nor error.
            JSONRPCError: The peer answered with an error response.
            EndpointClosed: The endpoint closed before the reply arrived (or was closed), or
                its input ended (no reply can arrive).
            trio.TooSlowError: ``timeout_ms`` passed; the peer was sent ``$/cancelRequest``.
            ValueError: The request's body would be over the frame-body limit (the message
                names it); nothing was sent.

        **Cancellation:** if the caller is cancelled (or the timeout passes) after the
        request was queued, the pending entry is removed first and ``$/cancelRequest``
        ``{id}`` is sent (unless ``cancel_at`` sent it already); a reply that comes later
        is ignored (logged at debug level).
        """
        ended = self._close_reason or self._input_end_reason
        if ended is not None:
            await trio.lowlevel.checkpoint()
            raise EndpointClosed(ended)
        request_id, frame = self._conn.send_request(method, params)
        if len(frame) > self._max_body_bytes:
            problem = self._frame_problem(frame, "request")
            if problem is not None:
                self._conn.forget_request(request_id)
                raise ValueError(problem)
        pending = _Pending(self)
        self._pending[request_id] = pending
        try:
            if timeout_ms is None and cancel_at is None:
                # No cancel scope when there is no deadline: entering one costs more than
                # the rest of a request's bookkeeping.
                await self._exchange(frame, pending)
            else:
                with trio.fail_after(math.inf if timeout_ms is None else timeout_ms / 1000):
                    await self._exchange(frame, pending, wait=cancel_at is None)
                    if cancel_at is not None:
                        await self._wait_past_cancel(request_id, pending, cancel_at)
        except BaseException:
            if (
                self._pending.pop(request_id, None) is not None
                and self._conn.forget_request(request_id)
                and pending.queued
                and not pending.cancel_sent
            ):
                self._send_cancel(request_id)
            raise
        if pending.error is not None:
            raise EndpointClosed(pending.error)
        if pending.no_result:
            raise ReplyWithoutResult
        reply = pending.reply
        if isinstance(reply, ErrorResponse):
            raise JSONRPCError(reply.error.code, reply.error.message, reply.error.data)
        assert reply is not None  # _complete() set it before waking us
        return reply.result

    async def _exchange(self, frame: bytes, pending: _Pending, *, wait: bool = True) -> None:
        # Waiting for the reply is this call's checkpoint, so a free slot in the queue is
        # taken without yielding first: one trip through the scheduler less per request.
        # While other callers woken by the same read have yet to run, the frame is queued
        # instead of written at once: the writer then sends all of theirs with one system
        # call (one write per request woke the peer once per request, 64 in flight), and
        # every _BURST_FRAMES of them a caller writes those queued so far itself.
        if (self._woken or not self._transport.write_now(frame)) and not self._queue.put_nowait(
            frame
        ):
            await self._queue.put(frame)
        elif len(self._queue.frames) >= _BURST_FRAMES or self._queue.bytes >= _BURST_BYTES:
            self._transport.write_queued_now()
        pending.queued = True
        if wait:
            await pending.wait()

    async def _wait_past_cancel(self, request_id: int, pending: _Pending, cancel_at: float) -> None:
        """``request(cancel_at=...)``: ``$/cancelRequest`` at ``cancel_at``, then wait on."""
        with trio.move_on_at(cancel_at):
            await pending.wait()
            return
        if request_id in self._pending:
            pending.cancel_sent = True
            self._send_cancel(request_id)
        await pending.wait()

    def _send_cancel(self, request_id: int) -> None:
        self._queue.put_urgent(self._conn.send_cancel(request_id))

    async def notify(self, method: str, params: Params | None = None) -> None:
        """Queue a notification for the writer.

        Returns once the frame is queued, not written; leaving the context manager normally
        writes what is queued (bounded by ``write_timeout_ms``, or 10 s without one).

        Args:
            method: The JSON-RPC method.
            params: The params (an object or an array), or None to send none.

        Raises:
            EndpointClosed: The endpoint is closed.
            ValueError: The notification's body would be over the frame-body limit (the
                message names it); nothing was sent.

        **Cancellation:** waits only while the write queue is full (the peer does not read:
        no timeout ends that wait); if cancelled then, the notification is not sent.
        """
        if self._close_reason is not None:
            await trio.lowlevel.checkpoint()
            raise EndpointClosed(self._close_reason)
        frame = encode_frame(encode_message(Notification(method=method, params=params)))
        if len(frame) > self._max_body_bytes:
            problem = self._frame_problem(frame, "notification")
            if problem is not None:
                await trio.lowlevel.checkpoint()
                raise ValueError(problem)
        await self._queue.put(frame)

    def _frame_problem(self, frame: bytes, what: str) -> str | None:
        """Why ``frame`` may not be written (its body is over the limit), or None."""
        body = len(frame) - frame.index(b"\r\n\r\n") - 4
        if body <= self._max_body_bytes:
            return None
        return (
            f"the {what} is {body} bytes as JSON, over the frame-body limit of"
            f" {self._max_body_bytes} bytes"
        )

    def answer_room(self) -> _AnswerRoom:
        """Room in the write queue for a task that drains queued events into notifications.

        Serve's job-event forwarder sets it as :data:`supervisor._flow.current_answer_room`
        around each drain, so a drain takes only what the queue has room for, and calls
        ``release()`` once the notifications are queued (they count themselves then).
        """
        return _AnswerRoom(self._queue)

    async def wait_closed(self) -> None:
        """Wait until the endpoint has closed; :attr:`close_reason` then says why.

        **Cancellation:** safe to cancel; nothing changes.
        """
        await self._closed_event.wait()

    async def wait_input_ended(self) -> None:
        """Wait until nothing more will be received, and what was received has been handed on.

        Returns once the endpoint has closed, or (``close_on_input_end=False``) once reading
        stopped (:attr:`input_end_reason` says why) and every notification read before that
        went through the notification handler; every request read before that has been
        admitted and has its handler task.

        **Cancellation:** safe to cancel; nothing changes.
        """
        await self._input_done.wait()

    async def flush(self) -> None:
        """Wait until every frame queued before this call has been written.

        Raises:
            EndpointClosed: The endpoint closed before they were all written (a write
                failed, made no progress for an opt-in ``write_timeout_ms``, or it was closed).

        **Cancellation:** safe to cancel; the frames stay queued for the writer.
        """
        if self._close_reason is not None:
            await trio.lowlevel.checkpoint()
            raise EndpointClosed(self._close_reason)
        written = trio.Event()
        # An empty frame is a marker: the writer sets ``written`` once the batch holding it,
        # and so everything queued before it, has been written.
        self._transport.flush_markers += 1
        try:
            await self._queue.put(b"", written)
        except BaseException:
            self._transport.flush_markers -= 1
            raise
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_when_set, written, nursery.cancel_scope)
            nursery.start_soon(_cancel_when_set, self._transport.writer_done, nursery.cancel_scope)
        if not written.is_set():
            # The writer only stops once the queue is closed, so the queue knows why.
            raise EndpointClosed(self._queue.closed_reason or "closed")

    async def wait_read_by_peer(self) -> None:
        """Wait until the peer has read every frame queued before this call.

        :meth:`flush` returns once the frames are in the pipe; a peer that stopped reading
        leaves them there (a pipe holds 64 KiB). On a pipe this then waits until the pipe
        holds nothing of ours any more (``FIONREAD``), polling from 1 ms up to 50 ms apart.
        A sender of "latest wins" messages waits here before taking the next one, so that
        later versions can replace a waiting one while the peer does not read. On a stream
        that is no pipe, or where the pipe's fill can't be read, it returns after the flush.

        Raises:
            EndpointClosed: As :meth:`flush`, or the endpoint closed while waiting.

        **Cancellation:** safe to cancel; nothing changes.
        """
        await self.flush()
        delay = _PEER_READ_POLL_FIRST_S
        while self._transport.unread_by_peer() > 0:
            if self._close_reason is not None:
                raise EndpointClosed(self._close_reason)
            await trio.sleep(delay)
            delay = min(delay * 2, _PEER_READ_POLL_MAX_S)

    def statistics(self) -> EndpointStatistics:
        """Return an :class:`EndpointStatistics` snapshot."""
        return EndpointStatistics(
            pending_requests=len(self._pending),
            running_handlers=len(self._inbound),
            queued_writes=len(self._queue.frames),
            queued_write_bytes=self._queue.bytes,
            outbound_bytes=self._queue.outbound,
            frames_written=self._transport.frames_written,
            writes=self._transport.writes,
            frames_read=self._transport.frames_read,
            ignored_replies=self._ignored_replies,
        )

    # -- closing ---------------------------------------------------------------------------

    def _close(self, reason: str, *, keep_writer: bool = False) -> None:
        """Close the endpoint: fail pending requests, cancel our tasks. Idempotent.

        ``keep_writer`` leaves the writer running so a graceful close can flush the queue.
        """
        if self._close_reason is None:
            self._close_reason = reason
            if reason in ("eof", "closed"):
                logger.debug("%s: endpoint closed (%s)", self.name, reason)
            else:
                logger.warning("%s: endpoint closed (%s)", self.name, reason)
            self._fail_pending(reason)
            self._closed_event.set()
            self._input_done.set()
        for scope in self._task_scopes:
            scope.cancel()
        if not keep_writer:
            self._queue.close(self._close_reason)
            self._transport.writer_scope.cancel()

    def _fail_pending(self, reason: str) -> None:
        pending, self._pending = self._pending, {}
        for request_id in pending:
            self._conn.forget_request(request_id)
        for entry in pending.values():
            entry.error = reason
            entry.finish()

    def _end_input(self, reason: str) -> None:
        """The reader stopped: close the endpoint, or only stop reading (``close_on_input_end``).

        Stopping only the reading leaves handlers, the notification dispatcher and the writer
        running, so the owner can still answer what was received (serve mode does).
        """
        if self._close_on_input_end:
            self._close(reason)
            return
        if self._close_reason is not None or self._input_end_reason is not None:
            return
        self._input_end_reason = reason
        if reason in ("eof", "closed"):
            logger.debug("%s: input ended (%s)", self.name, reason)
        else:
            logger.warning("%s: input ended (%s)", self.name, reason)
        # No reply can arrive any more.
        self._fail_pending(reason)
        # The dispatcher finishes the notifications already queued, then sets _input_done.
        self._notifications_in.close()

    # -- background tasks --------------------------------------------------------------------

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        assert self._nursery is not None
        scope = trio.CancelScope()
        self._task_scopes.add(scope)
        if self._close_reason is not None:
            scope.cancel()
        self._nursery.start_soon(self._run_in_scope, scope, fn, *args)

    async def _run_in_scope(
        self, scope: trio.CancelScope, fn: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        try:
            with scope:
                await fn(*args)
        finally:
            self._task_scopes.discard(scope)

    async def _write_loop(self) -> None:
        await self._transport.write_loop(self._close)

    async def _read_loop(self) -> None:
        reason = await self._transport.read_loop(self._conn, self._dispatch)
        self._end_input(reason)

    def _dispatch(
        self,
        event: RequestReceived
        | NotificationReceived
        | CancelReceived
        | ReplyReceived
        | ReplyIgnored
        | MessageRefused,
    ) -> Awaitable[None] | None:
        # Replies, the hot path, are routed without a coroutine.
        if type(event) is ReplyReceived:
            self._complete(event)
            return None
        return self._route(event)

    async def _route(
        self,
        event: RequestReceived
        | NotificationReceived
        | CancelReceived
        | ReplyIgnored
        | MessageRefused
        | ReplyReceived,
    ) -> None:
        if isinstance(event, RequestReceived):
            if event.request.method not in self._exempt:
                # Flow control: while what we owe the peer does not move, take on nothing
                # new (the reader stops: backpressure); it never closes for it. What we owe,
                # not what we send: our own frames waiting for room must not stop the
                # reader, or a peer blocked writing to us never reads them (a mutual block).
                await self._queue.wait_owed_room()
            await self._start_inbound(event.request, event.body_bytes)
        elif isinstance(event, NotificationReceived):
            if event.notification.method == CANCEL_METHOD:
                # Names no request in flight: it raced the answer, or names nothing.
                logger.debug("%s: $/cancelRequest for no request in flight", self.name)
            else:
                await self._notifications_in.send(event.notification)
        elif isinstance(event, CancelReceived):
            self._cancel_inbound(event.request_id)
        elif isinstance(event, ReplyIgnored):
            self._ignored_replies += 1
            reply = event.reply
            if event.request_id is None and isinstance(reply, ErrorResponse):
                logger.warning(
                    "%s: peer reported an error without id: %s %s",
                    self.name,
                    reply.error.code,
                    cut_utf8(reply.error.message, MAX_ECHO_BYTES),
                )
            else:
                logger.debug(
                    "%s: ignored a reply to id %r (late, duplicate or never sent)",
                    self.name,
                    event.request_id,
                )
        elif isinstance(event, MessageRefused):
            logger.debug("%s: bad message: %s", self.name, event.error)
            if event.answer is not None:
                await self._answer_from_reader(event.answer)
        else:
            self._complete(event)

    def _complete(self, event: ReplyReceived) -> None:
        entry = self._pending.pop(event.request_id, None)
        if entry is None:  # the connection and this table move together; defensive only
            return
        problem = event.problem
        if event.reply is not None:
            entry.reply = event.reply
        elif isinstance(problem, MissingResultError):
            entry.no_result = True
        else:
            # A broken reply (result and error both, a bad error member): the request ends
            # with an error saying so; nothing is answered to the peer.
            entry.reply = _error_response(
                event.request_id,
                int(problem.error_code) if problem is not None else ErrorCode.INVALID_REQUEST,
                f"invalid reply: {problem}",
            )
        entry.finish()

    async def _answer_from_reader(self, frame: bytes) -> None:
        """Queue an answer the reader makes itself (a refusal), waiting only past the budget
        of what is owed (:meth:`~supervisor._transport._WriteQueue.put_owed`).

        Within it the reader reads on whatever our own frames wait for; past it (a peer that
        sends requests while it reads none of our answers) it reads nothing until the peer
        reads again (flow control); the endpoint does not close for it.
        """
        if self._queue.put_owed(frame):
            return
        with contextlib.suppress(EndpointClosed):
            await self._queue.put(frame)

    async def _start_inbound(self, request: Request, body_bytes: int) -> None:
        exempt = request.method in self._exempt
        if (
            not exempt
            and self._inbound
            and self._inflight_bytes + body_bytes > self._max_inflight_bytes
        ):
            # Refused before its handler holds it: the body is freed with the refusal. A
            # request alone in flight is always admitted (it passed the frame limit).
            await self._answer_from_reader(
                self._conn.send_error(
                    request.id,
                    ErrorCode.REQUEST_FAILED,
                    f"too many request bytes in flight (the budget is"
                    f" {self._max_inflight_bytes} bytes)",
                    {"code": "busy"},
                )
            )
            return
        if (
            not exempt
            and self._answers_waiting
            and len(self._inbound) + self._answers_waiting >= self._max_inbound
        ):
            # The connection counts a request answered once its answer is framed; answers
            # that wait for room in the write queue still hold a task each, so they count.
            await self._answer_from_reader(
                self._conn.send_error(
                    request.id,
                    ErrorCode.REQUEST_FAILED,
                    "too many requests in flight",
                    {"code": "busy"},
                )
            )
            return
        admission: object = None
        if self._admit_request is not None:
            try:
                admission = self._admit_request(request)
            except JSONRPCError as exc:
                await self._answer_from_reader(
                    self._conn.send_error(request.id, exc.code, exc.message, exc.data)
                )
                return
        inbound = _Inbound(body_bytes, admission)
        key = _id_key(request.id)
        self._inbound[key] = inbound
        self._inflight_bytes += body_bytes
        self._spawn(self._handle_request, request, key, inbound)

    def _cancel_inbound(self, request_id: RequestId) -> None:
        inbound = self._inbound.get(_id_key(request_id))
        if inbound is None:
            # In flight for the connection, but its handler has just returned.
            logger.debug("%s: $/cancelRequest for id %r: not running", self.name, request_id)
            return
        inbound.cancelled_by_peer = True
        inbound.scope.cancel()

    async def _handle_request(
        self, request: Request, key: tuple[type, object], inbound: _Inbound
    ) -> None:
        answer: Response | ErrorResponse
        room = _AnswerRoom(self._queue)
        try:
            try:
                with inbound.scope:
                    current_request_id.set(request.id)
                    current_admission.set(inbound.admission)
                    # A drain of queued events in this handler takes only the room the
                    # write queue has (supervisor._flow): events stay where they coalesce.
                    current_answer_room.set(room)
                    result = await self._request_handler(request.method, request.params)
            finally:
                # Removed before any answer is queued: a $/cancelRequest from now on finds
                # nothing, so a finished request is never answered twice.
                del self._inbound[key]
                self._inflight_bytes -= inbound.body_bytes
                # The answer's frame is counted from here on, instead of the room.
                room.release()
        except JSONRPCError as exc:
            answer = _error_response(request.id, exc.code, exc.message, exc.data)
        except BaseException as exc:
            # The request is a supervision boundary: a bug in its handler ends this request
            # (answered -32603, once), never the endpoint and the requests around it.
            failure, rest = split_failure(exc)
            if failure is None:
                raise
            log_failure(f"{self.name}: request {cut_utf8(request.method, 128)!r}", failure)
            # Shielded: the failure may have come with (or during) a cancellation, and the
            # peer still gets its one answer; then the rest goes on up as Trio intends.
            await self._answer_shielded(
                _internal_response(request.id, failure), wait_written=rest is not None
            )
            if rest is not None:
                raise rest from None
            return
        else:
            if inbound.scope.cancelled_caught:
                answer = _error_response(
                    request.id,
                    ErrorCode.REQUEST_CANCELLED,
                    "Request cancelled",
                    self._cancelled_data,
                )
            else:
                answer = Response(id=request.id, result=result)
        frame = self._encode_answer(request, answer)
        if self._queue.put_owed(frame):
            return
        # Past the owed budget: counted while it waits for room, an answer not yet queued is
        # still a request in flight for the in-flight bound (see _start_inbound).
        self._answers_waiting += 1
        try:
            await self._queue.put(frame)
        finally:
            self._answers_waiting -= 1

    def _encode_answer(self, request: Request, answer: Response | ErrorResponse) -> bytes:
        """The frame of ``answer``; -32603 when the handler's value has no JSON form.

        A result can hold what JSON cannot carry (a NaN, an infinity, a non-JSON type) when a
        handler passes on a value it did not check; that ends this request, not the endpoint.
        """
        try:
            return self._conn.send_answer(answer)
        except (TypeError, ValueError, RecursionError) as exc:
            log_failure(f"{self.name}: answer to {cut_utf8(request.method, 128)!r}", exc)
            return self._conn.send_answer(_internal_response(request.id, exc))

    async def _answer_shielded(self, answer: ErrorResponse, *, wait_written: bool) -> None:
        # Shielded and bounded so that neither a cancellation nor a stuck peer loses the
        # answer or holds up what is re-raised after it; a closed endpoint answers nothing.
        written = trio.Event() if wait_written else None
        with trio.move_on_after(self._closing_write_s, shield=True):
            try:
                await self._queue.put(self._conn.send_answer(answer), written)
            except EndpointClosed:
                return
            if written is not None:
                await written.wait()

    async def _dispatch_notifications(self) -> None:
        async for note in self._notifications_out:
            if self._notification_handler is None:
                logger.debug("%s: no handler for notification %r", self.name, note.method)
                continue
            try:
                await self._notification_handler(note.method, note.params)
            except JSONRPCError as exc:
                # A notification has no reply to carry the error (JSON-RPC 2.0 §4.1).
                logger.debug("%s: notification %r failed: %s", self.name, note.method, exc)
            except BaseException as exc:
                # A notification is a boundary too: its handler's bug is logged, and the
                # notifications after it are still dispatched.
                failure, rest = split_failure(exc)
                if failure is None:
                    raise
                log_failure(f"{self.name}: notification {cut_utf8(note.method, 128)!r}", failure)
                if rest is not None:
                    raise rest from None
        # Reached only once the reader closed the channel (close_on_input_end=False).
        self._input_done.set()

    async def _flush(self) -> None:
        """Let the writer finish what is queued, then stop it; bounded (see _CLOSING_WRITE_S)."""
        self._queue.close(self._close_reason or "closed")
        with trio.move_on_after(self._closing_write_s):
            await self._transport.writer_done.wait()


@asynccontextmanager
async def open_jsonrpc_endpoint(
    send_stream: trio.abc.SendStream,
    receive_stream: trio.abc.ReceiveStream,
    *,
    request_handler: RequestHandler,
    notification_handler: NotificationHandler | None = None,
    name: str = "peer",
    max_pending_writes: int = DEFAULT_MAX_PENDING_WRITES,
    write_timeout_ms: float | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_inbound_concurrency: int = DEFAULT_MAX_INBOUND_CONCURRENCY,
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES,
    admit_request: Callable[[Request], object] | None = None,
    cancelled_data: JSONValue = None,
    close_on_input_end: bool = True,
    finite_only: bool = True,
    exempt_methods: frozenset[str] = frozenset(),
) -> AsyncIterator[JSONRPCEndpoint]:
    """Run a JSON-RPC 2.0 endpoint over two byte streams (LSP base-protocol framing).

    Every request is answered once, memory stays bounded and bad input only gets an error reply.
    Inbound requests run concurrently, each in its own task and cancel scope; the handler's return
    value is the result, a :class:`JSONRPCError` it raises becomes the error response, and
    ``$/cancelRequest`` cancels its task, which is then answered -32800 (once: a handler that
    already finished keeps its result). Unknown methods are the handler's to refuse with
    :func:`method_not_found`. Malformed input is answered (-32700 with id null for a body that is
    not JSON, -32600 for an invalid request, with its id when known) and the endpoint goes on.
    Batches are refused with one -32600 (LSP has none). Inbound requests past
    ``max_inbound_concurrency``, or whose body would take the bytes held by requests in flight
    past ``max_inflight_bytes``, are refused at once with -32803 and ``data: {"code": "busy"}``,
    so the reader never stops reading replies and memory stays bounded. An answer whose body
    would be over ``max_body_bytes`` (a peer with our limit could not read it) is replaced by
    a -32603 answer saying so; a request or notification of ours over it raises ValueError.
    No frame over the limit is ever written.

    Flow control (never a timeout): what is on its way to the peer -- frames queued, answers
    waiting for room, room reserved by drains -- is bounded by ``max_pending_writes`` frames
    and ``max_write_bytes`` bytes (a single larger frame goes alone). A peer that does not
    read makes our requests and notifications wait, and a drain of queued events in a
    handler take only the room left (:data:`supervisor._flow.current_answer_room`). What we
    owe the peer (answers, refusals) waits in the same line, in its turn, without a task and
    without stopping the reader, up to ``max_write_bytes`` bytes (each answer counted with its
    place in the line); past that the reader admits no new request (it reads no
    further: backpressure on a peer that sends requests and reads none of our answers). So
    a peer that stops reading while its own writes block (a mutual block) is still read.
    Being slow never closes the endpoint.

    Each inbound request and notification is a supervision boundary. A request handler
    that raises any other :class:`Exception` (a bug of ours, a library refusing a value)
    ends that request only: it is answered once with -32603, a bounded one-line message and
    ``error.data`` ``{"code": "internal", "message": ...}`` (no traceback on the wire), the
    traceback is logged, and the endpoint goes on serving. A result that has no JSON form
    (a NaN, for example) is answered the same way. A notification handler's failure is
    logged and the next notification is dispatched. Cancellation, ``KeyboardInterrupt``
    and ``SystemExit`` are not contained: they propagate as Trio intends (a request whose
    failure arrived in the same exception group as one of them is still answered first).

    Notifications go to ``notification_handler`` one at a time, in arrival order, on a task
    of their own (so a slow handler does not stop replies from being read); with none, they
    are dropped (debug log). ``$/cancelRequest`` is handled here and not passed on.

    When the transport ends -- EOF, a broken frame header, a read or write that fails (a
    broken pipe), or, only when ``write_timeout_ms`` is given, a write that makes no progress
    for that long -- the endpoint closes: pending requests fail at once
    with :class:`EndpointClosed`, handler tasks are cancelled (and not answered), and
    :meth:`JSONRPCEndpoint.wait_closed` returns. The ``async with`` body is not cancelled.
    With ``close_on_input_end=False`` the end of input (as opposed to a write failure) only
    stops reading. Stray text between frames is logged as a warning with its byte count only.

    Leaving the block closes the endpoint with reason ``"closed"``: pending requests fail,
    handler tasks are cancelled, frames already queued are written when the block is left
    without an exception (bounded by ``write_timeout_ms``, or 10 s without one), and both
    streams are closed
    with :func:`trio.aclose_forcefully`. The process behind the streams, if any, is the
    caller's to end.

    Args:
        send_stream: Where frames are written.
        receive_stream: Where frames are read from (may be the same object as
            ``send_stream``, e.g. a socket stream).
        request_handler: ``await request_handler(method, params) -> result``.
        notification_handler: ``await notification_handler(method, params)``, or None.
        name: The peer's name, used in log messages.
        max_pending_writes: Frames the write queue holds before senders wait.
        write_timeout_ms: None (the default): no write is ever timed out, a peer that reads
            slowly is waited for. A number of milliseconds opts in to declaring the transport
            dead (``"write timeout"``) when a write of up to 64 KiB makes no progress that
            long: only for a peer whose contract says so (a plugin backend, the plugin contract
            "Isolation between backends"), and the testbed.
        max_body_bytes: The largest frame body accepted, in bytes; a larger one is a protocol
            error that closes the endpoint.
        max_inbound_concurrency: Inbound requests that may be handled at once.
        max_inflight_bytes: The most frame-body bytes the requests being handled may hold
            together; a request that would take them past it is refused ``busy`` (one alone
            is always admitted).
        max_write_bytes: The most bytes on their way to the peer (see "Flow control" above).
        admit_request: ``admit_request(request) -> admission``, called synchronously by the
            reader in arrival order before a request's handler task starts (handler tasks
            start in no particular order). Raising :class:`JSONRPCError` refuses the request:
            it is answered with that error and no handler runs. A server lifecycle belongs
            here (``initialize`` first, nothing after ``shutdown``), so a request that
            arrived before ``shutdown`` is never refused because its task ran after it; so
            does the request's place in its target's line (docs/architecture.md "The order
            rule"). What it returns is the handler's :data:`current_admission`; a handler
            always runs once admitted (cancelled at its first checkpoint when the endpoint
            is closing), so it can release what the admission took.
        cancelled_data: ``error.data`` of the -32800 answer to a request the peer cancelled
            with ``$/cancelRequest`` (None sends none); plugin sessions send
            ``{"code": "plugin.host.cancelled"}`` (the plugin contract "Host services").
        close_on_input_end: True (the default) closes the endpoint when its input ends
            (EOF, a broken frame header, a failed read), as described above. False only stops
            reading: pending outbound requests fail with :class:`EndpointClosed`, while
            handler tasks, notifications already received and the writer go on, so the owner
            can answer everything it received before it leaves the block; see
            :meth:`JSONRPCEndpoint.wait_input_ended` and
            :attr:`JSONRPCEndpoint.input_end_reason` (serve mode uses this).
        finite_only: True (the default) refuses a message holding a number no float holds
            (``1e400`` would read as infinity, which no answer or event carrying it could be
            written with): a request is answered -32600 with its id, a reply ends the
            request it names, a notification is dropped. Serve passes False: its Core checks
            every value of a request and refuses it with the field's name.
        exempt_methods: Requests never refused ``busy`` by either bound: the ones that end
            the session (serve passes ``shutdown``), so a client can always stop a loaded
            server.

    Yields:
        The :class:`JSONRPCEndpoint`.

    Raises:
        ValueError: A bound is not positive.

    **Cancellation:** cancelling the block closes the endpoint without writing what is
    still queued; it never hangs.
    """
    _check_bounds(max_pending_writes, write_timeout_ms, max_body_bytes, max_inbound_concurrency)
    if max_inflight_bytes < 1 or max_write_bytes < 1:
        raise ValueError("endpoint bounds must be positive")
    endpoint = JSONRPCEndpoint._create(
        send_stream,
        receive_stream,
        request_handler=request_handler,
        notification_handler=notification_handler,
        name=name,
        max_pending_writes=max_pending_writes,
        write_timeout_ms=write_timeout_ms,
        max_body_bytes=max_body_bytes,
        max_inbound_concurrency=max_inbound_concurrency,
        max_inflight_bytes=max_inflight_bytes,
        max_write_bytes=max_write_bytes,
        admit_request=admit_request,
        cancelled_data=cancelled_data,
        close_on_input_end=close_on_input_end,
        finite_only=finite_only,
        exempt_methods=exempt_methods,
    )
    try:
        async with trio.open_nursery() as nursery:
            _start_tasks(endpoint, nursery)
            graceful = False
            try:
                yield endpoint
                graceful = True
            finally:
                await _shut_down(endpoint, send_stream, receive_stream, graceful=graceful)
    except BaseExceptionGroup as group:
        # Only the caller's body (and KeyboardInterrupt/SystemExit in a task) can raise here;
        # hand a lone error back as itself so callers do not have to unwrap groups.
        if len(group.exceptions) != 1:
            raise
        _reraise_alone(group.exceptions[0])


def _check_bounds(
    max_pending_writes: int,
    write_timeout_ms: float | None,
    max_body_bytes: int,
    max_inbound_concurrency: int,
) -> None:
    """Raise ValueError unless every bound of :func:`open_jsonrpc_endpoint` is positive."""
    if max_pending_writes < 1 or max_inbound_concurrency < 1 or max_body_bytes < 1:
        raise ValueError("endpoint bounds must be positive")
    if write_timeout_ms is not None and (not write_timeout_ms > 0 or math.isnan(write_timeout_ms)):
        raise ValueError("write_timeout_ms must be positive or None")


def _start_tasks(endpoint: JSONRPCEndpoint, nursery: trio.Nursery) -> None:
    """Start the endpoint's writer, reader and notification dispatcher in ``nursery``."""
    endpoint._nursery = nursery
    nursery.start_soon(endpoint._write_loop)
    endpoint._spawn(endpoint._read_loop)
    endpoint._spawn(endpoint._dispatch_notifications)


async def _shut_down(
    endpoint: JSONRPCEndpoint,
    send_stream: trio.abc.SendStream,
    receive_stream: trio.abc.ReceiveStream,
    *,
    graceful: bool,
) -> None:
    """Close the endpoint, write what is queued if ``graceful``, then close both streams."""
    endpoint._close("closed", keep_writer=True)
    with trio.CancelScope(shield=True):
        if graceful:
            await endpoint._flush()
        endpoint._close("closed")
        # Closing twice is harmless when both are one stream (trio's aclose is idempotent).
        await trio.aclose_forcefully(send_stream)
        await trio.aclose_forcefully(receive_stream)


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _reraise_alone(exc: BaseException) -> NoReturn:
    context = exc.__context__
    try:
        raise exc
    finally:
        # Raising inside ``except`` chained the group onto the error; keep its own context.
        exc.__context__ = context
