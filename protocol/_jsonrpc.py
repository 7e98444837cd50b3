"""JSON-RPC 2.0 messages: a frozen value type per message kind, decoding and encoding.

Contract (JSON-RPC 2.0, https://www.jsonrpc.org/specification, as LSP 3.17 uses it):

* A body decodes to exactly one :class:`Request`, :class:`Notification`,
  :class:`Response`, :class:`ErrorResponse`, or a :class:`Batch` of them. Bytes that are
  not UTF-8 JSON raise :class:`RemoteProtocolError` with ``PARSE_ERROR``; JSON of the
  wrong shape raises it with ``INVALID_REQUEST`` and the message's id in
  ``request_id`` when that id could be read.
* ``"jsonrpc"`` must be ``"2.0"``. Request ids are ``int`` or ``str`` (LSP's
  ``integer | string``): ``null``, booleans and floats (even ``1.0``) are refused. Ids
  keep their JSON type. A response needs an id; an error response may have ``null``
  when the request's id could not be read.
* ``params``, when given, is an object or an array. Absent params are ``None``; a
  ``"params": null`` some clients send is read as absent (so it encodes back as
  absent). ``error.data`` follows the same rule. Everything else round-trips exactly.
* Members the specification does not define are ignored.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from . import _json
from ._codes import ErrorCode
from ._errors import MissingResultError, RemoteProtocolError
from ._payload import json_type

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._types import JSONObject, JSONValue, RequestId

__all__ = (
    "Batch",
    "ErrorObject",
    "ErrorResponse",
    "Message",
    "Notification",
    "Params",
    "Request",
    "Response",
    "decode_message",
    "encode_message",
    "encode_request",
    # For the envelope (protocol._envelope); not re-exported by the package.
    "read_json",
)

#: Structured ``params``: a JSON object (by-name) or array (by-position).
Params: TypeAlias = "JSONObject | list[JSONValue]"


def _is_id(value: object) -> bool:
    # type() rather than isinstance(): bool is an int subclass and is not an id.
    return type(value) is int or type(value) is str


def _check_id(value: object, *, allow_none: bool = False) -> None:
    if not (_is_id(value) or (allow_none and value is None)):
        kinds = "an int, a str or None" if allow_none else "an int or a str"
        raise TypeError(f"id must be {kinds}, not {type(value).__name__}")


def _check_params(params: object) -> None:
    if params is not None and not isinstance(params, dict | list):
        raise TypeError(f"params must be a dict, a list or None, not {type(params).__name__}")


def _check_method(method: object) -> None:
    if not isinstance(method, str):
        raise TypeError(f"method must be a str, not {type(method).__name__}")


@dataclass(frozen=True, slots=True)
class Request:
    """A call that expects exactly one :class:`Response` or :class:`ErrorResponse`.

    Attributes:
        id: The request id (``int`` or ``str``).
        method: The method name.
        params: An object or array, or ``None`` when absent.

    Raises:
        TypeError: A field has the wrong type.
    """

    id: RequestId
    method: str
    params: Params | None = None

    def __post_init__(self) -> None:
        _check_id(self.id)
        _check_method(self.method)
        _check_params(self.params)


@dataclass(frozen=True, slots=True)
class Notification:
    """A call without an id, never answered.

    Attributes:
        method: The method name.
        params: An object or array, or ``None`` when absent.

    Raises:
        TypeError: A field has the wrong type.
    """

    method: str
    params: Params | None = None

    def __post_init__(self) -> None:
        _check_method(self.method)
        _check_params(self.params)


@dataclass(frozen=True, slots=True)
class Response:
    """A successful reply.

    Attributes:
        id: The id of the request it answers.
        result: The result; ``None`` is JSON ``null``, a valid result.

    Raises:
        TypeError: ``id`` is not an ``int`` or ``str``.
    """

    id: RequestId
    result: JSONValue

    def __post_init__(self) -> None:
        _check_id(self.id)


@dataclass(frozen=True, slots=True)
class ErrorObject:
    """The ``error`` member of an :class:`ErrorResponse` (JSON-RPC 2.0 §5.1).

    Attributes:
        code: The error number; :class:`~protocol.ErrorCode` for the standard ones. It
            stays a plain ``int`` after decoding, since peers use codes we do not know.
        message: A short description.
        data: Additional information, or ``None`` when absent.

    Raises:
        TypeError: ``code`` is not an ``int`` (booleans are refused) or ``message`` is
            not a ``str``.
    """

    code: int
    message: str
    data: JSONValue = None

    def __post_init__(self) -> None:
        code: object = self.code
        if not isinstance(code, int) or isinstance(code, bool):
            raise TypeError(f"code must be an int, not {type(code).__name__}")
        if not isinstance(self.message, str):
            raise TypeError(f"message must be a str, not {type(self.message).__name__}")


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """A failed reply.

    Attributes:
        id: The id of the request it answers, or ``None`` when that id could not be read
            (a parse error or an invalid request).
        error: The error.

    Raises:
        TypeError: A field has the wrong type.
    """

    id: RequestId | None
    error: ErrorObject

    def __post_init__(self) -> None:
        _check_id(self.id, allow_none=True)
        if not isinstance(self.error, ErrorObject):
            raise TypeError(f"error must be an ErrorObject, not {type(self.error).__name__}")


#: One JSON-RPC message.
Message: TypeAlias = "Request | Notification | Response | ErrorResponse"


@dataclass(frozen=True, slots=True)
class Batch:
    """A JSON array of messages sent as one body.

    Attributes:
        items: The messages in order. A decoded batch keeps one
            :class:`RemoteProtocolError` in place of each item that was invalid, so
            the receiver can answer the valid ones and report the others.
    """

    items: tuple[Message | RemoteProtocolError, ...]


_MESSAGE_TYPES = (Request, Notification, Response, ErrorResponse)


def _invalid(message: str, request_id: RequestId | None = None) -> RemoteProtocolError:
    return RemoteProtocolError(message, error_code=ErrorCode.INVALID_REQUEST, request_id=request_id)


#: What a member that is not in the message reads as (``"params": null`` is ``None``).
_ABSENT: Any = object()
_new = object.__new__
# Frozen dataclasses refuse ``setattr``; their slot descriptors do not. The decoder builds
# messages through them because every field was checked already: ``__init__`` (with its
# ``__post_init__`` checks) costs as much as the whole msgspec parse.
_SET_REQUEST_ID = Request.__dict__["id"].__set__
_SET_REQUEST_METHOD = Request.__dict__["method"].__set__
_SET_REQUEST_PARAMS = Request.__dict__["params"].__set__
_SET_NOTIFICATION_METHOD = Notification.__dict__["method"].__set__
_SET_NOTIFICATION_PARAMS = Notification.__dict__["params"].__set__
_SET_RESPONSE_ID = Response.__dict__["id"].__set__
_SET_RESPONSE_RESULT = Response.__dict__["result"].__set__


def _decode_one(obj: JSONValue) -> Message:
    if not isinstance(obj, dict):
        raise _invalid(f"a message must be a JSON object, not {json_type(obj)}")
    get = obj.get
    return _decode_members(
        get("jsonrpc", _ABSENT),
        get("id", _ABSENT),
        get("method", _ABSENT),
        get("params", _ABSENT),
        get("result", _ABSENT),
        get("error", _ABSENT),
    )


def _decode_members(
    jsonrpc: Any, raw_id: Any, method: Any, params: Any, result: Any, error: Any
) -> Message:
    """Check the members of one message object (``_ABSENT`` where missing) and build it."""
    id_type = type(raw_id)
    readable_id = raw_id if id_type is int or id_type is str else None
    if jsonrpc != "2.0":
        raise _invalid('"jsonrpc" must be "2.0"', readable_id)
    if method is not _ABSENT:
        if type(method) is not str:
            raise _invalid('"method" must be a string', readable_id)
        if result is not _ABSENT or error is not _ABSENT:
            raise _invalid('a request must not carry "result" or "error"', readable_id)
        params_type = type(params)
        if params_type is not dict and params_type is not list:
            if params is not _ABSENT and params is not None:
                raise _invalid('"params" must be an object or an array', readable_id)
            params = None
        if raw_id is _ABSENT:
            notification: Notification = _new(Notification)
            _SET_NOTIFICATION_METHOD(notification, method)
            _SET_NOTIFICATION_PARAMS(notification, params)
            return notification
        if readable_id is None:
            raise _invalid('a request "id" must be an integer or a string')
        request: Request = _new(Request)
        _SET_REQUEST_ID(request, readable_id)
        _SET_REQUEST_METHOD(request, method)
        _SET_REQUEST_PARAMS(request, params)
        return request
    has_result = result is not _ABSENT
    if has_result == (error is not _ABSENT):
        if not has_result and readable_id is not None:
            # Neither: it still names its request, which the receiver can end.
            raise MissingResultError(
                'a response must carry exactly one of "result" and "error"',
                request_id=readable_id,
            )
        raise _invalid('a response must carry exactly one of "result" and "error"', readable_id)
    if raw_id is _ABSENT:
        raise _invalid('a response must carry an "id"')
    if has_result:
        if readable_id is None:
            raise _invalid('a response "id" must be an integer or a string')
        response: Response = _new(Response)
        _SET_RESPONSE_ID(response, readable_id)
        _SET_RESPONSE_RESULT(response, result)
        return response
    if raw_id is not None and readable_id is None:
        raise _invalid('an error response "id" must be an integer, a string or null')
    if not isinstance(error, dict):
        raise _invalid('"error" must be an object', readable_id)
    code = error.get("code")
    if type(code) is not int:
        raise _invalid('"error.code" must be an integer', readable_id)
    message = error.get("message")
    if not isinstance(message, str):
        raise _invalid('"error.message" must be a string', readable_id)
    return ErrorResponse(readable_id, ErrorObject(code, message, error.get("data")))


def _message_decoder() -> Callable[[bytes | bytearray | memoryview], Any] | None:
    """msgspec's decoder of one valid message object into its six members.

    None without msgspec. The types let msgspec's C parser check the envelope
    (``jsonrpc`` is ``"2.0"``, an id is an int or a string, a method a string, params an
    object, an array or null); values are decoded exactly as :func:`protocol._json.loads`
    decodes them with msgspec. Unknown members are refused rather than skipped: msgspec
    skips them without checking that they are UTF-8, which the full path would refuse.
    Whatever this decoder refuses takes the full path, so results and errors stay its own.
    """
    try:
        import msgspec
    except ImportError:  # optional: without it every body takes the full path
        return None
    wire = msgspec.defstruct(
        "_WireMessage",
        [
            ("jsonrpc", Literal["2.0"]),
            ("id", int | str, _ABSENT),
            ("method", str, _ABSENT),
            ("params", dict[str, Any] | list[Any] | None, None),
            ("result", Any, _ABSENT),
            ("error", Any, _ABSENT),
        ],
        forbid_unknown_fields=True,
        # Never kept past decode_message(), so it can not be part of a reference cycle.
        gc=False,
    )
    return msgspec.json.Decoder(wire).decode


_MESSAGE_DECODER = _message_decoder()
_MAX_DEPTH = _json.MAX_DEPTH


def _out_of_range(data: bytes | str) -> RemoteProtocolError:
    """The refusal of a message holding a number out of range, naming its id when it has one
    (the document is read again, leniently, only to find the id)."""
    try:
        obj = _json.loads(data)
    except ValueError:
        obj = None
    request_id = obj.get("id") if isinstance(obj, dict) else None
    return RemoteProtocolError(
        "a number in the message is out of range",
        request_id=request_id if isinstance(request_id, int | str) and _is_id(request_id) else None,
    )


def _scanned_id(data: bytes | str) -> int | str | None:
    """The id of a message the parser could not read whole, when a token scan finds one."""
    raw = _json.scan_id(data if isinstance(data, bytes) else data.encode("utf-8", "replace"))
    return raw if isinstance(raw, int | str) and _is_id(raw) else None


def read_json(data: bytes | str, *, finite_only: bool = False) -> JSONValue:
    """Parse one JSON document a peer sent, or refuse it in the words of its JSON-RPC error.

    The one reading of a body that ``supervisor serve`` answers -32700 or -32600 for, shared by
    :func:`decode_message` and the Core's envelope (:func:`~protocol.parse_envelope`), so a
    request that can not be read is refused with the same cause and code on both roads.

    Args:
        data: UTF-8 JSON bytes, or text.
        finite_only: As :func:`decode_message`.

    Returns:
        The document.

    Raises:
        RemoteProtocolError: ``PARSE_ERROR`` (id None) when the bytes are not UTF-8 or the
            text is not JSON (``NaN`` included); ``INVALID_REQUEST`` when it is JSON that
            can not be used: nested deeper than 512 levels, a number with more digits than
            Python converts, or (``finite_only``) a number out of range, with the
            document's id when it could be read.
    """
    try:
        value = _json.loads(data, finite_only=finite_only)
    except _json.NestingTooDeep as exc:
        # Read, then refused: the refusal can still name the request (JSON-RPC 2.0 §5: the
        # id is null only when it could not be detected).
        raw_id = _json.id_of(exc.document)
        raise _invalid(
            f"the message nests deeper than {_json.MAX_DEPTH} levels",
            raw_id if isinstance(raw_id, int | str) and _is_id(raw_id) else None,
        ) from None
    except _json.TooDeepToRead:
        raise _invalid(
            f"the message nests deeper than {_json.MAX_DEPTH} levels", _scanned_id(data)
        ) from None
    except ValueError as exc:
        if finite_only and type(exc) is ValueError and "out of range" in str(exc):
            raise _out_of_range(data) from None
        if type(exc) is ValueError and "int_max_str_digits" in str(exc):
            # Python's own bound on converting digits to an int: valid JSON, unreadable here.
            raise _invalid(
                f"a number in the message has more than {sys.get_int_max_str_digits()} digits",
                _scanned_id(data),
            ) from None
        # UnicodeDecodeError is a ValueError too; say which without echoing the bytes (the
        # parser's own messages give a position, ours a reason: neither quotes content).
        if isinstance(exc, UnicodeDecodeError):
            what = "not UTF-8"
        elif type(exc) is ValueError:
            what = f"not usable JSON: {exc}"
        else:
            what = "not valid JSON"
        raise RemoteProtocolError(
            f"message body is {what}", error_code=ErrorCode.PARSE_ERROR
        ) from None
    return value


def decode_message(
    body: bytes | bytearray | memoryview, *, finite_only: bool = False
) -> Message | Batch:
    """Decode one message body (a :class:`~protocol.Frame`'s ``body``).

    Args:
        body: UTF-8 JSON bytes.
        finite_only: Refuse a message holding a number no float holds (``1e400`` reads as
            infinity, which no answer or event could carry on): for a peer whose messages
            are passed on, where no later check of the values runs.

    Returns:
        The message, or a :class:`Batch` for a JSON array.

    Raises:
        RemoteProtocolError: ``PARSE_ERROR`` when the bytes are not UTF-8 or not JSON;
            ``INVALID_REQUEST`` when the JSON is not a valid message (``request_id`` is
            the message's id when it could be read), is an empty array, or
            (``finite_only``) holds a number out of range, with its id.
    """
    # A body with more brackets than the depth bound takes the full path, which checks the
    # depth: one no longer than the bound can not have more (a bracket is a byte), and for
    # the others two scans in C spare nearly every one the walk. msgspec reads any buffer,
    # so a body is copied to bytes only for the full path.
    if _MESSAGE_DECODER is not None and (
        len(body) <= _MAX_DEPTH or not _json.may_nest_deeper(bytes(body))
    ):
        try:
            wire = _MESSAGE_DECODER(body)
        except Exception:  # a batch, an unknown member, or what msgspec refuses: full path
            pass
        else:
            # The shapes of nearly all traffic are built here without the call into
            # _decode_members (a third of the cost); it checks everything else.
            method = wire.method
            if method is not _ABSENT:
                if wire.result is _ABSENT and wire.error is _ABSENT:
                    request_id = wire.id
                    if request_id is _ABSENT:
                        notification: Notification = _new(Notification)
                        _SET_NOTIFICATION_METHOD(notification, method)
                        _SET_NOTIFICATION_PARAMS(notification, wire.params)
                        return notification
                    request: Request = _new(Request)
                    _SET_REQUEST_ID(request, request_id)
                    _SET_REQUEST_METHOD(request, method)
                    _SET_REQUEST_PARAMS(request, wire.params)
                    return request
            elif wire.error is _ABSENT and wire.result is not _ABSENT and wire.id is not _ABSENT:
                response: Response = _new(Response)
                _SET_RESPONSE_ID(response, wire.id)
                _SET_RESPONSE_RESULT(response, wire.result)
                return response
            params = wire.params
            return _decode_members(
                wire.jsonrpc,
                wire.id,
                method,
                _ABSENT if params is None else params,
                wire.result,
                wire.error,
            )
    obj = read_json(body if type(body) is bytes else bytes(body), finite_only=finite_only)
    if not isinstance(obj, list):
        return _decode_one(obj)
    if not obj:
        raise _invalid("a batch must not be empty")
    items: list[Message | RemoteProtocolError] = []
    for item in obj:
        try:
            items.append(_decode_one(item))
        except RemoteProtocolError as exc:
            items.append(exc)
    return Batch(tuple(items))


def _to_json(message: Message) -> JSONObject:
    if isinstance(message, Request):
        out: JSONObject = {"jsonrpc": "2.0", "id": message.id, "method": message.method}
        if message.params is not None:
            out["params"] = message.params
        return out
    if isinstance(message, Notification):
        out = {"jsonrpc": "2.0", "method": message.method}
        if message.params is not None:
            out["params"] = message.params
        return out
    if isinstance(message, Response):
        return {"jsonrpc": "2.0", "id": message.id, "result": message.result}
    if isinstance(message, ErrorResponse):
        error: JSONObject = {"code": int(message.error.code), "message": message.error.message}
        if message.error.data is not None:
            error["data"] = message.error.data
        return {"jsonrpc": "2.0", "id": message.id, "error": error}
    raise TypeError(f"not a JSON-RPC message: {type(message).__name__}")


def encode_message(message: Message | Batch) -> bytes:
    """Encode a message (or batch) as a compact UTF-8 JSON body.

    Args:
        message: The message. Frame the result with :func:`~protocol.encode_frame`.

    Returns:
        The body bytes.

    Raises:
        TypeError: ``message`` is not a message, or holds a value JSON cannot represent.
        ValueError: A batch is empty or holds a :class:`RemoteProtocolError`, or a value
            is a NaN or infinite float.
    """
    if isinstance(message, Batch):
        if not message.items:
            raise ValueError("a batch must not be empty")
        parts: list[JSONValue] = []
        for item in message.items:
            if not isinstance(item, _MESSAGE_TYPES):
                raise ValueError(f"a batch to send holds a {type(item).__name__}")
            parts.append(_to_json(item))
        return _json.dumps(parts)
    return _json.dumps(_to_json(message))


def encode_request(request_id: RequestId, method: str, params: Params | None = None) -> bytes:
    """``encode_message(Request(request_id, method, params))`` without building the object.

    The same checks and the same bytes; it exists because an endpoint encodes one request
    per call and the value object costs as much as the rest of the encoding.

    Raises:
        TypeError: A field has the wrong type (as :class:`Request` raises it).
    """
    if type(request_id) is not int and type(request_id) is not str:
        _check_id(request_id)
    if type(method) is not str:
        _check_method(method)
    if params is None:
        return _json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method})
    _check_params(params)
    return _json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
