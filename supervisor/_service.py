"""Services: groups of Core commands with the resources they share.

A service owns one kind of thing the Core supervises (job lanes, one-shot processes, and
later language-server, debug, terminal and plugin sessions) and offers the commands that act
on it. It is opened as an async context manager inside the Core's root nursery and closed,
in reverse order, when the Core closes; closing a service ends everything it started.
Adding a session kind is adding one service to :data:`supervisor._core.DEFAULT_SERVICES`;
the Core's dispatch, operation registry and cancellation stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping
    from contextlib import AbstractAsyncContextManager

    import trio

    from protocol import JSONObject, JSONValue

__all__ = ("CommandHandler", "Service", "ServiceContext", "ServiceFactory")

#: ``await handler(payload) -> data``; raises ``protocol.CoreError`` for a refusal.
CommandHandler: TypeAlias = "Callable[[JSONObject], Awaitable[JSONValue]]"


@dataclass(frozen=True)
class ServiceContext:
    """What a service is given when the Core opens it.

    Attributes:
        nursery: The Core's root nursery: long-lived tasks of the service (a session's
            reader, a lane) run here, so they end when the Core ends.
        trusted: False when the workspace is untrusted (``build``/``test`` jobs are denied).
        max_events: The bound of each event queue the service keeps.
    """

    nursery: trio.Nursery
    trusted: bool
    max_events: int


class Service(Protocol):
    """A group of commands; see the module docstring."""

    def commands(self) -> Mapping[str, CommandHandler]:
        """The commands this service answers, by name (e.g. ``"job.start"``)."""
        ...

    async def aclose(self) -> None:
        """End everything the service started; idempotent, and it always releases.

        The Core calls it for every service at once, concurrently with cancelling the
        running operations, so that closing costs one TERM grace and not one per service;
        leaving the service's context manager afterwards finds nothing left to do.

        **Cancellation:** the Core calls it shielded; it must bound its own waits.
        """
        ...


#: Opens a service: ``async with factory(context) as service``.
ServiceFactory: TypeAlias = "Callable[[ServiceContext], AbstractAsyncContextManager[Service]]"
