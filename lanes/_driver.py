"""The Trio driver of the job lanes: it carries out what :class:`LanePolicy` decides.

Contract (docs/architecture.md "lanes/"), the cancel-scope tree::

    Lanes nursery                 (Lanes.run)
    `- job task                   one per running job, at most one per lane
       |- output flusher          coalesces job.output
       `- job cancel scope        deadline = start + timeout_ms -> runner(job, emit_output)

The driver never runs a process itself: it calls the :class:`JobRunner` it is given (the
supervisor plugs in one that runs ``job.request.argv`` as a process tree). Notifications go to
the synchronous ``on_event(method, params)`` callback, in order, wire-shaped:

- ``job.started {jobId, kind, root, argv}``, only for jobs that start;
- ``job.output {jobId, stream, text}``, coalesced per job and stream and bounded (see
  :class:`Lanes`); past the cap, at job end, one notice ``{jobId, stream, text,
  droppedBytes}`` followed by the stream's last output (its tail, where builds and tests
  print their summary);
- ``job.progress {jobId, finished, total}`` and ``job.record {jobId, record}``, only for a job
  started with ``report=True`` whose runner reports them (:meth:`Job.report_progress`,
  :meth:`Job.report_record`); progress is coalesced (the latest wins, at most one event per
  ``output_flush_ms``), records are bounded per job (see :class:`Lanes`); past the bound, at
  job end, one notice ``{jobId, record: null, droppedRecords}``;
- ``job.finished {jobId, kind, root, status, exitCode, signal, timedOut, durationMs}`` (plus
  ``error`` and ``errorCode`` when the runner raised): exactly once per job, after all of its
  ``job.output``.

Where the line between "the job failed" and "a bug" is drawn: each job is a supervision
boundary. An ``Exception`` raised out of the runner call is the job's failure (status
``failed``; ``error`` is its message and ``errorCode`` its catalog code: a ``CoreError``'s
own, such as ``launch_failed``, else ``internal`` with the exception's type name in
``error``) and the lane goes on; that includes a runner misusing ``emit_output``. An
unexpected exception elsewhere in the job's task (its output flusher: ours) ends that job
the same way (``internal``, logged with its traceback). What propagates to the lanes'
nursery and ends the lanes: cancellation from outside, ``KeyboardInterrupt`` /
``SystemExit``, an exception raised by ``on_event`` (the host's bug: the lanes can no longer
report anything), and an exception in the driver outside a job's task.
"""

from __future__ import annotations

import enum
import json
import logging
import math
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, final

import trio

from protocol import MAX_OUTPUT_BYTES, CoreError, CoreErrorCode

from ._policy import (
    CancelRunning,
    FinishQueued,
    JobState,
    JobStatus,
    LaneAction,
    LanePolicy,
    StartJob,
)
from ._request import JobRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from protocol import JSONObject, JSONValue

__all__ = ("Job", "JobRunner", "Lanes", "LanesStatistics", "open_lanes")

logger = logging.getLogger("lanes")

#: Default bound of one ``job.output`` event's text, and the pending size that flushes at once.
DEFAULT_MAX_OUTPUT_EVENT_BYTES = 64 * 1024
#: Default cap of the output forwarded per job and stream as it arrives (UTF-8 bytes).
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
#: Default size of the tail kept past that cap per job and stream, sent at job end (bytes).
DEFAULT_MAX_OUTPUT_TAIL_BYTES = 64 * 1024
#: The tail starts after its first newline if one lies in this leading fraction of it.
_TAIL_LINE_SEARCH_FRACTION = 4
#: Default delay after the first pending output before it is flushed (milliseconds).
DEFAULT_OUTPUT_FLUSH_MS = 50
#: Default number of finished jobs that :meth:`Lanes.list_jobs` still reports.
DEFAULT_KEEP_FINISHED = 64
#: Default cap of the ``job.record`` events sent per job (ours).
DEFAULT_MAX_RECORDS = 10_000
#: Default cap of the records' JSON size summed per job, in bytes (ours; 1 MiB, as output).
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024
#: The largest integer a JSON peer reads exactly (2^53 - 1): a progress count's bound.
_MAX_COUNT = 2**53 - 1

_STREAMS = ("stdout", "stderr")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _first_leaf(exc: BaseException) -> BaseException:
    return _leaves(exc)[0]


def _has_leaf(exc: BaseException, leaf: BaseException) -> bool:
    return any(found is leaf for found in _leaves(exc))


def _cut_utf8(data: bytes | memoryview, limit: int) -> int:
    """The largest length <= ``limit`` that ends ``data`` on a character boundary."""
    if len(data) <= limit:
        return len(data)
    end = limit
    # A UTF-8 continuation byte is 0b10xxxxxx: step back to the start of its character.
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return end


def _tail_start(data: bytes | bytearray) -> int:
    """Where a kept tail should start: after a newline near its start, else on a character.

    The tail is the last bytes of a stream, so it usually begins inside a line and may begin
    inside a character. A partial first line is skipped when a newline lies in the first
    quarter of the tail (so at most that much is given up); otherwise continuation bytes are
    skipped so that the text decodes cleanly.
    """
    newline = data.find(b"\n", 0, max(len(data) // _TAIL_LINE_SEARCH_FRACTION, 1))
    if 0 <= newline < len(data) - 1:
        return newline + 1
    start = 0
    # A UTF-8 character is at most 4 bytes: at most 3 continuation bytes to skip.
    while start < min(len(data), 3) and (data[start] & 0xC0) == 0x80:
        start += 1
    return start


def _encode(text: str) -> bytes:
    # surrogatepass: a runner that decoded with surrogateescape still round-trips exactly.
    return text.encode("utf-8", "surrogatepass")


def _decode(data: bytes | memoryview) -> str:
    return bytes(data).decode("utf-8", "surrogatepass")


class JobRunner(Protocol):
    """Runs one job to completion; the driver owns its deadline and its cancellation.

    The runner runs ``job.request.argv`` (no shell), calls ``emit_output(stream, text)`` with
    ``stream`` ``"stdout"`` or ``"stderr"`` and decoded text as output arrives, and sets
    ``job.exit_code`` / ``job.signal`` before it returns. It never applies the job's timeout
    itself: it is called inside the job's cancel scope, whose deadline is the timeout.

    **Cancellation:** on ``trio.Cancelled`` (cancel, supersede, deadline, or the lanes ending)
    the runner ends its process tree (shielded, bounded) and lets ``trio.Cancelled``
    propagate. ``emit_output`` may be called while cancelled; it never blocks.
    """

    async def __call__(self, job: Job, emit_output: Callable[[str, str], None]) -> None:
        """Run ``job``; see the class docstring."""


@final
class Job:
    """One job: its request, and the outcome the runner and the driver record.

    :class:`Lanes` creates the jobs; the constructor is public so that a runner can be tested
    on its own. The runner sets :attr:`exit_code` and :attr:`signal`; everything else is
    read-only and maintained by the driver.

    Args:
        job_id: The job's id (``"job-1"``, ...).
        request: What to run and on which lane.
    """

    def __init__(self, job_id: str, request: JobRequest) -> None:
        self.id = job_id
        self.request = request
        #: The main process's exit code, set by the runner; None if it never exited normally.
        self.exit_code: int | None = None
        #: The number of the signal that ended the main process, set by the runner, or None.
        self.signal: int | None = None
        self._state = JobState.QUEUED
        self._status: JobStatus | None = None
        self._timed_out = False
        self._error: str | None = None
        self._error_code: str | None = None
        self._started_at: float | None = None
        self._duration_ms = 0
        # Set by cancel/supersede/close: the status the job ends with, whatever the runner does.
        self._cancel_status: JobStatus | None = None
        self._scope: trio.CancelScope | None = None
        self._output: _JobOutput | None = None
        self._reports: _JobReports | None = None

    @property
    def state(self) -> JobState:
        """``queued``, ``running`` or ``finished``."""
        return self._state

    @property
    def status(self) -> JobStatus | None:
        """How the job ended, or None while it has not finished."""
        return self._status

    @property
    def timed_out(self) -> bool:
        """True when the job ended ``failed`` because its deadline passed."""
        return self._timed_out

    @property
    def error(self) -> str | None:
        """Why the runner failed, or None: a ``CoreError``'s message, else
        ``"TypeName: message"`` of the exception it raised."""
        return self._error

    @property
    def error_code(self) -> str | None:
        """The catalog code of :attr:`error` (``"launch_failed"``, ``"internal"``, ...), or
        None."""
        return self._error_code

    @property
    def duration_ms(self) -> int:
        """Milliseconds from start to finish (Trio clock); 0 for a job that never started."""
        return self._duration_ms

    def report_progress(self, finished: int, total: int) -> None:
        """Report how far the job is: ``finished`` of ``total`` steps (``job.progress``).

        For a runner, while the job runs; never blocks. The latest report wins: at most one
        ``job.progress`` is sent per ``output_flush_ms``, and the last one before
        ``job.finished``.

        Raises:
            TypeError: A count is not an int.
            ValueError: A count is negative or above 2^53 - 1, or ``finished > total``.
            RuntimeError: The job was not started with ``report=True``, or is not running.
        """
        for name, value in (("finished", finished), ("total", total)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            if not 0 <= value <= _MAX_COUNT:
                raise ValueError(f"{name} must be from 0 to 2^53 - 1, got {value}")
        if finished > total:
            raise ValueError(f"finished ({finished}) must not exceed total ({total})")
        self._report_channel().progress(finished, total)

    def report_record(self, record: JSONValue, *, size: int | None = None) -> None:
        """Report a record of the job's stream (``job.record {jobId, record}``), sent at once.

        For a runner, while the job runs; never blocks. Past the per-job bounds (a count
        and a byte total, see :class:`Lanes`) records are counted and dropped, and one
        notice follows at job end.

        Args:
            record: Any JSON value; the lanes give it no meaning.
            size: Its encoded JSON size in bytes, when the caller knows it (a runner that
                read and checked it as a line); else it is measured here, which also
                refuses what no JSON text can carry.

        Raises:
            TypeError: ``record`` is not JSON-encodable.
            RuntimeError: The job was not started with ``report=True``, or is not running.
        """
        reports = self._report_channel()
        if size is None:
            try:
                size = len(json.dumps(record, ensure_ascii=False, allow_nan=False).encode())
            except ValueError as exc:  # circular, a non-finite number, a lone surrogate
                raise TypeError(f"record is not JSON: {exc}") from None
        reports.record(record, size)

    def _report_channel(self) -> _JobReports:
        if self._reports is None:
            raise RuntimeError(f"job {self.id} reports nothing: it was not started with report")
        return self._reports

    def __repr__(self) -> str:
        return (
            f"<Job {self.id} {self.request.kind.value} {self.request.root!r}"
            f" {self._state.value}{' ' + self._status.value if self._status else ''}>"
        )


class _JobOutput:
    """Coalesces one job's output into bounded ``job.output`` events.

    Pending output is kept as encoded bytes per stream (insertion order of the dict = the
    order in which streams got pending data, which is the order they are flushed in). It is
    flushed when a stream holds ``max_event_bytes`` or more, ``flush_s`` after the first
    pending write, and at job end. Accepted bytes per stream are capped at ``max_bytes``
    (pending bytes included, so memory stays bounded). Past the cap the most recent
    ``max_tail_bytes`` per stream are kept in a ring (a bytearray trimmed from the front) and
    sent at job end after the dropped-bytes notice; the rest is counted and dropped.
    """

    def __init__(
        self,
        job_id: str,
        notify: Callable[[str, JSONObject], None],
        *,
        max_event_bytes: int,
        max_bytes: int,
        max_tail_bytes: int,
        flush_s: float,
    ) -> None:
        self._job_id = job_id
        self._notify = notify
        self._max_event_bytes = max_event_bytes
        self._max_bytes = max_bytes
        self._max_tail_bytes = max_tail_bytes
        # Per stream, made when its output first passes the cap.
        self._tail: dict[str, bytearray] = {}
        self._flush_s = flush_s
        self._pending: dict[str, list[bytes]] = {}
        self._pending_bytes = dict.fromkeys(_STREAMS, 0)
        self._accepted = dict.fromkeys(_STREAMS, 0)
        self._dropped = dict.fromkeys(_STREAMS, 0)
        self._closed = False
        self._have_data = trio.Event()
        # The flusher task starts with the first output (see ``attach``).
        self._nursery: trio.Nursery | None = None
        self._flusher_started = False

    def attach(self, nursery: trio.Nursery) -> None:
        """Run :meth:`flush_loop` in ``nursery`` once the first output arrives.

        A job that prints nothing (most short ones) then costs no flusher task: at
        thousands of jobs that task's start and cancellation are a visible share of the
        driver's time.
        """
        self._nursery = nursery

    def emit(self, stream: str, text: str) -> None:
        """The ``emit_output`` callable given to the runner; never blocks.

        Once a stream holds ``max_event_bytes`` pending, its ``job.output`` events go to
        ``on_event`` from this call, so a runner's reader meets the host's flow control
        before its next read.

        Raises:
            ValueError: ``stream`` is not ``"stdout"`` or ``"stderr"``.
            TypeError: ``text`` is not a ``str``.
            RuntimeError: The job has already finished.
            Exception: Whatever ``on_event`` raised (the host's bug: the lanes end with it).
        """
        if stream not in _STREAMS:
            raise ValueError(f"stream must be 'stdout' or 'stderr', not {stream!r}")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        if self._closed:
            raise RuntimeError(f"job {self._job_id} has finished; its output is closed")
        if not text:
            return
        data = _encode(text)
        room = self._max_bytes - self._accepted[stream]
        if len(data) > room:
            keep = _cut_utf8(data, max(room, 0))
            self._overflow(stream, memoryview(data)[keep:])
            data = data[:keep]
            if not data:
                return
        self._accepted[stream] += len(data)
        self._pending.setdefault(stream, []).append(data)
        self._pending_bytes[stream] += len(data)
        if self._pending_bytes[stream] >= self._max_event_bytes:
            # At the size bound the output goes out from the reader's own call, not from the
            # flusher task: the host's queue (and through it flow control's pause) then sees
            # it before the reader's next read. Left to the flusher, a loaded machine let the
            # reader take several more MiB first, past what the queue keeps per job.
            self.flush()
            return
        self._have_data.set()
        if not self._flusher_started and self._nursery is not None:
            self._flusher_started = True
            self._nursery.start_soon(self.flush_loop)

    def _overflow(self, stream: str, data: memoryview) -> None:
        """Keep the last ``max_tail_bytes`` of what is past the cap; count the rest dropped."""
        self._dropped[stream] += len(data)
        limit = self._max_tail_bytes
        if limit == 0:
            return
        tail = self._tail.setdefault(stream, bytearray())
        if len(data) >= limit:
            tail[:] = data[len(data) - limit :]
        else:
            tail += data
            if len(tail) > limit:
                del tail[: len(tail) - limit]

    async def flush_loop(self) -> None:
        """Flush pending output ``flush_s`` after it appears (:meth:`emit` flushes at once
        past the size bound)."""
        while True:
            await self._have_data.wait()
            await trio.sleep(self._flush_s)
            # No checkpoint from here to the end of flush(): no emit can slip in between.
            self._have_data = trio.Event()
            self.flush()

    def flush(self) -> None:
        """Send every pending byte as ``job.output`` events of at most ``max_event_bytes``."""
        pending, self._pending = self._pending, {}
        for stream, parts in pending.items():
            self._pending_bytes[stream] = 0
            self._send(stream, memoryview(b"".join(parts)))

    def _send(self, stream: str, view: memoryview) -> None:
        while view:
            size = _cut_utf8(view, self._max_event_bytes)
            self._notify(
                "job.output",
                {"jobId": self._job_id, "stream": stream, "text": _decode(view[:size])},
            )
            view = view[size:]

    def close(self) -> None:
        """Flush, then per stream past its cap a notice and the kept tail; refuse more output.

        The notice's ``droppedBytes`` counts the bytes that are sent nowhere (those past the
        cap minus the tail that follows it).
        """
        self._closed = True
        self.flush()
        for stream in _STREAMS:
            past_cap = self._dropped[stream]
            if not past_cap:
                continue
            tail = self._tail.pop(stream, None) or bytearray()
            # A ring that held everything past the cap continues the head exactly; a trimmed
            # one starts anywhere, maybe inside a character: cut it at a boundary.
            start = 0 if len(tail) == past_cap else _tail_start(tail)
            kept = memoryview(bytes(tail[start:]))
            dropped = past_cap - len(kept)
            if dropped:
                follows = f"; its last {len(kept)} bytes follow" if kept else ""
                self._notify(
                    "job.output",
                    {
                        "jobId": self._job_id,
                        "stream": stream,
                        "text": (
                            f"\n[supervisor: {dropped} bytes of {stream} dropped: the"
                            f" {self._max_bytes}-byte output cap was reached{follows}]\n"
                        ),
                        "droppedBytes": dropped,
                    },
                )
            self._send(stream, kept)


class _JobReports:
    """One job's ``job.progress`` and ``job.record`` events.

    Progress is a state, so only the latest counts: it is sent at once when no progress
    was sent in the last ``flush_s``, else when that interval has passed (by a task that
    starts with the first report), and at job end. A record is sent at once, after any
    pending progress (so the two keep the order they were reported in); past
    ``max_records`` records or ``max_record_bytes`` of them per job, records are counted
    and dropped, and :meth:`close` sends one notice.
    """

    def __init__(
        self,
        job_id: str,
        notify: Callable[[str, JSONObject], None],
        *,
        max_records: int,
        max_record_bytes: int,
        flush_s: float,
    ) -> None:
        self._job_id = job_id
        self._notify = notify
        self._max_records = max_records
        self._max_record_bytes = max_record_bytes
        self._flush_s = flush_s
        self._pending: tuple[int, int] | None = None
        self._records = 0
        self._record_bytes = 0
        self._dropped = 0
        self._closed = False
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._flusher_started = False

    def attach(self, nursery: trio.Nursery) -> None:
        """Run the progress flusher in ``nursery`` once the first progress arrives."""
        self._nursery = nursery

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"job {self._job_id} has finished; its reports are closed")

    def progress(self, finished: int, total: int) -> None:
        self._check_open()
        self._pending = (finished, total)
        self._wake.set()
        if not self._flusher_started and self._nursery is not None:
            self._flusher_started = True
            self._nursery.start_soon(self._flush_loop)

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self._flush_progress()
            await trio.sleep(self._flush_s)

    def _flush_progress(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            finished, total = pending
            self._notify(
                "job.progress", {"jobId": self._job_id, "finished": finished, "total": total}
            )

    def record(self, record: JSONValue, size: int) -> None:
        self._check_open()
        if self._records >= self._max_records or self._record_bytes + size > self._max_record_bytes:
            self._dropped += 1
            return
        self._records += 1
        self._record_bytes += size
        self._flush_progress()
        self._notify("job.record", {"jobId": self._job_id, "record": record})

    def close(self) -> None:
        """Send the pending progress and, if records were dropped, one notice; refuse more."""
        self._closed = True
        self._flush_progress()
        if self._dropped:
            self._notify(
                "job.record",
                {"jobId": self._job_id, "record": None, "droppedRecords": self._dropped},
            )


@dataclass(frozen=True, slots=True)
class LanesStatistics:
    """A snapshot of the lanes (trio's ``statistics()`` convention).

    Attributes:
        queued: Jobs waiting in a lane.
        running: Jobs whose runner is running (including ones being cancelled).
        finished: Jobs finished since the lanes started (any status, including denied).
        peak_queued: The largest ``queued`` seen so far.
        lanes: Lanes with a queued or running job.
    """

    queued: int
    running: int
    finished: int
    peak_queued: int
    lanes: int


class _Phase(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


class Lanes(trio.abc.AsyncResource):
    """Per-project job lanes run by Trio: one job at a time per lane.

    A lane is a project root (the IDE's rule), or a name a request gives
    (:attr:`JobRequest.lane`: jobs of one project side by side); ``max_running`` bounds
    how many run at once over every lane.

    Use ``async with open_lanes(runner, on_event=...) as lanes:``, or build one and
    ``await nursery.start(lanes.run)``. Scheduling follows :class:`LanePolicy`.

    Output is coalesced per job and stream: a ``job.output`` event carries at most
    ``max_output_event_bytes`` of UTF-8 text (cut on a character boundary); pending output is
    sent ``output_flush_ms`` after it appears, at once when a stream holds
    ``max_output_event_bytes``, and at job end. Each job forwards at most ``max_output_bytes``
    per stream as the output arrives. Past that cap the last ``max_output_tail_bytes`` per
    stream are kept (where builds and tests print their summary): at job end one notice per
    stream (``droppedBytes``: the bytes sent nowhere) is followed by that tail, which starts
    on a line boundary when a newline lies in its first quarter, else on a character
    boundary. Memory per job and stream stays within about ``max_output_bytes`` (pending) plus
    ``max_output_tail_bytes``. stdout and stderr are coalesced separately, so their relative
    order is kept only at flush granularity.

    Args:
        runner: Runs one job (see :class:`JobRunner`).
        on_event: Called synchronously, in order, with ``(method, params)`` for every
            ``job.started``, ``job.output``, ``job.progress``, ``job.record`` and
            ``job.finished``. It may be called from within
            :meth:`start_job`, :meth:`cancel_job` and :meth:`aclose` (``job.started`` of a job
            that starts at once; ``job.finished`` of a job that never started: denied,
            replaced, cancelled while waiting), so a host that must answer ``job.start``
            before sending notifications should queue them. It must not block or raise; an
            exception from it is a bug: it propagates out of the call that made it (or out
            of the lanes' nursery, ending the lanes).
        trusted: False declares the workspace untrusted: ``build`` and ``test`` end ``denied``.
        max_output_event_bytes: Bound of one event's text in bytes (>= 4, default 64 KiB).
        max_output_bytes: Output forwarded per job and stream as it arrives, in bytes (>= 0,
            default 1 MiB).
        max_output_tail_bytes: The tail kept past that cap per job and stream and sent at
            job end, in bytes (>= 0, default 64 KiB; 0 keeps no tail). This and
            ``max_output_event_bytes`` are at most :data:`protocol.MAX_OUTPUT_BYTES` (64 MiB).
        output_flush_ms: Delay in milliseconds before pending output is sent (>= 0, default
            50).
        keep_finished: How many finished jobs :meth:`list_jobs` still reports (>= 0, default
            64); memory stays bounded however many jobs run.
        max_records: ``job.record`` events sent per job (>= 0, default 10 000).
        max_record_bytes: The records' JSON size summed per job, in bytes (>= 0, default
            1 MiB); past either bound records are dropped and counted (one notice
            ``{jobId, record: null, droppedRecords}`` at job end).
        max_running: The most jobs that run at once over every lane (>= 1), or None for no
            bound (one per lane). A job its lane starts while that many run waits, in the
            order the lanes started them, still ``queued``: its ``job.started`` comes, and
            its deadline starts, when a slot frees. Cancelling or superseding it ends it as
            a job that never started.

    Raises:
        ValueError: A bound is out of range.
    """

    def __init__(
        self,
        runner: JobRunner,
        *,
        on_event: Callable[[str, JSONObject], None],
        trusted: bool = True,
        max_output_event_bytes: int = DEFAULT_MAX_OUTPUT_EVENT_BYTES,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_output_tail_bytes: int = DEFAULT_MAX_OUTPUT_TAIL_BYTES,
        output_flush_ms: int = DEFAULT_OUTPUT_FLUSH_MS,
        keep_finished: int = DEFAULT_KEEP_FINISHED,
        max_records: int = DEFAULT_MAX_RECORDS,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        max_running: int | None = None,
    ) -> None:
        if max_running is not None and max_running < 1:
            raise ValueError("max_running must be at least 1 (or None: no bound)")
        if max_output_event_bytes < 4:
            # Below 4 bytes a single UTF-8 character might not fit in an event.
            raise ValueError("max_output_event_bytes must be at least 4")
        # The bound on kept output (protocol.MAX_OUTPUT_BYTES) holds for what is kept: the
        # tail of every job and stream, and one event's text. ``max_output_bytes`` is output
        # passed on as it arrives, never kept whole (`supervisor run --log-dir` forwards 1 GiB).
        for name, value in (
            ("max_output_tail_bytes", max_output_tail_bytes),
            ("max_output_event_bytes", max_output_event_bytes),
        ):
            if value > MAX_OUTPUT_BYTES:
                raise ValueError(f"{name} must be at most {MAX_OUTPUT_BYTES}")
        if max_output_bytes < 0:
            raise ValueError("max_output_bytes must not be negative")
        if max_output_tail_bytes < 0:
            raise ValueError("max_output_tail_bytes must not be negative")
        if output_flush_ms < 0:
            raise ValueError("output_flush_ms must not be negative")
        if keep_finished < 0:
            raise ValueError("keep_finished must not be negative")
        if max_records < 0 or max_record_bytes < 0:
            raise ValueError("max_records and max_record_bytes must not be negative")
        self._max_records = max_records
        self._max_record_bytes = max_record_bytes
        self._runner = runner
        self._on_event = on_event
        self._trusted = trusted
        self._max_output_event_bytes = max_output_event_bytes
        self._max_output_bytes = max_output_bytes
        self._max_output_tail_bytes = max_output_tail_bytes
        self._output_flush_s = output_flush_ms / 1000
        self._phase = _Phase.NEW
        #: The exception on_event raised, if it did (the host's bug: never contained).
        self._host_error: BaseException | None = None
        self._nursery: trio.Nursery | None = None
        #: Lane key (:attr:`JobRequest.lane_key`) -> its policy.
        self._lanes: dict[str, LanePolicy] = {}
        self._max_running = max_running
        #: Jobs their lane started while ``max_running`` ran: they wait here for a slot.
        self._parked: deque[tuple[LanePolicy, Job]] = deque()
        self._jobs: dict[str, Job] = {}  # unfinished jobs, in submission order
        self._recent: deque[Job] = deque(maxlen=keep_finished)
        self._next_number = 1
        self._queued = 0
        self._running = 0
        self._finished = 0
        self._peak_queued = 0
        self._idle = trio.Event()
        self._idle.set()
        self._close_requested = trio.Event()
        self._done = trio.Event()

    # -- configuration and queries -------------------------------------------------------

    @property
    def trusted(self) -> bool:
        """Whether the workspace is trusted; settable (it applies to jobs started later)."""
        return self._trusted

    @trusted.setter
    def trusted(self, value: bool) -> None:
        self._trusted = bool(value)

    def statistics(self) -> LanesStatistics:
        """Return a snapshot of the queued, running and finished counts."""
        return LanesStatistics(
            queued=self._queued,
            running=self._running,
            finished=self._finished,
            peak_queued=self._peak_queued,
            lanes=len(self._lanes),
        )

    def list_jobs(self) -> list[JSONObject]:
        """Return the unfinished jobs and the last ``keep_finished`` finished ones.

        Returns:
            ``[{id, kind, root, state}]`` in submission order (``mcpp-ide/job/list``); a
            finished job also has ``status``.
        """
        jobs = sorted(
            [*self._recent, *self._jobs.values()], key=lambda job: int(job.id.rpartition("-")[2])
        )
        listed: list[JSONObject] = []
        for job in jobs:
            entry: JSONObject = {
                "id": job.id,
                "kind": job.request.kind.value,
                "root": job.request.root,
                "state": job.state.value,
            }
            if job.status is not None:
                entry["status"] = job.status.value
            listed.append(entry)
        return listed

    # -- commands ------------------------------------------------------------------------

    def start_job(self, request: JobRequest) -> str:
        """Queue a job on its lane (and start it at once if the lane is free).

        Args:
            request: The job; its normalized ``root`` names the lane.

        Returns:
            The new job's id, unique for these lanes (``"job-1"``, ``"job-2"``, ...).

        Raises:
            TypeError: ``request`` is not a :class:`JobRequest`.
            RuntimeError: The lanes are not running (before :meth:`run` started, or after
                :meth:`aclose`).
        """
        if not isinstance(request, JobRequest):
            raise TypeError(f"request must be a JobRequest, not {type(request).__name__}")
        if self._phase is not _Phase.RUNNING:
            raise RuntimeError(f"the lanes are {self._phase.value}: they accept no job")
        job_id = f"job-{self._next_number}"
        self._next_number += 1
        job = Job(job_id, request)
        self._jobs[job_id] = job
        self._queued += 1
        if self._idle.is_set():
            self._idle = trio.Event()
        key = request.lane_key
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = LanePolicy(key)
        actions = lane.submit(
            job_id, request.kind, supersede=request.supersede, trusted=self._trusted
        )
        self._execute(lane, actions)
        self._peak_queued = max(self._peak_queued, self._queued)
        return job_id

    def cancel_job(self, job_id: str) -> bool:
        """Cancel a queued or running job; it ends ``cancelled``.

        A queued job ends at once (its ``job.finished`` is sent before this returns); a
        running job's scope is cancelled and it ends when its runner has cleaned up.

        Args:
            job_id: The job's id.

        Returns:
            True if the job was queued or running and is now cancelled; False for an unknown
            or finished job, or a running one already being cancelled or superseded.
        """
        job = self._jobs.get(job_id)
        if job is None:
            return False
        lane = self._lanes[job.request.lane_key]
        actions = lane.cancel(job_id, JobStatus.CANCELLED)
        self._execute(lane, actions)
        return bool(actions)

    async def wait_idle(self) -> None:
        """Wait until no job is queued or running (every started job has sent job.finished).

        **Cancellation:** safe to cancel; nothing is lost.
        """
        if not self._jobs:
            await trio.lowlevel.checkpoint()
            return
        while self._jobs:
            await self._idle.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the lanes until :meth:`aclose`: every job task lives in this call's nursery.

        Works with ``await nursery.start(lanes.run)``, which returns once jobs can be started.
        Returns after :meth:`aclose` once every job has finished.

        **Cancellation:** cancelling this call cancels every running job (each runner cleans
        up its process tree), ends every job ``cancelled`` (each still gets its one
        ``job.finished``) and closes the lanes.

        Raises:
            RuntimeError: ``run`` was already called, or the lanes were closed before it.
        """
        if self._phase is not _Phase.NEW:
            raise RuntimeError("Lanes.run can only be called once, before aclose()")
        self._phase = _Phase.RUNNING
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await self._close_requested.wait()
                # aclose() has cancelled every job; the nursery now waits for their cleanup.
        finally:
            # Reached normally after aclose(), or when cancelled from outside: jobs still
            # waiting end now (running ones ended in their own tasks).
            self._close_all()
            self._phase = _Phase.CLOSED
            self._nursery = None
            self._done.set()

    async def aclose(self) -> None:
        """Close the lanes: cancel every queued and running job (``cancelled``), then wait.

        Idempotent; a second call waits for the first one's cleanup. Every job is cancelled
        before the first checkpoint, so even a cancelled ``aclose`` leaves nothing to start;
        it then waits until every runner has cleaned up. Do not call it from inside a runner
        (it would wait for itself).

        **Cancellation:** if cancelled while waiting, the jobs are already cancelled and
        finish in the lanes' nursery; ``trio.Cancelled`` propagates.
        """
        if self._phase is _Phase.NEW:
            self._phase = _Phase.CLOSED
            self._done.set()
        elif self._phase is _Phase.RUNNING:
            self._phase = _Phase.CLOSING
            self._close_all()
            self._close_requested.set()
        await self._done.wait()

    # -- the driver ----------------------------------------------------------------------

    def _notify(self, method: str, params: JSONObject) -> None:
        try:
            self._on_event(method, params)
        except BaseException as exc:
            # The host's bug, never a job's failure: remembered so that the job boundary
            # lets it through.
            self._host_error = exc
            raise

    def _contained_failure(self, exc: BaseException) -> Exception | None:
        """The failure a job's boundary contains in ``exc``, or None when all must propagate.

        Contained: an ``Exception`` (or a group of them) that is not ``on_event``'s. Not:
        cancellation, ``KeyboardInterrupt``, ``SystemExit`` (alone or in a group with a
        failure: then the lanes end anyway) and the host's error.
        """
        if isinstance(exc, BaseExceptionGroup):
            failure, rest = exc.split(Exception)
            if rest is not None:
                return None
            exc = failure if failure is not None else exc
        if not isinstance(exc, Exception):
            return None
        host = self._host_error
        if host is not None and _has_leaf(exc, host):
            return None
        return exc

    def _close_all(self) -> None:
        for lane in list(self._lanes.values()):
            self._execute(lane, lane.cancel_all(JobStatus.CANCELLED))

    def _execute(self, lane: LanePolicy, actions: list[LaneAction]) -> None:
        for action in actions:
            job = self._jobs.get(action.job_id)
            if job is None:
                # Only after a job task ended by an exception (finished in its own task).
                continue
            if isinstance(action, StartJob):
                if self._max_running is not None and (
                    self._parked or self._running >= self._max_running
                ):
                    # Behind the jobs already waiting for a slot: first started, first run.
                    self._parked.append((lane, job))
                else:
                    self._start(lane, job)
            elif isinstance(action, CancelRunning):
                job._cancel_status = action.status
                if job._scope is not None:
                    job._scope.cancel()
                elif self._unpark_job(job):
                    # Waiting for a slot: it never started, so it ends now, and its lane
                    # moves on as after any running job.
                    self._finish(job, action.status)
                    self._execute(lane, lane.job_ended(job.id))
            else:
                assert isinstance(action, FinishQueued)
                self._finish(job, action.status)
        if lane.idle and self._lanes.get(lane.root) is lane:
            del self._lanes[lane.root]

    def _start(self, lane: LanePolicy, job: Job) -> None:
        assert self._nursery is not None  # jobs start only while running
        job._state = JobState.RUNNING
        job._started_at = trio.current_time()
        self._queued -= 1
        self._running += 1
        # Sent here rather than in the job's task, so that job.started events come in the
        # order the jobs started (trio shuffles new tasks).
        self._notify(
            "job.started",
            {
                "jobId": job.id,
                "kind": job.request.kind.value,
                "root": job.request.root,
                "argv": list(job.request.argv),
            },
        )
        self._nursery.start_soon(self._run_job, lane, job, name=f"lanes {job.id}")

    def _unpark_job(self, job: Job) -> bool:
        """Take ``job`` out of the jobs waiting for a slot; False when it is not one."""
        for index, (_lane, parked) in enumerate(self._parked):
            if parked is job:
                del self._parked[index]
                return True
        return False

    def _start_parked(self) -> None:
        """Start the jobs waiting for a slot, oldest first, while slots are free."""
        while self._parked and (self._max_running is None or self._running < self._max_running):
            lane, job = self._parked.popleft()
            self._start(lane, job)

    async def _run_job(self, lane: LanePolicy, job: Job) -> None:
        request = job.request
        assert job._started_at is not None  # set by StartJob
        output = job._output = _JobOutput(
            job.id,
            self._notify,
            max_event_bytes=self._max_output_event_bytes,
            max_bytes=self._max_output_bytes,
            max_tail_bytes=self._max_output_tail_bytes,
            flush_s=self._output_flush_s,
        )
        reports: _JobReports | None = None
        if request.report:
            reports = job._reports = _JobReports(
                job.id,
                self._notify,
                max_records=self._max_records,
                max_record_bytes=self._max_record_bytes,
                flush_s=self._output_flush_s,
            )
        deadline = math.inf
        if request.timeout_ms is not None:
            deadline = job._started_at + request.timeout_ms / 1000
        scope = job._scope = trio.CancelScope(deadline=deadline)
        if job._cancel_status is not None:
            # Cancelled between StartJob and this task's first step.
            scope.cancel()
        error: tuple[str, str] | None = None
        try:
            async with trio.open_nursery() as output_nursery:
                output.attach(output_nursery)
                if reports is not None:
                    reports.attach(output_nursery)
                # The try sits outside the scope so that the scope first strips its own
                # Cancelled out of any exception group the runner raises.
                try:
                    with scope:
                        await self._runner(job, output.emit)
                except CoreError as exc:
                    error = (exc.code, exc.message)
                except Exception as exc:
                    host = self._host_error
                    if host is not None and _has_leaf(exc, host):
                        # on_event raised inside the runner's emit_output (output at the
                        # size bound goes out from there): the host's bug, not the job's.
                        raise
                    error = (CoreErrorCode.INTERNAL.value, f"{type(exc).__name__}: {exc}")
                output_nursery.cancel_scope.cancel()
        except BaseException as exc:
            failure = self._contained_failure(exc)
            if failure is None:
                self._end_job_and_lanes(job)
                raise
            # Our bug inside this job's task: it ends this job only (its runner was
            # cancelled with the output nursery and ended its processes), the lane goes on.
            logger.error("job %s failed inside its task", job.id, exc_info=failure)
            leaf = _first_leaf(failure)
            error = (CoreErrorCode.INTERNAL.value, f"{type(leaf).__name__}: {leaf}")
        job._scope = None
        timed_out = job._cancel_status is None and scope.cancel_called
        if job._cancel_status is not None:
            status = job._cancel_status
        elif timed_out or error is not None or job.exit_code != 0:
            status = JobStatus.FAILED
        else:
            status = JobStatus.OK
        self._finish(job, status, timed_out=timed_out, error=error)
        self._execute(lane, lane.job_ended(job.id))
        self._start_parked()

    def _end_job_and_lanes(self, job: Job) -> None:
        """Cancelled from outside (the lanes are ending) or an error that must propagate:
        the job still finishes exactly once, then the exception goes on."""
        job._scope = None
        self._finish(job, job._cancel_status or JobStatus.CANCELLED)
        # The lanes' nursery is ending either way: close now so that no queued job of
        # this lane starts behind a job its policy still counts as running.
        if self._phase is _Phase.RUNNING:
            self._phase = _Phase.CLOSING
        self._close_all()

    def _finish(
        self,
        job: Job,
        status: JobStatus,
        *,
        timed_out: bool = False,
        error: tuple[str, str] | None = None,
    ) -> None:
        """Record the end of ``job`` and send its ``job.finished``.

        ``error`` is ``(catalog code, message)`` of a runner that raised.
        """
        assert job.state is not JobState.FINISHED, job
        if job.state is JobState.RUNNING:
            self._running -= 1
        else:
            self._queued -= 1
        if job._started_at is not None:
            job._duration_ms = round((trio.current_time() - job._started_at) * 1000)
        job._state = JobState.FINISHED
        job._status = status
        job._timed_out = timed_out
        job._error_code, job._error = error if error is not None else (None, None)
        del self._jobs[job.id]
        self._recent.append(job)
        self._finished += 1
        if job._output is not None:
            job._output.close()
        if job._reports is not None:
            job._reports.close()
        params: JSONObject = {
            "jobId": job.id,
            "kind": job.request.kind.value,
            "root": job.request.root,
            "status": status.value,
            "exitCode": job.exit_code,
            "signal": job.signal,
            "timedOut": timed_out,
            "durationMs": job.duration_ms,
        }
        if error is not None:
            params["errorCode"], params["error"] = error
        self._notify("job.finished", params)
        if not self._jobs:
            self._idle.set()


@asynccontextmanager
async def open_lanes(
    runner: JobRunner,
    *,
    on_event: Callable[[str, JSONObject], None],
    trusted: bool = True,
    max_output_event_bytes: int = DEFAULT_MAX_OUTPUT_EVENT_BYTES,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    max_output_tail_bytes: int = DEFAULT_MAX_OUTPUT_TAIL_BYTES,
    output_flush_ms: int = DEFAULT_OUTPUT_FLUSH_MS,
    keep_finished: int = DEFAULT_KEEP_FINISHED,
    max_records: int = DEFAULT_MAX_RECORDS,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    max_running: int | None = None,
) -> AsyncIterator[Lanes]:
    """Run :class:`Lanes` for the body of an ``async with`` block.

    The arguments are those of :class:`Lanes`. Leaving the block (normally or by an
    exception) calls :meth:`Lanes.aclose`: every job still queued or running ends
    ``cancelled`` and its runner has cleaned up before the block exits.

    **Cancellation:** cancelling the block cancels every job, as :meth:`Lanes.run` says.
    """
    lanes = Lanes(
        runner,
        on_event=on_event,
        trusted=trusted,
        max_output_event_bytes=max_output_event_bytes,
        max_output_bytes=max_output_bytes,
        max_output_tail_bytes=max_output_tail_bytes,
        output_flush_ms=output_flush_ms,
        keep_finished=keep_finished,
        max_records=max_records,
        max_record_bytes=max_record_bytes,
        max_running=max_running,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(lanes.run)
        try:
            yield lanes
        finally:
            # Unshielded on purpose: if this is cancelled, the nursery still waits for run(),
            # which returns only once every job has finished.
            await lanes.aclose()
