"""PTY terminals (``terminal.*``): state table, launch limits, retained text, events,
one PTY generation, the service.

Private package: import its modules directly; the public names are re-exported by
:mod:`supervisor`.
"""

from __future__ import annotations

__all__: tuple[str, ...] = ()
