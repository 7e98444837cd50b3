"""LSP base-protocol framing (also DAP's): ``Content-Length`` headers, a blank line, a body.

Strategy (h11 ``_receivebuffer``/``_readers`` style): bytes go into one ``bytearray``
with a read offset; :meth:`FrameDecoder.next_event` consumes whole lines of the header
section one at a time and then slices the body out in one copy. The search for the
next line end resumes where the last one stopped, so every byte is scanned a bounded
number of times whatever the chunking: decoding is linear in the input. Consumed bytes
are dropped lazily, once they are at least half of the buffer. The exact header section
``Content-Length: N\r\n\r\n`` that nearly every peer writes is matched in one step;
everything else goes line by line (benchmarks/bench_framing.py measures both). When
several such frames of small messages are buffered back to back, one regular-expression split
of a bounded window (64 KiB) cuts them all and :meth:`FrameDecoder.next_event` hands them
out one per call: the per-frame cost is then a fraction of a header match.
A body that happens to contain such a header only ends the batch early (its length no longer
matches), so batching never changes what is decoded.

Policy (the LSP base protocol,
https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#baseProtocol):

* ``Content-Length`` counts bytes of the body; header names are case-insensitive;
  ``Content-Type`` and unknown headers are accepted and ignored; the value may follow
  the colon with or without spaces or tabs.
* Lines end in ``\\r\\n``. A bare ``\\n`` is accepted as well: the body starts after
  the ``\\n`` that ends the blank line and is then taken by count, so leniency about
  line ends can never shift a body boundary.
* Text between frames that is not a header line (a server printing to stdout) is
  skipped line by line and reported as :class:`StrayText` with its byte count and a
  bounded sample of its first bytes (at most :data:`STRAY_SAMPLE_BYTES`, for a tool
  that shows the developer what leaked; the event's ``repr`` and its equality leave it
  out, so logging an event never prints a peer's output). Header lines without a
  ``Content-Length`` that are followed by such a line are counted as stray text as well
  (``Note: starting`` looks like a header). At most ``max_stray_bytes`` may come in a
  row (between two frames).
* The stream is broken -- :class:`RemoteProtocolError`, and every later call raises
  again -- for a header section without ``Content-Length`` or with a value that is not
  a decimal number, negative, or over ``max_body_bytes``; two different
  ``Content-Length`` values; a line that is not a header after a ``Content-Length``; a
  header section over ``max_header_bytes``; too much stray text; and an end of input
  that cuts a frame.
"""

from __future__ import annotations

import enum
import operator
import re
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from ._codes import ErrorCode
from ._errors import RemoteProtocolError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = (
    "EOF",
    "NEED_DATA",
    "STRAY_SAMPLE_BYTES",
    "Frame",
    "FrameDecoder",
    "FrameEvent",
    "StrayText",
    "encode_frame",
)


class _Sentinel(enum.Enum):
    NEED_DATA = "NEED_DATA"
    EOF = "EOF"

    def __repr__(self) -> str:
        return self.value

    __str__ = __repr__


#: Returned by :meth:`FrameDecoder.next_event` when more bytes are needed.
NEED_DATA: Final = _Sentinel.NEED_DATA
#: Returned by :meth:`FrameDecoder.next_event` once :meth:`FrameDecoder.receive_eof` was
#: called and every buffered frame was consumed.
EOF: Final = _Sentinel.EOF
#: Most bytes a :class:`StrayText` quotes of the text it reports (its ``sample``).
STRAY_SAMPLE_BYTES: Final = 64


@dataclass(frozen=True, slots=True)
class Frame:
    """One complete message body.

    Attributes:
        body: The body bytes, exactly ``Content-Length`` of them (usually UTF-8 JSON).
    """

    body: bytes


@dataclass(frozen=True, slots=True)
class StrayText:
    """Bytes between frames that were not a frame and were skipped.

    Attributes:
        byte_count: How many bytes were skipped since the last event (> 0).
        sample: The first of those bytes, at most :data:`STRAY_SAMPLE_BYTES` of them
            (all of them when ``byte_count`` is no larger), raw: escape before showing.
            Neither ``repr`` nor ``==`` looks at it (``StrayText(5)`` equals the decoder's
            event for five bytes), so a log line that prints the event never carries a
            peer's output.
    """

    byte_count: int
    sample: bytes = field(default=b"", repr=False, compare=False)


_SET_FRAME_BODY = Frame.__dict__["body"].__set__
# A frozen dataclass's __init__ costs more than the rest of reporting a stray line: the
# decoder sets the two slots itself (every field is checked already).
_SET_STRAY_COUNT = StrayText.__dict__["byte_count"].__set__
_SET_STRAY_SAMPLE = StrayText.__dict__["sample"].__set__

#: What :meth:`FrameDecoder.next_event` returns.
FrameEvent: TypeAlias = Frame | StrayText | Literal[_Sentinel.NEED_DATA, _Sentinel.EOF]

# RFC 9110 token characters, then the colon: what starts a header line.
_HEADER_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:")
_CONTENT_LENGTH = b"content-length"
# No leading zeros: the header of a batched frame is then known from its length alone
# (``buffered_bytes``); "007" takes the general path.
_CANONICAL = rb"Content-Length: ([1-9][0-9]{0,19}|0)\r\n\r\n"
_CANONICAL_HEADER = re.compile(_CANONICAL)
_SPLIT_CANONICAL = re.compile(_CANONICAL).split
_CANONICAL_OVERHEAD = len(b"Content-Length: \r\n\r\n")
_BATCH_WINDOW_BYTES = 65536
_OWS = b" \t"
# A body limit in decimal has far fewer digits; longer values are rejected before int()
# (which refuses strings over 4300 digits anyway).
_MAX_LENGTH_DIGITS = 20
_COMPACT_MIN_BYTES = 65536
_SLICE_COPY_MAX = 4096
#: A body at least this large that empties the buffer releases it at once.
_RELEASE_MIN_BYTES = 1024 * 1024


def _first_true(flags: Iterator[bool], default: int) -> int:
    """The index of the first true flag, or ``default`` (at most ``default``)."""
    for index, flag in enumerate(flags):
        if flag or index >= default:
            return min(index, default)
    return default


def _positive_limit(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


class FrameDecoder:
    """Sans-I/O decoder of LSP base-protocol frames (bytes in, events out).

    Feed bytes with :meth:`receive_data` in any chunking, signal the end of input with
    :meth:`receive_eof`, and call :meth:`next_event` until it returns
    :data:`NEED_DATA` (or :data:`EOF`). Events come in stream order: a
    :class:`StrayText` is reported before the frame that follows it.

    Args:
        max_header_bytes: Largest header section, in bytes, counting its line ends and
            the blank line. Default 8 KiB.
        max_body_bytes: Largest ``Content-Length`` accepted, in bytes. Default 64 MiB.
        max_stray_bytes: Most stray bytes tolerated in a row between two frames.
            Default 64 KiB.

    Raises:
        TypeError: A limit is not an ``int``.
        ValueError: A limit is not positive.
    """

    def __init__(
        self,
        *,
        max_header_bytes: int = 8192,
        max_body_bytes: int = 64 * 1024 * 1024,
        max_stray_bytes: int = 65536,
    ) -> None:
        self._max_header = _positive_limit("max_header_bytes", max_header_bytes)
        self._max_body = _positive_limit("max_body_bytes", max_body_bytes)
        self._max_stray = _positive_limit("max_stray_bytes", max_stray_bytes)
        self._buf = bytearray()
        # Bytes before _pos are consumed; the next b"\n" search starts at _scan >= _pos.
        self._pos = 0
        self._scan = 0
        # The header section being read: its consumed lines and their Content-Length.
        self._section_bytes = 0
        self._section_lines = 0
        self._content_length: int | None = None
        # Set once the blank line was read: the body length still to take.
        self._body_length: int | None = None
        # Inside a stray line already known not to be a header (it was too long).
        self._in_stray_line = False
        self._stray_run = 0
        self._stray_unreported = 0
        # Where the unreported stray text starts in the buffer: its pieces are contiguous and
        # all of them are counted and reported within one next_event() call, so nothing
        # drops them from the buffer meanwhile; the sample is cut from there once.
        self._stray_start = 0
        self._eof = False
        self._error: RemoteProtocolError | None = None
        # Frames already cut by a batch split (their bytes consumed), last one first.
        self._ready: list[Frame] = []

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned or skipped (header lines already read of an
        unfinished frame are not counted)."""
        ready = sum(len(f.body) + _CANONICAL_OVERHEAD + len(str(len(f.body))) for f in self._ready)
        return len(self._buf) - self._pos + ready

    @property
    def broken(self) -> bool:
        """Whether a :class:`RemoteProtocolError` was raised; every later call raises."""
        return self._error is not None

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes.

        EOF convention (the one of every ``protocol`` layer): the end of input is
        signalled with :meth:`receive_eof`, never with empty data; ``b""`` is a no-op.

        Args:
            data: The next bytes of the stream, split anywhere.

        Raises:
            RemoteProtocolError: The decoder is broken.
            RuntimeError: :meth:`receive_eof` was already called.
        """
        self._check_broken()
        if self._eof:
            raise RuntimeError("receive_data() after receive_eof()")
        if not data:
            return
        buf = self._buf
        # The lines of an unfinished header section stay buffered (at most
        # max_header_bytes): if plain text follows, they are stray text to sample.
        keep = self._section_bytes
        pos = self._pos - keep
        if pos == len(buf):
            buf.clear()
            self._pos = self._scan = 0
        elif pos >= _COMPACT_MIN_BYTES and 2 * pos >= len(buf):
            del buf[:pos]
            self._scan -= pos
            self._pos = keep
        buf += data

    def receive_eof(self) -> None:
        """Signal that the peer closed the stream; no more data follows.

        Idempotent. :meth:`next_event` then returns the remaining frames, any pending
        :class:`StrayText`, and :data:`EOF` -- or raises if the input ended inside a
        frame.

        Raises:
            RemoteProtocolError: The decoder is broken.
        """
        self._check_broken()
        self._eof = True

    def next_event(self) -> FrameEvent:
        """Return the next event parsed from the buffered bytes.

        Returns:
            A :class:`Frame`, a :class:`StrayText`, :data:`NEED_DATA` when more bytes are
            needed, or :data:`EOF` after :meth:`receive_eof` once everything buffered
            was returned (again on every later call).

        Raises:
            RemoteProtocolError: The stream is broken (see the module docstring; its
                ``error_code`` is ``PARSE_ERROR``). The decoder stays broken: every
                later call raises again.
        """
        ready = self._ready
        if ready:
            return ready.pop()
        if self._error is not None:
            self._check_broken()
        if self._body_length is None and not (
            self._section_lines or self._in_stray_line or self._stray_unreported
        ):
            # Fast path for the header section nearly every peer writes; anything
            # else (other headers, other spacing, bare \n, a bad length) takes the
            # general path, which also raises the errors.
            pos = self._pos
            buf = self._buf
            fast = _CANONICAL_HEADER.match(buf, pos)
            if fast is not None:
                body_start = fast.end()
                length = int(fast.group(1))
                if length <= self._max_body and body_start - pos <= self._max_header:
                    end = body_start + length
                    if end > len(buf):
                        # The body is still arriving; the general path waits for it.
                        self._body_length = length
                        self._pos = self._scan = body_start
                    else:
                        self._stray_run = 0
                        if length < _SLICE_COPY_MAX:
                            if end < len(buf):
                                frame = self._split_batch(pos)
                                if frame is not None:
                                    return frame
                            self._pos = self._scan = end
                            return Frame(bytes(buf[body_start:end]))
                        with memoryview(buf) as view:
                            frame = Frame(view[body_start:end].tobytes())
                        if length >= _RELEASE_MIN_BYTES and end == len(buf):
                            buf.clear()  # see _next_event: no second copy stays behind
                            end = 0
                        self._pos = self._scan = end
                        return frame
        try:
            return self._next_event()
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def _split_batch(self, pos: int) -> Frame | None:
        """Cut the canonical frames that start at ``pos`` (the first one is complete).

        Returns the first frame and keeps the others in ``_ready``; None when the first
        body holds a canonical header itself (the caller then takes it by its length).
        """
        with memoryview(self._buf) as view:  # one copy (a bytearray slice would be two)
            window = view[pos : pos + _BATCH_WINDOW_BYTES].tobytes()
        parts = _SPLIT_CANONICAL(window)
        # parts: b"" (the window starts with a header), then (length, body) pairs; a body
        # that does not match its length was cut by the window, ends in text that is not a
        # frame, or contains a header, and it and everything after it are left in the buffer.
        # The checks run over whole lists in C (a loop in Python only past the first frame
        # that fails one, which ends the batch there): per frame, in Python, they cost as
        # much as the split.
        digits = parts[1::2]
        bodies = parts[2::2]
        sizes = list(map(len, bodies))
        count = len(sizes)
        # Usually only the last body differs from its length (cut by the window). The others
        # are compared as text, one formatting and one join for all of them (an int() per
        # frame cost as much as the split): the regular expression admits no leading zero,
        # so the digits equal a size's decimal text exactly when their value equals it.
        head = count - 1
        if b"%d " * head % tuple(sizes[:head]) != b" ".join([*digits[:head], b""]):
            lengths = list(map(int, digits))
            count = _first_true(map(operator.ne, sizes, lengths), head)
        elif sizes[head] != int(digits[head]):
            count = head
        if count and max(sizes[:count]) > self._max_body:
            count = _first_true(map(operator.gt, sizes, repeat(self._max_body)), count)
        # A header of 20 digits is 40 bytes: only a smaller header limit needs a check.
        if count and self._max_header < 40:
            limit = self._max_header - _CANONICAL_OVERHEAD
            count = _first_true(map(operator.gt, map(len, digits), repeat(limit)), count)
        if not count:
            return None
        # Built like _jsonrpc's messages: every field is checked, __init__ is not needed.
        frames: list[Frame] = list(map(object.__new__, repeat(Frame, count)))
        deque(map(_SET_FRAME_BODY, frames, bodies), maxlen=0)
        # The window is its frames' headers and bodies end to end: what the batch consumed is
        # the window less what is left of it (usually one frame, cut), not a sum over frames.
        left = (
            sum(sizes[count:])
            + sum(map(len, digits[count:]))
            + (len(sizes) - count) * _CANONICAL_OVERHEAD
        )
        self._pos = self._scan = pos + len(window) - left
        frames.reverse()
        first = frames.pop()
        self._ready = frames
        return first

    def _check_broken(self) -> None:
        if self._error is not None:
            raise RemoteProtocolError(
                f"the frame decoder is broken: {self._error}", error_code=ErrorCode.PARSE_ERROR
            )

    def _fail(self, message: str) -> RemoteProtocolError:
        return RemoteProtocolError(message, error_code=ErrorCode.PARSE_ERROR)

    @property
    def pending_stray_sample(self) -> bytes:
        """The first bytes (at most :data:`STRAY_SAMPLE_BYTES`) of stray text skipped but not
        yet returned as a :class:`StrayText`.

        Empty between events. After the :class:`RemoteProtocolError` for too much stray text
        it is the start of what broke the bound (which the error's message never quotes).
        """
        return self._stray_sample() if self._stray_unreported else b""

    def _stray_sample(self) -> bytes:
        start = self._stray_start
        count = self._stray_unreported
        stop = start + (count if count < STRAY_SAMPLE_BYTES else STRAY_SAMPLE_BYTES)
        return bytes(self._buf[start:stop])

    def _add_stray(self, count: int, end: int) -> None:
        """Count the ``count`` stray bytes that end at ``end`` in the buffer."""
        if not self._stray_unreported:
            self._stray_start = end - count
        self._stray_run += count
        self._stray_unreported += count
        if self._stray_run > self._max_stray:
            raise self._fail(
                f"more than {self._max_stray} bytes of stray text between frames "
                f"({self._stray_run} bytes in a row)"
            )

    def _report_stray(self) -> StrayText:
        event: StrayText = object.__new__(StrayText)
        _SET_STRAY_COUNT(event, self._stray_unreported)
        _SET_STRAY_SAMPLE(event, self._stray_sample())
        self._stray_unreported = 0
        return event

    def _reset_section(self) -> None:
        self._section_bytes = 0
        self._section_lines = 0
        self._content_length = None

    def _next_event(self) -> FrameEvent:
        buf = self._buf
        while True:
            if self._body_length is not None:
                return self._next_body()
            newline = buf.find(b"\n", self._scan)
            if newline == -1:
                return self._incomplete_line()
            line_end = newline + 1
            self._scan = line_end
            pos = self._pos
            line_bytes = line_end - pos
            if self._in_stray_line:
                self._in_stray_line = False
                self._pos = line_end
                self._add_stray(line_bytes, line_end)
                continue
            content_end = newline - 1 if newline > pos and buf[newline - 1] == 0x0D else newline
            if content_end == pos:
                if self._section_lines == 0:
                    # An empty line between frames carries nothing: stray text.
                    self._pos = line_end
                    self._add_stray(line_bytes, line_end)
                    continue
                self._end_section(line_bytes)
                self._pos = line_end
                continue
            match = _HEADER_NAME.match(buf, pos, content_end)
            if match is None:
                if self._content_length is not None:
                    raise self._fail("malformed header line in a header section")
                # Header-like lines without a Content-Length followed by plain text were
                # program output too.
                self._pos = line_end
                self._add_stray(self._section_bytes + line_bytes, line_end)
                self._reset_section()
                continue
            self._section_bytes += line_bytes
            if self._section_bytes > self._max_header:
                raise self._header_too_large()
            self._section_lines += 1
            name_end = match.end() - 1
            if name_end - pos == len(_CONTENT_LENGTH) and buf[pos:name_end].lower() == (
                _CONTENT_LENGTH
            ):
                self._read_content_length(bytes(buf[name_end + 1 : content_end]))
            self._pos = line_end

    def _header_too_large(self) -> RemoteProtocolError:
        return self._fail(f"header section exceeds {self._max_header} bytes")

    def _read_content_length(self, raw: bytes) -> None:
        value = raw.strip(_OWS)
        if value.startswith(b"-") and value[1:].isdigit():
            raise self._fail("Content-Length is negative")
        if not value.isdigit():
            raise self._fail("Content-Length is not a decimal number")
        if len(value) > _MAX_LENGTH_DIGITS or int(value) > self._max_body:
            raise self._fail(f"Content-Length exceeds the body limit of {self._max_body} bytes")
        length = int(value)
        if self._content_length is not None and self._content_length != length:
            raise self._fail("conflicting Content-Length headers")
        self._content_length = length

    def _end_section(self, line_bytes: int) -> None:
        self._section_bytes += line_bytes
        if self._section_bytes > self._max_header:
            raise self._header_too_large()
        if self._content_length is None:
            raise self._fail("header section without Content-Length")
        self._body_length = self._content_length
        self._reset_section()

    def _next_body(self) -> FrameEvent:
        if self._stray_unreported:
            return self._report_stray()
        length = self._body_length
        assert length is not None
        buf = self._buf
        start = self._pos
        end = start + length
        available = len(buf) - start
        if available < length:
            if self._eof:
                raise self._fail(
                    f"end of input inside a frame body ({available} of {length} bytes)"
                )
            return NEED_DATA
        if length < _SLICE_COPY_MAX:
            body = bytes(buf[start:end])
        elif start == 0 and end == len(buf):
            body = bytes(buf)
        else:
            # One copy instead of two (a bytearray slice, then bytes of it).
            with memoryview(buf) as view:
                body = view[start:end].tobytes()
        if length >= _RELEASE_MIN_BYTES and end == len(buf):
            # Memory bound: a large body would otherwise stay buffered, a second copy of
            # it, until the next bytes arrive (perhaps much later).
            buf.clear()
            end = 0
        self._pos = self._scan = end
        self._body_length = None
        self._stray_run = 0
        return Frame(body)

    def _incomplete_line(self) -> FrameEvent:
        """No line end is buffered: bound the partial line, then NEED_DATA/EOF/StrayText."""
        buf = self._buf
        pos = self._pos
        self._scan = len(buf)
        partial = len(buf) - pos
        if self._in_stray_line:
            if partial:
                self._pos = len(buf)
                self._add_stray(partial, len(buf))
        elif self._section_bytes + partial > self._max_header:
            if self._section_lines or _HEADER_NAME.match(buf, pos) is not None:
                raise self._header_too_large()
            # Too long for a header line and not shaped like one: stream it out as stray
            # text instead of buffering it.
            self._in_stray_line = True
            self._pos = len(buf)
            self._add_stray(partial, len(buf))
        if self._eof:
            self._finish_at_eof()
        if self._stray_unreported:
            return self._report_stray()
        return EOF if self._eof else NEED_DATA

    def _finish_at_eof(self) -> None:
        buf = self._buf
        pos = self._pos
        partial = len(buf) - pos
        match = _HEADER_NAME.match(buf, pos)
        cut_content_length = (
            match is not None and buf[pos : match.end() - 1].lower() == _CONTENT_LENGTH
        )
        if self._content_length is not None or cut_content_length:
            raise self._fail("end of input inside a frame header")
        leftover = self._section_bytes + partial
        self._reset_section()
        self._in_stray_line = False
        self._pos = self._scan = len(buf)
        if leftover:
            self._add_stray(leftover, len(buf))


def encode_frame(body: bytes | bytearray | memoryview) -> bytes:
    """Frame one message body for the LSP base protocol.

    Args:
        body: The encoded body (for JSON-RPC, :func:`~protocol.encode_message`'s output).

    Returns:
        ``Content-Length: <byte length>\\r\\n\\r\\n`` followed by the body.

    Raises:
        TypeError: ``body`` is a ``str``: Content-Length counts bytes, so encode first.
    """
    if isinstance(body, str):
        raise TypeError(
            "encode_frame() takes bytes; encode the text first (Content-Length counts bytes)"
        )
    data = bytes(body)
    return b"Content-Length: %d\r\n\r\n" % len(data) + data
