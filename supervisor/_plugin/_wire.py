"""The plugin protocol's wire rules, one copy for both ends (no I/O, no Trio).

The host side (:mod:`supervisor._plugin._state`, the plugin session) and the backend SDK
(:mod:`supervisor.plugin_sdk`) check the same identifiers against the same bounds, so what
one end sends the other accepts: a rule that drifts between the two drops messages silently
(a ``lithe/log`` fact whose ``operationId`` the SDK allows and the host refuses is lost
whole). The ``plugin.*`` error numbers are read from the one catalog,
:data:`protocol.ERROR_CATALOG`, never copied.

Reference: the plugin contract "Plugin functions" (Negotiation, References and IDs,
Invocation, Progress, Host services), "Cross-plugin calls" (``parentOperationID``) and
"Structured plugin diagnostics" (``lithe/log``).
"""

from __future__ import annotations

import re
from typing import Final, TypeGuard

from protocol import ERROR_CATALOG

__all__ = (
    "ERROR_MESSAGE_BYTES",
    "FUNCTION_ID_BYTES",
    "FUNCTION_RESULT_BYTES",
    "LOG_OPERATION_BYTES",
    "MAX_FUNCTIONS",
    "MAX_PENDING_HOST_REQUESTS",
    "OFFERED_VERSIONS",
    "OPERATION_ID_BYTES",
    "PLUGIN_ERRORS",
    "PLUGIN_ERROR_CODE_BYTES",
    "PROGRESS_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "is_function_id",
    "is_log_code",
    "is_operation_id",
    "is_parent_operation_id",
    "is_plugin_error_code",
    "plugin_error_name",
)

#: The only version of ``litheFunctions`` / ``litheLogging`` (Negotiation).
PROTOCOL_VERSION: Final = 0
#: The versions the host offers in ``initialize``.
OFFERED_VERSIONS: Final = (PROTOCOL_VERSION,)
#: References and IDs: a function ID is at most 128 UTF-8 bytes; a session holds at most 256.
FUNCTION_ID_BYTES: Final = 128
MAX_FUNCTIONS: Final = 256
#: Invocation: a result serializes to at most 1 MiB; messages of a failed call are cut to
#: 1024 UTF-8 bytes; ``pluginErrorCode`` is an identifier of at most 64 bytes.
FUNCTION_RESULT_BYTES: Final = 1024 * 1024
ERROR_MESSAGE_BYTES: Final = 1024
PLUGIN_ERROR_CODE_BYTES: Final = 64
#: Progress: messages are cut to 1024 UTF-8 bytes.
PROGRESS_MESSAGE_BYTES: Final = 1024
#: Host services: at most 16 unanswered host requests per session.
MAX_PENDING_HOST_REQUESTS: Final = 16
#: Structured plugin diagnostics: an ``operation`` naming a function holds at most 64 bytes
#: (a longer registered ID is logged as ``function-call``).
LOG_OPERATION_BYTES: Final = 64
#: A wire operation ID (``operationId``, ``parentOperationID``) holds 1..128 bytes.
OPERATION_ID_BYTES: Final = 128

_SEGMENT = r"[a-z][A-Za-z0-9]*"
_FUNCTION_ID: Final = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*")
#: An identifier (``pluginErrorCode``): a letter or ``_``, then letters, digits, ``_.-``.
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
#: ``lithe/log`` ``code``: 1-64 ASCII letters, digits or ``._:/-$``.
_LOG_CODE: Final = re.compile(r"[A-Za-z0-9._:/\-$]{1,64}")
#: "1-128 ASCII token bytes": visible ASCII without the double quote (a token never holds
#: a quote, a space or a control character).
_TOKEN: Final = re.compile(r"[!#-~]{1,128}")

#: Every ``plugin.host.*`` and ``plugin.function.*`` code that travels with a JSON-RPC
#: number, in catalog order: what a backend can see from the host or the relay.
PLUGIN_ERRORS: Final[dict[str, int]] = {
    entry.name: entry.jsonrpc_code
    for entry in ERROR_CATALOG
    if entry.name.startswith(("plugin.host.", "plugin.function."))
    and entry.jsonrpc_code is not None
}
_NAME_BY_NUMBER: Final[dict[int, str]] = {}
for _name, _number in PLUGIN_ERRORS.items():
    # The first code of a number names it: -32602 is plugin.host.invalidParams, not the
    # later plugin.function.invalidRegistration that shares the number.
    _NAME_BY_NUMBER.setdefault(_number, _name)
del _name, _number


def plugin_error_name(number: int) -> str | None:
    """The ``plugin.*`` code a JSON-RPC error number stands for when ``data.code`` is absent.

    Returns:
        The first catalog code with that number, or None when no ``plugin.*`` code has it.
    """
    return _NAME_BY_NUMBER.get(number)


def is_function_id(value: object) -> TypeGuard[str]:
    """References and IDs: dot-separated lowerCamelCase segments, at most 128 bytes.

    ``snapshot.refresh`` and ``tool.runTests`` qualify; ``Snapshot``, ``a..b``, ``a.`` and
    ``a-b`` do not.
    """
    return (
        isinstance(value, str)
        and len(value.encode("utf-8", "surrogatepass")) <= FUNCTION_ID_BYTES
        and _FUNCTION_ID.fullmatch(value) is not None
    )


def is_plugin_error_code(value: object) -> TypeGuard[str]:
    """Invocation: a ``pluginErrorCode`` is an identifier of at most 64 bytes."""
    return (
        isinstance(value, str)
        and len(value.encode("utf-8", "surrogatepass")) <= PLUGIN_ERROR_CODE_BYTES
        and _IDENTIFIER.fullmatch(value) is not None
    )


def is_log_code(value: object) -> TypeGuard[str]:
    """Structured plugin diagnostics: a ``lithe/log`` code, 1-64 ASCII ``[A-Za-z0-9._:/-$]``."""
    return isinstance(value, str) and _LOG_CODE.fullmatch(value) is not None


def is_operation_id(value: object) -> TypeGuard[str]:
    """Structured plugin diagnostics: an ``operationId``, 1-128 ASCII token bytes."""
    return isinstance(value, str) and _TOKEN.fullmatch(value) is not None


def is_parent_operation_id(value: object) -> TypeGuard[str]:
    """Cross-plugin calls: a ``parentOperationID`` is any string of 1-128 UTF-8 bytes."""
    return (
        isinstance(value, str)
        and 1 <= len(value.encode("utf-8", "surrogatepass")) <= OPERATION_ID_BYTES
    )
