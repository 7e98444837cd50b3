"""Host-service wrappers and subscriptions of the backend SDK (the Node plugin SDK contract "Host
services", "Native terminal API").

- ``host.workspace``: ``list_contexts()``, ``get_context(context)``, ``get_folders(context)``.
- ``host.terminal``: ``create``, ``show``, ``close``, ``reopen``, ``dispose`` and
  ``on_exit(context, terminal_id, on_event)`` (a :class:`Subscription`); grant
  ``terminal.create``.
- ``host.run``: ``start(context, label, process, ...)`` -> runID and ``stop(run_id=... |
  session_id=...)``; grant ``run.start``. Its end arrives as ``lithe/host/run/didExit``
  (``backend.on_host_notification``).
- ``host.subscribe(method, params, on_event)`` for any method that answers
  ``{subscriptionID}``; ``host.subscriptions.dispose(id)``.

A context is ``{contextID, generation}`` or a whole context from ``list_contexts`` (other keys
are dropped). Subscriptions route by ID: ``on_event(event, info)`` runs in order with
``info = {subscriptionID, sequence, gap}``; ``gap`` is true when events were missed (rescan).
Events that arrive before the request that made the subscription is answered wait for it
(at most :data:`MAX_EARLY_EVENTS`); nothing arrives after ``dispose()`` or the end of the
session.
"""

from __future__ import annotations

import logging
import warnings
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

from ._errors import HostError, PluginSdkError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from protocol import JSONObject, JSONValue

    from ._backend import Host

__all__ = (
    "MAX_EARLY_EVENTS",
    "EventHandler",
    "Subscription",
    "SubscriptionRouter",
)

logger = logging.getLogger("supervisor.plugin_sdk")

#: ``await on_event(event, {subscriptionID, sequence, gap})``.
EventHandler: TypeAlias = "Callable[[JSONObject, JSONObject], Awaitable[None]]"
#: Events kept for subscriptions whose creating request is not answered yet (ours).
MAX_EARLY_EVENTS: Final = 128
#: Disposed IDs remembered, so their late events are dropped rather than kept early (ours).
_DISPOSED_MEMORY: Final = 1024


@dataclass(eq=False)
class _Route:
    handler: EventHandler | None
    sequence: int = 0


class SubscriptionRouter:
    """Routes ``lithe/host/subscriptions/notify`` to subscriptions by ID, in order."""

    def __init__(self) -> None:
        self._routes: dict[str, _Route] = {}
        self._early: deque[JSONObject] = deque()
        self._disposed: deque[str] = deque(maxlen=_DISPOSED_MEMORY)

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._routes

    async def add(self, subscription_id: str, handler: EventHandler | None) -> None:
        """Route ``subscription_id`` to ``handler``; events that came early are delivered."""
        self._routes[subscription_id] = _Route(handler)
        early = [p for p in self._early if p.get("subscriptionID") == subscription_id]
        for params in early:
            self._early.remove(params)
        for params in early:
            await self.deliver(params)

    def remove(self, subscription_id: str) -> bool:
        """Stop routing; True when it was routed."""
        self._disposed.append(subscription_id)
        self._early = deque(p for p in self._early if p.get("subscriptionID") != subscription_id)
        return self._routes.pop(subscription_id, None) is not None

    def clear(self) -> None:
        """The session ended: nothing more arrives."""
        self._routes.clear()
        self._early.clear()

    async def deliver(self, params: JSONValue) -> None:
        """One ``subscriptions/notify``; malformed ones are dropped."""
        if not isinstance(params, dict):
            return
        subscription_id = params.get("subscriptionID")
        sequence = params.get("sequence")
        event = params.get("event")
        if (
            not isinstance(subscription_id, str)
            or isinstance(sequence, bool)
            or not isinstance(sequence, int)
            or not isinstance(event, dict)
        ):
            return
        route = self._routes.get(subscription_id)
        if route is None:
            if subscription_id not in self._disposed:
                if len(self._early) >= MAX_EARLY_EVENTS:
                    self._early.popleft()  # its subscription will see the gap
                self._early.append(params)
            return
        if sequence <= route.sequence:
            return  # a repeat: already delivered
        gap = sequence != route.sequence + 1
        route.sequence = sequence
        if route.handler is None:
            return
        try:
            await route.handler(
                event, {"subscriptionID": subscription_id, "sequence": sequence, "gap": gap}
            )
        except Exception:
            logger.exception("subscription handler of %s failed", subscription_id)


class Subscription:
    """One live subscription of the backend: its ``id`` and :meth:`dispose`."""

    def __init__(self, host: Host, subscription_id: str) -> None:
        self._host = host
        self.id = subscription_id

    async def dispose(self) -> None:
        """End it (``lithe/host/subscriptions/dispose``); nothing arrives afterwards."""
        await self._host.subscriptions.dispose(self.id)


class _Subscriptions:
    """``host.subscriptions``."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def dispose(self, subscription_id: str) -> None:
        """End a subscription; also for an unknown or already disposed ID."""
        self._host._backend._router.remove(subscription_id)
        await self._host.request(
            "lithe/host/subscriptions/dispose", {"subscriptionID": subscription_id}
        )


async def subscribe(
    host: Host, method: str, params: JSONObject | None, on_event: EventHandler | None
) -> Subscription:
    """Send ``method`` (answered ``{subscriptionID}``) and route its events to ``on_event``.

    Raises:
        HostError: The host's refusal, or ``plugin.host.failed`` for an answer without a
            ``subscriptionID``.
    """
    result = await host.request(method, params)
    subscription_id = result.get("subscriptionID") if isinstance(result, dict) else None
    if not isinstance(subscription_id, str):
        raise HostError("plugin.host.failed", f"{method} answered no subscriptionID")
    await host._backend._router.add(subscription_id, on_event)
    return Subscription(host, subscription_id)


def _context(context: object) -> JSONObject:
    from ._backend import _wire_context

    return _wire_context(context)


def _object(value: JSONValue, method: str) -> JSONObject:
    if not isinstance(value, dict):
        raise HostError("plugin.host.failed", f"{method} answered something other than an object")
    return value


class _Workspace:
    """``host.workspace``: workspace contexts (grant ``workspace``)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def list_contexts(self) -> JSONObject:
        """``{revision, contexts: [<context>]}`` (no ``stateDirectory``)."""
        method = "lithe/host/workspace/listContexts"
        return _object(await self._host.request(method, {}), method)

    async def get_context(self, context: object) -> JSONObject:
        """``<context>`` with its ``stateDirectory`` (the host creates it)."""
        method = "lithe/host/workspace/getContext"
        return _object(await self._host.request(method, {"context": _context(context)}), method)

    async def get_folders(self, context: object) -> JSONObject:
        """``{folders: [{rootID, name, path?}]}``."""
        method = "lithe/host/workspace/getFolders"
        return _object(await self._host.request(method, {"context": _context(context)}), method)


_T: Final = "lithe/host/terminal/"


class _Terminal:
    """``host.terminal``: plugin-owned native terminals (grant ``terminal.create``)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def create(
        self,
        context: object,
        executable: str,
        arguments: list[str] | None = None,
        *,
        title: str | None = None,
        cwd: JSONObject | None = None,
        env: dict[str, str | None] | None = None,
        show: bool | None = None,
        retained_context_bytes: int | None = None,
        environment: dict[str, str | None] | None = None,
    ) -> JSONObject:
        """``{terminalID, generation: 1}``. ``cwd`` is ``{rootID, path}``; ``env`` is the
        request's ``environment`` (``environment=`` still works, deprecated: one Python name
        per concept, as ``context.run``'s ``env``).

        Raises:
            TypeError: Both ``env`` and ``environment`` were given.
        """
        if environment is not None:
            if env is not None:
                raise TypeError("terminal.create: give env= or environment=, not both")
            warnings.warn(
                "terminal.create: environment= is deprecated; use env=",
                DeprecationWarning,
                stacklevel=2,
            )
            env = environment
        params: JSONObject = {"context": _context(context), "executable": executable}
        if arguments is not None:
            params["arguments"] = list(arguments)
        if title is not None:
            params["title"] = title
        if cwd is not None:
            params["cwd"] = cwd
        if env is not None:
            params["environment"] = dict(env)
        if show is not None:
            params["show"] = show
        if retained_context_bytes is not None:
            params["retainedContextBytes"] = retained_context_bytes
        return _object(await self._host.request(_T + "create", params), _T + "create")

    async def show(self, context: object, terminal_id: str) -> None:
        """Show the terminal (a closed one must be reopened first)."""
        await self._host.request(
            _T + "show", {"context": _context(context), "terminalID": terminal_id}
        )

    async def close(
        self, context: object, terminal_id: str, *, retained_context_bytes: int | None = None
    ) -> JSONObject:
        """``{retainedContextBytes}`` after the process tree ended."""
        params: JSONObject = {"context": _context(context), "terminalID": terminal_id}
        if retained_context_bytes is not None:
            params["retainedContextBytes"] = retained_context_bytes
        return _object(await self._host.request(_T + "close", params), _T + "close")

    async def reopen(
        self, context: object, terminal_id: str, *, show: bool | None = None
    ) -> JSONObject:
        """``{terminalID, generation, restoredContextBytes}``."""
        params: JSONObject = {"context": _context(context), "terminalID": terminal_id}
        if show is not None:
            params["show"] = show
        return _object(await self._host.request(_T + "reopen", params), _T + "reopen")

    async def dispose(self, context: object, terminal_id: str) -> None:
        """Close any live process and forget the handle."""
        await self._host.request(
            _T + "dispose", {"context": _context(context), "terminalID": terminal_id}
        )

    async def on_exit(
        self, context: object, terminal_id: str, on_event: EventHandler | None = None
    ) -> Subscription:
        """Subscribe to the terminal's exits: ``{type: "exit", terminalID, generation,
        exitCode, reason}``, one per generation."""
        return await subscribe(
            self._host,
            _T + "onExit",
            {"context": _context(context), "terminalID": terminal_id},
            on_event,
        )


class _Run:
    """``host.run``: Run sessions the host presents (grant ``run.start``)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def start(
        self,
        context: object,
        label: str,
        process: JSONObject,
        *,
        temporary_files: list[JSONObject] | None = None,
        debug: JSONObject | None = None,
        rerun: JSONObject | None = None,
    ) -> str:
        """Start a run; its ``runID``. ``process`` is ``{executable, arguments,
        workingDirectory, environment}``; the end arrives as ``lithe/host/run/didExit``."""
        params: JSONObject = {"context": _context(context), "label": label, "process": process}
        if temporary_files is not None:
            params["temporaryFiles"] = list(temporary_files)
        if debug is not None:
            params["debug"] = debug
        if rerun is not None:
            params["rerun"] = rerun
        method = "lithe/host/run/start"
        run_id = _object(await self._host.request(method, params), method).get("runID")
        if not isinstance(run_id, str):
            raise HostError("plugin.host.failed", f"{method} answered no runID")
        return run_id

    async def stop(self, *, run_id: str | None = None, session_id: str | None = None) -> None:
        """Stop a run (``run_id``) or a debug session (``session_id``); no context needed."""
        if (run_id is None) == (session_id is None):
            raise PluginSdkError("sdk.host.invalidParams", "give run_id or session_id")
        params: JSONObject = {"runID": run_id} if run_id is not None else {"sessionID": session_id}
        await self._host.request("lithe/host/run/stop", params)
