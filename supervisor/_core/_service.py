"""Services: groups of Core commands with the resources they share.

A service owns one kind of thing the Core supervises (job lanes, one-shot processes, and
later language-server, debug, terminal and plugin sessions) and offers the commands that act
on it. It is opened as an async context manager inside the Core's root nursery and closed,
in reverse order, when the Core closes; closing a service ends everything it started.
Adding a session kind is adding one service to :data:`supervisor._core._core.DEFAULT_SERVICES`
(a session kind by name, :class:`supervisor._core._registry.LazyService`, imported and opened
when the Core first needs it); the Core's dispatch, operation registry and cancellation stay
as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar, runtime_checkable

from .._api._base import TAKES_DECLARATION, takes_declaration

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping
    from contextlib import AbstractAsyncContextManager
    from pathlib import Path

    import trio

    from protocol import JSONObject, JSONValue

    from .._session._events import EventBudget
    from .._session._order import Target
    from ._policy import HostPolicy

__all__ = (
    "CommandHandler",
    "LanguageServerCommands",
    "OwnedResources",
    "Service",
    "ServiceContext",
    "ServiceFactory",
    "ServiceLookup",
    "declared",
)

#: ``await handler(payload) -> data``; raises ``protocol.CoreError`` for a refusal.
CommandHandler: TypeAlias = "Callable[[JSONObject], Awaitable[JSONValue]]"

S = TypeVar("S")
P = TypeVar("P")
_T = TypeVar("_T")


def declared(
    handler: Callable[[S, P], Awaitable[JSONValue]],
) -> Callable[[S, JSONObject], Awaitable[JSONValue]]:
    """Mark the method ``handler`` as taking its payload declaration (supervisor/_api), not the
    JSON object: the Core decodes the payload (which is its validation) and passes the
    decoded struct, so the handler checks nothing a declaration says.

    The returned handler is typed as any other for ``commands()``; only the Core calls it.
    """
    return takes_declaration(handler)  # type: ignore[return-value]


async def call_command(
    handlers: Mapping[str, CommandHandler], command: str, payload: JSONObject
) -> JSONValue:
    """Call ``command``'s handler from inside the Core (one service serving another), with
    the payload decoded as the Core decodes it for a handler marked :func:`declared`.

    Raises:
        CoreError: ``invalid_request`` when ``payload`` does not match the declaration;
            whatever the handler raises.
    """
    from .. import _api  # the declarations import the services' constants

    handler = handlers[command]
    if getattr(handler, TAKES_DECLARATION, False):
        return await handler(_api.validate_payload(command, payload))
    return await handler(payload)


async def _no_owned_resources(owner: str) -> None:
    """The default :attr:`ServiceContext.owner_ended`: a context outside a Core owns nothing."""


def _nothing_waits(target: Target, name: str, why: str) -> bool:
    """The default :attr:`ServiceContext.withdraw`: outside a Core no operation waits."""
    return False


class ServiceLookup(Protocol):
    """How a service finds the Core's other services: by name (the Core implements it)."""

    async def service(self, name: str) -> Service | None:
        """The service ``name``, opened now if it was not yet; None when there is none."""
        ...

    def opened_service(self, name: str) -> Service | None:
        """The service ``name`` if it is open; None otherwise (nothing of it exists yet)."""
        ...


class _NoServices:
    """The lookup of a context outside a Core: it has no other services."""

    async def service(self, name: str) -> Service | None:
        return None

    def opened_service(self, name: str) -> Service | None:
        return None


@dataclass(frozen=True)
class ServiceContext:
    """What a service is given when the Core opens it.

    Services reach each other only through their context: by name (:meth:`service`; a
    service's name is the prefix of its commands, ``"lsp"`` for ``lsp.*``), through
    :attr:`owner_ended`, and through state they share (:meth:`shared`).

    Attributes:
        nursery: The Core's root nursery: long-lived tasks of the service (a session's
            reader, a lane) run here, so they end when the Core ends.
        trusted: False when the workspace is untrusted (``build``/``test`` jobs are denied).
        max_events: The bound of each event queue the service keeps.
        owner_ended: ``await owner_ended(owner)``: an owner (a plugin-owned session, by its
            ``sessionId``) has ended, so every service that keeps resources for owners
            (:class:`OwnedResources`) releases that owner's: the Core calls
            ``dispose_owner`` of each such service in turn. Shielded and bounded by each
            service's own bounds.
        host_policy: The embedding host's decisions for plugin backends' host requests
            (``open_core(host_policy=...)``); None: allow all.
        plugin_state_root: Where plugin state directories and the host secret live
            (``open_core(plugin_state_root=...)``); None: the default.
        lookup: The Core's services by name (:meth:`service`); none outside a Core.
        event_budget: The bytes every event queue of the Core keeps together
            (:class:`~supervisor._session._events.EventBudget`); None: no shared bound.
        withdraw: ``withdraw(target, name, why) -> bool``: a target's own cancel
            (``lsp.cancelOperation``) ends an operation on ``target`` that its session does
            not know yet because it still waits for its turn, by the id it was named with
            (``Core._withdraw``; the command's handler then ends it cancelled, unsent).
            False when none waits.
    """

    nursery: trio.Nursery
    trusted: bool
    max_events: int
    owner_ended: Callable[[str], Awaitable[None]] = _no_owned_resources
    host_policy: HostPolicy | None = None
    plugin_state_root: Path | None = None
    lookup: ServiceLookup = field(default_factory=_NoServices)
    event_budget: EventBudget | None = None
    withdraw: Callable[[Target, str, str], bool] = _nothing_waits
    _shared: dict[object, object] = field(default_factory=dict, repr=False, compare=False)

    async def service(self, name: str) -> Service | None:
        """The Core's service ``name`` (``"lsp"``, ``"terminal"``, ...), opened on first
        use (the Core imports a session kind only when something needs it); None when the
        Core runs no service of that name."""
        return await self.lookup.service(name)

    def opened_service(self, name: str) -> Service | None:
        """The Core's service ``name`` if it is open, without opening it: None when it is
        not (so nothing of it -- no session, no terminal -- exists yet)."""
        return self.lookup.opened_service(name)

    def shared(self, make: Callable[[ServiceContext], _T]) -> _T:
        """The one ``make(self)`` of this Core, made on first use: state that several
        services share (the plugin host environment), with the Core's lifetime."""
        made = self._shared.get(make)
        if made is None:
            made = self._shared[make] = make(self)
        return made  # type: ignore[return-value]

    async def language_server_command(
        self, session_id: str, command: str, arguments: list[JSONValue], timeout_ms: int
    ) -> JSONValue:
        """A ``workspace/executeCommand`` on a running language-server session, answered
        with its result (a debug adapter hosted by a language server, the plugin contract
        ``tcpLanguageServer``): sent by the ``lsp`` service (:class:`LanguageServerCommands`).

        Raises:
            CoreError: ``not_supported`` when the Core runs no language-server service;
                the service's own errors (``not_found``, ``launch_failed``).
        """
        service = await self.service("lsp")
        if not isinstance(service, LanguageServerCommands):
            from protocol import CoreError

            raise CoreError("not_supported", "No language-server service runs in this Core")
        return await service.execute_command(session_id, command, arguments, timeout_ms)


@runtime_checkable
class OwnedResources(Protocol):
    """A service that keeps resources on behalf of owners (the terminal service).

    the plugin contract "Plugin-owned native terminals": ending the backend session that
    owns a terminal disposes it; a service implementing this is told through
    :attr:`ServiceContext.owner_ended`.
    """

    async def dispose_owner(self, owner: str | None) -> int:
        """Release everything ``owner`` holds; return how many resources were released.

        **Cancellation:** shielded and bounded by the service's own bounds.
        """
        ...


@runtime_checkable
class LanguageServerCommands(Protocol):
    """A service that runs ``workspace/executeCommand`` for other services (the LSP one)."""

    async def execute_command(
        self, session_id: str, command: str, arguments: list[JSONValue], timeout_ms: int
    ) -> JSONValue:
        """The command's result; raises ``CoreError`` (``not_found``, ``launch_failed``)."""
        ...


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
