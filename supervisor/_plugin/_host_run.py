"""Host service: ``lithe/host/run/start``, ``run/stop`` and ``debug/start``.

the plugin contract "Run and debug sessions", served on the Core's own process trees
(:class:`~supervisor._plugin._run_service.RunService`) and debug sessions
(:class:`~supervisor._dap._service.DebugService`). Core's checks come first
(:mod:`supervisor._plugin._run_state`); then the embedding host's policy consents to the
program, the run or session starts, and the policy is asked to show it.

- run/start and debug/start need an open, local workspace context (closed:
  ``plugin.host.contextExpired``, from the dispatch); the working directory and the debug
  session's root are its first folder. A context that closes later does not end the run.
- run/stop takes no context; it stops a run (``runID``) or a debug session (``sessionID``)
  this plugin started and answers null, also when it already ended. Cancelling it does not
  undo the stop. Cancelling a run/start whose run has begun stops that run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ._host import Consent, Show
from ._run_service import RunService
from ._run_state import decode_debug_start, decode_run_start, decode_run_stop, resolve_tool
from ._state import HostRefusal

if TYPE_CHECKING:
    from protocol import JSONValue

    from .._dap._service import DebugService
    from ._host import HostCall, HostServices
    from ._workspace import WorkspaceContext

__all__ = ("register",)

RUN_START = "lithe/host/run/start"
RUN_STOP = "lithe/host/run/stop"
DEBUG_START = "lithe/host/debug/start"


def register(table: HostServices) -> None:
    """Serve run/start, run/stop and debug/start."""
    table.register(RUN_START, run_start)
    table.register(RUN_STOP, run_stop)
    table.register(DEBUG_START, debug_start)


def _unavailable(what: str) -> HostRefusal:
    return HostRefusal(-32601, "plugin.host.unavailable", f"this host runs no {what}")


async def _runs(call: HostCall) -> RunService:
    service = await call.host.service("run")
    if not isinstance(service, RunService):
        raise _unavailable("run sessions")
    return service


async def _debug(call: HostCall) -> DebugService:
    from .._dap._service import DebugService  # the debug service imports nothing of ours

    service = await call.host.service("debug")
    if not isinstance(service, DebugService):
        raise _unavailable("debug sessions")
    return service


def _root(context: WorkspaceContext | None) -> str:
    """The workspace root of the request's context: its first folder."""
    if context is None:
        return ""  # the params name no context: Core's checks refuse them first
    if not context.local:
        raise HostRefusal(
            -32012,
            "plugin.host.authorityUnsupported",
            "runs and debug sessions start only in a local workspace",
        )
    if not context.folders:
        raise HostRefusal(-32016, "plugin.host.notFound", "the context has no folder")
    return context.folders[0].path


async def _consent(call: HostCall, executable: str, arguments: tuple[str, ...], cwd: str) -> None:
    allowed = await call.host.policy.consent(
        Consent(call.session.plugin_id, call.method, executable, arguments, cwd)
    )
    if not allowed:
        raise HostRefusal(-32010, "plugin.host.permissionDenied", "the user withheld consent")


async def run_start(call: HostCall) -> JSONValue:
    """``run/start {context, label, process, temporaryFiles?, debug?, rerun?}`` ->
    ``{runID}``."""
    service = await _runs(call)
    root = _root(call.context) if "context" in call.params else ""
    session = call.session
    registry = getattr(session, "registry", None)
    registered = frozenset(registry.sorted_ids()) if registry is not None else frozenset()
    plan = decode_run_start(call.params, service.plugin(session.plugin_id).tools, root, registered)
    await _consent(call, plan.executable, plan.arguments, plan.working_directory)
    run = await service.start(session, plan)  # type: ignore[arg-type]
    try:
        await call.host.policy.show(Show(session.plugin_id, "run", run.run_id))
    except BaseException:
        # The backend never learns the runID: cancelling the request that started the run
        # (or a failure to show it) stops it.
        run.stop_requested.set()
        raise
    return {"runID": run.run_id}


async def run_stop(call: HostCall) -> JSONValue:
    """``run/stop {runID} | {sessionID}`` -> null."""
    kind, target = decode_run_stop(call.params)
    debug = await _debug(call) if kind == "sessionID" else None
    await (await _runs(call)).stop(call.session.plugin_id, kind, target, debug)
    return None


async def debug_start(call: HostCall) -> JSONValue:
    """``debug/start {context, label, adapter, request, configuration}`` -> ``{sessionID}``."""
    service = await _runs(call)
    plugin_id = call.session.plugin_id
    plugin = service.plugin(plugin_id)
    plan = decode_debug_start(call.params, plugin_id, plugin.adapters)
    tool = plan.adapter.runtime_tool
    if tool is not None:
        # Resolved at each start: a tool the host did not list is looked up on PATH now.
        resolved = resolve_tool(tool, plugin.tools)
        started = replace(plan.adapter, adapter={**plan.adapter.adapter, "executable": resolved})
        plan = replace(plan, adapter=started)
    root = _root(call.context)
    debug = await _debug(call)
    adapter = plan.adapter.adapter
    executable = adapter.get("executable")
    arguments = adapter.get("arguments", [])
    await _consent(
        call,
        executable if isinstance(executable, str) else plan.adapter.adapter_id,
        tuple(str(a) for a in arguments) if isinstance(arguments, list) else (),
        root,
    )
    session_id = await service.start_debug(plugin_id, plan, root, debug)
    await call.host.policy.show(Show(plugin_id, "debug", session_id))
    return {"sessionID": session_id}
