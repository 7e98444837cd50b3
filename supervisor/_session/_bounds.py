"""One set of stop bounds, in milliseconds, for every kind of session and process tree.

Every kind ends its process the same way -- its polite step (LSP ``shutdown`` + ``exit``,
DAP ``disconnect``, a terminal's hang-up, closing a backend's stdin), then SIGTERM to the
group, then SIGKILL, then a bounded wait before survivors are reported -- and drains its
peer's output for a bounded time after the exit. The numbers that are the same for every
kind are defined here once; each kind keeps only its polite step's own bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = (
    "DRAIN_AFTER_EXIT_MS",
    "KILL_WAIT_MS",
    "POLITE_TIMEOUT_MS",
    "TERM_GRACE_MS",
    "StopBounds",
)

#: After the polite step is refused or times out: SIGTERM, then this long before SIGKILL.
TERM_GRACE_MS: Final = 2_000
#: After SIGKILL: this long before the processes still there are reported "unkillable".
KILL_WAIT_MS: Final = 1_000
#: After a child's exit (or its kill): this long to read what it wrote before (its pipes
#: may be held open by a grandchild, which must not stretch a deadline).
DRAIN_AFTER_EXIT_MS: Final = 500
#: A polite step's bound where the kind has no bound of its own (closing stdin).
POLITE_TIMEOUT_MS: Final = 2_000


@dataclass(frozen=True, slots=True)
class StopBounds:
    """The bounds of one stop ladder, in milliseconds.

    Attributes:
        polite_ms: The polite step's bound (the kind's own).
        term_grace_ms: After SIGTERM, the longest wait before SIGKILL.
        kill_wait_ms: After SIGKILL, the longest wait before survivors are reported.
        drain_ms: After the exit, the longest wait for the peer's output to end.
    """

    polite_ms: int = POLITE_TIMEOUT_MS
    term_grace_ms: int = TERM_GRACE_MS
    kill_wait_ms: int = KILL_WAIT_MS
    drain_ms: int = DRAIN_AFTER_EXIT_MS

    @property
    def total_ms(self) -> int:
        """The longest a whole stop can take: every step at its bound."""
        return self.polite_ms + self.term_grace_ms + self.kill_wait_ms + self.drain_ms
