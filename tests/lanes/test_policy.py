"""The lane policy as pure code: no trio, no clock, no processes (issue 2 section 6)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lanes import (
    CancelRunning,
    FinishQueued,
    JobKind,
    JobState,
    JobStatus,
    LaneAction,
    LanePolicy,
    StartJob,
    normalize_root,
)

BUILD, TEST, PACK, COMMAND = JobKind.BUILD, JobKind.TEST, JobKind.PACK, JobKind.COMMAND
SUPERSEDED, CANCELLED = JobStatus.SUPERSEDED, JobStatus.CANCELLED


def test_first_job_starts_and_the_rest_wait_in_order() -> None:
    lane = LanePolicy("/p")
    assert lane.idle
    assert lane.submit("j1", COMMAND) == [StartJob("j1")]
    assert lane.submit("j2", PACK) == []
    assert lane.submit("j3", COMMAND) == []
    assert lane.running == "j1"
    assert lane.queued == ("j2", "j3")
    assert lane.state("j1") is JobState.RUNNING
    assert lane.state("j2") is JobState.QUEUED
    assert lane.job_ended("j1") == [StartJob("j2")]
    assert lane.job_ended("j2") == [StartJob("j3")]
    assert lane.job_ended("j3") == []
    assert lane.idle
    assert lane.state("j3") is None


@pytest.mark.parametrize("kind", [BUILD, TEST])
def test_a_waiting_build_or_test_is_replaced_in_place(kind: JobKind) -> None:
    lane = LanePolicy("/p")
    lane.submit("run", COMMAND)
    lane.submit("old", kind)
    lane.submit("other", PACK)
    assert lane.submit("new", kind) == [FinishQueued("old", SUPERSEDED)]
    # The replacement keeps the replaced job's place: it still runs before "other".
    assert lane.queued == ("new", "other")
    assert lane.state("old") is None


def test_replacement_is_per_kind_and_only_for_build_and_test() -> None:
    lane = LanePolicy("/p")
    lane.submit("run", COMMAND)
    lane.submit("b1", BUILD)
    assert lane.submit("t1", TEST) == []
    assert lane.submit("p1", PACK) == []
    assert lane.submit("p2", PACK) == []
    assert lane.submit("c1", COMMAND) == []
    assert lane.queued == ("b1", "t1", "p1", "p2", "c1")


def test_a_running_build_is_not_replaced_without_supersede() -> None:
    lane = LanePolicy("/p")
    lane.submit("b1", BUILD)
    assert lane.submit("b2", BUILD) == []
    assert lane.running == "b1"
    assert lane.queued == ("b2",)


def test_supersede_cancels_the_running_job_and_queues_normally() -> None:
    lane = LanePolicy("/p")
    lane.submit("r", COMMAND)
    lane.submit("q", PACK)
    assert lane.submit("s", TEST, supersede=True) == [CancelRunning("r", SUPERSEDED)]
    assert lane.running_cancel_status is SUPERSEDED
    # The running slot stays taken until the runner has cleaned up.
    assert lane.running == "r"
    assert lane.queued == ("q", "s")
    assert lane.submit("x", PACK) == []
    assert lane.job_ended("r") == [StartJob("q")]
    assert lane.running_cancel_status is None


def test_supersede_with_replacement_gives_both_actions_in_order() -> None:
    lane = LanePolicy("/p")
    lane.submit("b1", BUILD)
    lane.submit("b2", BUILD)
    assert lane.submit("b3", BUILD, supersede=True) == [
        CancelRunning("b1", SUPERSEDED),
        FinishQueued("b2", SUPERSEDED),
    ]
    assert lane.queued == ("b3",)


def test_supersede_on_an_idle_lane_just_starts() -> None:
    lane = LanePolicy("/p")
    assert lane.submit("s", BUILD, supersede=True) == [StartJob("s")]


def test_a_job_being_cancelled_is_not_cancelled_twice() -> None:
    lane = LanePolicy("/p")
    lane.submit("r", COMMAND)
    assert lane.cancel("r") == [CancelRunning("r", CANCELLED)]
    assert lane.cancel("r") == []
    assert lane.submit("s", BUILD, supersede=True) == []
    assert lane.running_cancel_status is CANCELLED
    assert lane.job_ended("r") == [StartJob("s")]


def test_cancel_queued_running_unknown() -> None:
    lane = LanePolicy("/p")
    lane.submit("r", COMMAND)
    lane.submit("q1", COMMAND)
    lane.submit("q2", COMMAND)
    assert lane.cancel("q1") == [FinishQueued("q1", CANCELLED)]
    assert lane.queued == ("q2",)
    assert lane.cancel("q1") == []
    assert lane.cancel("nope") == []
    assert lane.cancel("r", SUPERSEDED) == [CancelRunning("r", SUPERSEDED)]
    # Nothing starts before the cancelled job's runner has returned.
    assert lane.running == "r"
    assert lane.job_ended("r") == [StartJob("q2")]


@pytest.mark.parametrize("kind", [BUILD, TEST])
def test_untrusted_build_and_test_are_denied_and_change_nothing(kind: JobKind) -> None:
    lane = LanePolicy("/p")
    lane.submit("r", COMMAND)
    lane.submit("w", kind)
    denied = lane.submit("d", kind, supersede=True, trusted=False)
    assert denied == [FinishQueued("d", JobStatus.DENIED)]
    assert lane.running == "r"
    assert lane.running_cancel_status is None
    assert lane.queued == ("w",)


@pytest.mark.parametrize("kind", [PACK, COMMAND, JobKind.ADD, JobKind.TOOLCHAIN])
def test_untrusted_other_kinds_run(kind: JobKind) -> None:
    lane = LanePolicy("/p")
    assert lane.submit("j", kind, trusted=False) == [StartJob("j")]


def test_cancel_all_closes_the_lane() -> None:
    lane = LanePolicy("/p")
    lane.submit("r", COMMAND)
    lane.submit("q1", BUILD)
    lane.submit("q2", PACK)
    assert lane.cancel_all() == [
        CancelRunning("r", CANCELLED),
        FinishQueued("q1", CANCELLED),
        FinishQueued("q2", CANCELLED),
    ]
    assert lane.closed
    assert lane.cancel_all() == []
    with pytest.raises(RuntimeError, match="closed"):
        lane.submit("late", COMMAND)
    assert lane.job_ended("r") == []
    assert lane.idle


def test_misuse_raises() -> None:
    lane = LanePolicy("/p")
    lane.submit("a", COMMAND)
    lane.submit("b", COMMAND)
    with pytest.raises(ValueError, match="already"):
        lane.submit("b", COMMAND)
    with pytest.raises(RuntimeError, match="not running"):
        lane.job_ended("b")
    with pytest.raises(ValueError, match="JobKind"):
        lane.submit("c", "nonsense")  # type: ignore[arg-type]


def test_normalize_root() -> None:
    assert normalize_root("/p/x/") == "/p/x"
    assert normalize_root("/p/./y/../x") == "/p/x"
    assert normalize_root("rel") == os.path.join(os.path.realpath(os.getcwd()), "rel")


KINDS = st.sampled_from(list(JobKind))


class LaneMachine(RuleBasedStateMachine):
    """Random op sequences against one lane; a driver simulated by the test.

    Invariants: at most one job runs; a job starts at most once and only while queued; every
    job finishes exactly once; jobs start in queue order, where a replacement takes the rank
    of the job it replaced; at most one build and one test wait; a free open lane has no
    waiting job.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lane = LanePolicy("/p")
        self.count = 0
        self.rank: dict[str, int] = {}
        self.kind: dict[str, JobKind] = {}
        self.started: list[str] = []
        self.finished: dict[str, JobStatus | None] = {}
        self.cancel_status: dict[str, JobStatus] = {}
        self.running: str | None = None

    def apply(self, actions: list[LaneAction]) -> None:
        for action in actions:
            job = action.job_id
            assert job not in self.finished, f"{job} acted on after it finished"
            if isinstance(action, StartJob):
                assert job not in self.started
                assert self.running is None
                self.running = job
                self.started.append(job)
            elif isinstance(action, CancelRunning):
                assert job == self.running
                assert job not in self.cancel_status, "cancelled twice"
                self.cancel_status[job] = action.status
            else:
                assert job not in self.started
                self.finished[job] = action.status

    @rule(kind=KINDS, supersede=st.booleans(), trusted=st.booleans())
    def submit(self, kind: JobKind, supersede: bool, trusted: bool) -> None:
        self.count += 1
        job = f"j{self.count}"
        self.kind[job] = kind
        queued_before = self.lane.queued
        if self.lane.closed:
            with pytest.raises(RuntimeError):
                self.lane.submit(job, kind, supersede=supersede, trusted=trusted)
            self.finished[job] = None
            return
        actions = self.lane.submit(job, kind, supersede=supersede, trusted=trusted)
        if not trusted and kind in (BUILD, TEST):
            assert actions == [FinishQueued(job, JobStatus.DENIED)]
        replaced = [a.job_id for a in actions if isinstance(a, FinishQueued) and a.job_id != job]
        assert len(replaced) <= 1
        if replaced:
            assert replaced[0] in queued_before
            assert self.kind[replaced[0]] == kind
            self.rank[job] = self.rank[replaced[0]]
        else:
            self.rank[job] = self.count
        self.apply(actions)
        for action in actions:
            if isinstance(action, FinishQueued) and action.job_id != job:
                assert action.status is SUPERSEDED

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if self.count == 0:
            return
        job = f"j{data.draw(st.integers(1, self.count))}"
        state = self.lane.state(job)
        actions = self.lane.cancel(job)
        if state is JobState.QUEUED:
            assert actions == [FinishQueued(job, CANCELLED)]
        elif state is JobState.RUNNING and job not in self.cancel_status:
            assert actions == [CancelRunning(job, CANCELLED)]
        else:
            assert actions == []
        self.apply(actions)

    @precondition(lambda self: self.running is not None)
    @rule()
    def end_running(self) -> None:
        job = self.running
        assert job is not None
        self.running = None
        actions = self.lane.job_ended(job)
        self.finished[job] = self.cancel_status.get(job)
        self.apply(actions)

    @rule()
    def close(self) -> None:
        self.apply(self.lane.cancel_all())

    @invariant()
    def consistent(self) -> None:
        assert self.lane.running == self.running
        unfinished_started = [j for j in self.started if j not in self.finished]
        assert len(unfinished_started) <= (1 if self.running else 0)
        ranks = [self.rank[j] for j in self.started]
        assert ranks == sorted(ranks)
        assert len(set(ranks)) == len(ranks)
        queued = self.lane.queued
        assert [self.rank[j] for j in queued] == sorted(self.rank[j] for j in queued)
        assert sum(self.kind[j] == BUILD for j in queued) <= 1
        assert sum(self.kind[j] == TEST for j in queued) <= 1
        if self.running is None and not self.lane.closed:
            assert not queued
        for job in queued:
            assert job not in self.finished
            assert job not in self.started

    def teardown(self) -> None:
        self.apply(self.lane.cancel_all())
        if self.running is not None:
            self.end_running()
        assert self.lane.idle
        assert set(self.finished) == set(self.kind), "every job finishes exactly once"


LaneMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_lane_machine = LaneMachine.TestCase
