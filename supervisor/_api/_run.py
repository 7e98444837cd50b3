"""Run sessions of plugin backends (the plugin contract "Run and debug sessions"): what the
embedding host tells the supervisor of a plugin, and how it presents the runs backends start
with ``lithe/host/run/start``."""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeAlias

import msgspec

from ._base import (
    Event,
    JsonObject,
    JsonValue,
    NonEmpty,
    Ordered,
    Path,
    Payload,
    Result,
    WaitMilliseconds,
)

__all__ = ("COMMANDS", "EVENTS", "MAX_DEBUG_ADAPTERS", "MAX_REQUIRED_TOOLS", "ORDER")

_RunId = Annotated[str, msgspec.Meta(min_length=1)]
#: Tool references: requiresTools holds at most 32 tool-definition IDs.
MAX_REQUIRED_TOOLS: Final = 32
#: Ours: a plugin declares at most this many debug adapters.
MAX_DEBUG_ADAPTERS: Final = 32
_ToolIds = Annotated[list[NonEmpty], msgspec.Meta(max_length=MAX_REQUIRED_TOOLS)]


class RunSelectedRuntime(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``{kind: runSelectedRuntime, tool}``: start the adapter with the executable the
    user's runtime selection (``tools``) resolves for ``tool``, one of ``requiresTools``
    (else ``plugin.runtime.undeclared``); resolved at each ``debug/start``.

    Attributes:
        kind: Always ``runSelectedRuntime``.
        tool: The tool (one of the plugin's ``requiresTools``) whose selected executable starts
            the adapter.
    """

    kind: Literal["runSelectedRuntime"]
    tool: NonEmpty


class RunDebugAdapter(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One debug adapter the plugin declares: ``requests`` it serves (launch, attach), the
    adapter as ``debug.createSession`` takes it (without ``executable`` when ``launch``
    says runSelectedRuntime), and default configurations by request (checked by the
    command).

    Attributes:
        id: The adapter's id within the plugin.
        adapter_id: DAP ``adapterID`` (default: ``id``).
        requests: The requests it serves: ``launch``, ``attach`` (default both).
        adapter: How to start it (as ``debug.createSession``'s ``adapter``).
        configurations: Named launch configurations it offers.
        launch: Start it with the executable the user's runtime selection resolves.
    """

    id: NonEmpty
    adapter_id: NonEmpty | None = msgspec.field(default=None, name="adapterID")
    requests: list[Literal["launch", "attach"]] | None = None
    adapter: JsonObject
    configurations: dict[str, JsonObject] | None = None
    launch: RunSelectedRuntime | None = None


class RunConfigurePlugin(Payload, kw_only=True):
    """``run.configurePlugin``: what the host knows of one installed plugin for its runs
    and debug sessions.

    Attributes:
        plugin_id: The plugin.
        package_root: Its package directory (absolute).
        requires_tools: The manifest's ``requiresTools`` (at most 32 distinct tool IDs).
        tools: A required tool's executable: an absolute path, a launch plan's
            ``{executable, ...}`` entry, or null (resolves to nothing); one not listed is
            looked up on PATH by its short ID.
        debug_adapters: The plugin's own debug adapters (at most 32), for ``debug/start``.
    """

    plugin_id: NonEmpty
    package_root: Path | None = None
    requires_tools: (
        Annotated[list[NonEmpty], msgspec.Meta(max_length=MAX_REQUIRED_TOOLS)] | None
    ) = None
    tools: dict[str, JsonValue] | None = None
    debug_adapters: (
        Annotated[list[RunDebugAdapter], msgspec.Meta(max_length=MAX_DEBUG_ADAPTERS)] | None
    ) = None


class RunConfigurePluginResult(Result, kw_only=True):
    """``run.configurePlugin``: the plugin's run configuration is in place (it replaces
    what an earlier call said of that plugin)."""

    plugin_id: str


class RunList(Payload, kw_only=True):
    """``run.list {}``."""


class RunRef(Payload, kw_only=True):
    """A run by its ``runId``: ``run.stop`` (end its process tree, bounded, and answer the
    ended run's info; at once for an ended run), ``run.destroy`` (forget an ended run;
    ``invalid_request`` while it runs) and ``run.pollEvents`` (drain its events without
    waiting)."""

    run_id: _RunId


class RunWaitEvents(Payload, kw_only=True):
    """``run.waitEvents``: wait until the run has events, or the timeout passes."""

    run_id: _RunId
    timeout_milliseconds: WaitMilliseconds | None = None


class RunRerun(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What "Run again" invokes: ``lsp.functionRequest`` of ``function`` with ``data``.

    Attributes:
        function: The plugin function to call.
        data: Its params, passed through.
    """

    function: str
    data: JsonValue = None


class RunExit(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """How a run ended: ``exitCode``, or ``signal`` for a killed process (neither when it
    could not be reaped)."""

    exit_code: int | None = None
    signal: int | None = None


class RunInfo(Result, kw_only=True):
    """A run as listed.

    Attributes:
        label: The run's label, as the plugin named it.
        exit: How its process ended, once ``ended``.
        rerun: What "Run again" invokes, when the plugin said.
    """

    run_id: str
    plugin_id: str
    session_id: str
    label: str
    pid: int | None
    state: Literal["running", "ended"]
    exit: RunExit | None = None
    rerun: RunRerun | None = None


class RunDestroyResult(Result, kw_only=True):
    """``run.destroy``: the ended run is forgotten.

    Attributes:
        destroyed: Always true: an unknown run is ``not_found`` and a running one is
            ``invalid_request`` (stop it first).
    """

    run_id: str
    destroyed: bool


class _RunEvent(Event, kw_only=True):
    run_id: str


class RunStarted(_RunEvent, tag="runStarted", kw_only=True):
    """A plugin's run started its process (``lithe/host/run/start``).

    Attributes:
        label: The run's label, as the plugin named it.
    """

    label: str
    pid: int | None


class RunOutput(_RunEvent, tag="runOutput", kw_only=True):
    """The run's process wrote output. Informational.

    Attributes:
        text: The output, decoded as UTF-8 (invalid bytes replaced).
    """

    text: str


class RunExited(_RunEvent, tag="runExited", kw_only=True):
    """The run's process ended: its exit code or signal; the run's last event."""

    exit_code: int | None = None
    signal: int | None = None


RunEvent: TypeAlias = RunStarted | RunOutput | RunExited


class RunEvents(Result, kw_only=True):
    """``run.waitEvents`` / ``run.pollEvents``."""

    events: list[RunEvent]
    gap: bool


#: The order rule (:class:`~._base.Ordered`): stopping and destroying one run are ordered.
ORDER = {
    "run.stop": Ordered("run", "runId", ending=True),
    "run.destroy": Ordered("run", "runId", ending=True),
}

COMMANDS = {
    "run.configurePlugin": (RunConfigurePlugin, RunConfigurePluginResult),
    "run.list": (RunList, list[RunInfo]),
    "run.stop": (RunRef, RunInfo),
    "run.destroy": (RunRef, RunDestroyResult),
    "run.waitEvents": (RunWaitEvents, RunEvents),
    "run.pollEvents": (RunRef, RunEvents),
}
EVENTS = {"run": RunEvent}
#: What ends each event stream of this module (docs/commands.md "Events").
STREAMS = {
    "run": "``runExited`` is a run's last event; after ``run.destroy`` a wait answers"
    " ``not_found``.",
}
