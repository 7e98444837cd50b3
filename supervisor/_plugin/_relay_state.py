"""The cross-plugin relay's pure rules: snapshot, request parsing, check order.

the plugin contract "Cross-plugin calls": Discovery and invocation (the check table), The
call chain, The caller field, Hot activation. Nothing here does I/O or keeps time; the
driver (:mod:`supervisor._plugin._relay`) feeds these functions what it knows and acts on
the refusal they raise. Where the reference gives an order of checks, :func:`check_invoke`
checks in that order and the first failing check wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import msgspec

from protocol import CoreError, lookup_error

from .._api._base import decode_payload
from .._api._contract import DEFAULT_RELAY_TIMEOUT_MS, MAX_RELAY_TIMEOUT_MS, RelayInvoke
from .._api._plugin import LspConfigureFunctionRelay
from ._state import is_function_id, json_size
from ._wire import is_parent_operation_id

if TYPE_CHECKING:
    from collections.abc import Collection

    from protocol import JSONObject, JSONValue

__all__ = (
    "DEFAULT_TIMEOUT_MS",
    "GRACE_MS",
    "MAX_CHAIN",
    "MAX_PARAMS_BYTES",
    "MAX_RELAYED_RESULT_BYTES",
    "MAX_RESULT_BYTES",
    "MAX_RUNNING_PER_CALLER",
    "MAX_TIMEOUT_MS",
    "NOT_RUNNING_MESSAGE",
    "PROVIDER_START_MS",
    "ContextEntry",
    "InvokeRequest",
    "PluginEntry",
    "RelayRefusal",
    "RelaySnapshot",
    "check_invoke",
    "check_still_allowed",
    "declares_calls",
    "parse_invoke",
    "parse_providers",
    "parse_snapshot",
    "providers_result",
    "relay_number",
)

#: The call chain: at most 4 calls.
MAX_CHAIN: Final = 4
#: At most 8 relayed calls running per caller plugin.
MAX_RUNNING_PER_CALLER: Final = 8
#: Relayed params bound, bytes (serialized compact JSON).
MAX_PARAMS_BYTES: Final = 256 * 1024
#: A provider's result over this (bytes) is ``plugin.function.invalidResult``.
MAX_RESULT_BYTES: Final = 1024 * 1024
#: A result over this (bytes, and not over :data:`MAX_RESULT_BYTES`) is ``payloadTooLarge``.
MAX_RELAYED_RESULT_BYTES: Final = 256 * 1024
#: ``timeoutMilliseconds`` default and cap, milliseconds (declared with ``RelayInvoke``).
DEFAULT_TIMEOUT_MS: Final = DEFAULT_RELAY_TIMEOUT_MS
MAX_TIMEOUT_MS: Final = MAX_RELAY_TIMEOUT_MS
#: The relay ends a call itself this long after its deadline, milliseconds.
GRACE_MS: Final = 2_000
#: How long a call waits for a provider that is not running, milliseconds.
PROVIDER_START_MS: Final = 30_000
#: The call chain: the message of a ``parentOperationID`` that names no running call.
NOT_RUNNING_MESSAGE: Final = "The call this request belongs to is not running."

_INVOKE: Final = "lithe/host/functions/invoke"
_INVOKE_FIELDS: Final = frozenset(f.encode_name for f in msgspec.structs.fields(RelayInvoke))


def relay_number(code: str) -> int:
    """The JSON-RPC error number of a relay or host code (``-32603`` when it has none).

    The numbers come from the one catalog, :data:`protocol.ERROR_CATALOG`.
    """
    try:
        catalog = lookup_error(code).jsonrpc_code
    except KeyError:
        catalog = None
    return catalog if catalog is not None else -32603


class RelayRefusal(Exception):
    """A relayed request refused or ended by the relay.

    Attributes:
        code: The ``plugin.function.*`` / ``plugin.host.*`` code (``error.data.code``).
        message: The message.
        details: ``error.data.details``, or None.
    """

    def __init__(self, code: str, message: str, details: JSONObject | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    @property
    def number(self) -> int:
        """The JSON-RPC error number."""
        return relay_number(self.code)

    def data(self) -> JSONObject:
        """``error.data``: ``{code, details?}``."""
        data: JSONObject = {"code": self.code}
        if self.details is not None:
            data["details"] = self.details
        return data


# -- the snapshot (Hot activation) -------------------------------------------------------


@dataclass(frozen=True)
class PluginEntry:
    """One plugin of the snapshot: ``exports``/``calls`` map function ID -> version."""

    enabled: bool
    exports: dict[str, int]
    calls: dict[str, int]


@dataclass(frozen=True)
class ContextEntry:
    """One open workspace context: its generation and ``authority`` (``"local"`` or not)."""

    generation: int
    authority: str


@dataclass(frozen=True)
class RelaySnapshot:
    """``lsp.configureFunctionRelay``: plugins by ID and open contexts by ID."""

    plugins: dict[str, PluginEntry]
    contexts: dict[str, ContextEntry]


def _invalid(message: str) -> CoreError:
    return CoreError("invalid_request", f"lsp.configureFunctionRelay: {message}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _versions(value: JSONValue, where: str) -> dict[str, int]:
    # Declaring exports and calls: at most 32 entries, no id twice, versions 1..1000.
    if value is None:
        return {}
    if not isinstance(value, list) or len(value) > 32:
        raise _invalid(f"{where} must be an array of at most 32 entries")
    out: dict[str, int] = {}
    for entry in value:
        if not isinstance(entry, dict):
            raise _invalid(f"{where} entries are objects {{id, version}}")
        function_id, version = entry.get("id"), entry.get("version")
        if not is_function_id(function_id) or not _is_int(version):
            raise _invalid(f"{where} entries need a function id and an integer version")
        assert isinstance(function_id, str)
        assert isinstance(version, int)
        if not 1 <= version <= 1000 or function_id in out:
            raise _invalid(f"{where}: version out of 1..1000 or {function_id} twice")
        out[function_id] = version
    return out


def parse_snapshot(payload: LspConfigureFunctionRelay | JSONObject) -> RelaySnapshot:
    """``lsp.configureFunctionRelay {plugins: [{pluginID, enabled, exports, calls}],
    contexts: [{contextID, generation, authority}]}``, as its declaration decoded it (a JSON
    object is decoded by the declaration first, as the Core does).

    ``exports`` and ``calls`` are ``[{id, version}]`` (an export's ``context`` is accepted
    and must be ``"workspace"`` when given). ``authority`` is ``"local"`` for a local
    workspace; anything else is remote.

    Raises:
        CoreError: ``invalid_request`` for a malformed snapshot or an unknown field.
    """
    declared: LspConfigureFunctionRelay = (
        decode_payload("lsp.configureFunctionRelay", LspConfigureFunctionRelay, payload)
        if isinstance(payload, dict)
        else payload
    )
    plugins: dict[str, PluginEntry] = {}
    for plugin in declared.plugins or ():
        plugin_id = plugin.plugin_id
        if plugin_id in plugins:
            raise _invalid(f"plugin {plugin_id} twice")
        exports = plugin.exports
        if isinstance(exports, list):
            for entry in exports:
                if isinstance(entry, dict) and entry.get("context", "workspace") != "workspace":
                    raise _invalid('an export\'s context must be "workspace"')
            exports = [
                {k: v for k, v in e.items() if k != "context"} if isinstance(e, dict) else e
                for e in exports
            ]
        plugins[plugin_id] = PluginEntry(
            plugin.enabled,
            _versions(exports, f"{plugin_id}.exports"),
            _versions(plugin.calls, f"{plugin_id}.calls"),
        )
    contexts = {
        context.context_id: ContextEntry(context.generation, context.authority)
        for context in declared.contexts or ()
    }
    return RelaySnapshot(plugins, contexts)


# -- requests ----------------------------------------------------------------------------


def _host_refusal(code: str, message: str, details: JSONObject | None = None) -> RelayRefusal:
    return RelayRefusal(code, message, details)


def parse_providers(params: JSONValue) -> str:
    """``lithe/host/functions/providers {functionID}``: the function ID.

    Raises:
        RelayRefusal: -32018 ``plugin.host.unsupportedOption`` for another field;
            -32602 ``plugin.host.invalidParams`` for a malformed ``functionID``.
    """
    if not isinstance(params, dict):
        raise _host_refusal("plugin.host.invalidParams", "params must be an object")
    for name in params:
        if name != "functionID":
            raise _host_refusal(
                "plugin.host.unsupportedOption", f"providers has no field {name}", {"option": name}
            )
    function_id = params.get("functionID")
    if not is_function_id(function_id):
        raise _host_refusal("plugin.host.invalidParams", "functionID is missing or malformed")
    assert isinstance(function_id, str)
    return function_id


@dataclass(frozen=True)
class InvokeRequest:
    """A parsed ``lithe/host/functions/invoke``; ``timeout_ms`` already capped."""

    plugin_id: str
    function_id: str
    context_id: str
    generation: int
    params: JSONObject
    timeout_ms: int
    parent_operation_id: str | None


def parse_invoke(params: JSONValue) -> InvokeRequest:
    """``lithe/host/functions/invoke {pluginID, functionID, context: {contextID, generation},
    params?, timeoutMilliseconds?, parentOperationID?}``.

    A top-level ``caller`` is an unknown field: the relay writes it, a caller cannot.
    ``timeoutMilliseconds`` defaults to :data:`DEFAULT_TIMEOUT_MS` and is capped at
    :data:`MAX_TIMEOUT_MS`.

    Raises:
        RelayRefusal: -32018 ``plugin.host.unsupportedOption`` (``details.option``) for a
            field the method does not define (checked first, so it always names itself);
            -32602 ``plugin.host.invalidParams`` for a malformed field.
    """
    if not isinstance(params, dict):
        raise _host_refusal("plugin.host.invalidParams", "params must be an object")
    for name in params:
        if name not in _INVOKE_FIELDS:
            raise _host_refusal(
                "plugin.host.unsupportedOption", f"invoke has no field {name}", {"option": name}
            )
    try:
        invoke: RelayInvoke = decode_payload(_INVOKE, RelayInvoke, params)
    except CoreError as exc:
        raise _host_refusal("plugin.host.invalidParams", exc.message) from None
    if not is_function_id(invoke.function_id):
        raise _host_refusal("plugin.host.invalidParams", "functionID is malformed")
    parent = invoke.parent_operation_id
    if parent is not None and not is_parent_operation_id(parent):
        raise _host_refusal(
            "plugin.host.invalidParams", "parentOperationID must be a string of 1..128 bytes"
        )
    return InvokeRequest(
        invoke.plugin_id,
        invoke.function_id,
        invoke.context.context_id,
        invoke.context.generation,
        invoke.params,
        min(invoke.timeout_milliseconds, MAX_TIMEOUT_MS),
        parent,
    )


def providers_result(snapshot: RelaySnapshot, caller_id: str, function_id: str) -> JSONObject:
    """``providers``: enabled plugins other than the caller exporting the function.

    Sorted by plugin ID, each ``{pluginID, version}`` with the exported version.

    Raises:
        RelayRefusal: ``plugin.function.notDeclared`` when the caller did not declare it.
    """
    caller = snapshot.plugins.get(caller_id)
    if caller is None or function_id not in caller.calls:
        raise RelayRefusal(
            "plugin.function.notDeclared", f"{caller_id} does not declare {function_id}"
        )
    providers: list[JSONValue] = [
        {"pluginID": plugin_id, "version": entry.exports[function_id]}
        for plugin_id, entry in sorted(snapshot.plugins.items())
        if plugin_id != caller_id and entry.enabled and function_id in entry.exports
    ]
    return {"providers": providers}


def declares_calls(snapshot: RelaySnapshot, plugin_id: str) -> bool:
    """Discovery and invocation: a plugin may use the relay when it declares a call."""
    entry = snapshot.plugins.get(plugin_id)
    return entry is not None and bool(entry.calls)


def _check_manifest(snapshot: RelaySnapshot, caller_id: str, request: InvokeRequest) -> None:
    # The first four rows of the check table: consent on both sides, and the versions.
    caller = snapshot.plugins.get(caller_id)
    if caller is None or not caller.enabled or request.function_id not in caller.calls:
        raise RelayRefusal(
            "plugin.function.notDeclared", f"{caller_id} does not declare {request.function_id}"
        )
    provider = snapshot.plugins.get(request.plugin_id)
    if provider is None or not provider.enabled:
        raise RelayRefusal(
            "plugin.function.providerDisabled", f"{request.plugin_id} is not installed and enabled"
        )
    if request.function_id not in provider.exports:
        raise RelayRefusal(
            "plugin.function.notExported",
            f"{request.plugin_id} does not export {request.function_id}",
        )
    if provider.exports[request.function_id] != caller.calls[request.function_id]:
        raise RelayRefusal(
            "plugin.function.versionMismatch",
            f"{request.function_id}: declared version {caller.calls[request.function_id]}, "
            f"exported version {provider.exports[request.function_id]}",
        )


def _check_context(snapshot: RelaySnapshot, context_id: str, generation: int) -> None:
    context = snapshot.contexts.get(context_id)
    if context is None or context.generation != generation:
        raise RelayRefusal(
            "plugin.host.contextExpired",
            f"context {context_id} is closed or has a newer generation",
        )
    if context.authority != "local":
        raise RelayRefusal(
            "plugin.host.authorityUnsupported", "the relay serves local workspaces only"
        )


def check_invoke(
    snapshot: RelaySnapshot,
    caller_id: str,
    request: InvokeRequest,
    *,
    provider_functions: Collection[str] | None,
    parent_running: bool,
    chain: tuple[str, ...],
    caller_running: int,
) -> None:
    """Discovery and invocation: the relay's checks, in the reference's order.

    Args:
        snapshot: The current snapshot.
        caller_id: The calling session's plugin ID.
        request: The parsed request.
        provider_functions: The functions the provider's running backend has registered,
            or None when it is not running (the call will wait for it, not be refused).
        parent_running: False when ``parentOperationID`` names no call this backend serves.
        chain: The new call's chain before the provider: its parents' chains plus the
            caller (``(caller_id,)`` for a new chain).
        caller_running: Relayed calls of this caller running now.

    Raises:
        RelayRefusal: The first failing check: notDeclared, providerDisabled, notExported
            (also: a running provider that has not registered the function),
            versionMismatch, contextExpired, authorityUnsupported, payloadTooLarge
            (params over 256 KiB), cancelled (parent not running), callCycle (the provider
            is on the chain, the caller included), depthExceeded (over 4 calls),
            tooManyCalls (the 9th running call of this caller).
    """
    _check_manifest(snapshot, caller_id, request)
    if provider_functions is not None and request.function_id not in provider_functions:
        raise RelayRefusal(
            "plugin.function.notExported",
            f"{request.plugin_id} has not registered {request.function_id}",
        )
    _check_context(snapshot, request.context_id, request.generation)
    if json_size(request.params) > MAX_PARAMS_BYTES:
        raise RelayRefusal(
            "plugin.function.payloadTooLarge", f"params are over {MAX_PARAMS_BYTES} bytes"
        )
    if not parent_running:
        raise RelayRefusal("plugin.host.cancelled", NOT_RUNNING_MESSAGE)
    if request.plugin_id in chain:
        raise RelayRefusal(
            "plugin.function.callCycle", f"{request.plugin_id} is already on the call chain"
        )
    # The chain holds one plugin per call it makes: ``chain`` counts the calls so far
    # (each plugin on it made one), the new one is the next.
    if len(chain) > MAX_CHAIN:
        raise RelayRefusal(
            "plugin.function.depthExceeded", f"a call chain has at most {MAX_CHAIN} calls"
        )
    if caller_running >= MAX_RUNNING_PER_CALLER:
        raise RelayRefusal(
            "plugin.function.tooManyCalls",
            f"{caller_id} already has {MAX_RUNNING_PER_CALLER} relayed calls running",
        )


def check_still_allowed(
    snapshot: RelaySnapshot,
    caller_id: str,
    provider_id: str,
    function_id: str,
    context_id: str,
    generation: int,
) -> RelayRefusal | None:
    """Hot activation: the refusal that ends a running call under a new snapshot, or None.

    A caller that stops declaring the call: notDeclared; a provider disabled or
    uninstalled, or that stops exporting the function or changes its version:
    providerDisabled; the context closed or replaced: contextExpired.
    """
    caller = snapshot.plugins.get(caller_id)
    if caller is None or function_id not in caller.calls:
        return RelayRefusal("plugin.function.notDeclared", f"{caller_id} no longer declares it")
    provider = snapshot.plugins.get(provider_id)
    if (
        provider is None
        or not provider.enabled
        or provider.exports.get(function_id) != caller.calls[function_id]
    ):
        return RelayRefusal(
            "plugin.function.providerDisabled", f"{provider_id} no longer provides {function_id}"
        )
    context = snapshot.contexts.get(context_id)
    if context is None or context.generation != generation:
        return RelayRefusal("plugin.host.contextExpired", f"context {context_id} has closed")
    return None
