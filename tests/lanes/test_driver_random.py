"""Random operation sequences against the Trio driver (Hypothesis, virtual clock).

Whatever happens, every job gets exactly one ``job.finished`` after its other events, no two
jobs of a lane ever run at once, and the statistics add up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing
from hypothesis import given, settings, strategies as st

from lanes import JobKind, JobRequest, open_lanes

from ._sim import Events, SimRunner

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

SCRIPTS = [
    ("sleep:1",),
    ("out:a", "sleep:0.5", "err:b", "sleep:0.5"),
    ("sleep:0.3", "exit:2"),
    ("sleep:0.2", "raise:boom"),
    ("bulk:300", "sleep:2"),
    (),
]

Op = tuple[str, int, int, int, bool, bool]
OPS: SearchStrategy[Op] = st.tuples(
    st.sampled_from(["start", "start", "start", "cancel", "sleep", "trust"]),
    st.integers(0, len(list(JobKind)) - 1),
    st.integers(0, 2),  # root, or job index, or sleep tenths
    st.integers(0, len(SCRIPTS) - 1),
    st.booleans(),  # supersede / trusted
    st.booleans(),  # with a timeout
)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(OPS, max_size=25), close_early=st.booleans())
def test_random_operations_keep_the_invariants(ops: list[Op], close_early: bool) -> None:
    runner, events = SimRunner(), Events()
    cancelled: list[str] = []
    ids: list[str] = []
    untrusted_denials: list[str] = []

    async def main() -> None:
        async with open_lanes(
            runner, on_event=events, max_output_bytes=200, max_output_event_bytes=64
        ) as lanes:
            for what, kind_index, number, script, flag, timed in ops:
                if what == "start":
                    kind = list(JobKind)[kind_index]
                    request = JobRequest(
                        kind=kind,
                        root=f"/r{number}",
                        argv=SCRIPTS[script] or ("sleep:0",),
                        timeout_ms=700 if timed else None,
                        supersede=flag,
                    )
                    job_id = lanes.start_job(request)
                    ids.append(job_id)
                    if not lanes.trusted and kind in (JobKind.BUILD, JobKind.TEST):
                        untrusted_denials.append(job_id)
                elif what == "cancel" and ids:
                    job_id = ids[number % len(ids)]
                    if lanes.cancel_job(job_id):
                        cancelled.append(job_id)
                elif what == "sleep":
                    await trio.sleep(number / 10)
                elif what == "trust":
                    lanes.trusted = flag
                stats = lanes.statistics()
                assert stats.running <= 3  # one per root at most
                assert stats.queued + stats.running + stats.finished == len(ids)
                assert stats.peak_queued >= stats.queued
            if not close_early:
                await lanes.wait_idle()
                assert lanes.statistics().finished == len(ids)
        assert lanes.statistics().finished == len(ids)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    assert runner.overlaps == []
    events.check_job_order()
    finished = events.finished()
    assert set(finished) == set(ids)
    for job_id in cancelled:
        assert finished[job_id]["status"] == "cancelled"
    for job_id in untrusted_denials:
        assert finished[job_id]["status"] == "denied"
    for job_id, params in finished.items():
        if params["status"] == "denied":
            assert job_id in untrusted_denials
        if params["timedOut"]:
            assert params["status"] == "failed"
        if job_id not in events.started_ids():
            assert params["durationMs"] == 0
            assert params["exitCode"] is None
