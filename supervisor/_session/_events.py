"""Bounded, ordered event queues drained by ``*.waitEvents`` and ``*.pollEvents``.

Strategy: producers (lanes, sessions) call :meth:`EventQueue.put` synchronously from the Trio
thread; it never blocks. When the queue is full an old event is dropped and the next drain
reports ``gap: true``, so a consumer that stops draining costs bounded memory and still learns
that it missed something. Which one: the oldest *informational* event
(:data:`INFORMATIONAL_EVENTS`: logs, output, progress, diagnostics, facts), so that a flood of
them (a server logging without pause) can never push out the events that end or change
something (``requestCompleted``, ``stateChanged``, ``operationFailed``, ``terminated``, ...);
those go, oldest first, only when nothing informational is left to drop.

Events that ask the client for an answer (:data:`ANSWER_EVENTS`: a backend's ``hostRequest``,
a debug adapter's ``runInTerminalRequested``, a language server's ``serverRequest`` the host
owns) are never dropped: a peer waits for that answer, and losing the event would leave it
waiting forever. They are bounded where they are made (plugin-contract.md "Plugin functions":
16 pending host requests per session; one ``runInTerminal`` at a time per adapter request; 16
pending ``serverRequest`` per session), so the queue holds at most ``max_events`` plus those.
A waiter blocks on a :class:`trio.Event` that ``put`` sets: an idle queue costs no CPU, there
is no polling loop.

A drain returns at most :data:`DEFAULT_MAX_BATCH_BYTES` of events (measured as the JSON they
are sent as), oldest first, and leaves the rest queued for the next drain, which then returns
at once: an answer made of events never outgrows a frame, whatever the events hold.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

from protocol._json import encoded_size

if TYPE_CHECKING:
    from protocol import JSONObject

__all__ = (
    "ANSWER_EVENTS",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_EVENTS",
    "INFORMATIONAL_EVENTS",
    "MAX_WAIT_EVENTS_MS",
    "EventQueue",
    "EventQueueStatistics",
)

#: Events a queue keeps before it drops the oldest.
DEFAULT_MAX_EVENTS = 4096
#: The longest a ``*.waitEvents`` call may block (ours): 10 minutes.
MAX_WAIT_EVENTS_MS: Final = 600_000
#: The most bytes of events one drain returns, as JSON (16 MiB; a lone larger event is
#: returned alone). A quarter of the frame-body limit: room for the rest of the answer, and
#: a drain of a full queue of large events is spread over a few answers instead of one.
DEFAULT_MAX_BATCH_BYTES: Final = 16 * 1024 * 1024
#: Event names that ask the client for an answer: never dropped (see the module docstring).
ANSWER_EVENTS: Final = frozenset({"hostRequest", "runInTerminalRequested", "serverRequest"})
#: Event names that only inform: dropped first when the queue is full.
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


def _seq_of(event: JSONObject) -> int:
    seq = event["seq"]
    assert isinstance(seq, int)
    return seq


@dataclass(frozen=True)
class EventQueueStatistics:
    """A snapshot of an :class:`EventQueue`.

    Attributes:
        queued: Events waiting to be drained.
        dropped: Events dropped since the queue was made, because it was full.
        next_seq: The sequence number the next event will get.
    """

    queued: int
    dropped: int
    next_seq: int


class EventQueue:
    """An ordered, bounded queue of wire-shaped events.

    Each event is stored as ``{"seq": n, "event": name, **params}``; ``seq`` grows by one per
    event put, so a consumer can see order and gaps.

    Args:
        max_events: How many events the queue keeps; past that one is dropped (the oldest
            informational one, else the oldest that needs no answer).
        max_batch_bytes: The most bytes of events (as JSON) one drain returns; the rest
            wait for the next drain. A single larger event is returned alone.

    Raises:
        ValueError: ``max_events`` or ``max_batch_bytes`` is not positive.
    """

    def __init__(
        self, max_events: int = DEFAULT_MAX_EVENTS, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    ) -> None:
        if max_events <= 0 or max_batch_bytes <= 0:
            raise ValueError("max_events and max_batch_bytes must be positive")
        self._max_batch_bytes = max_batch_bytes
        # Three deques by what may be dropped, each in seq order; a drain merges them. Dropping
        # is then one popleft, however the kinds interleave.
        self._info: deque[JSONObject] = deque()
        self._outcomes: deque[JSONObject] = deque()
        self._answers: deque[JSONObject] = deque()
        self._max_events = max_events
        self._gap = False
        self._dropped = 0
        self._seq = 0
        self._ready = trio.Event()

    def put(self, event: str, params: JSONObject) -> None:
        """Queue one event; never blocks.

        Args:
            event: The event name, e.g. ``"job.finished"``.
            params: Its wire-shaped fields (camelCase).
        """
        self._seq += 1
        item: JSONObject = {"seq": self._seq, "event": event, **params}
        if event in INFORMATIONAL_EVENTS:
            self._info.append(item)
        elif event in ANSWER_EVENTS:
            self._answers.append(item)
        else:
            self._outcomes.append(item)
        if self._count() > self._max_events and self._drop_oldest():
            self._gap = True
            self._dropped += 1
        self._ready.set()

    def _count(self) -> int:
        return len(self._info) + len(self._outcomes) + len(self._answers)

    def _drop_oldest(self) -> bool:
        """Drop the oldest informational event, else the oldest other one that needs no
        answer; False when every queued event needs an answer."""
        for kind in (self._info, self._outcomes):
            if kind:
                kind.popleft()
                return True
        return False

    def poll(self) -> JSONObject:
        """Drain the queued events without waiting, oldest first, up to the batch bound.

        Returns:
            ``{"events": [...], "gap": bool}``; ``gap`` is true when events were dropped since
            the previous drain. Events past ``max_batch_bytes`` stay queued, and the next
            drain returns them at once.
        """
        kinds = [kind for kind in (self._info, self._outcomes, self._answers) if kind]
        events: list[JSONObject] = []
        room = self._max_batch_bytes
        while kinds:
            kind = kinds[0] if len(kinds) == 1 else min(kinds, key=lambda k: _seq_of(k[0]))
            size = encoded_size(kind[0]) + 1  # and its comma
            if size > room and events:
                break
            room -= size
            events.append(kind.popleft())
            if not kind:
                kinds.remove(kind)
        gap = self._gap
        self._gap = False
        if not kinds and self._ready.is_set():
            # Only a set event is replaced: a waiter (a long poll, serve's forwarder) still
            # blocked on an unset one must see the next event, whoever drained in between.
            # Events left past the batch bound keep it set: the next drain returns at once.
            self._ready = trio.Event()
        return {"events": events, "gap": gap}  # type: ignore[dict-item]

    async def wait(self, timeout_ms: int) -> JSONObject:
        """Block until events are queued or ``timeout_ms`` passes, then drain them.

        Args:
            timeout_ms: The longest wait in milliseconds; 0 drains at once (after a
                checkpoint, as every call of a Trio API makes).

        Returns:
            The same shape as :meth:`poll`; ``events`` is empty when the timeout passed.

        **Cancellation:** cancelling the caller leaves the queue untouched.
        """
        if timeout_ms > 0 and not self._count():
            with trio.move_on_after(timeout_ms / 1000):
                # Another caller may drain what woke us: then wait on, to our own deadline.
                while not self._count():
                    await self._ready.wait()
        else:
            # A checkpoint even when nothing is waited for (issue 28): a loop that drains
            # with timeout 0 until an event comes must let the task that queues it run.
            await trio.lowlevel.checkpoint()
        return self.poll()

    def statistics(self) -> EventQueueStatistics:
        """Return queued and dropped counts."""
        return EventQueueStatistics(self._count(), self._dropped, self._seq + 1)
