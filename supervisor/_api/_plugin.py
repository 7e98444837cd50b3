"""Plugin-owned language servers: functions, host requests, the cross-plugin relay
(the plugin contract); these commands live under ``lsp.*``."""

from __future__ import annotations

from typing import Annotated, Final, TypeAlias

import msgspec

from ._base import (
    Count,
    JsonObject,
    JsonValue,
    Milliseconds,
    NonEmpty,
    Ordered,
    Payload,
    RefusedAs,
    Result,
)
from ._lsp import (
    MAX_REQUEST_TIMEOUT_MS,
    DeliveredResult,
    OperationResult,
)

__all__ = (
    "COMMANDS",
    "INVALID_PARAMS",
    "ORDER",
    "PluginParams",
    "PluginRequestMilliseconds",
)

#: The plugin contract's refusal of a malformed field of a plugin's request.
INVALID_PARAMS: Final = RefusedAs("plugin.host.invalidParams")
#: A plugin's request to its language server waits 1 to 300 000 ms (the bound of
#: ``lsp.request``; the plugin contract "Language server host methods"); 60 000 by default
#: (``DEFAULT_REQUEST_TIMEOUT_MS``).
PluginRequestMilliseconds: TypeAlias = Annotated[
    int, msgspec.Meta(ge=1, le=MAX_REQUEST_TIMEOUT_MS), INVALID_PARAMS
]
#: A plugin's request params: an object (the plugin contract's refusal otherwise).
PluginParams: TypeAlias = Annotated[JsonObject, INVALID_PARAMS]


class LspFunctionRequest(Payload, kw_only=True):
    """``lsp.functionRequest``: call a plugin function; it ends in one ``requestCompleted``.

    ``function``, ``params`` and ``context`` are checked by the plugin contract's own
    refusals (the plugin contract "Invocation"); ``timeoutMilliseconds`` is capped at one
    hour and defaults to the session's request timeout.

    Attributes:
        function: The function to call: ``{pluginID, functionID}`` (plugin contract).
        context: The workspace context it runs for: ``{contextID, generation}``.
    """

    session_id: NonEmpty
    operation_id: NonEmpty | None = None
    function: JsonValue = None
    params: JsonValue = None
    timeout_milliseconds: Milliseconds | None = None
    context: JsonValue = None


class LspHostResponse(Payload, kw_only=True):
    """``lsp.hostResponse``: answer a ``hostRequest`` event with ``result`` or ``error``.

    Attributes:
        result: The answer to send the backend (JSON).
        error: Or the error to send it: ``{code, message, data?}`` (with ``error``, a ``result``
            of null is not sent).
    """

    session_id: NonEmpty
    host_request_id: NonEmpty = msgspec.field(name="hostRequestID")
    result: JsonValue = None
    error: JsonObject | None = None


class HostRequestResult(Result, kw_only=True):
    """``lsp.hostResponse``: the answer was handed to the backend's pending host request."""

    host_request_id: str = msgspec.field(name="hostRequestID")


class LspHostNotify(Payload, kw_only=True):
    """``lsp.hostNotify``: a host notification to a plugin backend (the plugin contract
    "Host notifications")."""

    session_id: NonEmpty
    method: NonEmpty
    params: JsonValue = None


class RelayPlugin(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One plugin in the relay's snapshot.

    Attributes:
        plugin_id: The plugin's id.
        exports: The functions it offers other plugins: ``[{id, version}]`` (at most 32).
        calls: The functions of other plugins it may call: ``[{id, version}]`` (at most 32).
    """

    plugin_id: NonEmpty = msgspec.field(name="pluginID")
    enabled: bool = True
    exports: JsonValue = None
    calls: JsonValue = None


class RelayContext(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One open workspace context in the relay's snapshot.

    Attributes:
        context_id: The context's id.
        authority: ``local`` for a local workspace; anything else is remote.
    """

    context_id: NonEmpty = msgspec.field(name="contextID")
    generation: Count
    authority: str = "local"


class LspConfigureFunctionRelay(Payload, kw_only=True):
    """``lsp.configureFunctionRelay``: the relay's snapshot, effective at once.

    Attributes:
        plugins: Every plugin that takes part, with what it exports and calls.
        contexts: The open workspace contexts.
    """

    plugins: list[RelayPlugin] | None = None
    contexts: list[RelayContext] | None = None


class RelayResult(Result, kw_only=True):
    """Counts: plugins and contexts in the snapshot, relayed calls it ended.

    Attributes:
        plugins: Plugins in the snapshot.
        contexts: Contexts in the snapshot.
        ended_calls: Relayed calls running that the snapshot no longer allows, ended now.
    """

    plugins: int
    contexts: int
    ended_calls: int


class LspPluginServerRequest(Payload, kw_only=True):
    """``lsp.pluginServerRequest``: a plugin backend's request to its language server.

    A bad ``params``/``timeoutMilliseconds`` is ``plugin.host.invalidParams`` and an
    unknown session ``plugin.host.languageServerUnavailable`` (the plugin contract's codes):
    the two fields are declared :data:`INVALID_PARAMS`, the session is checked by the command.

    Attributes:
        params: The request's params (an object; absent: ``{}``).
        timeout_milliseconds: Its deadline, 1 to 300 000 ms; absent: 60 000.
    """

    session_id: JsonValue = None
    plugin_id: str | None = None
    method: NonEmpty
    params: PluginParams | None = None
    timeout_milliseconds: PluginRequestMilliseconds | None = None


class PluginValueResult(Result, kw_only=True):
    """``lsp.pluginServerRequest``: the server's answer, as the plugin contract gives it.

    Attributes:
        value: The server's result.
    """

    value: JsonValue


class LspPluginServerNotify(Payload, kw_only=True):
    """``lsp.pluginServerNotify``: a plugin backend's notification to its language server."""

    session_id: JsonValue = None
    plugin_id: str | None = None
    method: NonEmpty
    params: JsonValue = None


class WorkspaceSetContexts(Payload, kw_only=True):
    """``workspace.setContexts``: the open workspace contexts, as the embedding host declares
    them (the plugin contract "Workspace contexts"; each entry checked by the command:
    ``{contextID, name?, authority?, folders: [{path, name?}]}``).

    Attributes:
        contexts: Every open context: ``{contextID, name?, authority?, folders: [{path,
            name?}]}`` (what is not listed is closed).
    """

    contexts: JsonValue


class WorkspaceListContexts(Payload, kw_only=True):
    """``workspace.listContexts``: the open contexts as they are."""


class WorkspaceContextsResult(Result, kw_only=True):
    """``{revision, contexts: [{contextID, generation}]}``.

    Attributes:
        revision: The contexts' revision: one more per change.
        contexts: The open contexts: ``{contextID, generation}``.
    """

    revision: int
    contexts: list[JsonObject]


_ON_SESSION = Ordered("lsp", "sessionId")
#: The order rule (:class:`~._base.Ordered`): a plugin backend is a language-server session,
#: so what is sent to it shares that session's line with the ``lsp.*`` commands; workspace
#: context changes take effect in arrival order.
ORDER = {
    "workspace.setContexts": Ordered("workspace"),
    "lsp.functionRequest": Ordered("lsp", "sessionId", named=True),
    "lsp.hostResponse": _ON_SESSION,
    "lsp.hostNotify": _ON_SESSION,
    "lsp.configureFunctionRelay": _ON_SESSION,
    "lsp.pluginServerRequest": _ON_SESSION,
    "lsp.pluginServerNotify": _ON_SESSION,
}

COMMANDS = {
    "workspace.setContexts": (WorkspaceSetContexts, WorkspaceContextsResult),
    "workspace.listContexts": (WorkspaceListContexts, WorkspaceContextsResult),
    "lsp.functionRequest": (LspFunctionRequest, OperationResult),
    "lsp.hostResponse": (LspHostResponse, HostRequestResult),
    "lsp.hostNotify": (LspHostNotify, DeliveredResult),
    "lsp.configureFunctionRelay": (LspConfigureFunctionRelay, RelayResult),
    "lsp.pluginServerRequest": (LspPluginServerRequest, PluginValueResult),
    "lsp.pluginServerNotify": (LspPluginServerNotify, DeliveredResult),
}
