"""The supervisor: process trees, the JSON-RPC endpoint, the Core, serve mode and the CLI.

Everything that touches processes, streams and cancel scopes lives here; the sans-I/O
protocol is in :mod:`protocol` and the lane policy in :mod:`lanes`.
"""

from __future__ import annotations

from ._core import Core as Core, CoreThread as CoreThread, open_core as open_core
from ._events import EventQueue as EventQueue, EventQueueStatistics as EventQueueStatistics
from ._serve import serve as serve

__all__ = (
    "Core",
    "CoreThread",
    "EventQueue",
    "EventQueueStatistics",
    "open_core",
    "serve",
)
