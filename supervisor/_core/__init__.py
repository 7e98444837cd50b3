"""The Core: root nursery, operation registry and envelope dispatch, the service protocol,
its built-in services (``process.run``, ``job.*``), payload readers and event queues.

Private package: import its modules directly; the public names are re-exported by
:mod:`supervisor`.
"""

from __future__ import annotations

__all__: tuple[str, ...] = ()
