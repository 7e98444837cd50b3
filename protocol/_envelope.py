"""The Core request envelope (the Core API contract "Envelope").

Request: ``{id, operationId?, timeoutMilliseconds?, command, payload}``. Response:
``{id, ok: true, data}`` or ``{id, ok: false, error: {code, message, details?}}``.

Rules implemented by :func:`parse_envelope`:

* Bytes or text that can not be read are ``invalid_request`` with the cause and the
  JSON-RPC code ``supervisor serve`` answers such a request with (one function reads both:
  :func:`~protocol._jsonrpc.read_json`): "message body is not usable JSON: NaN is not
  valid JSON", "message body is not UTF-8", "the message nests deeper than 512 levels"...,
  ``details.jsonrpcCode`` -32700 (not JSON) or -32600 (JSON that can not be used; the
  response then carries the request's ``id`` when it could be read).
* JSON that is not an object is ``invalid_request`` with the message "Invalid JSON
  request" (the Core API contract's example response).
* ``id`` is a non-empty string or an integer; it keeps its JSON type in the response.
  It may be absent (or ``null``).
* ``operationId`` defaults to ``id`` (as text) when ``id`` is present; when neither is
  given a unique one is generated (``"op-"`` and 32 hex digits), so every operation can
  be cancelled.
* A positive integer ``timeoutMilliseconds`` (at most :data:`~protocol.MAX_MILLISECONDS`)
  sets a deadline; 0, ``null`` or absence set none; negative or larger numbers,
  non-integers and booleans are ``invalid_request``.
* ``command`` is a non-empty string; ``payload`` defaults to ``{}`` (also for ``null``)
  and must be an object.
* Other members are ignored, for compatibility with newer hosts.

Every refusal is an :class:`EnvelopeError` carrying the ``id`` when it could be read, so
the caller can answer with the right id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._errors import CoreError, RemoteProtocolError
from ._jsonrpc import read_json
from ._payload import MAX_MILLISECONDS

if TYPE_CHECKING:
    from ._types import JSONObject, JSONValue, RequestId

__all__ = ("EnvelopeError", "EnvelopeRequest", "envelope_error", "envelope_ok", "parse_envelope")

_INVALID_JSON = "Invalid JSON request"


class EnvelopeError(CoreError):
    """A malformed envelope (code ``invalid_request``).

    Args:
        message: What is wrong.
        request_id: The envelope's ``id`` when it could be read, else ``None``.
        details: Optional details, e.g. ``{"field": "timeoutMilliseconds"}``.

    Attributes:
        request_id: As above; answer with :func:`envelope_error` under this id.
    """

    request_id: RequestId | None

    def __init__(
        self,
        message: str,
        *,
        request_id: RequestId | None = None,
        details: JSONObject | None = None,
    ) -> None:
        super().__init__("invalid_request", message, details)
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class EnvelopeRequest:
    """A validated envelope request.

    Attributes:
        id: The request id (``str`` or ``int``), or ``None`` when the request had none.
        operation_id: The operation id to register and cancel by; never empty.
        timeout_ms: The deadline in milliseconds from now, or ``None`` for none.
        command: The command name, e.g. ``"process.run"``.
        payload: The command's arguments (a JSON object, ``{}`` by default).
    """

    id: RequestId | None
    operation_id: str
    timeout_ms: int | None
    command: str
    payload: JSONObject


def _field_error(field: str, message: str, request_id: RequestId | None) -> EnvelopeError:
    return EnvelopeError(message, request_id=request_id, details={"field": field})


def parse_envelope(data: str | bytes | JSONObject) -> EnvelopeRequest:
    """Validate an envelope request.

    Args:
        data: The request as JSON text, UTF-8 bytes, or an already parsed object.

    Returns:
        The validated request.

    Raises:
        EnvelopeError: The request is not valid (code ``invalid_request``; see the module
            docstring); ``request_id`` is its ``id`` when that could be read.
        TypeError: ``data`` is not ``str``, ``bytes`` or ``dict``.
    """
    if isinstance(data, dict):
        obj: JSONValue = data
    elif isinstance(data, str | bytes):
        try:
            obj = read_json(data)
        except RemoteProtocolError as exc:
            # Refused as serve refuses it; the answer still names the request when its id
            # was read and is one an envelope may have.
            read_id = exc.request_id
            raise EnvelopeError(
                str(exc),
                request_id=read_id if read_id != "" else None,
                details={"jsonrpcCode": int(exc.error_code)},
            ) from None
    else:
        raise TypeError(f"parse_envelope() takes str, bytes or dict, not {type(data).__name__}")
    if not isinstance(obj, dict):
        raise EnvelopeError(_INVALID_JSON)

    raw_id = obj.get("id")
    request_id: RequestId | None
    if raw_id is None:
        request_id = None
    elif (isinstance(raw_id, str) and raw_id) or (
        isinstance(raw_id, int) and not isinstance(raw_id, bool)
    ):
        request_id = raw_id
    else:
        raise _field_error("id", "id must be a non-empty string or an integer", None)

    raw_operation_id = obj.get("operationId")
    if raw_operation_id is None:
        operation_id = f"op-{uuid.uuid4().hex}" if request_id is None else str(request_id)
    elif isinstance(raw_operation_id, str) and raw_operation_id:
        operation_id = raw_operation_id
    else:
        raise _field_error("operationId", "operationId must be a non-empty string", request_id)

    raw_timeout = obj.get("timeoutMilliseconds")
    timeout_ms: int | None
    if raw_timeout is None:
        timeout_ms = None
    elif (
        isinstance(raw_timeout, int)
        and not isinstance(raw_timeout, bool)
        and 0 <= raw_timeout <= MAX_MILLISECONDS
    ):
        timeout_ms = raw_timeout or None
    else:
        raise _field_error(
            "timeoutMilliseconds",
            f"timeoutMilliseconds must be an integer from 0 to {MAX_MILLISECONDS} "
            "(0 means no deadline)",
            request_id,
        )

    command = obj.get("command")
    if not isinstance(command, str) or not command:
        raise _field_error("command", "command must be a non-empty string", request_id)

    payload = obj.get("payload")
    if payload is None:
        payload = {}
    elif not isinstance(payload, dict):
        raise _field_error("payload", "payload must be a JSON object", request_id)

    return EnvelopeRequest(request_id, operation_id, timeout_ms, command, payload)


def envelope_ok(request_id: RequestId | None, data: JSONValue) -> JSONObject:
    """Build a success response ``{id, ok: true, data}``.

    Args:
        request_id: The request's id (``None`` is written as ``null``).
        data: The command's result.
    """
    return {"id": request_id, "ok": True, "data": data}


def envelope_error(request_id: RequestId | None, error: CoreError) -> JSONObject:
    """Build a failure response ``{id, ok: false, error: {code, message, details?}}``.

    Args:
        request_id: The request's id (``None`` is written as ``null``).
        error: The failure.

    Raises:
        TypeError: ``error`` is not a :class:`CoreError`.
    """
    if not isinstance(error, CoreError):
        raise TypeError(f"error must be a CoreError, not {type(error).__name__}")
    return {"id": request_id, "ok": False, "error": error.to_json()}
