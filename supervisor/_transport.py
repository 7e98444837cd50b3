"""The byte loop of a framed peer: one transport for language servers, debug adapters,
plugin backends and serve's clients.

Strategy: a peer that speaks framed messages over two byte streams (the LSP base protocol's
``Content-Length`` framing, which JSON-RPC and DAP share) needs the same I/O whatever the
messages mean: a *reader* that pulls bytes and feeds them to a sans-I/O decoder
(:class:`protocol.JSONRPCConnection`, :class:`protocol.DAPConnection`), acting on the events
it gives back, and a single *writer* that takes every frame queued in a strictly-FIFO,
bounded write queue and writes them. :class:`FramedTransport` is that loop, written once;
what the events mean (routing replies, starting handlers, a debug adapter's events) is its
owner's: :class:`supervisor._endpoint.JSONRPCEndpoint` and
:class:`supervisor._dap._session.DebugSession`. So both kinds get the same bounds: the
decoder's frame-body and header limits and its stray-text tolerance (counted and logged, never
shown), the write queue's bounds in frames and bytes (flow control: a peer that does not read
makes writers wait, and nothing is ever taken for dead for being slow), the same end reasons
(``"eof"``, ``"closed"``, ``"protocol error: ..."``, ``"read failed: ..."``, ``"write
failed: ..."`` and, opt-in only, ``"write timeout"``) and the pipe fast paths below.

Pipes (``trio.lowlevel.FdStream``, what a child process gives us) are driven with
``os.read``/``os.write`` directly: the stream methods pass through the scheduler before every
call, which is two of the five passes a request/reply pair costs. A pass still happens
whenever the pipe is empty or full, and after a run of reads that all found data. Errors map
as in Trio: EBADF is ``ClosedResourceError``, any other ``OSError`` ``BrokenResourceError``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import sys
import termios
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio

from protocol import EOF, NEED_DATA, RemoteProtocolError, StrayText

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = (
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_PENDING_WRITES",
    "DEFAULT_MAX_WRITE_BYTES",
    "EndpointClosed",
    "FramedTransport",
)

logger = logging.getLogger("supervisor.endpoint")

#: Default bound of the write queue, in frames: a peer that stops reading costs bounded memory.
DEFAULT_MAX_PENDING_WRITES: Final = 256
#: Default bound of what is on its way to the peer, in bytes (16 MiB): frames queued, answers
#: waiting for room and room reserved by drains. A single larger frame is let through alone.
DEFAULT_MAX_WRITE_BYTES: Final = 16 * 1024 * 1024
#: Default frame-body limit, in bytes (64 MiB), so one frame can't exhaust memory: the
#: protocol decoders' own default, given explicitly by every owner so it is one number.
DEFAULT_MAX_BODY_BYTES: Final = 64 * 1024 * 1024
#: The most a single ``send_all`` is asked to move; an opt-in write timeout applies per
#: chunk, so a large frame to a slow but live reader is not mistaken for a dead one.
_WRITE_CHUNK_BYTES: Final = 64 * 1024
#: Past this many bytes taken at once, the writer writes frame by frame instead of joining.
_JOIN_BYTES: Final = 1024 * 1024
#: How much one read may return.
_READ_CHUNK_BYTES: Final = 64 * 1024
#: What one answer owed to the peer costs while it waits in the write queue's line with no
#: task holding it, besides its frame (its place in the line), in bytes: counted against the
#: owed budget (``max_bytes``) with the frame, so the budget bounds memory however small the
#: answers (see ``_WriteQueue.put_owed``).
_OWED_OVERHEAD_BYTES: Final = 128
#: Reads of a pipe that found data before the reader passes through the scheduler anyway.
_READS_PER_PASS: Final = 16


def _unread_in_pipe(fd: int) -> int:
    """Bytes written to the pipe ``fd`` and not yet read from its other end; 0 when the
    system can't say (``FIONREAD`` on a pipe's write end is Linux's)."""
    try:
        raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int.from_bytes(raw, sys.byteorder, signed=True)


def _pipe_fd(stream: object) -> int | None:
    """The descriptor behind a pipe stream, or None for any other stream."""
    return stream.fileno() if isinstance(stream, trio.lowlevel.FdStream) else None


def _os_error_text(exc: trio.BrokenResourceError | trio.ClosedResourceError) -> str:
    # What the system said (``BrokenPipeError: [Errno 32] Broken pipe``), as a read failure
    # says it: Trio's wrapper class is ours, not the peer's (issue 28: log lines name our
    # concepts, not internal exceptions).
    cause = exc.__cause__
    if not str(exc) and isinstance(cause, OSError):
        return f"{type(cause).__name__}: {cause}"
    return str(exc) or type(exc).__name__


def _stream_error(exc: OSError) -> trio.ClosedResourceError | trio.BrokenResourceError:
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("file was already closed")
    return trio.BrokenResourceError(f"{type(exc).__name__}: {exc}")


class EndpointClosed(Exception):
    """The endpoint is closed, so the request can not complete.

    Raised by :meth:`JSONRPCEndpoint.request` for every request pending when the transport
    ended, and by ``request``/``notify`` after that.

    Args:
        reason: Why the endpoint closed: ``"eof"``, ``"closed"`` (our side left the context
            manager, or closed the stream it reads), ``"protocol error: ..."``, ``"read failed:
            ..."``, ``"write failed: ..."``, or ``"write timeout"`` (only with an opt-in
            ``write_timeout_ms``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Waiter:
    """A producer waiting for room in the write queue, with its frame; or an answer owed to
    the peer that waits in the line with no task holding it (``owed``, see
    :meth:`_WriteQueue.put_owed`)."""

    __slots__ = ("event", "frame", "owed", "queued", "written")

    def __init__(self, frame: bytes, written: trio.Event | None, *, owed: bool = False) -> None:
        self.frame = frame
        self.written = written
        self.owed = owed
        self.queued = False
        # Nobody waits for an owed answer: no event to make.
        self.event: trio.Event | None = None if owed else trio.Event()


class _WriteQueue:
    """A FIFO of encoded frames between producers and the single writer task, bounded in
    frames and in bytes.

    Producers wait while ``limit`` frames, or ``max_bytes`` bytes, are queued or being
    written (a frame larger than ``max_bytes`` waits until the queue is empty, then goes
    alone); ``put_urgent`` skips the bounds for the few frames that must be queued from a
    cancelled context (``$/cancelRequest``), whose number is bounded by the requests that
    were pending.

    Strictly first in, first out, waiting producers included (docs/architecture.md "The order
    rule": a session's messages reach its peer in the order they were handed over): a
    producer that has to wait leaves its frame in a line, and the writer moves waiting frames
    into the queue in that order as it makes room; nothing queued later, and no direct
    write, goes ahead of a waiting frame.

    Besides the frames it counts what is on its way to them (:attr:`outbound`, flow control):
    frames waiting in the line, and bytes reserved by :meth:`reserve` for events a drain is
    about to put into an answer (:class:`_AnswerRoom`). That total is what the reader and the
    drains wait on: nothing new is taken on while the peer does not read.
    """

    def __init__(self, limit: int, max_bytes: int = DEFAULT_MAX_WRITE_BYTES) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.frames: deque[tuple[bytes, trio.Event | None]] = deque()
        #: Bytes of the queued frames, including those the writer took and is writing.
        self.bytes = 0
        #: Of those, the bytes the writer took and has not finished writing.
        self.writing = 0
        #: Producers waiting for room, first come first, and the bytes of their frames.
        self.waiting: deque[_Waiter] = deque()
        self.waiting_bytes = 0
        #: Bytes reserved for answers being made (see :meth:`reserve`).
        self.reserved = 0
        #: Of the line, the answers owed to the peer that wait with no task: their cost in
        #: bytes (each frame and its place in the line) and their number (see
        #: :meth:`put_owed`).
        self.owed_waiting = 0
        self.owed_frames = 0
        self.closed_reason: str | None = None
        #: True while the writer waits for frames (nothing is being written).
        self.writer_parked = False
        self._not_empty = trio.lowlevel.ParkingLot()
        #: Woken whenever room may have appeared (the reader's and the drains' waits).
        self._room = trio.lowlevel.ParkingLot()

    @property
    def outbound(self) -> int:
        """Bytes on their way to the peer: queued or being written, waiting, reserved."""
        return self.bytes + self.waiting_bytes + self.reserved

    def _fits(self, size: int) -> bool:
        return len(self.frames) < self.limit and (
            self.bytes == 0 or self.bytes + size <= self.max_bytes
        )

    def _append(self, frame: bytes, written: trio.Event | None) -> None:
        self.frames.append((frame, written))
        self.bytes += len(frame)
        if self._not_empty:  # only the writer parks there: a burst wakes it once
            self._not_empty.unpark_all()

    async def put(self, frame: bytes, written: trio.Event | None = None) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.closed_reason is not None:
            raise EndpointClosed(self.closed_reason)
        if not self.waiting and self._fits(len(frame)):
            self._append(frame, written)
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        waiter = _Waiter(frame, written)
        self.waiting.append(waiter)
        self.waiting_bytes += len(frame)
        assert waiter.event is not None
        try:
            await waiter.event.wait()
        except trio.Cancelled:
            if not waiter.queued:
                # Cancelled while it waited: never sent, and the line goes on without it.
                with contextlib.suppress(ValueError):
                    self.waiting.remove(waiter)
                    self.waiting_bytes -= len(frame)
                    self._room.unpark_all()
                raise
            # Already queued (it will be written): as after an append, the cancellation is
            # delivered at the caller's next checkpoint.
            return
        if not waiter.queued:
            raise EndpointClosed(self._reason())

    def _reason(self) -> str:
        return self.closed_reason or "closed"

    def _admit_waiting(self) -> None:
        """Room again: the waiting frames come next, in the order they waited."""
        while self.waiting and self._fits(len(self.waiting[0].frame)):
            waiter = self.waiting.popleft()
            self.waiting_bytes -= len(waiter.frame)
            if waiter.owed:
                self.owed_waiting -= len(waiter.frame) + _OWED_OVERHEAD_BYTES
                self.owed_frames -= 1
            waiter.queued = True
            self._append(waiter.frame, waiter.written)
            if waiter.event is not None:
                waiter.event.set()

    def put_nowait(self, frame: bytes) -> bool:
        """Queue ``frame`` if there is room, nobody waits before it and the queue is open;
        say whether it did."""
        if self.waiting or not self._fits(len(frame)) or self.closed_reason is not None:
            return False
        self._append(frame, None)
        return True

    def put_owed(self, frame: bytes) -> bool:
        """Queue an answer owed to the peer without waiting, if the owed budget allows; say
        whether it did (if not, the caller waits in :meth:`put`).

        Into the queue when it fits and nobody waits; else into the line, in its turn,
        held by no task, while the answers waiting there stay within the owed budget of
        ``max_bytes`` bytes (each counted with :data:`_OWED_OVERHEAD_BYTES` for its place).
        In bytes only: the answers owed pile up behind our own frames for as long as those
        wait (a slow reader that asks us something about each of thousands of pipelined
        requests), and a bound in frames met that long before any in memory.
        The reader never waits behind our own frames for what it owes: a peer that blocks
        writing to us stops reading what we write, so a reader that waited for our frames
        to move would wait for ever (the mutual block; docs/architecture.md "Flow control").
        """
        if self.put_nowait(frame):
            return True
        if self.closed_reason is not None:
            return False
        size = len(frame)
        cost = size + _OWED_OVERHEAD_BYTES
        if self.owed_frames and self.owed_waiting + cost > self.max_bytes:
            return False
        self.waiting.append(_Waiter(frame, None, owed=True))
        self.waiting_bytes += size
        self.owed_waiting += cost
        self.owed_frames += 1
        return True

    async def wait_owed_room(self) -> None:
        """Wait until the answers owed to the peer (waiting in the line, or being made
        with room reserved) total less than ``max_bytes`` (or the queue closed).

        What the reader waits on before it admits a request: what we owe the peer, not what
        we send it (our own requests waiting for room never stop the reader).

        **Cancellation:** safe to cancel.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while self.closed_reason is None and self.owed_waiting + self.reserved >= self.max_bytes:
            await self._room.park()

    def put_urgent(self, frame: bytes) -> None:
        if self.closed_reason is None:
            self._append(frame, None)

    def reserve_nowait(self, wanted: int) -> int:
        """Reserve up to ``wanted`` bytes of the room left; all of it when nothing is on its
        way (a lone large answer always goes), 0 when there is no room."""
        outbound = self.outbound
        if outbound == 0 or self.closed_reason is not None:
            # Nothing else on its way (a lone large answer goes), or nothing will be written.
            grant = wanted
        else:
            grant = min(wanted, self.max_bytes - outbound)
        if grant <= 0:
            return 0
        self.reserved += grant
        return grant

    async def reserve(self, wanted: int) -> int:
        """:meth:`reserve_nowait`, waiting until it grants something (at least 1 byte)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            grant = self.reserve_nowait(max(wanted, 1))
            if grant:
                return grant
            await self._room.park()

    def release(self, size: int) -> None:
        """Give back ``size`` reserved bytes (their answer is queued now, or not coming)."""
        if size:
            self.reserved -= size
            self._room.unpark_all()

    async def get_all(self) -> list[tuple[bytes, trio.Event | None]]:
        while not self.frames:
            if self.closed_reason is not None:
                return []
            self.writer_parked = True
            try:
                await self._not_empty.park()
            finally:
                self.writer_parked = False
        items = list(self.frames)
        self.frames.clear()
        # Still counted until written (:meth:`written`): what the writer holds is memory too.
        self.writing = self.bytes
        self._admit_waiting()
        return items

    def room_made(self) -> None:
        """Queued frames were written by a producer (:meth:`FramedTransport.write_queued_now`)."""
        self._room.unpark_all()

    def written(self) -> None:
        """The writer finished writing what :meth:`get_all` gave it."""
        self.bytes -= self.writing
        self.writing = 0
        self._admit_waiting()
        self._room.unpark_all()

    def close(self, reason: str) -> None:
        if self.closed_reason is None:
            self.closed_reason = reason
        waiting, self.waiting = self.waiting, deque()
        self.waiting_bytes = 0
        self.owed_waiting = 0
        self.owed_frames = 0
        for waiter in waiting:
            if waiter.event is not None:
                waiter.event.set()  # not queued: it raises EndpointClosed
        self._room.unpark_all()
        self._not_empty.unpark_all()


class FrameDecoder(Protocol):
    """What the reader drives: a sans-I/O connection (:class:`protocol.JSONRPCConnection`,
    :class:`protocol.DAPConnection`)."""

    def receive_data(self, data: bytes | bytearray) -> None: ...

    def receive_eof(self) -> None: ...

    def next_event(self) -> Any: ...


class FramedTransport:
    """The byte loop of one framed peer: a reader feeding a sans-I/O decoder and a single
    writer draining a bounded FIFO write queue (see the module docstring).

    Its owner starts :meth:`write_loop` and :meth:`read_loop` in its nursery and acts on
    what they report; it queues frames with ``queue.put`` (waits for room), ``put_nowait``
    or :meth:`write_now` (the fast path when the writer has nothing to do).

    Args:
        send_stream: Where frames are written.
        receive_stream: Where frames are read from (may be the same object, a socket).
        name: The peer's name, for log messages.
        max_pending_writes: Frames the write queue holds before writers wait.
        max_write_bytes: Bytes on their way to the peer before writers wait (a single larger
            frame goes alone).
        write_timeout_ms: None (the default): flow control only, a write waits for the peer
            as long as the peer is there. A number of milliseconds opts in to ending the
            transport (``"write timeout"``) when a write of up to 64 KiB makes no progress
            for that long.
        before_write: Called by the writer before each write (a fault-injection point of
            its owner, :func:`supervisor._boundary.fault_point`), or None.
        queue: A write queue made before the streams were known (frames queued in it
            go out first), or None for a new one of the bounds above.

    Attributes:
        queue: The write queue (strictly first in, first out; bounded in frames and bytes).
        send_fd: The descriptor behind ``send_stream`` when it is a pipe, else None.
        writer_scope: The writer's cancel scope: cancelling it stops the writer at once.
        writer_done: Set once the writer has stopped.
        frames_written: Frames written (flush markers not counted).
        flush_markers: Empty flush markers queued and not yet taken by the writer.
        writes: System calls (or ``send_all`` calls) the writer made.
        frames_read: Frames the reader decoded and handed on.
        chunks_read: Reads that returned (data or the end of input): the stop ladder's drain
            goes on while this grows.
    """

    def __init__(
        self,
        send_stream: trio.abc.SendStream,
        receive_stream: trio.abc.ReceiveStream,
        *,
        name: str,
        max_pending_writes: int = DEFAULT_MAX_PENDING_WRITES,
        max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES,
        write_timeout_ms: float | None = None,
        before_write: Callable[[], None] | None = None,
        queue: _WriteQueue | None = None,
    ) -> None:
        self.name = name
        self.send_stream = send_stream
        self.receive_stream = receive_stream
        self.queue = _WriteQueue(max_pending_writes, max_write_bytes) if queue is None else queue
        self.write_timeout_s = None if write_timeout_ms is None else write_timeout_ms / 1000
        self.send_fd = _pipe_fd(send_stream)
        self.receive_fd = _pipe_fd(receive_stream)
        self.writer_scope = trio.CancelScope()
        self.writer_done = trio.Event()
        self.frames_written = 0
        self.flush_markers = 0
        self.writes = 0
        self.frames_read = 0
        self.chunks_read = 0
        self._reads_without_pass = 0
        self._before_write = before_write

    # -- writing -------------------------------------------------------------------------

    async def write_loop(self, on_failed: Callable[[str], None]) -> None:
        """The writer: the only task that writes to ``send_stream``, until the queue closes.

        Takes every frame queued, joins small ones into one write (a burst costs one system
        call) and sets each frame's ``written`` event once it is written. Returns once the
        queue is closed and what was queued before has been written, or once a write failed
        (``on_failed("write failed: ...")``) or, with an opt-in timeout, made no progress
        (``on_failed("write timeout")``); ``writer_done`` is set either way.

        **Cancellation:** ``writer_scope`` (or any outer scope) stops it at once; frames
        still queued are not written.
        """
        # One cancel scope for the life of the writer whose deadline is armed around each
        # send: a fresh fail_after() per write would cost more than the write.
        queue = self.queue
        with self.writer_scope, trio.CancelScope() as deadline:
            try:
                while True:
                    items = await queue.get_all()
                    if not items:
                        return
                    if self._before_write is not None:
                        self._before_write()
                    if len(items) == 1 or queue.writing > _JOIN_BYTES:
                        # Large frames go one by one: joining them would copy them all.
                        for frame, _ in items:
                            if frame:  # empty: a flush marker
                                await self._send(frame, deadline)
                    else:
                        data = b"".join([frame for frame, _ in items])
                        if data:  # empty when only flush markers were queued
                            await self._send(data, deadline)
                    queue.written()
                    frames = len(items)
                    if self.flush_markers:
                        frames = sum(1 for frame, _ in items if frame)
                        self.flush_markers -= len(items) - frames
                    self.frames_written += frames
                    for _, written in items:
                        if written is not None:
                            written.set()
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                on_failed(f"write failed: {_os_error_text(exc)}")
            finally:
                self.writer_done.set()
        if deadline.cancelled_caught:
            on_failed("write timeout")

    def write_now(self, frame: bytes) -> bool:
        """Write ``frame`` from the caller's task when the writer has nothing to do.

        With the writer parked on an empty queue nothing else can be writing, so the frame
        goes out with one non-blocking ``os.write`` and the hop to the writer task is saved,
        a scheduler pass per message. Whatever the pipe does not take at once goes to the
        front of the queue, for the writer; any error is left to the writer too (the frame
        is then queued normally). Returns whether the frame was taken (written or queued).
        """
        fd = self.send_fd
        queue = self.queue
        if (
            fd is None
            or not queue.writer_parked
            or queue.frames
            or queue.waiting
            or queue.closed_reason
        ):
            return False
        try:
            written = os.write(fd, frame)
        except BlockingIOError:
            written = 0
        except OSError:
            return False
        if written == len(frame):
            self.writes += 1
            self.frames_written += 1
            return True
        queue.put_urgent(frame[written:])
        return True

    def write_queued_now(self) -> None:
        """Write what is queued from the caller's task, while the writer has not taken it.

        For a burst of producers that run before the writer does (callers woken by one
        read): writing every few frames at once lets the peer work on them while the rest
        of the burst is made, where one write at the end kept the peer idle until then.
        Only while the writer is parked (or woken and not yet run: it then finds the queue
        empty and parks again), nothing waits for room, and no queued frame has a
        ``written`` event or is a flush marker; otherwise it leaves everything to the
        writer. What the pipe does not take stays at the front of the queue; any error is
        left to the writer.
        """
        fd = self.send_fd
        queue = self.queue
        frames = queue.frames
        if (
            fd is None
            or not frames
            or not queue.writer_parked
            or queue.waiting
            or queue.closed_reason
            or self.flush_markers
            or any(written is not None for _, written in frames)
        ):
            return
        data = b"".join([frame for frame, _ in frames])
        try:
            written = os.write(fd, data)
        except OSError:  # a full pipe (nothing written) or an error: the writer's to handle
            return
        count = len(frames)
        frames.clear()
        queue.bytes -= len(data)
        self.writes += 1
        if written == len(data):
            self.frames_written += count
        else:
            # The rest (the frame the pipe cut, and those after it) goes first, as one.
            self.frames_written += count - 1
            queue.put_urgent(data[written:])
        queue.room_made()

    async def _send(self, data: bytes, deadline: trio.CancelScope) -> None:
        send_all = self._send_all_fd if self.send_fd is not None else self.send_stream.send_all
        timeout = self.write_timeout_s
        if timeout is None:
            # Flow control: a write waits for the peer as long as the peer is there.
            self.writes += 1
            await send_all(data)
            return
        if len(data) <= _WRITE_CHUNK_BYTES:
            self.writes += 1
            deadline.deadline = trio.current_time() + timeout
            await send_all(data)
            deadline.deadline = math.inf
            return
        view = memoryview(data)
        for start in range(0, len(view), _WRITE_CHUNK_BYTES):
            self.writes += 1
            deadline.deadline = trio.current_time() + timeout
            await send_all(view[start : start + _WRITE_CHUNK_BYTES])
        deadline.deadline = math.inf

    async def _send_all_fd(self, data: bytes | memoryview) -> None:
        assert self.send_fd is not None
        with memoryview(data) as view:
            sent = 0
            while sent < len(view):
                try:
                    sent += os.write(self.send_fd, view[sent:])
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(self.send_fd)
                except OSError as exc:
                    raise _stream_error(exc) from None
        await trio.lowlevel.checkpoint_if_cancelled()

    def unread_by_peer(self) -> int:
        """Bytes written to the pipe and not yet read by the peer; 0 when that can't be
        known (not a pipe, or the system can't say)."""
        return 0 if self.send_fd is None else _unread_in_pipe(self.send_fd)

    # -- reading -------------------------------------------------------------------------

    async def receive(self) -> bytes | bytearray:
        """Read what the peer sent (at most 64 KiB); empty at the end of input.

        Raises:
            trio.ClosedResourceError: Our side closed the stream.
            trio.BrokenResourceError: The read failed.
        """
        fd = self.receive_fd
        if fd is None:
            return await self.receive_stream.receive_some(_READ_CHUNK_BYTES)
        if self._reads_without_pass >= _READS_PER_PASS:
            self._reads_without_pass = 0
            await trio.lowlevel.checkpoint()
        while True:
            try:
                data = os.read(fd, _READ_CHUNK_BYTES)
            except BlockingIOError:
                self._reads_without_pass = 0
                await trio.lowlevel.wait_readable(fd)
                continue
            except OSError as exc:
                raise _stream_error(exc) from None
            self._reads_without_pass += 1
            await trio.lowlevel.checkpoint_if_cancelled()
            return data

    async def read_loop(
        self, conn: FrameDecoder, dispatch: Callable[[Any], Awaitable[None] | None]
    ) -> str:
        """The reader: feed ``conn`` until the input ends; hand each message to ``dispatch``.

        ``dispatch(event)`` is called in arrival order for every event that is neither
        "need data", the end of input nor stray text; it either handles the event at once
        (returns None: the hot path, no coroutine) or returns an awaitable the reader awaits
        before it reads on (which is backpressure on the peer). Stray text between frames is
        logged with its byte count only (it may hold anything, secrets included).

        Returns:
            Why the input ended: ``"eof"``, ``"closed"`` (our side closed the stream),
            ``"protocol error: ..."`` (a broken frame header, a frame over the limit) or
            ``"read failed: ..."``.
        """
        while True:
            try:
                event = conn.next_event()
            except RemoteProtocolError as exc:
                return f"protocol error: {exc}"
            if event is NEED_DATA:
                try:
                    data = await self.receive()
                except trio.ClosedResourceError:
                    # Our own side closed the stream (its owner ended it): the end of a
                    # conversation, not a failure of the peer.
                    return "closed"
                except trio.BrokenResourceError as exc:
                    return f"read failed: {exc}"
                self.chunks_read += 1
                if data:
                    conn.receive_data(data)
                else:
                    conn.receive_eof()
            elif event is EOF:
                return "eof"
            elif event.__class__ is StrayText:
                logger.warning(
                    "%s: skipped %d bytes of stray text between frames", self.name, event.byte_count
                )
            else:
                self.frames_read += 1
                pending = dispatch(event)
                if pending is not None:
                    await pending
