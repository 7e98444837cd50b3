"""Plugin-owned sessions and the cross-plugin relay (host side): pure rules, the
plugin side of a session, the relay.

Private package: import its modules directly; the public names are re-exported by
:mod:`supervisor`.
"""

from __future__ import annotations

__all__: tuple[str, ...] = ()
