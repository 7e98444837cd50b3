"""ProcessJobRunner: the lanes' job runner that runs a job as a supervised process tree.

Contract (docs/architecture.md "lanes/" ``JobRunner``): the
runner starts ``job.request.argv`` (no shell) as a process tree (its own session and
group, the scope marker), reads stdout and stderr concurrently and passes their text to
``emit_output`` as it arrives, decoded incrementally as UTF-8 so a character split across
reads is never split across events (invalid bytes become U+FFFD). It sets
``job.exit_code`` / ``job.signal`` before it returns.

Life of one job::

    spawn --> read stdout + stderr --(main process exits)--> drain <= drain_ms
                      |                                         |
                      `--(Cancelled: cancel, supersede,         v
                          deadline, lanes closing)------> the stop ladder (shielded, bounded),
                                                          still reading both pipes

The tree is ended in every case, also after a clean exit: whatever the main process left
running in its scope (a daemon, a grandchild in a new session) ends with the job. The end
is the stop ladder (:func:`~supervisor._process._ladder.stop_ladder`, no polite step): SIGTERM
to the group, ``term_grace_ms`` of grace, SIGKILL, a sweep by marker and ancestry, then at most
``kill_wait_ms`` before survivors are only reported. The pipes (and the report pipe) are read
through all of it and drained for at most ``drain_ms`` once the tree is gone, so the line a
job's SIGTERM handler writes reaches ``job.output`` on every path: cancel, supersede, deadline
and the lanes closing. The runner never applies the job's timeout: the lanes driver's cancel
scope does.

The report channel. A job started with ``report`` (``job.start {report: true}``, a lanes
file's ``report = true``) gets one more pipe, apart from its output: its write end is the
job's fd 3, named by ``SUPERVISOR_REPORT_FD`` in its environment (a job without ``report``
gets no such descriptor, and the variable is removed from its environment, so a nested
supervisor's jobs never write into their parent's channel). Each line written there is one
JSON object: ``{"progress": {"finished": N, "total": M}}`` (integers, ``0 <= N <= M``)
becomes ``job.progress``, any other object a ``job.record`` carrying it. A line longer than
:data:`MAX_REPORT_LINE_BYTES`, one that is not a JSON object (or holds a lone surrogate, a
non-finite number, nesting deeper than 512 levels), or a malformed progress report is
ignored: the first one is named in one ``[supervisor: ...]`` line on the job's stderr, the
total at job end; the job and its lane go on. The lanes bound the events (progress
coalesced, records counted per job: :class:`lanes.Lanes`). The pipe's write end exists in
the job's process tree only (created close-on-exec, placed by the spawn's file actions, our
copy closed once the job started), and its read end is drained like the output: at most
``drain_ms`` after the main process exited.

Flow control (docs/architecture.md "Flow control", :mod:`supervisor._flow`): given
``watch_output`` (the
Core passes its job-event queue's :meth:`~supervisor.EventQueue.watch`), a job whose events
are not taken -- not drained by ``job.waitEvents``/``job.pollEvents``, not written to serve's
client -- is paused at the high watermark: its pipes are not read, so the kernel holds the
program's next write; a drain down to the low watermark resumes it. The program is never
killed for it (its own deadline still runs). Once the main process has exited, the pipes are
read without pause for the drain bound, so what it wrote before its exit is delivered.

Boundary: a job is a supervision boundary. An unexpected exception while a job runs (ours, or
a library's) leaves the runner after its tree was ended by the same shielded stop ladder; the
lanes driver then finishes that job ``failed`` with ``errorCode: "internal"`` and the
exception's message, and the lane goes on with its next job. Fault points:
``job.spawn`` (the tree started), ``job.output`` (each chunk read), ``job.exit`` (the main
process's exit seen, before the drain).
"""

from __future__ import annotations

import codecs
import dataclasses
import os
import stat
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError, check_request_values
from protocol._json import loads

from .._boundary import fault_point
from .._process._ladder import (
    DRAIN_AFTER_EXIT_MS,
    KILL_WAIT_MS,
    MAX_DRAIN_MS,
    TERM_GRACE_MS,
    StopBounds,
    stop_ladder,
)
from .._process._launch import check_env, resolve_executable
from .._process._oneshot import _Capture, _Multiplexer
from .._process._tree import DEVNULL, _open_tree

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from lanes import Job, JobRequest

    from .._flow import FlowListener
    from .._process._tree import ProcessTree, TreeEndReport

__all__ = (
    "DEFAULT_DRAIN_MS",
    "MAX_REPORT_LINE_BYTES",
    "REPORT_FD_ENV",
    "ProcessJobRunner",
    "check_job_launch",
    "job_cwd",
)

#: How long output is still read after the main process exited, in milliseconds
#: (ours): a grandchild holding a pipe open must not stretch the job's end.
DEFAULT_DRAIN_MS: Final = DRAIN_AFTER_EXIT_MS
#: Bytes asked for per read of a pipe.
_READ_BYTES: Final = 65536
_UTF8_DECODER: Final = codecs.getincrementaldecoder("utf-8")
#: The environment variable that names a reporting job's report descriptor.
REPORT_FD_ENV: Final = "SUPERVISOR_REPORT_FD"
#: The longest report line, newline excluded, in bytes (ours; a job.output event's bound).
MAX_REPORT_LINE_BYTES: Final = 64 * 1024


class ProcessJobRunner:
    """Runs lanes jobs as supervised process trees (the lanes ``JobRunner`` protocol).

    One instance can run any number of jobs, concurrently; it keeps no state between jobs.

    Args:
        term_grace_ms: Time between SIGTERM and SIGKILL when a tree is ended, in milliseconds.
        kill_wait_ms: Time to wait after SIGKILL before survivors are reported, in
            milliseconds.
        drain_ms: How long output is still read after the main process exited, in
            milliseconds; a descendant holding a pipe open never stretches a job past it.
        watch_output: ``watch_output(job_id, listener) -> unwatch``: lets whatever takes the
            job's events pause and resume the reading of its pipes (see "Flow control"
            above), or None (output is read without pause).

    Raises:
        ValueError: A bound is negative.
    """

    def __init__(
        self,
        *,
        term_grace_ms: int = TERM_GRACE_MS,
        kill_wait_ms: int = KILL_WAIT_MS,
        drain_ms: int = DEFAULT_DRAIN_MS,
        watch_output: Callable[[str, FlowListener], Callable[[], None]] | None = None,
    ) -> None:
        # A job has no polite step: the ladder starts at SIGTERM.
        self._bounds = StopBounds(
            polite_ms=0,
            term_grace_ms=term_grace_ms,
            kill_wait_ms=kill_wait_ms,
            drain_ms=drain_ms,
            max_drain_ms=max(drain_ms, MAX_DRAIN_MS),
        )
        self.term_grace_ms = term_grace_ms
        self.kill_wait_ms = kill_wait_ms
        self.drain_ms = drain_ms
        self._watch_output = watch_output

    def __repr__(self) -> str:
        return (
            f"ProcessJobRunner(term_grace_ms={self.term_grace_ms},"
            f" kill_wait_ms={self.kill_wait_ms}, drain_ms={self.drain_ms})"
        )

    async def __call__(self, job: Job, emit_output: Callable[[str, str], None]) -> None:
        """Run ``job`` to completion and record how its main process ended.

        The working directory is :func:`job_cwd` (``job.request.cwd`` resolved against the
        project root, or the root when it is None); ``job.request.env`` changes the
        inherited environment (None removes a variable). stdin is ``/dev/null``: a job is headless.

        Args:
            job: The job; its ``exit_code`` (or ``signal``, for a main process killed by a
                signal) is set before this returns or raises.
            emit_output: Called with ``("stdout" | "stderr", text)`` as output arrives.

        Raises:
            CoreError: ``invalid_request`` / ``launch_failed`` from
                :func:`open_process_tree`; nothing was started (the job ends ``failed``).

        **Cancellation:** the tree is ended by the stop ladder, shielded and bounded (at
        most about ``term_grace_ms + kill_wait_ms + drain_ms`` plus procfs scans) while its
        output is still read, the exit status is recorded, then ``trio.Cancelled``
        propagates.
        """
        request = job.request
        env = dict(request.env or {})
        reader: _ReportReader | None = None
        pass_fd: tuple[int, str] | None = None
        if request.report:
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            reader = _ReportReader(job, trio.lowlevel.FdStream(read_end), emit_output)
            pass_fd = (write_end, REPORT_FD_ENV)
        else:
            env[REPORT_FD_ENV] = None
        try:
            # No scheduler pass after the spawn: the multiplexer's first wait is that pass.
            tree = await _open_tree(
                request.argv,
                cwd=job_cwd(request),
                env=env,
                stdin=DEVNULL,
                pass_fd=pass_fd,
                yield_after_spawn=False,
            )
        except BaseException:
            if reader is not None:
                reader.stream.close()
            raise
        finally:
            if pass_fd is not None:
                # The job has its copy: EOF comes when its tree has closed every one.
                os.close(pass_fd[0])
        gate = _OutputGate()
        unwatch = None if self._watch_output is None else self._watch_output(job.id, gate)
        try:
            fault_point("job.spawn")
            if reader is None:
                await self._supervise(tree, emit_output, gate)
            else:
                await self._supervise_reporting(tree, emit_output, reader, gate)
        finally:
            if unwatch is not None:
                unwatch()
            gate.release()
            if reader is not None:
                reader.close()
            # Joins the ladder that ended the tree (or runs it, after a failure before).
            report = await self._stop(tree)
            _record_exit(job, report.returncode)
            exited_alone = tree.pid not in report.terminated and tree.pid not in report.killed
            left = sorted(set(report.terminated + report.killed + report.swept) - {tree.pid})
            if exited_alone and left:
                # Worth a line in the job's log: the job itself looked finished.
                emit_output(
                    "stderr",
                    f"[supervisor: the main process exited and left {len(left)} process(es)"
                    f" running; ended: {' '.join(map(str, left))}"
                    f"{' (SIGKILL)' if report.killed else ''}]\n",
                )
            if report.unkillable:
                emit_output(
                    "stderr",
                    "\n[supervisor: processes still alive after SIGKILL:"
                    f" {' '.join(map(str, report.unkillable))}]\n",
                )

    async def _stop(
        self,
        tree: ProcessTree,
        drained: Callable[[], Awaitable[object]] | None = None,
        progress: Callable[[], int] | None = None,
        *,
        failed: bool = False,
    ) -> TreeEndReport:
        """The stop ladder, reading through it with ``drained`` unless our own code
        ``failed`` (then reading again could meet the same bug); joins an end already run."""
        # The ladder is shielded itself (calling it is no checkpoint).
        return await stop_ladder(
            tree, self._bounds, drained=None if failed else drained, progress=progress
        )

    async def _supervise_reporting(
        self,
        tree: ProcessTree,
        emit_output: Callable[[str, str], None],
        reader: _ReportReader,
        gate: _OutputGate,
    ) -> None:
        """:meth:`_supervise`, with the report pipe read by a task of its own, drained
        within the same bound after the main process's exit and read through the ladder."""
        async with trio.open_nursery() as nursery:
            # Shielded: a cancelled job's reports are still read while its tree ends; the
            # scope is cancelled once the ladder's drain is over.
            reading = trio.CancelScope(shield=True)

            async def read_reports() -> None:
                with reading:
                    await reader.run()

            nursery.start_soon(read_reports)
            try:
                await self._supervise(tree, emit_output, gate, reader.done.wait)
            finally:
                reading.cancel()
            exit_time = tree.exit_time if tree.exit_time is not None else trio.current_time()
            with trio.move_on_at(exit_time + self.drain_ms / 1000):
                await reader.done.wait()
            nursery.cancel_scope.cancel()

    async def _supervise(
        self,
        tree: ProcessTree,
        emit_output: Callable[[str, str], None],
        gate: _OutputGate,
        also_drained: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        """Pump both pipes until the main process exits and the drain bound passes, then
        end the tree by the stop ladder while still pumping them (on every path: the exit,
        cancel, supersede, deadline, the lanes closing).

        One task serves both pipes and the exit (``_process._Multiplexer``, as
        ``process.run`` does): a job used to cost three tasks and a nursery, which at
        thousands of short jobs is a fifth of the supervisor's time.

        Args:
            also_drained: Returns once another reader of the job (its report pipe) is done;
                the ladder's drain waits for it too.
        """
        # Made with a stream's first output: most short jobs print nothing.
        decoders: dict[str, codecs.IncrementalDecoder] = {}

        def on_output(stream_name: str, chunk: bytes) -> None:
            fault_point("job.output")
            decoder = decoders.get(stream_name)
            if decoder is None:
                decoder = decoders[stream_name] = _UTF8_DECODER(errors="replace")
            text = decoder.decode(chunk)
            if text:
                emit_output(stream_name, text)

        # A cap of 0: the bytes are only passed on (the lanes bound what they keep).
        out = _Capture("stdout", 0, on_output)
        err = _Capture("stderr", 0, on_output)
        mux = _Multiplexer.open(tree, out, err, None)
        if mux is None:
            await self._supervise_tasks(tree, emit_output, gate, also_drained)
            return

        async def drained() -> None:
            await mux.run(until_exit=False)
            if also_drained is not None:
                await also_drained()

        failed = True
        try:
            gate.attach(mux)
            await mux.run(until_exit=True)
            # What it wrote before its exit is read now, paused or not (bounded by the drain).
            gate.release()
            fault_point("job.exit")
            mux.drain_nowait()
            if mux.readers:
                # A descendant may hold a pipe open long after the exit: read what comes,
                # but never wait for its EOF longer than the drain bound.
                exit_time = tree.exit_time if tree.exit_time is not None else trio.current_time()
                with trio.move_on_at(exit_time + self.drain_ms / 1000):
                    await mux.run(until_exit=False)
            failed = False
        except trio.Cancelled:
            failed = False
            raise
        finally:
            # The ladder reads while the tree ends: the pause must not hold its drain.
            gate.release()
            try:
                if not mux.readers and also_drained is None:
                    # The usual end: both pipes at EOF, nothing left to drain; the ladder
                    # only ends what the job left running (no drain task, no nursery).
                    await self._stop(tree)
                else:
                    await self._stop(tree, drained, lambda: out.total + err.total, failed=failed)
            finally:
                mux.close()
                for name in ("stdout", "stderr"):
                    decoder = decoders.get(name)
                    # A character cut off by EOF or the drain bound is still reported (U+FFFD).
                    rest = "" if decoder is None else decoder.decode(b"", final=True)
                    if rest:
                        emit_output(name, rest)

    async def _supervise_tasks(
        self,
        tree: ProcessTree,
        emit_output: Callable[[str, str], None],
        gate: _OutputGate,
        also_drained: Callable[[], Awaitable[object]] | None,
    ) -> None:
        """:meth:`_supervise` with a task per pipe, where epoll or pidfds are missing."""
        assert tree.stdout is not None
        assert tree.stderr is not None
        pumps = [
            _Pump("stdout", tree.stdout, emit_output, gate),
            _Pump("stderr", tree.stderr, emit_output, gate),
        ]

        async def drained() -> None:
            for pump in pumps:
                await pump.done.wait()
            if also_drained is not None:
                await also_drained()

        async with trio.open_nursery() as nursery:
            # Shielded: the pumps read on while a cancelled job's tree ends (the ladder),
            # and stop when its drain is over (a scope is entered once: one per pump).
            reading = [trio.CancelScope(shield=True) for _ in pumps]

            async def pump_in_scope(pump: _Pump, scope: trio.CancelScope) -> None:
                with scope:
                    await pump.run()

            for pump, scope in zip(pumps, reading, strict=True):
                nursery.start_soon(pump_in_scope, pump, scope)
            failed = True
            try:
                await tree.wait()
                # What it wrote before its exit is read now, paused or not (bounded by the drain).
                gate.release()
                fault_point("job.exit")
                with trio.move_on_after(self.drain_ms / 1000):
                    for pump in pumps:
                        await pump.done.wait()
                failed = False
            except trio.Cancelled:
                failed = False
                raise
            finally:
                # The ladder reads while the tree ends: the pause must not hold its drain.
                gate.release()
                try:
                    progress = lambda: sum(pump.read_bytes for pump in pumps)  # noqa: E731
                    await self._stop(tree, drained, progress, failed=failed)
                finally:
                    for scope in reading:
                        scope.cancel()


class _OutputGate:
    """A job's :class:`~supervisor._flow.FlowListener`: pauses the reading of its pipes.

    Paused, the multiplexer stops watching the pipes (the exit is still seen) and a
    :class:`_Pump` waits before its next read. :meth:`release` ends the pausing for good (the
    main process exited, or the job is over).
    """

    def __init__(self) -> None:
        self.paused = False
        #: How many times the job was paused (statistics, tests).
        self.pauses = 0
        self._released = False
        self._mux: _Multiplexer | None = None
        self._resumed = trio.Event()

    def attach(self, mux: _Multiplexer) -> None:
        self._mux = mux
        if self.paused:
            mux.pause_reading()

    def pause(self) -> None:
        if self._released or self.paused:
            return
        self.paused = True
        self.pauses += 1
        self._resumed = trio.Event()
        if self._mux is not None:
            self._mux.pause_reading()

    def resume(self) -> None:
        if not self.paused:
            return
        self.paused = False
        self._resumed.set()
        if self._mux is not None:
            self._mux.resume_reading()

    def release(self) -> None:
        self.resume()
        self._released = True

    async def wait_open(self) -> None:
        while self.paused:
            await self._resumed.wait()


class _Pump:
    """Reads one pipe to EOF (or until cancelled), emitting whole UTF-8 characters."""

    def __init__(
        self,
        stream_name: str,
        stream: trio.abc.ReceiveStream,
        emit_output: Callable[[str, str], None],
        gate: _OutputGate | None = None,
    ) -> None:
        self.stream_name = stream_name
        self.stream = stream
        self.emit_output = emit_output
        self.gate = gate
        self.done = trio.Event()
        #: Bytes read so far (the stop ladder's drain goes on while it grows).
        self.read_bytes = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    async def run(self) -> None:
        try:
            while True:
                if self.gate is not None:
                    await self.gate.wait_open()
                try:
                    data = await self.stream.receive_some(_READ_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                if not data:
                    break
                self.read_bytes += len(data)
                fault_point("job.output")
                text = self._decoder.decode(data)
                if text:
                    self.emit_output(self.stream_name, text)
        finally:
            # A character cut off by EOF or by the drain bound is still reported (U+FFFD).
            rest = self._decoder.decode(b"", final=True)
            if rest:
                self.emit_output(self.stream_name, rest)
            self.done.set()


class _ReportReader:
    """Reads a job's report pipe, cuts it into lines and reports each to the job's lanes."""

    def __init__(
        self, job: Job, stream: trio.lowlevel.FdStream, emit_output: Callable[[str, str], None]
    ) -> None:
        self.job = job
        self.stream = stream
        self.emit_output = emit_output
        self.done = trio.Event()
        self._buffer = bytearray()
        self._skipping = False  # inside a line past the bound: dropped up to its newline
        self._lines = 0
        self._ignored = 0

    async def run(self) -> None:
        try:
            while True:
                try:
                    data = await self.stream.receive_some(_READ_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                if not data:
                    if self._buffer and not self._skipping:
                        self._line(bytes(self._buffer))  # the last line, without a newline
                    self._buffer.clear()
                    break
                self._feed(data)
        finally:
            self.done.set()

    def _feed(self, data: bytes) -> None:
        start = 0
        while True:
            newline = data.find(b"\n", start)
            if newline < 0:
                break
            if self._skipping:
                self._skipping = False
            elif len(self._buffer) + newline - start > MAX_REPORT_LINE_BYTES:
                self._buffer.clear()
                self._too_long()
            else:
                self._buffer += data[start:newline]
                line, self._buffer = bytes(self._buffer), bytearray()
                self._line(line)
            start = newline + 1
        if self._skipping:
            return
        self._buffer += data[start:]
        if len(self._buffer) > MAX_REPORT_LINE_BYTES:
            # Memory stays bounded: the rest of this line is dropped as it comes.
            self._buffer.clear()
            self._skipping = True
            self._too_long()

    def _too_long(self) -> None:
        self._lines += 1
        self._ignore(f"it is longer than {MAX_REPORT_LINE_BYTES} bytes")

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        self._lines += 1
        try:
            value = loads(line, finite_only=True)
            check_request_values(value, "report")
        except (ValueError, CoreError) as exc:
            self._ignore(f"it is not JSON ({getattr(exc, 'message', exc)})")
            return
        if not isinstance(value, dict):
            self._ignore("it is not a JSON object")
            return
        if "progress" in value and len(value) == 1:
            progress = value["progress"]
            if not isinstance(progress, dict) or set(progress) != {"finished", "total"}:
                self._ignore('progress must be an object {"finished": N, "total": M}')
                return
            try:
                self.job.report_progress(progress["finished"], progress["total"])  # type: ignore[arg-type]
            except (TypeError, ValueError) as exc:  # the counts are checked there
                self._ignore(f"progress {exc}")
        else:
            self.job.report_record(value, size=len(line))

    def _ignore(self, why: str) -> None:
        self._ignored += 1
        if self._ignored == 1:
            self.emit_output(
                "stderr",
                f"\n[supervisor: report line {self._lines} ignored: {why}; later bad report"
                " lines are counted at the job's end]\n",
            )

    def close(self) -> None:
        """Close the pipe (idempotent) and name the ignored lines, if more than one."""
        self.stream.close()
        if self._ignored > 1:
            self.emit_output(
                "stderr", f"\n[supervisor: {self._ignored} report lines were ignored]\n"
            )
            self._ignored = 1


def job_cwd(request: JobRequest) -> str:
    """The working directory of a job: ``cwd`` resolved against ``root``, or ``root``.

    A relative ``cwd`` names a directory of the project, as in a lanes file; resolving it
    against the supervisor's own directory would make one request mean two things.
    """
    return request.root if request.cwd is None else os.path.join(request.root, request.cwd)


def check_job_launch(request: JobRequest) -> JobRequest:
    """Refuse a job that could not be started now; ``job.start`` admits only what passes.

    The checks the spawn itself makes (``open_process_tree``), done before the job is queued
    so that a request that can not run gets an error reply, and no job id, ``job.started``
    or ``job.finished`` (bad input starts nothing; ``process.run`` refuses the same inputs).
    A file system that changes before the job's turn still fails it at launch, with the
    code in ``job.finished`` (``errorCode``).

    Args:
        request: A parsed ``job.start`` request (``lanes.parse_job_start``).

    Returns:
        ``request`` with ``cwd`` absolute (see :func:`job_cwd`), or ``request`` itself when
        it has no ``cwd``.

    Raises:
        CoreError: ``launch_failed``, with details ``{"field": "root" | "cwd" | "argv", ...}``,
            when the root or the working directory is missing or not a directory, or when
            ``argv[0]`` is not found (on the PATH the job would get, or relative to its
            working directory when it holds a slash), is a directory or is not executable.
    """
    root = request.root
    problem = _directory_problem(root)
    if problem is not None:
        raise CoreError(
            "launch_failed",
            f"job.start: the project root {problem}: {root}",
            {"field": "root", "root": root},
        )
    workdir = job_cwd(request)
    if request.cwd is not None:
        problem = _directory_problem(workdir)
        if problem is not None:
            relative = "" if os.path.isabs(request.cwd) else " (cwd is relative to the root)"
            raise CoreError(
                "launch_failed",
                f"job.start: the working directory {problem}: {workdir}{relative}",
                {"field": "cwd", "cwd": workdir},
            )
    try:
        resolve_executable(request.argv[0], workdir, check_env(request.env))
    except CoreError as exc:
        raise CoreError(
            exc.code, f"job.start: {exc.message}", {"field": "argv", **(exc.details or {})}
        ) from None
    return request if request.cwd is None else dataclasses.replace(request, cwd=workdir)


def _directory_problem(path: str) -> str | None:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return "does not exist"
    return None if stat.S_ISDIR(mode) else "is not a directory"


def _record_exit(job: Job, returncode: int | None) -> None:
    """Store a subprocess-style status (negative: killed by that signal) on the job."""
    if returncode is None:
        job.exit_code = None
        job.signal = None
    elif returncode < 0:
        job.exit_code = None
        job.signal = -returncode
    else:
        job.exit_code = returncode
        job.signal = None
