"""Processes: the scope marker, /proc readers, spawning, process trees and ending them,
the subreaper and orphan sweep, the crash watchdog, and one-shot ``process.run``.

Private package: import its modules directly; the public names are re-exported by
:mod:`supervisor`.
"""

from __future__ import annotations

__all__: tuple[str, ...] = ()
