"""The Trio lanes driver with a simulated runner, on Trio's autojump clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from lanes import Job, JobKind, JobRequest, JobState, Lanes, LanesStatistics, open_lanes

from ._sim import CLEANUP_S, Events, SimRunner

if TYPE_CHECKING:
    import pathlib
    from collections.abc import Callable


def req(
    *steps: str,
    kind: str = "command",
    root: str = "/p",
    timeout_ms: int | None = None,
    supersede: bool = False,
) -> JobRequest:
    return JobRequest(
        kind=JobKind(kind),
        root=root,
        argv=steps or ("sleep:1",),
        timeout_ms=timeout_ms,
        supersede=supersede,
    )


async def test_one_job_at_a_time_per_lane_in_order(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        ids = [lanes.start_job(req("sleep:1", "out:hi\n")) for _ in range(3)]
        other = lanes.start_job(req("sleep:2", root="/q"))
        assert ids == ["job-1", "job-2", "job-3"]
        assert other == "job-4"
        await lanes.wait_idle()
    assert runner.overlaps == []
    assert events.started_ids() == ["job-1", "job-4", "job-2", "job-3"]  # policy order
    start = runner.times("start")
    assert start["job-2"] - start["job-1"] == pytest.approx(1.0)
    assert start["job-3"] - start["job-2"] == pytest.approx(1.0)
    # Different roots are different lanes: they run side by side.
    assert start["job-4"] == pytest.approx(start["job-1"])
    finished = events.finished()
    assert {f["status"] for f in finished.values()} == {"ok"}
    assert finished["job-1"] == {
        "jobId": "job-1",
        "kind": "command",
        "root": "/p",
        "status": "ok",
        "exitCode": 0,
        "signal": None,
        "timedOut": False,
        "durationMs": 1000,
    }
    assert events.of("job.started")[0] == {
        "jobId": "job-1",
        "kind": "command",
        "root": "/p",
        "argv": ["sleep:1", "out:hi\n"],
    }
    assert events.output("job-2", "stdout") == "hi\n"
    events.check_job_order()


async def test_roots_are_normalized_into_one_lane(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        lanes.start_job(req("sleep:1", root="/p/x/"))
        lanes.start_job(req("sleep:1", root="/p/./y/../x"))
        assert lanes.statistics().lanes == 1
        assert lanes.statistics().queued == 1
        await lanes.wait_idle()
    assert runner.overlaps == []


async def test_a_root_reached_through_a_symlink_shares_the_lane(
    autojump_clock: trio.abc.Clock, tmp_path: pathlib.Path
) -> None:
    """Two spellings of one project, one through a link: one lane, never two builds at once."""
    real = tmp_path / "project"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        lanes.start_job(req("sleep:1", root=str(link)))
        lanes.start_job(req("sleep:1", root=str(real) + "/"))
        assert lanes.statistics().lanes == 1
        assert lanes.statistics().queued == 1
        await lanes.wait_idle()
    assert runner.overlaps == []
    assert {event["root"] for event in events.of("job.started")} == {str(real.resolve())}


async def test_a_waiting_build_is_replaced(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        lanes.start_job(req("sleep:5"))
        old = lanes.start_job(req("out:old", kind="build"))
        test = lanes.start_job(req("out:t", kind="test"))
        assert events.finished() == {}
        new = lanes.start_job(req("out:new", kind="build"))
        # The replaced job ends at once, before start_job returns.
        assert events.finished()[old] == {
            "jobId": old,
            "kind": "build",
            "root": "/p",
            "status": "superseded",
            "exitCode": None,
            "signal": None,
            "timedOut": False,
            "durationMs": 0,
        }
        await lanes.wait_idle()
    assert old not in events.started_ids()
    # The replacement takes the waiting build's place: it runs before the test.
    assert events.started_ids() == ["job-1", new, test]
    assert events.status(new) == "ok"
    assert events.output(new, "stdout") == "new"
    events.check_job_order()


async def test_supersede_cancels_the_running_job(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        first = lanes.start_job(req("sleep:10", kind="build"))
        await trio.sleep(1)
        second = lanes.start_job(req("sleep:1", kind="build", supersede=True))
        await lanes.wait_idle()
    assert events.status(first) == "superseded"
    assert events.finished()[first]["signal"] == 15
    assert events.finished()[first]["durationMs"] == 1000 + CLEANUP_S * 1000
    assert events.status(second) == "ok"
    # The next job starts only once the superseded one has cleaned up.
    assert runner.times("start")[second] == pytest.approx(runner.times("cleaned")[first])
    assert runner.times("start")[second] == pytest.approx(1 + CLEANUP_S)
    assert events.output(first, "stderr") == "terminating\n"
    assert runner.overlaps == []
    events.check_job_order()


async def test_cancel_queued_and_running(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        running = lanes.start_job(req("sleep:10"))
        queued = lanes.start_job(req("sleep:1"))
        last = lanes.start_job(req("sleep:1"))
        await trio.testing.wait_all_tasks_blocked()
        assert lanes.cancel_job(queued) is True
        assert events.status(queued) == "cancelled"
        assert lanes.cancel_job(queued) is False
        assert lanes.cancel_job("job-99") is False
        assert lanes.cancel_job(running) is True
        assert lanes.cancel_job(running) is False  # already being cancelled
        assert running not in events.finished()  # ends once its runner has cleaned up
        await lanes.wait_idle()
        assert lanes.cancel_job(last) is False  # finished
    assert events.status(running) == "cancelled"
    assert events.finished()[running]["exitCode"] is None
    assert events.status(last) == "ok"
    assert queued not in events.started_ids()
    assert runner.times("start")[last] == pytest.approx(CLEANUP_S)
    events.check_job_order()


async def test_deadline_fails_with_timed_out(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        slow = lanes.start_job(req("sleep:1", "sleep:60", timeout_ms=1500))
        # The deadline counts from the job's start, not from its submission.
        fast = lanes.start_job(req("sleep:1", timeout_ms=1500))
        await lanes.wait_idle()
    finished = events.finished()
    assert finished[slow]["status"] == "failed"
    assert finished[slow]["timedOut"] is True
    assert finished[slow]["durationMs"] == 1500 + CLEANUP_S * 1000
    assert finished[fast]["status"] == "ok"
    assert finished[fast]["timedOut"] is False
    events.check_job_order()


async def test_exit_codes_and_runner_errors(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        bad = lanes.start_job(req("out:partial", "exit:3"))
        boom = lanes.start_job(req("sleep:1", "out:before", "raise:boom"))
        after = lanes.start_job(req("sleep:1"))
        await lanes.wait_idle()
    finished = events.finished()
    assert (finished[bad]["status"], finished[bad]["exitCode"]) == ("failed", 3)
    assert "error" not in finished[bad]
    assert finished[boom]["status"] == "failed"
    assert finished[boom]["error"] == "RuntimeError: boom"
    # Not a CoreError: a runner bug, reported with the catalog's "internal".
    assert finished[boom]["errorCode"] == "internal"
    assert "errorCode" not in finished[bad]
    assert events.output(boom, "stdout") == "before"
    # The lane goes on after a runner that raised.
    assert finished[after]["status"] == "ok"
    events.check_job_order()


async def test_untrusted_build_and_test_are_denied(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events, trusted=False) as lanes:
        build = lanes.start_job(req(kind="build"))
        test = lanes.start_job(req(kind="test"))
        pack = lanes.start_job(req(kind="pack"))
        assert events.status(build) == "denied"
        assert events.status(test) == "denied"
        lanes.trusted = True
        later = lanes.start_job(req(kind="build"))
        await lanes.wait_idle()
    assert events.status(pack) == "ok"
    assert events.status(later) == "ok"
    assert events.started_ids() == [pack, later]
    assert events.finished()[build]["durationMs"] == 0
    assert events.finished()[build]["exitCode"] is None
    events.check_job_order()


async def test_aclose_cancels_everything_and_waits(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        running = [lanes.start_job(req("sleep:100", root=r)) for r in ("/a", "/b")]
        queued = [lanes.start_job(req("sleep:1", root="/a")) for _ in range(2)]
        await trio.sleep(1)
        await lanes.aclose()
        # aclose returned only after every runner cleaned up.
        assert set(runner.times("cleaned")) == set(running)
        assert len(events.finished()) == 4
        assert {events.status(j) for j in running + queued} == {"cancelled"}
        await lanes.aclose()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            lanes.start_job(req())
        assert lanes.statistics().running == 0
    assert not set(queued) & set(events.started_ids())
    events.check_job_order()


async def test_cancelling_run_from_outside_finishes_every_job(
    autojump_clock: trio.abc.Clock,
) -> None:
    runner, events = SimRunner(), Events()
    lanes = Lanes(runner, on_event=events)
    async with trio.open_nursery() as nursery:
        await nursery.start(lanes.run)
        running = lanes.start_job(req("sleep:100"))
        queued = lanes.start_job(req("sleep:1"))
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert events.status(running) == "cancelled"
    assert events.status(queued) == "cancelled"
    assert runner.times("cleaned").keys() == {running}
    assert queued not in events.started_ids()
    with pytest.raises(RuntimeError):
        lanes.start_job(req())
    await lanes.aclose()
    events.check_job_order()


async def test_run_twice_or_before_start_is_refused() -> None:
    lanes = Lanes(SimRunner(), on_event=Events())
    with pytest.raises(RuntimeError, match="new"):
        lanes.start_job(req())
    async with trio.open_nursery() as nursery:
        await nursery.start(lanes.run)
        with pytest.raises(RuntimeError, match="once"):
            await lanes.run()
        await lanes.aclose()
    closed_early = Lanes(SimRunner(), on_event=Events())
    await closed_early.aclose()
    with pytest.raises(RuntimeError, match="once"):
        await closed_early.run()


async def test_output_is_coalesced(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events, output_flush_ms=50) as lanes:
        burst = lanes.start_job(req(*(["out:a"] * 100), "err:e1", "err:e2", "sleep:1"))
        spaced = lanes.start_job(req("out:1", "sleep:0.2", "out:2", "sleep:0.2", "out:3"))
        await lanes.wait_idle()
    burst_out = [p for p in events.of("job.output") if p["jobId"] == burst]
    assert burst_out[:2] == [
        {"jobId": burst, "stream": "stdout", "text": "a" * 100},
        {"jobId": burst, "stream": "stderr", "text": "e1e2"},
    ]
    spaced_out = [p["text"] for p in events.of("job.output") if p["jobId"] == spaced]
    assert spaced_out == ["1", "2", "3"]
    events.check_job_order()


async def test_output_flushes_at_the_size_bound_on_character_boundaries(
    autojump_clock: trio.abc.Clock,
) -> None:
    runner, events = SimRunner(), Events()
    text = "é€😀x" * 20  # 2-, 3-, 4- and 1-byte characters
    async with open_lanes(
        runner, on_event=events, max_output_event_bytes=7, output_flush_ms=60_000
    ) as lanes:
        job = lanes.start_job(req(f"out:{text}", "sleep:1", "out:tail"))
        await trio.sleep(0.5)
        # Past the size bound the flush does not wait for output_flush_ms.
        assert events.output(job, "stdout") == text
        await lanes.wait_idle()
    chunks = [str(p["text"]) for p in events.of("job.output") if p["jobId"] == job]
    assert all(0 < len(c.encode()) <= 7 for c in chunks)
    assert "".join(chunks) == text + "tail"
    # The last chunk was sent at job end, not after a minute.
    assert events.finished()[job]["durationMs"] == 1000


async def test_output_cap_drops_and_reports(autojump_clock: trio.abc.Clock) -> None:
    """Without a tail (max_output_tail_bytes=0) everything past the cap is counted, dropped."""
    runner, events = SimRunner(), Events()
    async with open_lanes(
        runner, on_event=events, max_output_bytes=100, max_output_tail_bytes=0
    ) as lanes:
        job = lanes.start_job(req("bulk:60", "sleep:1", "bulk:90", "err:small", "bulk:5"))
        await lanes.wait_idle()
    assert events.output(job, "stdout") == "x" * 100
    assert events.output(job, "stderr") == "small"
    notices = [p for p in events.of("job.output") if "droppedBytes" in p]
    assert len(notices) == 1
    assert notices[0]["jobId"] == job
    assert notices[0]["stream"] == "stdout"
    assert notices[0]["droppedBytes"] == 55
    assert "55 bytes of stdout dropped" in str(notices[0]["text"])
    events.check_job_order()


async def test_output_past_the_cap_keeps_the_tail(autojump_clock: trio.abc.Clock) -> None:
    """Issue 2 fix: the cap kept the head and dropped the tail, where builds and tests print
    their summary. A job that writes far past the cap then "END": END still arrives, in a
    job.output after the dropped-bytes notice and before job.finished."""
    runner, events = SimRunner(), Events()
    async with open_lanes(
        runner, on_event=events, max_output_bytes=100, max_output_tail_bytes=20
    ) as lanes:
        job = lanes.start_job(
            req("bulk:60", "sleep:1", *(["bulk:100000"] * 10), "err:e", "out:\nEND\n")
        )
        await lanes.wait_idle()
    outputs = [p for p in events.of("job.output") if p["jobId"] == job]
    (notice,) = [p for p in outputs if "droppedBytes" in p]
    past_cap = 60 + 10 * 100_000 + 5 - 100
    assert notice["droppedBytes"] == past_cap - 20
    assert "its last 20 bytes follow" in str(notice["text"])
    after = outputs[outputs.index(notice) + 1 :]
    assert "".join(str(p["text"]) for p in after) == "x" * 15 + "\nEND\n"
    assert events.output(job, "stdout") == "x" * 100 + "x" * 15 + "\nEND\n"
    assert events.output(job, "stderr") == "e"
    events.check_job_order()  # every job.output, the tail included, before job.finished


async def test_output_tail_starts_on_a_line_or_character_boundary(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The kept tail is the last bytes of the stream: its partial first line is skipped when
    a newline is near its start, else it starts on a UTF-8 character boundary."""
    runner, events = SimRunner(), Events()
    lines = "".join(f"line {n:04}\n" for n in range(100))  # 10 bytes a line, 1000 bytes
    async with open_lanes(
        runner, on_event=events, max_output_bytes=100, max_output_tail_bytes=64
    ) as lanes:
        by_line = lanes.start_job(req(f"out:{lines}"))
        await lanes.wait_idle()
    assert events.output(by_line, "stdout") == lines[:100] + lines[940:]
    (notice,) = [p for p in events.of("job.output") if "droppedBytes" in p]
    assert notice["droppedBytes"] == 900 - 60

    runner, events = SimRunner(), Events()
    async with open_lanes(
        runner, on_event=events, max_output_bytes=4, max_output_tail_bytes=10
    ) as lanes:
        by_char = lanes.start_job(req("out:" + "€" * 100))  # 3 bytes a character
        await lanes.wait_idle()
    # Head: one whole character (4 bytes would split the second); tail: 10 bytes from the
    # end start inside a character, so the tail is the last 3 whole ones.
    assert events.output(by_char, "stdout") == "€" + "€€€"
    (notice,) = [p for p in events.of("job.output") if "droppedBytes" in p]
    assert notice["droppedBytes"] == 297 - 9


async def test_output_just_past_the_cap_arrives_whole(autojump_clock: trio.abc.Clock) -> None:
    """When the tail holds everything past the cap nothing is lost: no notice, whole text."""
    runner, events = SimRunner(), Events()
    async with open_lanes(
        runner, on_event=events, max_output_bytes=100, max_output_tail_bytes=1000
    ) as lanes:
        job = lanes.start_job(req("bulk:60", "sleep:1", "bulk:90", "out:é"))
        await lanes.wait_idle()
    assert events.output(job, "stdout") == "x" * 150 + "é"
    assert not [p for p in events.of("job.output") if "droppedBytes" in p]


async def test_statistics_and_list_jobs(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events, keep_finished=2) as lanes:
        assert lanes.statistics() == LanesStatistics(0, 0, 0, 0, 0)
        a = lanes.start_job(req("sleep:1"))
        b = lanes.start_job(req("sleep:1"))
        c = lanes.start_job(req("sleep:1", kind="pack"))
        d = lanes.start_job(req("sleep:1", root="/q"))
        assert lanes.statistics() == LanesStatistics(
            queued=2, running=2, finished=0, peak_queued=2, lanes=2
        )
        assert lanes.list_jobs() == [
            {"id": a, "kind": "command", "root": "/p", "state": "running"},
            {"id": b, "kind": "command", "root": "/p", "state": "queued"},
            {"id": c, "kind": "pack", "root": "/p", "state": "queued"},
            {"id": d, "kind": "command", "root": "/q", "state": "running"},
        ]
        await trio.sleep(1.5)
        assert lanes.statistics() == LanesStatistics(1, 1, 2, 2, 1)
        await lanes.wait_idle()
        assert lanes.statistics() == LanesStatistics(0, 0, 4, 2, 0)
        # Only the last keep_finished finished jobs are remembered.
        assert lanes.list_jobs() == [
            {"id": b, "kind": "command", "root": "/p", "state": "finished", "status": "ok"},
            {"id": c, "kind": "pack", "root": "/p", "state": "finished", "status": "ok"},
        ]


async def test_job_object_given_to_the_runner(autojump_clock: trio.abc.Clock) -> None:
    seen: list[Job] = []
    emits: list[object] = []

    async def runner(job: Job, emit_output: object) -> None:
        seen.append(job)
        assert job.state is JobState.RUNNING
        assert job.status is None
        job.exit_code = 0
        emits.append(emit_output)

    events = Events()
    async with open_lanes(runner, on_event=events) as lanes:
        lanes.start_job(req())
        await lanes.wait_idle()
    (job,) = seen
    assert job.state is JobState.FINISHED
    assert job.status is not None
    assert job.status.value == "ok"
    assert not job.timed_out
    assert job.error is None
    assert job.duration_ms == 0
    assert "job-1" in repr(job)
    emit = emits[0]
    assert callable(emit)
    with pytest.raises(RuntimeError, match="finished"):
        emit("stdout", "late")


async def test_emit_output_misuse_fails_the_job(autojump_clock: trio.abc.Clock) -> None:
    async def runner(job: Job, emit_output: object) -> None:
        assert callable(emit_output)
        emit_output("stdin", "x")

    events = Events()
    async with open_lanes(runner, on_event=events) as lanes:
        job = lanes.start_job(req())
        await lanes.wait_idle()
    assert events.status(job) == "failed"
    assert "stdin" in str(events.finished()[job]["error"])


async def test_an_on_event_error_is_a_bug_and_propagates(
    autojump_clock: trio.abc.Clock,
) -> None:
    def on_event(method: str, params: object) -> None:
        if method == "job.output":
            raise KeyError("host bug")

    with pytest.RaisesGroup(pytest.RaisesExc(KeyError), flatten_subgroups=True):
        async with open_lanes(SimRunner(), on_event=on_event) as lanes:
            lanes.start_job(req("out:x", "sleep:10"))
            await trio.sleep(20)


async def test_an_on_event_error_at_the_size_bound_propagates_from_the_runners_emit(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Output at the size bound goes to on_event from the runner's own emit_output call; the
    host's exception there still ends the lanes, it is not taken for the job's failure."""

    def on_event(method: str, params: object) -> None:
        if method == "job.output":
            raise KeyError("host bug")

    with pytest.RaisesGroup(pytest.RaisesExc(KeyError), flatten_subgroups=True):
        async with open_lanes(SimRunner(), on_event=on_event, max_output_event_bytes=8) as lanes:
            lanes.start_job(req("bulk:64", "sleep:10"))
            await trio.sleep(20)


async def test_output_at_the_size_bound_reaches_on_event_before_emit_returns(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Issue 25's flow control: what a reader emits past the event bound is in the host's
    hands before the reader reads again, with no checkpoint between (under load the flusher
    task used to run only after several more reads, past the queue's per-job bound)."""
    events = Events()
    seen: list[int] = []

    async def runner(job: Job, emit_output: Callable[[str, str], None]) -> None:
        for size in (3, 5, 8, 100):
            emit_output("stdout", "x" * size)
            seen.append(len(events.output(job.id, "stdout")))
        job.exit_code = 0

    async with open_lanes(
        runner, on_event=events, max_output_event_bytes=8, output_flush_ms=60_000
    ) as lanes:
        job = lanes.start_job(req())
        await lanes.wait_idle()
    # 3 waits for the flush interval; 3+5 reaches the bound; 8 and 100 each pass it.
    assert seen == [0, 8, 16, 116]
    chunks = [str(p["text"]) for p in events.of("job.output") if p["jobId"] == job]
    assert all(len(c) <= 8 for c in chunks)
    assert events.finished()[job]["durationMs"] == 0


async def test_a_bug_inside_a_job_task_ends_that_job_and_the_lane_goes_on(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job is a boundary: an exception in its own machinery (here its output flusher, a
    fault put into our code) finishes that job failed/internal, its runner cancelled and
    cleaned up; the next job of the lane runs; the lanes go on."""
    from lanes import _driver

    real_flush = _driver._JobOutput.flush
    fired: list[str] = []

    def flush(self: _driver._JobOutput) -> None:
        if not fired and self._pending:
            fired.append(self._job_id)
            raise RuntimeError("flush bug")
        real_flush(self)

    monkeypatch.setattr(_driver._JobOutput, "flush", flush)
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        broken = lanes.start_job(req("out:x", "sleep:10"))
        after = lanes.start_job(req("out:y"))
        await lanes.wait_idle()
    assert fired == [broken]
    finished = events.finished()
    assert (finished[broken]["status"], finished[broken]["errorCode"]) == ("failed", "internal")
    assert finished[broken]["error"] == "RuntimeError: flush bug"
    assert finished[after]["status"] == "ok"
    assert events.output(after, "stdout") == "y"
    events.check_job_order()


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_output_event_bytes"):
        Lanes(SimRunner(), on_event=Events(), max_output_event_bytes=3)
    with pytest.raises(ValueError, match="max_output_bytes"):
        Lanes(SimRunner(), on_event=Events(), max_output_bytes=-1)
    with pytest.raises(ValueError, match="max_output_tail_bytes"):
        Lanes(SimRunner(), on_event=Events(), max_output_tail_bytes=-1)
    with pytest.raises(ValueError, match="output_flush_ms"):
        Lanes(SimRunner(), on_event=Events(), output_flush_ms=-1)
    with pytest.raises(ValueError, match="keep_finished"):
        Lanes(SimRunner(), on_event=Events(), keep_finished=-1)


# --- named lanes and max_running (issue 29: lint beside build and test) ------------------


def on_lane(lane: str | None, *steps: str, root: str = "/p", kind: str = "command") -> JobRequest:
    return JobRequest(kind=JobKind(kind), root=root, argv=steps or ("sleep:1",), lane=lane)


async def test_named_lanes_of_one_project_run_side_by_side(autojump_clock: trio.abc.Clock) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events) as lanes:
        build = lanes.start_job(on_lane(None, "sleep:2", kind="build"))
        test = lanes.start_job(on_lane(None, "sleep:2", kind="test"))
        lint = lanes.start_job(on_lane("lint", "sleep:1"))
        # One name is one lane, whatever the root.
        fmt = lanes.start_job(on_lane("lint", "sleep:1", root="/elsewhere"))
        assert lanes.statistics().lanes == 2
        await lanes.wait_idle()
    assert runner.overlaps == []
    start = runner.times("start")
    assert start[lint] == pytest.approx(start[build])  # lint beside build
    assert start[test] == pytest.approx(start[build] + 2)  # test after build: one lane
    assert start[fmt] == pytest.approx(start[lint] + 1)
    # The events still name the job's project.
    assert {e["jobId"]: e["root"] for e in events.of("job.started")}[fmt] == "/elsewhere"
    events.check_job_order()


def test_a_lane_name_is_a_printable_name() -> None:
    for bad in ("", " ", "a\nb", "x" * 257):
        with pytest.raises(ValueError, match="lane must be a name"):
            on_lane(bad)
    with pytest.raises(TypeError):
        on_lane(3)  # type: ignore[arg-type]
    assert on_lane("x" * 256).lane_key == "lane:" + "x" * 256
    assert on_lane(None).lane_key == "/p"


async def test_max_running_bounds_the_jobs_that_run_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Three lanes, at most two at once: the third lane's job waits, queued, for a slot; its
    job.started and its deadline start when it gets one."""
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events, max_running=2) as lanes:
        a = lanes.start_job(on_lane("a", "sleep:3"))
        b = lanes.start_job(on_lane("b", "sleep:1"))
        c = JobRequest(
            kind=JobKind.COMMAND, root="/p", argv=("sleep:1.5",), lane="c", timeout_ms=2000
        )
        c_id = lanes.start_job(c)
        b2 = lanes.start_job(on_lane("b", "sleep:1"))
        assert events.started_ids() == [a, b]
        assert lanes.statistics() == LanesStatistics(
            queued=2, running=2, finished=0, peak_queued=2, lanes=3
        )
        assert {j["id"]: j["state"] for j in lanes.list_jobs()}[c_id] == "queued"
        await lanes.wait_idle()
    assert runner.peak == 2
    start = runner.times("start")
    # b ended at 1: the oldest waiting job (c, before b's own next job) took its slot.
    assert start[c_id] == pytest.approx(start[a] + 1)
    assert start[b2] == pytest.approx(start[a] + 2.5)
    # c ran 1.5 s of its 2 s deadline: the wait for a slot did not count.
    assert events.status(c_id) == "ok"
    assert events.finished()[c_id]["durationMs"] == 1500
    events.check_job_order()


async def test_a_job_waiting_for_a_slot_ends_as_one_that_never_started(
    autojump_clock: trio.abc.Clock,
) -> None:
    runner, events = SimRunner(), Events()
    async with open_lanes(runner, on_event=events, max_running=1) as lanes:
        first = lanes.start_job(on_lane("a", "sleep:5"))
        cancelled = lanes.start_job(on_lane("b", "sleep:1"))
        after = lanes.start_job(on_lane("b", "sleep:1"))
        superseded = lanes.start_job(on_lane("c", "sleep:1"))
        newer = lanes.start_job(
            JobRequest(kind=JobKind.COMMAND, root="/p", argv=("sleep:1",), lane="c", supersede=True)
        )
        left = lanes.start_job(on_lane("d", "sleep:1"))
        assert lanes.cancel_job(cancelled)
        assert not lanes.cancel_job(cancelled)
        assert events.status(cancelled) == "cancelled"
        assert events.status(superseded) == "superseded"
        assert events.finished()[cancelled]["durationMs"] == 0
        await trio.sleep(5.5)
        # The slot went to the job its lane started first: newer (its lane started it when
        # it superseded the waiting one), before left, and after (started by its lane only
        # when the cancelled one ended).
        assert events.started_ids() == [first, newer]
    # Closing ends the jobs still waiting for a slot, never started.
    assert events.status(newer) == "cancelled"
    assert events.status(left) == "cancelled"
    assert events.status(after) == "cancelled"
    assert events.started_ids() == [first, newer]
    assert runner.peak == 1
    events.check_job_order()


def test_max_running_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_running"):
        Lanes(SimRunner(), on_event=Events(), max_running=0)
