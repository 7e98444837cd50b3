"""Fuzzing of the sans-I/O layers (issue 7 "Fuzzing"), the parts tests/protocol lacks.

For any bytes, in any chunking: the framer, the JSON-RPC model, the envelope and the DAP model
give messages or raise the one error kind of their layer (``RemoteProtocolError``; the
envelope's ``EnvelopeError``), never anything else, and the framer's buffer never holds more
than one header section plus one body.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from protocol import (
    EOF,
    NEED_DATA,
    Batch,
    EnvelopeError,
    EnvelopeRequest,
    ErrorResponse,
    Frame,
    FrameDecoder,
    Notification,
    RemoteProtocolError,
    Request,
    Response,
    StrayText,
    decode_message,
    encode_frame,
    parse_envelope,
)

MAX_HEADER = 64
MAX_BODY = 256
MAX_STRAY = 512

#: Bytes that look like the protocol often enough to reach deep states.
_tokens = st.sampled_from(
    [
        b"Content-Length: ",
        b"content-length:",
        b"Content-Type: application/vscode-jsonrpc; charset=utf-8",
        b"\r\n",
        b"\n",
        b"\r\n\r\n",
        b"0",
        b"12",
        b"300",
        b"-1",
        b"x",
        b"{}",
        b'{"jsonrpc":"2.0","id":1,"method":"m"}',
        b"\xff\xfe",
    ]
)
_noisy = st.lists(st.one_of(_tokens, st.binary(max_size=40)), max_size=30).map(b"".join)
_cuts = st.lists(st.integers(min_value=0, max_value=2000), max_size=12)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return [p for p in pieces if p]


@settings(max_examples=300, deadline=None)
@given(data=_noisy, cuts=_cuts, eof=st.booleans())
def test_framer_gives_events_or_one_error_and_stays_bounded(
    data: bytes, cuts: list[int], eof: bool
) -> None:
    decoder = FrameDecoder(
        max_header_bytes=MAX_HEADER, max_body_bytes=MAX_BODY, max_stray_bytes=MAX_STRAY
    )
    try:
        for piece in _chunks(data, cuts):
            decoder.receive_data(piece)
            while (event := decoder.next_event()) is not NEED_DATA:
                assert isinstance(event, (Frame, StrayText))
                if isinstance(event, Frame):
                    assert len(event.body) <= MAX_BODY
            # Drained: what is left is at most one unfinished header section and body
            # (plus the unscanned end of the last line, bounded by the header limit).
            assert decoder.buffered_bytes <= 2 * MAX_HEADER + MAX_BODY
        if eof:
            decoder.receive_eof()
            while (event := decoder.next_event()) is not EOF:
                assert isinstance(event, (Frame, StrayText))
    except RemoteProtocolError:
        assert decoder.broken
        with pytest.raises(RemoteProtocolError):
            decoder.next_event()


@settings(deadline=None)  # a shared machine: no per-example time limit
@given(body=st.one_of(st.binary(max_size=200), _noisy))
def test_jsonrpc_decodes_any_bytes_or_raises_remote_error(body: bytes) -> None:
    try:
        message = decode_message(body)
    except RemoteProtocolError:
        return
    assert isinstance(message, (Request, Notification, Response, ErrorResponse, Batch))


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["id", "operationId", "timeoutMilliseconds", "command", "payload", "x", "jsonrpc"]
            ),
            children,
            max_size=6,
        )
    ),
    max_leaves=20,
)


@settings(deadline=None)
@given(data=st.one_of(st.binary(max_size=200), _json_values.map(lambda v: json.dumps(v))))
def test_envelope_parses_any_input_or_raises_envelope_error(data: bytes | str) -> None:
    try:
        request = parse_envelope(data)
    except EnvelopeError as exc:
        code: str | None = exc.code
    else:
        code = None
    if code is not None:
        assert code == "invalid_request"
        return
    assert isinstance(request, EnvelopeRequest)
    assert isinstance(request.command, str)
    assert isinstance(request.payload, dict)


dap = pytest.importorskip("protocol._dap")


@settings(max_examples=300, deadline=None)
@given(
    data=st.one_of(
        _noisy,
        st.lists(_json_values.map(lambda v: encode_frame(json.dumps(v).encode())), max_size=4).map(
            b"".join
        ),
    ),
    cuts=_cuts,
)
def test_dap_gives_messages_or_one_error(data: bytes, cuts: list[int]) -> None:
    connection = dap.DAPConnection(
        max_header_bytes=MAX_HEADER, max_body_bytes=MAX_BODY, max_stray_bytes=MAX_STRAY
    )
    kinds = (dap.DAPRequest, dap.DAPResponse, dap.DAPEvent, StrayText)
    try:
        for piece in _chunks(data, cuts):
            connection.receive_data(piece)
            while (event := connection.next_event()) is not NEED_DATA:
                assert isinstance(event, kinds)
        connection.receive_eof()
        while (event := connection.next_event()) is not EOF:
            assert isinstance(event, kinds)
    except RemoteProtocolError:
        assert connection.broken
