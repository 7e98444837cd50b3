"""Issue 5, pure parts: the terminal lifecycle table, launch validation, retained rendering."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from protocol import CoreError, lookup_error
from supervisor._marker import SCOPE_ENV
from supervisor._terminal_launch import (
    DEFAULT_RETAINED_CONTEXT_BYTES,
    MAX_RETAINED_CONTEXT_BYTES,
    parse_create,
    read_retained_bytes,
)
from supervisor._terminal_render import RetainedDisplay, utf8_suffix
from supervisor._terminal_state import (
    BUSY,
    PRECONDITION_FAILED,
    TerminalInput,
    TerminalLifecycle,
    TerminalState,
    outcome,
)

S = TerminalState
In = TerminalInput


# -- lifecycle table -----------------------------------------------------------------


def test_codes_are_in_the_catalog() -> None:
    assert lookup_error(BUSY) is not None
    assert lookup_error(PRECONDITION_FAILED) is not None


@given(st.sampled_from(S), st.sampled_from(In))
def test_table_is_total_or_refuses_cleanly(state: TerminalState, event: TerminalInput) -> None:
    """Every pair is a transition, a refusal with a catalog code, ignored, or never sent."""
    lifecycle = TerminalLifecycle("t", state)
    try:
        result = outcome(state, event)
    except KeyError:
        # Only the service's own internal inputs may be missing, never a user command.
        assert event in (In.STARTED, In.START_FAILED, In.CLEANED)
        with pytest.raises(RuntimeError):
            lifecycle.apply(event)
        assert lifecycle.state is state
        return
    if result is None or isinstance(result, TerminalState):
        lifecycle.apply(event)
        assert lifecycle.state is (state if result is None else result)
    else:
        assert lookup_error(result) is not None
        with pytest.raises(CoreError) as info:
            lifecycle.apply(event)
        assert info.value.code == result
        assert lifecycle.state is state


@pytest.mark.parametrize(
    ("state", "event", "code"),
    [
        (S.RUNNING, In.REOPEN, PRECONDITION_FAILED),
        (S.CLOSED, In.USE, PRECONDITION_FAILED),
        (S.CLOSING, In.CLOSE, BUSY),
        (S.CLOSING, In.REOPEN, BUSY),
        (S.CLOSING, In.DISPOSE, BUSY),
        (S.STARTING, In.CLOSE, BUSY),
        (S.DISPOSING, In.REOPEN, BUSY),
    ],
)
def test_refusals(state: TerminalState, event: TerminalInput, code: str) -> None:
    with pytest.raises(CoreError) as info:
        TerminalLifecycle("t", state).apply(event)
    assert info.value.code == code


def test_a_life() -> None:
    life = TerminalLifecycle("t")
    for event, state in [
        (In.STARTED, S.RUNNING),
        (In.USE, S.RUNNING),
        (In.EXITED, S.CLOSING),
        (In.EXITED, S.CLOSING),  # a late exit while cleaning up changes nothing
        (In.CLEANED, S.CLOSED),
        (In.CLOSE, S.CLOSED),
        (In.REOPEN, S.STARTING),
        (In.STARTED, S.RUNNING),
        (In.DISPOSE, S.DISPOSING),
        (In.CLEANED, S.DISPOSED),
    ]:
        life.apply(event)
        assert life.state is state
    assert not life.busy


# -- launch validation -----------------------------------------------------------------


def _refused(payload: dict[str, object], field: str) -> None:
    with pytest.raises(CoreError) as info:
        parse_create(payload)  # type: ignore[arg-type]
    assert info.value.code == "invalid_request"
    assert info.value.details is not None
    assert str(info.value.details["field"]).startswith(field), info.value.message


def test_parse_create_defaults() -> None:
    owner, launch, title, size, retained = parse_create({"executable": "bash"})
    assert owner is None
    assert launch.argv == ["bash"]
    assert title is None
    assert size == (24, 80)
    assert retained == DEFAULT_RETAINED_CONTEXT_BYTES
    assert launch.env()["TERM"] == "xterm-256color"
    _, launch, _, _, _ = parse_create(
        {"executable": "/bin/sh", "environment": {"TERM": "vt100", "GONE": None}}
    )
    assert launch.env() == {"TERM": "vt100", "GONE": None}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "executable"),
        ({"executable": ""}, "executable"),
        ({"executable": "./run.sh"}, "executable"),
        ({"executable": "bin/tool"}, "executable"),
        ({"executable": "sh", "arguments": "-c ls"}, "arguments"),
        ({"executable": "sh", "arguments": ["a"] * 257}, "arguments"),
        ({"executable": "sh", "arguments": ["x" * (16 * 1024 + 1)]}, "arguments[0]"),
        ({"executable": "sh", "arguments": ["é" * (8 * 1024 + 1)]}, "arguments[0]"),
        ({"executable": "sh", "arguments": [1]}, "arguments[0]"),
        ({"executable": "sh", "arguments": ["x" * 16 * 1024] * 4}, "arguments"),
        ({"executable": "sh", "environment": {f"V{i}": "1" for i in range(65)}}, "environment"),
        ({"executable": "sh", "environment": {"V": "x" * (16 * 1024 + 1)}}, "environment.V"),
        ({"executable": "sh", "environment": {"V": 3}}, "environment.V"),
        ({"executable": "sh", "environment": {"A=B": "1"}}, "environment.A=B"),
        ({"executable": "sh", "environment": {SCOPE_ENV: "mine"}}, "environment"),
        ({"executable": "sh", "environment": {SCOPE_ENV: None}}, "environment"),
        ({"executable": "sh", "title": ""}, "title"),
        ({"executable": "sh", "title": "two\nlines"}, "title"),
        ({"executable": "sh", "title": "é" * 65}, "title"),
        ({"executable": "sh", "rows": 0}, "rows"),
        ({"executable": "sh", "cols": True}, "cols"),
        ({"executable": "sh", "retainedContextBytes": MAX_RETAINED_CONTEXT_BYTES + 1}, "retained"),
        ({"executable": "sh", "retainedContextBytes": -1}, "retained"),
        ({"executable": "sh", "owner": ""}, "owner"),
    ],
)
def test_parse_create_refuses(payload: dict[str, object], field: str) -> None:
    _refused(payload, field)


def test_unknown_field_is_refused() -> None:
    with pytest.raises(CoreError) as info:
        parse_create({"executable": "sh", "shell": True})
    assert info.value.code == "invalid_request"


def test_limits_at_the_edge_are_accepted() -> None:
    parse_create(
        {
            "executable": "sh",
            "arguments": ["a"] * 256,
            "environment": {f"V{i}": "1" for i in range(64)},
            "title": "é" * 64,
            "retainedContextBytes": MAX_RETAINED_CONTEXT_BYTES,
        }
    )
    assert read_retained_bytes({"retainedContextBytes": 0}, 5) == 0


# -- retained rendering ----------------------------------------------------------------


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_utf8_suffix_is_a_bounded_suffix(text: str, budget: int) -> None:
    text = text.encode("utf-8", "replace").decode("utf-8")
    cut = utf8_suffix(text, budget)
    assert text.endswith(cut)
    size = len(cut.encode("utf-8"))
    assert size <= budget
    # Cut on a character boundary: at most one character (<= 3 more bytes) is left out.
    full = len(text.encode("utf-8"))
    assert size == full or size > budget - 4


def _render(display: RetainedDisplay, budget: int = 16384) -> str:
    display.render_pending()
    return display.snapshot(budget)


def test_redraws_leave_only_the_last_frame() -> None:
    display = RetainedDisplay(5, 20)
    display.feed("\x1b[2J")
    for n in range(1, 51):
        display.feed(f"\x1b[2;3Hcount={n:03d}\x1b[31m!\x1b[0m")
    assert _render(display) == "\n  count=050!"


def test_scrolled_lines_are_history_and_budget_cuts_characters() -> None:
    display = RetainedDisplay(3, 10)
    display.feed("".join(f"l{n}é\r\n" for n in range(10)))
    text = _render(display)
    assert text.splitlines() == [f"l{n}é" for n in range(10)]
    assert _render(display, 5) == "\nl9é"
    assert _render(display, 4) == "l9é"
    assert _render(display, 3) == "9é"
    assert _render(display, 2) == "é"
    assert _render(display, 1) == ""
    assert _render(display, 0) == ""


def test_wide_characters_render_once() -> None:
    display = RetainedDisplay(2, 10)
    display.feed("日本語")
    assert _render(display) == "日本語"


def test_a_flood_keeps_the_newest_lines_and_bounded_pending() -> None:
    display = RetainedDisplay(4, 30, max_pending_chars=1000)
    display.feed("\x1b[2;2H" + "".join(f"flood {n}\r\n" for n in range(5000)))
    assert display.overflowed
    assert display.dropped_chars > 0
    text = _render(display)
    assert text.splitlines()[-1] == "flood 4999"
    assert "\x1b" not in text
    assert "flood 0\n" not in text
