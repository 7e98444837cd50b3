"""Flow control: what a consumer has not taken holds back its producer.

The rule is written out in docs/architecture.md "Flow control".

The rule, everywhere: a slow consumer costs bounded memory and never costs a session. A
producer we can pause (a PTY, a job's pipes) is paused; one we can not (a language server's
logs, a debug adapter's output) has its informational events coalesced within byte bounds,
and what is dropped is counted and reported (:mod:`supervisor._session._events`).

Two pieces live here because both ends of the chain use them:

- :class:`Watermarks` and :class:`FlowListener`: an event queue tells a producer to pause once
  the bytes it queued for one target and nobody took reach ``high_bytes``, and to resume once
  a drain brings them to ``low_bytes`` or below (xterm.js's ``WriteBuffer``, node-pty's
  flow control).
- :class:`AnswerRoom` and :data:`current_answer_room`: "taken" means *on its way to the
  client*. A JSON-RPC endpoint sets this context variable for each inbound request's handler
  (and serve's job-event forwarder sets one of its own); a drain (``*.waitEvents``,
  ``*.pollEvents``) takes only as many bytes as the endpoint's write queue has room for, and
  leaves the rest queued, where it stays subject to coalescing and watermarks. So events
  a client is not reading wait in their queue (paused or coalesced), not in answers piling
  up behind a full pipe.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = (
    "DEFAULT_HIGH_WATERMARK_BYTES",
    "DEFAULT_LOW_WATERMARK_BYTES",
    "AnswerRoom",
    "FlowListener",
    "Watermarks",
    "current_answer_room",
)

#: Bytes (as JSON) of one target's output not taken at which its producer is paused (ours).
DEFAULT_HIGH_WATERMARK_BYTES: Final = 1024 * 1024
#: Bytes (as JSON) of one target's output not taken at or below which it resumes (ours).
DEFAULT_LOW_WATERMARK_BYTES: Final = 256 * 1024


@dataclass(frozen=True, slots=True)
class Watermarks:
    """When a producer is paused and resumed, in bytes of its events not taken (as JSON).

    Attributes:
        high_bytes: Pause at or above this.
        low_bytes: Resume at or below this (less than ``high_bytes``).

    Raises:
        ValueError: ``low_bytes`` is negative or not below ``high_bytes``.
    """

    high_bytes: int = DEFAULT_HIGH_WATERMARK_BYTES
    low_bytes: int = DEFAULT_LOW_WATERMARK_BYTES

    def __post_init__(self) -> None:
        if not 0 <= self.low_bytes < self.high_bytes:
            raise ValueError("watermarks need 0 <= low_bytes < high_bytes")


class FlowListener(Protocol):
    """A producer an event queue can hold back: both calls are synchronous and idempotent."""

    def pause(self) -> None:
        """Stop reading (the kernel then holds the program's next write)."""

    def resume(self) -> None:
        """Read again."""


class AnswerRoom(Protocol):
    """Room on the way to the client for what a drain takes (see the module docstring).

    Bytes granted stay reserved until the answer (or notification) that carries them is
    queued for writing, when the endpoint counts the frame itself instead.
    """

    async def take(self, wanted: int) -> int:
        """Wait until the write queue has room, reserve up to ``wanted`` bytes of it.

        Returns:
            The bytes granted, at least 1 (all of ``wanted`` when nothing else is on its
            way: a lone large event always gets through).

        **Cancellation:** safe to cancel; nothing is reserved then.
        """
        ...

    def take_nowait(self, wanted: int) -> int:
        """Reserve up to ``wanted`` bytes of what is free now; 0 when nothing is."""
        ...


#: The room of the answer being made in this task (None: no client to wait for, e.g. an
#: embedding host's own ``Core.call``, which takes at once).
current_answer_room: contextvars.ContextVar[AnswerRoom | None] = contextvars.ContextVar(
    "current_answer_room", default=None
)
