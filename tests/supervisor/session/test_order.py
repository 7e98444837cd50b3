"""The order rule's primitive (supervisor/_session/_order.py): one line per target.

Issue 24: operations on one target take effect in arrival order; a cancelled waiter leaves
its line without its effect; different targets never wait for each other.
"""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from supervisor._session._order import (
    Sequencer,
    Turn,
    _current_turn,
    effect_taken,
    hold_turn,
    withdrawn,
)


async def _take(turn: Turn, log: list[int], n: int) -> None:
    try:
        await turn.wait()
        log.append(n)
        await trio.lowlevel.checkpoint()  # an effect that passes through the scheduler
    finally:
        turn.release()


async def test_effects_follow_arrival_order_whatever_order_the_tasks_run_in() -> None:
    sequencer = Sequencer()
    log: list[int] = []
    turns = [sequencer.arrive(("terminal", "t")) for _ in range(200)]
    order = list(range(200))
    random.Random(24).shuffle(order)  # tasks start in no particular order
    async with trio.open_nursery() as nursery:
        for n in order:
            nursery.start_soon(_take, turns[n], log, n)
    assert log == list(range(200))
    assert sequencer.statistics().targets == 0  # an idle target keeps no line


async def test_a_cancelled_waiter_leaves_without_its_effect_and_the_next_goes_on() -> None:
    sequencer = Sequencer()
    log: list[int] = []
    first, second, third = (sequencer.arrive(("lsp", "s")) for _ in range(3))
    assert first.is_head
    assert not second.is_head
    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            await _take(second, log, 2)  # cancelled while it waits: no effect
        assert second.released
        nursery.start_soon(_take, third, log, 3)
        await trio.testing.wait_all_tasks_blocked()
        assert log == []  # the third waits for the first
        first.release()
    assert log == [3]


async def test_different_targets_do_not_wait_for_each_other() -> None:
    sequencer = Sequencer()
    stuck = sequencer.arrive(("terminal", "a"))
    behind = sequencer.arrive(("terminal", "a"))
    other = sequencer.arrive(("terminal", "b"))
    assert stuck.is_head
    assert not behind.is_head
    assert other.is_head
    with trio.fail_after(1):
        await other.wait()
    assert sequencer.waiting(("terminal", "a")) == 1
    assert sequencer.waiting(("terminal", "b")) == 0
    stuck.release()
    assert behind.is_head


async def test_a_released_turn_in_the_middle_is_skipped() -> None:
    sequencer = Sequencer()
    a, b, c = (sequencer.arrive(("debug", "d")) for _ in range(3))
    b.release()  # left the line while waiting
    a.release()
    assert c.is_head
    c.release()
    assert sequencer.statistics().targets == 0
    with pytest.raises(RuntimeError, match="released"):
        await b.wait()


async def test_effect_taken_releases_only_in_the_operations_own_task() -> None:
    sequencer = Sequencer()
    turn = sequencer.arrive(("lsp", "s"))
    later = sequencer.arrive(("lsp", "s"))
    token = hold_turn(turn)
    try:

        async def child() -> None:
            # Inherits the context (a session reader started by the command): no effect.
            effect_taken()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
        assert not turn.released
        effect_taken()
        assert turn.released
        assert later.is_head
        effect_taken()  # twice: no effect
    finally:
        from supervisor._session._order import _current_turn

        _current_turn.reset(token)
    effect_taken()  # outside an operation: no effect
    later.release()


async def test_a_named_waiter_is_withdrawn_without_its_effect_and_the_line_goes_on() -> None:
    """cancel40: a cancel finds an operation still in line by its name, on its own target
    only; it leaves the line at once, its task sees :func:`withdrawn`, and a turn already
    taken (or another target's) can not be withdrawn."""
    sequencer = Sequencer()
    first, second, third = (sequencer.arrive(("lsp", "s")) for _ in range(3))
    other = sequencer.arrive(("lsp", "t"))
    for turn, name in ((first, "a"), (second, "b"), (third, "c"), (other, "b")):
        turn.name = name
    seen: list[tuple[str, str | None]] = []

    async def operation(turn: Turn) -> None:
        token = hold_turn(turn)
        try:
            await turn.wait()
            seen.append((str(turn.name), withdrawn()))
            if turn is first:
                await trio.sleep_forever()  # an effect that does not end
        finally:
            turn.release()
            _current_turn.reset(token)

    async with trio.open_nursery() as nursery:
        for turn in (first, second, third):
            nursery.start_soon(operation, turn)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == [("a", None)]  # the first took its turn and holds it
        assert sequencer.withdraw(("lsp", "s"), "a", "cancelled") is None  # begun
        assert sequencer.withdraw(("lsp", "s"), "nobody", "cancelled") is None
        assert sequencer.withdraw(("lsp", "s"), "b", "cancelled") is second
        assert not second.waiting
        assert sequencer.withdraw(("lsp", "s"), "b", "cancelled") is None  # once
        await trio.testing.wait_all_tasks_blocked()
        assert seen == [("a", None), ("b", "cancelled")]  # ended at once, third waits
        assert other.waiting  # the other target's "b" was not touched
        nursery.cancel_scope.cancel()
    other.release()


async def test_a_head_whose_task_has_not_run_can_be_withdrawn() -> None:
    """The head of an idle target is withdrawn too while its task has not run (a cancel
    whose task ran first): the next one becomes the head."""
    sequencer = Sequencer()
    head, behind = sequencer.arrive(("debug", "d")), sequencer.arrive(("debug", "d"))
    head.name = "h"
    assert head.is_head
    assert sequencer.withdraw(("debug", "d"), "h", "timedOut") is head
    assert behind.is_head
    await head.wait()  # returns: the operation ends, withdrawn
    assert head.withdrawn == "timedOut"
    behind.release()
    assert sequencer.statistics().targets == 0
