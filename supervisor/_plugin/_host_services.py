"""The host services this supervisor serves itself: one ``register`` line per service.

Each ``_host_<service>.py`` module registers its handlers in the dispatch table
(:class:`~supervisor._plugin._host.HostServices`); a method without a handler here reaches
the embedding client as a ``hostRequest`` event.
"""

from __future__ import annotations

from . import _host_language_server, _host_run, _host_terminal, _host_workspace
from ._host import HostServices

__all__ = ("default_host_services",)


def default_host_services() -> HostServices:
    """A table with every host service of this package registered."""
    table = HostServices()
    _host_workspace.register(table)
    _host_terminal.register(table)
    _host_run.register(table)
    _host_language_server.register(table)
    return table
