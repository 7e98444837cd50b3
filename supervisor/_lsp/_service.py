"""The ``lsp.*`` commands: language-server sessions as a Core service.

Contract (the Core API contract ``lsp.*``; the plugin contract "Plugin-owned sessions", "Language
server host methods", "Workspace configuration"): every command validates its payload before
it acts (``invalid_request``; bad input starts nothing); an unknown ``sessionId`` is
``not_found``. Sessions run in a nursery the service owns; closing the service (the Core
closing) stops every session with its polite sequence, concurrently, and only then returns.

Commands: ``lsp.startServer``, ``lsp.stopServer``, ``lsp.restartServer``,
``lsp.destroyServer``, ``lsp.snapshot``, ``lsp.syncDocument``, ``lsp.closeDocument``,
``lsp.workspaceFilesChanged``, ``lsp.clearDiagnostics``, ``lsp.updateWorkspaceConfiguration``,
``lsp.request``, ``lsp.cancelOperation``, ``lsp.waitEvents``, ``lsp.pollEvents``,
``lsp.pluginServerRequest``, ``lsp.pluginServerNotify``; for plugin-owned sessions
(the plugin contract "Plugin functions"): ``lsp.functionRequest``, ``lsp.hostResponse``,
``lsp.hostNotify``; for server requests the host answers itself (``hostRequests``):
``lsp.serverRequestResponse``; the cross-plugin relay's snapshot (the plugin contract "Cross-plugin
calls"): ``lsp.configureFunctionRelay``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Final, TypeAlias

import msgspec
import trio

from protocol import MAX_ECHO_BYTES, CoreError, cut_utf8, echo, lookup_error

from .._api._base import MAX_COUNT, decode_payload
from .._api._lsp import Gate as GateDeclaration, LspStartServer
from .._api._plugin import LspPluginServerNotify, LspPluginServerRequest
from .._core._context import current_operation_id
from .._core._service import declared
from .._endpoint import JSONRPCError
from .._plugin._host import HostEnvironment
from .._plugin._launch import (
    LaunchPlan,
    call_launch_function,
    decode_resolved_launch,
    parse_launch_plan,
    prepare_directories,
    remove_temporary_directory,
    resolve_launch,
)
from .._plugin._relay import FunctionRelay, ProviderHandle
from .._plugin._state import (
    NOTIFICATION_BYTES,
    HostRefusal,
    check_function_request,
    check_host_services,
    function_timeout_ms,
)
from .._plugin._workspace import context_expired
from .._process._tree import open_process_tree
from .._session._events import EventBudget, EventQueue
from .._session._order import effect_taken, withdrawn
from .._session._registry import SessionRegistry
from ._client import check_client_policy
from ._session import (
    DEFAULT_REQUEST_TIMEOUT_MS,
    LspServerSpec,
    LspSession,
    SessionPolicy,
    dumps,
    launch_failure_fact,
)
from ._state import Gate, LspState, RestartBudget
from ._workspace_state import (
    Retention,
    WorkspaceState,
    is_state_name,
    prepare,
    sweep,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

    from protocol import JSONObject, JSONValue

    from .._api._lsp import (
        LspCancelOperation,
        LspCloseDocument,
        LspNotify,
        LspRequest,
        LspServerRequestResponse,
        LspSessionRef,
        LspSnapshot,
        LspSyncDocument,
        LspUpdateWorkspaceConfiguration,
        LspWorkspaceFilesChanged,
        RestartBudget as RestartBudgetDeclaration,
        SessionPolicy as SessionPolicyDeclaration,
        WorkspaceStateSpec,
    )
    from .._api._plugin import (
        LspConfigureFunctionRelay,
        LspFunctionRequest,
        LspHostNotify,
        LspHostResponse,
    )
    from .._core._service import CommandHandler, ServiceContext
    from .._session._order import Target

    _SessionPayload = (
        LspSessionRef
        | LspSnapshot
        | LspSyncDocument
        | LspCloseDocument
        | LspWorkspaceFilesChanged
        | LspUpdateWorkspaceConfiguration
        | LspRequest
        | LspNotify
        | LspCancelOperation
        | LspServerRequestResponse
        | LspFunctionRequest
        | LspHostNotify
        | LspHostResponse
    )
    from .._process._tree import ProcessTree

__all__ = ("LspService", "open_lsp_service", "parse_launch_start", "parse_start")

logger = logging.getLogger("supervisor.lsp")

#: the plugin contract "Language server host methods": the grant of the methods and of the
#: notifications to the backend.
LANGUAGE_SERVER_GRANT: Final = "lithe/host/languageServer/request"
DID_CHANGE_STATE: Final = "lithe/host/languageServer/didChangeState"
DID_RECEIVE_NOTIFICATION: Final = "lithe/host/languageServer/didReceiveNotification"

#: the plugin contract: at most 8 gates (the declaration's bound, ``LspStartServer.gates``),
#: also for the gates a backend-resolved launch answers with.
MAX_GATES: Final = 8
_RESOLVED_GATES: TypeAlias = Annotated[list[GateDeclaration], msgspec.Meta(max_length=MAX_GATES)]
#: Methods the host sends itself; a policy can't hand them to a plugin backend.
HOST_METHODS: Final = frozenset(
    {
        "initialize",
        "initialized",
        "shutdown",
        "exit",
        "textDocument/didOpen",
        "textDocument/didChange",
        "textDocument/didClose",
        "textDocument/didSave",
        "textDocument/willSave",
        "textDocument/willSaveWaitUntil",
        "workspace/didChangeWorkspaceFolders",
    }
)
#: Notifications ``lsp.notify`` refuses, with the command that sends them.
_OWNED_NOTIFICATIONS: Final = {
    "initialized": "lsp.startServer",
    "exit": "lsp.stopServer",
    "textDocument/didOpen": "lsp.syncDocument",
    "textDocument/didChange": "lsp.syncDocument",
    "textDocument/didClose": "lsp.closeDocument",
    "workspace/didChangeConfiguration": "lsp.updateWorkspaceConfiguration",
    "$/cancelRequest": "lsp.cancelOperation",
}
#: the plugin contract "Plugin-owned sessions": a policy name is at most 256 bytes (UTF-8).
MAX_POLICY_NAME_BYTES: Final = 256
_EXECUTE_COMMAND: Final = "workspace/executeCommand"
#: The reference's function-result bound, used for plugin requests' results (bytes).
MAX_PLUGIN_RESULT_BYTES: Final = 1024 * 1024


def _invalid(message: str, field: str | None = None) -> CoreError:
    """``invalid_request``; ``field`` names the payload field at fault in ``details.field``."""
    return CoreError("invalid_request", message, None if field is None else {"field": field})


def _str_list(value: list[str] | None, name: str) -> list[str]:
    """A declared list of non-empty strings, each once (its length is the declaration's)."""
    items = list(value or ())
    if len(set(items)) != len(items):
        raise _invalid(f"{name} has duplicate entries", name)
    return items


def _policy_names(value: list[str] | None, name: str) -> list[str]:
    """A session-policy list: names of at most 256 bytes, no whitespace or control character."""
    items = _str_list(value, name)
    for index, item in enumerate(items):
        # str.isspace/isprintable cover Unicode whitespace and control/format characters.
        if len(item.encode("utf-8", "surrogatepass")) > MAX_POLICY_NAME_BYTES:
            raise _invalid(f"{name}[{index}] is longer than {MAX_POLICY_NAME_BYTES} bytes", name)
        if any(char.isspace() or not char.isprintable() for char in item):
            raise _invalid(f"{name}[{index}] may not hold whitespace or control characters", name)
    return items


def _parse_gates(value: list[GateDeclaration] | None) -> tuple[Gate, ...]:
    gates: list[Gate] = []
    for index, item in enumerate(value or ()):
        if any(gate.id == item.id for gate in gates):
            raise _invalid(f"gates[{index}].id {item.id!r} is not unique", f"gates[{index}].id")
        gates.append(Gate(item.id, item.method, item.match or {}))
    return tuple(gates)


def _parse_policy(
    value: SessionPolicyDeclaration | None,
) -> tuple[SessionPolicy, tuple[Gate, ...], bool]:
    """The policy, its gates, and whether the server may run for a remote workspace."""
    if value is None:
        return SessionPolicy(), (), True
    lists = {
        "requestMethods": _policy_names(value.request_methods, "sessionPolicy.requestMethods"),
        "commands": _policy_names(value.commands, "sessionPolicy.commands"),
        "serializedCommands": _policy_names(
            value.serialized_commands, "sessionPolicy.serializedCommands"
        ),
        "forwardNotifications": _policy_names(
            value.forward_notifications, "sessionPolicy.forwardNotifications"
        ),
    }
    # the plugin contract: commands are declared exactly when requestMethods lists
    # workspace/executeCommand, so neither can grant what the other does not.
    if (_EXECUTE_COMMAND in lists["requestMethods"]) != bool(lists["commands"]):
        raise _invalid(
            f"sessionPolicy.commands must be declared exactly when requestMethods lists "
            f"{_EXECUTE_COMMAND}",
            "sessionPolicy.commands",
        )
    for name in ("requestMethods", "forwardNotifications"):
        refused = [m for m in lists[name] if m in HOST_METHODS or m.startswith("$/")]
        if refused:
            raise _invalid(f"sessionPolicy.{name} may not name the host's method {refused[0]}")
    if not set(lists["serializedCommands"]) <= set(lists["commands"]):
        raise _invalid(
            "sessionPolicy.serializedCommands must be a subset of commands",
            "sessionPolicy.serializedCommands",
        )
    policy = SessionPolicy(
        request_methods=frozenset(lists["requestMethods"]),
        commands=frozenset(lists["commands"]),
        serialized_commands=frozenset(lists["serializedCommands"]),
        forward_notifications=frozenset(lists["forwardNotifications"]),
    )
    return policy, _parse_gates(value.gates), value.remote != "unsupported"


def _parse_workspace_state(value: WorkspaceStateSpec | None) -> WorkspaceState | None:
    """``workspaceState {root, name, retention?: {maxEntries, maxAgeDays}, activeNames?}``."""
    if value is None:
        return None
    field = "workspaceState"
    root = value.root
    if not os.path.isabs(root) or os.path.normpath(root) == "/":
        raise _invalid("workspaceState.root must be an absolute directory other than /", field)
    if not is_state_name(value.name):
        raise _invalid("workspaceState.name must be a single path component", field)
    active = _str_list(value.active_names, "workspaceState.activeNames")
    retention = value.retention
    return WorkspaceState(
        os.path.normpath(root),
        value.name,
        None if retention is None else Retention(retention.max_entries, retention.max_age_days),
        frozenset(active),
    )


def _parse_restart(value: bool | RestartBudgetDeclaration | None) -> tuple[bool, RestartBudget]:
    if value is None or isinstance(value, bool):
        return bool(value), RestartBudget()
    budget = RestartBudget()
    return True, RestartBudget(
        max_crashes=value.max_crashes or budget.max_crashes,
        window_ms=value.window_milliseconds or budget.window_ms,
        backoff_initial_ms=value.initial_backoff_milliseconds or budget.backoff_initial_ms,
        backoff_max_ms=value.max_backoff_milliseconds or budget.backoff_max_ms,
    )


def _parse_contribution(value: JSONValue) -> tuple[str, JSONObject] | None:
    """``contribution {pluginID, context: {contextID, generation}}``: whose server this is
    and the workspace context it runs for (the plugin contract "Language server host
    methods": a backend names a server by context and serverID)."""
    if value is None:
        return None
    message = "contribution must be {pluginID, context: {contextID, generation}}"
    if not isinstance(value, dict) or set(value) != {"pluginID", "context"}:
        raise _invalid(message, "contribution")
    plugin_id = value.get("pluginID")
    context = value.get("context")
    if (
        not isinstance(plugin_id, str)
        or not plugin_id
        or not isinstance(context, dict)
        or set(context) != {"contextID", "generation"}
        or not isinstance(context.get("contextID"), str)
        or not context.get("contextID")
        or isinstance(context.get("generation"), bool)
        or not isinstance(context.get("generation"), int)
        or not 1 <= context["generation"] <= MAX_COUNT  # type: ignore[operator]
    ):
        raise _invalid(message, "contribution")
    return plugin_id, dict(context)


def _declared_start(payload: LspStartServer | JSONObject) -> LspStartServer:
    """``payload`` as its declaration (a JSON object is decoded as the Core decodes it)."""
    if isinstance(payload, dict):
        start: LspStartServer = decode_payload("lsp.startServer", LspStartServer, payload)
        return start
    return payload


def parse_start(payload: LspStartServer | JSONObject) -> LspServerSpec:
    """Check an ``lsp.startServer`` payload beyond its declaration; nothing is started.

    Args:
        payload: The decoded declaration (a JSON object is decoded first, as the Core does).

    Raises:
        CoreError: ``invalid_request`` naming the first bad field; ``not_supported`` for a
            remote workspace of a server whose policy says ``remote: "unsupported"``.
    """
    start = _declared_start(payload)
    executable = start.executable
    if executable is None:
        raise _invalid("lsp.startServer: executable is required", "executable")
    cwd = start.working_directory
    if cwd is None:
        raise _invalid("lsp.startServer: workingDirectory is required", "workingDirectory")
    if not os.path.isabs(cwd):
        raise _invalid("workingDirectory must be an absolute path", "workingDirectory")
    # Optional in the declaration, so optional here: the workspace root defaults to the
    # working directory (LSP initialize's rootUri is a file URI).
    root_uri = start.root_uri or pathlib.Path(cwd).as_uri()
    policy, policy_gates, remote_supported = _parse_policy(start.session_policy)
    if start.workspace_authority == "remote" and not remote_supported:
        # the plugin contract "Plugin-owned sessions": a server with remote: "unsupported"
        # is not started for a remote workspace.
        raise CoreError(
            "not_supported",
            "This language server does not support a remote workspace",
            {"field": "sessionPolicy.remote"},
        )
    host_services: frozenset[str] = frozenset()
    if start.host_services is not None:
        # Host services: hostServices needs pluginId and names only services Core defines.
        if start.plugin_id is None:
            raise _invalid("hostServices needs pluginId", "hostServices")
        host_services = check_host_services(start.host_services)
    restart, budget = _parse_restart(start.restart)
    spec = LspServerSpec(
        server_id=start.server_id,
        argv=[executable, *(start.arguments or ())],
        env=start.environment,
        cwd=cwd,
        root_uri=root_uri,
        initialization_options=start.initialization_options,
        workspace_configuration=start.workspace_configuration,
        gates=_parse_gates(start.gates) or policy_gates,
        policy=policy,
        restart=restart,
        budget=budget,
        plugin_id=start.plugin_id,
        host_services=host_services,
        workspace_state=_parse_workspace_state(start.workspace_state),
        client=check_client_policy(start.client_capabilities, start.host_requests),
        contribution=_parse_contribution(start.contribution),
    )
    # The bounds are the declaration's; absent means the session's default.
    return dataclasses.replace(
        spec,
        initialize_timeout_ms=start.initialize_timeout_milliseconds or spec.initialize_timeout_ms,
        request_timeout_ms=start.request_timeout_milliseconds or spec.request_timeout_ms,
        shutdown_timeout_ms=start.shutdown_timeout_milliseconds or spec.shutdown_timeout_ms,
        service_ready_idle_ms=start.service_ready_idle_timeout_milliseconds
        or spec.service_ready_idle_ms,
        service_ready_absolute_ms=start.service_ready_absolute_timeout_milliseconds
        or spec.service_ready_absolute_ms,
    )


def parse_launch_start(
    payload: LspStartServer | JSONObject,
) -> tuple[LaunchPlan | None, LspStartServer]:
    """Split an ``lsp.startServer`` payload with a ``launchPlan`` (pure; nothing started).

    the plugin contract "Process start": the plan gives the executable, its arguments and
    ``initializationOptions`` (as launch templates), so the payload must not give them too. A
    plugin backend's plan (``launchPlan.backend: true``, with ``pluginId``) starts in its
    state directory, which is also its root (``${stateDir}``; the plugin contract "Plugin
    backend"), so ``workingDirectory`` and ``rootUri`` are not given either.

    Returns:
        ``(plan, payload)``: the parsed plan (None without ``launchPlan``) and the payload
        for :func:`parse_start`, its executable a placeholder that :func:`resolve_launch`
        replaces.

    Raises:
        CoreError: ``invalid_request`` for a field the plan owns, a backend plan without
            ``pluginId``; the codes of :func:`parse_launch_plan`.
    """
    start = _declared_start(payload)
    if start.launch_plan is None:
        return None, start
    for name, given in (
        ("executable", start.executable),
        ("arguments", start.arguments),
        ("initializationOptions", start.initialization_options),
    ):
        if given is not None:
            raise _invalid(f"{name} comes from launchPlan; give one of them", name)
    plan = parse_launch_plan(start.launch_plan)
    # the plugin contract "Launch templates": the host uses the plan's owner, not an identity
    # it read elsewhere, for the session it starts.
    contribution = start.contribution
    for name, claimed in (
        ("pluginId", start.plugin_id),
        ("contribution", contribution.get("pluginID") if contribution is not None else None),
    ):
        if plan.owner is not None and claimed is not None and claimed != plan.owner:
            raise _invalid(f"{name} is not the launch plan's owner {echo(plan.owner)}", name)
    rest = msgspec.structs.replace(start, launch_plan=None, executable=plan.plugin_dir)
    if plan.backend:
        if start.plugin_id is None:
            raise _invalid("a plugin backend's launchPlan needs pluginId", "pluginId")
        for name, given in (
            ("workingDirectory", start.working_directory),
            ("rootUri", start.root_uri),
        ):
            if given is not None:
                raise _invalid(
                    f"a plugin backend starts in its state directory; {name} is not given", name
                )
        rest = msgspec.structs.replace(
            rest,
            working_directory=plan.state_dir,
            root_uri=pathlib.Path(plan.state_dir).as_uri(),
        )
    return plan, rest


def _fact_owner(start: LspStartServer) -> str | None:
    """The plugin a start's facts belong to: its backend's ``pluginId``, else the plugin the
    server is a contribution of (``contribution.pluginID`` or ``launchPlan.owner.pluginID``)."""
    candidates: list[JSONValue] = [start.plugin_id]
    for value, key in ((start.contribution, "pluginID"), (start.launch_plan, "owner")):
        if value is not None:
            inner = value.get(key)
            candidates.append(inner.get("pluginID") if isinstance(inner, dict) else inner)
    return next((c for c in candidates if isinstance(c, str) and c), None)


def _events_of(session: LspSession) -> EventQueue:
    return session.events


def _plugin_error(code: str, message: str, details: JSONObject | None = None) -> CoreError:
    return CoreError(f"plugin.host.{code}", message, details)


class LspService:
    """The language-server sessions of one Core, and the ``lsp.*`` commands.

    Args:
        nursery: The nursery sessions run in (owned by :func:`open_lsp_service`).
        max_events: The bound of each session's event queue.
        owner_ended: :attr:`ServiceContext.owner_ended`: called with a plugin-owned
            session's id when its backend process ends, so the terminals it owns (created
            with ``owner: <sessionId>``) are disposed.
        withdraw: :attr:`ServiceContext.withdraw`: ``lsp.cancelOperation`` ends a request
            or function call still in its session's line with it.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        max_events: int,
        owner_ended: Callable[[str], Awaitable[None]] | None = None,
        host: HostEnvironment | None = None,
        event_budget: EventBudget | None = None,
        withdraw: Callable[[Target, str, str], bool] | None = None,
    ) -> None:
        self._nursery = nursery
        self._withdraw = withdraw
        self._event_budget = event_budget
        #: The Core's host services for plugin backends (None: all go to the client).
        self.host = host
        if host is not None:
            host.contexts.listen(self._contexts_changed)
        self._max_events = max_events
        self._owner_ended = owner_ended
        self._sessions: SessionRegistry[LspSession] = SessionRegistry(
            "lsp", "language-server session", "sessionId", _events_of
        )
        #: Cross-plugin calls between this service's plugin-owned sessions.
        self.relay = FunctionRelay(self._relay_provider)
        #: ``setStatus`` of contributed servers, by session id; the last reported state.
        self._statuses: dict[str, JSONObject] = {}
        self._server_states: dict[str, tuple[int, str]] = {}
        #: Plugins whose backend is being started (between the check and the registration).
        self._starting_plugins: set[str] = set()

    def commands(self) -> Mapping[str, CommandHandler]:
        return {
            "lsp.startServer": self._start,
            "lsp.stopServer": self._stop,
            "lsp.restartServer": self._restart,
            "lsp.destroyServer": self._destroy,
            "lsp.snapshot": self._snapshot,
            "lsp.syncDocument": self._sync,
            "lsp.closeDocument": self._close_document,
            "lsp.workspaceFilesChanged": self._files_changed,
            "lsp.clearDiagnostics": self._clear_diagnostics,
            "lsp.updateWorkspaceConfiguration": self._update_configuration,
            "lsp.request": self._request,
            "lsp.notify": self._notify,
            "lsp.cancelOperation": self._cancel,
            **self._sessions.event_commands("lsp"),
            "lsp.pluginServerRequest": self._plugin_request,
            "lsp.pluginServerNotify": self._plugin_notify,
            "lsp.functionRequest": self._function_request,
            "lsp.hostResponse": self._host_response,
            "lsp.serverRequestResponse": self._server_request_response,
            "lsp.hostNotify": self._host_notify,
            "lsp.configureFunctionRelay": self._configure_relay,
        }

    @property
    def sessions(self) -> Mapping[str, LspSession]:
        """The sessions by id (stopped and failed ones until destroyed)."""
        return self._sessions

    def _session(self, payload: _SessionPayload) -> LspSession:
        return self._sessions.find(payload.session_id)

    async def aclose(self) -> None:
        """Stop every session concurrently (the Core closing); idempotent, bounded.

        **Cancellation:** the Core calls it shielded; each stop is bounded by its session's
        shutdown, exit-wait, TERM-grace and kill-wait bounds.
        """
        await self.stop_all()

    async def stop_all(self) -> None:
        """Stop every session concurrently; returns when all have ended (bounded)."""
        async with trio.open_nursery() as nursery:
            for session in list(self._sessions.values()):
                nursery.start_soon(session.stop)

    # -- lifecycle -----------------------------------------------------------------------

    def _check_one_backend(self, plugin_id: str) -> None:
        """the plugin contract "Plugin backend": at most one backend process per plugin.

        A session of the plugin that has not ended (running, stopping, or failed and waiting
        to restart) holds the plugin's place; a stopped or finally failed one does not.
        """
        holder = next(
            (
                session.session_id
                for session in self._sessions.values()
                if session.plugin is not None
                and session.plugin.plugin_id == plugin_id
                and not session.ended
            ),
            None,
        )
        if holder is not None or plugin_id in self._starting_plugins:
            details: JSONObject = {"field": "pluginId"}
            if holder is not None:
                details["sessionId"] = holder
            raise CoreError(
                "busy", f"plugin {plugin_id} already has a backend session running", details
            )

    @declared
    async def _start(self, payload: LspStartServer) -> JSONValue:
        try:
            plan, start = parse_launch_start(payload)
        except CoreError as exc:
            owner = _fact_owner(payload)
            if owner is not None and exc.code != "invalid_request":
                launch_failure_fact(owner, exc, trio.current_time() * 1000)
            raise
        spec = parse_start(start)
        if spec.plugin_id is None:
            return await self._start_checked(spec, plan)
        self._check_one_backend(spec.plugin_id)
        self._starting_plugins.add(spec.plugin_id)
        try:
            return await self._start_checked(spec, plan)
        finally:
            self._starting_plugins.discard(spec.plugin_id)

    async def _start_checked(self, spec: LspServerSpec, plan: LaunchPlan | None) -> JSONValue:
        # The first process is started before we answer, so launch_failed is this
        # command's error and a refused start leaves no session behind.
        started_at_ms = trio.current_time() * 1000
        # the plugin contract "Backend-resolved launch": the scratch directory of this start,
        # removed when the start fails or the server ends.
        temporary_dir = plan.temporary_dir if plan is not None else None
        try:
            if plan is not None and plan.kind == "backend":
                plan, spec = await self._resolve_with_backend(plan, spec)
            if plan is not None:
                # The launch plan's directories, package checks, executable and probes:
                # after the payload was validated, before anything of the server starts.
                resolved = await resolve_launch(plan, env=spec.env)
                spec = dataclasses.replace(
                    spec,
                    argv=resolved.argv,
                    env={**(spec.env or {}), **resolved.env},
                    initialization_options=resolved.initialization_options,
                )
            state = spec.workspace_state
            if state is not None:
                try:
                    await prepare(state)
                except OSError as exc:
                    raise CoreError(
                        "launch_failed",
                        f"could not prepare the workspace state directory: {exc.strerror or exc}",
                        {"field": "workspaceState"},
                    ) from None
            tree = await open_process_tree(spec.argv, cwd=spec.cwd, env=spec.env)
        except BaseException as exc:
            if temporary_dir is not None:
                with trio.CancelScope(shield=True):
                    await remove_temporary_directory(temporary_dir)
            owner = spec.plugin_id or (spec.contribution[0] if spec.contribution else None)
            if isinstance(exc, CoreError) and owner is not None and exc.code != "invalid_request":
                launch_failure_fact(owner, exc, started_at_ms)
            raise
        session_id = self._sessions.new_id()
        session = LspSession(
            session_id,
            spec,
            EventQueue(self._max_events, budget=self._event_budget),
            # Stderr may fill at most a quarter of the queue: the rest stays for
            # diagnostics, requestCompleted and state changes.
            stderr_log_share=max(1, self._max_events // 4),
            owner_ended=self._owner_ended,
        )
        if session.plugin is not None:
            session.plugin.relay = self.relay
            session.plugin.host = self.host
        if spec.contribution is not None:
            session.observer = self._server_event
        await self._nursery.start(self._run_session, session, tree, temporary_dir)
        self._sessions.add(session_id, session)
        if state is not None and state.retention is not None:
            # "sweeps in the background after a start": the answer does not wait for it.
            self._nursery.start_soon(self._sweep_states, session, state)
        return {"sessionId": session_id}

    async def _resolve_with_backend(
        self, plan: LaunchPlan, spec: LspServerSpec
    ) -> tuple[LaunchPlan, LspServerSpec]:
        """A backend-resolved launch: the owner's backend answers, the answer is decoded.

        The directories exist before the call; the answer's workspace configuration and
        gates replace the payload's (its session policy carries the answer's gates).
        """
        assert plan.owner is not None
        provider = self._relay_provider(plan.owner)
        if provider is None:
            raise CoreError(
                "plugin.function.providerUnavailable",
                f"the backend of {plan.owner} is not running",
                {"field": "launchPlan.owner"},
            )
        await prepare_directories(plan)
        host = self.host
        if host is None or plan.context is None or host.contexts.revision == 0:
            # A host that declared no contexts keeps them to itself: passed on unchecked.
            answer = await call_launch_function(provider.endpoint, plan, spec.server_id)
        else:
            # An answer for a context that closed or changed meanwhile starts nothing;
            # closing it cancels the call.
            try:
                context = host.contexts.resolve(plan.context)
                with host.contexts.bound(context):
                    answer = await call_launch_function(provider.endpoint, plan, spec.server_id)
                if not host.contexts.is_current(context):
                    raise context_expired(f"the context {context.context_id} changed")
            except HostRefusal as refusal:
                raise CoreError(
                    refusal.code, refusal.message, {"field": "launchPlan.context"}
                ) from None
        decoded, config, raw_gates = decode_resolved_launch(
            plan, answer, tool_definitions=plan.tool_definitions
        )
        try:
            gates = (
                _parse_gates(decode_payload("gates", _RESOLVED_GATES, list(raw_gates)))
                if raw_gates
                else spec.gates
            )
        except CoreError as exc:
            raise CoreError(
                "plugin.launch.invalidResult", exc.message, {"field": "gates"}
            ) from None
        return decoded, dataclasses.replace(
            spec,
            gates=gates,
            workspace_configuration=spec.workspace_configuration if config is None else config,
        )

    def _contexts_changed(self, revision: int) -> None:
        for session in self._sessions.values():
            if session.plugin is not None:
                session.plugin.contexts_changed(revision)

    async def _sweep_states(self, session: LspSession, state: WorkspaceState) -> None:
        try:
            deleted = await sweep(state, time.time())
        except OSError as exc:
            logger.warning("workspace state sweep of %s failed: %s", session.session_id, exc)
            return
        if deleted:
            session.note_states_pruned(deleted)

    async def _run_session(
        self,
        session: LspSession,
        tree: ProcessTree,
        temporary_dir: str | None,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await session.run(tree, task_status=task_status)
        finally:
            if temporary_dir is not None:
                # the plugin contract "Backend-resolved launch": the scratch directory of a
                # start is removed when the server ends.
                with trio.CancelScope(shield=True):
                    await remove_temporary_directory(temporary_dir)

    @declared
    async def _stop(self, payload: LspSessionRef) -> JSONValue:
        return await self._session(payload).stop()

    @declared
    async def _restart(self, payload: LspSessionRef) -> JSONValue:
        session = self._session(payload)
        return {"generation": await session.restart()}

    @declared
    async def _destroy(self, payload: LspSessionRef) -> JSONValue:
        session = self._session(payload)
        if session.state not in (LspState.STOPPED, LspState.FAILED):
            raise _invalid(f"session {session.session_id} is {session.state.value}; stop it first")
        if not session.ended:
            # Failed and waiting to restart: end it without a new start.
            await session.stop()
        self._sessions.remove(session.session_id)
        self._statuses.pop(session.session_id, None)
        self._server_states.pop(session.session_id, None)
        return {"destroyed": True}

    @declared
    async def _snapshot(self, payload: LspSnapshot) -> JSONValue:
        session = self._session(payload)
        snapshot = session.snapshot(include_diagnostics=payload.include_diagnostics)
        if session.spec.contribution is not None:
            status = self._statuses.get(session.session_id)
            snapshot["pluginStatus"] = None if status is None else dict(status)
        return snapshot

    # -- language server host methods -------------------------------------------------------

    def host_server(self, plugin_id: str, context: JSONObject, server_id: str) -> LspSession:
        """The server ``serverID`` of ``plugin_id`` running for ``context``.

        the plugin contract "Language server host methods": a server is named by context and
        serverID (its languageID); the session is the one started with that ``contribution``.

        Raises:
            HostRefusal: -32026 ``foreignContribution`` when only another plugin has such a
                server in the context; -32022 ``languageServerUnavailable`` when the plugin
                has none running for this context (generation); -32010 ``permissionDenied``
                for a server that declares no session (neither requestMethods nor
                forwardNotifications).
        """
        candidates = [
            session
            for session in self._sessions.values()
            if session.spec.contribution is not None
            and session.spec.server_id == server_id
            and session.spec.contribution[1]["contextID"] == context.get("contextID")
        ]
        own = [s for s in candidates if s.spec.contribution and s.spec.contribution[0] == plugin_id]
        if candidates and not own:
            raise host_refusal(
                "plugin.host.foreignContribution",
                f"the language server {echo(server_id)} belongs to another plugin",
            )
        running = [
            s
            for s in own
            if not s.ended
            and s.spec.contribution is not None
            and s.spec.contribution[1]["generation"] == context.get("generation")
        ]
        if not running:
            raise host_refusal(
                "plugin.host.languageServerUnavailable",
                f"the language server {echo(server_id)} is not running for this context",
            )
        session = running[-1]
        policy = session.spec.policy
        if not policy.request_methods and not policy.forward_notifications:
            raise host_refusal(
                "plugin.host.permissionDenied",
                f"the language server {echo(server_id)} declares no plugin session",
            )
        return session

    async def host_request(
        self, session: LspSession, method: str, params: JSONObject, timeout_ms: int
    ) -> JSONValue:
        """``lithe/host/languageServer/request`` on ``session``: ``{value}``.

        The session policy, gates, serialization, the 128-request bound and the deadline are
        those of ``lsp.pluginServerRequest``. **Cancellation:** cancelling the caller (the
        backend's ``$/cancelRequest``, the context closing) cancels the server request.

        Raises:
            HostRefusal: ``methodNotDeclared``, ``languageServerUnavailable``,
                ``languageServerError`` (details ``{code, message}``), ``timeout``, ``busy``,
                ``limitExceeded``, ``cancelled``.
        """
        payload = LspPluginServerRequest(
            session_id=session.session_id,
            method=method,
            params=params,
            timeout_milliseconds=timeout_ms,
        )
        try:
            return await self._run_plugin_request(payload)
        except CoreError as exc:
            raise _as_refusal(exc) from None

    async def host_notify(
        self, session: LspSession, method: str, params: JSONObject | None
    ) -> JSONValue:
        """``lithe/host/languageServer/notify`` on ``session``: ``{delivered}``.

        Raises:
            HostRefusal: as :meth:`host_request`.
        """
        payload = LspPluginServerNotify(session_id=session.session_id, method=method, params=params)
        try:
            return await self._run_plugin_notify(payload)
        except CoreError as exc:
            raise _as_refusal(exc) from None

    def set_status(self, session: LspSession, status: JSONObject) -> None:
        """``lithe/host/languageServer/setStatus``: the plugin's preparation state of the
        server's current generation; replaces the earlier one; a ``pluginStatus`` event on
        the server's session and ``pluginStatus`` in its ``lsp.snapshot``. A new generation
        starts without one; a stopped or crashed server has none."""
        current: JSONObject = {"generation": session.generation, **status}
        self._statuses[session.session_id] = current
        session.events.put("pluginStatus", {"sessionId": session.session_id, **current})

    def _server_event(self, session: LspSession, event: str, payload: JSONObject) -> None:
        """A contributed server's state change or forwarded notification, to its plugin's
        backends granted ``languageServer.request`` (``didChangeState``,
        ``didReceiveNotification``)."""
        assert session.spec.contribution is not None
        plugin_id, context = session.spec.contribution
        generation = payload.get("generation")
        if not isinstance(generation, int):
            return
        base: JSONObject = {
            "context": dict(context),
            "serverID": session.spec.server_id,
            "generation": generation,
        }
        if event == "stateChanged":
            state = _HOST_SERVER_STATES.get(str(payload.get("state")))
            status = self._statuses.get(session.session_id)
            if status is not None and (
                state in ("stopped", "crashed") or status.get("generation") != generation
            ):
                del self._statuses[session.session_id]
            if state is None or self._server_states.get(session.session_id) == (generation, state):
                return
            self._server_states[session.session_id] = (generation, state)
            self._tell_backends(plugin_id, DID_CHANGE_STATE, {**base, "state": state})
            return
        method = payload.get("method")
        if not isinstance(method, str):
            return
        note: JSONObject = {**base, "method": method}
        params = payload.get("params")
        if params is not None:
            if dumps(params) > NOTIFICATION_BYTES:
                note["truncated"] = True
            else:
                note["params"] = params
        self._tell_backends(plugin_id, DID_RECEIVE_NOTIFICATION, note)

    def _tell_backends(self, plugin_id: str, method: str, params: JSONObject) -> None:
        for session in self._sessions.values():
            plugin = session.plugin
            if (
                plugin is not None
                and plugin.plugin_id == plugin_id
                and LANGUAGE_SERVER_GRANT in plugin.grants
            ):
                plugin.notify_backend(method, params)

    # -- documents -----------------------------------------------------------------------

    @declared
    async def _sync(self, payload: LspSyncDocument) -> JSONValue:
        session = self._session(payload)
        uri, language_id, text = payload.uri, payload.language_id, payload.text
        changes = payload.content_changes
        session.check_open()
        # Recorded only once what was submitted before it went out: a change that arrived
        # behind a request waiting for readiness must not reach the server (with the
        # documents opened at initialization) before that request.
        await session.wait_outbox()
        session.check_open()
        plan = session.documents.plan_sync(uri, language_id, text, changes, session.sync_kind())
        live = session.documents_live
        document = session.documents.get(uri)
        if live is not None and document is not None:
            if document.opened_in != live:
                document.opened_in = live
                await session.notify("textDocument/didOpen", document.did_open())
            elif plan.method is not None and plan.params is not None:
                await session.notify(plan.method, plan.params)
        return {"documentVersion": plan.version, "changed": plan.changed}

    @declared
    async def _close_document(self, payload: LspCloseDocument) -> JSONValue:
        session = self._session(payload)
        uri = payload.uri
        await session.wait_outbox()
        document = session.documents.close(uri)
        live = session.documents_live
        if live is not None and document.opened_in == live:
            await session.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        if document.diagnostics:
            session.emit_diagnostics(uri, None, [])
        return {"closed": True}

    @declared
    async def _files_changed(self, payload: LspWorkspaceFilesChanged) -> JSONValue:
        session = self._session(payload)
        # LSP FileChangeType: Created 1, Changed 2, Deleted 3.
        kinds = {"created": 1, "changed": 2, "deleted": 3}
        changes: list[JSONValue] = [
            {"uri": change.uri, "type": kinds[change.kind]} for change in payload.changes
        ]
        await session.notify("workspace/didChangeWatchedFiles", {"changes": changes})
        return {"sent": len(changes)}

    @declared
    async def _clear_diagnostics(self, payload: LspSessionRef) -> JSONValue:
        session = self._session(payload)
        cleared = session.documents.clear_diagnostics()
        for document in cleared:
            session.emit_diagnostics(document.uri, None, [])
        return {"cleared": len(cleared)}

    @declared
    async def _update_configuration(self, payload: LspUpdateWorkspaceConfiguration) -> JSONValue:
        session = self._session(payload)
        config = payload.workspace_configuration
        return {"delivered": await self._deliver_configuration(session, config)}

    async def _deliver_configuration(self, session: LspSession, config: JSONValue) -> bool:
        # The value is what workspace/configuration answers from now on; a server that is
        # not initialized yet gets it with `initialized`.
        await session.wait_outbox()
        session.workspace_configuration = config
        if not session.initialized:
            return False
        await session.notify("workspace/didChangeConfiguration", {"settings": config})
        return True

    # -- requests ------------------------------------------------------------------------

    @declared
    async def _request(self, payload: LspRequest) -> JSONValue:
        session = self._session(payload)
        method, params, timeout_ms = payload.method, payload.params, payload.timeout_milliseconds
        operation_id = payload.operation_id or current_operation_id() or session.new_operation_id()
        uri = None
        if isinstance(params, dict):
            document = params.get("textDocument")
            if isinstance(document, dict) and isinstance(document.get("uri"), str):
                uri = str(document["uri"])
        if withdrawn() is not None:
            # lsp.cancelOperation named it while it waited for its turn: it ends as a
            # cancelled request does, and the server never sees it.
            session.cancel_unsent(method, operation_id=operation_id, uri=uri)
            return {"operationId": operation_id}
        session.refuse_requests_if_ended()
        session.submit(
            method,
            params,
            operation_id=operation_id,
            timeout_ms=timeout_ms or session.spec.request_timeout_ms,
            uri=uri,
        )
        return {"operationId": operation_id}

    @declared
    async def _notify(self, payload: LspNotify) -> JSONValue:
        """``lsp.notify {sessionId, method, params?}`` -> ``{delivered: true}``.

        A notification the session does not own: documents go through ``lsp.syncDocument`` /
        ``lsp.closeDocument`` (the session keeps their versions), the configuration through
        ``lsp.updateWorkspaceConfiguration`` (it answers ``workspace/configuration``), and
        the lifecycle (``initialized``, ``exit``, ``$/cancelRequest``) is the session's.
        """
        session = self._session(payload)
        method, params = payload.method, payload.params
        owner = _OWNED_NOTIFICATIONS.get(method)
        if owner is not None:
            raise _invalid(f"{method} is sent by the session: use {owner}", "method")
        session.refuse_requests_if_ended()
        await session.notify(method, params)
        return {"delivered": True}

    @declared
    async def _cancel(self, payload: LspCancelOperation) -> JSONValue:
        """``lsp.cancelOperation``: a pending request or call of the session, or one still in
        the session's line (it arrived before the cancel; it ends the same way, unsent).

        Ordered with nothing, so it never waits behind what it cancels; an operation of
        another session, an unknown or an ended one answers false and nothing changes.
        """
        session = self._session(payload)
        if session.cancel(payload.operation_id):
            return {"cancelled": True}
        target = ("lsp", payload.session_id)
        waited = self._withdraw is not None and self._withdraw(
            target, payload.operation_id, "cancelled"
        )
        return {"cancelled": waited}

    # -- plugin functions (the plugin contract "Plugin functions") ------------------------

    @declared
    async def _function_request(self, payload: LspFunctionRequest) -> JSONValue:
        """``lsp.functionRequest`` -> ``{operationId}``; the call ends in one requestCompleted.

        Refusals (the plugin contract "Invocation", in order): see
        :func:`~supervisor._plugin._state.check_function_request`. ``timeoutMilliseconds``
        is capped at one hour and defaults to the session's request timeout.
        """
        session = self._session(payload)
        # Capped at one hour below (function_timeout_ms).
        timeout = payload.timeout_milliseconds
        plugin = session.plugin
        function = payload.function
        if (
            withdrawn() is not None
            and plugin is not None
            and isinstance(function, dict)
            and isinstance(function.get("functionID"), str)
        ):
            # lsp.cancelOperation named it while it waited for its turn: it ends as a
            # cancelled call does, never invoked. (Without a plugin or a function ID the
            # checks below refuse it, as they would have at its turn.)
            operation_id = (
                payload.operation_id or current_operation_id() or session.new_operation_id()
            )
            plugin.cancel_uninvoked(operation_id, str(function["functionID"]))
            return {"operationId": operation_id}
        function_id, params = check_function_request(
            payload.function,
            payload.params,
            payload.context,
            session_plugin_id=plugin.plugin_id if plugin is not None else None,
            negotiated=plugin is not None and plugin.negotiated,
            registry=plugin.registry if plugin is not None else None,
            not_running=(
                f"session {session.session_id} is {session.state.value}: no backend runs"
                if session.state.value in ("failed", "stopped")
                else None
            ),
        )
        operation_id = payload.operation_id or current_operation_id() or session.new_operation_id()
        session.start_function_call(
            operation_id=operation_id,
            function_id=function_id,
            params=params,
            context=payload.context,
            timeout_ms=function_timeout_ms(timeout, session.spec.request_timeout_ms),
        )
        return {"operationId": operation_id}

    @declared
    async def _host_response(self, payload: LspHostResponse) -> JSONValue:
        """``lsp.hostResponse {sessionId, hostRequestID, result? | error}``.

        Returns:
            ``{hostRequestID}``.
        """
        session = self._session(payload)
        host_request_id = payload.host_request_id
        if session.plugin is None:
            raise _invalid(f"no pending host request {echo(host_request_id)}")
        session.plugin.host_response(host_request_id, payload.result, payload.error)
        return {"hostRequestID": host_request_id}

    async def execute_command(
        self, session_id: str, command: str, arguments: list[JSONValue], timeout_ms: int
    ) -> JSONValue:
        """``workspace/executeCommand`` on a session for another service (a debug adapter
        that lives inside a language server: the plugin contract ``tcpLanguageServer``).

        Waits for readiness like any request; no ``requestCompleted`` event is queued.

        Returns:
            The command's result.

        Raises:
            CoreError: ``not_found`` for an unknown session; ``launch_failed`` when the
                server answered with an error, was not running, or did not answer within
                ``timeout_ms`` (``details.languageServerError`` holds the structured error).

        **Cancellation:** cancelling the caller cancels the server request.
        """
        session = self._sessions.find(session_id)
        params: JSONObject = {"command": command, "arguments": arguments}
        req = session.submit(
            "workspace/executeCommand",
            params,
            operation_id=session.new_operation_id(),
            timeout_ms=timeout_ms,
            emit_event=False,
        )
        try:
            await req.finished.wait()
        finally:
            if req.outcome is None:
                session.cancel(req.operation_id)
        outcome = req.outcome or {}
        error = outcome.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else None
            raise CoreError(
                "launch_failed",
                f"The language server could not run {echo(command)}: {message}",
                {"languageServerError": error},
            )
        return outcome.get("result")

    @declared
    async def _server_request_response(self, payload: LspServerRequestResponse) -> JSONValue:
        """``lsp.serverRequestResponse {sessionId, requestId, result? | error?}``: the host's
        answer to a ``serverRequest`` event (a server request named in ``hostRequests``).

        ``error`` is ``{code: integer, message: string, data?}`` (a JSON-RPC error object).

        Returns:
            ``{accepted}``: False for an unknown, late or repeated ``requestId``.
        """
        session = self._session(payload)
        error: JSONRPCError | None = None
        if payload.error is not None:
            if payload.result is not None:
                raise _invalid(
                    "error must be {code: integer, message: string, data?}, without result",
                    "error",
                )
            error = JSONRPCError(payload.error.code, payload.error.message, payload.error.data)
        accepted = session.answer_server_request(payload.request_id, payload.result, error)
        return {"accepted": accepted}

    @declared
    async def _host_notify(self, payload: LspHostNotify) -> JSONValue:
        """``lsp.hostNotify {sessionId, method, params}`` -> ``{delivered}``.

        the plugin contract "Host notifications": another method, a service the session is
        not granted, malformed params (or over ``notificationBytes``), a session that is not
        plugin-owned or not ready: ``invalid_request``.

        Accepted notifications join the session's host-notification queue, in order with the
        supervisor's own (the contract's "128-entry per-session queue; context revisions
        coalesce to the latest, and overflow ends the session"): a ``didChangeContexts`` the
        host sends while the backend does not read merges with the later ones.
        """
        session = self._session(payload)
        method, params = payload.method, payload.params
        if session.plugin is None:
            raise _invalid(f"session {session.session_id} is not plugin-owned")
        session.plugin.check_notify(method, params)
        if not session.ready:
            raise _invalid(f"session {session.session_id} is not ready")
        assert isinstance(params, dict)
        session.endpoint_for_notify()  # invalid_request once its server went away
        # After the requests and calls submitted before it (the order rule); a call submitted
        # after it, and a request or notification, waits for the queue (HostNotifications.mark).
        waited = await session.wait_outbox()
        if waited:
            session.endpoint_for_notify()
        session.plugin.notifications.put(method, params)
        if not waited:
            await trio.lowlevel.checkpoint()
        return {"delivered": True}

    # -- the relay (the plugin contract "Cross-plugin calls") ------------------------------

    @declared
    async def _configure_relay(self, payload: LspConfigureFunctionRelay) -> JSONValue:
        """``lsp.configureFunctionRelay {plugins: [{pluginID, enabled, exports, calls}],
        contexts: [{contextID, generation, authority}]}`` -> ``{plugins, contexts,
        endedCalls}``.

        Hot activation: the snapshot takes effect at once; running relayed calls it no
        longer allows end with notDeclared, providerDisabled or contextExpired.

        Raises:
            CoreError: ``invalid_request`` for a malformed snapshot.
        """
        return self.relay.configure(payload)

    def _relay_provider(self, plugin_id: str) -> ProviderHandle | None:
        """The running, negotiated backend of ``plugin_id`` (the first session of it)."""
        for session in self._sessions.values():
            plugin = session.plugin
            if plugin is None or plugin.plugin_id != plugin_id or plugin.registry is None:
                continue
            try:
                endpoint = session.endpoint_for_notify()
            except CoreError:
                continue
            return ProviderHandle(frozenset(plugin.registry.sorted_ids()), endpoint)
        return None

    # -- plugin-owned sessions -----------------------------------------------------------

    def _plugin_session(
        self, payload: LspPluginServerRequest | LspPluginServerNotify
    ) -> LspSession:
        session_id = payload.session_id
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise _plugin_error("languageServerUnavailable", f"no session {echo(session_id)}")
        plugin_id = payload.plugin_id
        if session.spec.plugin_id is not None and plugin_id != session.spec.plugin_id:
            raise _plugin_error(
                "foreignContribution", "the language server belongs to another plugin"
            )
        if session.state not in (LspState.STARTING, LspState.INITIALIZING, LspState.READY):
            raise _plugin_error(
                "languageServerUnavailable", f"the language server is {session.state.value}"
            )
        return session

    @declared
    async def _plugin_request(self, payload: LspPluginServerRequest) -> JSONValue:
        return await self._run_plugin_request(payload)

    async def _run_plugin_request(self, payload: LspPluginServerRequest) -> JSONValue:
        method = payload.method
        params = {} if payload.params is None else payload.params
        timeout_ms = payload.timeout_milliseconds or DEFAULT_REQUEST_TIMEOUT_MS
        session = self._plugin_session(payload)
        policy = session.spec.policy
        if method not in policy.request_methods:
            raise _plugin_error(
                "methodNotDeclared",
                f"{cut_utf8(method, MAX_ECHO_BYTES)} is not a declared request method",
            )
        command: str | None = None
        if method == "workspace/executeCommand":
            raw = params.get("command")
            if not isinstance(raw, str) or raw not in policy.commands:
                raise _plugin_error("methodNotDeclared", f"command {echo(raw)} is not declared")
            command = raw if raw in policy.serialized_commands else None
        joined = session.serialized_request(command) if command is not None else None
        if joined is None:
            try:
                req = session.submit(
                    method,
                    params,
                    operation_id=session.new_operation_id(),
                    timeout_ms=timeout_ms,
                    emit_event=False,
                )
            except CoreError as exc:
                if exc.code == "busy":
                    raise _plugin_error("busy", exc.message) from None
                raise
            if command is not None:
                session.register_serialized(command, req)
            owner = True
        else:
            req = joined
            owner = False
        # Handed to the session's outbox (or joined): the session's next command may take
        # its effect while this one waits for the server's answer.
        effect_taken()
        try:
            await req.finished.wait()
        finally:
            if owner and req.outcome is None:
                # Our caller gave up (operation cancelled): cancel the server request, which
                # ends the joined requests with it.
                session.cancel(req.operation_id)
        return _plugin_outcome(req.outcome)

    @declared
    async def _plugin_notify(self, payload: LspPluginServerNotify) -> JSONValue:
        return await self._run_plugin_notify(payload)

    async def _run_plugin_notify(self, payload: LspPluginServerNotify) -> JSONValue:
        method = payload.method
        params = payload.params
        if params is not None and not isinstance(params, dict):
            raise _plugin_error("invalidParams", "params must be an object")
        session = self._plugin_session(payload)
        if method == "workspace/didChangeConfiguration":
            settings = params.get("settings") if params is not None else None
            return {"delivered": await self._deliver_configuration(session, settings)}
        if method not in session.spec.policy.request_methods or method == (
            "workspace/executeCommand"
        ):
            raise _plugin_error("methodNotDeclared", f"{method} is not a declared method")
        if not session.initialized:
            raise _plugin_error("languageServerUnavailable", "the server is not initialized")
        await session.notify(method, params)
        return {"delivered": True}


#: Our session states as ``didChangeState`` names them (``stopping`` is not one of them).
_HOST_SERVER_STATES: Final = {
    "starting": "starting",
    "initializing": "starting",
    "ready": "running",
    "stopped": "stopped",
    "failed": "crashed",
}


def host_refusal(code: str, message: str, details: JSONObject | None = None) -> HostRefusal:
    """A ``plugin.host.*`` refusal with its catalog number."""
    number = lookup_error(code).jsonrpc_code
    return HostRefusal(-32603 if number is None else number, code, message, details)


def _as_refusal(exc: CoreError) -> HostRefusal:
    if exc.code.startswith("plugin.host."):
        return host_refusal(exc.code, exc.message, exc.details)
    return host_refusal("plugin.host.failed", exc.message)


def _plugin_outcome(outcome: JSONObject | None) -> JSONValue:
    """Map a request's outcome to ``{value}`` or the plugin.host.* error."""
    if outcome is None:
        raise _plugin_error("cancelled", "The request was cancelled")
    if "result" in outcome:
        value = outcome["result"]
        if dumps(value) > MAX_PLUGIN_RESULT_BYTES:
            raise _plugin_error(
                "limitExceeded", f"the result is over {MAX_PLUGIN_RESULT_BYTES} bytes"
            )
        return {"value": value}
    error = outcome.get("error")
    assert isinstance(error, dict)
    code = error.get("code")
    message = str(error.get("message", ""))
    if code == "requestCancelled":
        raise _plugin_error("cancelled", message)
    if code == "requestTimeout":
        raise _plugin_error("timeout", message)
    if code == "languageServerError":
        details = error.get("details")
        # the plugin contract: its details are {code, message} (``data`` is the host's).
        raise _plugin_error(
            "languageServerError",
            message,
            {k: v for k, v in details.items() if k in ("code", "message")}
            if isinstance(details, dict)
            else None,
        )
    raise _plugin_error("languageServerUnavailable", message)


@asynccontextmanager
async def open_lsp_service(context: ServiceContext) -> AsyncIterator[LspService]:
    """Open the LSP service; leaving the block stops every session and waits for it.

    **Cancellation:** the stops run shielded; each is bounded by its session's shutdown,
    exit-wait, TERM-grace and kill-wait bounds (8 s with the defaults).
    """
    async with trio.open_nursery() as nursery:
        host = HostEnvironment.of(context)
        service = LspService(
            nursery,
            context.max_events,
            context.owner_ended,
            host,
            context.event_budget,
            withdraw=context.withdraw,
        )
        try:
            yield service
        finally:
            with trio.CancelScope(shield=True):
                await service.stop_all()
            nursery.cancel_scope.cancel()
