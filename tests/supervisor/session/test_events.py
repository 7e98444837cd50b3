"""The bounded event queue: order, gaps, and events that need an answer never dropped."""

from __future__ import annotations

import trio

from supervisor._session._events import ANSWER_EVENTS, EventQueue


def _names(drain: object) -> list[tuple[int, str]]:
    assert isinstance(drain, dict)
    events = drain["events"]
    assert isinstance(events, list)
    return [(e["seq"], e["event"]) for e in events]


def test_full_queue_drops_the_oldest_and_reports_a_gap() -> None:
    queue = EventQueue(3)
    for i in range(5):
        queue.put("log", {"i": i})
    drain = queue.poll()
    assert _names(drain) == [(3, "log"), (4, "log"), (5, "log")]
    assert drain["gap"] is True
    assert queue.statistics().dropped == 2
    queue.put("log", {})
    assert queue.poll()["gap"] is False


def test_events_that_need_an_answer_are_never_dropped() -> None:
    assert "hostRequest" in ANSWER_EVENTS
    queue = EventQueue(3)
    queue.put("hostRequest", {"hostRequestID": "a"})
    queue.put("runInTerminalRequested", {"requestId": "b"})
    for i in range(10):
        queue.put("output", {"i": i})
    drain = queue.poll()
    names = _names(drain)
    # Both requests survive a flood ten times the bound; the flood keeps its newest event.
    assert names[:2] == [(1, "hostRequest"), (2, "runInTerminalRequested")]
    assert names[2:] == [(12, "output")]
    assert drain["gap"] is True


def test_a_queue_of_only_answer_events_grows_past_the_bound() -> None:
    # They are bounded where they are made (16 pending host requests per session).
    queue = EventQueue(2)
    for i in range(4):
        queue.put("hostRequest", {"hostRequestID": str(i)})
    drain = queue.poll()
    assert [seq for seq, _ in _names(drain)] == [1, 2, 3, 4]
    assert drain["gap"] is False


async def test_wait_returns_when_an_event_arrives(autojump_clock: trio.abc.Clock) -> None:
    queue = EventQueue(4)

    async def later() -> None:
        await trio.sleep(5)
        queue.put("exited", {})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        start = trio.current_time()
        drain = await queue.wait(60_000)
    assert _names(drain) == [(1, "exited")]
    assert abs(trio.current_time() - start - 5) < 1e-9


def test_a_flood_of_informational_events_never_pushes_out_an_outcome() -> None:
    """A server that logs without pause used to push ``requestCompleted`` and
    ``stateChanged`` out of a queue nobody drained for a while; now the logs go first."""
    queue = EventQueue(4)
    queue.put("stateChanged", {"state": "ready"})
    for i in range(3):
        queue.put("log", {"i": i})
    queue.put("requestCompleted", {"operationId": "op"})
    for i in range(1000):
        queue.put("log", {"i": i})
    drain = queue.poll()
    names = _names(drain)
    assert (1, "stateChanged") in names
    assert (5, "requestCompleted") in names
    assert [seq for seq, _ in names] == sorted(seq for seq, _ in names)
    assert len(names) == 4
    assert drain["gap"] is True


def test_outcomes_go_oldest_first_once_nothing_informational_is_left() -> None:
    queue = EventQueue(2)
    for i in range(5):
        queue.put("requestCompleted", {"i": i})
    assert [seq for seq, _ in _names(queue.poll())] == [4, 5]


async def test_a_waiter_sees_the_next_event_after_another_caller_drained(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A long poll (or serve's forwarder) waits; another caller polls an empty queue in
    # between. The waiter must still wake for the next event, not sleep to its timeout.
    queue = EventQueue(4)
    woke_at: list[float] = []
    start = trio.current_time()

    async def long_poll() -> None:
        drain = await queue.wait(60_000)
        assert _names(drain) == [(1, "exited")]
        woke_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_poll)
        await trio.sleep(1)
        assert _names(queue.poll()) == []
        await trio.sleep(1)
        queue.put("exited", {})
    # Woken at the put, 2 s in, not at its 60 s timeout.
    assert len(woke_at) == 1
    assert abs(woke_at[0] - start - 2) < 1e-9


async def test_a_waiter_whose_event_another_caller_took_waits_on_to_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    queue = EventQueue(4)
    results: list[object] = []

    async def long_poll() -> None:
        start = trio.current_time()
        results.append(_names(await queue.wait(10_000)))
        results.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_poll)
        await trio.sleep(1)
        queue.put("exited", {})
        # Drained by someone else before the waiter ran: the waiter keeps waiting.
        assert _names(queue.poll()) == [(1, "exited")]
        await trio.sleep(2)
        queue.put("output", {})
    assert results[0] == [(2, "output")]
    waited = results[1]
    assert isinstance(waited, float)
    assert abs(waited - 3) < 1e-9
