"""The text helpers of the live view: what a job prints never drives the terminal."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, strategies as st

from supervisor._cli._screen import Style, cells, cut_cells, visible


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain", "plain"),
        ("\x1b[31mred\x1b[0m", "red"),  # SGR removed
        ("\x1b]0;title\x07after", "after"),  # OSC (retitle) removed, BEL-ended
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8, ST-ended
        ("\x1b[2J\x1b[Hclear", "clear"),  # clear screen, cursor home
        ("a\x1bPdcs\x1b\\b", "ab"),  # DCS string
        ("bell\x07", "bell^G"),  # a lone control: shown
        ("back\x08space", "back^Hspace"),
        ("nul\x00", "nul^@"),
        ("del\x7f", "del^?"),
        ("c1\x9b31m", "c1"),  # 8-bit CSI removed
        ("c1\x85", "c1\\x85"),  # other C1: shown
        ("tab\there", "tab here"),
        ("line\r", "line^M"),
        ("esc at end \x1b", "esc at end ^["),
    ],
)
def test_visible(raw: str, shown: str) -> None:
    assert visible(raw) == shown


@given(st.text())
def test_visible_never_lets_a_control_character_through(text: str) -> None:
    out = visible(text)
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in out)


def test_cells_and_cut_by_display_width() -> None:
    assert cells("abc") == 3
    assert cells("漢字") == 4
    assert cells("e\u0301") == 1  # a combining accent takes no cell
    assert cut_cells("漢字漢字", 5) == "漢字…"
    assert cells(cut_cells("漢" * 100, 59)) <= 59
    assert cut_cells("short", 10) == "short"
    assert cut_cells("abcdef", 4) == "abc…"


@given(st.text(), st.integers(min_value=1, max_value=200))
def test_a_cut_line_always_fits(text: str, width: int) -> None:
    assert cells(cut_cells(visible(text), width)) <= width


def test_colours_follow_no_color_and_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert not Style.for_stream(io.StringIO(), "auto").enabled  # not a terminal
    assert Style.for_stream(io.StringIO(), "always").enabled
    assert Style(True).paint("failed", "failed") == "\x1b[31mfailed\x1b[0m"
    assert Style(False).paint("failed", "failed") == "failed"
    monkeypatch.setenv("NO_COLOR", "1")
    assert not Style.for_stream(io.StringIO(), "auto").enabled
    assert Style.for_stream(io.StringIO(), "always").enabled  # the option wins
