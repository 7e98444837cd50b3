"""The embedding host's decisions: the ones that are a person's (``open_core(host_policy=...)``).

the plugin contract "Host services": a plugin backend may ask the supervisor to start a
program or to show a window; whether a person consents, and how a window is shown, is the
embedding host's to decide. The Core takes the policy as an option and hands it to its
services (:attr:`~supervisor.ServiceContext.host_policy`); the plugin host services ask it
(``supervisor._plugin._host``). The two policies of this package, ``AllowAll`` and
``RouteToClient``, live here too, so serve picks one without importing the plugin side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("AllowAll", "Consent", "HostPolicy", "RouteToClient", "Show")


@dataclass(frozen=True)
class Consent:
    """What a person is asked before a program starts for a backend.

    Attributes:
        plugin_id: Who asks.
        method: The host method (``lithe/host/terminal/create``, ...).
        executable: The program, as resolved.
        arguments: Its argv after the program.
        cwd: Its working directory.
    """

    plugin_id: str
    method: str
    executable: str
    arguments: tuple[str, ...]
    cwd: str


@dataclass(frozen=True)
class Show:
    """A window or tab a backend asks to show (``kind``: ``terminal``, ``run``, ...)."""

    plugin_id: str
    kind: str
    id: str


class HostPolicy(Protocol):
    """The embedding host's decisions (the ones that are a person's)."""

    def routes_to_client(self, method: str) -> bool:
        """True: forward ``method`` to the client as ``hostRequest`` instead of serving it."""
        ...

    async def consent(self, request: Consent) -> bool:
        """Ask for consent to start a program; False refuses it
        (-32010 ``plugin.host.permissionDenied``). May wait for a person; the request's
        cancellation (backend, context, session) ends the wait."""
        ...

    async def show(self, request: Show) -> None:
        """Show a window or tab (a host without windows does nothing)."""
        ...


class AllowAll:
    """Serve everything there is a handler for, consent to everything, show nothing."""

    def routes_to_client(self, method: str) -> bool:
        return False

    async def consent(self, request: Consent) -> bool:
        return True

    async def show(self, request: Show) -> None:
        return None


class RouteToClient(AllowAll):
    """Serve nothing here: every host request goes to the client as ``hostRequest``.

    Args:
        methods: Only these methods go to the client (None: all of them).
    """

    def __init__(self, methods: Iterable[str] | None = None) -> None:
        self._methods = None if methods is None else frozenset(methods)

    def routes_to_client(self, method: str) -> bool:
        return self._methods is None or method in self._methods
