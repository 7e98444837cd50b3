"""The lifecycle of one terminal handle, as a pure transition table.

Contract (the plugin contract "Plugin-owned native terminals" and "Close, retained context and
reopen"): a handle is created running; ``close`` and a natural exit both run a
bounded cleanup (the handle is *busy* meanwhile) and leave it ``closed`` with its launch and
retained text; ``reopen`` starts a new generation from ``closed`` only (reopening a running
terminal is ``preconditionFailed``); ``dispose`` ends any live process and forgets the handle.
A close, reopen or dispose while another one runs on the same handle is ``busy``.
An unexpected exception inside a running terminal's tasks (a supervision boundary) runs the
same bounded cleanup and leaves it ``failed`` (reason ``internal``): like ``closed`` it keeps
its launch and retained text, is reopenable and disposable.

Strategy (the state machine is tables, after h11's ``_state.py``): every
``(state, input)`` pair is in exactly one of three tables -- a transition, a refusal with its
stable error code, or an input that is ignored in that state (a late "exited" of a process
that is already being ended). :class:`TerminalLifecycle` only looks things up; it does no I/O,
so the table is tested exhaustively without processes.
"""

from __future__ import annotations

import enum
from typing import Final

from protocol import CoreError

__all__ = (
    "BUSY",
    "PRECONDITION_FAILED",
    "TerminalInput",
    "TerminalLifecycle",
    "TerminalState",
)

#: The catalog code for "another close/reopen/dispose runs on this handle" (Core ``busy``).
BUSY: Final = "busy"
#: The catalog code for "the handle is not in the state this command needs". The Core
#: catalog has no such code, so the plugin-contract one is used.
PRECONDITION_FAILED: Final = "plugin.host.preconditionFailed"


class TerminalState(enum.StrEnum):
    """Where a terminal handle is in its life (wire: ``state`` of ``terminal.list``)."""

    #: A PTY process is being started (create or reopen); busy.
    STARTING = "starting"
    #: The PTY process runs; write and resize work.
    RUNNING = "running"
    #: The bounded cleanup of a close or of a natural exit runs; busy.
    CLOSING = "closing"
    #: No process; the launch settings and the retained text are kept; reopenable.
    CLOSED = "closed"
    #: As CLOSED, after an unexpected exception inside the terminal ended it (reason
    #: ``internal``, with a crash report).
    FAILED = "failed"
    #: A dispose runs; busy.
    DISPOSING = "disposing"
    #: Forgotten; no further events. Terminal state.
    DISPOSED = "disposed"


class TerminalInput(enum.StrEnum):
    """What can happen to a handle."""

    #: ``terminal.close``.
    CLOSE = "close"
    #: ``terminal.reopen``.
    REOPEN = "reopen"
    #: ``terminal.dispose``, or its owner ended.
    DISPOSE = "dispose"
    #: ``terminal.write`` / ``terminal.resize``: need a running process.
    USE = "use"
    #: The PTY's main process exited by itself.
    EXITED = "exited"
    #: The process of a create/reopen started.
    STARTED = "started"
    #: The process of a create/reopen could not start.
    START_FAILED = "startFailed"
    #: The cleanup of a close, natural exit or dispose finished.
    CLEANED = "cleaned"
    #: An unexpected exception inside the terminal's tasks (its boundary caught it).
    FAIL = "fail"
    #: The cleanup finished, and the generation failed (FAIL, or the cleanup itself raised).
    CLEANED_FAILED = "cleanedFailed"


_S = TerminalState
_I = TerminalInput

#: ``(state, input) -> next state``.
_TRANSITIONS: Final[dict[tuple[TerminalState, TerminalInput], TerminalState]] = {
    (_S.STARTING, _I.STARTED): _S.RUNNING,
    (_S.STARTING, _I.START_FAILED): _S.CLOSED,
    (_S.RUNNING, _I.USE): _S.RUNNING,
    (_S.RUNNING, _I.CLOSE): _S.CLOSING,
    (_S.RUNNING, _I.EXITED): _S.CLOSING,
    (_S.RUNNING, _I.DISPOSE): _S.DISPOSING,
    (_S.CLOSING, _I.CLEANED): _S.CLOSED,
    # Closing a closed terminal changes nothing and reports what is retained.
    (_S.CLOSED, _I.CLOSE): _S.CLOSED,
    (_S.CLOSED, _I.REOPEN): _S.STARTING,
    (_S.CLOSED, _I.DISPOSE): _S.DISPOSING,
    (_S.DISPOSING, _I.CLEANED): _S.DISPOSED,
    (_S.RUNNING, _I.FAIL): _S.CLOSING,
    (_S.CLOSING, _I.CLEANED_FAILED): _S.FAILED,
    (_S.DISPOSING, _I.CLEANED_FAILED): _S.DISPOSED,
    # A failed terminal is a closed one that says why.
    (_S.FAILED, _I.CLOSE): _S.FAILED,
    (_S.FAILED, _I.REOPEN): _S.STARTING,
    (_S.FAILED, _I.DISPOSE): _S.DISPOSING,
}

#: ``(state, input) -> catalog code`` of the refusal.
_REFUSALS: Final[dict[tuple[TerminalState, TerminalInput], str]] = {
    (_S.RUNNING, _I.REOPEN): PRECONDITION_FAILED,
    (_S.CLOSED, _I.USE): PRECONDITION_FAILED,
    (_S.FAILED, _I.USE): PRECONDITION_FAILED,
    (_S.STARTING, _I.USE): PRECONDITION_FAILED,
    (_S.CLOSING, _I.USE): PRECONDITION_FAILED,
    (_S.DISPOSING, _I.USE): PRECONDITION_FAILED,
    **{
        (state, op): BUSY
        for state in (_S.STARTING, _S.CLOSING, _S.DISPOSING)
        for op in (
            _I.CLOSE,
            _I.REOPEN,
            _I.DISPOSE,
        )
    },
    **{(_S.DISPOSED, op): "not_found" for op in (_I.CLOSE, _I.REOPEN, _I.DISPOSE, _I.USE)},
}

#: Inputs that change nothing in that state: a process that exits, or a task that fails,
#: while it is already being ended, started, or gone (its outcome is recorded by the cleanup
#: that ends it).
_IGNORED: Final[frozenset[tuple[TerminalState, TerminalInput]]] = frozenset(
    (state, event)
    for state in (_S.STARTING, _S.CLOSING, _S.CLOSED, _S.FAILED, _S.DISPOSING, _S.DISPOSED)
    for event in (_I.EXITED, _I.FAIL)
)

_MESSAGES: Final[dict[str, str]] = {
    BUSY: "another close, reopen or dispose is running on terminal {id}",
    PRECONDITION_FAILED: "terminal {id} is {state}; {input} needs {need}",
    "not_found": "terminal {id} was disposed",
}


def outcome(state: TerminalState, event: TerminalInput) -> TerminalState | str | None:
    """Look ``(state, event)`` up: the next state, a refusal code, or None when ignored.

    Raises:
        KeyError: The pair is in no table (a bug: the tables are meant to be total for the
            inputs the service sends in each state).
    """
    if (state, event) in _TRANSITIONS:
        return _TRANSITIONS[state, event]
    if (state, event) in _REFUSALS:
        return _REFUSALS[state, event]
    if (state, event) in _IGNORED:
        return None
    raise KeyError((state, event))


class TerminalLifecycle:
    """The state of one handle; :meth:`apply` moves it along :data:`_TRANSITIONS`.

    Args:
        terminal_id: Used in error messages.
        state: The initial state (``STARTING`` for a new handle).
    """

    def __init__(self, terminal_id: str, state: TerminalState = TerminalState.STARTING) -> None:
        self.terminal_id = terminal_id
        self.state = state

    def check(self, event: TerminalInput) -> None:
        """Raise the refusal ``event`` would get now, without changing the state.

        Raises:
            CoreError: ``busy``, ``plugin.host.preconditionFailed`` or ``not_found``.
            RuntimeError: ``event`` is not expected in this state (an internal bug).
        """
        try:
            result = outcome(self.state, event)
        except KeyError:
            raise RuntimeError(f"terminal input {event} is unexpected in {self.state}") from None
        if isinstance(result, str) and not isinstance(result, TerminalState):
            need = "a closed terminal" if event is TerminalInput.REOPEN else "a running one"
            raise CoreError(
                result,
                _MESSAGES[result].format(
                    id=self.terminal_id, state=self.state.value, input=event.value, need=need
                ),
                {"terminalID": self.terminal_id, "state": self.state.value},
            )

    def apply(self, event: TerminalInput) -> bool:
        """Apply ``event``.

        Returns:
            True when the state changed or stayed by a transition, False when the input was
            ignored in this state.

        Raises:
            CoreError: As :meth:`check`; the state is unchanged.
            RuntimeError: As :meth:`check`.
        """
        self.check(event)
        result = outcome(self.state, event)
        if result is None:
            return False
        assert isinstance(result, TerminalState)
        self.state = result
        return True

    @property
    def busy(self) -> bool:
        """True while a start, close/exit cleanup or dispose runs."""
        return self.state in (TerminalState.STARTING, TerminalState.CLOSING, _S.DISPOSING)
