"""Arrival order per target: each target's operations take effect in the order they arrived.

The rule (docs/architecture.md "The order rule"): operations on one target -- a session, a
terminal, a plugin backend, the job lanes -- take effect in the order
they arrived on one connection, one thread or one task. An operation is two steps: its
*effect* (the write to the PTY, the message handed to the server, the resize, the queueing of
a job), taken in arrival order, and its *wait* (the answer, the deadline), concurrent with
everything else. Different targets never wait for each other.

Why a line per target and not per connection: Trio starts sibling tasks in no particular
order, so the order has to be fixed where a request *arrives* (the reader of a connection,
the submitting thread, the submitting task), synchronously, before any task is started: that
is :meth:`Sequencer.arrive`, which gives the operation its :class:`Turn`. The operation's task
then waits for its turn (:meth:`Turn.wait`), takes its effect, and releases the turn
(:meth:`Turn.release`) so the next operation on the same target may take its own; its wait
for an answer comes after, concurrently. A target that can not take more input (a full PTY, a
server that does not read) therefore holds back only its own later operations.

An operation cancelled while it waits for its turn releases it untaken: it ends
``cancelled`` and has no effect, and the operations behind it go on. A turn may carry the id
its target knows the operation by (:attr:`Turn.name`: an ``lsp.request``'s ``operationId``),
so that the target's own cancel (``lsp.cancelOperation``, ``debug.cancelOperation``), which
is ordered with nothing and must not wait behind what it cancels, finds an operation that
has not taken its turn yet: :meth:`Sequencer.withdraw` takes it out of the line, and its
handler, seeing :func:`withdrawn`, ends it the way that kind ends a cancelled operation,
without its effect.

Cost: an operation that arrives at an idle target is at the head of its line at once --
:meth:`Turn.wait` then does not block -- and its line is dropped when it leaves, so an idle
target costs nothing and a keystroke pays two dict operations.
"""

from __future__ import annotations

import contextvars
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias, final

import trio

if TYPE_CHECKING:
    from collections.abc import Hashable

__all__ = (
    "Sequencer",
    "SequencerStatistics",
    "Target",
    "Turn",
    "effect_taken",
    "hold_turn",
    "withdrawn",
)

#: A target: ``(kind, id)``, e.g. ``("terminal", "term-3")``, ``("lsp", "lsp-1")``.
Target: TypeAlias = "tuple[str, Hashable]"

_NO_WAKE: Final = None


@final
class Turn:
    """One operation's place in its target's line. Made by :meth:`Sequencer.arrive`.

    Attributes:
        target: The target it is in line for.
        ending: Whether its operation ends the target (a stop, close, dispose): see
            :meth:`Sequencer.head`.
        name: The id its target knows the operation by, for the target's cancel to find it
            while it waits (:meth:`Sequencer.withdraw`); None: it can not be named.
        about: What the turn's owner keeps with it (the Core: the command and its payload).
        withdrawn: Why a cancel took it out of its line before its turn (``"cancelled"``,
            ``"timedOut"``), or None.
    """

    __slots__ = (
        "_begun",
        "_head",
        "_line",
        "_owner",
        "_released",
        "_sequencer",
        "_wake",
        "about",
        "ending",
        "name",
        "target",
        "withdrawn",
    )

    def __init__(
        self, sequencer: Sequencer, target: Target, line: deque[Turn], *, ending: bool
    ) -> None:
        self._sequencer = sequencer
        self.target = target
        self.ending = ending
        self._line = line
        self._head = False
        self._released = False
        self._wake: trio.Event | None = _NO_WAKE
        #: The task running the operation (see :func:`effect_taken`).
        self._owner: trio.lowlevel.Task | None = None
        #: Set once :meth:`wait` returned: the operation is taking its turn.
        self._begun = False
        self.name: str | None = None
        self.about: object = None
        self.withdrawn: str | None = None

    @property
    def is_head(self) -> bool:
        """Whether every operation that arrived before on this target has taken its effect
        (or left the line untaken): this one may take its own now."""
        return self._head

    @property
    def released(self) -> bool:
        """Whether the turn was released (its effect taken, or it left the line)."""
        return self._released

    async def wait(self) -> None:
        """Wait until this operation may take its effect.

        Returns at once (after a cancellation checkpoint) when it is at the head, and when
        a cancel withdrew it (:meth:`withdraw`: the operation then ends without its effect).

        **Cancellation:** cancellable. A cancelled waiter must still :meth:`release` its
        turn (leaving untaken), which the operation path does in its ``finally``.
        """
        if self._head or self.withdrawn is not None:
            await trio.lowlevel.checkpoint_if_cancelled()
        else:
            if self._released:
                raise RuntimeError("this turn was released")
            if self._wake is None:
                self._wake = trio.Event()
            await self._wake.wait()
        self._begun = True

    @property
    def waiting(self) -> bool:
        """Whether the operation has not taken its turn yet and is still in line (a cancel
        may :meth:`withdraw` it)."""
        return not self._begun and not self._released

    def withdraw(self, why: str) -> bool:
        """Take the operation out of its line before it took its turn: a cancel named it.

        The operations behind it go on at once; its own :meth:`wait` returns (now, or when
        its task gets there) with :attr:`withdrawn` set to ``why``, and its handler ends it
        without its effect (see :func:`withdrawn`).

        Returns:
            False when it had taken its turn already, or left the line (nothing changed).
        """
        if not self.waiting:
            return False
        self.withdrawn = why
        wake = self._wake
        self.release()
        if wake is not None:
            wake.set()
        return True

    def release(self) -> None:
        """Leave the line: the effect was taken, or the operation ends without it.

        Idempotent. Releasing the head lets the next operation in line take its effect;
        releasing a turn that is not the head only marks it, and it is skipped when the
        line reaches it.
        """
        if self._released:
            return
        self._released = True
        if self._head:
            self._sequencer._advance(self.target, self._line)

    def _make_head(self) -> None:
        self._head = True
        if self._wake is not None:
            self._wake.set()


@dataclass(frozen=True, slots=True)
class SequencerStatistics:
    """A snapshot of a :class:`Sequencer`.

    Attributes:
        targets: Targets with at least one operation in line.
        waiting: Operations in line behind a head, over every target.
    """

    targets: int
    waiting: int


@final
class Sequencer:
    """The lines of every target of one Core (or any owner of targets).

    Not thread-safe: :meth:`arrive` is called from the Trio thread, synchronously, where a
    request arrives.
    """

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: dict[Target, deque[Turn]] = {}

    def arrive(self, target: Target, *, ending: bool = False) -> Turn:
        """Put an operation on ``target`` in line, behind those that arrived before it.

        Synchronous and cheap: call it where the operation arrives, before its task starts.

        Args:
            target: What it acts on.
            ending: Whether it ends the target (kept on the turn, see :meth:`head`).
        """
        line = self._lines.get(target)
        if line is None:
            line = self._lines[target] = deque()
        turn = Turn(self, target, line, ending=ending)
        line.append(turn)
        if len(line) == 1:
            turn._head = True
        return turn

    def _advance(self, target: Target, line: deque[Turn]) -> None:
        # The head left: drop it and every turn behind it that left while waiting, then
        # wake the first one still there.
        line.popleft()
        while line and line[0]._released:
            line.popleft()
        if line:
            line[0]._make_head()
        elif self._lines.get(target) is line:
            del self._lines[target]

    def withdraw(self, target: Target, name: str, why: str) -> Turn | None:
        """Withdraw the operation on ``target`` named ``name`` that waits for its turn
        (:meth:`Turn.withdraw`).

        Linear in the target's line (a cancel is rare; a line is as long as a client's
        pipeline).

        Returns:
            The withdrawn turn; None when no operation of that name waits on ``target``.
        """
        turn = self.waiting_turn(target, name)
        if turn is None or not turn.withdraw(why):
            return None
        return turn

    def waiting_turn(self, target: Target, name: str) -> Turn | None:
        """The first operation on ``target`` named ``name`` that has not taken its turn."""
        for turn in self._lines.get(target, ()):
            if turn.name == name and turn.waiting:
                return turn
        return None

    def head(self, target: Target) -> Turn | None:
        """The turn taking its effect on ``target`` now (None when the target is idle)."""
        line = self._lines.get(target)
        return None if not line else line[0]

    def waiting(self, target: Target) -> int:
        """How many operations on ``target`` wait behind its head (0 when idle)."""
        line = self._lines.get(target)
        return 0 if line is None else sum(1 for turn in line if not turn._head)

    def statistics(self) -> SequencerStatistics:
        """The number of busy targets and of operations waiting for their turn."""
        waiting = sum(len(line) - 1 for line in self._lines.values())
        return SequencerStatistics(targets=len(self._lines), waiting=max(waiting, 0))


#: The turn of the operation running in this task (set by the operation path; None outside
#: an ordered operation).
_current_turn: contextvars.ContextVar[Turn | None] = contextvars.ContextVar(
    "current_turn", default=None
)


def hold_turn(turn: Turn | None) -> contextvars.Token[Turn | None]:
    """Make ``turn`` the running operation's turn in this task (the operation path calls it
    around a handler); :func:`effect_taken` releases it. Undo with ``_current_turn.reset``."""
    if turn is not None:
        turn._owner = trio.lowlevel.current_task()
    return _current_turn.set(turn)


def effect_taken() -> None:
    """Say that the running operation has taken its effect on its target.

    The next operation on the same target may take its own from now on, while this one goes
    on waiting for its answer. An operation that never calls it keeps its turn until it
    ends (its whole handler is then its effect). A no-op outside an ordered operation, when
    called twice, and in a task the operation started (tasks inherit their spawner's
    context: a session's reader started by a command must not release that command's turn).

    Call it right after the effect: the DAP request queued, the job queued.
    """
    turn = _current_turn.get()
    if turn is not None and turn._owner is trio.lowlevel.current_task():
        turn.release()


def withdrawn() -> str | None:
    """Why a cancel withdrew the running operation before its turn (:meth:`Turn.withdraw`),
    or None: it is taking its turn as usual (or runs outside an ordered operation).

    A handler of a command that can be named while it waits (:attr:`Turn.name`) asks this
    right after its turn came, before anything else, and ends a withdrawn operation the way
    its kind ends a cancelled one, without its effect (nothing is sent).
    """
    turn = _current_turn.get()
    if turn is None or turn._owner is not trio.lowlevel.current_task():
        return None
    return turn.withdrawn
