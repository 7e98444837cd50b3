"""``process.run``: run one command as a process tree and collect its output.

Contract:

- stdout and stderr are read concurrently and always to the end; each keeps at most
  ``max_output_bytes`` and discards the rest (``truncated``), so a chatty program is
  never blocked or killed by the cap.
- The main process's exit and the end of its pipes are separate events: after the
  exit (or the kill) output is drained for at most :data:`DRAIN_MS`, so a
  grandchild holding a pipe open never stretches the call.
- When the main process exits, the tree's leftovers are ended too; on timeout the
  whole tree is ended and the output read so far is kept; on cancellation the tree
  is ended (shielded, bounded) and ``trio.Cancelled`` propagates. Every end is the stop
  ladder (``_ladder.stop_ladder``, no polite step), and both pipes are read through it:
  what the program writes from its SIGTERM handler is kept (and passed to ``on_output``)
  on a timeout and on a cancellation alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
import select
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import trio

from protocol import MAX_OUTPUT_BYTES, CoreError, JSONObject

from ._ladder import (
    DRAIN_AFTER_EXIT_MS,
    KILL_WAIT_MS,
    MAX_DRAIN_MS,
    TERM_GRACE_MS,
    StopBounds,
    stop_ladder,
)
from ._reaper import reap_orphans as reap_orphans
from ._tree import DEVNULL, PIPE, ProcessTree, _open_tree

__all__ = (
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DRAIN_MS",
    "OutputCallback",
    "ProcessResult",
    "reap_orphans",
    "run_process",
)

#: Default per-stream output cap of a one-shot command, in bytes (16 MiB).
DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024
#: How long output is drained after the main process exits or is killed (ms).
DRAIN_MS = DRAIN_AFTER_EXIT_MS

_READ_CHUNK = 65536
#: Full reads of one pipe after which it is grown (see ``_Multiplexer._read``).
_FULL_READS_BEFORE_GROWING = 4
#: The size a flooded pipe is grown to, and read by, in bytes (Linux's default
#: ``/proc/sys/fs/pipe-max-size``, so no privilege is needed).
_GROWN_PIPE_BYTES = 1024 * 1024
#: ``fcntl`` command that sets a pipe's size (Linux).
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
#: Consecutive successful reads of one pipe between two scheduler passes.
_READS_PER_CHECKPOINT = 16

OutputCallback = Callable[[str, bytes], None]


@dataclass(frozen=True)
class ProcessResult:
    """The outcome of :func:`run_process` (the ``process.run`` result).

    Attributes:
        exit_code: The main process's exit status, or None when a signal ended it.
        signal: The number of the signal that ended it, or None.
        stdout: Kept stdout (at most ``max_output_bytes`` bytes), UTF-8 with
            replacement characters.
        stderr: Kept stderr, likewise.
        timed_out: True when the deadline passed and the tree was ended.
        truncated: True when either stream wrote more than ``max_output_bytes``.
        duration_ms: From spawn to the end of the call, in milliseconds.
    """

    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration_ms: int

    def to_wire(self) -> JSONObject:
        """The wire form: ``{exitCode, signal, stdout, stderr, timedOut, truncated,
        durationMs}``."""
        return {
            "exitCode": self.exit_code,
            "signal": self.signal,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timedOut": self.timed_out,
            "truncated": self.truncated,
            "durationMs": self.duration_ms,
        }


class _Capture:
    """One stream's kept bytes, capped; past the cap bytes are counted, not kept."""

    def __init__(self, name: str, cap: int, on_output: OutputCallback | None) -> None:
        self.name = name
        self.cap = cap
        self.kept = bytearray()
        self.total = 0
        self.on_output = on_output
        #: Bytes per read, and the reads that filled it (see ``_Multiplexer._read``).
        self.chunk = _READ_CHUNK
        self.full_reads = 0

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def feed(self, chunk: bytes | memoryview) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        if self.on_output is not None:
            self.on_output(self.name, chunk if type(chunk) is bytes else bytes(chunk))

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        if isinstance(stream, trio.lowlevel.FdStream):
            await self._pump_fd(stream)
            return
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            while True:
                chunk = await stream.receive_some(_READ_CHUNK)
                if not chunk:
                    return
                self.feed(bytes(chunk) if isinstance(chunk, bytearray) else chunk)

    async def _pump_fd(self, stream: trio.lowlevel.FdStream) -> None:
        """Read a pipe with ``os.read`` and ``wait_readable`` (cheaper than a stream).

        ``FdStream.receive_some`` yields before every read; here a pass through the
        scheduler happens only when the pipe is empty, or after a run of reads that found
        data (so a flooding child can not starve the other tasks). Only this task reads
        the pipe; its owner closes it (``ProcessTree.aclose``), which wakes this task with
        ``ClosedResourceError``.
        """
        fd = stream.fileno()
        busy = 0
        try:
            while True:
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    busy = 0
                    await trio.lowlevel.wait_readable(fd)
                    continue
                if not chunk:
                    return
                self.feed(chunk)
                busy += 1
                if busy >= _READS_PER_CHECKPOINT:
                    busy = 0
                    await trio.lowlevel.checkpoint()
        except (trio.ClosedResourceError, OSError):
            # Closed under us (the drain bound passed), or EBADF after that close.
            await trio.lowlevel.checkpoint_if_cancelled()

    def text(self) -> str:
        return self.kept.decode("utf-8", "replace")


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CoreError("invalid_request", f"{name} must be a positive integer")
    return value


def _non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CoreError("invalid_request", f"{name} must be a non-negative integer")
    return value


#: Characters of a text stdin encoded at a time (see :class:`_StdinFeed`).
_STDIN_TEXT_PIECE = 16384
_SURROGATE = re.compile("[\ud800-\udfff]")


class _StdinFeed:
    """What is left to write to a child's stdin.

    A text is encoded as UTF-8 a piece at a time as the child reads it, so a large text stdin
    (``process.run``'s, up to the frame limit) is never held a second time as bytes: the
    request that carries it is memory enough (README "Memory bounds").
    """

    __slots__ = ("_pending", "_pos", "_text")

    def __init__(self, data: bytes | bytearray | memoryview | str) -> None:
        if isinstance(data, str):
            self._text = data
            self._pending = memoryview(b"")
        else:
            self._text = ""
            self._pending = memoryview(data).cast("B")
        self._pos = 0

    def __bool__(self) -> bool:
        return bool(self._pending) or self._pos < len(self._text)

    def chunk(self, size: int) -> memoryview:
        """Up to ``size`` bytes of what is left (empty once everything was taken)."""
        if not self._pending and self._pos < len(self._text):
            piece = self._text[self._pos : self._pos + _STDIN_TEXT_PIECE]
            self._pos += len(piece)
            self._pending = memoryview(piece.encode())
        return self._pending[:size]

    def advance(self, written: int) -> None:
        """``written`` bytes of the last :meth:`chunk` reached the child."""
        self._pending = self._pending[written:]


async def _feed_stdin(stream: trio.abc.SendStream, data: _StdinFeed) -> None:
    # A child that exits without reading its input is not an error of the call.
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while data:
            chunk = data.chunk(_READ_CHUNK)
            await stream.send_all(chunk)
            data.advance(len(chunk))
        await stream.aclose()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str | None] | None = None,
    stdin: bytes | str | None = None,
    timeout_ms: int | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    on_output: OutputCallback | None = None,
    term_grace_ms: int = TERM_GRACE_MS,
) -> ProcessResult:
    """Run ``argv`` as a process tree, collect its output, and end the tree.

    Implements the ``process.run`` command.

    Args:
        argv: Program and arguments (no shell).
        cwd: Working directory; default: ours.
        env: Changes to our environment (None values remove a variable); the scope
            marker is always set.
        stdin: Bytes written to the child's stdin, which is then closed; a ``str`` is
            written as UTF-8 (encoded a piece at a time as the child reads, so a large text
            is not held twice); None means ``/dev/null``.
        timeout_ms: Deadline in milliseconds from the spawn; when it passes the
            tree is ended and ``timed_out`` is set. None: no deadline.
        max_output_bytes: Bytes kept per stream (default 16 MiB, at most
            :data:`protocol.MAX_OUTPUT_BYTES`, 64 MiB).
        on_output: Called synchronously as ``on_output(stream, chunk)`` with
            ``stream`` ``"stdout"`` or ``"stderr"`` for every chunk read, also past
            the cap. It must not block.
        term_grace_ms: Time between SIGTERM and SIGKILL when ending the tree, in
            milliseconds.

    Returns:
        A :class:`ProcessResult`.

    Raises:
        CoreError: ``invalid_request`` for bad argv, env, cwd, ``timeout_ms`` or
            ``max_output_bytes`` values; ``launch_failed`` when the executable or
            cwd is missing. Nothing is started in either case.

    **Cancellation:** the tree is ended by the stop ladder while its output is still read
    (shielded, bounded by ``term_grace_ms`` plus the kill wait and the drain) and
    ``trio.Cancelled`` propagates; no process is left.
    """
    cap = _positive_int("maxOutputBytes", max_output_bytes)
    if cap > MAX_OUTPUT_BYTES:
        raise CoreError(
            "invalid_request",
            f"maxOutputBytes must be at most {MAX_OUTPUT_BYTES}",
            {"field": "maxOutputBytes"},
        )
    if timeout_ms is not None:
        _positive_int("timeoutMilliseconds", timeout_ms)
    _non_negative_int("term_grace_ms", term_grace_ms)
    if stdin is not None and not isinstance(stdin, (bytes, bytearray, memoryview, str)):
        raise CoreError("invalid_request", "stdin must be bytes, str or None")
    if isinstance(stdin, str) and _SURROGATE.search(stdin) is not None:
        raise CoreError(
            "invalid_request", "stdin holds a lone surrogate (no UTF-8 form)", {"field": "stdin"}
        )

    # No polite step: a command is asked to stop by SIGTERM.
    bounds = StopBounds(
        polite_ms=0,
        term_grace_ms=term_grace_ms,
        kill_wait_ms=KILL_WAIT_MS,
        drain_ms=DRAIN_MS,
        max_drain_ms=MAX_DRAIN_MS,
    )
    started = trio.current_time()
    # The multiplexer's first wait is the scheduler pass the spawn owes the other tasks.
    tree = await _open_tree(
        argv, cwd=cwd, env=env, stdin=DEVNULL if stdin is None else PIPE, yield_after_spawn=False
    )
    mux: _Multiplexer | None = None
    try:
        out = _Capture("stdout", cap, on_output)
        err = _Capture("stderr", cap, on_output)
        mux = _Multiplexer.open(tree, out, err, stdin)
        if mux is not None:
            timed_out = await _supervise_mux(mux, timeout_ms, bounds)
        else:
            timed_out = await _supervise(tree, out, err, stdin, timeout_ms, bounds)
    finally:
        # The usual end: the tree has ended (``_supervise_mux``); only the pipes are left,
        # and closing them never blocks. When the call has been through the scheduler while
        # waiting, the scheduler pass is skipped; else it is the one pass left. Otherwise
        # this joins the ladder that ran (or runs it, after a failure before the
        # supervision).
        if mux is not None and tree._end_reported() and tree._close_pipes_nowait():
            if not mux.waited:
                await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await stop_ladder(tree, bounds)
    rc = tree.returncode
    return ProcessResult(
        exit_code=rc if rc is not None and rc >= 0 else None,
        signal=-rc if rc is not None and rc < 0 else None,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
        duration_ms=math.ceil((trio.current_time() - started) * 1000),
    )


async def _supervise(
    tree: ProcessTree,
    out: _Capture,
    err: _Capture,
    stdin: bytes | str | None,
    timeout_ms: int | None,
    bounds: StopBounds,
) -> bool:
    """Pump output while waiting for the exit or the deadline; end the tree by the stop
    ladder while still pumping (also when cancelled)."""
    # Shielded: the pumps read on while a cancelled call's tree ends; each is cancelled at
    # its drain deadline or when the ladder's drain is over (a scope is entered once).
    drains: list[trio.CancelScope] = []
    done: list[trio.Event] = []
    feeding = trio.CancelScope()

    async def pump(
        capture: _Capture, stream: trio.abc.ReceiveStream, scope: trio.CancelScope, end: trio.Event
    ) -> None:
        try:
            with scope:
                await capture.pump(stream)
        finally:
            end.set()

    def start_pump(
        nursery: trio.Nursery, capture: _Capture, stream: trio.abc.ReceiveStream
    ) -> None:
        # The scope exists before the task runs, so a deadline set early is not lost.
        scope = trio.CancelScope(shield=True)
        drains.append(scope)
        done.append(trio.Event())
        nursery.start_soon(pump, capture, stream, scope, done[-1])

    def set_drain_deadline(deadline: float) -> None:
        for scope in drains:
            scope.deadline = min(scope.deadline, deadline)

    async def drained() -> None:
        for end in done:
            await end.wait()

    async def feed() -> None:
        assert tree.stdin is not None
        with feeding:
            await _feed_stdin(tree.stdin, _StdinFeed(stdin or b""))

    async with trio.open_nursery() as nursery:
        if tree.stdout is not None:
            start_pump(nursery, out, tree.stdout)
        if tree.stderr is not None:
            start_pump(nursery, err, tree.stderr)
        if stdin is not None:
            nursery.start_soon(feed)
        timeout_s = math.inf if timeout_ms is None else timeout_ms / 1000
        try:
            with trio.move_on_after(timeout_s) as deadline:
                await tree.wait()
            if tree.exit_time is not None:
                # Invariant 10: the pipes get a bounded drain from the exit on.
                set_drain_deadline(tree.exit_time + bounds.drain_ms / 1000)
        finally:
            # Ends leftovers after a normal exit, or the whole tree on timeout or cancel.
            await stop_ladder(tree, bounds, drained=drained, progress=lambda: out.total + err.total)
            feeding.cancel()
            for scope in drains:
                scope.cancel()
    return deadline.cancelled_caught


# -- the one-task path: a private epoll over the pipes and the pidfd (fewer wakeups) -------
#
# One pump task per pipe plus a waiting task cost a nursery, cancel scopes and about six
# passes through the scheduler per command; for a short command that is a third of its
# time. Instead, the caller's task registers stdout, stderr, stdin (when fed) and the main
# process's pidfd with an epoll of its own and waits on that epoll's descriptor with
# ``trio.lowlevel.wait_readable``: one registration with Trio, one wake-up per burst of
# events. The behaviour is the task-based path's: both pipes read concurrently to the end,
# a bounded drain after the exit, leftovers ended as soon as the exit is seen.

_HAVE_EPOLL = hasattr(select, "epoll")
#: Passes through the epoll loop that found work before an explicit scheduler pass.
_BUSY_PASSES_PER_CHECKPOINT = 16
#: Bytes read in a row after which the loop passes through the scheduler anyway: what consumes
#: the output (a job's flusher, and through it flow control's pause) runs at least once per
#: MiB read, not once per 16 reads of up to a MiB each.
_BYTES_PER_CHECKPOINT = 1024 * 1024
#: How long, in all, the Trio thread may wait for a child's exit once one of its pipes
#: reached EOF (seconds; see ``_Multiplexer.run``).
_EXIT_AFTER_EOF_S = 0.0003


class _Multiplexer:
    """stdout, stderr, stdin and the exit of one tree, served from one task."""

    def __init__(
        self,
        tree: ProcessTree,
        pidfd: int,
        readers: dict[int, tuple[_Capture, trio.lowlevel.FdStream]],
        stdin_stream: trio.lowlevel.FdStream | None,
        stdin_data: bytes | str,
    ) -> None:
        self.tree = tree
        self.epoll = select.epoll()
        self.pidfd: int | None = pidfd
        self.readers = readers
        self.stdin = stdin_stream
        self.stdin_data = _StdinFeed(stdin_data)
        #: Whether :meth:`run` has passed through Trio's scheduler (a full checkpoint).
        self.waited = False
        self._spin_until: float | None = None
        #: The buffer a flooding stream is read into (see :meth:`_read`).
        self._scratch: bytearray | None = None
        #: Reading paused (flow control): a readiness polled before the pause is not served.
        self.paused = False
        #: Bytes read since the last pass through the scheduler (see :meth:`run`).
        self._read_since = 0
        self.epoll.register(pidfd, select.EPOLLIN)
        for fd in readers:
            self.epoll.register(fd, select.EPOLLIN)
        if stdin_stream is not None:
            if stdin_data:
                self.epoll.register(stdin_stream.fileno(), select.EPOLLOUT)
            else:
                self.stop_feeding()

    @classmethod
    def open(
        cls, tree: ProcessTree, out: _Capture, err: _Capture, stdin: bytes | str | None
    ) -> _Multiplexer | None:
        """The multiplexer for ``tree``, or None when it needs the task-based path."""
        pidfd = tree._exit_fd()
        streams = (tree.stdout, tree.stderr, tree.stdin)
        if not _HAVE_EPOLL or pidfd is None:
            return None
        if not all(s is None or isinstance(s, trio.lowlevel.FdStream) for s in streams):
            return None
        readers: dict[int, tuple[_Capture, trio.lowlevel.FdStream]] = {}
        for capture, stream in ((out, tree.stdout), (err, tree.stderr)):
            if isinstance(stream, trio.lowlevel.FdStream):
                readers[stream.fileno()] = (capture, stream)
        stdin_stream = tree.stdin if isinstance(tree.stdin, trio.lowlevel.FdStream) else None
        return cls(tree, pidfd, readers, stdin_stream, stdin or b"")

    def pause_reading(self) -> None:
        """Stop reading stdout and stderr (flow control: the kernel then holds the child's
        next write); the exit is still seen."""
        self.paused = True
        for fd in self.readers:
            with contextlib.suppress(OSError, ValueError):
                self.epoll.modify(fd, 0)

    def resume_reading(self) -> None:
        """Read stdout and stderr again after :meth:`pause_reading`."""
        self.paused = False
        for fd in self.readers:
            with contextlib.suppress(OSError, ValueError):
                self.epoll.modify(fd, select.EPOLLIN)

    def stop_feeding(self) -> None:
        """Close the child's stdin (all written, the child gone, or it stopped reading)."""
        if self.stdin is not None:
            with contextlib.suppress(OSError):
                self.epoll.unregister(self.stdin.fileno())
            self.stdin.close()
            self.stdin = None

    def close(self) -> None:
        """Release the epoll; the streams stay the tree's to close."""
        self._scratch = None
        if not self.epoll.closed:
            with contextlib.suppress(RuntimeError):
                trio.lowlevel.notify_closing(self.epoll.fileno())
            self.epoll.close()

    def _read(self, fd: int, capture: _Capture) -> bool:
        """Read once from ``fd`` into ``capture``; False at EOF.

        A stream that keeps the pipe full is read in larger pieces into one reused buffer:
        from its first full read on, no allocation per read; after
        :data:`_FULL_READS_BEFORE_GROWING` full reads its pipe is grown to
        :data:`_GROWN_PIPE_BYTES` (the child then writes that much before it waits for us)
        and read that much at a time. An output flood costs far fewer system calls and
        wake-ups; a short output is read as before.

        Raises:
            BlockingIOError: Nothing to read now.
        """
        if not capture.full_reads:
            chunk = os.read(fd, _READ_CHUNK)
            size = len(chunk)
            if size:
                capture.feed(chunk)
        else:
            scratch = self._scratch
            if scratch is None or len(scratch) < capture.chunk:
                scratch = self._scratch = bytearray(capture.chunk)
            with memoryview(scratch) as view:
                size = os.readv(fd, (view[: capture.chunk],))
                if size:
                    capture.feed(view[:size])
        self._read_since += size
        if size < capture.chunk:
            return size > 0
        capture.full_reads += 1
        if capture.full_reads == _FULL_READS_BEFORE_GROWING:
            try:
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _GROWN_PIPE_BYTES)
            except OSError:  # not a pipe, or above the system's limit: keep 64 KiB reads
                pass
            else:
                capture.chunk = _GROWN_PIPE_BYTES
        return True

    def _forget(self, fd: int) -> None:
        # The stop ladder, running beside a cancelled run's last reads, may have reaped the
        # child (closing its pidfd) or ended a pipe: its registration is gone with it
        # (EBADF/ENOENT), which is no failure of the run (seen as `internal` on a
        # cancelled process.run under serve --listen's chaos).
        with contextlib.suppress(OSError):
            self.epoll.unregister(fd)

    def _service(self, events: list[tuple[int, int]]) -> None:
        for fd, _ in events:
            reader = self.readers.get(fd)
            if reader is not None:
                if self.paused:
                    continue  # paused by what an earlier read of this batch fed
                try:
                    more = self._read(fd, reader[0])
                except BlockingIOError:
                    continue
                if not more:
                    self._forget(fd)
                    del self.readers[fd]
            elif fd == self.pidfd:
                # Unregister first: reading returncode reaps and closes the pidfd.
                self._forget(fd)
                self.pidfd = None
                self.tree.returncode  # noqa: B018  # reaps; records the exit time
            elif self.stdin is not None and fd == self.stdin.fileno():
                try:
                    written = os.write(fd, self.stdin_data.chunk(_READ_CHUNK))
                except BlockingIOError:
                    continue
                except OSError:
                    # A child that exits without reading its input is not an error.
                    self.stop_feeding()
                    continue
                self.stdin_data.advance(written)
                if not self.stdin_data:
                    self.stop_feeding()

    async def run(self, *, until_exit: bool) -> None:
        """Serve events until the main process exits (or, with ``until_exit`` False,
        until both pipes reached EOF).

        **Cancellation:** a checkpoint at least every few passes; cancelling leaves
        the pipes and the process to the caller.
        """
        busy = 0
        while True:
            events = self.epoll.poll(0)
            if events:
                readers = len(self.readers)
                self._service(events)
                if until_exit and self.pidfd is not None and len(self.readers) < readers:
                    # A pipe just reached EOF: an exiting child closes its descriptors one
                    # by one, tens of microseconds before the kernel reports the exit, and
                    # a trip through Trio's scheduler per event costs more than that (most
                    # runs of a short command took three wake-ups). So wait for the rest
                    # here, briefly: a child that closes its output and keeps running
                    # costs this once.
                    if self._spin_until is None:
                        self._spin_until = time.perf_counter() + _EXIT_AFTER_EOF_S
                    left = self._spin_until - time.perf_counter()
                    if left > 0:
                        select.select([self.pidfd, *self.readers], [], [], left)
                        continue
            if (self.pidfd is None) if until_exit else not self.readers:
                await trio.lowlevel.checkpoint_if_cancelled()
                return
            if events:
                # Level-triggered: whatever is left shows up in the next poll.
                busy += 1
                if busy >= _BUSY_PASSES_PER_CHECKPOINT or self._read_since >= _BYTES_PER_CHECKPOINT:
                    busy = 0
                    self._read_since = 0
                    await trio.lowlevel.checkpoint()
                    self.waited = True
                continue
            busy = 0
            self._read_since = 0
            # The epoll descriptor is readable as soon as a registered one has an event.
            await trio.lowlevel.wait_readable(self.epoll.fileno())
            self.waited = True

    def drain_nowait(self) -> None:
        """Read what is already there, without waiting (EOF is usually among it)."""
        for _ in range(_BUSY_PASSES_PER_CHECKPOINT):
            events = self.epoll.poll(0)
            if not events or not self.readers:
                return
            self._service(events)


async def _supervise_mux(mux: _Multiplexer, timeout_ms: int | None, bounds: StopBounds) -> bool:
    """:func:`_supervise` on one task; returns whether the deadline passed."""
    tree = mux.tree
    failed = True
    try:
        if timeout_ms is None:
            # No deadline, no cancel scope (entering one costs a few microseconds).
            await mux.run(until_exit=True)
            timed_out = False
        else:
            with trio.move_on_after(timeout_ms / 1000) as deadline:
                await mux.run(until_exit=True)
            timed_out = deadline.cancelled_caught
        mux.stop_feeding()
        mux.drain_nowait()
        failed = False
        if not mux.readers and not timed_out:
            # The common end: exited, pipes at EOF; only leftovers (if any) to end. The
            # caller closes the pipes without the ladder's extra scheduler pass.
            await stop_ladder(tree, bounds, close_pipes=False)
            return False
        # Something still holds a pipe open, or the deadline passed: end the tree while
        # draining, the drain bounded from the exit on: a grandchild
        # holding a pipe never stretches the deadline.
        await _end_reading(mux, bounds)
        return timed_out
    except trio.Cancelled:
        # Cancelled: the ladder still reads what the program says while it ends.
        failed = False
        await _end_reading(mux, bounds)
        raise
    finally:
        if failed:
            # Our own failure (not a cancellation): reading again could meet it again.
            await stop_ladder(tree, bounds, close_pipes=False)
        mux.close()


async def _end_reading(mux: _Multiplexer, bounds: StopBounds) -> None:
    """The stop ladder while the multiplexer reads on: after a natural exit the drain is
    bounded from the exit as well as from the tree's end."""
    tree = mux.tree
    drain = trio.CancelScope()
    if tree.exit_time is not None:
        drain.deadline = tree.exit_time + bounds.drain_ms / 1000

    async def drained() -> None:
        with drain:
            await mux.run(until_exit=False)

    captures = [capture for capture, _ in mux.readers.values()]
    await stop_ladder(
        tree,
        bounds,
        drained=drained,
        progress=lambda: sum(capture.total for capture in captures),
        close_pipes=False,
    )
