"""The bounded event queue: order, gaps, and events that need an answer never dropped."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest
import trio

import supervisor._session._events as events_module
from protocol._json import encoded_size
from supervisor._flow import Watermarks, current_answer_room
from supervisor._session._events import ANSWER_EVENTS, EventBudget, EventQueue

if TYPE_CHECKING:
    from protocol import JSONObject


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


# -- coalescing per target, byte bounds, drop reports, flow control (issue 25) -------------


def _events(drain: object) -> list[JSONObject]:
    assert isinstance(drain, dict)
    events = drain["events"]
    assert isinstance(events, list)
    return [e for e in events if isinstance(e, dict)]


def _size(seq: int, event: str, params: JSONObject) -> int:
    return encoded_size({"seq": seq, "event": event, **params})


def test_a_flooding_target_never_pushes_out_another_targets_events() -> None:
    queue = EventQueue(max_target_bytes=4000)
    sizes = {}
    for i in range(100):
        params: JSONObject = {"jobId": "a", "text": "x" * 100, "i": i}
        sizes[i + 1] = _size(i + 1, "job.output", params)
        queue.put("job.output", params)
    for i in range(3):
        queue.put("job.output", {"jobId": "b", "text": "quiet", "i": i})
    drain = queue.poll()
    events = _events(drain)
    quiet = [e for e in events if e["jobId"] == "b"]
    assert [e["i"] for e in quiet] == [0, 1, 2]
    assert not any("dropped" in e for e in quiet)
    loud = [e for e in events if e["jobId"] == "a"]
    assert loud[-1]["i"] == 99  # the newest is kept
    kept = {int(str(e["seq"])) for e in loud}
    lost = [seq for seq in sizes if seq not in kept]
    assert (loud[0]["dropped"], loud[0]["droppedBytes"]) == (len(lost), sum(sizes[s] for s in lost))
    assert not any("dropped" in e for e in loud[1:])
    assert drain["gap"] is True
    assert sum(encoded_size(e) for e in loud) <= 4000 + 2 * 48


def test_drop_counts_add_up_to_what_is_missing() -> None:
    """Whatever mix of targets and kinds floods a small queue, each target's reports name
    exactly the events of that target that were not delivered, and their bytes."""
    rng = random.Random(25)
    queue = EventQueue(40, max_bytes=40_000, max_target_bytes=8_000, max_batch_bytes=5_000)
    put: dict[int, tuple[str, int]] = {}
    delivered: list[JSONObject] = []
    names = ["log", "output", "progress", "stateChanged", "requestCompleted"]
    for seq in range(1, 3001):
        target = rng.choice(["s1", "s2", "s3"])
        name = rng.choice(names)
        params: JSONObject = {"sessionId": target, "pad": "y" * rng.randrange(0, 400)}
        put[seq] = (target, _size(seq, name, params))
        queue.put(name, params)
        if rng.random() < 0.05:
            delivered += _events(queue.poll())
    for target in ("s1", "s2", "s3"):  # the last report rides on an outcome
        queue.put("stateChanged", {"sessionId": target})
    while batch := _events(queue.poll()):
        delivered += batch
    seen = {int(str(e["seq"])) for e in delivered if int(str(e["seq"])) in put}
    for target in ("s1", "s2", "s3"):
        mine = [e for e in delivered if e["sessionId"] == target]
        missing = [seq for seq, (t, _) in put.items() if t == target and seq not in seen]
        assert sum(int(str(e.get("dropped", 0))) for e in mine) == len(missing)
        assert sum(int(str(e.get("droppedBytes", 0))) for e in mine) == sum(
            put[seq][1] for seq in missing
        )
    assert queue.statistics().queued == 0
    assert queue.statistics().queued_bytes == 0


def test_outcomes_are_never_dropped_for_bytes() -> None:
    queue = EventQueue(100, max_bytes=3_000, max_target_bytes=1_000)
    for i in range(20):
        queue.put("requestCompleted", {"sessionId": "s", "operationId": str(i), "pad": "z" * 200})
        queue.put("log", {"sessionId": "s", "message": "m" * 200})
    events = _events(queue.poll())
    assert [e["operationId"] for e in events if e["event"] == "requestCompleted"] == [
        str(i) for i in range(20)
    ]


def test_the_shared_budget_bounds_every_queue_together() -> None:
    budget = EventBudget(20_000)
    quiet = EventQueue(budget=budget)
    loud = EventQueue(budget=budget)
    quiet.put("log", {"sessionId": "q", "message": "first"})
    for i in range(1000):
        loud.put("log", {"sessionId": "l", "message": "n" * 300, "i": i})
        assert budget.used <= budget.max_bytes + 1024
    assert budget.peak <= budget.max_bytes + 1024
    # The queue that puts pays: the quiet queue's event is still there.
    assert [e["message"] for e in _events(quiet.poll())] == ["first"]
    events = _events(loud.poll())
    assert events[0]["dropped"] == 1000 - len(events)
    assert budget.used == 0


def test_an_event_no_frame_could_carry_is_dropped_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(events_module, "MAX_EVENT_BYTES", 1000)
    queue = EventQueue()
    queue.put("requestCompleted", {"sessionId": "s", "result": "r" * 2000})
    queue.put("stateChanged", {"sessionId": "s", "state": "ready"})
    drain = queue.poll()
    (event,) = _events(drain)
    assert event["event"] == "stateChanged"
    assert event["dropped"] == 1
    assert int(str(event["droppedBytes"])) > 2000
    assert drain["gap"] is True


def test_a_cap_notice_keeps_its_own_dropped_bytes() -> None:
    """The lanes' ``job.output`` notice already says ``droppedBytes`` (past the output cap):
    a queue report waits for the job's next event instead of overwriting it."""
    queue = EventQueue(max_target_bytes=200)
    for _ in range(5):
        queue.put("job.output", {"jobId": "j", "stream": "stdout", "text": "t" * 300})
    queue.put("job.output", {"jobId": "j", "stream": "stdout", "text": "[cap]", "droppedBytes": 7})
    queue.put("job.finished", {"jobId": "j", "status": "ok"})
    notice, finished = _events(queue.poll())
    assert (notice["text"], notice["droppedBytes"]) == ("[cap]", 7)
    assert "dropped" not in notice
    assert (finished["event"], finished["dropped"]) == ("job.finished", 5)


class _Listener:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


def test_a_watched_target_pauses_at_the_high_watermark_and_resumes_at_the_low() -> None:
    queue = EventQueue()
    listener = _Listener()
    unwatch = queue.watch("j", listener, Watermarks(high_bytes=2_000, low_bytes=500))
    chunk: JSONObject = {"jobId": "j", "stream": "stdout", "text": "o" * 400}
    for _ in range(10):
        queue.put("job.output", chunk)
    # Nobody ever drained this queue: there is no consumer to wait for, only coalescing.
    assert listener.calls == []
    queue.poll()
    for _ in range(4):
        queue.put("job.output", chunk)
    assert listener.calls == []
    queue.put("job.output", chunk)  # 5 x ~450 bytes: past 2 000
    assert listener.calls == ["pause"]
    assert queue.statistics().paused == 1
    queue.put("job.output", chunk)
    assert listener.calls == ["pause"]
    queue.poll()
    assert listener.calls == ["pause", "resume"]
    unwatch()
    for _ in range(10):
        queue.put("job.output", chunk)
    assert listener.calls == ["pause", "resume"]


class _Room:
    """An AnswerRoom with ``free`` bytes, refilled by ``refill`` (an endpoint's writer)."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.refilled = trio.Event()

    def take_nowait(self, wanted: int) -> int:
        grant = min(wanted, self.free)
        self.free -= grant
        return grant

    async def take(self, wanted: int) -> int:
        while not self.free:
            await self.refilled.wait()
            self.refilled = trio.Event()
        return self.take_nowait(wanted)

    def refill(self, free: int) -> None:
        self.free = free
        self.refilled.set()


def test_a_drain_takes_only_the_room_the_answer_has() -> None:
    queue = EventQueue()
    for i in range(10):
        queue.put("log", {"sessionId": "s", "message": "m" * 100, "i": i})
    room = _Room(400)
    token = current_answer_room.set(room)
    try:
        first = _events(queue.poll())
        assert 1 <= len(first) <= 3
        room.free = 0
        assert queue.poll() == {"events": [], "gap": False}
        room.free = 10_000
        rest = _events(queue.poll())
    finally:
        current_answer_room.reset(token)
    assert [e["i"] for e in first + rest] == list(range(10))


async def test_a_waiting_drain_waits_for_room_once_events_are_there(
    autojump_clock: trio.abc.Clock,
) -> None:
    queue = EventQueue()
    room = _Room(0)
    got: list[tuple[float, list[JSONObject]]] = []

    async def long_poll() -> None:
        current_answer_room.set(room)
        events = _events(await queue.wait(60_000))
        got.append((trio.current_time(), events))

    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        nursery.start_soon(long_poll)
        await trio.sleep(1)
        queue.put("log", {"sessionId": "s", "message": "hello"})
        await trio.sleep(30)  # the client reads nothing: the event stays queued
        assert queue.statistics().queued == 1
        room.refill(1 << 20)
    ((when, events),) = got
    assert when - start == pytest.approx(31)
    assert [e["message"] for e in events] == ["hello"]
