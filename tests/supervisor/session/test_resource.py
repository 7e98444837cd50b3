"""The base session resource: a stop runs its ladder once; a second stop joins the first."""

from __future__ import annotations

import pytest
import trio

from supervisor._session._resource import SessionResource


class _Ladder(SessionResource[dict[str, object]]):
    """A session whose ladder takes 5 s and counts how often it starts (TERM, KILL)."""

    def __init__(self, *, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.ladders = 0
        self.kills = 0

    async def stop(self) -> dict[str, object]:
        return await self._stop_once(self._ladder, fallback=lambda: {"reason": "internal"})

    async def _ladder(self) -> dict[str, object]:
        self.ladders += 1
        await trio.sleep(2)  # the polite step
        self.kills += 1
        await trio.sleep(3)  # the TERM grace, the kill wait, the drain
        if self.fail:
            raise RuntimeError("the ladder broke")
        return {"reason": "stopped", "at": trio.current_time()}


async def test_two_concurrent_stops_get_the_same_result_and_one_ladder(
    autojump_clock: trio.abc.Clock,
) -> None:
    session = _Ladder()
    results: list[dict[str, object]] = []

    async def stop(delay: float) -> None:
        await trio.sleep(delay)
        results.append(await session.stop())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop, 0)
        # The second stop comes during the polite step: it must not hurry the kill.
        nursery.start_soon(stop, 1)
    assert session.ladders == 1
    assert session.kills == 1
    assert results[0] is results[1]
    assert results[0] == {"reason": "stopped", "at": 5.0}
    assert session.ended
    assert session.stop_started
    assert session.stop_result is results[0]


async def test_concurrent_acloses_join_and_a_later_one_returns_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    session = _Ladder()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.aclose)
        nursery.start_soon(session.aclose)
    assert trio.current_time() == 5.0
    await session.aclose()
    assert trio.current_time() == 5.0
    assert session.ladders == 1


async def test_a_cancelled_caller_still_ends_the_session(autojump_clock: trio.abc.Clock) -> None:
    session = _Ladder()
    with trio.move_on_after(1):
        await session.aclose()
    # The ladder is the session's: it ran to its end although its caller gave up.
    assert session.ended
    assert trio.current_time() == 5.0


async def test_wait_ended_wakes_every_waiter(autojump_clock: trio.abc.Clock) -> None:
    session = _Ladder()
    woken: list[float] = []

    async def waiter() -> None:
        await session.wait_ended()
        woken.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
        await trio.sleep(1)
        assert not session.ended
        assert session.stop_result is None
        await session.stop()
    assert woken == [6.0, 6.0]  # the stop began at 1 s; its ladder takes 5 s


async def test_a_failing_ladder_still_ends_with_the_fallback(
    autojump_clock: trio.abc.Clock,
) -> None:
    session = _Ladder(fail=True)
    joined: list[dict[str, object]] = []

    async def join() -> None:
        await trio.sleep(1)
        joined.append(await session.stop())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join)
        # The first caller hears of the failure; the joiner gets the fallback result.
        with pytest.raises(RuntimeError, match="the ladder broke"):
            await session.stop()
    assert joined == [{"reason": "internal"}]
    assert session.ended
    assert session.stop_result == {"reason": "internal"}
    assert await session.stop() is session.stop_result


def test_claim_and_mark_are_idempotent() -> None:
    session = _Ladder()
    assert session._claim_stop() is True
    assert session._claim_stop() is False
    session._mark_ended({"reason": "first"})
    session._mark_ended({"reason": "second"})
    assert session.stop_result == {"reason": "first"}
    assert session.ended
