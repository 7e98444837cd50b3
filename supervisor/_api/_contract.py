"""The plugin contract's requests a backend makes of the host, declared as commands are.

These are not Core commands (``supervisor.commands`` and docs/commands.md leave them out):
a plugin backend sends them over its own connection (the plugin contract "Language server
host methods", "Cross-plugin calls"), and a launch plan carries the backend-resolved launch
(the plugin contract "Backend-resolved launch"). Each is decoded with the Core's decode step
(:func:`~._base.decode_payload`), so its bounds are written once, here, and the parser that
decodes it maps a refusal to the contract's code (``plugin.host.invalidParams``, or
``invalid_request`` with ``details.field`` under ``launch.`` for a launch plan).
``tests/supervisor/core/test_declared_bounds.py`` compares these bounds with what the
relay, the host methods and the launch enforce.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from ._base import JsonObject, JsonValue, NonEmpty, Payload
from ._lsp import DEFAULT_REQUEST_TIMEOUT_MS, MAX_REQUEST_TIMEOUT_MS

__all__ = (
    "DEFAULT_RELAY_TIMEOUT_MS",
    "DEFAULT_RESOLVE_TIMEOUT_MS",
    "MAX_RELAY_TIMEOUT_MS",
    "MAX_RESOLVE_TIMEOUT_MS",
    "MAX_STATUS_PERCENTAGE",
    "MIN_RESOLVE_TIMEOUT_MS",
    "BackendLaunch",
    "HostServerNotify",
    "HostServerRequest",
    "HostServerStatus",
    "InvokeContext",
    "RelayInvoke",
)

#: A plugin's request to its language server: 1 to 300 000 ms, the bound of ``lsp.request``
#: and ``lsp.pluginServerRequest``.
_RequestMilliseconds = Annotated[int, msgspec.Meta(ge=1, le=MAX_REQUEST_TIMEOUT_MS)]

#: A relayed call's deadline (``lithe/host/functions/invoke``): 60 000 ms by default, and a
#: longer one is cut to 600 000 ms (the plugin contract "Cross-plugin calls").
DEFAULT_RELAY_TIMEOUT_MS: Final = 60_000
MAX_RELAY_TIMEOUT_MS: Final = 600_000


class HostServerRequest(Payload, kw_only=True):
    """``lithe/host/languageServer/request`` (the plugin contract "Language server host
    methods"): a backend's request to its own plugin's language server.

    ``serverID`` and ``context`` name the server (shared by the three methods, checked where
    the server is looked up). Every refusal is ``plugin.host.invalidParams``.

    Attributes:
        method: The LSP method.
        params: Its params (an object; absent: ``{}``).
        timeout_milliseconds: Its deadline, 1 to 300 000 ms; absent: 60 000.
    """

    server_id: JsonValue = msgspec.field(name="serverID", default=None)
    context: JsonValue = None
    method: NonEmpty
    params: JsonObject | None = None
    timeout_milliseconds: _RequestMilliseconds = DEFAULT_REQUEST_TIMEOUT_MS


class HostServerNotify(Payload, kw_only=True):
    """``lithe/host/languageServer/notify``: a backend's notification to its language
    server (``serverID`` and ``context`` as :class:`HostServerRequest`)."""

    server_id: JsonValue = msgspec.field(name="serverID", default=None)
    context: JsonValue = None
    method: NonEmpty
    params: JsonObject | None = None


class InvokeContext(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The workspace context a relayed call runs for."""

    context_id: str = msgspec.field(name="contextID")
    generation: int


class RelayInvoke(Payload, kw_only=True):
    """``lithe/host/functions/invoke`` (the plugin contract "Cross-plugin calls"): a
    backend's call of another plugin's function. Every refusal is
    ``plugin.host.invalidParams`` (an unknown field ``unsupportedOption``).

    Attributes:
        plugin_id: The provider plugin.
        function_id: The function (its grammar is checked by the relay).
        context: ``{contextID, generation}``.
        params: The call's params (an object; absent: ``{}``).
        timeout_milliseconds: Its deadline, at least 1 ms; absent: 60 000; above 600 000 it is
            cut to 600 000 (a cap, not a refusal).
        parent_operation_id: The relayed call this one is made for (1 to 128 bytes, checked by
            the relay).
    """

    plugin_id: NonEmpty = msgspec.field(name="pluginID")
    function_id: str = msgspec.field(name="functionID")
    context: InvokeContext
    params: JsonObject = msgspec.field(default_factory=dict)
    timeout_milliseconds: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_RELAY_TIMEOUT_MS
    parent_operation_id: str | None = msgspec.field(name="parentOperationID", default=None)


#: ``setStatus``'s ``percentage``: a whole number from 0 to 100.
MAX_STATUS_PERCENTAGE: Final = 100


class HostServerStatus(Payload, kw_only=True):
    """``lithe/host/languageServer/setStatus``: the plugin's preparation state of the
    server's current generation.

    Attributes:
        state: ``preparing``, ``ready``, ``degraded`` or ``failed``.
        message: What it is doing (cut to 1024 bytes on a character boundary).
        percentage: How far along, 0 to 100.
    """

    server_id: JsonValue = msgspec.field(name="serverID", default=None)
    context: JsonValue = None
    state: Literal["preparing", "ready", "degraded", "failed"]
    message: str | None = None
    percentage: Annotated[int, msgspec.Meta(ge=0, le=MAX_STATUS_PERCENTAGE)] | None = None


#: A backend-resolved launch's deadline (the plugin contract "Backend-resolved launch"):
#: 1 000 to 120 000 ms, 30 000 by default.
MIN_RESOLVE_TIMEOUT_MS: Final = 1000
MAX_RESOLVE_TIMEOUT_MS: Final = 120_000
DEFAULT_RESOLVE_TIMEOUT_MS: Final = 30_000


class BackendLaunch(Payload, kw_only=True):
    """``launchPlan.launch`` of ``kind: "backend"`` (the plugin contract "Backend-resolved
    launch"): the plugin's backend answers the launch. The rest of a launch plan is read by
    the plugin contract's own parser (its refusals are ``plugin.launch.*``).

    Attributes:
        function: The plugin function that resolves the launch (its grammar is checked by
            the parser).
        timeout_milliseconds: How long the backend may take, 1 000 to 120 000 ms; absent:
            30 000.
    """

    kind: Literal["backend"]
    function: str
    timeout_milliseconds: Annotated[
        int, msgspec.Meta(ge=MIN_RESOLVE_TIMEOUT_MS, le=MAX_RESOLVE_TIMEOUT_MS)
    ] = DEFAULT_RESOLVE_TIMEOUT_MS
