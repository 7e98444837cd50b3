"""The foundation's services: one-shot processes (``process.run``) and job lanes (``job.*``).

``process.run`` runs one command as a process tree inside the calling operation's cancel scope, so
cancelling the operation ends the tree; ``job.*`` drive the lanes with :class:`ProcessJobRunner` and
queue their ``job.started`` / ``job.output`` / ``job.finished`` events, which ``job.waitEvents`` /
``job.pollEvents`` drain and ``supervisor serve`` pushes as notifications.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from lanes import open_lanes, parse_job_start
from protocol import MAX_MILLISECONDS, MAX_OUTPUT_BYTES, CoreError, read_int
from protocol._json import fit_texts

from .._endpoint import DEFAULT_MAX_BODY_BYTES
from .._process._oneshot import DEFAULT_MAX_OUTPUT_BYTES, run_process
from .._session._events import EventQueue
from ._jobs import ProcessJobRunner, check_job_launch
from ._payload import (
    check_fields,
    optional_env,
    optional_path,
    optional_positive_int,
    optional_text,
    optional_timeout_ms,
    require_argv,
    require_str,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from lanes import Lanes
    from protocol import JSONObject, JSONValue

    from ._service import CommandHandler, ServiceContext

__all__ = (
    "MAX_OUTPUT_ANSWER_BYTES",
    "MAX_OUTPUT_BYTES_LIMIT",
    "JobService",
    "ProcessService",
    "open_job_service",
    "open_process_service",
)

#: The longest a ``*.waitEvents`` call may block (ours): 10 minutes.
MAX_WAIT_EVENTS_MS: Final = 600_000
#: The most output ``process.run`` keeps per stream (ours): 64 MiB, the frame-body limit,
#: past which the answer could not reach a ``supervisor serve`` client anyway.
MAX_OUTPUT_BYTES_LIMIT: Final = MAX_OUTPUT_BYTES
#: The most bytes ``stdout`` and ``stderr`` of a ``process.run`` answer take together once
#: encoded as JSON: the frame-body limit less 64 KiB for the rest of the answer. Output is
#: kept as bytes but sent as JSON text, where a control character takes six bytes
#: (``\u0000``) and an invalid byte three (U+FFFD), so 16 MiB of NUL bytes would make a
#: 96 MiB frame; past this bound each stream keeps the head that fits its fair share, and
#: ``truncated`` is true.
MAX_OUTPUT_ANSWER_BYTES: Final = DEFAULT_MAX_BODY_BYTES - 64 * 1024

_PROCESS_RUN_FIELDS: Final = frozenset(
    {"argv", "cwd", "env", "stdin", "timeoutMilliseconds", "maxOutputBytes"}
)


def read_wait_timeout(payload: JSONObject, command: str) -> int:
    """Read ``timeoutMilliseconds`` of a ``*.waitEvents`` call: an integer from 0 to
    :data:`protocol.MAX_MILLISECONDS`, capped at :data:`MAX_WAIT_EVENTS_MS` (absent: 0)."""
    try:
        value = read_int(
            payload, "timeoutMilliseconds", minimum=0, maximum=MAX_MILLISECONDS, default=0
        )
    except CoreError as exc:
        raise CoreError(exc.code, f"{command}: {exc.message}", exc.details) from None
    assert value is not None  # the default
    return min(value, MAX_WAIT_EVENTS_MS)


class ProcessService:
    """``process.run``: one command, its result, nothing left behind."""

    def commands(self) -> Mapping[str, CommandHandler]:
        return {"process.run": self._process_run}

    async def aclose(self) -> None:
        """Nothing to do: each ``process.run`` ends with its own operation."""

    async def _process_run(self, payload: JSONObject) -> JSONValue:
        check_fields(payload, _PROCESS_RUN_FIELDS, "process.run")
        argv = require_argv(payload)
        cwd = optional_path(payload, "cwd")
        env = optional_env(payload)
        stdin = optional_text(payload, "stdin")
        timeout_ms = optional_timeout_ms(payload)
        max_output = optional_positive_int(
            payload, "maxOutputBytes", maximum=MAX_OUTPUT_BYTES_LIMIT
        )
        result = await run_process(
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin.encode() if stdin is not None else None,
            timeout_ms=timeout_ms,
            max_output_bytes=max_output if max_output is not None else DEFAULT_MAX_OUTPUT_BYTES,
        )
        wire = result.to_wire()
        (wire["stdout"], wire["stderr"]), cut = fit_texts(
            [result.stdout, result.stderr], MAX_OUTPUT_ANSWER_BYTES
        )
        if cut:
            wire["truncated"] = True
        return wire


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

    async def _start(self, payload: JSONObject) -> JSONValue:
        request = check_job_launch(parse_job_start(payload))
        return {"jobId": self.lanes.start_job(request)}

    async def _cancel(self, payload: JSONObject) -> JSONValue:
        check_fields(payload, frozenset({"jobId"}), "job.cancel")
        return {"cancelled": self.lanes.cancel_job(require_str(payload, "jobId"))}

    async def _list(self, payload: JSONObject) -> JSONValue:
        check_fields(payload, frozenset(), "job.list")
        jobs: list[JSONValue] = list(self.lanes.list_jobs())
        return jobs

    async def _wait_events(self, payload: JSONObject) -> JSONValue:
        check_fields(payload, frozenset({"timeoutMilliseconds"}), "job.waitEvents")
        return await self.events.wait(read_wait_timeout(payload, "job.waitEvents"))

    async def _poll_events(self, payload: JSONObject) -> JSONValue:
        check_fields(payload, frozenset(), "job.pollEvents")
        return self.events.poll()


@asynccontextmanager
async def open_job_service(context: ServiceContext) -> AsyncIterator[JobService]:
    """Open the lanes; leaving the block cancels every job and waits for its cleanup."""
    events = EventQueue(context.max_events)
    async with open_lanes(
        ProcessJobRunner(), on_event=events.put, trusted=context.trusted
    ) as lanes:
        yield JobService(lanes, events)
