"""Language-server sessions (``lsp.*``): pure state table, documents, session, service.

Private package: import its modules directly; the public names are re-exported by
:mod:`supervisor`.
"""

from __future__ import annotations

__all__: tuple[str, ...] = ()
