"""One table-driven state machine engine for every lifecycle (sans-I/O, h11 ``_state.py``).

Each lifecycle -- the LSP-style server session, a language-server session, a debug session,
a terminal handle -- is a table ``{(state, input): next_state}`` and nothing else; this
engine is the one piece of code that moves along such a table. The inputs split in two, as
h2's ``SEND_*``/``RECV_*``:

* *local* inputs are steps our own side is about to take. One the table lacks is a bug of
  ours: the machine moves to its error state (if it has one), stays there, and
  :class:`~protocol.LocalProtocolError` is raised.
* *remote* inputs are things that happened (the peer answered, the process exited). One the
  table lacks is not an error -- a late reply after a stop, an exit during a stop -- and
  leaves the state as it is.

With ``strict=True`` every input is local (a machine whose every input is a decision, such
as the server lifecycle). A machine in its error state refuses every further local input;
remote inputs still follow the table there (a process that exits has exited).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Generic, TypeVar

from ._codes import ErrorCode
from ._errors import LocalProtocolError

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

__all__ = ("StateMachine",)

S = TypeVar("S", bound=enum.Enum)
I = TypeVar("I", bound=enum.Enum)  # noqa: E741 -- the input type, as in h11


class StateMachine(Generic[S, I]):
    """A state moved along a transition table.

    Args:
        table: ``{(state, input): next_state}``; read, never copied or changed.
        initial: The starting state.
        error: The state an illegal local input leaves the machine in (None: the state
            stays, and only the exception tells).
        local_inputs: The inputs that are our own steps (see the module docstring).
        strict: Every input is local.
        name: What the machine is, for error messages.

    Attributes:
        state: The current state.
    """

    __slots__ = ("_error", "_local", "_name", "_strict", "_table", "state")

    def __init__(
        self,
        table: Mapping[tuple[S, I], S],
        initial: S,
        *,
        error: S | None = None,
        local_inputs: Collection[I] = (),
        strict: bool = False,
        name: str = "lifecycle",
    ) -> None:
        self._table = table
        self.state = initial
        self._error = error
        self._local = frozenset(local_inputs)
        self._strict = strict
        self._name = name

    @property
    def poisoned(self) -> bool:
        """Whether an illegal local input moved the machine to its error state."""
        return self._error is not None and self.state is self._error

    def can(self, event: I) -> bool:
        """Whether ``event`` is a step of the current state (the state does not change)."""
        return (self.state, event) in self._table

    def next(self, event: I) -> S | None:
        """The state ``event`` would lead to, or None when the table has no such step."""
        return self._table.get((self.state, event))

    def check_poisoned(self) -> None:
        """Raise :class:`LocalProtocolError` when the machine is in its error state."""
        if self.poisoned:
            raise LocalProtocolError(
                f"the {self._name} is in {self.state.name} after an illegal step",
                error_code=ErrorCode.INTERNAL_ERROR,
            )

    def process(self, event: I) -> bool:
        """Apply ``event``.

        Returns:
            True when the state changed (a step to the same state, or an ignored remote
            input, is False).

        Raises:
            LocalProtocolError: ``event`` is a local input and the machine is poisoned, or
                the current state has no step for it (the machine then moves to its error
                state).
        """
        local = self._strict or event in self._local
        if local:
            self.check_poisoned()
        new = self._table.get((self.state, event))
        if new is None:
            if local:
                old = self.state
                if self._error is not None:
                    self.state = self._error
                raise LocalProtocolError(
                    f"illegal {self._name} step {event.name} in state {old.name}",
                    error_code=ErrorCode.INVALID_REQUEST,
                )
            return False
        changed = new is not self.state
        self.state = new
        return changed
