"""Pure wire rules of the backend side of the plugin-function protocol (no I/O, no Trio).

Everything here is a function of its arguments, so it is tested without processes:
progress normalization, negotiation of the ``initialize`` answer and the ``lithe/log`` fact
builder. The identifier rules, bounds and error numbers are the host's own, from
:mod:`supervisor._plugin._wire`, so both ends of the wire check alike.

Reference: the plugin contract "Plugin functions" (Negotiation, References and IDs,
Registration and withdrawal, Invocation, Progress), "Cross-plugin calls" (the relay codes),
"Structured plugin diagnostics" (``lithe/log``); the Node plugin SDK contract "API" and "Results and
errors".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from .._boundary import cut_utf8
from .._plugin._wire import (
    ERROR_MESSAGE_BYTES,
    FUNCTION_RESULT_BYTES,
    LOG_OPERATION_BYTES,
    MAX_FUNCTIONS,
    MAX_PENDING_HOST_REQUESTS,
    PLUGIN_ERRORS,
    PROGRESS_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    is_function_id,
    is_log_code,
    is_operation_id,
    is_parent_operation_id,
    is_plugin_error_code,
)

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
    "is_parent_operation_id",
    "is_plugin_error_code",
    "log_fact",
    "log_operation",
    "negotiate",
    "normalize_progress",
)

#: Every host and relay failure code a backend can see, with its JSON-RPC number, read from
#: the error catalog (the plugin contract "Host services" and "Cross-plugin calls";
#: the Node plugin SDK contract "Calling other plugins"). ``HostError.code`` is one of these keys
#: when the host names a known code.
HOST_ERRORS: Final[dict[str, int]] = dict(PLUGIN_ERRORS)


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
