"""A sliding-window rate limit: how many of a session's events of one kind may be queued.

Pure (no I/O, no clock of its own: the caller passes the time). Language-server sessions
bound their stderr log events and plugin facts with it.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from protocol import JSONObject

__all__ = ("RateLimit",)


class RateLimit:
    """At most ``limit`` admissions in any sliding window of ``window_ms``; counts the rest.

    A sliding log rather than fixed windows, so no burst of twice the limit can straddle a
    window edge. Memory is bounded by ``limit`` timestamps.

    Args:
        limit: Admissions allowed per window (>= 1).
        window_ms: The window, in milliseconds (> 0).

    Raises:
        ValueError: A bound is not positive.
    """

    def __init__(self, limit: int, window_ms: int) -> None:
        if limit < 1 or window_ms <= 0:
            raise ValueError("rate limit bounds must be positive")
        self.limit = limit
        self.window_ms = window_ms
        self._admitted_at: deque[float] = deque(maxlen=limit)
        self.admitted = 0
        self.dropped = 0

    def admit(self, now_ms: float) -> bool:
        """Admit one item at ``now_ms`` (milliseconds, never decreasing), or count it dropped.

        Returns:
            True when the item is admitted.
        """
        while self._admitted_at and now_ms - self._admitted_at[0] >= self.window_ms:
            self._admitted_at.popleft()
        if len(self._admitted_at) >= self.limit:
            self.dropped += 1
            return False
        self._admitted_at.append(now_ms)
        self.admitted += 1
        return True

    def to_wire(self) -> JSONObject:
        """``{admitted, dropped}`` since the limit was made."""
        return {"admitted": self.admitted, "dropped": self.dropped}
