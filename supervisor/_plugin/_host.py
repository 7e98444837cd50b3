"""Host services the supervisor serves itself: the dispatch table, the call, the policy.

the plugin contract "Host services". A backend's ``lithe/host/*`` request that passed Core's
checks (:func:`~supervisor._plugin._state.check_host_request`) is served in one of two ways:

- by a handler of the :class:`HostServices` table, in this process, on the supervisor's own
  process trees, terminals and sessions (one module per service, ``_host_<service>.py``,
  each with a ``register(table)``; :func:`~supervisor._plugin._host_services.default_host_services`
  lists them);
- or, when no handler serves it or the :class:`HostPolicy` routes it to the client, as a
  ``hostRequest`` event the embedding client answers with ``lsp.hostResponse``.

A handler gets a :class:`HostCall`: the method, its checked params, the calling backend
session (:class:`HostSession`), the :class:`HostEnvironment` (workspace contexts, policy,
the Core's other services) and the resolved workspace context when the params name one. It
returns the result or raises :class:`~supervisor._plugin._state.HostRefusal` with a
``plugin.host.*`` code. A request naming a context runs in a scope that closing or replacing
the context cancels (it then ends ``contextExpired``); the backend's ``$/cancelRequest``
cancels it too (``plugin.host.cancelled``).

The policy keeps the decisions that are a person's: consent to start a program, showing a
window. :class:`AllowAll` (the default in ``supervisor serve``) consents and shows nothing;
:class:`RouteToClient` serves nothing itself and forwards every request as ``hostRequest``,
as a supervisor without host services did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

from .._core._policy import AllowAll, Consent, HostPolicy, RouteToClient, Show
from ._workspace import WorkspaceContexts

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    import trio

    from protocol import JSONObject, JSONValue

    from .._core._service import ServiceContext
    from ._subscriptions import Subscriptions
    from ._workspace import WorkspaceContext

__all__ = (
    "AllowAll",
    "Consent",
    "HostCall",
    "HostEnvironment",
    "HostHandler",
    "HostPolicy",
    "HostServices",
    "HostSession",
    "RouteToClient",
    "Show",
)

_T = TypeVar("_T")


class HostSession(Protocol):
    """The backend session a host request comes from (a plugin runtime)."""

    @property
    def session_id(self) -> str:
        """The ``lsp.*`` session's id (terminals it creates are owned by it)."""
        ...

    @property
    def plugin_id(self) -> str:
        """The installed plugin's ID."""
        ...

    @property
    def grants(self) -> frozenset[str]:
        """``lsp.startServer.hostServices``."""
        ...

    @property
    def generation(self) -> int:
        """The backend process's generation (1 for the first)."""
        ...

    @property
    def subscriptions(self) -> Subscriptions:
        """The live subscriptions of the running backend process."""
        ...

    def notify_backend(self, method: str, params: JSONObject) -> None:
        """Queue a host notification to the running backend (in order, never blocks)."""
        ...


@dataclass(frozen=True)
class HostCall:
    """One host request being served.

    Attributes:
        method: The full method name (``lithe/host/terminal/create``).
        params: Its params, checked by Core (an object).
        session: The backend session asking.
        host: The Core's host environment.
        context: The open context ``params.context`` names, or None when it names none.
    """

    method: str
    params: JSONObject
    session: HostSession
    host: HostEnvironment
    context: WorkspaceContext | None = None


#: ``await handler(call) -> result``; raises ``HostRefusal`` for a failure.
HostHandler: TypeAlias = "Callable[[HostCall], Awaitable[JSONValue]]"


class HostServices:
    """The dispatch table: host method -> handler. A method has at most one handler."""

    def __init__(self) -> None:
        self._handlers: dict[str, HostHandler] = {}

    def register(self, method: str, handler: HostHandler) -> None:
        """Serve ``method`` with ``handler``.

        Raises:
            ValueError: ``method`` already has a handler (registering another one cannot
                replace it, the plugin contract "Public document, file and window methods").
        """
        if method in self._handlers:
            raise ValueError(f"{method} already has a handler")
        self._handlers[method] = handler

    def get(self, method: str) -> HostHandler | None:
        """The handler of ``method``, or None."""
        return self._handlers.get(method)

    @property
    def methods(self) -> frozenset[str]:
        """The methods served here."""
        return frozenset(self._handlers)


@dataclass(eq=False)
class HostEnvironment:
    """What host services share in one Core (:meth:`of`).

    Attributes:
        policy: The embedding host's decisions.
        contexts: The open workspace contexts.
        table: The dispatch table.
    """

    policy: HostPolicy = field(default_factory=AllowAll)
    contexts: WorkspaceContexts = field(default_factory=WorkspaceContexts)
    table: HostServices = field(default_factory=HostServices)
    #: The Core's root nursery: background work of a service, such as disposing a closed
    #: context's terminals.
    nursery: trio.Nursery | None = None
    #: The Core's services, by name; None outside a Core.
    _services: ServiceContext | None = None
    _extensions: dict[object, object] = field(default_factory=dict)

    @classmethod
    def default(
        cls, policy: HostPolicy | None = None, state_root: Path | None = None
    ) -> HostEnvironment:
        """An environment with every host service of this package registered."""
        from ._host_services import default_host_services

        return cls(
            policy=policy if policy is not None else AllowAll(),
            contexts=WorkspaceContexts(state_root),
            table=default_host_services(),
        )

    @staticmethod
    def of(context: ServiceContext) -> HostEnvironment:
        """The one environment of the Core ``context`` belongs to, made when a service
        first asks (the ``lsp`` service, whose sessions run the plugin backends, or the
        ``workspace`` one): the Core's policy and state root, its nursery and services."""
        return context.shared(_environment_of)

    async def service(self, name: str) -> object | None:
        """The Core's service ``name`` (``"terminal"``, ``"debug"``, ...), opened on first
        use; None when the Core runs none of that name, or outside a Core."""
        return None if self._services is None else await self._services.service(name)

    def opened_service(self, name: str) -> object | None:
        """The Core's service ``name`` if it is open (None: nothing of it exists yet)."""
        return None if self._services is None else self._services.opened_service(name)

    def extension(self, kind: Callable[[HostEnvironment], _T]) -> _T:
        """The one ``kind(self)`` of this environment, made on first use: the state a host
        service keeps across requests (its handles, its runs), with the Core's lifetime."""
        made = self._extensions.get(kind)
        if made is None:
            made = self._extensions[kind] = kind(self)
        return made  # type: ignore[return-value]


def _environment_of(context: ServiceContext) -> HostEnvironment:
    host = HostEnvironment.default(context.host_policy, context.plugin_state_root)
    host.nursery = context.nursery
    host._services = context
    return host
