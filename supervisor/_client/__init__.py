"""The session clients: language servers and debug adapters as request/response objects.

A layer above the Core's public commands (``lsp.*``, ``debug.*``): :mod:`._lsp` and
:mod:`._dap` are the Trio clients, :mod:`._sync` their blocking facades over a
:class:`~supervisor.CoreThread`, :mod:`._errors` the errors they raise.
"""

from __future__ import annotations

__all__ = ()
