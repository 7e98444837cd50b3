"""``lithe/host/terminal/*`` (grant ``lithe/host/terminal/create``) on the supervisor's PTY
terminals.

the plugin contract "Plugin-owned native terminals", "Close, retained context and reopen".
Every method takes ``context: {contextID, generation}`` besides its own params:

- ``create {executable, arguments?, title?, cwd?, environment?, show?,
  retainedContextBytes?}`` -> ``{terminalID, generation: 1}``;
- ``show {terminalID}`` -> null; ``close {terminalID, retainedContextBytes?}`` ->
  ``{retainedContextBytes}``; ``reopen {terminalID, show?}`` -> ``{terminalID, generation,
  restoredContextBytes}``; ``dispose {terminalID}`` -> null; ``onExit {terminalID}`` ->
  ``{subscriptionID}``, whose events reach the backend as ``lithe/host/subscriptions/notify``
  with ``event: {type: "exit", terminalID, generation, exitCode, reason: "exited" |
  "closed"}`` (a terminal our boundary ended after an internal failure says ``closed``).

Rules kept here, before the terminal service's own (:mod:`supervisor._terminal._service`):

- A field the method does not define: -32018 ``plugin.host.unsupportedOption`` with
  ``details.option``, before any side effect.
- A remote context: -32012 ``plugin.host.authorityUnsupported``; nothing starts.
- ``cwd`` is ``{rootID, path}``: a root of the context (``rootID`` as ``getFolders`` gives it;
  another is -32016 ``plugin.host.notFound``) and a ``/``-separated relative path, empty for
  the root; its canonical path must be a directory inside that root, else -32602
  ``plugin.host.invalidParams`` with ``details.field: "cwd"``. Without ``cwd``, the
  context's first root folder; a context with none is -32019
  ``plugin.host.preconditionFailed``.
- Create and reopen ask the policy for consent (program, argv, working directory); a
  refusal is -32010 ``plugin.host.permissionDenied``. The context and the request's
  cancellation are checked again before the launch. ``show`` (default true) asks the policy
  to show the terminal.
- A handle belongs to one backend process and one context generation: another session, a
  replacement backend, another context or generation gets -32016 ``plugin.host.notFound``.
  Closing or replacing the context disposes its terminals; the backend's end disposes them
  through the terminal service's owner (the session id).
- The terminal service's codes map to host codes: ``not_found`` -> ``plugin.host.notFound``,
  ``busy`` -> ``plugin.host.busy``, ``invalid_request`` -> ``plugin.host.invalidParams``
  (``details.field``), ``cancelled`` -> ``plugin.host.cancelled``, any other ->
  ``plugin.host.failed`` (``details.code``); ``plugin.host.*`` codes pass unchanged.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

from .._api._base import decode_payload
from .._api._terminal import TerminalCreate
from .._core._service import call_command
from .._terminal._service import TerminalService
from ._host import Consent, Show
from ._state import HostRefusal, _refusal
from ._workspace import context_expired

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

    from ._host import HostCall, HostEnvironment, HostServices
    from ._subscriptions import Subscriptions
    from ._workspace import WorkspaceContext

__all__ = ("TerminalLeases", "register")

_PREFIX: Final = "lithe/host/terminal/"
#: Params of each method besides ``context``.
_FIELDS: Final[dict[str, frozenset[str]]] = {
    "create": frozenset(
        {
            "executable",
            "arguments",
            "title",
            "cwd",
            "environment",
            "show",
            "retainedContextBytes",
        }
    ),
    "show": frozenset({"terminalID"}),
    "close": frozenset({"terminalID", "retainedContextBytes"}),
    "reopen": frozenset({"terminalID", "show"}),
    "dispose": frozenset({"terminalID"}),
    "onExit": frozenset({"terminalID"}),
}


def register(table: HostServices) -> None:
    """Serve the six terminal methods."""
    table.register(_PREFIX + "create", _create)
    table.register(_PREFIX + "show", _show)
    table.register(_PREFIX + "close", _close)
    table.register(_PREFIX + "reopen", _reopen)
    table.register(_PREFIX + "dispose", _dispose)
    table.register(_PREFIX + "onExit", _on_exit)


@dataclass(eq=False)
class _Lease:
    """Whose a terminal is: the backend process and the context generation it was made for."""

    terminal_id: str
    session_id: str
    backend_generation: int
    context: WorkspaceContext
    #: The backend's onExit subscription, while live, and the registry it is in.
    subscription: str | None = None
    subscriptions: Subscriptions | None = None


class TerminalLeases:
    """The terminals backends hold in one Core (a host-environment extension)."""

    def __init__(self, host: HostEnvironment) -> None:
        self._host = host
        self._leases: dict[str, _Lease] = {}
        host.contexts.listen(self._contexts_changed)

    def add(self, lease: _Lease) -> None:
        self._leases[lease.terminal_id] = lease

    def forget(self, terminal_id: str) -> None:
        self._leases.pop(terminal_id, None)

    def find(self, call: HostCall, service: TerminalService) -> _Lease:
        """The caller's lease of ``params.terminalID``.

        Raises:
            HostRefusal: ``plugin.host.invalidParams`` for a missing id;
                ``plugin.host.notFound`` for a handle that is not the caller's.
        """
        terminal_id = call.params.get("terminalID")
        if not isinstance(terminal_id, str):
            raise _invalid("terminalID must be a string", "terminalID")
        lease = self._leases.get(terminal_id)
        if lease is not None and terminal_id not in service.terminal_ids():
            self.forget(terminal_id)  # disposed by its owner's end
            lease = None
        if (
            lease is None
            or lease.session_id != call.session.session_id
            or lease.backend_generation != call.session.generation
            or lease.context is not call.context
        ):
            raise _refusal("plugin.host.notFound", f"no terminal {terminal_id[:64]} of yours")
        return lease

    def _contexts_changed(self, revision: int) -> None:
        nursery = self._host.nursery
        service = self._host.opened_service("terminal")
        if not isinstance(service, TerminalService):
            service = None
        stale = [
            lease
            for lease in self._leases.values()
            if not self._host.contexts.is_current(lease.context)
        ]
        for lease in stale:
            self.forget(lease.terminal_id)
            if lease.subscription is not None and lease.subscriptions is not None:
                lease.subscriptions.dispose(lease.subscription)
            if nursery is not None and service is not None:
                nursery.start_soon(_dispose_quietly, service, lease.terminal_id)


async def _dispose_quietly(service: TerminalService, terminal_id: str) -> None:
    with contextlib.suppress(CoreError):  # already gone (its backend ended meanwhile)
        await call_command(service.commands(), "terminal.dispose", {"terminalID": terminal_id})


def _invalid(message: str, field_name: str) -> HostRefusal:
    return _refusal("plugin.host.invalidParams", message, {"field": field_name})


def _check_options(call: HostCall) -> None:
    allowed = _FIELDS[call.method.removeprefix(_PREFIX)]
    for name in sorted(call.params):
        if name != "context" and name not in allowed:
            raise _refusal(
                "plugin.host.unsupportedOption",
                f"{call.method} has no field {name[:64]}",
                {"option": name[:128]},
            )


async def _prepare(call: HostCall) -> tuple[TerminalService, TerminalLeases, WorkspaceContext]:
    """The checks every method makes: options, a context, its authority, the service."""
    _check_options(call)
    context = call.context
    if context is None:
        raise _invalid("context is required", "context")
    if not context.local:
        raise _refusal(
            "plugin.host.authorityUnsupported",
            "terminals run only for a local workspace",
        )
    service = await call.host.service("terminal")
    if not isinstance(service, TerminalService):
        raise _refusal("plugin.host.unavailable", "this Core runs no terminal service")
    return service, call.host.extension(TerminalLeases), context


def _host_error(exc: CoreError) -> HostRefusal:
    """A terminal service refusal as the backend sees it (see the module docstring)."""
    details = exc.details if isinstance(exc.details, dict) else None
    if exc.code.startswith("plugin.host."):
        return _refusal(exc.code, exc.message, details)
    mapped = {
        "not_found": "plugin.host.notFound",
        "busy": "plugin.host.busy",
        "invalid_request": "plugin.host.invalidParams",
        "cancelled": "plugin.host.cancelled",
    }.get(exc.code)
    if mapped is not None:
        return _refusal(mapped, exc.message, details)
    return _refusal("plugin.host.failed", exc.message, {"code": exc.code, **(details or {})})


def _working_directory(call: HostCall, context: WorkspaceContext) -> str:
    """The canonical working directory ``params.cwd`` names (see the module docstring)."""
    raw = call.params.get("cwd")
    if raw is None:
        if not context.folders:
            raise _refusal(
                "plugin.host.preconditionFailed", "the context has no root folder to start in"
            )
        return os.path.realpath(context.folders[0].path)
    if (
        not isinstance(raw, dict)
        or set(raw) != {"rootID", "path"}
        or not isinstance(raw["rootID"], str)
        or not isinstance(raw["path"], str)
    ):
        raise _invalid("cwd must be {rootID, path}", "cwd")
    path = raw["path"]
    if path.startswith("/") or "\0" in path or "\\" in path:
        raise _invalid("cwd.path must be a /-separated path relative to the root", "cwd")
    folder = call.host.contexts.folder_of(call.session.plugin_id, context, raw["rootID"])
    root = os.path.realpath(folder.path)
    target = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, target]) != root:
        raise _invalid("cwd is outside the workspace", "cwd")
    if not os.path.isdir(target):
        raise _invalid("cwd is not an existing directory", "cwd")
    return target


async def _consent(
    call: HostCall, context: WorkspaceContext, executable: str, arguments: list[str], cwd: str
) -> None:
    """Ask the policy; then check the context and the request's cancellation again."""
    agreed = await call.host.policy.consent(
        Consent(call.session.plugin_id, call.method, executable, tuple(arguments), cwd)
    )
    if not agreed:
        raise _refusal("plugin.host.permissionDenied", "the user did not allow the program")
    if not call.host.contexts.is_current(context):
        raise context_expired(f"the context {context.context_id} closed or changed")
    await trio.lowlevel.checkpoint_if_cancelled()


def _show_flag(call: HostCall) -> bool:
    show = call.params.get("show", True)
    if not isinstance(show, bool):
        raise _invalid("show must be a boolean", "show")
    return show


async def _create(call: HostCall) -> JSONValue:
    service, leases, context = await _prepare(call)
    show = _show_flag(call)
    cwd = _working_directory(call, context)
    payload: JSONObject = {
        key: value for key, value in call.params.items() if key not in ("context", "show", "cwd")
    }
    payload["cwd"] = cwd
    payload["owner"] = call.session.session_id
    try:
        # Decoded before the consent, so the user is never asked about a malformed start.
        declared: TerminalCreate = decode_payload("terminal.create", TerminalCreate, payload)
    except CoreError as exc:
        raise _host_error(exc) from None
    await _consent(call, context, declared.executable, list(declared.arguments or ()), cwd)
    try:
        result = await call_command(service.commands(), "terminal.create", payload)
    except CoreError as exc:
        raise _host_error(exc) from None
    assert isinstance(result, dict)
    terminal_id = str(result["terminalID"])
    leases.add(_Lease(terminal_id, call.session.session_id, call.session.generation, context))
    if show:
        await call.host.policy.show(Show(call.session.plugin_id, "terminal", terminal_id))
    return result


async def _show(call: HostCall) -> JSONValue:
    service, leases, _context = await _prepare(call)
    lease = leases.find(call, service)
    if service.state_of(lease.terminal_id) != "running":
        raise _refusal(
            "plugin.host.preconditionFailed",
            f"terminal {lease.terminal_id} is closed: reopen it to show it",
        )
    await call.host.policy.show(Show(call.session.plugin_id, "terminal", lease.terminal_id))
    return None


async def _close(call: HostCall) -> JSONValue:
    service, leases, _context = await _prepare(call)
    lease = leases.find(call, service)
    payload: JSONObject = {"terminalID": lease.terminal_id}
    if "retainedContextBytes" in call.params:
        payload["retainedContextBytes"] = call.params["retainedContextBytes"]
    try:
        return await call_command(service.commands(), "terminal.close", payload)
    except CoreError as exc:
        raise _host_error(exc) from None


async def _reopen(call: HostCall) -> JSONValue:
    service, leases, context = await _prepare(call)
    show = _show_flag(call)
    lease = leases.find(call, service)
    launch = service.launch_of(lease.terminal_id)
    if launch is not None:
        cwd = launch.cwd if launch.cwd is not None else os.getcwd()
        await _consent(call, context, launch.executable, list(launch.arguments), cwd)
    try:
        result = await call_command(
            service.commands(), "terminal.reopen", {"terminalID": lease.terminal_id}
        )
    except CoreError as exc:
        raise _host_error(exc) from None
    if show:
        await call.host.policy.show(Show(call.session.plugin_id, "terminal", lease.terminal_id))
    return result


async def _dispose(call: HostCall) -> JSONValue:
    service, leases, _context = await _prepare(call)
    lease = leases.find(call, service)
    try:
        await call_command(
            service.commands(), "terminal.dispose", {"terminalID": lease.terminal_id}
        )
    except CoreError as exc:
        raise _host_error(exc) from None
    leases.forget(lease.terminal_id)
    if lease.subscription is not None:
        call.session.subscriptions.dispose(lease.subscription)
    return None


async def _on_exit(call: HostCall) -> JSONValue:
    service, leases, context = await _prepare(call)
    lease = leases.find(call, service)
    subscriptions = call.session.subscriptions
    holder: list[str] = []

    def on_outcome(outcome: JSONObject) -> None:
        reason = outcome.get("reason")
        event: JSONObject = {
            "type": "exit",
            "terminalID": outcome["terminalID"],
            "generation": outcome["generation"],
            "exitCode": outcome.get("exitCode"),
            "reason": reason if reason in ("exited", "closed") else "closed",
        }
        subscriptions.publish(subscription.subscription_id, event)

    def on_dispose() -> None:
        if holder:
            service.end_exit_subscription(holder[0])
        lease.subscription = None

    subscription = subscriptions.open(context.context_id, on_dispose)
    try:
        holder.append(service.subscribe_exit(lease.terminal_id, on_outcome))
    except CoreError as exc:
        subscriptions.dispose(subscription.subscription_id)
        raise _host_error(exc) from None
    lease.subscription = subscription.subscription_id
    lease.subscriptions = subscriptions
    return {"subscriptionID": subscription.subscription_id}
