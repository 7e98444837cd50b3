"""A simulated job runner for the lanes driver tests: no processes, only trio.sleep.

A job's argv is a tiny script, one step per argument:

- ``sleep:S``   ``await trio.sleep(S)`` (seconds)
- ``out:TEXT`` / ``err:TEXT``   emit TEXT on stdout / stderr
- ``bulk:N``    emit N bytes of ``x`` on stdout in one call
- ``exit:N``    set the exit code (the default is 0 once every step has run)
- ``raise:MSG`` raise ``RuntimeError(MSG)``

On cancellation the runner "ends its process tree": it emits a line on stderr, sleeps
``cleanup_s`` shielded, sets ``signal`` 15 and lets ``trio.Cancelled`` propagate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from lanes import Job
    from protocol import JSONObject

CLEANUP_S = 0.1


@dataclass
class SimRunner:
    """Runs simulated jobs and records what happened, with Trio-clock times."""

    cleanup_s: float = CLEANUP_S
    log: list[tuple[float, str, str]] = field(default_factory=list)
    active: dict[str, str] = field(default_factory=dict)
    overlaps: list[str] = field(default_factory=list)
    #: The most jobs that ran at once.
    peak: int = 0

    async def __call__(self, job: Job, emit_output: Callable[[str, str], None]) -> None:
        root = job.request.lane_key
        if root in self.active:
            self.overlaps.append(f"{job.id} started while {self.active[root]} ran")
        self.active[root] = job.id
        self.peak = max(self.peak, len(self.active))
        self.log.append((trio.current_time(), "start", job.id))
        try:
            for step in job.request.argv:
                op, _, arg = step.partition(":")
                if op == "sleep":
                    await trio.sleep(float(arg))
                elif op == "out":
                    emit_output("stdout", arg)
                elif op == "err":
                    emit_output("stderr", arg)
                elif op == "bulk":
                    emit_output("stdout", "x" * int(arg))
                elif op == "exit":
                    job.exit_code = int(arg)
                elif op == "raise":
                    raise RuntimeError(arg)
                else:
                    raise AssertionError(f"bad step {step!r}")
            if job.exit_code is None:
                job.exit_code = 0
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                emit_output("stderr", "terminating\n")
                await trio.sleep(self.cleanup_s)
            job.signal = 15
            self.log.append((trio.current_time(), "cleaned", job.id))
            raise
        finally:
            del self.active[root]
            self.log.append((trio.current_time(), "end", job.id))

    def times(self, what: str) -> dict[str, float]:
        """The Trio time of each job's ``what`` ("start", "cleaned", "end")."""
        return {job: t for t, w, job in self.log if w == what}


@dataclass
class Events:
    """Collects ``on_event`` calls."""

    calls: list[tuple[str, JSONObject]] = field(default_factory=list)

    def __call__(self, method: str, params: JSONObject) -> None:
        self.calls.append((method, params))

    def of(self, method: str) -> list[JSONObject]:
        return [params for m, params in self.calls if m == method]

    def finished(self) -> dict[str, JSONObject]:
        """``job.finished`` params by job id (asserting there is at most one per job)."""
        result: dict[str, JSONObject] = {}
        for params in self.of("job.finished"):
            job_id = params["jobId"]
            assert isinstance(job_id, str)
            assert job_id not in result, f"two job.finished for {job_id}"
            result[job_id] = params
        return result

    def status(self, job_id: str) -> object:
        return self.finished()[job_id]["status"]

    def started_ids(self) -> list[object]:
        return [params["jobId"] for params in self.of("job.started")]

    def output(self, job_id: str, stream: str) -> str:
        return "".join(
            str(p["text"])
            for p in self.of("job.output")
            if p["jobId"] == job_id and p["stream"] == stream and "droppedBytes" not in p
        )

    def check_job_order(self) -> None:
        """Per job: started (if any) first, then output, then exactly one finished last."""
        seen: dict[str, list[str]] = {}
        for method, params in self.calls:
            job_id = params["jobId"]
            assert isinstance(job_id, str)
            seen.setdefault(job_id, []).append(method)
        for job_id, methods in seen.items():
            assert methods.count("job.finished") == 1, (job_id, methods)
            assert methods[-1] == "job.finished", (job_id, methods)
            assert methods.count("job.started") <= 1, (job_id, methods)
            if "job.started" in methods:
                assert methods[0] == "job.started", (job_id, methods)
