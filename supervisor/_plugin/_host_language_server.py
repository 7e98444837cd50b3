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

Each method's params are declared (``HostServerRequest``, ``HostServerNotify``,
``HostServerStatus`` in ``supervisor._api._plugin``, which holds the bounds) and decoded as
the Core decodes a command. A field the method does not define is -32018
``plugin.host.unsupportedOption``; a malformed one -32602 ``plugin.host.invalidParams``.
The backend hears of the server through ``didChangeState`` and ``didReceiveNotification``
(sent by the LSP service).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, runtime_checkable

import msgspec

from protocol import CoreError, cut_utf8

from .._api._base import decode_payload
from .._api._contract import HostServerNotify, HostServerRequest, HostServerStatus
from ._state import HostRefusal, _refusal

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

    from ._host import HostCall, HostServices

__all__ = ("MAX_STATUS_MESSAGE_BYTES", "LanguageServers", "register")

#: the plugin contract: setStatus's message is cut to 1024 bytes on a character boundary.
MAX_STATUS_MESSAGE_BYTES: Final = 1024
_T = TypeVar("_T", bound=msgspec.Struct)
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


def _decoded(call: HostCall, tp: type[_T]) -> _T:
    """``call.params`` as its declaration: an unknown field is ``unsupportedOption`` (named
    first, so it always names itself), any other bad field ``invalidParams``."""
    _fields(call.params, frozenset(f.encode_name for f in msgspec.structs.fields(tp)))
    try:
        value: _T = decode_payload(call.method, tp, call.params)
    except CoreError as exc:
        raise _invalid(exc.message) from None
    return value


async def _request(call: HostCall) -> JSONValue:
    request = _decoded(call, HostServerRequest)
    service, session = await _server(call)
    return await service.host_request(
        session, request.method, request.params or {}, request.timeout_milliseconds
    )


async def _notify(call: HostCall) -> JSONValue:
    notify = _decoded(call, HostServerNotify)
    service, session = await _server(call)
    return await service.host_notify(session, notify.method, notify.params)


async def _set_status(call: HostCall) -> JSONValue:
    declared = _decoded(call, HostServerStatus)
    status: JSONObject = {"state": declared.state}
    if declared.message is not None:
        status["message"] = cut_utf8(declared.message, MAX_STATUS_MESSAGE_BYTES)
    if declared.percentage is not None:
        status["percentage"] = declared.percentage
    service, session = await _server(call)
    service.set_status(session, status)
    return {}
