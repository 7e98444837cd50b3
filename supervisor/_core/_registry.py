"""The session kinds by name: service factories the Core imports and opens on first use.

The Core stands below the kinds it opens (docs/architecture.md "Layers"): it knows a service
by its interface (:class:`~supervisor._core._service.Service`) and a kind by its name and
where its factory lives, never by an import. A :class:`LazyService` is such an entry: a
:data:`~supervisor._core._service.ServiceFactory` (so ``DEFAULT_SERVICES`` keeps its shape)
whose module is imported the first time it is called. Given one, the Core opens the kind
only when a command of it arrives (``lsp.startServer`` opens the ``lsp`` service) or another
service asks for it by name (:meth:`~supervisor._core._service.ServiceContext.service`). So
``supervisor exec`` never imports a language-server session, and ``supervisor serve``
answers ``initialize`` before it has.

A service's name is the prefix of its commands: the ``lsp`` service answers ``lsp.*``, and
those are the commands the Core declares for it before it is opened (:mod:`supervisor._api`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from ._service import Service, ServiceContext, ServiceFactory

__all__ = ("KINDS", "LazyService")


@dataclass(frozen=True)
class LazyService:
    """A service factory named ``name``, imported from ``target`` when first called.

    Attributes:
        name: The service's name: the prefix of its commands (``"lsp"`` for ``lsp.*``).
        target: Where the factory is: ``"package.module:attribute"``.
    """

    name: str
    target: str

    def resolve(self) -> ServiceFactory:
        """Import the factory.

        Raises:
            ImportError: The module is missing; AttributeError: it has no such factory.
        """
        module, _, attribute = self.target.partition(":")
        factory: ServiceFactory = getattr(importlib.import_module(module), attribute)
        return factory

    def __call__(self, context: ServiceContext) -> AbstractAsyncContextManager[Service]:
        return self.resolve()(context)


#: The session kinds every Core offers: each opens on first use, and they close in the reverse
#: order of their opening.
KINDS: Final = (
    LazyService("lsp", "supervisor._lsp._service:open_lsp_service"),
    LazyService("terminal", "supervisor._terminal._service:open_terminal_service"),
    LazyService("debug", "supervisor._dap._service:open_debug_service"),
    LazyService("workspace", "supervisor._plugin._host_workspace:open_workspace_service"),
    LazyService("run", "supervisor._plugin._run_service:open_run_service"),
)
