"""The sans-I/O JSON-RPC connection: answered once, replies matched once, nothing answered
that was not a request. Two connections are wired directly (h11's ConnectionPair)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from protocol import EOF, NEED_DATA, ErrorCode, LocalProtocolError, RemoteProtocolError
from protocol._connection import (
    CancelReceived,
    ConnectionEvent,
    JSONRPCConnection,
    MessageRefused,
    NotificationReceived,
    ReplyIgnored,
    ReplyReceived,
    RequestReceived,
)
from protocol._framing import encode_frame


def _events(conn: JSONRPCConnection) -> list[ConnectionEvent]:
    out: list[ConnectionEvent] = []
    while (event := conn.next_event()) is not NEED_DATA and event is not EOF:
        out.append(event)
    return out


def _feed(conn: JSONRPCConnection, data: bytes) -> list[ConnectionEvent]:
    conn.receive_data(data)
    return _events(conn)


def _raw(obj: object) -> bytes:
    return encode_frame(json.dumps(obj).encode())


def test_a_request_and_its_reply_between_two_connections() -> None:
    client, server = JSONRPCConnection(), JSONRPCConnection()
    request_id, frame = client.send_request("textDocument/hover", {"x": 1})
    assert request_id == 1
    assert client.is_pending(1)
    [received] = _feed(server, frame)
    assert isinstance(received, RequestReceived)
    assert received.request.method == "textDocument/hover"
    assert server.inbound_requests == 1
    [reply] = _feed(client, server.send_result(received.request.id, {"contents": "x"}))
    assert isinstance(reply, ReplyReceived)
    assert reply.request_id == 1
    assert reply.reply is not None
    assert client.pending_requests == 0
    assert server.inbound_requests == 0


def test_an_inbound_request_is_answered_exactly_once() -> None:
    server = JSONRPCConnection()
    _feed(server, _raw({"jsonrpc": "2.0", "id": "a", "method": "m"}))
    server.send_error("a", -32800, "Request cancelled")
    with pytest.raises(LocalProtocolError):
        server.send_result("a", None)
    with pytest.raises(LocalProtocolError):
        server.send_result("never", None)


def test_a_duplicate_or_late_reply_completes_nothing() -> None:
    client = JSONRPCConnection()
    request_id, _ = client.send_request("m")
    reply = _raw({"jsonrpc": "2.0", "id": request_id, "result": 1})
    [first] = _feed(client, reply)
    [second] = _feed(client, reply)
    assert isinstance(first, ReplyReceived)
    assert isinstance(second, ReplyIgnored)
    # Forgotten (the caller gave up): its reply is ignored too, and a cancel is due once.
    other, _ = client.send_request("m")
    assert client.forget_request(other) is True
    assert client.forget_request(other) is False
    [late] = _feed(client, _raw({"jsonrpc": "2.0", "id": other, "result": 1}))
    assert isinstance(late, ReplyIgnored)


def test_ids_are_per_type_and_a_reused_one_is_refused() -> None:
    server = JSONRPCConnection()
    a, b = _feed(
        server,
        _raw({"jsonrpc": "2.0", "id": 1, "method": "m"})
        + _raw({"jsonrpc": "2.0", "id": "1", "method": "m"}),
    )
    assert isinstance(a, RequestReceived)
    assert isinstance(b, RequestReceived)
    [again] = _feed(server, _raw({"jsonrpc": "2.0", "id": 1, "method": "m"}))
    assert isinstance(again, MessageRefused)
    assert again.answer is not None
    assert json.loads(again.answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == -32600


def test_past_the_in_flight_limit_a_request_is_refused_busy() -> None:
    server = JSONRPCConnection(max_inbound=2)
    frames = b"".join(_raw({"jsonrpc": "2.0", "id": i, "method": "m"}) for i in range(3))
    events = _feed(server, frames)
    assert [type(e) for e in events] == [RequestReceived, RequestReceived, MessageRefused]
    refused = events[2]
    assert isinstance(refused, MessageRefused)
    assert refused.answer is not None
    body = json.loads(refused.answer.split(b"\r\n\r\n", 1)[1])
    assert body["id"] == 2
    assert body["error"]["data"] == {"code": "busy"}
    server.send_result(0, None)
    [admitted] = _feed(server, _raw({"jsonrpc": "2.0", "id": 9, "method": "m"}))
    assert isinstance(admitted, RequestReceived)


def test_an_exempt_method_is_admitted_past_the_in_flight_limit() -> None:
    # The request that ends the session (LSP shutdown) is never refused for load.
    server = JSONRPCConnection(max_inbound=1, exempt_methods=frozenset({"shutdown"}))
    frames = _raw({"jsonrpc": "2.0", "id": 1, "method": "m"}) + _raw(
        {"jsonrpc": "2.0", "id": 2, "method": "m"}
    )
    frames += _raw({"jsonrpc": "2.0", "id": 3, "method": "shutdown"})
    events = _feed(server, frames)
    assert [type(e) for e in events] == [RequestReceived, MessageRefused, RequestReceived]


def test_cancel_names_only_a_request_in_flight() -> None:
    server = JSONRPCConnection()
    _feed(server, _raw({"jsonrpc": "2.0", "id": 7, "method": "m"}))
    cancel = {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}}
    [event] = _feed(server, _raw(cancel))
    assert event == CancelReceived(7)
    server.send_result(7, None)
    # Answered already: the cancel raced the answer, and names nothing now.
    [event] = _feed(server, _raw(cancel))
    assert isinstance(event, NotificationReceived)
    [event] = _feed(server, _raw({**cancel, "params": {"id": True}}))
    assert isinstance(event, NotificationReceived)


def test_a_broken_reply_ends_its_request_and_is_never_answered() -> None:
    client = JSONRPCConnection()
    request_id, _ = client.send_request("m")
    # Both result and error: invalid; it names our pending request, which ends.
    [event] = _feed(
        client,
        _raw(
            {"jsonrpc": "2.0", "id": request_id, "result": 1, "error": {"code": 1, "message": ""}}
        ),
    )
    assert isinstance(event, ReplyReceived)
    assert event.reply is None
    assert isinstance(event.problem, RemoteProtocolError)
    assert not client.is_pending(request_id)
    # Neither result nor error, for an id we never sent: refused without an answer.
    [event] = _feed(client, _raw({"jsonrpc": "2.0", "id": 99}))
    assert isinstance(event, MessageRefused)
    assert event.answer is None


def test_a_malformed_request_is_answered_with_its_id() -> None:
    server = JSONRPCConnection()
    [event] = _feed(server, _raw({"jsonrpc": "2.0", "id": 3, "method": 5}))
    assert isinstance(event, MessageRefused)
    assert event.answer is not None
    assert json.loads(event.answer.split(b"\r\n\r\n", 1)[1])["id"] == 3
    [event] = _feed(server, encode_frame(b"{not json"))
    assert isinstance(event, MessageRefused)
    assert event.error.error_code is ErrorCode.PARSE_ERROR


def test_a_batch_is_refused_whole() -> None:
    server = JSONRPCConnection()
    [event] = _feed(server, _raw([{"jsonrpc": "2.0", "id": 1, "method": "m"}]))
    assert isinstance(event, MessageRefused)
    assert server.inbound_requests == 0


def test_broken_framing_poisons_the_connection() -> None:
    conn = JSONRPCConnection()
    conn.receive_data(b"Content-Length: nope\r\n\r\n")
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    assert conn.broken
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


@given(st.data())
def test_any_chunking_yields_the_same_events(data: st.DataObject) -> None:
    stream = b"".join(
        [
            _raw({"jsonrpc": "2.0", "id": 1, "method": "a", "params": {"t": "é" * 40}}),
            b"stray output\n",
            _raw({"jsonrpc": "2.0", "method": "n"}),
            _raw({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}),
            _raw({"jsonrpc": "2.0", "id": 5, "result": None}),
        ]
    )
    whole = JSONRPCConnection()
    expected = _feed(whole, stream)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=20)))
    chunked = JSONRPCConnection()
    got: list[ConnectionEvent] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += _feed(chunked, stream[start:end])
    chunked.receive_eof()
    assert chunked.next_event() is EOF
    assert [type(e) for e in got] == [type(e) for e in expected]
    assert isinstance(got[-2], CancelReceived)
    assert isinstance(got[-1], ReplyIgnored)
