"""``process.run``'s reading side without Trio: the captures, the stdin feed, the multiplexer.

What one command's pipes and exit need -- both pipes read concurrently to the end, each
capture capped (the rest counted, not kept), a text stdin encoded a piece at a time as the
child reads, the exit seen on a pidfd -- is served here by one epoll and plain system calls.
``_oneshot`` drives it from a Trio task (it waits on the epoll's descriptor); ``_direct`` drives
it from ``supervisor exec`` without an event loop, for the common path of a short command.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from ._spawn import _notify_closing

if TYPE_CHECKING:
    from protocol import JSONObject

__all__ = (
    "BUSY",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DONE",
    "IDLE",
    "MAX_OUTPUT_ANSWER_BYTES",
    "SPUN",
    "Capture",
    "Multiplexer",
    "OutputCallback",
    "ProcessResult",
    "StdinFeed",
)

#: The most bytes ``stdout`` and ``stderr`` of a ``process.run`` answer take together once
#: encoded as JSON: the frame-body limit (64 MiB) less 64 KiB for the rest of the answer.
#: Output is kept as bytes but sent as JSON text, where a control character takes six bytes
#: (``\u0000``) and an invalid byte three (U+FFFD), so 16 MiB of NUL bytes would make a
#: 96 MiB frame; past this bound each stream keeps the head that fits its fair share, and
#: ``truncated`` is true.
MAX_OUTPUT_ANSWER_BYTES: Final = 64 * 1024 * 1024 - 64 * 1024

#: Default per-stream output cap of a one-shot command, in bytes (16 MiB).
DEFAULT_MAX_OUTPUT_BYTES: Final = 16 * 1024 * 1024

_READ_CHUNK = 65536
#: Full reads of one pipe after which it is grown (see ``_Multiplexer._read``).
_FULL_READS_BEFORE_GROWING = 4
#: The size a flooded pipe is grown to, and read by, in bytes (Linux's default
#: ``/proc/sys/fs/pipe-max-size``, so no privilege is needed).
_GROWN_PIPE_BYTES = 1024 * 1024
#: ``fcntl`` command that sets a pipe's size (Linux).
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

#: ``splice`` flag: do not block on the pipe (Linux; Python 3.10+ names it).
_SPLICE_F_NONBLOCK = getattr(os, "SPLICE_F_NONBLOCK", 2)
#: /dev/null opened for writing (see :func:`_discard_sink`); -1 where it can not be used.
_sink_fd: list[int] = []

OutputCallback = Callable[[str, bytes], None]


def _discard_sink() -> int | None:
    """A descriptor that ``splice`` can move unwanted pipe bytes into (/dev/null, opened once
    per process, close-on-exec), or None where ``splice`` is missing."""
    if not _sink_fd:
        fd = -1
        if hasattr(os, "splice"):
            with contextlib.suppress(OSError):
                fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        _sink_fd.append(fd)
    fd = _sink_fd[0]
    return fd if fd >= 0 else None


@dataclass(frozen=True)
class ProcessResult:
    """The outcome of ``_oneshot.run_process`` (the ``process.run`` result).

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

    def answer(self, limit: int = 0) -> JSONObject:
        """The ``process.run`` answer: :meth:`to_wire`, with stdout and stderr cut to take
        at most ``limit`` bytes together as JSON (default :data:`MAX_OUTPUT_ANSWER_BYTES`;
        ``truncated`` is then true)."""
        limit = limit or MAX_OUTPUT_ANSWER_BYTES
        wire = self.to_wire()
        # A character takes at most 6 bytes as JSON (``\u0000``): below that bound nothing
        # can be cut, and the JSON layer is not even imported (``supervisor exec`` starts
        # without it).
        if (len(self.stdout) + len(self.stderr)) * 6 + 4 > limit:
            from protocol._json import fit_texts

            (wire["stdout"], wire["stderr"]), cut = fit_texts([self.stdout, self.stderr], limit)
            if cut:
                wire["truncated"] = True
        return wire

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


class Capture:
    """One stream's kept bytes, capped; past the cap bytes are counted, not kept."""

    def __init__(self, name: str, cap: int, on_output: OutputCallback | None) -> None:
        self.name = name
        self.cap = cap
        self.kept = bytearray()
        self.total = 0
        self.on_output = on_output
        #: Bytes per read, and the reads that filled it (see ``Multiplexer._read``).
        self.chunk = _READ_CHUNK
        self.full_reads = 0
        #: The cap is reached and nobody takes the output: what comes is only counted.
        self.discarding = cap <= 0 and on_output is None

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def feed(self, chunk: bytes | memoryview) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
            if len(chunk) >= room and self.on_output is None:
                self.discarding = True
        if self.on_output is not None:
            self.on_output(self.name, chunk if type(chunk) is bytes else bytes(chunk))

    def text(self) -> str:
        return self.kept.decode("utf-8", "replace")


#: Characters of a text stdin encoded at a time (see :class:`StdinFeed`).
_STDIN_TEXT_PIECE = 16384
_SURROGATE = re.compile("[\ud800-\udfff]")


class StdinFeed:
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


class _Exits(Protocol):
    """The child's owner, as the multiplexer sees it (see :class:`Multiplexer`)."""

    @property
    def returncode(self) -> int | None: ...


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

#: What :meth:`Multiplexer.step` found.
DONE: Final = 0
SPUN: Final = 1
BUSY: Final = 2
IDLE: Final = 3


class Multiplexer:
    """stdout, stderr, stdin and the exit of one child, served from one epoll.

    The event loop's side (``_oneshot._Multiplexer.run``) and the side without one
    (:meth:`run_blocking`, ``supervisor exec``'s common path) make the same passes
    (:meth:`step`); only how they wait between two passes differs.

    Args:
        exits: The child's owner: reading its ``returncode`` reaps the child (a
            ``ProcessTree``, which also records the exit time, or the ``SpawnedProcess``).
        pidfd: The child's pidfd, readable at its exit; None once it was reaped.
        readers: Our ends of its stdout and stderr, each with its capture.
        stdin_fd: Our end of its stdin when it is fed, else None.
        stdin_data: What to feed it (a feed already under way continues).
        close_stdin: Closes ``stdin_fd`` (the stream that owns it, if any).
        epoll: An empty epoll to serve them from (``_oneshot``'s pool), else a new one.
    """

    def __init__(
        self,
        exits: _Exits,
        pidfd: int | None,
        readers: dict[int, Capture],
        stdin_fd: int | None,
        stdin_data: bytes | str | StdinFeed,
        close_stdin: Callable[[], None] | None = None,
        epoll: select.epoll | None = None,
    ) -> None:
        self.exits = exits
        self.epoll = select.epoll() if epoll is None else epoll
        #: The descriptors registered with the epoll and not unregistered since: when none is
        #: left, the epoll is as empty as a new one (see :meth:`reusable`).
        self._interest: set[int] = set()
        self.pidfd: int | None = pidfd
        self.readers = readers
        self.stdin_fd = stdin_fd
        self._close_stdin = close_stdin
        self.stdin_data = stdin_data if isinstance(stdin_data, StdinFeed) else StdinFeed(stdin_data)
        #: Whether :meth:`run` has passed through Trio's scheduler (a full checkpoint).
        self.waited = False
        self._spin_until: float | None = None
        #: The buffer a flooding stream is read into (see :meth:`_read`).
        self._scratch: bytearray | None = None
        #: Reading paused (flow control): a readiness polled before the pause is not served.
        self.paused = False
        #: Bytes read since the last pass through the scheduler (see :meth:`run`).
        self._read_since = 0
        if pidfd is not None:
            self._register(pidfd, select.EPOLLIN)
        for fd in readers:
            self._register(fd, select.EPOLLIN)
        if stdin_fd is not None:
            if self.stdin_data:
                self._register(stdin_fd, select.EPOLLOUT)
            else:
                self.stop_feeding()

    def _register(self, fd: int, events: int) -> None:
        self.epoll.register(fd, events)
        self._interest.add(fd)

    def reusable(self) -> bool:
        """Whether every descriptor ever registered was unregistered without error, so the
        epoll holds no registration (a new multiplexer may take it over).

        A registration whose removal failed (its descriptor closed first) may outlive the
        close while another process still holds the open file (a fork in flight), and would
        report events under a number the next user may give to another descriptor.
        """
        return not self._interest and not self.epoll.closed

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
        fd, self.stdin_fd = self.stdin_fd, None
        if fd is not None:
            self._forget(fd)
            if self._close_stdin is not None:
                self._close_stdin()
            else:
                os.close(fd)

    def close(self) -> None:
        """Release the epoll; the streams stay the tree's to close."""
        self._scratch = None
        if not self.epoll.closed:
            _notify_closing(self.epoll.fileno())
            self.epoll.close()

    def _read(self, fd: int, capture: Capture) -> bool:
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
        if capture.discarding and (sink := _discard_sink()) is not None:
            # Past the cap, with nobody taking the output, its bytes are only counted: they
            # go to /dev/null inside the kernel instead of being copied to us first (a 1 GB
            # flood: 0.74 s -> 0.39 s of wall time, the reader's CPU halved).
            try:
                size = os.splice(fd, sink, capture.chunk, flags=_SPLICE_F_NONBLOCK)
            except BlockingIOError:
                raise
            except OSError:  # not a pipe (EINVAL): read it as before
                capture.discarding = False
                return self._read(fd, capture)
            capture.total += size
        elif not capture.full_reads:
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
        if fd not in self._interest:
            return
        with contextlib.suppress(OSError, ValueError):
            self.epoll.unregister(fd)
            self._interest.discard(fd)

    def _service(self, events: list[tuple[int, int]]) -> None:
        for fd, _ in events:
            reader = self.readers.get(fd)
            if reader is not None:
                if self.paused:
                    continue  # paused by what an earlier read of this batch fed
                try:
                    more = self._read(fd, reader)
                except BlockingIOError:
                    continue
                if not more:
                    self._forget(fd)
                    del self.readers[fd]
            elif fd == self.pidfd:
                # Unregister first: reading returncode reaps and closes the pidfd.
                self._forget(fd)
                self.pidfd = None
                self.exits.returncode  # noqa: B018  # reaps (a tree records the exit time)
            elif fd == self.stdin_fd:
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

    def step(self, *, until_exit: bool) -> int:
        """Serve what is ready now, without waiting: one pass of the loop.

        Returns:
            :data:`DONE` when the main process has exited (``until_exit``) or both pipes
            reached EOF; :data:`SPUN` after a brief wait for an exit that a pipe's EOF
            announced (pass again at once); :data:`BUSY` when events were served;
            :data:`IDLE` when nothing was ready (wait for the epoll's descriptor).
        """
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
                    return SPUN
        if (self.pidfd is None) if until_exit else not self.readers:
            return DONE
        return BUSY if events else IDLE

    def run_blocking(self, *, until_exit: bool, deadline: float | None, wake_fd: int) -> bool:
        """:meth:`step` until done, blocking this thread between passes (no event loop).

        Args:
            until_exit: As for ``_oneshot._Multiplexer.run``.
            deadline: A ``time.perf_counter()`` value, or None for none.
            wake_fd: A descriptor that ends the wait when readable (a signal's wake-up).

        Returns:
            True when done; False when ``deadline`` passed or ``wake_fd`` became readable
            first (the caller then ends the child on the event loop's side).
        """
        watched = [self.epoll.fileno(), wake_fd]
        while True:
            state = self.step(until_exit=until_exit)
            if state == DONE:
                return True
            if state != IDLE:
                continue
            timeout = None
            if deadline is not None:
                timeout = deadline - time.perf_counter()
                if timeout <= 0:
                    return False
            ready, _, _ = select.select(watched, [], [], timeout)
            if wake_fd in ready:
                return False

    def drain_nowait(self) -> None:
        """Read what is already there, without waiting (EOF is usually among it)."""
        for _ in range(_BUSY_PASSES_PER_CHECKPOINT):
            events = self.epoll.poll(0)
            if not events or not self.readers:
                return
            self._service(events)
