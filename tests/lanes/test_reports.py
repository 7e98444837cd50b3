"""Job.report_progress / Job.report_record: the driver's job.progress and job.record events,
on Trio's autojump clock with a runner of our own (no processes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from lanes import Job, JobKind, JobRequest, open_lanes

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject


def req(*, report: bool = True) -> JobRequest:
    return JobRequest(kind=JobKind.TEST, root="/p", argv=("x",), report=report)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[float, str, JSONObject]] = []

    def __call__(self, method: str, params: JSONObject) -> None:
        self.events.append((trio.current_time(), method, params))

    def of(self, method: str) -> list[JSONObject]:
        return [p for _, m, p in self.events if m == method]


async def test_progress_is_coalesced_and_records_keep_their_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def runner(job: Job, emit_output: Callable[[str, str], None]) -> None:
        for step in range(1, 101):
            job.report_progress(step, 100)
            await trio.sleep(0.001)
        job.report_progress(100, 100)
        job.report_record({"summary": True})
        job.report_progress(0, 1)  # a new phase: sent at the end, after the record
        job.exit_code = 0

    events = Recorder()
    async with open_lanes(runner, on_event=events, output_flush_ms=50) as lanes:
        lanes.start_job(req())
        await lanes.wait_idle()
    progress = events.of("job.progress")
    # 100 reports over 100 ms: the first at once, then at most one per 50 ms.
    assert len(progress) <= 5
    assert progress[0] == {"jobId": "job-1", "finished": 1, "total": 100}
    methods = [m for _, m, _ in events.events]
    assert methods[-3:] == ["job.record", "job.progress", "job.finished"]
    assert progress[-2] == {"jobId": "job-1", "finished": 100, "total": 100}
    assert progress[-1] == {"jobId": "job-1", "finished": 0, "total": 1}
    assert events.of("job.record") == [{"jobId": "job-1", "record": {"summary": True}}]


async def test_records_past_the_bounds_are_counted_in_one_notice(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def runner(job: Job, emit_output: Callable[[str, str], None]) -> None:
        for n in range(10):
            job.report_record({"n": n})
        job.report_record({"big": "x" * 100})  # past the byte bound: dropped
        job.exit_code = 0

    events = Recorder()
    async with open_lanes(runner, on_event=events, max_records=5, max_record_bytes=60) as lanes:
        lanes.start_job(req())
        await lanes.wait_idle()
    records = events.of("job.record")
    assert [r["record"] for r in records[:5]] == [{"n": n} for n in range(5)]
    assert records[5:] == [{"jobId": "job-1", "record": None, "droppedRecords": 6}]


async def test_misuse_raises_and_fails_only_that_job(autojump_clock: trio.abc.Clock) -> None:
    seen: list[BaseException] = []
    finished_job: list[Job] = []

    async def runner(job: Job, emit_output: Callable[[str, str], None]) -> None:
        calls: list[Callable[[], None]] = [
            lambda: job.report_progress(3, 2),
            lambda: job.report_progress(-1, 2),
            lambda: job.report_progress(True, 2),
            lambda: job.report_record(float("nan")),
            lambda: job.report_record({"x": object()}),  # type: ignore[dict-item]
            lambda: job.report_record({"x": "\ud800"}),
        ]
        for call in calls:
            with pytest.raises((TypeError, ValueError)) as caught:
                call()
            seen.append(caught.value)
        finished_job.append(job)
        job.exit_code = 0

    events = Recorder()
    async with open_lanes(runner, on_event=events) as lanes:
        lanes.start_job(req())
        await lanes.wait_idle()
    assert len(seen) == 6
    assert events.of("job.finished")[0]["status"] == "ok"
    assert not events.of("job.progress")
    assert not events.of("job.record")
    # Once finished, the channel is closed.
    (job,) = finished_job
    with pytest.raises(RuntimeError, match="finished"):
        job.report_progress(1, 1)


async def test_a_job_without_report_can_not_report(autojump_clock: trio.abc.Clock) -> None:
    async def runner(job: Job, emit_output: Callable[[str, str], None]) -> None:
        job.report_progress(1, 2)

    events = Recorder()
    async with open_lanes(runner, on_event=events) as lanes:
        lanes.start_job(req(report=False))
        await lanes.wait_idle()
    (finished,) = events.of("job.finished")
    assert finished["status"] == "failed"
    assert finished["errorCode"] == "internal"
    assert "not started with report" in str(finished["error"])


def test_report_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="report"):
        JobRequest(kind=JobKind.TEST, root="/p", argv=("x",), report="yes")  # type: ignore[arg-type]
