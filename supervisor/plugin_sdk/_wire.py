"""Pure wire rules of the backend side of the plugin-function protocol (no I/O, no Trio).

Everything here is a function of its arguments, so it is tested without processes:
identifier checks, the byte cuts of messages, progress normalization, negotiation of the
``initialize`` answer, the host-error table and the ``lithe/log`` fact builder.

Reference: plugin-contract.md "Plugin functions" (Negotiation, References and IDs,
Registration and withdrawal, Invocation, Progress), "Cross-plugin calls" (the relay codes),
"Structured plugin diagnostics" (``lithe/log``); plugin-sdk-node.md "API" and "Results and
errors".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = (
    "ERROR_MESSAGE_BYTES",
    "FUNCTION_RESULT_BYTES",
    "HOST_ERRORS",
    "LOG_OPERATION_BYTES",
    "MAX_FUNCTIONS",
    "MAX_PENDING_HOST_REQUESTS",
    "PROGRESS_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "Negotiated",
    "cut_utf8",
    "encode_result",
    "is_function_id",
    "is_log_code",
    "is_operation_id",
    "is_plugin_error_code",
    "log_fact",
    "log_operation",
    "negotiate",
    "normalize_progress",
)

#: The only version of litheFunctions / litheLogging (the version of ``backend``).
PROTOCOL_VERSION: Final = 0
#: A function ID: at most this many UTF-8 bytes ("References and IDs").
FUNCTION_ID_BYTES: Final = 128
#: A session holds at most this many functions ("References and IDs").
MAX_FUNCTIONS: Final = 256
#: A function result serializes to at most this many bytes ("Invocation").
FUNCTION_RESULT_BYTES: Final = 1024 * 1024
#: Progress messages are cut to this many UTF-8 bytes ("Progress").
PROGRESS_MESSAGE_BYTES: Final = 1024
#: Error messages sent for a failed call are cut to this many UTF-8 bytes ("Invocation").
ERROR_MESSAGE_BYTES: Final = 1024
#: Unanswered host requests at once; further ones wait in the SDK (plugin-sdk-node.md).
MAX_PENDING_HOST_REQUESTS: Final = 16
#: A ``lithe/log`` operation naming a function holds at most this many bytes; a longer
#: registered ID is logged as ``function-call`` ("Structured plugin diagnostics").
LOG_OPERATION_BYTES: Final = 64
#: A ``PluginError`` code holds at most this many bytes (plugin-sdk-node.md).
PLUGIN_ERROR_CODE_BYTES: Final = 64
#: A wire operation ID holds 1..128 ASCII token bytes ("Structured plugin diagnostics").
OPERATION_ID_BYTES: Final = 128

_SEGMENT = r"[a-z][A-Za-z0-9]*"
_FUNCTION_ID_RE: Final = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*")
_PLUGIN_ERROR_CODE_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")
_LOG_CODE_RE: Final = re.compile(r"[A-Za-z0-9._:/$-]{1,64}")
_TOKEN_RE: Final = re.compile(r"[!-~]{1,128}")

#: Every host and relay failure code a backend can see, with its JSON-RPC number
#: (plugin-sdk-node.md "Calling other plugins" table and plugin-contract.md "Host
#: services"). ``HostError.code`` is one of these keys when the host names a known code.
HOST_ERRORS: Final[dict[str, int]] = {
    "plugin.host.unavailable": -32601,
    "plugin.host.invalidParams": -32602,
    "plugin.host.failed": -32603,
    "plugin.host.cancelled": -32800,
    "plugin.host.permissionDenied": -32010,
    "plugin.host.contextExpired": -32011,
    "plugin.host.authorityUnsupported": -32012,
    "plugin.host.versionConflict": -32013,
    "plugin.host.limitExceeded": -32014,
    "plugin.host.timeout": -32015,
    "plugin.host.notFound": -32016,
    "plugin.host.readOnly": -32017,
    "plugin.host.unsupportedOption": -32018,
    "plugin.host.preconditionFailed": -32019,
    "plugin.host.busy": -32020,
    "plugin.host.rateLimited": -32021,
    "plugin.function.notDeclared": -32027,
    "plugin.function.notExported": -32028,
    "plugin.function.providerDisabled": -32029,
    "plugin.function.versionMismatch": -32030,
    "plugin.function.callCycle": -32065,
    "plugin.function.depthExceeded": -32066,
    "plugin.function.tooManyCalls": -32067,
    "plugin.function.payloadTooLarge": -32068,
    "plugin.function.providerUnavailable": -32069,
    "plugin.function.failed": -32070,
    "plugin.function.invalidResult": -32071,
}


def cut_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, on a character boundary.

    Args:
        text: Any string.
        limit: Bytes, >= 0.

    Returns:
        The longest prefix of ``text`` whose UTF-8 encoding fits in ``limit`` bytes.
    """
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    # Dropping a partial sequence at the cut: "ignore" removes exactly the bytes of the
    # character that did not fit, never a whole earlier one.
    return data[:limit].decode("utf-8", "ignore")


def is_function_id(value: object) -> bool:
    """True for dot-separated lowerCamelCase segments of at most 128 bytes.

    ``snapshot.refresh`` and ``tool.runTests`` qualify; ``Snapshot``, ``a..b``, ``a.`` and
    ``a-b`` do not (plugin-contract.md "References and IDs").
    """
    return (
        isinstance(value, str)
        and len(value.encode("utf-8")) <= FUNCTION_ID_BYTES
        and _FUNCTION_ID_RE.fullmatch(value) is not None
    )


def is_plugin_error_code(value: object) -> bool:
    """True for ``[A-Za-z][A-Za-z0-9._-]*`` of at most 64 bytes (a ``PluginError`` code)."""
    return (
        isinstance(value, str)
        and len(value) <= PLUGIN_ERROR_CODE_BYTES
        and _PLUGIN_ERROR_CODE_RE.fullmatch(value) is not None
    )


def is_log_code(value: object) -> bool:
    """True for a ``lithe/log`` code: 1-64 ASCII letters, digits or ``._:/-$``."""
    return isinstance(value, str) and _LOG_CODE_RE.fullmatch(value) is not None


def is_operation_id(value: object) -> bool:
    """True for a wire operation ID usable as ``operationId`` / ``parentOperationID``.

    1-128 printable ASCII bytes without spaces ("Structured plugin diagnostics" and
    "Cross-plugin calls" bound it at 128 bytes).
    """
    return isinstance(value, str) and _TOKEN_RE.fullmatch(value) is not None


def normalize_progress(message: str | None, percentage: float | None) -> JSONObject:
    """The ``lithe/function/progress`` fields for one report, without ``operationID``.

    Args:
        message: Shown to the user; cut to 1024 UTF-8 bytes. None: not sent.
        percentage: Any number; rounded to a whole number and clamped to 0..100. None or
            NaN: not sent.

    Returns:
        ``{message?, percentage?}``.
    """
    report: JSONObject = {}
    if message is not None:
        report["message"] = cut_utf8(str(message), PROGRESS_MESSAGE_BYTES)
    if percentage is not None and not isinstance(percentage, bool):
        value = float(percentage)
        if value == value:  # NaN is no percentage at all
            report["percentage"] = max(0, min(100, round(value)))
    return report


def encode_result(value: object) -> int:
    """Check that ``value`` is a JSON result within the 1 MiB bound; return its size.

    Args:
        value: What a function handler returned.

    Returns:
        The serialized size in bytes.

    Raises:
        ValueError: ``value`` is not JSON (a set, NaN, a cycle, ...) or serializes to
            more than 1 MiB.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError("the result is not JSON") from exc
    size = len(text.encode("utf-8"))
    if size > FUNCTION_RESULT_BYTES:
        raise ValueError(f"the result is {size} bytes, over {FUNCTION_RESULT_BYTES}")
    return size


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What one ``initialize`` negotiated.

    Attributes:
        functions_version: 0 when the host offered litheFunctions version 0, else None.
        logging_version: 0 when the host offered litheLogging version 0, else None.
    """

    functions_version: int | None
    logging_version: int | None


def _offers(experimental: object, name: str) -> bool:
    if not isinstance(experimental, dict):
        return False
    offer = experimental.get(name)
    if not isinstance(offer, dict):
        return False
    versions = offer.get("versions")
    return isinstance(versions, list) and any(
        type(v) is int and v == PROTOCOL_VERSION for v in versions
    )


def negotiate(params: JSONValue | None) -> Negotiated:
    """Read the host's offers from ``initialize`` params.

    Args:
        params: The ``initialize`` params; ``capabilities.experimental.litheFunctions``
            and ``.litheLogging`` are ``{versions: [0, ...]}`` offers.

    Returns:
        The versions this SDK will answer.
    """
    capabilities = params.get("capabilities") if isinstance(params, dict) else None
    experimental = capabilities.get("experimental") if isinstance(capabilities, dict) else None
    return Negotiated(
        functions_version=PROTOCOL_VERSION if _offers(experimental, "litheFunctions") else None,
        logging_version=PROTOCOL_VERSION if _offers(experimental, "litheLogging") else None,
    )


def log_operation(function_id: str) -> str:
    """The ``lithe/log`` operation for a function: its ID, or ``function-call`` past 64 bytes."""
    if len(function_id.encode("utf-8")) <= LOG_OPERATION_BYTES:
        return function_id
    return "function-call"


def log_fact(
    kind: str,
    operation: str,
    *,
    duration_ms: int | None = None,
    code: str | None = None,
    count: int | None = None,
    operation_id: str | None = None,
) -> JSONObject:
    """Build ``lithe/log`` params, checked against "Structured plugin diagnostics".

    Args:
        kind: ``operationFinished``, ``operationFailed``, ``degraded`` or ``recovered``.
        operation: A function ID of at most 64 bytes, ``function-call``, or an SDK stage
            (``initialize``, ``shutdown``, ``notification``, ``result-encoding``).
        duration_ms: Milliseconds, required for finished/failed, absent otherwise.
        code: Stable category, required except for ``operationFinished``.
        count: Optional nonnegative item count.
        operation_id: The wire operation ID of the call, when it is a valid token.

    Returns:
        The params, holding only the contract's fields.

    Raises:
        ValueError: A field breaks the contract (so no malformed fact is ever sent).
    """
    if kind not in ("operationFinished", "operationFailed", "degraded", "recovered"):
        raise ValueError(f"unknown fact kind {kind!r}")
    if not operation or len(operation.encode("utf-8")) > LOG_OPERATION_BYTES:
        raise ValueError("operation must be 1..64 bytes")
    fact: JSONObject = {"kind": kind, "operation": operation}
    timed = kind in ("operationFinished", "operationFailed")
    if timed != (duration_ms is not None):
        raise ValueError("durationMs is required for finished/failed facts and only for them")
    if duration_ms is not None:
        if not 0 <= duration_ms <= 9007199254740991:
            raise ValueError("durationMs out of range")
        fact["durationMs"] = int(duration_ms)
    if kind == "operationFinished":
        if code is not None and not is_log_code(code):
            raise ValueError("invalid code")
    elif not is_log_code(code):
        raise ValueError("a stable code of 1..64 ASCII bytes is required")
    if code is not None:
        fact["code"] = code
    if count is not None:
        if isinstance(count, bool) or not 0 <= count <= 9007199254740991:
            raise ValueError("count must be a nonnegative safe integer")
        fact["count"] = count
    if operation_id is not None and is_operation_id(operation_id):
        fact["operationId"] = operation_id
    return fact
