"""StrayText.sample: the first bytes of the stray text each event reports, on every path of
FrameDecoder that skips text, bounded, in any chunking, and never in a repr or an error."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given, strategies as st

from protocol import (
    EOF,
    NEED_DATA,
    STRAY_SAMPLE_BYTES,
    Frame,
    FrameDecoder,
    RemoteProtocolError,
    StrayText,
    encode_frame,
)

from .test_framing import chunked

if TYPE_CHECKING:
    from collections.abc import Iterable

FRAME = encode_frame(b"{}")


def events_of(
    chunks: Iterable[bytes], *, eof: bool = True, decoder: FrameDecoder | None = None
) -> list[Frame | StrayText]:
    """Every Frame and StrayText, unmerged (each StrayText carries its own sample)."""
    decoder = decoder or FrameDecoder()
    out: list[Frame | StrayText] = []

    def drain() -> None:
        while (event := decoder.next_event()) is not NEED_DATA and event is not EOF:
            out.append(event)
            assert decoder.pending_stray_sample == b""

    for chunk in chunks:
        decoder.receive_data(chunk)
        drain()
    if eof:
        decoder.receive_eof()
        drain()
    return out


def assert_samples(events: list[Frame | StrayText], runs: list[bytes]) -> None:
    """Each StrayText's sample is the first STRAY_SAMPLE_BYTES of exactly the bytes it counts.

    ``runs`` are the stray runs of the stream in order (the text between two frames): the
    events of one run share its bytes out in order, and a Frame ends the run.
    """
    left = list(runs)
    current = b""
    for event in events:
        if isinstance(event, Frame):
            assert current == b"", "a run was not reported whole before the frame"
            continue
        if not current:
            current = left.pop(0)
        mine, current = current[: event.byte_count], current[event.byte_count :]
        assert len(mine) == event.byte_count
        assert event.sample == mine[:STRAY_SAMPLE_BYTES]
        assert len(event.sample) <= STRAY_SAMPLE_BYTES
    assert current == b""
    assert left == []


def feedings(data: bytes) -> dict[str, list[bytes]]:
    """The whole input, one byte at a time, and every split in two."""
    out = {"whole": [data], "bytewise": [data[i : i + 1] for i in range(len(data))]}
    for cut in range(1, len(data)):
        out[f"cut{cut}"] = [data[:cut], data[cut:]]
    return out


# (name, stream, stray runs, decoder limits)
PATHS: list[tuple[str, bytes, list[bytes], dict[str, int]]] = [
    ("a whole stray line", b"hello world\n" + FRAME, [b"hello world\n"], {}),
    ("a stray line longer than the sample", b"x" * 100 + b"\n" + FRAME, [b"x" * 100 + b"\n"], {}),
    ("an empty line between frames", FRAME + b"\r\n" + FRAME, [b"\r\n"], {}),
    ("a bare empty line between frames", FRAME + b"\n" + FRAME, [b"\n"], {}),
    (
        "header-like lines followed by text",
        b"Note: starting\nWarning: x\nplain text\n" + FRAME,
        [b"Note: starting\nWarning: x\nplain text\n"],
        {},
    ),
    ("an incomplete line at EOF", FRAME + b"goodbye", [b"goodbye"], {}),
    ("header-like lines cut by EOF", b"Note: bye\nWarning: x", [b"Note: bye\nWarning: x"], {}),
    (
        "a line too long for a header, streamed",
        b"no header " * 10 + b"\n" + FRAME,
        [b"no header " * 10 + b"\n"],
        {"max_header_bytes": 24},
    ),
    (
        "escapes and bytes that are not UTF-8",
        b"\x1b[31m\xff\xfe\x00\n" + FRAME,
        [b"\x1b[31m\xff\xfe\x00\n"],
        {},
    ),
    (
        "two runs, each its own sample",
        b"first\n" + FRAME + b"second line\n" + FRAME,
        [b"first\n", b"second line\n"],
        {},
    ),
]


@pytest.mark.parametrize(
    ("stream", "runs", "limits"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS]
)
def test_each_path_samples_the_bytes_it_reports(
    stream: bytes, runs: list[bytes], limits: dict[str, int]
) -> None:
    for name, chunks in feedings(stream).items():
        events = events_of(chunks, decoder=FrameDecoder(**limits))
        samples = [e.sample for e in events if isinstance(e, StrayText)]
        try:
            assert_samples(events, runs)
        except AssertionError as exc:
            raise AssertionError(f"fed {name}: {events!r}, samples {samples!r}") from exc


def test_the_sample_is_bounded_and_whole_lines_are_not_split() -> None:
    line = b"loading config from /etc/server.toml " + b"." * 100 + b"\n"
    assert events_of([line, FRAME]) == [StrayText(len(line)), Frame(b"{}")]
    event = events_of([line[:30], line[30:] + FRAME])[0]
    assert isinstance(event, StrayText)
    assert event.sample == line[:STRAY_SAMPLE_BYTES]
    assert len(event.sample) == STRAY_SAMPLE_BYTES == 64


def test_a_short_event_samples_all_of_it() -> None:
    event = events_of([b"a\n" + FRAME])[0]
    assert isinstance(event, StrayText)
    assert event.sample == b"a\n"


@pytest.mark.parametrize("big_frame", [False, True], ids=["buffer cleared", "buffer compacted"])
def test_header_like_lines_read_before_a_new_read_are_sampled(big_frame: bool) -> None:
    # The header-like line is consumed (a header section begins) and the next read lands on
    # an emptied buffer -- cleared, or compacted after a 70 KB frame: its bytes must survive.
    body = b"x" * 70_000 if big_frame else b"{}"
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(body) + b"Note: a\n")
    assert decoder.next_event() == Frame(body)
    assert decoder.next_event() is NEED_DATA
    decoder.receive_data(b"plain\n" + FRAME)
    event = decoder.next_event()
    assert event == StrayText(len(b"Note: a\nplain\n"))
    assert isinstance(event, StrayText)
    assert event.sample == b"Note: a\nplain\n"
    assert decoder.next_event() == Frame(b"{}")


@pytest.mark.parametrize(
    ("chunks", "limits", "sample"),
    [
        ([FRAME + b"log line\n" * 10], {"max_stray_bytes": 50}, b"log line\n" * 6),
        ([b"no header " * 10], {"max_stray_bytes": 50, "max_header_bytes": 16}, b"no header " * 7),
        ([b"y\n" * 40_000], {}, b"y\n" * 32),
    ],
    ids=["whole lines", "a streamed line", "yes"],
)
def test_a_run_past_the_bound_leaves_its_start_for_the_caller_not_in_the_error(
    chunks: list[bytes], limits: dict[str, int], sample: bytes
) -> None:
    decoder = FrameDecoder(**limits)
    assert decoder.pending_stray_sample == b""
    with pytest.raises(RemoteProtocolError, match="stray text") as info:
        events_of(chunks, eof=False, decoder=decoder)
    assert decoder.pending_stray_sample == sample[:STRAY_SAMPLE_BYTES]
    assert sample[:8].decode() not in str(info.value)


def test_the_sample_stays_out_of_repr_and_equality() -> None:
    # A log line that prints the event (%r) never carries the peer's output.
    event = StrayText(6, sample=b"secret")
    assert "secret" not in repr(event)
    assert event == StrayText(6)
    assert hash(event) == hash(StrayText(6, sample=b"other!"))


# Lines that can never be read as a header (no colon), and header-like lines that plain
# text follows (stray as a whole).
plain_lines = st.binary(max_size=90).map(lambda data: data.translate(None, b":\r\n") + b"\n")
header_like = st.binary(min_size=1, max_size=30).map(
    lambda data: b"Note: " + data.translate(None, b"\r\n") + b"\nplain\n"
)
pieces = st.lists(
    st.one_of(
        st.binary(max_size=100).map(lambda b: ("frame", b)),
        plain_lines.map(lambda b: ("stray", b)),
        header_like.map(lambda b: ("stray", b)),
    ),
    max_size=10,
)


@given(parts=pieces, tail=st.binary(max_size=80), cuts=st.lists(st.integers(0, 3000), max_size=20))
def test_samples_in_any_chunking(
    parts: list[tuple[str, bytes]], tail: bytes, cuts: list[int]
) -> None:
    tail = tail.translate(None, b":\r\n")  # an incomplete stray line at EOF
    stream = b""
    runs: list[bytes] = [b""]
    for kind, data in [*parts, ("stray", tail)]:
        if kind == "frame":
            stream += encode_frame(data)
            runs.append(b"")
        else:
            stream += data
            runs[-1] += data
    runs = [run for run in runs if run]
    assert_samples(events_of([stream]), runs)
    assert_samples(events_of(chunked(stream, cuts)), runs)
