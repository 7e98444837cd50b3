"""Untrusted output never escapes its reader: random escape-rich bytes in random chunkings.

Whatever a program writes to its terminal, or an adapter or server to its protocol stream, is
data. The terminal renderer never raises (at worst it falls back to plain text, and says so);
the framers (the LSP base-protocol :class:`~protocol.FrameDecoder` and the DAP decoder) raise
only their documented :class:`~protocol.RemoteProtocolError` and buffer a bounded amount.
"""

from __future__ import annotations

import codecs

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from protocol import EOF, NEED_DATA, DAPConnection, FrameDecoder, RemoteProtocolError
from supervisor._terminal._render import RetainedDisplay

#: Pieces that make escape sequences likely: CSI/OSC/DCS introducers (7- and 8-bit), private
#: markers, huge and many parameters, intermediates, terminators, C0 and C1 controls, charset
#: designations, bytes that are not UTF-8.
_TERMINAL_PIECES = [
    b"\x1b[",
    b"\x1b[?",
    b"\x1b[>",
    b"\x1b[=",
    b"\x1b]",
    b"\x1bP",
    b"\x1b_",
    b"\x1b^",
    b"\x1bX",
    b"\x1b(",
    b"\x1b)",
    b"\x1b*",
    b"\x1b#",
    b"\x1b%",
    b"\x1b\\",
    b"\x07",
    b"\x1b",
    b";",
    b":",
    b"$",
    b" ",
    b"!",
    b"99999999999999999999",
    b"9999",
    b"0",
    b"1",
    b"2",
    b";" * 300,
    b"\r",
    b"\n",
    b"\t",
    b"\x08",
    b"\x18",
    b"\x1a",
    b"\xc2\x9b",  # C1 CSI, UTF-8 encoded
    b"\xc2\x9d",
    b"\xc2\x90",
    b"\xc2\x85",
    b"\xe2\x96\xbd",
    b"\xf0\x9f\x98\x80",
    b"\xe4\xb8\xad",
    b"\x80",
    b"\xff",
    b"\xc3",
    b"x" * 500,
    # Erase modes pyte 0.8.2 raises on: the plain-text fallback gets random input too.
    b"\x1b[5K",
    b"\x1b[7J",
    *(bytes([c]) for c in range(0x40, 0x7F)),
]

#: Whole CSI sequences: 7- or 8-bit introducer, an optional private marker, up to 40
#: parameters of any size (empty ones too), an optional intermediate, any final byte.
_csi = st.builds(
    lambda intro, marker, params, inter, final: (
        intro + marker + b";".join(b"%d" % p if p >= 0 else b"" for p in params) + inter + final
    ),
    st.sampled_from([b"\x1b[", b"\xc2\x9b"]),
    st.one_of(st.just(b""), st.sampled_from([b"?", b">", b"=", b"<"])),
    st.lists(st.one_of(st.integers(-1, 10), st.integers(-1, 2**70)), max_size=40),
    st.one_of(st.just(b""), st.sampled_from([b" ", b"$", b"!", b'"', b"'"])),
    st.integers(0x40, 0x7E).map(lambda c: bytes([c])),
)

_terminal_bytes = st.lists(
    st.one_of(st.sampled_from(_TERMINAL_PIECES), _csi, st.binary(max_size=6)), max_size=60
).map(b"".join)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, start = [], 0
    for point in [*points, len(data)]:
        out.append(data[start:point])
        start = point
    return out


_FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FAST
@given(
    data=_terminal_bytes,
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    rows=st.integers(1, 30),
    cols=st.integers(1, 100),
    slice_chars=st.one_of(st.none(), st.integers(1, 64)),
    resize=st.one_of(st.none(), st.tuples(st.integers(1, 30), st.integers(1, 100))),
)
def test_the_renderer_never_raises(
    data: bytes,
    cuts: list[int],
    rows: int,
    cols: int,
    slice_chars: int | None,
    resize: tuple[int, int] | None,
) -> None:
    display = RetainedDisplay(rows, cols, max_pending_chars=4096, max_history_bytes=2048)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for i, chunk in enumerate(_chunks(data, cuts)):
        display.feed(decoder.decode(chunk))
        if resize is not None and i == 1:
            display.resize(*resize)
        display.render_pending(slice_chars)
    display.feed(decoder.decode(b"", final=True))
    display.render_pending()
    text = display.snapshot(1024)
    assert len(text.encode("utf-8")) <= 1024
    assert display.fallback is None or isinstance(display.fallback, str)


def test_a_sequence_the_emulator_rejects_falls_back_to_plain_text() -> None:
    # pyte raises on an erase with an unknown mode; the display keeps what it showed and
    # goes on in plain text, saying why.
    display = RetainedDisplay(24, 80)
    display.feed("before\r\n\x1b[5K\x1b[31mafter\x1b[0m\r\n")
    display.render_pending()
    assert display.fallback is not None
    display.feed("\x1b]0;title\x07more\x1b[1;2Hend\r\n")
    display.render_pending()
    lines = display.snapshot(4096).splitlines()
    assert lines[0] == "before"
    assert lines[-2:] == ["after", "moreend"]


def test_private_and_extra_parameters_render() -> None:
    # vim's start-up query (CSI ? 4 m) and a CSI with more parameters than its command takes
    # made the emulator raise TypeError; they are now ignored / trimmed, and rendering goes on.
    display = RetainedDisplay(5, 20)
    display.feed("\x1b[?4m\x1b[?1;2n\x1b[1;2;3P\x1b[2;3;4Cab\r\n")
    display.render_pending()
    assert display.fallback is None
    assert display.snapshot(100) == "  ab"


# -- framers -------------------------------------------------------------------------

_BODY = b'{"seq":1,"type":"event","event":"output","body":{"output":"\\u001b[31m"}}'
_FRAME_PIECES = [
    b"Content-Length: ",
    b"content-length:",
    b"Content-Type: x\r\n",
    b"%d" % len(_BODY),
    b"-1",
    b"99999999999999999999",
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    _BODY,
    b"Content-Length: %d\r\n\r\n%s" % (len(_BODY), _BODY),
    b"Content-Length: 2\r\n\r\n{}",
    b"Content-Length: 4\r\n\r\nnull",
    b'{"seq":1,"type":"response","request_seq":1,"success":true,"command":"x"}',
    b"\xff\xfe",
    b"\x1b[31m",
    b" " * 200,
]
_frame_bytes = st.lists(
    st.one_of(
        st.sampled_from(_FRAME_PIECES), st.sampled_from(_TERMINAL_PIECES), st.binary(max_size=8)
    ),
    max_size=40,
).map(b"".join)

_MAX_HEADER, _MAX_BODY, _MAX_STRAY = 256, 1024, 512


def _feed_framer(conn: FrameDecoder | DAPConnection, chunks: list[bytes]) -> None:
    """Feed ``chunks``, draining after each; only RemoteProtocolError may end it."""
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while conn.next_event() is not NEED_DATA:
                pass
            # Bounded: what is kept is at most one header section and one body.
            decoder = conn if isinstance(conn, FrameDecoder) else conn._decoder
            assert decoder.buffered_bytes <= _MAX_HEADER + _MAX_BODY + len(chunk)
        conn.receive_eof()
        while conn.next_event() is not EOF:
            pass
    except RemoteProtocolError:
        assert conn.broken


@pytest.mark.parametrize("decoder_type", [FrameDecoder, DAPConnection])
@_FAST
@given(data=_frame_bytes, cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_the_frame_and_dap_decoders_raise_only_protocol_errors(
    decoder_type: type[FrameDecoder | DAPConnection], data: bytes, cuts: list[int]
) -> None:
    conn = decoder_type(
        max_header_bytes=_MAX_HEADER, max_body_bytes=_MAX_BODY, max_stray_bytes=_MAX_STRAY
    )
    _feed_framer(conn, _chunks(data, cuts))
