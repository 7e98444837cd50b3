"""Issue 5, pure parts: the terminal lifecycle table, launch validation, retained rendering."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from hypothesis import given, strategies as st

from protocol import CoreError, lookup_error
from supervisor._api import validate_payload
from supervisor._process._marker import SCOPE_ENV
from supervisor._session._events import EVENT_OVERHEAD_BYTES
from supervisor._terminal._events import TerminalEvents
from supervisor._terminal._launch import (
    DEFAULT_RETAINED_CONTEXT_BYTES,
    MAX_RETAINED_CONTEXT_BYTES,
    parse_create,
)
from supervisor._terminal._render import (
    DEFAULT_MAX_PENDING_CHARS,
    MIN_PENDING_CHARS,
    RetainedDisplay,
    pending_bound,
    utf8_suffix,
)
from supervisor._terminal._state import (
    BUSY,
    PRECONDITION_FAILED,
    TerminalInput,
    TerminalLifecycle,
    TerminalState,
    outcome,
)

if TYPE_CHECKING:
    from protocol import JSONObject

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
        assert event in (In.STARTED, In.START_FAILED, In.CLEANED, In.CLEANED_FAILED)
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


def test_a_failed_life() -> None:
    """A failure inside a running terminal cleans up like an exit and ends ``failed``."""
    life = TerminalLifecycle("t")
    for event, state in [
        (In.STARTED, S.RUNNING),
        (In.FAIL, S.CLOSING),
        (In.FAIL, S.CLOSING),  # a second task failing while cleaning up changes nothing
        (In.EXITED, S.CLOSING),
        (In.CLEANED_FAILED, S.FAILED),
        (In.FAIL, S.FAILED),
        (In.CLOSE, S.FAILED),
        (In.REOPEN, S.STARTING),
        (In.STARTED, S.RUNNING),
        (In.EXITED, S.CLOSING),
        (In.CLEANED_FAILED, S.FAILED),  # the cleanup itself failed
        (In.DISPOSE, S.DISPOSING),
        (In.CLEANED_FAILED, S.DISPOSED),
    ]:
        life.apply(event)
        assert life.state is state
    with pytest.raises(CoreError):
        TerminalLifecycle("t", S.FAILED).apply(In.USE)


# -- launch validation -----------------------------------------------------------------


def _create(payload: dict[str, object]) -> Any:
    """``terminal.create``'s payload as the Core hands it to the service: decoded, then
    checked for what the declaration can not say."""
    return parse_create(validate_payload("terminal.create", payload))


def _refused(payload: dict[str, object], field: str) -> None:
    with pytest.raises(CoreError) as info:
        parse_create(validate_payload("terminal.create", payload))
    assert info.value.code == "invalid_request"
    assert info.value.details is not None
    assert str(info.value.details["field"]).startswith(field), info.value.message


def test_parse_create_defaults() -> None:
    owner, launch, title, size, retained = _create({"executable": "bash"})
    assert owner is None
    assert launch.argv == ["bash"]
    assert title is None
    assert size == (24, 80)
    assert retained == DEFAULT_RETAINED_CONTEXT_BYTES
    assert launch.env()["TERM"] == "xterm-256color"
    _, launch, _, _, _ = _create(
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
        ({"executable": "sh", "cwd": "src"}, "cwd"),
        ({"executable": "sh", "cwd": {"rootID": "r", "path": ""}}, "cwd"),
        ({"executable": "sh", "cwd": ""}, "cwd"),
    ],
)
def test_parse_create_refuses(payload: dict[str, object], field: str) -> None:
    _refused(payload, field)


def test_unknown_field_is_refused() -> None:
    with pytest.raises(CoreError) as info:
        validate_payload("terminal.create", {"executable": "sh", "shell": True})
    assert info.value.code == "invalid_request"
    assert info.value.details == {"field": "shell"}


def test_unknown_field_names_the_known_ones() -> None:
    """A guessed name (``argv``) is answered with the names to use instead."""
    with pytest.raises(CoreError) as info:
        validate_payload("terminal.create", {"executable": "sh", "argv": ["-c", "true"]})
    message = info.value.message
    assert message.startswith(
        "terminal.create: unknown field 'argv' (did you mean 'arguments'?) (known: arguments, "
    )
    known = message.split("(known: ", 1)[1].rstrip(")").split(", ")
    assert known == sorted(known)
    assert {"executable", "arguments", "cwd", "environment", "rows", "cols"} <= set(known)


def test_limits_at_the_edge_are_accepted() -> None:
    _create(
        {
            "executable": "sh",
            "arguments": ["a"] * 256,
            "environment": {f"V{i}": "1" for i in range(64)},
            "title": "é" * 64,
            "retainedContextBytes": MAX_RETAINED_CONTEXT_BYTES,
        }
    )
    assert _create({"executable": "sh", "retainedContextBytes": 0})[4] == 0


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


def test_slices_render_the_same_as_one_render() -> None:
    """Rendering in slices (the render loop's way) equals rendering at once."""
    text = "\x1b[2J" + "".join(f"\x1b[{n % 4 + 1};3Hrow {n} é日\x1b[0m\r\n" for n in range(300))
    whole = RetainedDisplay(6, 30)
    whole.feed(text)
    whole.resize(5, 25)
    whole.feed("after resize\r\n")
    sliced = RetainedDisplay(6, 30)
    sliced.feed(text)
    sliced.resize(5, 25)
    sliced.feed("after resize\r\n")
    while sliced.has_pending:
        sliced.render_pending(7)  # cuts escape sequences in half on purpose
    assert _render(sliced) == _render(whole)
    assert "after resize" in _render(whole)


def test_render_line_keeps_gaps_and_wide_characters() -> None:
    display = RetainedDisplay(2, 12)
    display.feed("\x1b[1;4Hx\x1b[1;6H日y\x1b[1;12Hz")
    assert _render(display) == "   x 日y   z"  # x at 3, 日 at 5-6, y at 7, z at 11


def test_pending_bound_follows_the_budget() -> None:
    assert pending_bound(0, 24, 80) == MIN_PENDING_CHARS
    assert pending_bound(16384, 24, 80) == 16384 + 2 * 24 * 80 + 4096
    assert pending_bound(262144, 300, 500) == DEFAULT_MAX_PENDING_CHARS


# -- the handle's event queue (issue 5 gaps 3 and 4) -----------------------------------


def _out(generation: int, data: str) -> JSONObject:
    return {"terminalID": "term-1", "generation": generation, "data": data}


def _drained(batch: JSONObject) -> list[JSONObject]:
    events = batch["events"]
    assert isinstance(events, list)
    return [e for e in events if isinstance(e, dict)]


def test_output_never_evicts_an_outcome() -> None:
    events = TerminalEvents(4)
    events.put_output(_out(1, "a"))
    events.put_outcome({"type": "exit", "generation": 1})
    for n in range(10):
        events.put_output(_out(2, str(n)))
    batch = events.poll()
    assert batch["gap"] is True
    assert [(e["event"], e["seq"]) for e in _drained(batch)] == [
        ("exit", 2),
        ("output", 9),
        ("output", 10),
        ("output", 11),
        ("output", 12),
    ]
    assert events.statistics().dropped == 7
    assert events.poll() == {"events": [], "gap": False}


def test_outcomes_have_their_own_bound() -> None:
    events = TerminalEvents(4, max_outcomes=2)
    for generation in (1, 2, 3):
        events.put_outcome({"generation": generation})
    batch = events.poll()
    assert batch["gap"] is True
    assert [e["generation"] for e in _drained(batch)] == [2, 3]


def test_seq_is_never_renumbered_by_a_reopen() -> None:
    events = TerminalEvents(8)
    events.put_output(_out(1, "old"))
    events.put_outcome({"generation": 1})
    events.put_output(_out(2, "restored"))
    events.keep_output_of(2)
    batch = events.poll()
    assert batch["gap"] is False  # dropping an older generation is the contract, not a loss
    assert [(e["event"], e["seq"]) for e in _drained(batch)] == [
        ("exit", 2),
        ("output", 3),
    ]
    events.put_output(_out(2, "next"))
    assert events.statistics().next_seq == 5
    assert [e["seq"] for e in _drained(events.poll())] == [4]


async def test_wait_blocks_until_an_event_or_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = TerminalEvents(8)
    assert await events.wait(500) == {"events": [], "gap": False}
    async with trio.open_nursery() as nursery:

        async def later() -> None:
            await trio.sleep(1)
            events.put_outcome({"generation": 1})

        nursery.start_soon(later)
        started = trio.current_time()
        batch = await events.wait(60_000)
        assert trio.current_time() - started == pytest.approx(1)
        assert [e["event"] for e in _drained(batch)] == ["exit"]


def test_output_bytes_are_bounded_too() -> None:
    """Memory follows bytes, not events: the oldest output goes past either bound, and the
    first event drained after it says how much went (issue 25)."""
    one = len(json.dumps({"seq": 1, "event": "output", **_out(1, "aaaa")}, separators=(",", ":")))
    events = TerminalEvents(100, max_output_bytes=2 * (one + EVENT_OVERHEAD_BYTES))
    for data in ("aaaa", "bbbb", "cccc"):
        events.put_output(_out(1, data))
    batch = events.poll()
    assert batch["gap"] is True
    drained = _drained(batch)
    assert [e["data"] for e in drained] == ["bbbb", "cccc"]
    assert (drained[0]["dropped"], drained[0]["droppedBytes"]) == (1, one)
    assert "dropped" not in drained[1]
    # One event larger than the bound is still delivered (the newest is always kept).
    events.put_output(_out(1, "x" * 25))
    assert [e["data"] for e in _drained(events.poll())] == ["x" * 25]


async def test_close_wakes_waiters_and_refuses_new_waits() -> None:
    events = TerminalEvents(8)
    woken: list[str] = []

    async def waiter() -> None:
        with pytest.raises(trio.ClosedResourceError):
            await events.wait(60_000)
        woken.append("closed")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        events.close()
    assert woken == ["closed"]
    with pytest.raises(trio.ClosedResourceError):
        await events.wait(0)


async def test_a_poll_while_a_wait_blocks_does_not_strand_the_waiter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A ``pollEvents`` between a wait and the next event must not hide that event from it."""
    events = TerminalEvents(8)
    async with trio.open_nursery() as nursery:

        async def later() -> None:
            await trio.testing.wait_all_tasks_blocked()
            assert events.poll() == {"events": [], "gap": False}
            events.put_output(_out(1, "late"))

        nursery.start_soon(later)
        started = trio.current_time()
        batch = await events.wait(60_000)
        assert trio.current_time() == started  # woken by the event, not by the timeout
        assert [e["data"] for e in _drained(batch)] == ["late"]


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        TerminalEvents(0)
    with pytest.raises(ValueError, match="positive"):
        TerminalEvents(8, max_output_bytes=0)


class _Reader:
    """A producer the queue pauses and resumes (the terminal's reader, without a PTY)."""

    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0

    def pause(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume(self) -> None:
        self.paused = False


def test_small_output_pauses_the_reader_at_half_the_event_bound_and_loses_nothing() -> None:
    """Output in small pieces (a line per read) reaches the event bound long before the byte
    watermark: the reader is paused at half the bound, so a consumer that is there (it
    drained once) loses nothing, and resumes once a drain leaves an eighth of it or less."""
    events = TerminalEvents(16)
    reader = _Reader()
    events.watch(reader)
    assert _drained(events.poll()) == []  # a consumer exists from here on
    sent = 0
    while not reader.paused:
        events.put_output(_out(1, f"line {sent}\r\n"))
        sent += 1
        assert sent <= 8
    assert sent == 8  # half of 16 events, a few hundred bytes: far below the watermark
    # What the reader puts before it sees the pause (the rest of its pass) still fits.
    for _ in range(3):
        events.put_output(_out(1, f"line {sent}\r\n"))
        sent += 1
    batch = events.poll()
    assert batch["gap"] is False
    assert [e["data"] for e in _drained(batch)] == [f"line {n}\r\n" for n in range(sent)]
    assert not reader.paused
    assert events.statistics().dropped == 0
    # It pauses again at half the bound.
    for n in range(8):
        events.put_output(_out(1, f"more {n}"))
    assert reader.paused
    assert reader.pauses == 2
