"""The foundation's services: one-shot processes (``process.run``) and job lanes (``job.*``).

``process.run`` runs one command as a process tree inside the calling operation's cancel scope, so
cancelling the operation ends the tree; ``job.*`` drive the lanes with :class:`ProcessJobRunner` and
queue their ``job.started`` / ``job.output`` / ``job.progress`` / ``job.record`` /
``job.finished`` events, which ``job.waitEvents`` /
``job.pollEvents`` drain and ``supervisor serve`` pushes as notifications.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from lanes import JobKind, JobRequest, open_lanes
from protocol import invalid_field

from .._api._process import DEFAULT_PROCESS_RUN_TIMEOUT_MS, MAX_OUTPUT_BYTES_LIMIT
from .._process._mux import MAX_OUTPUT_ANSWER_BYTES as _MAX_OUTPUT_ANSWER_BYTES
from .._process._oneshot import DEFAULT_MAX_OUTPUT_BYTES, run_process
from .._session._events import MAX_WAIT_EVENTS_MS, EventQueue
from ._jobs import ProcessJobRunner, check_job_launch
from ._service import declared

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from lanes import Lanes
    from protocol import JSONValue

    from .._api._job import JobCancel, JobList, JobPollEvents, JobStart, JobWaitEvents
    from .._api._process import ProcessRun
    from ._service import CommandHandler, ServiceContext

__all__ = (
    "DEFAULT_PROCESS_RUN_TIMEOUT_MS",
    "MAX_OUTPUT_ANSWER_BYTES",
    "MAX_OUTPUT_BYTES_LIMIT",
    "JobService",
    "ProcessService",
    "open_job_service",
    "open_process_service",
)

#: The most bytes ``stdout`` and ``stderr`` of a ``process.run`` answer take together once
#: encoded as JSON (``_process._mux.MAX_OUTPUT_ANSWER_BYTES``: the frame-body limit less
#: 64 KiB for the rest of the answer).
MAX_OUTPUT_ANSWER_BYTES: Final = _MAX_OUTPUT_ANSWER_BYTES


def process_run_timeout_ms(payload: ProcessRun) -> int | None:
    """``process.run``'s deadline in milliseconds: the given one; absent: one day
    (:data:`DEFAULT_PROCESS_RUN_TIMEOUT_MS`, the declaration's default); 0 or null: none
    (the envelope's rule)."""
    return payload.timeout_milliseconds or None


class ProcessService:
    """``process.run``: one command, its result, nothing left behind."""

    def commands(self) -> Mapping[str, CommandHandler]:
        return {"process.run": self._process_run}

    async def aclose(self) -> None:
        """Nothing to do: each ``process.run`` ends with its own operation."""

    @declared
    async def _process_run(self, payload: ProcessRun) -> JSONValue:
        result = await run_process(
            payload.argv,
            cwd=payload.cwd,
            env=payload.env,
            # Text: encoded a piece at a time as the child reads (never held twice).
            stdin=payload.stdin,
            timeout_ms=process_run_timeout_ms(payload),
            max_output_bytes=payload.max_output_bytes or DEFAULT_MAX_OUTPUT_BYTES,
        )
        return result.answer(MAX_OUTPUT_ANSWER_BYTES)


@asynccontextmanager
async def open_process_service(context: ServiceContext) -> AsyncIterator[ProcessService]:
    """Open :class:`ProcessService` (it holds nothing between calls)."""
    yield ProcessService()


class JobService:
    """``job.start``, ``job.cancel``, ``job.list``, ``job.waitEvents``, ``job.pollEvents``.

    ``job.start`` admits only a job that can start now (``check_job_launch``): a bad payload
    is ``invalid_request``, a missing root, cwd (relative to the root) or executable is
    ``launch_failed``; either way no job, no event.

    Attributes:
        lanes: The job lanes.
        events: The queue of job events.
    """

    def __init__(self, lanes: Lanes, events: EventQueue) -> None:
        self.lanes = lanes
        self.events = events

    async def aclose(self) -> None:
        """Cancel every job (``cancelled``) and wait until their process trees are gone."""
        await self.lanes.aclose()

    def commands(self) -> Mapping[str, CommandHandler]:
        return {
            "job.start": self._start,
            "job.cancel": self._cancel,
            "job.list": self._list,
            "job.waitEvents": self._wait_events,
            "job.pollEvents": self._poll_events,
        }

    @declared
    async def _start(self, payload: JobStart) -> JSONValue:
        if not os.path.isabs(payload.root):
            # A relative root would resolve against the supervisor's own working directory.
            raise invalid_field("root", "job.start: root must be an absolute path")
        request = JobRequest(
            kind=JobKind(payload.kind),
            root=payload.root,
            argv=tuple(payload.argv),
            cwd=payload.cwd,
            env=payload.env,
            timeout_ms=payload.timeout_milliseconds or None,  # 0: no deadline
            supersede=bool(payload.supersede),
            report=bool(payload.report),
        )
        return {"jobId": self.lanes.start_job(check_job_launch(request))}

    @declared
    async def _cancel(self, payload: JobCancel) -> JSONValue:
        return {"cancelled": self.lanes.cancel_job(payload.job_id)}

    @declared
    async def _list(self, payload: JobList) -> JSONValue:
        jobs: list[JSONValue] = list(self.lanes.list_jobs())
        return jobs

    @declared
    async def _wait_events(self, payload: JobWaitEvents) -> JSONValue:
        return await self.events.wait(min(payload.timeout_milliseconds or 0, MAX_WAIT_EVENTS_MS))

    @declared
    async def _poll_events(self, payload: JobPollEvents) -> JSONValue:
        return self.events.poll()


@asynccontextmanager
async def open_job_service(context: ServiceContext) -> AsyncIterator[JobService]:
    """Open the lanes; leaving the block cancels every job and waits for its cleanup."""
    events = EventQueue(context.max_events, budget=context.event_budget)
    # The job's pipes are read only as fast as its events are taken (supervisor._flow).
    runner = ProcessJobRunner(watch_output=events.watch)
    async with open_lanes(runner, on_event=events.put, trusted=context.trusted) as lanes:
        yield JobService(lanes, events)
