"""The stderr ring: the last lines a child wrote to stderr, bounded in lines and bytes.

stderr that nobody asked for is still read (a child blocked on a full pipe would hang), and
its last lines are kept for crash reports and snapshots. Lines are split on ``\\n`` across
chunks; a line longer than ``line_bytes`` is cut (on a character boundary), and a partial
line that never ends is bounded the same way.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("DEFAULT_STDERR_LINES", "DEFAULT_STDERR_LINE_BYTES", "StderrRing")

#: Lines kept by default.
DEFAULT_STDERR_LINES: Final = 50
#: Bytes kept of one line by default.
DEFAULT_STDERR_LINE_BYTES: Final = 1024


def _decode(line: bytes, limit: int) -> str:
    return line[:limit].rstrip(b"\r").decode("utf-8", "ignore" if len(line) > limit else "replace")


class StderrRing:
    """The last ``lines`` stderr lines of a child, each at most ``line_bytes`` bytes.

    Args:
        lines: How many lines are kept (older ones are dropped).
        line_bytes: How many bytes of one line are kept.
        on_line: Called with each complete line as it is added (for example to queue a log
            event); not called for empty lines.
    """

    __slots__ = ("_line_bytes", "_lines", "_on_line", "_partial")

    def __init__(
        self,
        lines: int = DEFAULT_STDERR_LINES,
        line_bytes: int = DEFAULT_STDERR_LINE_BYTES,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self._lines: deque[str] = deque(maxlen=lines)
        self._line_bytes = line_bytes
        self._partial = bytearray()
        self._on_line = on_line

    def feed(self, chunk: bytes) -> None:
        """Add bytes read from stderr."""
        if b"\n" not in chunk:
            room = self._line_bytes * 4 - len(self._partial)
            if room > 0:
                self._partial += chunk[:room]
            return
        parts = (bytes(self._partial) + chunk).split(b"\n")
        last = parts.pop()
        self._partial = bytearray(last[: self._line_bytes * 4])
        for part in parts:
            self._add(part)

    def feed_eof(self) -> None:
        """The stream ended: a partial last line counts as a line."""
        if self._partial:
            self._add(bytes(self._partial))
            self._partial.clear()

    def _add(self, raw: bytes) -> None:
        text = _decode(raw, self._line_bytes)
        if not text:
            return
        self._lines.append(text)
        if self._on_line is not None:
            self._on_line(text)

    def tail(self, count: int | None = None) -> list[str]:
        """The last ``count`` lines (all kept lines when None), oldest first."""
        lines = list(self._lines)
        return lines if count is None else lines[-count:] if count > 0 else []

    def __len__(self) -> int:
        return len(self._lines)

    def __bool__(self) -> bool:
        return bool(self._lines)
