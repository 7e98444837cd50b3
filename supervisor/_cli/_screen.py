"""Text for people: job output and names made safe to show, measured in display cells, coloured.

A job's output, a job's name and an argv come from files and programs we do not control: an
escape sequence in them must not reach the user's terminal (it could retitle it, clear it,
move the cursor out of the live view). :func:`visible` removes well-formed escape sequences
and shows every other control character in caret notation (``^[``), on a terminal and in a
log alike. The live view is cut to the terminal's width by display cells (wcwidth): a CJK
character takes two cells, a combining mark none, so a cut line never wraps.
"""

from __future__ import annotations

import os
import re
from typing import Final, TextIO

from wcwidth import wcwidth

__all__ = ("SGR", "SGR_RESET", "Style", "cells", "cut_cells", "visible")

#: Escape sequences (ECMA-48): CSI, OSC / DCS / SOS / PM / APC strings (ended by BEL or ST,
#: or by the end of the text), and two-character escapes; the 8-bit CSI too.
_ESCAPE: Final = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]?
    | \x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?
    | \x1b[ -/]*[0-~]
    | \x9b[0-?]*[ -/]*[@-~]?
    """,
    re.VERBOSE,
)
#: What is left to show in caret notation: C0 (tab aside), DEL and C1 controls.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _caret(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"\\x{code:02x}"


#: A Select Graphic Rendition sequence (colours, bold): the only escape that may pass.
SGR: Final = re.compile(r"\x1b\[[0-9;:]*m")
#: Ends every colour and attribute.
SGR_RESET: Final = "\x1b[0m"


def _plain(text: str) -> str:
    text = _ESCAPE.sub("", text).replace("\t", " ")
    return _CONTROL.sub(_caret, text)


def visible(text: str, *, keep_sgr: bool = False) -> str:
    """``text`` with escape sequences removed and other control characters shown as ``^X``.

    A tab becomes one space (its width depends on the column); a lone ``ESC`` shows ``^[``.

    Args:
        text: What a job or a file gave us.
        keep_sgr: Keep the colour sequences (SGR, ``ESC [ ... m``), and only those: what
            cursor moves, titles, screen clears and hyperlinks would do never reaches the
            terminal. The caller ends such a line with :data:`SGR_RESET`.
    """
    if not keep_sgr:
        return _plain(text)
    out: list[str] = []
    position = 0
    for match in SGR.finditer(text):
        out.append(_plain(text[position : match.start()]))
        out.append(match.group())
        position = match.end()
    out.append(_plain(text[position:]))
    return "".join(out)


def cells(text: str) -> int:
    """The display width of ``text`` in terminal cells (a character wcwidth can not size: 1;
    a colour sequence: none)."""
    if "\x1b" in text:
        text = SGR.sub("", text)
    return sum(_width(ch) for ch in text)


def _width(ch: str) -> int:
    width = wcwidth(ch)
    return 1 if width < 0 else width


def cut_cells(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` cells, ending with ``…`` when something was cut.

    Colour sequences (SGR) take no cell and are never cut in two; a cut text that held one
    ends with :data:`SGR_RESET`.
    """
    if cells(text) <= width:
        return text
    room = max(width - 1, 0)
    used = 0
    out: list[str] = []
    position = 0
    coloured = False
    while position < len(text):
        if text[position] == "\x1b" and (match := SGR.match(text, position)) is not None:
            out.append(match.group())
            coloured = True
            position = match.end()
            continue
        ch = text[position]
        w = _width(ch)
        if used + w > room:
            break
        out.append(ch)
        used += w
        position += 1
    return "".join(out) + ("…" if width > 0 else "") + (SGR_RESET if coloured else "")


#: SGR colours by status (and ``running``).
_COLOURS: Final = {
    "ok": "32",
    "failed": "31",
    "cancelled": "33",
    "superseded": "33",
    "denied": "35",
    "skipped": "35",
    "running": "36",
    "dim": "2",
    "bold": "1",
}


class Style:
    """Colours by status, or none.

    Args:
        enabled: Whether to emit SGR sequences (see :meth:`for_stream`).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO, choice: str) -> Style:
        """``choice`` ``always`` / ``never`` / ``auto``.

        ``auto`` decides in CPython's own order (3.13's ``_colorize``): off when
        ``NO_COLOR`` is set to a non-empty value (https://no-color.org); on when
        ``FORCE_COLOR`` is (https://force-color.org) or ``CLICOLOR_FORCE`` is set to
        anything but ``0`` (https://bixense.com/clicolors), which is how a CI log that is
        no terminal asks for colours; else on a terminal (not ``TERM=dumb``).
        """
        if choice == "always":
            return cls(True)
        if choice == "never" or os.environ.get("NO_COLOR"):
            return cls(False)
        if os.environ.get("FORCE_COLOR") or os.environ.get("CLICOLOR_FORCE", "") not in ("", "0"):
            return cls(True)
        return cls(is_terminal(stream))

    def paint(self, text: str, what: str) -> str:
        """``text`` in the colour of ``what`` (a status, ``running``, ``dim``, ``bold``)."""
        code = _COLOURS.get(what)
        if not self.enabled or code is None or not text:
            return text
        return f"\x1b[{code}m{text}\x1b[0m"


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that takes escape sequences (not ``TERM=dumb``)."""
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False
