"""The session skeleton every session kind stands on (language server, debug, terminal, plugin).

Private package: what is shared by the kinds lives here once -- exit details, the stderr ring,
and (growing) the operation table, stop bounds and registry -- and each kind keeps only its
state table and its protocol's steps.
"""

from __future__ import annotations

from ._exit import exit_detail as exit_detail, signal_name as signal_name
from ._stderr import StderrRing as StderrRing

__all__ = ("StderrRing", "exit_detail", "signal_name")
