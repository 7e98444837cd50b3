"""The session skeleton every session kind stands on (language server, debug, terminal, plugin).

Private package: what is shared by the kinds lives here once -- exit details, the stderr ring,
the stop bounds and the stop ladder, the event queue, the registry of ids, the base session
resource and the operation table -- and each kind keeps only its state table and its
protocol's steps.
"""

from __future__ import annotations

from ._bounds import (
    DRAIN_AFTER_EXIT_MS as DRAIN_AFTER_EXIT_MS,
    KILL_WAIT_MS as KILL_WAIT_MS,
    POLITE_TIMEOUT_MS as POLITE_TIMEOUT_MS,
    TERM_GRACE_MS as TERM_GRACE_MS,
    StopBounds as StopBounds,
    stop_ladder as stop_ladder,
)
from ._exit import exit_detail as exit_detail, signal_name as signal_name
from ._operations import Operation as Operation, OperationTable as OperationTable
from ._order import (
    Sequencer as Sequencer,
    Target as Target,
    Turn as Turn,
    effect_taken as effect_taken,
    withdrawn as withdrawn,
)
from ._registry import EventSource as EventSource, SessionRegistry as SessionRegistry
from ._resource import SessionResource as SessionResource
from ._stderr import StderrRing as StderrRing

__all__ = (
    "DRAIN_AFTER_EXIT_MS",
    "KILL_WAIT_MS",
    "POLITE_TIMEOUT_MS",
    "TERM_GRACE_MS",
    "EventSource",
    "Operation",
    "OperationTable",
    "Sequencer",
    "SessionRegistry",
    "SessionResource",
    "StderrRing",
    "StopBounds",
    "Target",
    "Turn",
    "effect_taken",
    "exit_detail",
    "signal_name",
    "stop_ladder",
    "withdrawn",
)
