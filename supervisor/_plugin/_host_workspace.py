"""``lithe/host/workspace/*`` (workspace.metadata) and the ``workspace.*`` Core commands.

the plugin contract "Workspace contexts and capability discovery":

- ``lithe/host/workspace/listContexts {}`` -> ``{revision, contexts: [<context>]}``, every
  open context without ``stateDirectory`` (listing creates nothing);
- ``lithe/host/workspace/getContext {context}`` -> ``<context>`` with ``stateDirectory``,
  created then;
- ``lithe/host/workspace/getFolders {context}`` -> ``{folders: [{rootID, name, path?}]}``.

A closed context or an older generation is -32011 ``plugin.host.contextExpired``. The
embedding host declares the open contexts with ``workspace.setContexts`` (see
:meth:`~supervisor._plugin._workspace.WorkspaceContexts.set_contexts`); each change sends
``lithe/host/workspace/didChangeContexts {revision}`` to the backends granted ``workspace``.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from .._core._service import declared
from ._state import _refusal

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from protocol import JSONValue

    from .._api._plugin import WorkspaceListContexts, WorkspaceSetContexts
    from .._core._service import CommandHandler, ServiceContext
    from ._host import HostCall, HostEnvironment, HostServices

__all__ = ("WorkspaceService", "open_workspace_service", "register")


def register(table: HostServices) -> None:
    """Serve the three ``workspace.metadata`` methods."""
    table.register("lithe/host/workspace/listContexts", _list_contexts)
    table.register("lithe/host/workspace/getContext", _get_context)
    table.register("lithe/host/workspace/getFolders", _get_folders)


async def _list_contexts(call: HostCall) -> JSONValue:
    contexts = call.host.contexts
    plugin_id = call.session.plugin_id
    return {
        "revision": contexts.revision,
        "contexts": [contexts.wire(plugin_id, c) for c in contexts.contexts],
    }


async def _get_context(call: HostCall) -> JSONValue:
    assert call.context is not None, "Core checked that the method names a context"
    try:
        return call.host.contexts.wire(call.session.plugin_id, call.context, state_directory=True)
    except OSError as exc:
        raise _refusal(
            "plugin.host.failed", f"could not create the state directory: {exc.strerror or exc}"
        ) from None


async def _get_folders(call: HostCall) -> JSONValue:
    assert call.context is not None, "Core checked that the method names a context"
    return {"folders": call.host.contexts.folders_wire(call.session.plugin_id, call.context)}


class WorkspaceService:
    """The Core commands of the workspace contexts: ``workspace.setContexts {contexts}`` ->
    ``{revision, contexts: [{contextID, generation}]}`` and ``workspace.listContexts {}`` ->
    the same for the contexts as they are."""

    def __init__(self, host: HostEnvironment) -> None:
        self._host = host

    def commands(self) -> Mapping[str, CommandHandler]:
        return {
            "workspace.setContexts": self._set,
            "workspace.listContexts": self._list,
        }

    async def aclose(self) -> None:
        return None

    @declared
    async def _set(self, payload: WorkspaceSetContexts) -> JSONValue:
        return self._host.contexts.set_contexts({"contexts": payload.contexts})

    @declared
    async def _list(self, payload: WorkspaceListContexts) -> JSONValue:
        contexts = self._host.contexts
        return {
            "revision": contexts.revision,
            "contexts": [c.reference() for c in contexts.contexts],
        }


@asynccontextmanager
async def open_workspace_service(context: ServiceContext) -> AsyncIterator[WorkspaceService]:
    """Open the ``workspace.*`` commands on the Core's host environment."""
    from ._host import HostEnvironment

    yield WorkspaceService(HostEnvironment.of(context))
