"""DAP messages (issue 4): classification by ``type``, validation, seq, chunking."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from protocol import EOF, NEED_DATA, ErrorCode, RemoteProtocolError, StrayText, encode_frame
from protocol._dap import (
    DAPConnection,
    DAPEvent,
    DAPMessage,
    DAPRequest,
    DAPResponse,
    decode_dap_message,
    encode_dap_message,
)


def frame(message: object) -> bytes:
    return encode_frame(json.dumps(message).encode())


def drain(conn: DAPConnection) -> list[object]:
    out: list[object] = []
    while True:
        event = conn.next_event()
        out.append(event)
        if event is NEED_DATA or event is EOF:
            return out


STREAM = (
    frame({"seq": 1, "type": "response", "request_seq": 1, "success": True, "command": "x"})
    + b"log line from the adapter\n"
    + frame({"seq": 2, "type": "event", "event": "stopped", "body": {"threadId": 1}})
    + frame({"seq": 3, "type": "request", "command": "runInTerminal", "arguments": {}})
)
EXPECTED = [
    DAPResponse(1, 1, True, "x"),
    StrayText(26),
    DAPEvent(2, "stopped", {"threadId": 1}),
    DAPRequest(3, "runInTerminal", {}),
]


def test_whole_byte_by_byte_and_trailing_data() -> None:
    whole = DAPConnection()
    whole.receive_data(STREAM)
    assert drain(whole) == [*EXPECTED, NEED_DATA]

    split = DAPConnection()
    events: list[object] = []
    for byte in STREAM:
        split.receive_data(bytes([byte]))
        events.extend(e for e in drain(split) if e is not NEED_DATA)
    assert events == EXPECTED

    trailing = DAPConnection()
    trailing.receive_data(STREAM + b"Content-Length: 10\r\n\r\n{")
    assert drain(trailing) == [*EXPECTED, NEED_DATA]
    trailing.receive_eof()
    with pytest.raises(RemoteProtocolError):
        trailing.next_event()


def test_eof_after_whole_frames() -> None:
    conn = DAPConnection()
    conn.receive_data(STREAM)
    conn.receive_eof()
    assert drain(conn) == [*EXPECTED, EOF]


def test_classified_by_type_not_by_fields() -> None:
    """A reverse request that carries a stray request_seq is still a request (issue 4)."""
    message = decode_dap_message(
        json.dumps(
            {"seq": 7, "type": "request", "command": "runInTerminal", "request_seq": 3}
        ).encode()
    )
    assert message == DAPRequest(7, "runInTerminal", None)
    event = decode_dap_message(
        json.dumps({"seq": 8, "type": "event", "event": "output", "success": True}).encode()
    )
    assert isinstance(event, DAPEvent)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", ErrorCode.PARSE_ERROR),
        (b"\xff\xfe", ErrorCode.PARSE_ERROR),
        (b"[1]", ErrorCode.INVALID_REQUEST),
        (b'{"seq": 1, "type": "notification"}', ErrorCode.INVALID_REQUEST),
        (b'{"type": "event", "event": "x"}', ErrorCode.INVALID_REQUEST),
        (b'{"seq": true, "type": "event", "event": "x"}', ErrorCode.INVALID_REQUEST),
        (b'{"seq": -1, "type": "event", "event": "x"}', ErrorCode.INVALID_REQUEST),
        (b'{"seq": 1, "type": "event"}', ErrorCode.INVALID_REQUEST),
        (b'{"seq": 1, "type": "request", "command": 5}', ErrorCode.INVALID_REQUEST),
        (
            b'{"seq": 1, "type": "response", "success": true, "command": "x"}',
            ErrorCode.INVALID_REQUEST,
        ),
        (
            b'{"seq": 1, "type": "response", "request_seq": 1, "success": 1, "command": "x"}',
            ErrorCode.INVALID_REQUEST,
        ),
        (
            b'{"seq": 1, "type": "response", "request_seq": 1, "success": false, '
            b'"command": "x", "message": 3}',
            ErrorCode.INVALID_REQUEST,
        ),
    ],
)
def test_malformed_messages(body: bytes, code: ErrorCode) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_dap_message(body)
    assert info.value.error_code is code


def test_malformed_message_poisons_the_connection() -> None:
    conn = DAPConnection()
    conn.receive_data(
        encode_frame(b'{"seq": 1}') + frame({"seq": 2, "type": "event", "event": "x"})
    )
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    assert conn.broken
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(b"more")


def test_seq_numbering_and_reply_names_its_own_seq() -> None:
    conn = DAPConnection()
    seq, data = conn.request("initialize", {"adapterID": "x"})
    assert seq == 1
    assert data.startswith(b"Content-Length: ")
    body = data.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body) == {
        "seq": 1,
        "type": "request",
        "command": "initialize",
        "arguments": {"adapterID": "x"},
    }
    reverse = DAPRequest(40, "runInTerminal", {})
    reply = json.loads(
        conn.respond(reverse, success=True, body={"processId": 9}).split(b"\r\n\r\n")[1]
    )
    assert reply == {
        "seq": 2,
        "type": "response",
        "request_seq": 40,
        "success": True,
        "command": "runInTerminal",
        "body": {"processId": 9},
    }
    assert conn.next_seq == 3
    event = json.loads(conn.event("stopped").split(b"\r\n\r\n")[1])
    assert event == {"seq": 3, "type": "event", "event": "stopped"}
    with pytest.raises(ValueError, match="command"):
        conn.request("")


def test_content_length_counts_bytes() -> None:
    conn = DAPConnection()
    _, data = conn.request("evaluate", {"expression": "'é😀'"})
    head, body = data.split(b"\r\n\r\n", 1)
    assert int(head.split(b":")[1]) == len(body)


_json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_json = st.recursive(
    _json_leaf,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)
_seq = st.integers(min_value=0, max_value=2**31)
_messages: st.SearchStrategy[DAPMessage] = st.one_of(
    st.builds(DAPRequest, _seq, st.text(min_size=1, max_size=10), _json),
    st.builds(DAPEvent, _seq, st.text(min_size=1, max_size=10), _json),
    st.builds(
        DAPResponse,
        _seq,
        _seq,
        st.booleans(),
        st.text(min_size=1, max_size=10),
        st.none() | st.text(max_size=10),
        _json,
    ),
)


@given(st.lists(_messages, max_size=5), st.integers(min_value=1, max_value=17))
def test_round_trip_under_any_chunking(messages: list[DAPMessage], chunk: int) -> None:
    data = b"".join(encode_frame(encode_dap_message(m)) for m in messages)
    conn = DAPConnection()
    out: list[object] = []
    for start in range(0, len(data), chunk):
        conn.receive_data(data[start : start + chunk])
        out.extend(e for e in drain(conn) if e is not NEED_DATA)
    conn.receive_eof()
    out.extend(e for e in drain(conn) if e is not EOF)
    assert out == messages
