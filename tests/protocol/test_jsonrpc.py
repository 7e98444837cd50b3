"""JSON-RPC 2.0 message model: decoding, validation, encoding, round-trips."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, strategies as st

from protocol import (
    Batch,
    ErrorCode,
    ErrorObject,
    ErrorResponse,
    Notification,
    RemoteProtocolError,
    Request,
    Response,
    decode_message,
    encode_message,
)
from protocol._errors import MissingResultError

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONValue, Message

VALID: list[tuple[str, bytes, Message]] = [
    ("request", b'{"jsonrpc":"2.0","id":1,"method":"m"}', Request(1, "m")),
    ("string id", b'{"jsonrpc":"2.0","id":"1","method":"m"}', Request("1", "m")),
    ("negative id", b'{"jsonrpc":"2.0","id":-7,"method":"m"}', Request(-7, "m")),
    (
        "big id",
        b'{"jsonrpc":"2.0","id":123456789012345678901234,"method":"m"}',
        Request(123456789012345678901234, "m"),
    ),
    (
        "object params",
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}',
        Request(1, "m", {"a": 1}),
    ),
    (
        "array params",
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":[1,"x"]}',
        Request(1, "m", [1, "x"]),
    ),
    ("empty params", b'{"jsonrpc":"2.0","id":1,"method":"m","params":{}}', Request(1, "m", {})),
    ("null params", b'{"jsonrpc":"2.0","id":1,"method":"m","params":null}', Request(1, "m")),
    ("notification", b'{"jsonrpc":"2.0","method":"exit"}', Notification("exit")),
    (
        "notification params",
        b'{"method":"$/cancelRequest","jsonrpc":"2.0","params":{"id":3}}',
        Notification("$/cancelRequest", {"id": 3}),
    ),
    ("response", b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}', Response(1, {"ok": True})),
    ("null result", b'{"jsonrpc":"2.0","id":"a","result":null}', Response("a", None)),
    (
        "error",
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}',
        ErrorResponse(1, ErrorObject(-32601, "no")),
    ),
    (
        "error data",
        b'{"jsonrpc":"2.0","id":1,"error":{"code":5,"message":"x","data":{"code":"busy"}}}',
        ErrorResponse(1, ErrorObject(5, "x", {"code": "busy"})),
    ),
    (
        "error null id",
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}',
        ErrorResponse(None, ErrorObject(ErrorCode.PARSE_ERROR, "bad")),
    ),
    (
        "extra members ignored",
        b'{"jsonrpc":"2.0","id":1,"method":"m","x-extra":1}',
        Request(1, "m"),
    ),
    (
        "non-ascii",
        '{"jsonrpc":"2.0","method":"é","params":["€"]}'.encode(),
        Notification("é", ["€"]),
    ),
]


@pytest.mark.parametrize(("body", "message"), [v[1:] for v in VALID], ids=[v[0] for v in VALID])
def test_decode_valid(body: bytes, message: Message) -> None:
    decoded = decode_message(body)
    assert decoded == message
    assert type(decoded) is type(message)
    if isinstance(message, Request | Response):
        assert type(decoded.id) is type(message.id)  # type: ignore[union-attr]
    assert decode_message(encode_message(message)) == message


INVALID: list[tuple[str, bytes, ErrorCode, int | str | None]] = [
    ("not json", b"{", ErrorCode.PARSE_ERROR, None),
    ("empty body", b"", ErrorCode.PARSE_ERROR, None),
    ("not utf-8", b'{"jsonrpc":"2.0","method":"\xff"}', ErrorCode.PARSE_ERROR, None),
    ("NaN", b'{"jsonrpc":"2.0","id":1,"result":NaN}', ErrorCode.PARSE_ERROR, None),
    ("Infinity", b"[Infinity]", ErrorCode.PARSE_ERROR, None),
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, ErrorCode.INVALID_REQUEST, None),
    ("trailing garbage", b'{"jsonrpc":"2.0","method":"m"} x', ErrorCode.PARSE_ERROR, None),
    ("empty batch", b"[]", ErrorCode.INVALID_REQUEST, None),
    ("number", b"1", ErrorCode.INVALID_REQUEST, None),
    ("string", b'"x"', ErrorCode.INVALID_REQUEST, None),
    ("null", b"null", ErrorCode.INVALID_REQUEST, None),
    ("no jsonrpc", b'{"id":7,"method":"m"}', ErrorCode.INVALID_REQUEST, 7),
    ("jsonrpc 1.0", b'{"jsonrpc":"1.0","id":7,"method":"m"}', ErrorCode.INVALID_REQUEST, 7),
    ("jsonrpc number", b'{"jsonrpc":2.0,"id":"7","method":"m"}', ErrorCode.INVALID_REQUEST, "7"),
    ("method not a string", b'{"jsonrpc":"2.0","id":7,"method":1}', ErrorCode.INVALID_REQUEST, 7),
    ("method null", b'{"jsonrpc":"2.0","method":null}', ErrorCode.INVALID_REQUEST, None),
    ("bool id", b'{"jsonrpc":"2.0","id":true,"method":"m"}', ErrorCode.INVALID_REQUEST, None),
    ("float id", b'{"jsonrpc":"2.0","id":1.0,"method":"m"}', ErrorCode.INVALID_REQUEST, None),
    (
        "null request id",
        b'{"jsonrpc":"2.0","id":null,"method":"m"}',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    ("object id", b'{"jsonrpc":"2.0","id":{},"method":"m"}', ErrorCode.INVALID_REQUEST, None),
    (
        "params number",
        b'{"jsonrpc":"2.0","id":7,"method":"m","params":1}',
        ErrorCode.INVALID_REQUEST,
        7,
    ),
    (
        "params string",
        b'{"jsonrpc":"2.0","method":"m","params":"x"}',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    (
        "params bool",
        b'{"jsonrpc":"2.0","id":7,"method":"m","params":true}',
        ErrorCode.INVALID_REQUEST,
        7,
    ),
    (
        "method and result",
        b'{"jsonrpc":"2.0","id":7,"method":"m","result":1}',
        ErrorCode.INVALID_REQUEST,
        7,
    ),
    ("neither", b'{"jsonrpc":"2.0","id":7}', ErrorCode.INVALID_REQUEST, 7),
    (
        "result and error",
        b'{"jsonrpc":"2.0","id":7,"result":1,"error":{"code":1,"message":"x"}}',
        ErrorCode.INVALID_REQUEST,
        7,
    ),
    ("response without id", b'{"jsonrpc":"2.0","result":1}', ErrorCode.INVALID_REQUEST, None),
    (
        "response null id",
        b'{"jsonrpc":"2.0","id":null,"result":1}',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    (
        "response float id",
        b'{"jsonrpc":"2.0","id":1.5,"result":1}',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    (
        "error bool id",
        b'{"jsonrpc":"2.0","id":false,"error":{"code":1,"message":"x"}}',
        ErrorCode.INVALID_REQUEST,
        None,
    ),
    ("error not object", b'{"jsonrpc":"2.0","id":7,"error":"x"}', ErrorCode.INVALID_REQUEST, 7),
    (
        "error code missing",
        b'{"jsonrpc":"2.0","id":7,"error":{"message":"x"}}',
        ErrorCode.INVALID_REQUEST,
        7,
    ),
    (
        "error code float",
        b'{"jsonrpc":"2.0","id":7,"error":{"code":1.0,"message":"x"}}',
        ErrorCode.INVALID_REQUEST,
        7,
    ),
    (
        "error code bool",
        b'{"jsonrpc":"2.0","id":7,"error":{"code":true,"message":"x"}}',
        ErrorCode.INVALID_REQUEST,
        7,
    ),
    (
        "error message missing",
        b'{"jsonrpc":"2.0","id":"a","error":{"code":1}}',
        ErrorCode.INVALID_REQUEST,
        "a",
    ),
]


@pytest.mark.parametrize(
    ("body", "code", "request_id"), [v[1:] for v in INVALID], ids=[v[0] for v in INVALID]
)
def test_decode_invalid(body: bytes, code: ErrorCode, request_id: int | str | None) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_message(body)
    assert info.value.error_code is code
    assert info.value.request_id == request_id
    assert type(info.value.request_id) is type(request_id)


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b'{"jsonrpc":"2.0","id":7}', 7),
        (b'{"jsonrpc":"2.0","id":"a"}', "a"),
        (b'{"jsonrpc":"2.0"}', None),
        (b'{"jsonrpc":"2.0","id":null}', None),
        (b'{"jsonrpc":"2.0","id":7,"result":1,"error":{"code":1,"message":"x"}}', None),
    ],
)
def test_reply_without_result_names_its_request(body: bytes, names: int | str | None) -> None:
    """Issue 6: a reply with neither result nor error is still invalid, but the error says
    which request it names, so the receiver can end that request (not so for a null id)."""
    with pytest.raises(RemoteProtocolError) as info:
        decode_message(body)
    assert isinstance(info.value, MissingResultError) == (names is not None)
    if names is not None:
        assert info.value.request_id == names


def test_parse_error_message_names_the_problem() -> None:
    with pytest.raises(RemoteProtocolError, match="not UTF-8"):
        decode_message(b"\xff")
    with pytest.raises(RemoteProtocolError, match="not valid JSON"):
        decode_message(b"{secret")


def test_batch_keeps_order_and_reports_bad_items() -> None:
    body = (
        b'[{"jsonrpc":"2.0","id":1,"method":"a"},1,'
        b'{"jsonrpc":"2.0","method":"b"},{"jsonrpc":"2.0","id":9,"method":2},[]]'
    )
    batch = decode_message(body)
    assert isinstance(batch, Batch)
    first, second, third, fourth, fifth = batch.items
    assert first == Request(1, "a")
    assert isinstance(second, RemoteProtocolError)
    assert second.error_code is ErrorCode.INVALID_REQUEST
    assert third == Notification("b")
    assert isinstance(fourth, RemoteProtocolError)
    assert fourth.request_id == 9
    assert isinstance(fifth, RemoteProtocolError)  # batches do not nest


def test_encode_is_compact_utf8() -> None:
    assert encode_message(Request(1, "m", {"a": [1, 2]})) == (
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[1,2]}}'
    )
    assert encode_message(Notification("é")) == '{"jsonrpc":"2.0","method":"é"}'.encode()


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (Request(1, "m"), {"jsonrpc": "2.0", "id": 1, "method": "m"}),
        (Request(1, "m", []), {"jsonrpc": "2.0", "id": 1, "method": "m", "params": []}),
        (Notification("n"), {"jsonrpc": "2.0", "method": "n"}),
        (Notification("n", {}), {"jsonrpc": "2.0", "method": "n", "params": {}}),
        (Response("x", None), {"jsonrpc": "2.0", "id": "x", "result": None}),
        (
            ErrorResponse(None, ErrorObject(ErrorCode.INVALID_REQUEST, "bad")),
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "bad"}},
        ),
        (
            ErrorResponse(3, ErrorObject(-32603, "bad", [1])),
            {"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "bad", "data": [1]}},
        ),
    ],
)
def test_encode_shapes(message: Message, expected: JSONValue) -> None:
    assert json.loads(encode_message(message)) == expected


def test_encode_batch() -> None:
    batch = Batch((Request(1, "a"), Notification("b")))
    assert decode_message(encode_message(batch)) == batch
    with pytest.raises(ValueError, match="empty"):
        encode_message(Batch(()))
    with pytest.raises(ValueError, match="RemoteProtocolError"):
        encode_message(Batch((RemoteProtocolError("x"),)))


def test_encode_lone_surrogate_falls_back_to_escapes() -> None:
    decoded = decode_message(b'{"jsonrpc":"2.0","method":"m","params":["\\ud800"]}')
    body = encode_message(decoded)
    assert body.isascii()
    assert decode_message(body) == decoded


def test_encode_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(ValueError):  # noqa: PT011 (the stdlib message varies)
        encode_message(Response(1, float("nan")))
    with pytest.raises(TypeError):
        encode_message(Response(1, {"x": object()}))  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="not a JSON-RPC message"):
        encode_message("x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (Request, (True, "m")),
        (Request, (1.0, "m")),
        (Request, (None, "m")),
        (Request, (1, 5)),
        (Request, (1, "m", "params")),
        (Notification, ("m", 5)),
        (Response, (False, 1)),
        (ErrorResponse, (1.5, ErrorObject(1, "x"))),
        (ErrorResponse, (1, {"code": 1})),
        (ErrorObject, (True, "x")),
        (ErrorObject, (1, None)),
    ],
)
def test_constructors_check_types(cls: Callable[..., object], args: tuple[object, ...]) -> None:
    with pytest.raises(TypeError):
        cls(*args)


def test_remote_protocol_error_defaults() -> None:
    exc = RemoteProtocolError("x")
    assert exc.error_code is ErrorCode.INVALID_REQUEST
    assert exc.request_id is None


# --- Hypothesis round-trips ----------------------------------------------------------------

# Text only (no bytes) in this module's strategies: mixing them makes Hypothesis compare
# bytes with str internally, which python -bb turns into an error.
json_values: st.SearchStrategy[JSONValue] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
ids = st.integers() | st.text(max_size=10)
methods = st.text(max_size=20)
params = (
    st.none()
    | st.lists(json_values, max_size=4)
    | st.dictionaries(st.text(), json_values, max_size=4)
)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(Request, ids, methods, params),
    st.builds(Notification, methods, params),
    st.builds(Response, ids, json_values),
    st.builds(
        ErrorResponse,
        st.none() | ids,
        st.builds(ErrorObject, st.integers(), st.text(), json_values),
    ),
)


@given(messages)
def test_round_trip(message: Message) -> None:
    assert decode_message(encode_message(message)) == message


@given(st.lists(messages, min_size=1, max_size=5))
def test_batch_round_trip(items: list[Message]) -> None:
    batch = Batch(tuple(items))
    assert decode_message(encode_message(batch)) == batch


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=10,
    )
)
def test_any_json_decodes_or_raises_remote_error(value: JSONValue) -> None:
    """Arbitrary JSON is either a message or a RemoteProtocolError, never anything else."""
    body = json.dumps(value).encode()
    error: RemoteProtocolError | None = None
    try:
        decode_message(body)
    except RemoteProtocolError as exc:
        error = exc
    assert error is None or error.error_code is ErrorCode.INVALID_REQUEST


def test_nesting_past_the_bound_is_refused_where_it_is_read() -> None:
    """Nesting past the depth bound would fail later, when an answer or event carrying it is
    written (the encoder recurses): refused here instead."""
    body = ('{"jsonrpc":"2.0","id":1,"result":' + "[" * 600 + "]" * 600 + "}").encode()
    with pytest.raises(RemoteProtocolError, match="nests deeper than 512") as info:
        decode_message(body)
    # The document was read before it was refused, so the refusal names its id (issue 13:
    # an answer with id null reaches no request).
    assert info.value.error_code is ErrorCode.INVALID_REQUEST
    assert info.value.request_id == 1


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_nesting_too_deep_for_the_parser_still_names_the_request(depth: int) -> None:
    """Past the parser's own reach (it recursed, or refused) the id is found by a token
    scan, so the refusal still answers the request (it was once answered with id null)."""
    body = (
        '{"jsonrpc":"2.0","params":' + "[" * depth + "]" * depth + ',"id":"late","method":"m"}'
    ).encode()
    with pytest.raises(RemoteProtocolError, match="nests deeper than 512") as info:
        decode_message(body)
    assert info.value.request_id == "late"


def test_a_number_with_too_many_digits_names_the_request_not_python() -> None:
    body = ('{"jsonrpc":"2.0","id":7,"method":"m","params":{"t":' + "9" * 5000 + "}}").encode()
    with pytest.raises(RemoteProtocolError, match="more than 4300 digits") as info:
        decode_message(body)
    assert info.value.request_id == 7
    assert "set_int_max_str_digits" not in str(info.value)


@pytest.mark.parametrize(
    ("body", "found"),
    [
        (b'{"a":{"id":1},"b":[{"id":2}],"id":3}', 3),
        (b'{"id":"x\\"y"}', 'x"y'),
        (b'{"id":true}', None),
        (b'{"id":{"n":1}}', None),
        (b"[1,2]", None),
        (b'{"method":"m"}', None),
    ],
)
def test_the_id_scan_reads_only_a_top_level_scalar_id(body: bytes, found: object) -> None:
    from protocol._json import scan_id

    assert scan_id(body) == found


@pytest.mark.parametrize("number", ["1e400", "-1e999", "123e1000"])
def test_a_number_out_of_range_is_refused_with_finite_only_naming_the_id(number: str) -> None:
    """Read as infinity, no JSON document could carry it on: a peer's message holding one
    is refused (with its id, so its request ends at once); without ``finite_only`` it is read
    as the standard library reads it, for a caller that checks values itself."""
    body = ('{"jsonrpc":"2.0","id":7,"result":[' + number + "]}").encode()
    with pytest.raises(RemoteProtocolError, match="out of range") as info:
        decode_message(body, finite_only=True)
    assert info.value.error_code is ErrorCode.INVALID_REQUEST
    assert info.value.request_id == 7
    lenient = decode_message(body)
    assert isinstance(lenient, Response)
    assert lenient.result == [float(number)]


def test_nesting_up_to_the_bound_and_big_flat_bodies_are_accepted() -> None:
    deep = "[" * 500 + "]" * 500
    message = decode_message(('{"jsonrpc":"2.0","id":1,"result":' + deep + "}").encode())
    assert isinstance(message, Response)
    wide = json.dumps({"jsonrpc": "2.0", "id": 2, "result": [{"a": [i]} for i in range(2000)]})
    message = decode_message(wide.encode())
    assert isinstance(message, Response)
    assert isinstance(message.result, list)
    assert len(message.result) == 2000
