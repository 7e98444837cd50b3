"""Retained context: the plain text a terminal displayed, rendered by a VT emulator.

Contract (the plugin contract "Close, retained context and reopen"): on close the
supervisor keeps "a plain-text suffix of its displayed terminal output": rendered text without
escape sequences, at most the byte budget (default 16 384, at most 262 144, 0 keeps none),
cut on a character boundary so the reported size can be smaller than the budget. A program
that redraws (curses) leaves only its last frame, not every intermediate frame.

Strategy. Output is rendered by pyte (a VT100/xterm emulator) into a screen of the terminal's
size; lines that scroll off the top of the full screen are kept as plain text in a history
bounded by bytes. pyte is pure Python and slow (about 200 000 characters a second here, 50
to 100 times slower than the PTY), so it never runs in the read loop, and it must not run
*beside* a flood either (a worker thread rendering holds the GIL half the time and halves the
read throughput):

- :meth:`RetainedDisplay.feed` (Trio thread, cheap) appends decoded text to a *pending* list
  bounded to ``max_pending_chars`` (:func:`pending_bound`: proportional to the retained
  budget). When a program produces more than that before it can be rendered (a flood), the
  oldest pending text is dropped and the emulator is reset: the display is then rebuilt from
  the newest output only, starting at a line boundary. That is exact for what a flood leaves
  on screen (its last lines) and keeps the cost of rendering bounded by the pending bound,
  never by the amount of output.
- :meth:`RetainedDisplay.render_pending` (a worker thread) feeds pending text to pyte, in
  slices when asked, so the caller (``_terminal``'s render loop) stops as soon as output
  outruns it and renders once the output pauses.
- :meth:`RetainedDisplay.snapshot` (no render running) gives the budgeted suffix.

Resizes are queued in the pending list too, so they apply between the same bytes they came
between on the wire.

Untrusted output. Whatever a program writes is rendered, never trusted: pyte calls some of
its handlers with a ``private=True`` they do not take (``CSI ? Pm m``, the modifyOtherKeys
query vim writes at start-up, raised ``TypeError`` out of the renderer and ended the
supervisor). :class:`_HistoryScreen` ignores private forms of those handlers (each is a
different command pyte does not implement: a query or a mode the plain text does not show),
and any other exception from the emulator makes the display *fall back to plain text* from
then on (:attr:`RetainedDisplay.fallback` says why): escape sequences and control characters
are stripped and the lines are kept, bounded like the history. A program can at worst
degrade its own terminal's retained text; nothing it writes raises out of this module.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import pyte

from .._boundary import internal_message

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = (
    "DEFAULT_MAX_PENDING_CHARS",
    "MAX_HISTORY_BYTES",
    "MIN_PENDING_CHARS",
    "RetainedDisplay",
    "pending_bound",
    "utf8_suffix",
)

logger = logging.getLogger("supervisor.terminal")

#: Output characters waiting to be rendered before the oldest are dropped (ours).
DEFAULT_MAX_PENDING_CHARS: Final = 131_072
#: The smallest pending bound :func:`pending_bound` gives (ours).
MIN_PENDING_CHARS: Final = 16_384


def pending_bound(budget_bytes: int, rows: int, cols: int) -> int:
    """The pending bound for a display whose snapshot keeps ``budget_bytes`` bytes.

    The budget plus two screens plus 4 096: when output outruns rendering, the newest output
    of that size renders about the budgeted suffix (every displayed character came from at
    least one output character, and a character is at least one byte), while the cost of
    rendering what is pending at close stays proportional to the budget, not to the largest
    budget (pyte renders roughly 200 000 characters a second). Clamped to
    ``MIN_PENDING_CHARS .. DEFAULT_MAX_PENDING_CHARS``.
    """
    wanted = budget_bytes + 2 * rows * cols + 4_096
    return max(MIN_PENDING_CHARS, min(DEFAULT_MAX_PENDING_CHARS, wanted))


#: Scrolled-off text kept, in UTF-8 bytes: the largest retained budget.
MAX_HISTORY_BYTES: Final = 262_144


def utf8_suffix(text: str, budget_bytes: int) -> str:
    """The longest suffix of ``text`` whose UTF-8 form has at most ``budget_bytes`` bytes.

    The cut never splits a character, so the result can be up to 3 bytes shorter than the
    budget.
    """
    if budget_bytes <= 0:
        return ""
    data = text.encode("utf-8")
    if len(data) <= budget_bytes:
        return text
    tail = data[len(data) - budget_bytes :]
    start = 0
    # Skip continuation bytes (0b10xxxxxx): they belong to a character cut in half.
    while start < len(tail) and tail[start] & 0xC0 == 0x80:
        start += 1
    return tail[start:].decode("utf-8")


#: Escape sequences and control characters the plain-text fallback strips: CSI (7- and 8-bit)
#: with its parameters, OSC / DCS / SOS / PM / APC strings up to their terminator (or the end
#: of the chunk), two- and three-character ESC sequences, C0 controls but TAB and LF, DEL and
#: C1 controls.
_CONTROL_RE: Final = re.compile(
    r"(?:\x1b\[|\x9b)[\x20-\x3f]*[\x40-\x7e]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)


def _csi_arity(name: str) -> tuple[int, bool]:
    """How many parameters pyte's CSI handler ``name`` takes, and whether it takes ``private``."""
    parameters = list(inspect.signature(getattr(pyte.Screen, name)).parameters.values())[1:]
    takes_private = any(p.name == "private" or p.kind is p.VAR_KEYWORD for p in parameters)
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return -1, takes_private
    positional = (p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return sum(1 for p in positional if p.name != "private"), takes_private


#: pyte's CSI handlers: name -> (parameters taken, -1 for any; whether ``private`` is taken).
_CSI_ARITY: Final = {
    name: _csi_arity(name) for name in set(pyte.Stream.csi.values()) if hasattr(pyte.Screen, name)
}


def _tolerant(handler: Callable[..., Any], arity: int, takes_private: bool) -> Callable[..., Any]:
    """``handler`` called with at most ``arity`` parameters, ignoring a private form it lacks.

    pyte passes every parameter of the sequence and ``private=True`` when it has a ``?``; a
    handler that takes fewer, or no ``private``, raised ``TypeError``. Extra parameters mean
    nothing to these commands; the private form of such a command is another command.
    """

    @functools.wraps(handler)
    def call(*params: int, private: bool = False) -> None:
        if private and not takes_private:
            return
        if 0 <= arity < len(params):
            params = params[:arity]
        if private:
            handler(*params, private=True)
        else:
            handler(*params)

    return call


class _HistoryScreen(pyte.Screen):
    """A pyte screen that keeps lines scrolled off the top as plain text (bounded)."""

    def __init__(self, columns: int, lines: int, max_history_bytes: int) -> None:
        super().__init__(columns, lines)
        for name, (arity, takes_private) in _CSI_ARITY.items():
            setattr(self, name, _tolerant(getattr(self, name), arity, takes_private))
        self.history: deque[str] = deque()
        self.history_bytes = 0
        self._max_history_bytes = max_history_bytes

    def index(self) -> None:
        top, bottom = self.margins or pyte.screens.Margins(0, self.lines - 1)
        # Only a scroll of the whole screen moves a line into history; a scroll region
        # (a status bar, an editor) rewrites lines that stay on screen.
        if top == 0 and bottom == self.lines - 1 and self.cursor.y == bottom:
            self._remember(self.render_line(0))
        super().index()

    def _remember(self, line: str) -> None:
        self.history.append(line)
        self.history_bytes += len(line.encode("utf-8")) + 1
        while self.history_bytes > self._max_history_bytes and self.history:
            self.history_bytes -= len(self.history.popleft().encode("utf-8")) + 1

    def clear_history(self) -> None:
        self.history.clear()
        self.history_bytes = 0

    def render_line(self, y: int) -> str:
        """Line ``y`` as text without trailing blanks (wide characters counted once)."""
        # Called for every line that scrolls off, so it is on the flood path: visit only the
        # cells pyte stored (sorted ints) instead of all columns through ``__missing__``.
        line = self.buffer.get(y)
        if not line:
            return ""
        columns = self.columns
        parts: list[str] = []
        col = 0
        for x in sorted(line):
            if x >= columns:
                break
            if x < col:
                # The empty stub cell pyte leaves after a double-width character.
                continue
            if x > col:
                parts.append(" " * (x - col))
            data = line[x].data
            parts.append(data)
            col = x + 1
            if data and not data.isascii() and pyte.screens.wcwidth(data[0]) == 2:
                col += 1
        return "".join(parts).rstrip()


class RetainedDisplay:
    """The rendered display of one terminal generation.

    :meth:`feed` and :meth:`resize` may be called at any time from the Trio thread;
    :meth:`render_pending` runs in one worker thread at a time; :meth:`snapshot` must not run
    concurrently with :meth:`render_pending`.

    Args:
        rows: Screen height in lines.
        cols: Screen width in columns.
        max_pending_chars: Unrendered characters kept before the oldest are dropped.
        max_history_bytes: Scrolled-off text kept, in UTF-8 bytes.
    """

    def __init__(
        self,
        rows: int,
        cols: int,
        *,
        max_pending_chars: int = DEFAULT_MAX_PENDING_CHARS,
        max_history_bytes: int = MAX_HISTORY_BYTES,
    ) -> None:
        self._screen = _HistoryScreen(cols, rows, max_history_bytes)
        self._stream = pyte.Stream(self._screen)
        self._lock = threading.Lock()
        #: Held while the emulator's state changes or is read (a render, a screen), so a
        #: screen taken for a client never sees a render half done.
        self._render_lock = threading.Lock()
        #: The event ``seq`` of the newest output fed (:meth:`feed`), and of the newest
        #: output the emulator has rendered: a screen includes exactly the output up to it.
        self._fed_seq: int | None = None
        self._rendered_seq: int | None = None
        self._pending: list[str | tuple[int, int]] = []
        self._pending_chars = 0
        self._max_pending_chars = max_pending_chars
        self._reset = False
        #: Characters fed so far; a render loop compares it to see whether output stopped.
        self.fed_chars = 0
        #: Characters dropped unrendered because output outran rendering.
        self.dropped_chars = 0
        #: Why the display fell back to plain text (``"<Type>: <message>"`` of the emulator's
        #: exception), or None while the emulator renders.
        self.fallback: str | None = None
        self._max_history_bytes = max_history_bytes
        # The plain-text fallback: the screen's text when the emulator failed, then the
        # stripped lines of later output (bounded by max_history_bytes), then the open line.
        self._plain: deque[str] = deque()
        self._plain_bytes = 0
        self._plain_line = ""

    @property
    def has_pending(self) -> bool:
        """Whether text or a resize waits to be rendered."""
        return bool(self._pending)

    @property
    def pending_chars(self) -> int:
        """Characters fed and not rendered yet (what :meth:`render_pending` would take)."""
        return self._pending_chars

    @property
    def overflowed(self) -> bool:
        """Whether pending output was dropped since the last render (a flood)."""
        return self._reset

    def feed(self, text: str, seq: int | None = None) -> None:
        """Queue decoded output for rendering; drops the oldest when over the bound.

        Args:
            text: Decoded output.
            seq: The ``seq`` of the ``output`` event that carried ``text`` to the clients,
                if one did: :meth:`screen` says up to which event its text goes.
        """
        if not text:
            return
        with self._lock:
            if seq is not None:
                self._fed_seq = seq
            self.fed_chars += len(text)
            self._pending.append(text)
            self._pending_chars += len(text)
            excess = self._pending_chars - self._max_pending_chars
            while excess > 0 and self._pending:
                head = self._pending[0]
                if isinstance(head, tuple):
                    # A resize before dropped text still applies: keep the newest size.
                    self._pending.pop(0)
                    continue
                if len(head) <= excess:
                    self._pending.pop(0)
                    excess -= len(head)
                    self._pending_chars -= len(head)
                    self.dropped_chars += len(head)
                else:
                    self._pending[0] = head[excess:]
                    self._pending_chars -= excess
                    self.dropped_chars += excess
                    excess = 0
                self._reset = True
            if self._reset and self._pending and isinstance(self._pending[0], str):
                # The rebuilt display starts at a line boundary: never inside an escape
                # sequence or a half line of the dropped part.
                head = self._pending[0]
                cut = head.find("\n")
                if 0 <= cut < len(head) - 1:
                    self._pending_chars -= cut + 1
                    self._pending[0] = head[cut + 1 :]

    def resize(self, rows: int, cols: int) -> None:
        """Queue a screen resize (applied in order with the output around it)."""
        with self._lock:
            self._pending.append((rows, cols))

    def render_pending(self, max_chars: int | None = None) -> None:
        """Feed pending output to the emulator (call from one worker thread at a time).

        Args:
            max_chars: Render at most about this many characters (the rest stays pending),
                so a caller can render in slices and stop while output floods; None renders
                everything pending. pyte's parser is incremental, so a slice may end inside
                an escape sequence.
        """
        with self._render_lock:
            self._render_pending(max_chars)

    def _render_pending(self, max_chars: int | None) -> None:
        with self._lock:
            if max_chars is None or self._pending_chars <= max_chars:
                pending, self._pending = self._pending, []
                self._pending_chars = 0
                self._rendered_seq = self._fed_seq
            else:
                pending = []
                budget = max_chars
                while self._pending and budget > 0:
                    head = self._pending[0]
                    if isinstance(head, tuple):
                        pending.append(self._pending.pop(0))
                        continue
                    if len(head) <= budget:
                        pending.append(self._pending.pop(0))
                        taken = len(head)
                    else:
                        pending.append(head[:budget])
                        self._pending[0] = head[budget:]
                        taken = budget
                    budget -= taken
                    self._pending_chars -= taken
            reset, self._reset = self._reset, False
        if reset:
            if self.fallback is not None:
                self._plain.clear()
                self._plain_bytes = 0
                self._plain_line = ""
            else:
                self._screen.reset()
                self._screen.clear_history()
        for item in pending:
            if self.fallback is not None:
                if isinstance(item, str):
                    self._feed_plain(item)
                continue
            try:
                if isinstance(item, tuple):
                    rows, cols = item
                    self._screen.resize(rows, cols)
                else:
                    self._stream.feed(item)
            except Exception as exc:  # untrusted output: never raise out
                self._fall_back(exc)
                if isinstance(item, str):
                    # Part of it may be on the frozen screen too: shown twice beats lost.
                    self._feed_plain(item)

    def _fall_back(self, exc: Exception) -> None:
        """Stop using the emulator: keep its text so far and go on in plain text."""
        self.fallback = internal_message(exc)
        logger.warning("a terminal's display fell back to plain text: %s", self.fallback)
        try:
            shown = self._emulated_text()
        except Exception:  # a broken emulator state: start from nothing
            shown = []
        for line in shown:
            self._remember_plain(line)

    def _remember_plain(self, line: str) -> None:
        self._plain.append(line)
        self._plain_bytes += len(line.encode("utf-8", "replace")) + 1
        while self._plain_bytes > self._max_history_bytes and self._plain:
            self._plain_bytes -= len(self._plain.popleft().encode("utf-8", "replace")) + 1

    def _feed_plain(self, text: str) -> None:
        lines = _CONTROL_RE.sub("", text).split("\n")
        lines[0] = self._plain_line + lines[0]
        # An open line that never ends is bounded like the history.
        self._plain_line = lines.pop()[-self._max_history_bytes :]
        for line in lines:
            # A carriage return without a line feed rewrites the line: keep what is shown.
            self._remember_plain(line.rstrip("\r").rpartition("\r")[2].rstrip())

    def _emulated_text(self) -> list[str]:
        screen = [self._screen.render_line(y) for y in range(self._screen.lines)]
        while screen and not screen[-1]:
            screen.pop()
        return [*self._screen.history, *screen]

    def screen(self, budget_bytes: int) -> tuple[str, int | None]:
        """Render what is pending, then take :meth:`snapshot`: the text a client that
        attaches shows before the live output (call from a worker thread; it waits for a
        render running in another one).

        Returns:
            ``(text, seq)``: the displayed text, at most ``budget_bytes`` bytes, and the
            ``seq`` of the newest output event it includes (None: none was fed with one).
            The output events after ``seq`` are exactly what the text does not show yet.
        """
        with self._render_lock:
            self._render_pending(None)
            return self.snapshot(budget_bytes), self._rendered_seq

    def snapshot(self, budget_bytes: int) -> str:
        """The displayed text (history, then the screen), at most ``budget_bytes`` bytes.

        Trailing blank lines of the screen are left out; each line loses trailing blanks.
        After a fall back to plain text: the text shown then and the stripped lines since.
        Call only when no :meth:`render_pending` runs; pending text is not included.
        """
        if budget_bytes <= 0:
            return ""
        if self.fallback is None:
            try:
                return utf8_suffix("\n".join(self._emulated_text()), budget_bytes)
            except Exception as exc:  # untrusted output: never raise out
                self._fall_back(exc)
        lines = [*self._plain]
        if self._plain_line:
            lines.append(self._plain_line.rpartition("\r")[2].rstrip())
        return utf8_suffix("\n".join(lines).encode("utf-8", "replace").decode(), budget_bytes)
