"""The event queue of one terminal handle: bounded output, exit outcomes output can't evict.

Contract (the plugin contract "Plugin-owned native terminals" and "Close, retained
context and reopen"):

- ``output {terminalID, generation, data}`` events are ordered and bounded: past
  ``max_output_events`` events, or past ``max_output_bytes`` bytes of them as JSON (plus
  :data:`~supervisor._session._events.EVENT_OVERHEAD_BYTES` each), or past the Core's shared
  :class:`~supervisor._session._events.EventBudget`, the *oldest output* is dropped, the next
  drain says ``gap: true`` and its first event carries ``dropped`` (events) and
  ``droppedBytes`` (their bytes as JSON), like :class:`supervisor._session._events.EventQueue`.
  The byte bound is what bounds memory: one event carries up to 64 KiB of output (up to six
  times that as JSON), and a flood fills the queue with full events. The retained screen still
  shows what was dropped from here.
- Flow control (xterm.js's ``WriteBuffer``, :mod:`supervisor._flow`): once a consumer exists
  (the queue was drained once), output not taken reaching the high watermark -- or half the
  event bound, whichever comes first -- pauses the terminal's reader
  (:meth:`TerminalEvents.watch`; the kernel then holds the program's next write, the program
  is never killed for it), and a drain down to the low watermark and an eighth of the event
  bound resumes it. The count matters for output that comes in small pieces (a program
  writing a line at a time, each read a few KiB or less): 256 such events are far below the
  1 MiB watermark, and the event bound dropped the oldest before the bytes paused anything.
  So a subscriber that keeps up, or that comes back, loses nothing; drops are for a
  terminal whose consumer took nothing for long enough (or a queue nobody ever drained).
- An ``exit`` outcome (one per generation, sent after cleanup) is never evicted by output: a
  program that floods right after a reopen can not make a subscriber miss the previous
  generation's outcome. Outcomes live in their own small queue (at most
  ``max_outcomes``; only a consumer that never drains across that many reopens loses the
  oldest, and then ``gap`` says so).
- ``seq`` is monotonic per handle, across generations: both queues draw from one counter and a
  drain merges them in ``seq`` order. Events are never renumbered: dropping the queued output
  of older generations at reopen (:meth:`TerminalEvents.keep_output_of`) leaves a jump in
  ``seq`` without ``gap`` (that drop is the contract, not a loss), and an eviction leaves a
  jump *with* ``gap``.

Why not :class:`supervisor._session._events.EventQueue` itself: a terminal's outcomes have a
bound of their own (one per generation) and dropping one generation's output at reopen must
not renumber events or count as a loss. This class keeps its wire shape (``{"events": [...],
"gap": bool}``, each event ``{seq, event, **params}``), its drop report and its waiting rule
(a :class:`trio.Event`, no polling). Pure apart from that event: tested without processes.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

import trio

from protocol._json import encoded_size

from .._flow import Watermarks, current_answer_room
from .._session._events import (
    DEFAULT_MAX_BATCH_BYTES,
    EVENT_OVERHEAD_BYTES,
    EventQueueStatistics,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject

    from .._flow import FlowListener
    from .._session._events import EventBudget

__all__ = (
    "DEFAULT_MAX_OUTCOMES",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_OUTPUT_CHARS",
    "TerminalEvents",
)

#: Undrained exit outcomes kept per handle (ours): one per generation.
DEFAULT_MAX_OUTCOMES: Final = 16
#: Undrained output kept per handle (ours): 4 MiB as JSON, with each event's overhead.
DEFAULT_MAX_OUTPUT_BYTES: Final = 4 * 1024 * 1024
#: The same bound under its former name (it counted characters).
DEFAULT_MAX_OUTPUT_CHARS: Final = DEFAULT_MAX_OUTPUT_BYTES
#: What the ``dropped``/``droppedBytes`` members add to an event, at most, as JSON.
_REPORT_BYTES: Final = 48

_Item = tuple["JSONObject", int]


def _seq(item: _Item) -> int:
    seq = item[0]["seq"]
    assert isinstance(seq, int)
    return seq


class TerminalEvents:
    """A terminal handle's ``output`` and ``exit`` events (see the module docstring).

    Args:
        max_output_events: ``output`` events kept before the oldest is dropped.
        max_outcomes: ``exit`` outcomes kept before the oldest is dropped.
        max_output_bytes: Bytes of queued ``output`` (as JSON, with each event's overhead)
            kept before the oldest event is dropped (the newest event is always kept).
        budget: The event budget shared with the Core's other queues, or None.
        max_output_chars: The former name of ``max_output_bytes``.

    Raises:
        ValueError: A bound is not positive.
    """

    def __init__(
        self,
        max_output_events: int,
        max_outcomes: int = DEFAULT_MAX_OUTCOMES,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        budget: EventBudget | None = None,
        max_output_chars: int | None = None,
    ) -> None:
        if max_output_chars is not None:
            max_output_bytes = max_output_chars
        if max_output_events <= 0 or max_outcomes <= 0 or max_output_bytes <= 0:
            raise ValueError("event bounds must be positive")
        self._output: deque[_Item] = deque()
        self._outcomes: deque[_Item] = deque()
        self._max_output = max_output_events
        #: Output events not taken at which the reader pauses, and at or below which it
        #: resumes (with the byte watermarks): half the bound leaves room for what the
        #: reader puts before it sees the pause (the rest of its pass).
        self._high_events = max(1, max_output_events // 2)
        self._low_events = max_output_events // 8
        self._max_outcomes = max_outcomes
        self._max_output_bytes = max_output_bytes
        self._budget = budget
        #: JSON bytes of queued output, and what it is charged (with overhead).
        self._output_bytes = 0
        self._charged = 0
        self._seq = 0
        #: The ``seq`` of the newest ``output`` event (an ``exit`` takes a seq too).
        self._output_seq = 0
        self._gap = False
        self._dropped = 0
        self._dropped_bytes = 0
        #: Drops not yet reported on a drained event.
        self._unreported = 0
        self._unreported_bytes = 0
        self._closed = False
        self._armed = False
        self._listener: FlowListener | None = None
        self._marks = Watermarks()
        self._paused = False
        self._ready = trio.Event()

    def watch(self, listener: FlowListener, marks: Watermarks | None = None) -> Callable[[], None]:
        """Let ``listener`` (the reader) be paused and resumed by the output not taken.

        Returns:
            ``unwatch()``: forget the listener (that reader ended); it is not resumed.
        """
        self._listener = listener
        self._marks = marks or Watermarks()
        self._paused = False

        def unwatch() -> None:
            if self._listener is listener:
                self._listener = None
                self._paused = False

        return unwatch

    @property
    def last_output_seq(self) -> int | None:
        """The ``seq`` of the newest ``output`` event queued so far (None before the first).

        Not the newest event's: a closed terminal's ``exit`` comes after its output, and a
        client that skips what a screen includes must not skip the exit with it.
        """
        return self._output_seq or None

    def put_output(self, params: JSONObject) -> int:
        """Queue one ``output`` event (``params``: terminalID, generation, data); never blocks.

        Past an output bound (events, bytes, the shared budget) the oldest output is dropped
        and counted; the newest event is always kept.

        Returns:
            The event's ``seq``.
        """
        self._seq += 1
        self._output_seq = self._seq
        item: JSONObject = {"seq": self._seq, "event": "output", **params}
        size = encoded_size(item)
        self._output.append((item, size))
        self._charge(size)
        while len(self._output) > 1 and self._over():
            _, dropped = self._output.popleft()
            self._charge(-dropped)
            self._count_drop(dropped)
        listener = self._listener
        if (
            listener is not None
            and self._armed
            and not self._paused
            and (
                self._output_bytes >= self._marks.high_bytes
                or len(self._output) >= self._high_events
            )
        ):
            self._paused = True
            listener.pause()
        self._ready.set()
        return self._seq

    def _charge(self, size: int) -> None:
        charge = size + (EVENT_OVERHEAD_BYTES if size >= 0 else -EVENT_OVERHEAD_BYTES)
        self._output_bytes += size
        self._charged += charge
        if self._budget is not None:
            self._budget.used += charge
            self._budget.peak = max(self._budget.peak, self._budget.used)

    def _over(self) -> bool:
        budget = self._budget
        return (
            len(self._output) > self._max_output
            or self._charged > self._max_output_bytes
            or (budget is not None and budget.used > budget.max_bytes)
        )

    def _count_drop(self, size: int) -> None:
        self._gap = True
        self._dropped += 1
        self._dropped_bytes += size
        self._unreported += 1
        self._unreported_bytes += size

    def put_outcome(self, params: JSONObject) -> None:
        """Queue one ``exit`` outcome; output never evicts it."""
        self._seq += 1
        item: JSONObject = {"seq": self._seq, "event": "exit", **params}
        self._outcomes.append((item, encoded_size(item)))
        if len(self._outcomes) > self._max_outcomes:
            _, size = self._outcomes.popleft()
            self._count_drop(size)
        self._ready.set()

    def keep_output_of(self, generation: int) -> None:
        """Drop queued ``output`` of every other generation; outcomes and seq are kept."""
        kept = [item for item in self._output if item[0].get("generation") == generation]
        if len(kept) != len(self._output):
            for item in self._output:
                if item[0].get("generation") != generation:
                    self._charge(-item[1])
            self._output = deque(kept)

    def poll(self) -> JSONObject:
        """Drain the queued events without waiting, in ``seq`` order.

        Inside a request of an endpoint, only what its write queue has room for is taken
        (:data:`supervisor._flow.current_answer_room`); the rest stays queued.

        Returns:
            ``{"events": [...], "gap": bool}``; ``gap`` is true when events were evicted
            since the previous drain; the first event drained after an eviction carries
            ``dropped`` and ``droppedBytes``.
        """
        limit = DEFAULT_MAX_BATCH_BYTES
        room = current_answer_room.get()
        if room is not None and (self._output or self._outcomes):
            limit = room.take_nowait(self._wanted())
        return self._drain(limit)

    async def wait(self, timeout_ms: int) -> JSONObject:
        """Block until events are queued or ``timeout_ms`` milliseconds pass, then drain.

        Returns:
            As :meth:`poll`; ``events`` is empty when the timeout passed.

        Raises:
            trio.ClosedResourceError: :meth:`close` was called, before or during the wait.

        **Cancellation:** cancelling the caller leaves the queue untouched.
        """
        if not (self._output or self._outcomes) and timeout_ms > 0 and not self._closed:
            with trio.move_on_after(timeout_ms / 1000):
                await self._ready.wait()
        else:
            # A checkpoint even when nothing is waited for (issue 28): a loop that drains
            # with timeout 0 until the exit must let the task that queues it run.
            await trio.lowlevel.checkpoint()
        if self._closed:
            raise trio.ClosedResourceError("the terminal was disposed")
        room = current_answer_room.get()
        if room is not None and (self._output or self._outcomes):
            return self._drain(await room.take(self._wanted()))
        return self._drain(DEFAULT_MAX_BATCH_BYTES)

    def _wanted(self) -> int:
        queued = len(self._output) + len(self._outcomes)
        outcome_bytes = sum(size for _, size in self._outcomes)
        return min(
            DEFAULT_MAX_BATCH_BYTES,
            self._output_bytes + outcome_bytes + queued * (_REPORT_BYTES + 1) + 64,
        )

    def _drain(self, limit: int) -> JSONObject:
        self._armed = True
        events: list[JSONObject] = []
        room = limit
        while room > 0 and (self._output or self._outcomes):
            if not self._outcomes or (
                self._output and _seq(self._output[0]) < _seq(self._outcomes[0])
            ):
                source = self._output
            else:
                source = self._outcomes
            item, size = source[0]
            cost = size + 1
            if cost > room and events:
                break
            source.popleft()
            if source is self._output:
                self._charge(-size)
            if self._unreported:
                item = {
                    **item,
                    "dropped": self._unreported,
                    "droppedBytes": self._unreported_bytes,
                }
                self._unreported = self._unreported_bytes = 0
                cost += _REPORT_BYTES
            events.append(item)
            room -= cost
        empty = not (self._output or self._outcomes)
        gap = self._gap
        if events or empty:
            self._gap = False
        else:
            gap = False
        if empty and self._ready.is_set():
            # Only a set event is replaced: a waiter still blocked on an unset one (a
            # pollEvents between its wait and the next event) must see that next event.
            self._ready = trio.Event()
        if (
            self._paused
            and self._output_bytes <= self._marks.low_bytes
            and len(self._output) <= self._low_events
        ):
            self._paused = False
            assert self._listener is not None
            self._listener.resume()
        return {"events": events, "gap": gap}  # type: ignore[dict-item]

    def close(self) -> None:
        """Wake every waiter with :class:`trio.ClosedResourceError` (the handle is gone).

        What is queued is released (and its bytes given back to the shared budget).
        """
        self._closed = True
        for _, size in self._output:
            self._charge(-size)
        self._output.clear()
        self._ready.set()

    def statistics(self) -> EventQueueStatistics:
        """Queued and dropped counts and bytes, and the next ``seq``."""
        return EventQueueStatistics(
            len(self._output) + len(self._outcomes),
            self._dropped,
            self._seq + 1,
            self._output_bytes,
            self._dropped_bytes,
            int(self._paused),
        )
