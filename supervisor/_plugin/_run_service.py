"""The ``run.*`` commands: run sessions of plugin backends, as a Core service.

the plugin contract "Run and debug sessions". Backends start runs with
``lithe/host/run/start`` (served by :mod:`supervisor._plugin._host_run`); the embedding host
presents them with these commands:

- ``run.configurePlugin {pluginId, packageRoot?, requiresTools?, tools?, debugAdapters?}``:
  what the host knows of one installed plugin for its runs and debug sessions (its package,
  the manifest's ``requiresTools``, its declared debug adapters). ``tools`` maps a required
  tool to its executable (a path, a launch plan's ``{executable, ...}`` entry, or null: it
  resolves to nothing); a required tool not listed is looked up on PATH by its short ID. An
  adapter with ``launch {kind: runSelectedRuntime, tool}`` has no ``executable``: it starts
  with what ``tool`` resolves to at each ``debug/start``. A plugin never configured has none
  of them. Answers ``{pluginId}``.
- ``run.list {}`` -> ``[{runId, pluginId, sessionId, label, pid, state, exit?, rerun?}]``;
  ``rerun {function, data}`` is what "Run again" invokes (``lsp.functionRequest`` with the
  current context); a run without it cannot be rerun.
- ``run.stop {runId}`` -> the run as listed, once ended (the Run window's Stop button).
- ``run.destroy {runId}`` forgets an ended run; ``run.waitEvents`` / ``run.pollEvents
  {runId}`` drain its events (``runStarted {label, pid}``, ``runOutput {text}``,
  ``runExited {exitCode | signal}``).

Runs live in the Core's nursery: a backend that exits leaves its runs running, and closing
the Core ends them.
"""

from __future__ import annotations

import os
import re
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol, cast

import trio

from protocol import CoreError, invalid_field, path_problem

from .._api._run import MAX_REQUIRED_TOOLS
from .._core._service import declared
from ._run_state import DebugAdapter, RunTools
from ._runs import Run, RunTable
from ._state import HostRefusal, is_plugin_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from protocol import JSONObject, JSONValue

    from .._api._run import RunConfigurePlugin, RunDebugAdapter, RunList, RunRef
    from .._core._service import CommandHandler, ServiceContext
    from .._dap._service import DebugService
    from .._session._events import EventBudget
    from ._run_state import DebugStart, RunStart

__all__ = ("DID_EXIT", "MAX_REQUIRED_TOOLS", "RunOwner", "RunService", "open_run_service")

DID_EXIT: Final = "lithe/host/run/didExit"
_TOOL_ID: Final = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}(:[A-Za-z0-9][A-Za-z0-9._-]{0,127})?"
)
_LOCAL_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: Stands for the executable a runSelectedRuntime tool resolves to when a session starts,
#: so the rest of the adapter is checked as debug.createSession checks it.
_RUNTIME_PLACEHOLDER: Final = "/runSelectedRuntime"


class RunOwner(Protocol):
    """The backend session that starts a run (a plugin runtime)."""

    @property
    def session_id(self) -> str: ...

    @property
    def plugin_id(self) -> str: ...

    @property
    def generation(self) -> int: ...

    @property
    def negotiated(self) -> bool: ...

    def notify_backend(self, method: str, params: JSONObject) -> None: ...


@dataclass(frozen=True)
class PluginRuns:
    """``run.configurePlugin`` of one plugin."""

    tools: RunTools = field(default_factory=RunTools)
    adapters: Mapping[str, DebugAdapter] = field(default_factory=dict)


def parse_plugin_runs(payload: RunConfigurePlugin) -> tuple[str, PluginRuns]:
    """Check what the ``run.configurePlugin`` declaration can not say: the plugin and tool
    IDs' forms, absolute paths, tools among ``requiresTools``, the adapters.

    Raises:
        CoreError: ``invalid_request`` naming the first bad field.
    """
    plugin_id = payload.plugin_id
    if not is_plugin_id(plugin_id):
        raise invalid_field("pluginId", "pluginId is not a plugin ID")
    package_root = payload.package_root
    if package_root is not None and not os.path.isabs(package_root):
        raise invalid_field("packageRoot", "packageRoot must be an absolute path")
    required = payload.requires_tools or []
    if not all(_TOOL_ID.fullmatch(t) for t in required) or len(set(required)) != len(required):
        raise invalid_field(
            "requiresTools", f"requiresTools is at most {MAX_REQUIRED_TOOLS} distinct tool IDs"
        )
    resolved: dict[str, str | None] = {}
    for tool, entry in (payload.tools or {}).items():
        if tool not in required:
            raise invalid_field(f"tools.{tool}", f"{tool} is not in requiresTools")
        if isinstance(entry, dict):
            # A launch plan's tools entry {executable, version?, home?, launch?}: a run
            # starts the executable itself, with the run's own arguments.
            entry = entry.get("executable")
        if entry is not None and (
            not isinstance(entry, str)
            or not os.path.isabs(entry)
            or path_problem(entry, "tool") is not None
        ):
            raise invalid_field(f"tools.{tool}", f"tools.{tool} must name an absolute path")
        resolved[tool] = entry
    run_tools = RunTools(frozenset(required), resolved, package_root)
    adapters = _parse_adapters(payload.debug_adapters or [], run_tools)
    return plugin_id, PluginRuns(run_tools, adapters)


def _runtime_tool(entry: RunDebugAdapter, where: str, tools: RunTools) -> str | None:
    """``launch {kind: runSelectedRuntime, tool}``: the adapter starts with the executable the
    user's runtime selection resolves for ``tool`` (the plugin contract "Debug adapters")."""
    if entry.launch is None:
        return None
    tool = entry.launch.tool
    if tool not in tools.required:
        raise CoreError(
            "plugin.runtime.undeclared",
            f"{where}.launch.tool: {tool!r} is not in the plugin's requiresTools",
            {"field": f"{where}.launch.tool"},
        )
    adapter = entry.adapter
    if "executable" in adapter or adapter.get("transport") == "tcpLanguageServer":
        raise invalid_field(
            f"{where}.adapter",
            "an adapter started by runSelectedRuntime has no executable of its own and is "
            "not tcpLanguageServer",
        )
    return tool


def _parse_adapters(value: list[RunDebugAdapter], tools: RunTools) -> dict[str, DebugAdapter]:
    from .._dap._service import parse_adapter  # the debug service's own adapter check

    adapters: dict[str, DebugAdapter] = {}
    for index, entry in enumerate(value):
        where = f"debugAdapters[{index}]"
        local_id = entry.id
        if not _LOCAL_ID.fullmatch(local_id):
            raise invalid_field(f"{where}.id", "id is a plugin-local adapter ID")
        if local_id in adapters:
            raise invalid_field(f"{where}.id", f"the adapter {local_id} is declared twice")
        requests = ["launch"] if entry.requests is None else entry.requests
        if not requests:
            raise invalid_field(f"{where}.requests", "requests holds launch and/or attach")
        runtime_tool = _runtime_tool(entry, where, tools)
        adapter: JSONObject = entry.adapter
        if runtime_tool is not None:
            adapter = {**adapter, "executable": _RUNTIME_PLACEHOLDER}
        try:
            parse_adapter(adapter)
        except CoreError as exc:
            raise invalid_field(f"{where}.adapter", exc.message) from None
        configurations = entry.configurations or {}
        undeclared = sorted(set(configurations) - set(requests))
        if undeclared:
            # "A configuration for an undeclared request is refused."
            raise invalid_field(
                f"{where}.configurations.{undeclared[0]}", f"{undeclared[0]} is not served"
            )
        adapters[local_id] = DebugAdapter(
            local_id,
            frozenset(requests),
            entry.adapter,
            entry.adapter_id or local_id,
            dict(configurations),
            runtime_tool,
        )
    return adapters


class RunService:
    """Run sessions of plugin backends, and the debug sessions they start."""

    def __init__(
        self, nursery: trio.Nursery, max_events: int, event_budget: EventBudget | None = None
    ) -> None:
        self.table = RunTable(nursery, self._exited, max_events, event_budget)
        self._plugins: dict[str, PluginRuns] = {}
        #: Debug sessions started by debug/start: sessionId -> plugin ID.
        self._debug_owners: dict[str, str] = {}

    def commands(self) -> Mapping[str, CommandHandler]:
        return {
            "run.configurePlugin": self._configure,
            "run.list": self._list,
            "run.stop": self._stop,
            "run.destroy": self._destroy,
            **self.table.runs.event_commands("run"),
        }

    def plugin(self, plugin_id: str) -> PluginRuns:
        """What ``run.configurePlugin`` said of ``plugin_id`` (nothing when never called)."""
        return self._plugins.get(plugin_id, PluginRuns())

    async def aclose(self) -> None:
        """End every run (the Core closing)."""
        await self.table.aclose()

    # -- for the host handlers -----------------------------------------------------------

    async def start(self, owner: RunOwner, plan: RunStart) -> Run:
        """Start a run for ``owner``'s running backend process.

        Raises:
            HostRefusal: see :meth:`RunTable.start`.
        """
        return await self.table.start(
            plan,
            plugin_id=owner.plugin_id,
            session_id=owner.session_id,
            generation=owner.generation,
            owner=owner,
        )

    async def stop(
        self, plugin_id: str, kind: str, target: str, debug: DebugService | None
    ) -> None:
        """``run/stop``: stop a run or a debug session the plugin started; ended ones too.

        Raises:
            HostRefusal: ``plugin.host.notFound`` for an ID the plugin did not start (or
                that was forgotten).
        """
        if kind == "runID":
            run = self.table.get(target)
            if run is None or run.plugin_id != plugin_id:
                raise HostRefusal(-32016, "plugin.host.notFound", f"no run {target} of yours")
            await self.table.stop(run)
            return
        if self._debug_owners.get(target) != plugin_id or debug is None:
            raise HostRefusal(-32016, "plugin.host.notFound", f"no debug session {target} of yours")
        session = debug.sessions.get(target)
        if session is not None:
            with trio.CancelScope(shield=True):
                # The stop goes on when the backend cancels the request: cancelling is
                # stopping, and a half-stopped adapter helps nobody.
                await session.stop()

    async def start_debug(
        self, plugin_id: str, plan: DebugStart, root: str, debug: DebugService
    ) -> str:
        """``debug/start``: a debug session on the plugin's adapter, launched or attached.

        Raises:
            HostRefusal: ``plugin.host.failed`` with ``details.code`` the Core code when the
                adapter cannot start or refuses the request (nothing is left).
        """
        try:
            session_id = await debug.start_session(
                adapter=plan.adapter.adapter,
                adapter_id=plan.adapter.adapter_id,
                root_path=root,
                request=plan.request,
                configuration=plan.configuration,
            )
        except CoreError as exc:
            raise HostRefusal(
                -32603,
                "plugin.host.failed",
                f"the debug session could not start: {exc.message}",
                {"code": exc.code},
            ) from None
        # Sessions the client destroyed are forgotten here too, so the map stays bounded by
        # the debug service's own session bound.
        for known in [k for k in self._debug_owners if k not in debug.sessions]:
            del self._debug_owners[known]
        self._debug_owners[session_id] = plugin_id
        return session_id

    async def _exited(self, run: Run) -> None:
        """Only the backend process that started the run hears of its end, once."""
        owner = cast("RunOwner | None", run.owner)
        run.owner = None  # the run no longer keeps the session alive
        if owner is None or owner.generation != run.generation or not owner.negotiated:
            # The backend that started it is gone (or was replaced): it is not told, and a
            # later backend process never saw the run begin.
            return
        owner.notify_backend(DID_EXIT, {"runID": run.run_id, **(run.exit or {})})

    # -- commands ------------------------------------------------------------------------

    @declared
    async def _configure(self, payload: RunConfigurePlugin) -> JSONValue:
        plugin_id, runs = parse_plugin_runs(payload)
        self._plugins[plugin_id] = runs
        return {"pluginId": plugin_id}

    @declared
    async def _list(self, payload: RunList) -> JSONValue:
        return [*self.table.describe()]

    @declared
    async def _stop(self, payload: RunRef) -> JSONValue:
        run = self.table.runs.find(payload.run_id)
        await self.table.stop(run)
        return run.describe()

    @declared
    async def _destroy(self, payload: RunRef) -> JSONValue:
        run = self.table.runs.find(payload.run_id)
        if not run.ended.is_set():
            raise CoreError(
                "invalid_request", f"run {run.run_id} is running; stop it first", {"field": "runId"}
            )
        self.table.forget(run)
        return {"runId": run.run_id, "destroyed": True}


@asynccontextmanager
async def open_run_service(context: ServiceContext) -> AsyncIterator[RunService]:
    """The run service of a Core; closing it ends every run (shielded, bounded)."""
    service = RunService(context.nursery, context.max_events, context.event_budget)
    try:
        yield service
    finally:
        with trio.CancelScope(shield=True):
            await service.aclose()
