"""``job.*``: the job lanes, and their events."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

import msgspec

from ._base import (
    MAX_MILLISECONDS,
    Argv,
    Env,
    Event,
    JsonObject,
    NonEmpty,
    Ordered,
    Path,
    Payload,
    Result,
    WaitMilliseconds,
)

__all__ = (
    "COMMANDS",
    "EVENTS",
    "ORDER",
    "JobCancel",
    "JobCancelResult",
    "JobEvent",
    "JobEvents",
    "JobFinished",
    "JobInfo",
    "JobKind",
    "JobList",
    "JobOutput",
    "JobPollEvents",
    "JobProgress",
    "JobRecord",
    "JobStart",
    "JobStartResult",
    "JobStarted",
    "JobWaitEvents",
)

#: A job's kind (ide-backend-protocol ``mcpp-ide/job/start``).
JobKind: TypeAlias = Literal["build", "test", "pack", "toolchain", "add", "command"]
#: How a job ended.
JobStatus: TypeAlias = Literal["ok", "failed", "cancelled", "denied", "superseded"]


class JobStart(Payload, kw_only=True):
    """``job.start``: queue a job on its project's lane (one lane per project root; one job
    at a time per lane, in submission order).

    Attributes:
        kind: What the job is (``build``, ``test``, ``pack``, ``toolchain``, ``add``,
            ``command``): a ``build`` or ``test`` submitted while one of the same kind waits
            on the lane replaces the waiting one (it ends ``superseded``); an untrusted
            workspace denies ``build`` and ``test``. The kind does not choose the lane.
        root: The project root, absolute: the lane the job runs on.
        argv: The program and its arguments.
        cwd: The working directory: absolute, or relative to ``root`` (default: ``root``).
        env: Environment changes (null removes a variable).
        timeout_milliseconds: Ends the job ``failed`` (``timedOut``) after this long; 0 or
            absent: no deadline (as ``process.run``'s 0 and a lanes file's ``timeout_ms = 0``).
        supersede: Cancel the lane's running job, whatever its kind (it ends
            ``superseded``); jobs waiting on the lane are not touched. This job is then
            queued like any other: behind the jobs already waiting, or in the place of the
            waiting ``build``/``test`` of its kind it replaces. It does not jump the queue.
        report: Give the job a report channel: JSON lines on the descriptor
            ``SUPERVISOR_REPORT_FD`` names become ``job.progress`` / ``job.record``.
    """

    kind: JobKind
    root: Path
    argv: Argv
    cwd: Path | None = None
    env: Env | None = None
    timeout_milliseconds: Annotated[int, msgspec.Meta(ge=0, le=MAX_MILLISECONDS)] | None = None
    supersede: bool | None = None
    report: bool | None = None


class JobStartResult(Result, kw_only=True):
    """``job.start``: the new job's id.

    Attributes:
        job_id: The id the supervisor gave the job just admitted: ``job.cancel`` takes it and
            every event of the job carries it.
    """

    job_id: str


class JobCancel(Payload, kw_only=True):
    """``job.cancel``: cancel a queued or running job."""

    job_id: NonEmpty


class JobCancelResult(Result, kw_only=True):
    """``job.cancel``: false when the job was unknown or already finished.

    Attributes:
        cancelled: True when the job was queued or running and is now being cancelled (it ends
            ``cancelled``); false when it was unknown, already finished, or already being
            cancelled or superseded.
    """

    cancelled: bool


class JobList(Payload, kw_only=True):
    """``job.list {}``."""


class JobInfo(Result, kw_only=True):
    """One job of ``job.list``: every unfinished job and the 64 most recently finished, in
    submission order.

    Attributes:
        id: The job's id, as ``job.start`` answered it.
        kind: What the job is (as ``job.start`` gave it).
        root: The project root: the lane the job runs on.
        status: How it ended, once ``finished`` (``ok``, ``failed``, ``cancelled``, ``denied``,
            ``superseded``); null before.
    """

    id: str
    kind: JobKind
    root: str
    state: Literal["queued", "running", "finished"]
    status: JobStatus | None = None


class JobWaitEvents(Payload, kw_only=True):
    """``job.waitEvents``: block until events are queued or the timeout passes."""

    timeout_milliseconds: WaitMilliseconds | None = None


class JobPollEvents(Payload, kw_only=True):
    """``job.pollEvents {}``: drain without waiting."""


class JobStarted(Event, tag="job.started", kw_only=True):
    """A job left its queue and its process started.

    Attributes:
        kind: What the job is (as ``job.start`` gave it).
        root: The project root: the lane it runs on.
        argv: The program and its arguments as started.
    """

    job_id: str
    kind: JobKind
    root: str
    argv: list[str]


class JobOutput(Event, tag="job.output", kw_only=True):
    """A piece of a job's output (UTF-8, invalid bytes replaced); past the output cap one
    notice with ``droppedBytes``.

    Attributes:
        stream: Which of the job's pipes it came from: ``stdout`` or ``stderr``.
        text: The text, in the order the job wrote it on that stream.
    """

    job_id: str
    stream: Literal["stdout", "stderr"]
    text: str
    dropped_bytes: int | None = None


class JobFinished(Event, tag="job.finished", kw_only=True):
    """A job ended; ``errorCode``/``error`` when it could not run (``launch_failed``).

    Attributes:
        kind: What the job was.
        root: The project root: the lane it ran on.
        status: ``ok`` (exit 0), ``failed`` (another exit, a signal, its deadline, or it could
            not start), ``cancelled`` (``job.cancel`` or the Core closing), ``denied`` (an
            untrusted workspace), ``superseded`` (replaced by a newer job).
        timed_out: True when its ``timeoutMilliseconds`` ended it.
        duration_ms: From its process start to its end, in milliseconds; null when it never
            started.
        error_code: When it could not run or its runner failed: the catalog code
            (``launch_failed``, ``internal``).
        error: With ``errorCode``: the message.
    """

    job_id: str
    kind: JobKind
    root: str
    status: JobStatus
    exit_code: int | None
    signal: int | None
    timed_out: bool
    duration_ms: int | None
    error_code: str | None = None
    error: str | None = None


class JobProgress(Event, tag="job.progress", kw_only=True):
    """How far a reporting job is (ide-backend-protocol ``mcpp-ide/job/progress``): the
    latest of its ``{"progress": ...}`` reports, at most one per flush interval.

    Attributes:
        finished: Units done so far, as the job reported.
        total: Units in all, as the job reported.
    """

    job_id: str
    finished: int
    total: int


class JobRecord(Event, tag="job.record", kw_only=True):
    """A JSON object a reporting job wrote on its report channel (ide-backend-protocol
    ``mcpp-ide/job/record``); past the per-job bound one notice with ``record: null`` and
    ``droppedRecords``.

    Attributes:
        record: The JSON object the job wrote on its report channel; null in the one notice past
            the per-job bound.
        dropped_records: In that notice: how many records were dropped.
    """

    job_id: str
    record: JsonObject | None
    dropped_records: int | None = None


JobEvent: TypeAlias = JobStarted | JobOutput | JobProgress | JobRecord | JobFinished


class JobEvents(Result, kw_only=True):
    """``job.waitEvents`` / ``job.pollEvents``: events in order; ``gap`` when some were
    dropped since the last drain."""

    events: list[JobEvent]
    gap: bool


#: The order rule (:class:`~._base.Ordered`): job starts and cancels take effect in arrival
#: order -- one line for all lanes, since queueing a job never waits.
ORDER = {
    "job.start": Ordered("job"),
    "job.cancel": Ordered("job"),
}

COMMANDS = {
    "job.start": (JobStart, JobStartResult),
    "job.cancel": (JobCancel, JobCancelResult),
    "job.list": (JobList, list[JobInfo]),
    "job.waitEvents": (JobWaitEvents, JobEvents),
    "job.pollEvents": (JobPollEvents, JobEvents),
}
EVENTS = {"job": JobEvent}
#: What ends each event stream of this module (docs/commands.md "Events").
STREAMS = {
    "job": "The lanes' stream never ends; each job's last event is its ``job.finished``,"
    " exactly once for every job ``job.start`` accepted (also one refused in an untrusted"
    " workspace, ``denied``). ``supervisor serve`` pushes these as notifications.",
}
