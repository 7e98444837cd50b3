"""``terminal.*``: PTY terminals, their lifecycle and events."""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeAlias

import msgspec

from ._base import (
    Event,
    JsonObject,
    NonEmpty,
    Ordered,
    Payload,
    Result,
    StreamText,
    WaitMilliseconds,
)

__all__ = ("COMMANDS", "EVENTS", "ORDER", "TERMINAL_STATES", "TerminalEvent", "TerminalState")

TerminalState: TypeAlias = Literal[
    "starting", "running", "closing", "closed", "failed", "disposing", "disposed"
]
TERMINAL_STATES: dict[str, str] = {
    "starting": "a PTY process is being started (create or reopen); busy",
    "running": "the PTY process runs; write and resize work",
    "closing": "the bounded cleanup of a close or of a natural exit runs; busy",
    "closed": "no process; the launch settings and the retained text are kept; reopenable",
    "failed": "as closed, after an unexpected exception inside the terminal ended it "
    "(reason internal, with a crash report)",
    "disposing": "a dispose runs; busy",
    "disposed": "forgotten; no further events",
}

#: ``terminal.create``: at most 256 arguments and 64 environment entries.
MAX_ARGUMENTS: Final = 256
MAX_ENVIRONMENT_ENTRIES: Final = 64
#: A terminal's size: at most 300 rows by 500 columns.
MAX_ROWS: Final = 300
MAX_COLS: Final = 500
#: ``retainedContextBytes``: 0 keeps none; at most 262 144 (the reference's bound).
MAX_RETAINED_CONTEXT_BYTES: Final = 262_144
_Rows = Annotated[int, msgspec.Meta(ge=1, le=MAX_ROWS)]
_Cols = Annotated[int, msgspec.Meta(ge=1, le=MAX_COLS)]
_Retained = Annotated[int, msgspec.Meta(ge=0, le=MAX_RETAINED_CONTEXT_BYTES)]
_TerminalId = Annotated[str, msgspec.Meta(min_length=1)]


class TerminalCreate(Payload, kw_only=True):
    """``terminal.create``: start a program on a PTY.

    Attributes:
        owner: The plugin session that owns it (ended with that session); absent for the
            host's own terminals.
        executable: The program: an absolute path or a bare command name looked up on the
            child's ``PATH`` (a relative path with a separator is refused).
        arguments: Its arguments, an argv array (never shell text): at most 256.
        cwd: The working directory, an absolute path (default: the supervisor's).
        environment: Changes to the supervisor's environment for the program: at most 64;
            null removes a variable.
        title: A title for the host to show: one line, at most 128 bytes as UTF-8.
        rows: Screen height in lines: 1 to 300 (default 24).
        cols: Screen width in columns: 1 to 500 (default 80).
        retained_context_bytes: How much of the displayed text ``terminal.close`` keeps for
            ``terminal.reopen``, in bytes: 0 (none) to 262 144 (default 16 384).

    Every string is at most 16 KiB and the launch data at most 64 KiB in all.
    """

    owner: NonEmpty | None = None
    executable: NonEmpty
    arguments: Annotated[list[str], msgspec.Meta(max_length=MAX_ARGUMENTS)] | None = None
    cwd: NonEmpty | None = None
    environment: (
        Annotated[dict[str, str | None], msgspec.Meta(max_length=MAX_ENVIRONMENT_ENTRIES)] | None
    ) = None
    title: NonEmpty | None = None
    rows: _Rows | None = None
    cols: _Cols | None = None
    retained_context_bytes: _Retained | None = None


class TerminalCreateResult(Result, kw_only=True):
    """``terminal.create``: the new terminal; its output and exit come as events
    (``terminal.waitEvents``)."""

    terminal_id: str = msgspec.field(name="terminalID")
    generation: int


class TerminalRef(Payload, kw_only=True):
    """One terminal, by id: ``terminal.reopen`` (start its launch again, after a close),
    ``terminal.dispose`` (end its process and forget it), ``terminal.onExit`` (subscribe to
    its exits), ``terminal.pollEvents`` (drain its events without waiting) and
    ``terminal.screen`` (what it shows now)."""

    terminal_id: _TerminalId = msgspec.field(name="terminalID")


class TerminalWrite(Payload, kw_only=True):
    """``terminal.write``: text to the program's input, at most 64 KiB as UTF-8.

    Attributes:
        data: What to type: text sent to the program's input as UTF-8, at most 64 KiB; control
            characters as they are (U+0003 is Ctrl-C).
    """

    terminal_id: _TerminalId = msgspec.field(name="terminalID")
    data: StreamText


class TerminalResize(Payload, kw_only=True):
    """``terminal.resize``: change the PTY's size (the program gets ``SIGWINCH``)."""

    terminal_id: _TerminalId = msgspec.field(name="terminalID")
    rows: _Rows
    cols: _Cols


class TerminalClose(Payload, kw_only=True):
    """``terminal.close``: end the process, keep the handle (reopenable).

    Attributes:
        retained_context_bytes: How much of the displayed text to keep for ``terminal.reopen``,
            in bytes: 0 to 262 144 (default: what ``terminal.create`` set, 16 384).
    """

    terminal_id: _TerminalId = msgspec.field(name="terminalID")
    retained_context_bytes: _Retained | None = None


class TerminalCloseResult(Result, kw_only=True):
    """``terminal.close``: what was kept for a reopen.

    Attributes:
        retained_context_bytes: The bytes of displayed text kept (at most the budget; less when
            the screen showed less, and cut on a character boundary).
    """

    retained_context_bytes: int


class TerminalReopenResult(Result, kw_only=True):
    """``terminal.reopen``: the new generation and what it shows again.

    Attributes:
        restored_context_bytes: The bytes of retained text shown again as the new generation's
            first output (0 when none was kept).
    """

    terminal_id: str = msgspec.field(name="terminalID")
    generation: int
    restored_context_bytes: int


class TerminalScreenResult(Result, kw_only=True):
    """``terminal.screen``: what the terminal shows now, for a client that attaches (an
    editor after a reload) to draw before the live output.

    Attributes:
        generation: The generation the text is of (a closed terminal's: the last one).
        rows: Screen height, in lines.
        cols: Screen width, in columns.
        text: The displayed text as plain text, rendered by a VT emulator: the lines that
            scrolled off, then the screen (trailing blank lines and blanks left out), at most
            the terminal's ``retainedContextBytes`` (16 384 bytes when it keeps none). With no
            program running, the text its last generation showed.
        seq: The ``seq`` of the newest ``output`` event the text includes: the output events
            after it are exactly what the text does not show yet (take them with
            ``terminal.waitEvents``; an ``exit`` event is never included). Null when no
            output event is included: none yet, or a closed terminal that retains no text
            (``retainedContextBytes`` 0), whose queued output is then all still to take.
    """

    terminal_id: str = msgspec.field(name="terminalID")
    generation: int
    rows: int
    cols: int
    text: str
    seq: int | None


class TerminalSubscription(Result, kw_only=True):
    """``terminal.onExit``: a subscription to the terminal's exits. Not needed to see an exit
    (every ``exit`` event is queued anyway); while it lives, each ``exit`` event carries its
    ``subscriptionID``, and a plugin backend that asked for it is told of each exit. One live
    subscription per terminal (a second is refused, ``plugin.host.preconditionFailed``), kept
    across ``terminal.reopen``; ``terminal.disposeSubscription`` ends it."""

    subscription_id: str = msgspec.field(name="subscriptionID")


class TerminalDisposeSubscription(Payload, kw_only=True):
    """``terminal.disposeSubscription``: end an exit subscription; the terminal stays."""

    subscription_id: NonEmpty = msgspec.field(name="subscriptionID")


class TerminalList(Payload, kw_only=True):
    """``terminal.list {}``."""


class TerminalInfo(Result, kw_only=True):
    """One terminal of ``terminal.list`` (and of ``core.sessions``).

    Attributes:
        title: The title given at ``terminal.create``, or null.
        reason: In state ``failed``: ``internal``.
        render_fallback: When the emulator met output it could not render and the display fell
            back to plain text: why (the exception's type and message); absent otherwise.
    """

    terminal_id: str = msgspec.field(name="terminalID")
    owner: str | None
    title: str | None
    state: TerminalState
    generation: int
    rows: int
    cols: int
    pid: int | None = None
    reason: str | None = None
    crash_report: JsonObject | None = None
    render_fallback: str | None = None


class TerminalWaitEvents(Payload, kw_only=True):
    """``terminal.waitEvents``: wait until the terminal has events, or the timeout passes."""

    terminal_id: _TerminalId = msgspec.field(name="terminalID")
    timeout_milliseconds: WaitMilliseconds | None = None


class TerminalOutput(Event, tag="output", kw_only=True):
    """The program wrote to the PTY: UTF-8 text never split inside a character. A reopen
    first emits the retained text as output of the new generation. Informational: the
    oldest output goes first when the queue is full.

    Attributes:
        data: The text, decoded as UTF-8 (invalid bytes replaced), never split inside a
            character.
    """

    terminal_id: str = msgspec.field(name="terminalID")
    generation: int
    data: str


class TerminalExit(Event, tag="exit", kw_only=True):
    """A generation's process ended and its cleanup finished: one per generation, queued
    whether or not anyone subscribed (``subscriptionID`` names a live ``terminal.onExit``
    subscription). ``reason``: ``exited`` (by itself), ``closed`` (``terminal.close``,
    dispose), ``internal`` (with a ``crashReport``). Never evicted by output.

    Attributes:
        type: Always ``exit``.
        reason: ``exited`` (by itself), ``closed`` (``terminal.close`` or a dispose),
            ``internal`` (an unexpected failure inside the terminal; with ``crashReport``).
        crash_report: With ``reason`` ``internal``: a bounded report of the unexpected
            exception (type, message, where); nothing of it reaches other sessions.
        subscription_id: The live ``terminal.onExit`` subscription's id; absent when none.
    """

    type: Literal["exit"]
    terminal_id: str = msgspec.field(name="terminalID")
    generation: int
    exit_code: int | None
    signal: int | None
    signal_name: str | None
    reason: str
    crash_report: JsonObject | None = None
    subscription_id: str | None = msgspec.field(default=None, name="subscriptionID")


TerminalEvent: TypeAlias = TerminalOutput | TerminalExit


class TerminalEvents(Result, kw_only=True):
    """``terminal.waitEvents`` / ``terminal.pollEvents``: the terminal's events in order;
    ``gap`` when some were dropped since the last drain."""

    events: list[TerminalEvent]
    gap: bool


_ON_TERMINAL = Ordered("terminal", "terminalID")
_ENDS_TERMINAL = Ordered("terminal", "terminalID", ending=True)
#: The order rule (:class:`~._base.Ordered`): what acts on one terminal takes effect in
#: arrival order (keystrokes, resizes); creating, listing, waiting for events and exit
#: subscriptions are ordered with nothing.
ORDER = {
    "terminal.write": _ON_TERMINAL,
    "terminal.resize": _ON_TERMINAL,
    "terminal.reopen": _ON_TERMINAL,
    "terminal.screen": _ON_TERMINAL,
    "terminal.close": _ENDS_TERMINAL,
    "terminal.dispose": _ENDS_TERMINAL,
}

COMMANDS = {
    "terminal.create": (TerminalCreate, TerminalCreateResult),
    "terminal.write": (TerminalWrite, None),
    "terminal.resize": (TerminalResize, None),
    "terminal.close": (TerminalClose, TerminalCloseResult),
    "terminal.reopen": (TerminalRef, TerminalReopenResult),
    "terminal.dispose": (TerminalRef, None),
    "terminal.onExit": (TerminalRef, TerminalSubscription),
    "terminal.disposeSubscription": (TerminalDisposeSubscription, None),
    "terminal.waitEvents": (TerminalWaitEvents, TerminalEvents),
    "terminal.pollEvents": (TerminalRef, TerminalEvents),
    "terminal.list": (TerminalList, list[TerminalInfo]),
    "terminal.screen": (TerminalRef, TerminalScreenResult),
}
EVENTS = {"terminal": TerminalEvent}
#: What ends each event stream of this module (docs/commands.md "Events").
STREAMS = {
    "terminal": "``exit`` ends a generation (no ``terminal.onExit`` needed); the stream"
    " goes on when ``terminal.reopen`` starts the next one. It ends when the terminal is"
    " disposed (``terminal.dispose``, or its owner's session ending): a wait then answers"
    " ``not_found``.",
}
