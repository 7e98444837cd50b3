"""The lane policy: which job of a project runs, which waits, which ends, as pure code.

Contract (the IDE backend protocol ``mcpp-ide/job/start``): one lane
per project root, one job at a time per lane, in submission order. A ``build`` or ``test``
asked for again while one of the same kind waits on the same lane replaces the waiting one
(which ends ``superseded``); ``supersede`` cancels the running job (it ends ``superseded``).
An untrusted workspace denies ``build`` and ``test``.

Strategy: :class:`LanePolicy` is a small state machine with no trio, no clock and no I/O, in
the spirit of h11's ``_state.py``. Every input (:meth:`~LanePolicy.submit`,
:meth:`~LanePolicy.cancel`, :meth:`~LanePolicy.job_ended`, :meth:`~LanePolicy.cancel_all`)
returns the list of actions the driver must carry out, in order: :class:`StartJob`,
:class:`CancelRunning` and :class:`FinishQueued`. The driver never decides anything itself,
so every scheduling rule is tested here without processes.

A job's life as the policy sees it::

    submit --> QUEUED --(lane free)--> RUNNING --(job_ended)--> FINISHED
                 |                        |
                 |                        `--(cancel / supersede)--> RUNNING, cancelling
                 `--(replaced / cancel / denied / cancel_all)--> FINISHED (never started)

A running job stays in the lane's one running slot until the driver reports that its runner
has returned (:meth:`LanePolicy.job_ended`), including after it was cancelled: the next job
never starts while the previous one's process tree is still being cleaned up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

__all__ = (
    "CancelRunning",
    "FinishQueued",
    "JobKind",
    "JobState",
    "JobStatus",
    "LaneAction",
    "LanePolicy",
    "StartJob",
    "normalize_root",
)


class JobKind(StrEnum):
    """The kinds of job (the IDE backend protocol ``mcpp-ide/job/start`` ``kind``)."""

    BUILD = "build"
    TEST = "test"
    PACK = "pack"
    TOOLCHAIN = "toolchain"
    ADD = "add"
    COMMAND = "command"


class JobStatus(StrEnum):
    """How a job ended (``mcpp-ide/job/finished`` ``status``)."""

    OK = "ok"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DENIED = "denied"
    SUPERSEDED = "superseded"


class JobState(StrEnum):
    """Where a job is in its life (``mcpp-ide/job/list`` ``state``)."""

    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


#: Kinds that a newer request of the same kind replaces while waiting, and that an untrusted
#: workspace denies (the newer request makes the waiting one moot).
_REPLACEABLE_KINDS = frozenset({JobKind.BUILD, JobKind.TEST})
_TRUST_REQUIRED_KINDS = frozenset({JobKind.BUILD, JobKind.TEST})


def normalize_root(root: str) -> str:
    """Return the lane key of a project root: ``os.path.realpath(root)``.

    Symbolic links are resolved, so a project reached through a link shares the lane of its
    real directory (two builds of one project never run at once); ``/p/x``, ``/p/x/`` and
    ``/p/./x`` are one lane too. A relative root is made absolute against the current working
    directory. A path that does not exist is resolved as far as it exists.

    Args:
        root: A project root directory, absolute or relative.

    Returns:
        The absolute path with every symbolic link resolved.
    """
    return os.path.realpath(root)


@dataclass(frozen=True, slots=True)
class StartJob:
    """Start the job: run its runner now (the lane's running slot is already its own)."""

    job_id: str


@dataclass(frozen=True, slots=True)
class CancelRunning:
    """Cancel the running job; when its runner returns it ends with ``status``."""

    job_id: str
    status: JobStatus


@dataclass(frozen=True, slots=True)
class FinishQueued:
    """End a job that never started with ``status`` (no ``job.started``, exit code null)."""

    job_id: str
    status: JobStatus


LaneAction: TypeAlias = StartJob | CancelRunning | FinishQueued


@dataclass(slots=True)
class _Entry:
    job_id: str
    kind: JobKind


class LanePolicy:
    """The scheduling state of one lane (one project root).

    Queue order: jobs start in submission order, except that a replacing ``build``/``test``
    takes the queue position of the waiting job it replaces. Taking the old position (rather
    than going to the back) keeps the order the user asked for: after ``build, test, build``
    the test still runs after a build, on the newest sources. A job submitted with
    ``supersede=True`` cancels the running job and is queued like any other job (behind jobs
    already waiting, unless it replaces one of them); it does not jump the queue.

    Args:
        root: The lane's normalized project root (see :func:`normalize_root`); kept as given.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._running: _Entry | None = None
        # The status the running job ends with once its runner returns, when it was cancelled.
        self._running_cancel_status: JobStatus | None = None
        self._queue: list[_Entry] = []
        self._closed = False

    # -- queries -------------------------------------------------------------------------

    @property
    def running(self) -> str | None:
        """The id of the job in the running slot, or None."""
        return self._running.job_id if self._running is not None else None

    @property
    def running_cancel_status(self) -> JobStatus | None:
        """The status the running job was cancelled with, or None if it was not cancelled."""
        return self._running_cancel_status

    @property
    def queued(self) -> tuple[str, ...]:
        """The ids of the waiting jobs, the next one to start first."""
        return tuple(entry.job_id for entry in self._queue)

    @property
    def idle(self) -> bool:
        """True when no job runs or waits on this lane."""
        return self._running is None and not self._queue

    @property
    def closed(self) -> bool:
        """True after :meth:`cancel_all`: the lane accepts no more jobs."""
        return self._closed

    def state(self, job_id: str) -> JobState | None:
        """Return ``QUEUED`` or ``RUNNING`` for a job of this lane, None for any other id.

        The policy forgets a job once it has finished, so a finished job's id gives None.
        """
        if self._running is not None and self._running.job_id == job_id:
            return JobState.RUNNING
        if any(entry.job_id == job_id for entry in self._queue):
            return JobState.QUEUED
        return None

    # -- inputs --------------------------------------------------------------------------

    def submit(
        self, job_id: str, kind: JobKind, *, supersede: bool = False, trusted: bool = True
    ) -> list[LaneAction]:
        """Accept a new job on this lane.

        Args:
            job_id: The new job's id; must not be known to this lane.
            kind: The job's kind.
            supersede: Cancel the running job (it ends ``superseded``).
            trusted: False when the workspace is untrusted: ``build`` and ``test`` are denied.

        Returns:
            The actions, in order: possibly ``FinishQueued(new, DENIED)`` alone (a denied job
            changes nothing else); else possibly ``CancelRunning(running, SUPERSEDED)``,
            possibly ``FinishQueued(replaced, SUPERSEDED)``, possibly ``StartJob(new)``.

        Raises:
            RuntimeError: The lane is closed (after :meth:`cancel_all`).
            ValueError: ``job_id`` is already on this lane.
        """
        if self._closed:
            raise RuntimeError(f"lane {self.root!r} is closed")
        if self.state(job_id) is not None:
            raise ValueError(f"job {job_id!r} is already on lane {self.root!r}")
        kind = JobKind(kind)
        if not trusted and kind in _TRUST_REQUIRED_KINDS:
            return [FinishQueued(job_id, JobStatus.DENIED)]

        actions: list[LaneAction] = []
        if supersede and self._running is not None and self._running_cancel_status is None:
            self._running_cancel_status = JobStatus.SUPERSEDED
            actions.append(CancelRunning(self._running.job_id, JobStatus.SUPERSEDED))

        entry = _Entry(job_id, kind)
        replaced_index = None
        if kind in _REPLACEABLE_KINDS:
            replaced_index = next(
                (i for i, waiting in enumerate(self._queue) if waiting.kind == kind), None
            )
        if replaced_index is not None:
            replaced = self._queue[replaced_index]
            self._queue[replaced_index] = entry
            actions.append(FinishQueued(replaced.job_id, JobStatus.SUPERSEDED))
        else:
            self._queue.append(entry)
        actions.extend(self._start_next())
        return actions

    def cancel(self, job_id: str, status: JobStatus = JobStatus.CANCELLED) -> list[LaneAction]:
        """Cancel a waiting or running job.

        Args:
            job_id: The job to cancel.
            status: The status it ends with (``cancelled`` unless the caller says otherwise).

        Returns:
            ``[FinishQueued(job_id, status)]`` for a waiting job, ``[CancelRunning(job_id,
            status)]`` for a running job not cancelled yet, and ``[]`` otherwise (unknown,
            finished, or already being cancelled): an empty list means "nothing was
            cancelled".
        """
        if self._running is not None and self._running.job_id == job_id:
            if self._running_cancel_status is not None:
                return []
            self._running_cancel_status = status
            return [CancelRunning(job_id, status)]
        for i, entry in enumerate(self._queue):
            if entry.job_id == job_id:
                del self._queue[i]
                return [FinishQueued(job_id, status)]
        return []

    def job_ended(self, job_id: str) -> list[LaneAction]:
        """Report that the running job's runner has returned (in any way) and it has finished.

        Args:
            job_id: The id of the running job.

        Returns:
            ``[StartJob(next)]`` when a job waits (and the lane is open), else ``[]``.

        Raises:
            RuntimeError: ``job_id`` is not the running job (a driver bug).
        """
        if self._running is None or self._running.job_id != job_id:
            raise RuntimeError(f"job {job_id!r} is not running on lane {self.root!r}")
        self._running = None
        self._running_cancel_status = None
        return self._start_next()

    def cancel_all(self, status: JobStatus = JobStatus.CANCELLED) -> list[LaneAction]:
        """Close the lane: cancel the running job and end every waiting job with ``status``.

        Idempotent: a second call returns ``[]`` (unless the running job was not yet being
        cancelled). After this, :meth:`submit` raises and :meth:`job_ended` starts nothing.

        Returns:
            ``CancelRunning`` for the running job (if not already being cancelled), then one
            ``FinishQueued`` per waiting job in queue order.
        """
        self._closed = True
        actions: list[LaneAction] = []
        if self._running is not None and self._running_cancel_status is None:
            self._running_cancel_status = status
            actions.append(CancelRunning(self._running.job_id, status))
        actions.extend(FinishQueued(entry.job_id, status) for entry in self._queue)
        self._queue.clear()
        return actions

    def _start_next(self) -> list[LaneAction]:
        if self._running is not None or not self._queue or self._closed:
            return []
        self._running = self._queue.pop(0)
        return [StartJob(self._running.job_id)]
