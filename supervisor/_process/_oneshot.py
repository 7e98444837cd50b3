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
import functools
import math
import os
import re
import select
import time
from typing import TYPE_CHECKING

import trio

from protocol import MAX_OUTPUT_BYTES, CoreError

from ._ladder import (
    DRAIN_AFTER_EXIT_MS,
    KILL_WAIT_MS,
    MAX_DRAIN_MS,
    TERM_GRACE_MS,
    StopBounds,
    stop_ladder,
)
from ._mux import (
    _BUSY_PASSES_PER_CHECKPOINT,
    _BYTES_PER_CHECKPOINT,
    _HAVE_EPOLL,
    _READ_CHUNK,
    BUSY,
    DEFAULT_MAX_OUTPUT_BYTES,
    DONE,
    IDLE,
    Capture,
    Multiplexer,
    OutputCallback,
    ProcessResult,
    StdinFeed,
)
from ._reaper import reap_orphans as reap_orphans
from ._tree import DEVNULL, PIPE, ProcessTree, _open_tree, pool_epoll, pooled_epoll

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ._direct import Unfinished

__all__ = (
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DRAIN_MS",
    "OutputCallback",
    "ProcessResult",
    "reap_orphans",
    "run_process",
)

#: How long output is drained after the main process exits or is killed (ms).
DRAIN_MS = DRAIN_AFTER_EXIT_MS

#: Consecutive successful reads of one pipe between two scheduler passes.
_READS_PER_CHECKPOINT = 16
#: The names the job runner and the tests know them by.
_Capture = Capture
_StdinFeed = StdinFeed
_SURROGATE = re.compile("[\ud800-\udfff]")


async def _pump(capture: Capture, stream: trio.abc.ReceiveStream) -> None:
    if isinstance(stream, trio.lowlevel.FdStream):
        await _pump_fd(capture, stream)
        return
    with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
        while True:
            chunk = await stream.receive_some(_READ_CHUNK)
            if not chunk:
                return
            capture.feed(bytes(chunk) if isinstance(chunk, bytearray) else chunk)


async def _pump_fd(capture: Capture, stream: trio.lowlevel.FdStream) -> None:
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
            capture.feed(chunk)
            busy += 1
            if busy >= _READS_PER_CHECKPOINT:
                busy = 0
                await trio.lowlevel.checkpoint()
    except (trio.ClosedResourceError, OSError):
        # Closed under us (the drain bound passed), or EBADF after that close.
        await trio.lowlevel.checkpoint_if_cancelled()


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CoreError("invalid_request", f"{name} must be a positive integer")
    return value


def _non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CoreError("invalid_request", f"{name} must be a non-negative integer")
    return value


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

    bounds = _run_bounds(term_grace_ms)
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
    return _result(tree, out, err, timed_out, trio.current_time() - started)


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
                await _pump(capture, stream)
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


@functools.cache
def _closed_epoll() -> select.epoll:
    """What a multiplexer holds once its epoll went back to the pool (closed: it can not be
    used, nor pooled twice)."""
    epoll = select.epoll()
    epoll.close()
    return epoll


class _Multiplexer(Multiplexer):
    """The multiplexer of one tree, driven from a Trio task: the caller's task registers
    stdout, stderr, stdin (when fed) and the main process's pidfd with an epoll of its own
    and waits on that epoll's descriptor with ``trio.lowlevel.wait_readable``.

    The epoll comes from the run's pool and goes back to it when :meth:`close` finds it
    empty (:meth:`Multiplexer.reusable`: every registration removed without error); else it
    is closed.
    """

    def __init__(
        self,
        tree: ProcessTree,
        pidfd: int | None,
        readers: dict[int, Capture],
        stdin_fd: int | None,
        stdin_data: bytes | str | StdinFeed,
        close_stdin: Callable[[], None] | None,
    ) -> None:
        super().__init__(
            tree, pidfd, readers, stdin_fd, stdin_data, close_stdin, epoll=pooled_epoll()
        )
        self.tree = tree

    def close(self) -> None:
        """Give the epoll back to the run's pool when it holds no registration, else close
        it; the streams stay the tree's to close."""
        if self.reusable() and pool_epoll(self.epoll):
            self._scratch = None
            self.epoll = _closed_epoll()
            return
        super().close()

    @classmethod
    def open(
        cls,
        tree: ProcessTree,
        out: Capture,
        err: Capture,
        stdin: bytes | str | StdinFeed | None,
    ) -> _Multiplexer | None:
        """The multiplexer for ``tree``, or None when it needs the task-based path."""
        pidfd = tree._exit_fd()
        # No pidfd: unsupported, unless the main process was reaped already (an adopted run,
        # see finish_direct), when there is no exit left to wait for.
        if not _HAVE_EPOLL or (pidfd is None and tree.returncode is None):
            return None
        pipes = tree._bare_pipes()
        if pipes is not None:
            # The usual case: no stream was made; the bare descriptors, ours non-blocking
            # (the child's ends stay blocking).
            readers = {}
            for capture, name in ((out, "stdout"), (err, "stderr")):
                if (fd := pipes.get(name)) is not None:
                    os.set_blocking(fd, False)
                    readers[fd] = capture
            stdin_fd = pipes.get("stdin")
            close_stdin = None
            if stdin_fd is not None:
                os.set_blocking(stdin_fd, False)
                close_stdin = functools.partial(tree._close_raw_pipe, "stdin")
            return cls(tree, pidfd, readers, stdin_fd, stdin or b"", close_stdin)
        # The bare descriptors (no Trio stream made for them), or the streams made already.
        fds: dict[str, int] = {}
        closers: dict[str, Callable[[], None]] = {}
        for name, stream in zip(
            ("stdin", "stdout", "stderr"), tree._streams_or_none(), strict=True
        ):
            raw = tree._raw_pipe(name)
            if raw is not None:
                os.set_blocking(raw, False)  # ours only: the child's end stays blocking
                fds[name] = raw
                closers[name] = functools.partial(tree._close_raw_pipe, name)
            elif isinstance(stream, trio.lowlevel.FdStream):
                fds[name] = stream.fileno()
                closers[name] = stream.close
            elif stream is not None:
                return None
        readers = {}
        for capture, name in ((out, "stdout"), (err, "stderr")):
            if name in fds:
                readers[fds[name]] = capture
        return cls(tree, pidfd, readers, fds.get("stdin"), stdin or b"", closers.get("stdin"))

    async def run(self, *, until_exit: bool) -> None:
        """Serve events until the main process exits (or, with ``until_exit`` False,
        until both pipes reached EOF).

        **Cancellation:** a checkpoint at least every few passes; cancelling leaves
        the pipes and the process to the caller.
        """
        busy = 0
        while True:
            state = self.step(until_exit=until_exit)
            if state == DONE:
                await trio.lowlevel.checkpoint_if_cancelled()
                return
            if state == BUSY:
                # Level-triggered: whatever is left shows up in the next poll.
                busy += 1
                if busy >= _BUSY_PASSES_PER_CHECKPOINT or self._read_since >= _BYTES_PER_CHECKPOINT:
                    busy = 0
                    self._read_since = 0
                    await trio.lowlevel.checkpoint()
                    self.waited = True
                continue
            if state != IDLE:
                continue  # SPUN: pass again at once
            busy = 0
            self._read_since = 0
            # The epoll descriptor is readable as soon as a registered one has an event.
            await trio.lowlevel.wait_readable(self.epoll.fileno())
            self.waited = True


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
        return await _end_after_run(mux, timed_out, bounds)
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


async def _end_after_run(mux: _Multiplexer, timed_out: bool, bounds: StopBounds) -> bool:
    """End the tree once its main process exited or its deadline passed (and what was there
    to read was read); returns ``timed_out``."""
    if not mux.readers and not timed_out:
        # The common end: exited, pipes at EOF; only leftovers (if any) to end. The
        # caller closes the pipes without the ladder's extra scheduler pass. Nothing left
        # (the leftovers check found nothing alive): the tree's end takes no wait and no
        # scope (ProcessTree._end_nowait, which the ladder's end tries first).
        await stop_ladder(mux.tree, bounds, close_pipes=False)
        return False
    # Something still holds a pipe open, or the deadline passed: end the tree while
    # draining, the drain bounded from the exit on: a grandchild
    # holding a pipe never stretches the deadline.
    await _end_reading(mux, bounds)
    return timed_out


async def finish_direct(run: Unfinished) -> ProcessResult | None:
    """Finish on Trio a run ``_direct.run_direct`` handed over, from where it stopped.

    The tree is adopted as ``process.run`` holds it (the same pipes, captures and stdin
    feed), and ended as ``process.run`` ends it from that point: by the stop ladder while
    its output is read (a deadline that passed, a signal, a pipe held open after the exit),
    or by the ladder alone (what the command left running).

    Returns:
        The :class:`ProcessResult`, or None when the run was interrupted (the answer is then
        ``cancelled``, as a cancelled ``process.run``'s).

    **Cancellation:** the ending is shielded and bounded, as ``process.run``'s.
    """
    from . import _tree

    bounds = _run_bounds(TERM_GRACE_MS)
    run.mux.close()  # its epoll only: the pipes are the tree's now
    tree = ProcessTree._create(run.process, run.args, run.marker)
    _tree._running_mains[0] += 1
    if run.exited_at is not None:
        tree._note_exit()  # the drain after the exit is bounded from the exit itself
        tree._exit_time = trio.current_time() - (time.perf_counter() - run.exited_at)
    stdin = run.mux.stdin_data if tree._raw_pipe("stdin") is not None else None
    mux = _Multiplexer.open(tree, run.out, run.err, stdin)
    assert mux is not None  # an epoll and FdStreams: what run_direct needed too
    timed_out = run.timed_out
    try:
        with trio.CancelScope(shield=True):
            if run.interrupted:
                await _end_reading(mux, bounds)
            else:
                mux.stop_feeding()
                mux.drain_nowait()
                timed_out = await _end_after_run(mux, timed_out, bounds)
    finally:
        mux.close()
        if not (tree._end_reported() and tree._close_pipes_nowait()):
            await stop_ladder(tree, bounds)
    if run.interrupted:
        return None
    return _result(tree, run.out, run.err, timed_out, time.perf_counter() - run.started)


@functools.lru_cache(maxsize=16)
def _run_bounds(term_grace_ms: int) -> StopBounds:
    # No polite step: a command is asked to stop by SIGTERM. Built once per grace (frozen;
    # its checks cost a few microseconds per call).
    return StopBounds(
        polite_ms=0,
        term_grace_ms=term_grace_ms,
        kill_wait_ms=KILL_WAIT_MS,
        drain_ms=DRAIN_MS,
        max_drain_ms=MAX_DRAIN_MS,
    )


def _result(
    tree: ProcessTree, out: Capture, err: Capture, timed_out: bool, seconds: float
) -> ProcessResult:
    """The result of an ended tree that took ``seconds`` from its spawn."""
    rc = tree.returncode
    return ProcessResult(
        exit_code=rc if rc is not None and rc >= 0 else None,
        signal=-rc if rc is not None and rc < 0 else None,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
        duration_ms=math.ceil(seconds * 1000),
    )


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

    captures = list(mux.readers.values())
    await stop_ladder(
        tree,
        bounds,
        drained=drained,
        progress=lambda: sum(capture.total for capture in captures),
        close_pipes=False,
    )
