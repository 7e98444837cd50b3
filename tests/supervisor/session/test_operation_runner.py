"""The one operation runner (supervisor/_session/_operations.py ``run_operation``).

Issue 24.2: every kind (the Core, LSP requests, debug operations, plugin calls) runs an
operation through one procedure: its scope (deadline, cancel), containment (``internal``,
logged once, never the session), finished exactly once whatever ends it first, forgotten
once. Pure Trio, deadlines on the MockClock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from protocol import CoreError
from supervisor._session._operations import run_operation

if TYPE_CHECKING:
    import pytest


@dataclass
class _Op:
    outcomes: list[str] = field(default_factory=list)
    forgotten: int = 0
    after: list[bool] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return bool(self.outcomes)

    def finish(self, outcome: str) -> None:
        # A kind's finish ignores a second outcome; the list shows whether one was offered.
        self.outcomes.append(outcome)

    @property
    def outcome(self) -> str:
        assert len(self.outcomes) == 1, self.outcomes
        return self.outcomes[0]


async def _run(op: _Op, step: object, scope: trio.CancelScope | None = None) -> None:
    def forget() -> None:
        op.forgotten += 1

    def answer(exc: Exception) -> str | None:
        return f"answer:{exc.code}" if isinstance(exc, CoreError) else None

    await run_operation(
        op,
        step,  # type: ignore[arg-type]
        scope=scope if scope is not None else trio.CancelScope(),
        what="test operation",
        finish=op.finish,
        forget=forget,
        internal=lambda exc: f"internal:{type(exc).__name__}",
        caught=lambda: "caught",
        ended=lambda: "ended",
        answer=answer,
        after=op.after.append,
    )


async def test_the_steps_own_outcome_is_the_one() -> None:
    op = _Op()

    async def step() -> None:
        await trio.lowlevel.checkpoint()
        op.finish("result")

    await _run(op, step)
    assert op.outcome == "result"
    assert op.forgotten == 1
    assert op.after == []


async def test_an_unexpected_failure_ends_it_internal_logged_once_and_is_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    op = _Op()

    async def step() -> None:
        raise ZeroDivisionError("boom")

    with caplog.at_level(logging.ERROR):
        await _run(op, step)
    assert op.outcome == "internal:ZeroDivisionError"
    assert op.forgotten == 1
    logged = [r for r in caplog.records if "test operation" in r.getMessage()]
    assert len(logged) == 1


async def test_the_kinds_own_answer_is_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    op = _Op()

    async def step() -> None:
        await trio.lowlevel.checkpoint()
        raise CoreError("not_supported", "no")

    with caplog.at_level(logging.ERROR):
        await _run(op, step)
    assert op.outcome == "answer:not_supported"
    assert not [r for r in caplog.records if "test operation" in r.getMessage()]


async def test_the_deadline_ends_it_once(autojump_clock: trio.abc.Clock) -> None:
    op = _Op()
    scope = trio.CancelScope(deadline=trio.current_time() + 5)

    async def step() -> None:
        await trio.sleep_forever()

    await _run(op, step, scope)
    assert op.outcome == "caught"
    assert op.after == [True]
    assert op.forgotten == 1


async def test_a_result_before_the_deadline_is_kept(autojump_clock: trio.abc.Clock) -> None:
    op = _Op()
    scope = trio.CancelScope(deadline=trio.current_time() + 5)

    async def step() -> None:
        op.finish("result")
        await trio.sleep(10)  # the deadline passes after the outcome: it changes nothing

    await _run(op, step, scope)
    assert op.outcome == "result"
    assert op.after == []


async def test_a_cancel_that_finished_first_is_the_outcome() -> None:
    op = _Op()
    scope = trio.CancelScope()

    async def step() -> None:
        # What a kind's cancel does: finish with its outcome, then cancel the scope.
        op.finish("cancelled")
        scope.cancel()
        await trio.sleep_forever()

    await _run(op, step, scope)
    assert op.outcome == "cancelled"
    assert op.after == []


async def test_the_end_from_outside_finishes_it_and_propagates(
    autojump_clock: trio.abc.Clock,
) -> None:
    op = _Op()

    async def step() -> None:
        await trio.sleep_forever()

    with trio.move_on_after(1) as outer:
        await _run(op, step)
    assert outer.cancelled_caught  # the Cancelled went through the runner
    assert op.outcome == "ended"
    assert op.after == [False]
    assert op.forgotten == 1


async def test_a_failure_while_cancelled_from_outside_is_internal_and_the_cancel_propagates(
    autojump_clock: trio.abc.Clock,
) -> None:
    op = _Op()

    async def fail_when_cancelled() -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise ValueError("failed while it was cancelled")

    async def step() -> None:
        # The group holds the failure and the outside's Cancelled.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail_when_cancelled)
            nursery.start_soon(trio.sleep_forever)

    with trio.move_on_after(1) as outer:
        await _run(op, step)
    assert outer.cancelled_caught  # the Cancelled part went on
    assert op.outcome == "internal:ExceptionGroup"
    assert op.after == []
    assert op.forgotten == 1


async def test_results_racing_the_deadline_finish_once_each(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Many operations whose results come at the very moment of their deadline: each is
    # finished once, by whichever came first, and forgotten once.
    ops = [_Op() for _ in range(50)]

    async def one(op: _Op, n: int) -> None:
        scope = trio.CancelScope(deadline=trio.current_time() + 1)

        async def step() -> None:
            await trio.sleep(1 if n % 2 else 0.999)
            op.finish("result")
            await trio.sleep(1)

        await _run(op, step, scope)

    async with trio.open_nursery() as nursery:
        for n, op in enumerate(ops):
            nursery.start_soon(one, op, n)
    for n, op in enumerate(ops):
        assert len(op.outcomes) == 1
        assert op.forgotten == 1
        assert op.outcome == ("caught" if n % 2 else "result")
