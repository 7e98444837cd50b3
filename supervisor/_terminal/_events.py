"""The event queue of one terminal handle: bounded output, exit outcomes output can't evict.

Contract (plugin-contract.md "Plugin-owned native terminals" and "Close, retained
context and reopen"):

- ``output {terminalID, generation, data}`` events are ordered and bounded: past
  ``max_output_events`` events, or past ``max_output_chars`` characters of ``data`` in all, the
  *oldest output* is dropped and the next drain says ``gap: true`` (memory stays bounded however
  fast the program writes), like :class:`supervisor._session._events.EventQueue`. The character
  bound is what bounds memory: one event carries up to 64 KiB of output, and a flood fills the queue
  with full events.
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

Why not :class:`supervisor._session._events.EventQueue` itself: it has one deque, evicts whatever is
oldest and can only be drained whole, so protecting outcomes and dropping one generation's output
would mean re-queuing, which renumbers events. This class keeps its wire shape
(``{"events": [...], "gap": bool}``, each event ``{seq, event, **params}``) and its waiting
rule (a :class:`trio.Event`, no polling). Pure apart from that event: tested without
processes.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Final

import trio

from .._session._events import EventQueueStatistics

if TYPE_CHECKING:
    from protocol import JSONObject

__all__ = ("DEFAULT_MAX_OUTCOMES", "DEFAULT_MAX_OUTPUT_CHARS", "TerminalEvents")

#: Undrained exit outcomes kept per handle (ours): one per generation.
DEFAULT_MAX_OUTCOMES: Final = 16
#: Undrained output characters kept per handle (ours): at most 4 MiB of ASCII text (a
#: ``str`` of wider characters takes 2 or 4 bytes each).
DEFAULT_MAX_OUTPUT_CHARS: Final = 4 * 1024 * 1024


def _chars(event: JSONObject) -> int:
    data = event["data"]
    assert isinstance(data, str)
    return len(data)


def _seq(event: JSONObject) -> int:
    seq = event["seq"]
    assert isinstance(seq, int)
    return seq


class TerminalEvents:
    """A terminal handle's ``output`` and ``exit`` events (see the module docstring).

    Args:
        max_output_events: ``output`` events kept before the oldest is dropped.
        max_outcomes: ``exit`` outcomes kept before the oldest is dropped.
        max_output_chars: Characters of queued ``output`` data kept before the oldest
            event is dropped (the newest event is always kept).

    Raises:
        ValueError: A bound is not positive.
    """

    def __init__(
        self,
        max_output_events: int,
        max_outcomes: int = DEFAULT_MAX_OUTCOMES,
        *,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    ) -> None:
        if max_output_events <= 0 or max_outcomes <= 0 or max_output_chars <= 0:
            raise ValueError("event bounds must be positive")
        self._output: deque[JSONObject] = deque()
        self._outcomes: deque[JSONObject] = deque()
        self._max_output = max_output_events
        self._max_outcomes = max_outcomes
        self._max_output_chars = max_output_chars
        self._output_chars = 0
        self._seq = 0
        self._gap = False
        self._dropped = 0
        self._closed = False
        self._ready = trio.Event()

    def put_output(self, params: JSONObject) -> None:
        """Queue one ``output`` event (``params``: terminalID, generation, data); never blocks.

        Past either output bound (events, or characters of ``data`` in all) the oldest
        output is dropped and the next drain says ``gap``; the newest event is always kept.
        """
        self._seq += 1
        self._output.append({"seq": self._seq, "event": "output", **params})
        self._output_chars += _chars(params)
        while len(self._output) > 1 and (
            len(self._output) > self._max_output or self._output_chars > self._max_output_chars
        ):
            self._output_chars -= _chars(self._output.popleft())
            self._gap = True
            self._dropped += 1
        self._ready.set()

    def put_outcome(self, params: JSONObject) -> None:
        """Queue one ``exit`` outcome; output never evicts it."""
        self._seq += 1
        self._outcomes.append({"seq": self._seq, "event": "exit", **params})
        if len(self._outcomes) > self._max_outcomes:
            self._outcomes.popleft()
            self._gap = True
            self._dropped += 1
        self._ready.set()

    def keep_output_of(self, generation: int) -> None:
        """Drop queued ``output`` of every other generation; outcomes and seq are kept."""
        kept = [e for e in self._output if e.get("generation") == generation]
        if len(kept) != len(self._output):
            self._output = deque(kept)
            self._output_chars = sum(_chars(e) for e in kept)

    def poll(self) -> JSONObject:
        """Drain every queued event without waiting, in ``seq`` order.

        Returns:
            ``{"events": [...], "gap": bool}``; ``gap`` is true when events were evicted
            since the previous drain.
        """
        if not self._outcomes:
            events: list[JSONObject] = list(self._output)
        elif not self._output:
            events = list(self._outcomes)
        else:
            events = list(heapq.merge(self._output, self._outcomes, key=_seq))
        self._output.clear()
        self._outcomes.clear()
        self._output_chars = 0
        gap, self._gap = self._gap, False
        if self._ready.is_set():
            # Only a set event is replaced: a waiter still blocked on an unset one (a
            # pollEvents between its wait and the next event) must see that next event.
            self._ready = trio.Event()
        return {"events": events, "gap": gap}  # type: ignore[dict-item]

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
        return self.poll()

    def close(self) -> None:
        """Wake every waiter with :class:`trio.ClosedResourceError` (the handle is gone)."""
        self._closed = True
        self._ready.set()

    def statistics(self) -> EventQueueStatistics:
        """Queued and dropped counts and the next ``seq``."""
        return EventQueueStatistics(
            len(self._output) + len(self._outcomes), self._dropped, self._seq + 1
        )
