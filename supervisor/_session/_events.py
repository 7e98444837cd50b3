"""Bounded, ordered event queues drained by ``*.waitEvents`` and ``*.pollEvents``.

Strategy: producers (lanes, sessions) call :meth:`EventQueue.put` synchronously from the Trio
thread; it never blocks. A consumer that stops draining costs bounded memory, counted in
bytes (each event's JSON plus :data:`EVENT_OVERHEAD_BYTES` for the objects around it) as well
as in events, and learns exactly what it missed.

Coalescing per target. Each event belongs to a *target*: the job, terminal, run or session it
names (:data:`TARGET_FIELDS`, the first one present). *Informational* events
(:data:`INFORMATIONAL_EVENTS`: logs, output, progress, diagnostics, facts) are kept per
target within ``max_target_bytes``; past it the oldest of that target goes, so one flooding
target never pushes out another's events. Past the queue's own bounds (``max_events``,
``max_bytes``) or a budget the queues of one Core share (:class:`EventBudget`), the oldest
informational event of the target holding the most bytes goes. What is dropped is counted per
target and reported on the next event of that target that is drained, as ``dropped`` (events)
and ``droppedBytes`` (their bytes as JSON); the drain also says ``gap: true``. Nothing
retrievable is lost by it: ``job.output`` caps, a terminal's retained screen and the stderr
ring hold what they held before. (A ``job.output`` notice of the lanes' output cap carries
its own ``droppedBytes``; a report due on it waits for the next event of that job.)

Events that end or change something (``requestCompleted``, ``stateChanged``,
``operationFailed``, ``terminated``, ...) are never dropped for bytes; only past
``max_events``, when nothing informational is left, does the oldest of them go (they are few
and small). Events that ask the client for an answer (:data:`ANSWER_EVENTS`: a backend's
``hostRequest``, a debug adapter's ``runInTerminalRequested``, a language server's
``serverRequest`` the host owns) are never dropped: a peer waits for that answer. They are
bounded where they are made (16 pending host requests per session, one ``runInTerminal`` at a
time per adapter request, 16 pending ``serverRequest`` per session). An event whose JSON alone
is over :data:`MAX_EVENT_BYTES` could never be written in an answer frame: it is dropped at
once, counted like the others.

Flow control (:mod:`supervisor._flow`). A producer that can be paused (a job's pipes) watches
its target (:meth:`EventQueue.watch`): once a consumer exists (the queue was drained once) and
the target's informational bytes not taken reach the high watermark, the producer is paused;
a drain that brings them to the low watermark resumes it. "Taken" is drained, and a drain
inside a request of an endpoint takes only what that endpoint's write queue has room for
(:data:`supervisor._flow.current_answer_room`), so an event a client does not read stays here.
A queue nobody has drained yet pauses nobody (an embedding host that never looks at job
events must not stall its jobs): it only coalesces.

A waiter blocks on a :class:`trio.Event` that ``put`` sets: an idle queue costs no CPU, there
is no polling loop. A drain returns at most :data:`DEFAULT_MAX_BATCH_BYTES` of events
(measured as the JSON they are sent as), oldest first, and leaves the rest queued for the
next drain, which then returns at once: an answer made of events never outgrows a frame.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

from protocol import MAX_OUTPUT_BYTES
from protocol._json import encoded_size

from .._flow import Watermarks, current_answer_room

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject

    from .._flow import FlowListener

__all__ = (
    "ANSWER_EVENTS",
    "DEFAULT_EVENT_BUDGET_BYTES",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_QUEUE_BYTES",
    "DEFAULT_MAX_TARGET_BYTES",
    "EVENT_OVERHEAD_BYTES",
    "INFORMATIONAL_EVENTS",
    "MAX_EVENT_BYTES",
    "MAX_WAIT_EVENTS_MS",
    "TARGET_FIELDS",
    "EventBudget",
    "EventQueue",
    "EventQueueStatistics",
)

logger = logging.getLogger("supervisor.events")

#: Events a queue keeps before it drops the oldest.
DEFAULT_MAX_EVENTS = 4096
#: The longest a ``*.waitEvents`` call may block (ours): 10 minutes.
MAX_WAIT_EVENTS_MS: Final = 600_000
#: Bytes of events one queue keeps (8 MiB, each event's JSON plus its overhead).
DEFAULT_MAX_QUEUE_BYTES: Final = 8 * 1024 * 1024
#: Bytes of informational events kept per target in a queue (4 MiB).
DEFAULT_MAX_TARGET_BYTES: Final = 4 * 1024 * 1024
#: Bytes of events the queues of one Core keep together (64 MiB; :class:`EventBudget`).
DEFAULT_EVENT_BUDGET_BYTES: Final = 64 * 1024 * 1024
#: What one queued event costs besides its JSON, charged to every bound in bytes: the dict,
#: its keys and the number objects (measured: 350-500 bytes for a small event).
EVENT_OVERHEAD_BYTES: Final = 512
#: The most bytes of events one drain returns, as JSON (16 MiB; a lone larger event is
#: returned alone). A quarter of the frame-body limit: room for the rest of the answer, and
#: a drain of a full queue of large events is spread over a few answers instead of one.
DEFAULT_MAX_BATCH_BYTES: Final = 16 * 1024 * 1024
#: The largest event, as JSON, that can be queued: the frame-body limit less room for the
#: answer around it. A larger one could never be written, so it is dropped and counted.
MAX_EVENT_BYTES: Final = MAX_OUTPUT_BYTES - 64 * 1024
#: Event names that ask the client for an answer: never dropped (see the module docstring).
ANSWER_EVENTS: Final = frozenset({"hostRequest", "runInTerminalRequested", "serverRequest"})
#: Event names that only inform: coalesced per target, dropped first.
INFORMATIONAL_EVENTS: Final = frozenset(
    {
        "log",
        "output",
        "progress",
        "diagnostics",
        "fact",
        "serverNotification",
        "adapterEvent",
        "job.output",
        "job.progress",
        "job.record",
    }
)
#: The fields that name an event's target, in the order they are looked for.
TARGET_FIELDS: Final = ("jobId", "terminalID", "runId", "sessionId")
#: What the ``dropped``/``droppedBytes`` members add to an event, at most, as JSON.
_REPORT_BYTES: Final = 48
#: An item: the event as it is sent, and its size as JSON.
_Item = tuple["JSONObject", int]


def _target_of(params: JSONObject) -> object:
    for name in TARGET_FIELDS:
        value = params.get(name)
        if value is not None:
            return value
    return None


@dataclass(frozen=True)
class EventQueueStatistics:
    """A snapshot of an :class:`EventQueue`.

    Attributes:
        queued: Events waiting to be drained.
        dropped: Events dropped since the queue was made.
        next_seq: The sequence number the next event will get.
        queued_bytes: Bytes the queued events take as JSON.
        dropped_bytes: Bytes (as JSON) of the events dropped since the queue was made.
        paused: Targets whose producer is paused now.
    """

    queued: int
    dropped: int
    next_seq: int
    queued_bytes: int = 0
    dropped_bytes: int = 0
    paused: int = 0


class EventBudget:
    """Bytes of events the queues of one Core keep together (each event's JSON and overhead).

    Past it, the queue that puts an event drops its own oldest informational events (the
    producer pays, not a quiet neighbour).

    Args:
        max_bytes: The budget.

    Raises:
        ValueError: ``max_bytes`` is not positive.
    """

    def __init__(self, max_bytes: int = DEFAULT_EVENT_BUDGET_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        #: Bytes charged by every queue sharing the budget.
        self.used = 0
        #: The most bytes charged at once.
        self.peak = 0


class _Target:
    """One target's informational events in a queue, its drop counts and its producer."""

    __slots__ = ("dropped", "dropped_bytes", "info", "info_bytes", "listener", "marks", "paused")

    def __init__(self) -> None:
        self.info: deque[_Item] = deque()
        self.info_bytes = 0
        self.dropped = 0
        self.dropped_bytes = 0
        self.listener: FlowListener | None = None
        self.marks = Watermarks()
        self.paused = False

    def idle(self) -> bool:
        return not self.info and not self.dropped and self.listener is None


class EventQueue:
    """An ordered, bounded queue of wire-shaped events (see the module docstring).

    Each event is stored as ``{"seq": n, "event": name, **params}``; ``seq`` grows by one per
    event put, so a consumer can see order and gaps.

    Args:
        max_events: How many events the queue keeps.
        max_batch_bytes: The most bytes of events (as JSON) one drain returns; the rest
            wait for the next drain. A single larger event is returned alone.
        max_bytes: Bytes of events the queue keeps (JSON plus overhead).
        max_target_bytes: Bytes of informational events kept per target.
        budget: The budget shared with the other queues of a Core, or None.

    Raises:
        ValueError: A bound is not positive.
    """

    def __init__(
        self,
        max_events: int = DEFAULT_MAX_EVENTS,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        *,
        max_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
        max_target_bytes: int = DEFAULT_MAX_TARGET_BYTES,
        budget: EventBudget | None = None,
    ) -> None:
        if min(max_events, max_batch_bytes, max_bytes, max_target_bytes) <= 0:
            raise ValueError("event queue bounds must be positive")
        self._max_events = max_events
        self._max_batch_bytes = max_batch_bytes
        self._max_bytes = max_bytes
        self._max_target_bytes = max_target_bytes
        self._budget = budget
        self._targets: dict[object, _Target] = {}
        # Outcomes and answers in seq order; informational events per target. A drain merges
        # them by seq; dropping is one popleft, however the kinds and targets interleave.
        self._outcomes: deque[_Item] = deque()
        self._answers: deque[_Item] = deque()
        self._count = 0
        #: JSON bytes of the queued events, and what they are charged (with overhead).
        self._json_bytes = 0
        self._charged = 0
        self._gap = False
        self._dropped = 0
        self._dropped_bytes = 0
        self._seq = 0
        #: A consumer exists: the queue was drained once (flow control starts then).
        self._armed = False
        self._ready = trio.Event()

    # -- producers -----------------------------------------------------------------------

    def put(self, event: str, params: JSONObject) -> None:
        """Queue one event; never blocks.

        Args:
            event: The event name, e.g. ``"job.finished"``.
            params: Its wire-shaped fields (camelCase).
        """
        self._seq += 1
        item: JSONObject = {"seq": self._seq, "event": event, **params}
        size = encoded_size(item)
        key = _target_of(params)
        if size > MAX_EVENT_BYTES:
            logger.warning(
                "dropped a %r event of %d bytes: over the %d-byte event bound",
                event,
                size,
                MAX_EVENT_BYTES,
            )
            self._count_drop(self._target(key), size)
            return
        informational = event in INFORMATIONAL_EVENTS
        if informational:
            target = self._target(key)
            target.info.append((item, size))
            target.info_bytes += size
        elif event in ANSWER_EVENTS:
            self._answers.append((item, size))
        else:
            self._outcomes.append((item, size))
        self._charge(1, size)
        if informational:
            while target.info_bytes > self._max_target_bytes and len(target.info) > 1:
                self._drop_info(target)
        self._enforce_bounds()
        if (
            informational
            and self._armed
            and target.listener is not None
            and not target.paused
            and target.info_bytes >= target.marks.high_bytes
        ):
            target.paused = True
            target.listener.pause()
        if self._count:
            self._ready.set()

    def watch(
        self, target: object, listener: FlowListener, marks: Watermarks | None = None
    ) -> Callable[[], None]:
        """Let ``listener`` be paused and resumed by ``target``'s events not taken.

        Args:
            target: The target's id (a ``jobId``, for example).
            listener: Its producer.
            marks: The watermarks; None: :class:`supervisor._flow.Watermarks` defaults.

        Returns:
            ``unwatch()``: forget the listener (the producer ended); it is not resumed.
        """
        entry = self._target(target)
        entry.listener = listener
        entry.marks = marks or Watermarks()
        entry.paused = False

        def unwatch() -> None:
            if entry.listener is listener:
                entry.listener = None
                entry.paused = False
                if entry.idle() and self._targets.get(target) is entry:
                    del self._targets[target]

        return unwatch

    def _target(self, key: object) -> _Target:
        target = self._targets.get(key)
        if target is None:
            target = self._targets[key] = _Target()
        return target

    def _charge(self, count: int, size: int) -> None:
        charge = size + count * EVENT_OVERHEAD_BYTES
        self._count += count
        self._json_bytes += size
        self._charged += charge
        budget = self._budget
        if budget is not None:
            budget.used += charge
            budget.peak = max(budget.peak, budget.used)

    def _over(self) -> bool:
        budget = self._budget
        return (
            self._count > self._max_events
            or self._charged > self._max_bytes
            or (budget is not None and budget.used > budget.max_bytes)
        )

    def _enforce_bounds(self) -> None:
        while self._over():
            victim = None
            for target in self._targets.values():
                if target.info and (victim is None or target.info_bytes > victim.info_bytes):
                    victim = target
            if victim is not None:
                self._drop_info(victim)
            elif self._count > self._max_events and self._outcomes:
                item, size = self._outcomes.popleft()
                self._charge(-1, -size)
                self._count_drop(self._target(_target_of(item)), size)
            else:
                # Only outcomes and answers, within the count: kept (bounded where made).
                return

    def _drop_info(self, target: _Target) -> None:
        _, size = target.info.popleft()
        target.info_bytes -= size
        self._charge(-1, -size)
        self._count_drop(target, size)

    def _count_drop(self, target: _Target, size: int) -> None:
        target.dropped += 1
        target.dropped_bytes += size
        self._gap = True
        self._dropped += 1
        self._dropped_bytes += size

    # -- consumers -----------------------------------------------------------------------

    def poll(self) -> JSONObject:
        """Drain the queued events without waiting, oldest first, up to the batch bound.

        Inside a request of an endpoint, only what its write queue has room for is taken
        (:data:`supervisor._flow.current_answer_room`); with no room at all the batch is
        empty and the events stay queued.

        Returns:
            ``{"events": [...], "gap": bool}``; ``gap`` is true when events were dropped since
            the previous drain. The first event drained of a target that lost events carries
            ``dropped`` and ``droppedBytes``. Events past the batch bound stay queued, and the
            next drain returns them at once.
        """
        limit = self._max_batch_bytes
        room = current_answer_room.get()
        if room is not None and self._count:
            limit = room.take_nowait(self._wanted())
        return self._drain(limit)

    async def wait(self, timeout_ms: int) -> JSONObject:
        """Block until events are queued or ``timeout_ms`` passes, then drain them.

        Inside a request of an endpoint whose write queue is full, the drain then waits for
        room as well (an answer the client is not reading takes nothing from here).

        Args:
            timeout_ms: The longest wait in milliseconds; 0 drains at once (after a
                checkpoint, as every call of a Trio API makes).

        Returns:
            The same shape as :meth:`poll`; ``events`` is empty when the timeout passed.

        **Cancellation:** cancelling the caller leaves the queue untouched.
        """
        if timeout_ms > 0 and not self._count:
            with trio.move_on_after(timeout_ms / 1000):
                # Another caller may drain what woke us: then wait on, to our own deadline.
                while not self._count:
                    await self._ready.wait()
        else:
            # A checkpoint even when nothing is waited for (issue 28): a loop that drains
            # with timeout 0 until an event comes must let the task that queues it run.
            await trio.lowlevel.checkpoint()
        room = current_answer_room.get()
        if room is not None and self._count:
            return self._drain(await room.take(self._wanted()))
        return self._drain(self._max_batch_bytes)

    def _wanted(self) -> int:
        return min(self._max_batch_bytes, self._json_bytes + self._count * (_REPORT_BYTES + 1) + 64)

    def _drain(self, limit: int) -> JSONObject:
        self._armed = True
        events: list[JSONObject] = []
        if limit > 0:
            self._take(events, limit)
        gap = self._gap
        if events or not self._count:
            self._gap = False
        else:
            gap = False  # reported with the events, when there is room for them
        if not self._count and self._ready.is_set():
            # Only a set event is replaced: a waiter (a long poll, serve's forwarder) still
            # blocked on an unset one must see the next event, whoever drained in between.
            # Events left past the batch bound keep it set: the next drain returns at once.
            self._ready = trio.Event()
        for key, target in list(self._targets.items()):
            if target.paused and target.info_bytes <= target.marks.low_bytes:
                target.paused = False
                assert target.listener is not None
                target.listener.resume()
            if target.idle():
                del self._targets[key]
        return {"events": events, "gap": gap}  # type: ignore[dict-item]

    def _take(self, events: list[JSONObject], limit: int) -> None:
        sources: list[deque[_Item]] = [q for q in (self._outcomes, self._answers) if q]
        owners: list[_Target | None] = [None] * len(sources)
        for target in self._targets.values():
            if target.info:
                sources.append(target.info)
                owners.append(target)
        heads = [(_seq_of(q[0][0]), n) for n, q in enumerate(sources)]
        heapq.heapify(heads)
        room = limit
        taken = 0
        taken_bytes = 0
        while heads:
            _, n = heads[0]
            source = sources[n]
            item, size = source[0]
            cost = size + 1
            if cost > room and events:
                break
            source.popleft()
            owner = owners[n]
            if owner is not None:
                owner.info_bytes -= size
            else:
                owner = self._targets.get(_target_of(item))
            if owner is not None and owner.dropped and "droppedBytes" not in item:
                item = {**item, "dropped": owner.dropped, "droppedBytes": owner.dropped_bytes}
                owner.dropped = owner.dropped_bytes = 0
                cost += _REPORT_BYTES
            events.append(item)
            room -= cost
            taken += 1
            taken_bytes += size
            if source:
                heapq.heapreplace(heads, (_seq_of(source[0][0]), n))
            else:
                heapq.heappop(heads)
        self._charge(-taken, -taken_bytes)

    def statistics(self) -> EventQueueStatistics:
        """Return queued and dropped counts and bytes."""
        return EventQueueStatistics(
            self._count,
            self._dropped,
            self._seq + 1,
            self._json_bytes,
            self._dropped_bytes,
            sum(1 for t in self._targets.values() if t.paused),
        )


def _seq_of(event: JSONObject) -> int:
    seq = event["seq"]
    assert isinstance(seq, int)
    return seq
