"""Issue 8 fast paths in protocol/: they must agree exactly with the general code.

- ``_json.loads`` parses with msgspec when it is installed and hands everything msgspec
  refuses to the standard library: results and errors are the standard library's.
- ``encode_request`` gives the bytes (and the TypeErrors) of ``encode_message(Request())``.
- ``decode_message`` builds the common shapes from msgspec's members itself and hands the
  rest to the general code, so it decodes and refuses exactly as the general code would.
"""

from __future__ import annotations

import decimal
import json

import pytest
from hypothesis import given, strategies as st

from protocol import (
    RemoteProtocolError,
    Request,
    _json as protocol_json,
    _jsonrpc,
    decode_message,
)
from protocol._jsonrpc import encode_message, encode_request


def _stdlib_loads(data: bytes) -> object:
    return json.loads(
        data.decode("utf-8"), parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name))
    )


EDGE_DOCUMENTS = [
    b"123456789012345678901234567890",
    b'"\\ud800"',
    b'{"\\ud83d\\ude00": "\\ud83d"}',
    b'{"a":1,"a":2}',
    b"[" * 3000 + b"]" * 3000,
    b"NaN",
    b"1e400",
    b"-0",
    b'"\xff"',
    b'{"x":1} x',
    b"\xef\xbb\xbf{}",
    b'"a\x00"',
    b"[1,]",
    b'  {"x": [1, 2.5, true, null]}  ',
]


@pytest.mark.parametrize("data", EDGE_DOCUMENTS)
def test_loads_matches_the_standard_library(data: bytes) -> None:
    try:
        expected: object = ("ok", _stdlib_loads(data))
    except (ValueError, RecursionError) as exc:
        expected = ("error", type(exc).__name__)
    try:
        got: object = ("ok", protocol_json.loads(data))
    except ValueError as exc:
        got = ("error", type(exc).__name__)
    if expected[0] == "error":  # type: ignore[index]
        # Our loads turns RecursionError into ValueError; either way it is an error.
        assert got[0] == "error"  # type: ignore[index]
    else:
        assert got == expected


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_loads_round_trips_like_the_standard_library(value: object) -> None:
    data = json.dumps(value).encode()
    assert protocol_json.loads(data) == _stdlib_loads(data)


def _stdlib_dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


@given(json_values)
def test_dumps_writes_what_the_standard_library_reads_back_the_same(value: object) -> None:
    data = protocol_json.dumps(value)
    assert json.loads(data) == value
    # Only a float may be spelled differently (1e16 against 1e+16): the same number.
    if not _holds_a_float(value):
        assert data == _stdlib_dumps(value)


def _holds_a_float(value: object) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_holds_a_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_a_float(v) for v in value)
    return False


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        [1, float("inf")],
        {"a": {"b": -float("inf")}},
        {"result": None, "x": float("nan")},
    ],
)
def test_dumps_refuses_nan_and_infinities_which_msgspec_writes_as_null(value: object) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        protocol_json.dumps(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"result": None}, b'{"result":null}'),
        ({"k": "\ud800"}, b'{"k":"\\ud800"}'),
        ({None: 1, True: 2, 3: [None]}, b'{"null":1,"true":2,"3":[null]}'),
        ([[[[]]]], b"[[[[]]]]"),
        ({"text": '\u00e9\n"\u0001'}, '{"text":"\u00e9\\n\\"\\u0001"}'.encode()),
        (2**70, b"1180591620717411303424"),
    ],
)
def test_dumps_gives_the_standard_library_bytes(value: object, expected: bytes) -> None:
    # A lone surrogate has no UTF-8 form: ASCII escapes. Keys None and True are named as the
    # standard library names them. A document with a null takes the standard library's path.
    assert protocol_json.dumps(value) == expected


def test_dumps_refuses_a_circular_reference_and_a_python_object() -> None:
    circular: list[object] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="ircular"):
        protocol_json.dumps(circular)
    with pytest.raises(TypeError):
        protocol_json.dumps({"a": object()})


@pytest.mark.parametrize(
    ("request_id", "method", "params"),
    [(1, "m", None), ("a", "é", [1, "x"]), (7, "$/x", {"k": "\ud800"}), (0, "", {})],
)
def test_encode_request_matches_encode_message(
    request_id: int | str, method: str, params: dict[str, object] | list[object] | None
) -> None:
    expected = encode_message(Request(id=request_id, method=method, params=params))  # type: ignore[arg-type]
    assert encode_request(request_id, method, params) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("request_id", "method", "params"),
    [(True, "m", None), (1.0, "m", None), (1, 5, None), (1, "m", "text"), (None, "m", None)],
)
def test_encode_request_refuses_what_request_refuses(
    request_id: object, method: object, params: object
) -> None:
    with pytest.raises(TypeError):
        Request(id=request_id, method=method, params=params)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_request(request_id, method, params)  # type: ignore[arg-type]


EDGE_BODIES = [
    b'{"jsonrpc":"2.0","method":"x","params":{"a":[1,2]}}',
    b'{"jsonrpc":"2.0","id":3,"method":"x","params":[1]}',
    b'{"params":[1],"method":"x","id":"s","jsonrpc":"2.0"}',
    b'{"jsonrpc":"2.0","method":"x","params":null}',
    b'{"jsonrpc":"2.0","method":"x"}',
    b'{"jsonrpc":"2.0","id":"a","result":{"z":1}}',
    b'{"jsonrpc":"2.0","id":4,"result":null}',
    b'{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}',
    b'{"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"m","data":[1]}}',
    b'{"jsonrpc":"2.0","method":"x","params":5}',
    b'{"jsonrpc":"2.0","method":"x","params":"n"}',
    b'{"jsonrpc":"2.0","id":1.0,"result":1}',
    b'{"jsonrpc":"2.0","id":true,"method":"x"}',
    b'{"jsonrpc":"2.0","method":"x","result":1}',
    b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}',
    b'{"jsonrpc":"1.0","method":"x"}',
    b'{"jsonrpc":"2.0","method":7}',
    b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}',
    b"xx",
    b"\xff",
    # msgspec skips members without checking UTF-8; the full path refuses such bodies.
    b'{"jsonrpc":"2.0","method":"x","params":{"a":"\xff"}}',
    b'{"jsonrpc":"2.0","id":1,"result":["\xff"]}',
    b'{"jsonrpc":"2.0","method":"x","other":"\xff"}',
    '{"jsonrpc":"2.0","method":"x","params":["\u00e9"]}'.encode(),
    b'{"jsonrpc":"2.0","id":null,"method":"x"}',
    b'{"jsonrpc":"2.0","method":null}',
    b'{"jsonrpc":"2.0","id":1,"method":"x","params":null}',
    b'{"jsonrpc":"2.0","id":1,"id":"two","method":"x"}',
    b'{"jsonrpc":"2.0","id":99999999999999999999999,"result":1}',
    b'{"method":"x"}',
]


def _outcome(body: bytes) -> object:
    try:
        return ("ok", decode_message(body))
    except RemoteProtocolError as exc:
        return ("error", int(exc.error_code), str(exc), exc.request_id)


@pytest.mark.parametrize("body", EDGE_BODIES)
def test_decode_message_fast_path_matches_the_full_path_on_edge_bodies(
    body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every shape and every refusal of the msgspec path is the general code's own."""
    fast = _outcome(body)
    monkeypatch.setattr(_jsonrpc, "_MESSAGE_DECODER", None)
    assert fast == _outcome(body)


message_members = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.one_of(st.integers(), st.text(max_size=3), st.none(), st.booleans(), st.just(1.0)),
        "method": st.one_of(st.text(max_size=5), st.none(), st.integers()),
        "params": st.one_of(
            st.none(),
            st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
            st.lists(st.integers(), max_size=2),
            st.integers(),
            st.text(max_size=2),
        ),
        "result": st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2)),
        "error": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "code": st.one_of(st.integers(), st.text(max_size=1)),
                    "message": st.text(max_size=3),
                },
                optional={"data": st.integers()},
            ),
        ),
    },
)


@given(message_members)
def test_decode_message_fast_path_matches_the_full_path(members: dict[str, object]) -> None:
    """decode_message's msgspec path and its general path (which an unknown member forces)
    build the same messages and raise the same errors."""
    body = json.dumps(members).encode()
    with_unknown = json.dumps({**members, "zz": 1}).encode()
    assert _outcome(body) == _outcome(with_unknown)


@pytest.mark.parametrize("value", [{1, 2}, b"xy", decimal.Decimal("1.5")])
def test_dumps_writes_a_type_json_lacks_alike_with_or_without_a_null_beside_it(
    value: object,
) -> None:
    """msgspec writes a set, bytes, a Decimal in its JSON form; the standard library's path,
    taken when the document holds a null, writes them the same way, not refuses them."""
    alone = protocol_json.dumps({"v": value})
    beside = protocol_json.dumps({"v": value, "n": None})
    assert beside == alone[:-1] + b',"n":null}'
