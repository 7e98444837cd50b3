"""``lithe/host/languageServer/*``: a backend talks to its own plugin's language servers.

the plugin contract "Language server host methods". Every method takes ``context:
{contextID, generation}`` and ``serverID`` (the languageID of one of the calling plugin's
servers); the server is the ``lsp.*`` session started with ``contribution: {pluginID,
context}`` for that context (:meth:`~supervisor._lsp._service.LspService.host_server`, through
:class:`LanguageServers`):

- ``request {method, params? (object, default {}), timeoutMilliseconds? (1..300000, default
  60000)}`` -> ``{value}``, under the server's session policy;
- ``notify {method, params?}`` -> ``{delivered}`` (false only for
  ``workspace/didChangeConfiguration`` before ``initialized``; sent with it then);
- ``setStatus {state: preparing|ready|degraded|failed, message?, percentage? (0..100)}`` ->
  ``{}``; the message is cut to 1024 bytes on a character boundary.

A field the method does not define is -32018 ``plugin.host.unsupportedOption``; a malformed
one -32602 ``plugin.host.invalidParams``. The backend hears of the server through
``didChangeState`` and ``didReceiveNotification`` (sent by the LSP service).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from protocol import cut_utf8

from .._api._lsp import MAX_REQUEST_TIMEOUT_MS
from ._state import HostRefusal, _refusal

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

    from ._host import HostCall, HostServices

__all__ = ("MAX_STATUS_MESSAGE_BYTES", "LanguageServers", "register")

#: the plugin contract: setStatus's message is cut to 1024 bytes on a character boundary.
MAX_STATUS_MESSAGE_BYTES: Final = 1024
#: request's timeoutMilliseconds: 1 to 300000 (the bound of ``lsp.request``), default 60000.
MAX_TIMEOUT_MS: Final = MAX_REQUEST_TIMEOUT_MS
DEFAULT_TIMEOUT_MS: Final = 60_000
_STATES: Final = frozenset({"preparing", "ready", "degraded", "failed"})
_PREFIX: Final = "lithe/host/languageServer/"


@runtime_checkable
class LanguageServers(Protocol):
    """What these methods need of the Core's ``lsp`` service (``LspService``): the plugin
    runtime stands below the language-server sessions that run it, so it names the
    service by this interface, and a server by what ``host_server`` returns."""

    def host_server(self, plugin_id: str, context: JSONObject, server_id: str) -> Any:
        """The server ``server_id`` of ``plugin_id`` running for ``context``.

        Raises:
            HostRefusal: No such server (``plugin.host.*``).
        """
        ...

    async def host_request(
        self, session: Any, method: str, params: JSONObject, timeout_ms: int
    ) -> JSONValue:
        """``request`` on the server: ``{value}``."""
        ...

    async def host_notify(self, session: Any, method: str, params: JSONObject | None) -> JSONValue:
        """``notify`` on the server: ``{delivered}``."""
        ...

    def set_status(self, session: Any, status: JSONObject) -> None:
        """``setStatus`` of the server's current generation."""
        ...


def register(table: HostServices) -> None:
    """Serve ``request``, ``notify`` and ``setStatus``."""
    table.register(_PREFIX + "request", _request)
    table.register(_PREFIX + "notify", _notify)
    table.register(_PREFIX + "setStatus", _set_status)


def _fields(params: JSONObject, allowed: frozenset[str]) -> None:
    for name in params:
        if name not in allowed | {"context", "serverID"}:
            raise _refusal(
                "plugin.host.unsupportedOption", f"the method has no field {name}", {"option": name}
            )


def _invalid(message: str) -> HostRefusal:
    return _refusal("plugin.host.invalidParams", message)


async def _server(call: HostCall) -> tuple[LanguageServers, Any]:
    server_id = call.params.get("serverID")
    if not isinstance(server_id, str) or not server_id:
        raise _invalid("serverID must be a non-empty string")
    context = call.params.get("context")
    if call.context is None or not isinstance(context, dict):
        raise _invalid("context is required")
    service = await call.host.service("lsp")
    if not isinstance(service, LanguageServers):
        raise _refusal(
            "plugin.host.languageServerUnavailable", "this host runs no language servers"
        )
    return service, service.host_server(call.session.plugin_id, context, server_id)


def _method(params: JSONObject) -> str:
    method = params.get("method")
    if not isinstance(method, str) or not method:
        raise _invalid("method must be a non-empty string")
    return method


def _object(params: JSONObject) -> JSONObject | None:
    value = params.get("params")
    if value is not None and not isinstance(value, dict):
        raise _invalid("params must be an object")
    return value


async def _request(call: HostCall) -> JSONValue:
    _fields(call.params, frozenset({"method", "params", "timeoutMilliseconds"}))
    method = _method(call.params)
    params = _object(call.params) or {}
    timeout = call.params.get("timeoutMilliseconds", DEFAULT_TIMEOUT_MS)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int)
        or not 1 <= timeout <= MAX_TIMEOUT_MS
    ):
        raise _invalid(f"timeoutMilliseconds must be 1 to {MAX_TIMEOUT_MS}")
    service, session = await _server(call)
    return await service.host_request(session, method, params, timeout)


async def _notify(call: HostCall) -> JSONValue:
    _fields(call.params, frozenset({"method", "params"}))
    method = _method(call.params)
    params = _object(call.params)
    service, session = await _server(call)
    return await service.host_notify(session, method, params)


async def _set_status(call: HostCall) -> JSONValue:
    _fields(call.params, frozenset({"state", "message", "percentage"}))
    state = call.params.get("state")
    if state not in _STATES:
        raise _invalid("state must be preparing, ready, degraded or failed")
    assert isinstance(state, str)
    status: JSONObject = {"state": state}
    if "message" in call.params:
        message = call.params["message"]
        if not isinstance(message, str):
            raise _invalid("message must be a string")
        status["message"] = cut_utf8(message, MAX_STATUS_MESSAGE_BYTES)
    if "percentage" in call.params:
        percentage = call.params["percentage"]
        if (
            isinstance(percentage, bool)
            or not isinstance(percentage, int)
            or not 0 <= percentage <= 100
        ):
            raise _invalid("percentage must be a whole number from 0 to 100")
        status["percentage"] = percentage
    service, session = await _server(call)
    service.set_status(session, status)
    return {}
