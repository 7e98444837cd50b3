"""One set of stop bounds, in milliseconds, and the one stop ladder, for every kind.

Every kind ends its process the same way -- its polite step (LSP ``shutdown`` + ``exit``,
DAP closing the adapter's input, a terminal's hang-up, closing a backend's stdin), then
SIGTERM to the group, then SIGKILL, then a bounded wait before survivors are reported -- with
its readers running throughout and draining its peer's output for a bounded time after the
exit. The ladder and the numbers that are the same for every kind are defined once, with the
process trees (:mod:`supervisor._process._ladder`, the lowest floor, so that ``process.run``
reaches them too); the skeleton offers them under these names. Each kind keeps only its
polite step's own bounds.
"""

from __future__ import annotations

from .._process._ladder import (
    DRAIN_AFTER_EXIT_MS as DRAIN_AFTER_EXIT_MS,
    KILL_WAIT_MS as KILL_WAIT_MS,
    POLITE_TIMEOUT_MS as POLITE_TIMEOUT_MS,
    TERM_GRACE_MS as TERM_GRACE_MS,
    StopBounds as StopBounds,
    stop_ladder as stop_ladder,
)

__all__ = (
    "DRAIN_AFTER_EXIT_MS",
    "KILL_WAIT_MS",
    "POLITE_TIMEOUT_MS",
    "TERM_GRACE_MS",
    "StopBounds",
    "stop_ladder",
)
