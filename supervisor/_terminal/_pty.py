"""One PTY process generation: the pseudo-terminal, its process tree, reader and renderer.

Contract (the plugin contract "Plugin-owned native terminals"):

- The program starts through :func:`open_process_tree` (no shell, the scope marker, its own
  session) with the PTY slave as fds 0-2 *and as the controlling terminal* of that session,
  so job control, ``SIGWINCH`` and hang-up behave as in a terminal emulator.
- One reader task per generation reads the master, decodes UTF-8 incrementally (a character
  is never split across two ``output`` events; invalid bytes become U+FFFD) and hands each
  chunk to ``on_output`` and to the :class:`RetainedDisplay`. Chunks are at most
  :data:`READ_CHUNK_BYTES` bytes (one event each; the per-terminal event queue bounds their
  number and their bytes, so memory).
- Flow control (xterm.js's ``WriteBuffer``, node-pty's ``pause``/``resume``): the terminal's
  event queue pauses the reader (:meth:`TerminalProcess.pause`) when the output nobody took
  reaches its high watermark and resumes it at the low one. Paused, the reader does not read
  the master: the kernel holds the program's next write, and the program is never killed for
  it. The pause never holds an end: once the main process exited, or a close began, the
  reader reads on.
- :meth:`TerminalProcess.end` is the close, by the stop ladder
  (:func:`~supervisor._process._ladder.stop_ladder`): SIGHUP and SIGCONT to every process
  group of the PTY's session and to every process carrying the tree's marker, a bounded wait
  for the main process (the polite step), then TERM+CONT, grace, KILL, sweep by marker and
  ancestry (jobs bash moved into their own groups, nohup jobs, double-forked daemons). The
  reader keeps reading meanwhile, so a program that floods output never blocks in ``write``,
  and what the program prints from its SIGHUP or SIGTERM handler is in the ``output`` events
  and the retained display before the exit is reported (a dispose reads and discards it:
  nobody is left to see it). Then the output is drained (bounded). Shielded and bounded by
  the ladder's bounds plus the render of at most ``max_pending_chars`` characters.

Tasks run in the nursery the caller gives (the terminal service's), inside a cancel scope
owned by the generation; :meth:`TerminalProcess.aclose` always releases the master fd.

Boundary: the generation's tasks (the reader, the render loop, the exit watcher) are one
supervision boundary. An unexpected exception in any of them ends those tasks, is logged
with its traceback and handed to ``on_failure`` (the service then ends the processes by the
stop ladder and marks the terminal ``failed``); it never reaches the caller's nursery.
Cancellation, ``KeyboardInterrupt`` and ``SystemExit`` propagate. Output is data: the
renderer never raises on it (:mod:`._render`).

Fault points (tests and the chaos runner, :func:`supervisor._boundary.fault_point`):
``terminal.reader`` (after each chunk is handed on), ``terminal.render`` (before each
render slice), ``terminal.exit`` (when the main process's exit is seen). The service adds
``terminal.cleanup``.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import signal
import struct
import termios
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

from .._boundary import fault_point, log_failure, split_failure
from .._process._ladder import (
    DRAIN_AFTER_EXIT_MS,
    KILL_WAIT_MS,
    MAX_DRAIN_MS,
    TERM_GRACE_MS,
    StopBounds,
    stop_ladder,
)
from .._process._marker import SCOPE_ENV
from .._process._procfs import all_pids, read_env_var, read_stat
from .._process._tree import open_process_tree
from .._session._order import effect_taken

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from .._process._tree import ProcessTree
    from ._render import RetainedDisplay

__all__ = (
    "DEFAULT_DRAIN_MS",
    "DEFAULT_HANGUP_MS",
    "DEFAULT_KILL_WAIT_MS",
    "DEFAULT_TERM_GRACE_MS",
    "READ_CHUNK_BYTES",
    "EndBounds",
    "TerminalProcess",
)

#: The most bytes one pass of the reader (so one ``output`` event) carries.
READ_CHUNK_BYTES: Final = 65_536
#: After SIGHUP, how long the main process gets to exit before TERM (ours), milliseconds:
#: the terminal's polite bound.
DEFAULT_HANGUP_MS: Final = 1_000
#: TERM grace before SIGKILL, milliseconds (the stop ladder's).
DEFAULT_TERM_GRACE_MS: Final = TERM_GRACE_MS
#: Wait after SIGKILL before reporting survivors, milliseconds (the stop ladder's).
DEFAULT_KILL_WAIT_MS: Final = KILL_WAIT_MS
#: Output drained after the main process exited (the stop ladder's), milliseconds.
DEFAULT_DRAIN_MS: Final = DRAIN_AFTER_EXIT_MS
#: Full events one pass of the reader fills before it lets other tasks run (a flood's
#: fairness bound: 256 KiB, about 3 ms of reading).
_CHUNKS_PER_PASS: Final = 4
#: A first read shorter than this is taken as all the master had (no read to prove it).
_SHORT_READ_BYTES: Final = 256
#: Output arriving within this many seconds is rendered in one batch.
_RENDER_COALESCE_S: Final = 0.02
#: How long :meth:`TerminalProcess.end` waits for the generation's task once cancelled, in
#: seconds (it ends at once: a bound against a bug, not a wait).
_RUN_END_S: Final = 1.0
#: While output outruns rendering, render only once it has paused this long (seconds).
_FLOOD_QUIET_S: Final = 0.1
#: Output is a flood when more characters than this arrive within one coalescing wait or
#: one slice's rendering (64 Ki characters in 20 ms: about 3 MB/s, far above a build log).
_FLOOD_CHARS: Final = 65_536
#: Characters rendered per worker-thread call (about 20 ms of pyte).
_RENDER_SLICE_CHARS: Final = 4_096


@dataclass(frozen=True)
class EndBounds:
    """The bounds of ending a terminal's process tree, in milliseconds.

    Attributes:
        hangup_ms: After SIGHUP+SIGCONT, the longest wait for the main process to exit.
        term_grace_ms: After SIGTERM, the longest wait before SIGKILL.
        kill_wait_ms: After SIGKILL, the longest wait before survivors are reported.
        drain_ms: After a natural exit (or after the kill), the longest wait for the
            output to reach end of file.
    """

    hangup_ms: int = DEFAULT_HANGUP_MS
    term_grace_ms: int = DEFAULT_TERM_GRACE_MS
    kill_wait_ms: int = DEFAULT_KILL_WAIT_MS
    drain_ms: int = DEFAULT_DRAIN_MS

    def stop_bounds(self) -> StopBounds:
        """The stop ladder's bounds: the hang-up is the terminal's polite step."""
        return StopBounds(
            polite_ms=self.hangup_ms,
            term_grace_ms=self.term_grace_ms,
            kill_wait_ms=self.kill_wait_ms,
            drain_ms=self.drain_ms,
            max_drain_ms=max(self.drain_ms, MAX_DRAIN_MS),
        )


def _set_window_size(fd: int, rows: int, cols: int) -> None:
    # The kernel sends SIGWINCH to the terminal's foreground process group on a change.
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class TerminalProcess:
    """A running PTY program and the tasks that serve it (one terminal generation).

    Made by :meth:`start`.

    Attributes:
        tree: The program's process tree.
        display: Its rendered display.
        exited: Set when the main process has exited (by itself or by :meth:`end`).
        returncode: The main process's status once known (negative: killed by that signal).
    """

    def __init__(
        self,
        tree: ProcessTree,
        master: int,
        display: RetainedDisplay,
        on_output: Callable[[str], int | None],
    ) -> None:
        self.tree = tree
        self._master = master
        self._stream = trio.lowlevel.FdStream(master)
        self.display = display
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.__discard = False
        self._write_lock = trio.Lock()
        self._scope = trio.CancelScope()
        self._reader_done = trio.Event()
        self._eof = trio.Event()
        self._render_done = trio.Event()
        #: Set when the generation's task (:meth:`_run`) has ended, its failure recorded.
        self._run_done = trio.Event()
        self._render_wanted = trio.Event()
        self.exited = trio.Event()
        self.returncode: int | None = None
        #: The unexpected exception that ended the generation's tasks, if one did.
        self.failure: Exception | None = None
        self._closed = False
        #: Bytes read from the master so far (statistics).
        self.bytes_read = 0
        #: Flow control: paused by the event queue, and how many times (statistics).
        self.paused = False
        self.pauses = 0
        self._unpaused = trio.Event()
        #: A close began: the pause no longer holds the reader (the end must not wait on it).
        self._ending = False

    @classmethod
    async def start(
        cls,
        nursery: trio.Nursery,
        argv: Sequence[str],
        *,
        cwd: str | None,
        env: Mapping[str, str | None] | None,
        rows: int,
        cols: int,
        display: RetainedDisplay,
        on_output: Callable[[str], int | None],
        on_exit: Callable[[TerminalProcess], None],
        on_failure: Callable[[TerminalProcess, Exception], None],
    ) -> TerminalProcess:
        """Open a PTY of ``rows`` x ``cols``, start ``argv`` on it and start its tasks.

        Args:
            nursery: Where the reader, waiter and render tasks run.
            argv: Program and arguments (``argv[0]`` resolved on the child's PATH).
            cwd: Working directory, or None for ours.
            env: Changes to our environment (None removes a variable).
            rows: Window height in lines.
            cols: Window width in columns.
            display: Receives the output for rendering (it may hold restored text).
            on_output: Called with each decoded chunk, in order, until :meth:`end` has
                drained the output (a dispose's end: until it begins).
            on_exit: Called once, from the waiter task, when the main process exits.
            on_failure: Called once, from the generation's task, with an unexpected
                exception that ended the reader, render loop or exit watcher (already
                logged); the processes still run: the callee ends them.

        Raises:
            CoreError: ``invalid_request`` / ``launch_failed`` from :func:`open_process_tree`;
                ``launch_failed`` when no PTY can be opened. Nothing is left running.

        **Cancellation:** not cancellable once the spawn began; the caller must end the
        returned process if it is cancelled afterwards.
        """
        try:
            master, slave = os.openpty()
        except OSError as exc:
            raise CoreError("launch_failed", f"could not open a PTY: {exc.strerror}") from exc
        try:
            _set_window_size(slave, rows, cols)
            tree = await open_process_tree(argv, cwd=cwd, env=env, pty_slave_fd=slave)
        except BaseException:
            os.close(master)
            raise
        finally:
            # The child has its own copy; keeping ours would hide the end of the output
            # (EIO arrives only once every slave fd is closed).
            os.close(slave)
        process = cls(tree, master, display, on_output)
        nursery.start_soon(process._run, on_exit, on_failure)
        return process

    async def _run(
        self,
        on_exit: Callable[[TerminalProcess], None],
        on_failure: Callable[[TerminalProcess, Exception], None],
    ) -> None:
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_loop)
                    nursery.start_soon(self._render_loop)
                    rc = await self.tree.wait()
                    fault_point("terminal.exit")
                    self.returncode = rc
                    self.exited.set()
                    # What it wrote before its exit is read now, paused or not.
                    self._unpaused.set()
                    on_exit(self)
        except BaseException as exc:
            failure, rest = split_failure(exc)
            if failure is None:
                raise
            log_failure(f"terminal process {self.pid}", failure)
            self.failure = failure
            try:
                on_failure(self, failure)
            except Exception as exc:
                # The owner's own bookkeeping failed: logged; its end of the terminal (a
                # close, its session's teardown) still ends the processes.
                log_failure(f"terminal process {self.pid} failure handler", exc)
            if rest is not None:
                raise rest from None
        finally:
            self._run_done.set()

    async def _read_loop(self) -> None:
        # Not FdStream.receive_some: a PTY read returns at most about 4 KiB (the line
        # discipline's buffer), and one scheduler pass and one event per 4 KiB is most of the
        # cost of a flood. So once the master is readable the reader reads again at once
        # while data is there, up to READ_CHUNK_BYTES per event. The read that comes back
        # empty proves the master drained, so the reader goes straight back to waiting (a
        # keystroke's echo costs one pass of this task, not two); a short first read (a
        # keystroke's echo) is taken as the drain without that read. A flood fills up to
        # _CHUNKS_PER_PASS events per pass (the consumer then takes them in one drain, not
        # one wake-up and one waitEvents call each), and after a full pass the reader only
        # checkpoints (fairness, cancellation) and reads on: the master still has data, so
        # registering with epoll to learn that would be a wasted round trip.
        fd = self._master
        decoder = self._decoder
        read = os.read
        more = False
        try:
            while True:
                if self.paused and not (self.__discard or self._ending or self.exited.is_set()):
                    # Flow control: nothing is read until the output is taken (resume),
                    # the program exits or a close begins.
                    await self._unpaused.wait()
                    more = False
                    continue
                if more:
                    await trio.lowlevel.checkpoint()
                else:
                    try:
                        await trio.lowlevel.wait_readable(fd)
                    except trio.ClosedResourceError:
                        break  # aclose() closed the master under us
                more = False
                eof = False
                for _ in range(_CHUNKS_PER_PASS):
                    parts: list[bytes] = []
                    size = 0
                    while size < READ_CHUNK_BYTES:
                        try:
                            data = read(fd, READ_CHUNK_BYTES - size)
                        except BlockingIOError:
                            break
                        except OSError:
                            # EIO: every slave fd is closed (the session is gone); EBADF:
                            # aclose() closed the master (only once cancelled).
                            eof = True
                            break
                        if not data:
                            eof = True
                            break
                        parts.append(data)
                        size += len(data)
                        if size < _SHORT_READ_BYTES:
                            # A keystroke's echo, a prompt: the master had no more than this
                            # (a read returns what is there), so the read that would come
                            # back empty is skipped (a syscall and an exception on each
                            # keystroke's path). Output that arrives meanwhile makes the
                            # master readable again: the wait below returns at once.
                            break
                    if size:
                        self.bytes_read += size
                        self._emit(decoder.decode(parts[0] if len(parts) == 1 else b"".join(parts)))
                        fault_point("terminal.reader")
                    if eof or size < READ_CHUNK_BYTES:
                        break  # the master drained (or ended)
                    if self.paused:
                        break  # the loop's head decides whether the pause holds
                else:
                    more = True
                if eof:
                    break
            self._emit(decoder.decode(b"", final=True))
        finally:
            self._eof.set()
            self._reader_done.set()

    @property
    def _discard(self) -> bool:
        """True once a close began: output is read and thrown away (never paused)."""
        return self.__discard

    @_discard.setter
    def _discard(self, value: bool) -> None:
        self.__discard = value
        if value:
            self._unpaused.set()

    def pause(self) -> None:
        """Stop reading the master (flow control); idempotent."""
        if not self.paused:
            self.paused = True
            self.pauses += 1
            self._unpaused = trio.Event()

    def resume(self) -> None:
        """Read the master again; idempotent."""
        self.paused = False
        self._unpaused.set()

    def _emit(self, text: str) -> None:
        if text and not self._discard:
            # The event first: the display learns its seq with the text (a screen taken
            # for a client then says which events it already shows).
            seq = self._on_output(text)
            self.display.feed(text, seq)
            self._render_wanted.set()

    async def _render_loop(self) -> None:
        try:
            while True:
                # An idle terminal costs no wake-ups: the loop sleeps until output arrives.
                await self._render_wanted.wait()
                self._render_wanted = trio.Event()
                seen = self.display.fed_chars
                await trio.sleep(_RENDER_COALESCE_S)
                while self.display.has_pending:
                    if self.display.overflowed or self.display.fed_chars - seen > _FLOOD_CHARS:
                        # A flood: rendering now would be thrown away and would take the GIL
                        # from the reader (a tenth of an 8 MiB flood's throughput went to
                        # pyte); wait until the output pauses.
                        seen = self.display.fed_chars
                        await trio.sleep(_FLOOD_QUIET_S)
                        if self.display.fed_chars != seen:
                            continue
                    # Small slices: output that starts while we render overflows the
                    # pending bound within one slice and stops the rendering.
                    seen = self.display.fed_chars
                    sliced = self.display.pending_chars > _RENDER_SLICE_CHARS
                    fault_point("terminal.render")
                    await trio.to_thread.run_sync(self.display.render_pending, _RENDER_SLICE_CHARS)
                    if not sliced:
                        # What was pending is rendered. Output that came in meanwhile waits
                        # for the next coalescing wait (the reader set _render_wanted), not
                        # for a thread of its own: typing made this loop render each
                        # keystroke's echo in a worker thread as it came, and those threads
                        # took the GIL from the reader and the clients (a thread hop for
                        # every few keystrokes). A screen renders what is pending itself.
                        break
        finally:
            self._render_done.set()

    # -- use -------------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Send keystrokes to the program (blocks while the PTY's input buffer is full).

        Raises:
            CoreError: ``plugin.host.preconditionFailed`` when the terminal has ended.

        **Cancellation:** cancellable; part of ``data`` may have been written.
        """
        if self._closed:
            raise CoreError("plugin.host.preconditionFailed", "the terminal's program has ended")
        if not self._write_lock.locked():
            # Keystrokes are small and the PTY's input buffer is rarely full: write at once,
            # without the lock's and send_all's two scheduler passes (they were a third of
            # the supervisor's own keystroke latency). The rest, if any, goes the slow way.
            try:
                written = os.write(self._master, data)
            except BlockingIOError:
                written = 0
            except OSError as exc:
                raise CoreError(
                    "plugin.host.preconditionFailed", "the terminal's program has ended"
                ) from exc
            data = data[written:]
            if not data:
                # Written: the terminal's next command may take its effect in the same
                # scheduler pass as this checkpoint (docs/architecture.md "The order rule").
                effect_taken()
                await trio.lowlevel.checkpoint()
                return
        async with self._write_lock:
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise CoreError(
                    "plugin.host.preconditionFailed", "the terminal's program has ended"
                ) from exc

    def resize(self, rows: int, cols: int) -> None:
        """Set the window size; the kernel sends SIGWINCH to the foreground group."""
        with contextlib.suppress(OSError):
            _set_window_size(self._master, rows, cols)
        self.display.resize(rows, cols)
        self._render_wanted.set()

    # -- end -------------------------------------------------------------------------

    def _hangup(self) -> None:
        """SIGHUP+SIGCONT to every group of the PTY's session and every marked process."""
        session = self.tree.pid
        my_pgid = os.getpgrp()
        me = os.getpid()
        groups: set[int] = set()
        pids: set[int] = set()
        for pid in all_pids():
            if pid == me:
                continue
            st = read_stat(pid)
            if st is None or st.dead:
                continue
            if st.sid == session or read_env_var(pid, SCOPE_ENV) == self.tree.marker:
                pids.add(pid)
                groups.add(st.pgid)
        for sig in (signal.SIGHUP, signal.SIGCONT):
            for pgid in groups:
                # Invariant 11: never our own group.
                if pgid > 1 and pgid != my_pgid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, sig)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    async def drain(self, timeout_ms: int) -> None:
        """Wait up to ``timeout_ms`` milliseconds for the output to reach end of file.

        **Cancellation:** cancellable.
        """
        with trio.move_on_after(timeout_ms / 1000):
            await self._eof.wait()

    async def end(self, bounds: EndBounds, *, keep_output: bool = True) -> int | None:
        """End every process of the terminal by the stop ladder, reading its output until it
        ends, then stop the tasks and render what is pending.

        Args:
            bounds: The hang-up, TERM, KILL and drain bounds.
            keep_output: True (a close, a natural exit, a failure): what the program writes
                while it ends (from its SIGHUP or SIGTERM handler) is emitted and rendered
                like the rest. False (a dispose: nobody is left to see it): it is read and
                discarded from the start.

        Returns:
            The main process's status (negative: killed by that signal), or None when it
            could not be reaped.

        **Cancellation:** shielded and bounded (see the module docstring); the caller's
        cancellation is delivered at its next checkpoint.
        """
        with trio.CancelScope(shield=True):
            self._ending = True
            self._unpaused.set()
            if not keep_output:
                self._discard = True
            # Sent whether or not the main process still runs: what it left in the session
            # (background jobs, nohup) gets its hang-up too.
            self._hangup()

            async def wait_for_hangup() -> None:
                return None

            # Every slave holder gone (or unkillable), EOF is due: the drain never waits long.
            report = await stop_ladder(
                self.tree,
                bounds.stop_bounds(),
                polite=wait_for_hangup,
                drained=self._eof.wait,
                progress=lambda: self.bytes_read,
            )
            if self.returncode is None:
                self.returncode = report.returncode
            self._discard = True
            self._scope.cancel()
            await self._reader_done.wait()
            await self._render_done.wait()
            # The generation's own task may have woken from the tree's exit just before the
            # cancel, and fail after it: its failure is this generation's outcome (a close
            # that lost it would report a clean end). Once cancelled it ends at once.
            with trio.move_on_after(_RUN_END_S):
                await self._run_done.wait()
            # The render loop was cancelled between batches; render the rest (bounded by
            # the display's pending bound).
            await trio.to_thread.run_sync(self.display.render_pending)
            await self.aclose()
        return self.returncode

    async def abort(self, bounds: EndBounds) -> int | None:
        """The stop ladder without the rest of :meth:`end` (after :meth:`end` itself failed).

        TERM, grace, KILL and the sweep of the tree, then the tasks are cancelled and the
        master released; nothing is rendered. Returns as :meth:`end`.

        **Cancellation:** shielded and bounded by ``term_grace_ms + kill_wait_ms``.
        """
        with trio.CancelScope(shield=True):
            self._discard = True
            self._scope.cancel()
            try:
                report = await stop_ladder(self.tree, bounds.stop_bounds())
                if self.returncode is None:
                    self.returncode = report.returncode
            finally:
                await self.aclose()
        return self.returncode

    async def aclose(self) -> None:
        """Release the PTY master (idempotent). Does not end the processes: see :meth:`end`."""
        if self._closed:
            return
        self._closed = True
        self._scope.cancel()
        with contextlib.suppress(OSError):
            await self._stream.aclose()

    @property
    def pid(self) -> int:
        """The main process id."""
        return self.tree.pid
