"""Stable error codes: JSON-RPC/LSP numbers, Core envelope codes, and the one catalog.

Numbers on the wire come from three sources, kept apart here on purpose:

* JSON-RPC 2.0 §5.1 (https://www.jsonrpc.org/specification#error_object) and LSP 3.17
  "ErrorCodes"/"LSPErrorCodes"
  (https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#errorCodes)
  give :class:`ErrorCode`; the tests check every number against ``lsprotocol``.
* the Core API contract "Envelope" gives the string codes of the
  envelope (:class:`CoreErrorCode`).
* the plugin contract "Host services" (the ``plugin.host.*`` table) and "Plugin
  functions" / "Cross-plugin calls" give the ``plugin.*`` codes and their numbers.

:data:`ERROR_CATALOG` is the single table user-facing codes are drawn from; a
:class:`~protocol.CoreError` can only carry a name listed there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = (
    "ERROR_CATALOG",
    "JSONRPC_RESERVED_RANGE",
    "LSP_RESERVED_RANGE",
    "SERVER_ERROR_RANGE",
    "CatalogEntry",
    "CoreErrorCode",
    "ErrorCode",
    "is_jsonrpc_reserved_code",
    "is_lsp_reserved_code",
    "is_server_error_code",
    "lookup_error",
)


class ErrorCode(enum.IntEnum):
    """Numeric ``error.code`` values of JSON-RPC 2.0 §5.1 and LSP 3.17.

    The first five are JSON-RPC's pre-defined errors; the rest are LSP's additions
    ("ErrorCodes" and "LSPErrorCodes" in the LSP 3.17 specification). The numbers are
    those of ``lsprotocol.types.ErrorCodes`` and ``lsprotocol.types.LSPErrorCodes``.
    """

    #: Invalid JSON was received: the body is not UTF-8 or not JSON at all.
    PARSE_ERROR = -32700
    #: The JSON sent is not a valid Request object (wrong ``jsonrpc``, id, method or shape).
    INVALID_REQUEST = -32600
    #: The method does not exist or is not available.
    METHOD_NOT_FOUND = -32601
    #: Invalid method parameters.
    INVALID_PARAMS = -32602
    #: Internal JSON-RPC error: the server failed while handling a valid request.
    INTERNAL_ERROR = -32603
    #: A request arrived before the server answered ``initialize`` (LSP).
    SERVER_NOT_INITIALIZED = -32002
    #: Placeholder LSP defines for an error whose code is unknown.
    UNKNOWN_ERROR_CODE = -32001
    #: The client cancelled the request (``$/cancelRequest``) and the server gave up on it.
    REQUEST_CANCELLED = -32800
    #: The document changed under the request, so its result would be stale; the client
    #: may send it again.
    CONTENT_MODIFIED = -32801
    #: The server cancelled the request itself (only for requests that allow it).
    SERVER_CANCELLED = -32802
    #: The method is known and the params are valid, but the request still failed; the
    #: message says why.
    REQUEST_FAILED = -32803


#: Codes JSON-RPC 2.0 reserves for pre-defined errors, inclusive: ``(low, high)``.
JSONRPC_RESERVED_RANGE: Final = (-32768, -32000)
#: Codes JSON-RPC 2.0 leaves to implementations as "Server error", inclusive.
SERVER_ERROR_RANGE: Final = (-32099, -32000)
#: Codes LSP 3.17 reserves for its own errors (``lspReservedErrorRangeStart`` ..
#: ``lspReservedErrorRangeEnd``), inclusive.
LSP_RESERVED_RANGE: Final = (-32899, -32800)


def is_jsonrpc_reserved_code(code: int) -> bool:
    """Whether ``code`` lies in JSON-RPC's reserved range -32768 .. -32000."""
    return JSONRPC_RESERVED_RANGE[0] <= code <= JSONRPC_RESERVED_RANGE[1]


def is_server_error_code(code: int) -> bool:
    """Whether ``code`` lies in JSON-RPC's implementation-defined range -32099 .. -32000."""
    return SERVER_ERROR_RANGE[0] <= code <= SERVER_ERROR_RANGE[1]


def is_lsp_reserved_code(code: int) -> bool:
    """Whether ``code`` lies in LSP's reserved range -32899 .. -32800."""
    return LSP_RESERVED_RANGE[0] <= code <= LSP_RESERVED_RANGE[1]


class CoreErrorCode(enum.StrEnum):
    """String codes of the Core envelope (the Core API contract "Envelope").

    They travel as ``error.code`` of an envelope response, and in serve mode as
    ``error.data.code`` of a JSON-RPC error.
    """

    #: The request is malformed: bad JSON, a missing or wrongly typed field.
    INVALID_REQUEST = "invalid_request"
    #: The command (or an option of it) is not offered.
    NOT_SUPPORTED = "not_supported"
    #: The named session, job, operation or resource does not exist.
    NOT_FOUND = "not_found"
    #: The caller may not do this (for example an untrusted workspace).
    PERMISSION_DENIED = "permission_denied"
    #: A bound on concurrent work was reached; retry later.
    BUSY = "busy"
    #: The operation was cancelled.
    CANCELLED = "cancelled"
    #: The operation's deadline passed.
    TIMED_OUT = "timed_out"
    #: A process could not be started (missing executable or cwd, exec failure).
    LAUNCH_FAILED = "launch_failed"
    #: A failure inside the supervisor itself.
    INTERNAL = "internal"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One stable error code.

    Attributes:
        name: The stable string code, e.g. ``"invalid_request"`` or
            ``"plugin.host.timeout"``.
        jsonrpc_code: The JSON-RPC ``error.code`` number the code travels with, or
            ``None`` when it has no number of its own (it then travels inside another
            error, e.g. as ``error.data.code``).
        meaning: One sentence for people reading logs and docs.
    """

    name: str
    jsonrpc_code: int | None
    meaning: str


_E = CatalogEntry

#: Every stable error code, in one table. Core codes first (their numbers are ours: the
#: reference gives none, so each takes the closest JSON-RPC/LSP meaning), then
#: ``plugin.host.*`` exactly as the plugin contract's table lists them, then
#: ``plugin.function.*`` (numbers where the plugin contract or the reference SDK's error table,
#: the Node plugin SDK contract, gives one).
ERROR_CATALOG: Final[tuple[CatalogEntry, ...]] = (
    _E("invalid_request", -32602, "The request is malformed or a field is invalid"),
    _E("not_supported", -32601, "The command or option is not supported"),
    _E("not_found", -32803, "The named session, job, operation or resource does not exist"),
    _E("permission_denied", -32803, "The caller is not allowed to do this"),
    _E("busy", -32803, "A bound on concurrent work was reached; retry later"),
    _E("cancelled", -32800, "The operation was cancelled"),
    _E("timed_out", -32803, "The operation's deadline passed"),
    _E("launch_failed", -32803, "A process could not be started"),
    _E("internal", -32603, "A failure inside the supervisor"),
    # the plugin contract "Host services": "Code JSON-RPC Meaning" table.
    _E("plugin.host.unavailable", -32601, "The host offers no such service or method"),
    _E("plugin.host.invalidParams", -32602, "Params malformed or out of range"),
    _E("plugin.host.failed", -32603, "Any other failure"),
    _E("plugin.host.cancelled", -32800, "The request was cancelled"),
    _E(
        "plugin.host.permissionDenied",
        -32010,
        "Permission not declared, or the user withheld consent",
    ),
    _E("plugin.host.contextExpired", -32011, "The context is closed or its generation replaced"),
    _E(
        "plugin.host.authorityUnsupported",
        -32012,
        "The service does not support the workspace authority",
    ),
    _E(
        "plugin.host.versionConflict",
        -32013,
        "A document or resource version differs from the expected one",
    ),
    _E("plugin.host.limitExceeded", -32014, "A host limit was exceeded"),
    _E("plugin.host.timeout", -32015, "The host's deadline passed"),
    _E("plugin.host.notFound", -32016, "The named resource does not exist"),
    _E("plugin.host.readOnly", -32017, "The resource or workspace cannot be written"),
    _E(
        "plugin.host.unsupportedOption",
        -32018,
        "The host does not implement a requested option; details.option names the field",
    ),
    _E(
        "plugin.host.preconditionFailed",
        -32019,
        "A state the request requires does not hold, such as a missing user confirmation",
    ),
    _E("plugin.host.busy", -32020, "The resource is in use; retry later"),
    _E(
        "plugin.host.rateLimited",
        -32021,
        "Too many requests in a period; retry after details.retryAfterMilliseconds when given",
    ),
    _E(
        "plugin.host.languageServerUnavailable",
        -32022,
        "The plugin's language server is not running for the context, or stopped while the "
        "request was in flight",
    ),
    _E(
        "plugin.host.languageServerError",
        -32023,
        "The language server answered with a JSON-RPC error; details is {code, message}",
    ),
    _E(
        "plugin.host.methodNotDeclared",
        -32024,
        "The method, or the workspace/executeCommand command, is not in the server's "
        "declared session",
    ),
    _E(
        "plugin.host.toolUnresolved",
        -32025,
        "A tool definition the request names resolves to no executable for this workspace; "
        "details is {tool, reason}",
    ),
    _E(
        "plugin.host.foreignContribution",
        -32026,
        "The named server or contribution belongs to another plugin",
    ),
    # the plugin contract "Process start" .. "Backend-resolved launch" and "Outcomes and error
    # codes": launch-plan refusals (Core) and start failures (Host); the reference gives no
    # numbers.
    _E("plugin.launch.unavailable", None, "The plugin has no such process to launch"),
    _E(
        "plugin.launch.invalidRequest",
        None,
        "A launch plan request has an unusable directory or an unknown architecture",
    ),
    _E("plugin.launch.notBackend", None, "The language server is not launched by the backend"),
    _E(
        "plugin.launch.invalidResult",
        None,
        "A backend-resolved launch answer is malformed, unknown in a field, or over a bound",
    ),
    _E("plugin.launch.outsidePackage", None, "A packaged path leaves the plugin package"),
    _E("plugin.launch.undeclaredTool", None, "The tool is not one of the plugin's tools"),
    _E(
        "plugin.launch.unwritablePath",
        None,
        "A writable path lies outside the state, workspace state, log and temporary directories",
    ),
    _E("plugin.launch.missing", None, "The server's executable is missing or not executable"),
    _E(
        "plugin.runtime.missing",
        None,
        "A tool a launch needs cannot be found, or is older than its minimumVersion",
    ),
    _E("plugin.runtime.undeclared", None, "A launch names a tool requiresTools does not list"),
    _E("plugin.template.invalid", None, "Unknown, misplaced, or unguarded template variable"),
    # the plugin contract "Plugin functions", "Cross-plugin calls", "Outcomes and error codes".
    _E("plugin.function.invalidReference", None, "The plugin or function ID is malformed"),
    _E("plugin.function.invalidParams", None, "The call's params are not an object"),
    _E(
        "plugin.function.unavailable",
        None,
        "The session belongs to no plugin, or the function protocol was not negotiated",
    ),
    _E("plugin.function.wrongPlugin", None, "The session belongs to another plugin"),
    _E("plugin.function.unknown", None, "The function is not registered"),
    _E("plugin.function.failed", -32070, "The backend's function answered with an error"),
    _E(
        "plugin.function.invalidResult",
        -32071,
        "The function gave no result, or one over 1 MiB serialized",
    ),
    _E("plugin.function.revoked", None, "The function was withdrawn while the call ran"),
    _E(
        "plugin.function.invalidRegistration",
        -32602,
        "A backend's register or unregister request was refused as a whole",
    ),
    _E("plugin.function.notDeclared", -32027, "The caller did not declare the relayed function"),
    _E(
        "plugin.function.notExported",
        -32028,
        "The provider does not export, or has not registered, the function",
    ),
    _E("plugin.function.providerDisabled", -32029, "The provider plugin is not enabled"),
    _E(
        "plugin.function.versionMismatch",
        -32030,
        "The declared and exported versions of the function differ",
    ),
    _E("plugin.function.callCycle", -32065, "The provider is already on the call chain"),
    _E("plugin.function.depthExceeded", -32066, "The call chain would exceed 4 calls"),
    _E("plugin.function.tooManyCalls", -32067, "The caller already has 8 relayed calls running"),
    _E(
        "plugin.function.payloadTooLarge",
        -32068,
        "The relayed params (256 KiB) or result (256 KiB) are too large",
    ),
    _E(
        "plugin.function.providerUnavailable",
        -32069,
        "The provider's backend did not start in time, exited, or withdrew the function",
    ),
    _E(
        "plugin.function.recursiveCall",
        None,
        "A backend asked the host to dispatch a domain operation or function",
    ),
)

_BY_NAME: Final = MappingProxyType({entry.name: entry for entry in ERROR_CATALOG})


def lookup_error(name: str) -> CatalogEntry:
    """The catalog entry for a stable code.

    Args:
        name: A code such as ``"busy"`` or ``"plugin.host.timeout"``; a
            :class:`CoreErrorCode` member works too.

    Returns:
        The entry from :data:`ERROR_CATALOG`.

    Raises:
        KeyError: ``name`` is not in the catalog.
    """
    return _BY_NAME[str(name)]
