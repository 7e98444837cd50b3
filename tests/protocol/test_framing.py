"""FrameDecoder and encode_frame: byte vectors, chunking, limits and every error path."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings, strategies as st

from protocol import (
    EOF,
    NEED_DATA,
    ErrorCode,
    Frame,
    FrameDecoder,
    RemoteProtocolError,
    StrayText,
    encode_frame,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from protocol import FrameEvent

Event = Frame | StrayText


def drain(decoder: FrameDecoder) -> list[FrameEvent]:
    """Every event up to and including NEED_DATA or EOF."""
    out: list[FrameEvent] = []
    while True:
        event = decoder.next_event()
        out.append(event)
        if event is NEED_DATA or event is EOF:
            return out


def merge_stray(events: Iterable[FrameEvent]) -> list[FrameEvent]:
    """Events with NEED_DATA dropped and adjacent StrayText summed (chunking-independent)."""
    out: list[FrameEvent] = []
    for event in events:
        if event is NEED_DATA:
            continue
        if isinstance(event, StrayText) and out and isinstance(out[-1], StrayText):
            out[-1] = StrayText(out[-1].byte_count + event.byte_count)
        else:
            out.append(event)
    return out


def feed(
    chunks: Iterable[bytes | bytearray | memoryview],
    *,
    eof: bool = False,
    decoder: FrameDecoder | None = None,
) -> list[FrameEvent]:
    decoder = decoder or FrameDecoder()
    events: list[FrameEvent] = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        events.extend(drain(decoder))
    if eof:
        decoder.receive_eof()
        events.extend(drain(decoder))
    return merge_stray(events)


def tr(data: bytes, expected: Sequence[FrameEvent], **limits: int) -> None:
    """h11's triple: the whole input, one byte at a time, and with trailing data."""
    assert feed([data], decoder=FrameDecoder(**limits)) == list(expected)
    one_by_one = [data[i : i + 1] for i in range(len(data))]
    assert feed(one_by_one, decoder=FrameDecoder(**limits)) == list(expected)
    decoder = FrameDecoder(**limits)
    assert feed([data + b"Content-Len"], decoder=decoder) == list(expected)
    assert decoder.buffered_bytes == len(b"Content-Len")
    decoder.receive_data(b"gth: 2\r\n\r\n{}")
    assert merge_stray(drain(decoder)) == [Frame(b"{}")]


UTF8_BODY = '{"text":"é€😀"}'.encode()

VECTORS: list[tuple[str, bytes, list[FrameEvent]]] = [
    ("basic", b"Content-Length: 2\r\n\r\n{}", [Frame(b"{}")]),
    ("no space after colon", b"Content-Length:2\r\n\r\n{}", [Frame(b"{}")]),
    ("tabs and spaces", b"Content-Length: \t 2 \t\r\n\r\n{}", [Frame(b"{}")]),
    ("name case", b"cOnTeNt-LeNgTh: 2\r\n\r\n{}", [Frame(b"{}")]),
    (
        "content-type first",
        b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}",
        [Frame(b"{}")],
    ),
    (
        "content-type after",
        b"Content-Length: 2\r\nContent-Type: application/vscode-jsonrpc\r\n\r\n{}",
        [Frame(b"{}")],
    ),
    ("unknown header", b"X-Whatever:yes\r\nContent-Length: 2\r\n\r\n{}", [Frame(b"{}")]),
    ("bare newlines", b"Content-Length: 2\n\n{}", [Frame(b"{}")]),
    ("mixed newlines", b"Content-Length: 2\r\n\n{}", [Frame(b"{}")]),
    ("empty body", b"Content-Length: 0\r\n\r\n", [Frame(b"")]),
    ("leading zeros", b"Content-Length: 002\r\n\r\n{}", [Frame(b"{}")]),
    ("same length twice", b"Content-Length: 2\r\ncontent-length: 2\r\n\r\n{}", [Frame(b"{}")]),
    (
        "bytes not characters",
        b"Content-Length: %d\r\n\r\n" % len(UTF8_BODY) + UTF8_BODY,
        [Frame(UTF8_BODY)],
    ),
    (
        "body that looks like headers",
        b"Content-Length: 24\r\n\r\nContent-Length: 99\r\n\r\n\r\n",
        [Frame(b"Content-Length: 99\r\n\r\n\r\n")],
    ),
    (
        "two frames",
        b"Content-Length: 1\r\n\r\n1Content-Length: 3\r\n\r\n[2]",
        [Frame(b"1"), Frame(b"[2]")],
    ),
    (
        "stray line before a frame",
        b"Starting server...\r\nContent-Length: 2\r\n\r\n{}",
        [StrayText(20), Frame(b"{}")],
    ),
    (
        "stray lines between frames",
        b"Content-Length: 1\r\n\r\n1log line one\nlog line two\nContent-Length: 1\r\n\r\n2",
        [Frame(b"1"), StrayText(26), Frame(b"2")],
    ),
    (
        "blank lines between frames",
        b"Content-Length: 1\r\n\r\n1\r\n\nContent-Length: 1\r\n\r\n2",
        [Frame(b"1"), StrayText(3), Frame(b"2")],
    ),
    (
        "header-like output followed by text",
        b"Note: starting\nplain text\nContent-Length: 2\r\n\r\n{}",
        [StrayText(15 + 11), Frame(b"{}")],
    ),
    (
        "non-ascii stray text",
        "démarrage…\n".encode() + b"Content-Length: 2\r\n\r\n{}",
        [StrayText(len("démarrage…\n".encode())), Frame(b"{}")],
    ),
]


@pytest.mark.parametrize(
    ("data", "expected"), [v[1:] for v in VECTORS], ids=[v[0] for v in VECTORS]
)
def test_vectors(data: bytes, expected: list[FrameEvent]) -> None:
    tr(data, expected)


@pytest.mark.parametrize(
    ("data", "expected"), [v[1:] for v in VECTORS], ids=[v[0] for v in VECTORS]
)
def test_vectors_then_eof(data: bytes, expected: list[FrameEvent]) -> None:
    assert feed([data], eof=True) == [*expected, EOF]


FRAME = b"Content-Length: %d\r\n\r\n" % len(UTF8_BODY) + UTF8_BODY


@pytest.mark.parametrize("cut", range(len(FRAME) + 1))
def test_every_two_way_split(cut: int) -> None:
    """Splits inside the header name, inside \\r\\n\\r\\n and inside a UTF-8 character."""
    assert feed([FRAME[:cut], FRAME[cut:]]) == [Frame(UTF8_BODY)]


def test_named_splits() -> None:
    inside_name = FRAME.index(b"Length") + 2
    inside_terminator = FRAME.index(b"\r\n\r\n") + 2
    inside_char = FRAME.index("€".encode()) + 1
    for cut in (inside_name, inside_terminator, inside_char):
        decoder = FrameDecoder()
        decoder.receive_data(FRAME[:cut])
        assert decoder.next_event() is NEED_DATA
        decoder.receive_data(FRAME[cut:])
        assert decoder.next_event() == Frame(UTF8_BODY)
        assert decoder.next_event() is NEED_DATA
        assert decoder.buffered_bytes == 0


def test_stray_text_is_reported_before_need_data() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"hello\nContent-Le")
    assert decoder.next_event() == StrayText(6)
    assert decoder.next_event() is NEED_DATA
    assert decoder.buffered_bytes == len(b"Content-Le")


def test_stray_run_resets_after_each_frame() -> None:
    frame = encode_frame(b"{}")
    data = (b"12345678\n" + frame) * 5
    assert (
        feed([data], decoder=FrameDecoder(max_stray_bytes=9))
        == [
            StrayText(9),
            Frame(b"{}"),
        ]
        * 5
    )


def test_long_stray_line_is_streamed_not_buffered() -> None:
    decoder = FrameDecoder(max_header_bytes=64, max_stray_bytes=1_000_000)
    events: list[FrameEvent] = []
    for _ in range(100):
        decoder.receive_data(b"no header here " * 60)
        events.extend(drain(decoder))
        assert decoder.buffered_bytes <= 64
    decoder.receive_data(b"\n" + encode_frame(b"[]"))
    events.extend(drain(decoder))
    assert merge_stray(events) == [StrayText(100 * 15 * 60 + 1), Frame(b"[]")]


def test_buffer_is_compacted() -> None:
    decoder = FrameDecoder()
    frame = encode_frame(b"x" * 1000)
    for _ in range(500):
        decoder.receive_data(frame)
        assert decoder.next_event() == Frame(b"x" * 1000)
    assert decoder.buffered_bytes == 0
    decoder.receive_data(frame + frame[:10])
    assert drain(decoder) == [Frame(b"x" * 1000), NEED_DATA]
    assert decoder.buffered_bytes == 10


def test_eof_on_empty_stream() -> None:
    decoder = FrameDecoder()
    decoder.receive_eof()
    decoder.receive_eof()  # idempotent
    assert decoder.next_event() is EOF
    assert decoder.next_event() is EOF


def test_frames_buffered_before_eof_are_still_returned() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"1") + encode_frame(b"2") + b"goodbye")
    decoder.receive_eof()
    assert drain(decoder) == [Frame(b"1"), Frame(b"2"), StrayText(7), EOF]
    assert decoder.next_event() is EOF


def test_stray_header_lines_at_eof_are_stray_text() -> None:
    assert feed([b"Note: bye\nWarning: x"], eof=True) == [StrayText(20), EOF]


def test_empty_data_is_a_no_op() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"")
    assert decoder.next_event() is NEED_DATA


def test_accepts_bytearray_and_memoryview() -> None:
    frame = encode_frame(b"{}")
    assert feed([bytearray(frame[:5]), memoryview(frame[5:])]) == [Frame(b"{}")]


def test_receive_data_after_eof_is_misuse() -> None:
    decoder = FrameDecoder()
    decoder.receive_eof()
    with pytest.raises(RuntimeError):
        decoder.receive_data(b"x")


@pytest.mark.parametrize(
    ("limits", "exc"),
    [
        ({"max_header_bytes": 0}, ValueError),
        ({"max_body_bytes": -1}, ValueError),
        ({"max_stray_bytes": 1.5}, TypeError),
        ({"max_header_bytes": True}, TypeError),
    ],
)
def test_bad_limits(limits: dict[str, object], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        FrameDecoder(**limits)  # type: ignore[arg-type]


BROKEN: list[tuple[str, bytes, dict[str, int], str]] = [
    ("no content-length", b"Content-Type: x\r\n\r\n{}", {}, "without Content-Length"),
    ("empty value", b"Content-Length:\r\n\r\n", {}, "not a decimal number"),
    ("not a number", b"Content-Length: abc\r\n\r\n", {}, "not a decimal number"),
    ("plus sign", b"Content-Length: +2\r\n\r\n{}", {}, "not a decimal number"),
    ("fraction", b"Content-Length: 2.0\r\n\r\n{}", {}, "not a decimal number"),
    ("hex", b"Content-Length: 0x2\r\n\r\n{}", {}, "not a decimal number"),
    ("unicode digits", "Content-Length: ٢\r\n\r\n{}".encode(), {}, "not a decimal number"),
    ("negative", b"Content-Length: -2\r\n\r\n{}", {}, "negative"),
    ("over the body limit", b"Content-Length: 11\r\n\r\n", {"max_body_bytes": 10}, "body limit"),
    ("absurdly long number", b"Content-Length: " + b"9" * 5000 + b"\r\n", {}, "body limit"),
    ("conflicting lengths", b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n", {}, "conflicting"),
    ("text inside a header section", b"Content-Length: 2\r\noops\r\n\r\n{}", {}, "malformed"),
    (
        "header section too large",
        b"X-Pad: " + b"a" * 40 + b"\r\nContent-Length: 2\r\n\r\n{}",
        {"max_header_bytes": 32},
        "exceeds 32 bytes",
    ),
    (
        "header line too large without a line end",
        b"X-Pad: " + b"a" * 40,
        {"max_header_bytes": 32},
        "exceeds 32 bytes",
    ),
    (
        "terminator past the header limit",
        b"Content-Length: 2\r\nX: 12345678\r\n\r\n{}",
        {"max_header_bytes": 32},
        "exceeds 32 bytes",
    ),
    ("too much stray text", b"this is a long log line\n", {"max_stray_bytes": 10}, "stray text"),
    ("stray text adds up", b"log 1\nlog 2\nlog 3\n", {"max_stray_bytes": 15}, "stray text"),
    (
        "long stray line",
        b"no header " * 10,
        {"max_stray_bytes": 50, "max_header_bytes": 16},
        "stray text",
    ),
]


@pytest.mark.parametrize(
    ("data", "limits", "message"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN]
)
@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_broken_streams(data: bytes, limits: dict[str, int], message: str, bytewise: bool) -> None:
    decoder = FrameDecoder(**limits)
    chunks = [data[i : i + 1] for i in range(len(data))] if bytewise else [data]
    with pytest.raises(RemoteProtocolError, match=message) as info:
        feed(chunks, decoder=decoder)
    assert info.value.error_code is ErrorCode.PARSE_ERROR
    assert info.value.request_id is None
    assert_stays_broken(decoder)


def assert_stays_broken(decoder: FrameDecoder) -> None:
    assert decoder.broken
    with pytest.raises(RemoteProtocolError, match="broken"):
        decoder.next_event()
    with pytest.raises(RemoteProtocolError, match="broken"):
        decoder.receive_data(encode_frame(b"{}"))
    with pytest.raises(RemoteProtocolError, match="broken"):
        decoder.receive_eof()
    with pytest.raises(RemoteProtocolError, match="broken"):
        decoder.next_event()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"Content-Length: 5\r\n\r\nab", "inside a frame body \\(2 of 5 bytes\\)"),
        (b"Content-Length: 5\r\n\r\n", "inside a frame body \\(0 of 5 bytes\\)"),
        (b"Content-Length: 5\r\n", "inside a frame header"),
        (b"Content-Length: 5\r\nContent-Type: x", "inside a frame header"),
        (b"content-length: 5", "inside a frame header"),
        (b"X: 1\r\nContent-Length: 5\r\n", "inside a frame header"),
    ],
)
def test_eof_cuts_a_frame(data: bytes, message: str) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    assert decoder.next_event() is NEED_DATA
    decoder.receive_eof()
    with pytest.raises(RemoteProtocolError, match=message):
        decoder.next_event()
    assert_stays_broken(decoder)


def test_error_message_never_quotes_content() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"Content-Length: secret-value\r\n\r\n")
    with pytest.raises(RemoteProtocolError) as info:
        decoder.next_event()
    assert "secret" not in str(info.value)


def test_encode_frame_counts_bytes() -> None:
    assert encode_frame(UTF8_BODY) == b"Content-Length: 20\r\n\r\n" + UTF8_BODY
    assert len(UTF8_BODY) == 20
    assert encode_frame(bytearray(b"{}")) == b"Content-Length: 2\r\n\r\n{}"
    assert encode_frame(b"") == b"Content-Length: 0\r\n\r\n"


def test_encode_frame_refuses_text() -> None:
    with pytest.raises(TypeError, match="bytes"):
        encode_frame("{}")  # type: ignore[arg-type]


# --- Hypothesis ---------------------------------------------------------------------------

bodies = st.lists(st.binary(max_size=300), max_size=8)
# Lines that can never be read as a header: no colon, so no "name:" prefix. (Binary, not
# text: Hypothesis compares its choice keys, and bytes == str warns under python -bb.)
stray_lines = st.binary(max_size=40).map(lambda data: data.translate(None, b":\r\n") + b"\n")
pieces = st.lists(
    st.one_of(
        st.binary(max_size=200).map(lambda b: ("frame", b)), stray_lines.map(lambda b: ("stray", b))
    ),
    max_size=10,
)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@given(bodies=bodies, cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=20))
def test_round_trip_in_any_chunking(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(body) for body in bodies)
    assert feed(chunked(stream, cuts), eof=True) == [*(Frame(b) for b in bodies), EOF]


@given(parts=pieces, cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=20))
def test_chunking_invariance_with_stray_text(
    parts: list[tuple[str, bytes]], cuts: list[int]
) -> None:
    stream = b""
    expected: list[FrameEvent] = []
    for kind, data in parts:
        if kind == "frame":
            stream += encode_frame(data)
            expected.append(Frame(data))
        else:
            stream += data
            expected.append(StrayText(len(data)))
    expected = merge_stray([*expected, EOF])
    assert feed([stream], eof=True) == expected
    assert feed(chunked(stream, cuts), eof=True) == expected


@settings(max_examples=300)
@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=10))
def test_garbage_raises_only_remote_protocol_error(data: bytes, cuts: list[int]) -> None:
    """Whatever the peer sends, the decoder returns events or raises RemoteProtocolError."""
    try:
        whole = feed(
            [data], eof=True, decoder=FrameDecoder(max_header_bytes=64, max_stray_bytes=128)
        )
    except RemoteProtocolError:
        whole = None
    try:
        split = feed(
            chunked(data, cuts),
            eof=True,
            decoder=FrameDecoder(max_header_bytes=64, max_stray_bytes=128),
        )
    except RemoteProtocolError:
        split = None
    assert whole == split


# --- Batched canonical frames (issue 8 goal 3) ----------------------------------------------


def test_batched_frames_match_one_at_a_time() -> None:
    """Back-to-back canonical frames are cut in one split; a body that holds a header of
    its own, a non-canonical header, and text after the last frame all end a batch early
    without changing what is decoded."""
    inner = encode_frame(b"{}")
    bodies = [b"a" * n for n in range(40)] + [inner, b"x" + inner + b"y", b""]
    stream = b"".join(encode_frame(body) for body in bodies)
    stream += b"Content-Length: 007\r\n\r\n1234567" + encode_frame(b"tail") + b"bye\n"
    expected = [*(Frame(b) for b in bodies), Frame(b"1234567"), Frame(b"tail"), StrayText(4)]
    assert feed([stream], eof=True) == [*expected, EOF]
    bytewise = [stream[i : i + 1] for i in range(len(stream))]
    assert merge_stray(feed(bytewise, eof=True)) == [*expected, EOF]


def test_buffered_bytes_counts_batched_frames() -> None:
    decoder = FrameDecoder()
    frames = [encode_frame(b"%d" % i * 10) for i in range(20)]
    decoder.receive_data(b"".join(frames) + b"Content-Le")
    remaining = sum(map(len, frames)) + len(b"Content-Le")
    for i in range(20):
        assert decoder.buffered_bytes == remaining
        assert decoder.next_event() == Frame(b"%d" % i * 10)
        remaining -= len(frames[i])
    assert decoder.next_event() is NEED_DATA
    assert decoder.buffered_bytes == len(b"Content-Le")


def test_batch_respects_the_limits() -> None:
    stream = encode_frame(b"12") + encode_frame(b"123456") + encode_frame(b"1")
    decoder = FrameDecoder(max_body_bytes=5)
    assert decoder.next_event() is NEED_DATA
    decoder.receive_data(stream)
    assert decoder.next_event() == Frame(b"12")
    with pytest.raises(RemoteProtocolError, match="body limit"):
        decoder.next_event()
    tight = FrameDecoder(max_header_bytes=len(b"Content-Length: 1\r\n\r\n"))
    tight.receive_data(encode_frame(b"1") + encode_frame(b"1234567890") + encode_frame(b"2"))
    assert tight.next_event() == Frame(b"1")
    with pytest.raises(RemoteProtocolError, match="header section exceeds"):
        tight.next_event()
