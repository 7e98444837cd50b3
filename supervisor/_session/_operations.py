"""One operation table: the pending operations of a session, each finished exactly once.

Every request a session runs for a client (an LSP request, a debug operation) is registered
under its operation id, may be finished from several places (its own task, a cancel, a
timeout, the session's end), and must produce its outcome -- one answer, one completion
event -- exactly once (core-api.md "Operations": every request completes exactly once).
The table holds that rule; each kind keeps its outcome's shape and the event it emits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import trio

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from protocol import JSONObject

__all__ = ("Operation", "OperationTable")


@dataclass(eq=False)
class Operation:
    """One pending operation.

    Attributes:
        operation_id: Its id (``operationId`` on the wire).
        outcome: The kind's outcome once finished (None while pending).
        finished: Set when it finished (:meth:`OperationTable.finish`).
    """

    operation_id: str
    outcome: JSONObject | None = field(default=None, kw_only=True)
    finished: trio.Event = field(default_factory=trio.Event, kw_only=True)

    @property
    def done(self) -> bool:
        """Whether the operation has finished (its outcome is fixed)."""
        return self.outcome is not None


OpT = TypeVar("OpT", bound=Operation)


class OperationTable(Generic[OpT]):
    """The pending operations of one session, by id.

    Args:
        on_finish: Called once per operation with its outcome, when it finishes: the kind
            emits its completion event there.
    """

    def __init__(self, on_finish: Callable[[OpT, JSONObject], None]) -> None:
        self._on_finish = on_finish
        self._pending: dict[str, OpT] = {}

    def __contains__(self, operation_id: object) -> bool:
        return operation_id in self._pending

    def __len__(self) -> int:
        return len(self._pending)

    def __iter__(self) -> Iterator[OpT]:
        """The registered operations, as a snapshot (finishing one while iterating is safe)."""
        return iter(list(self._pending.values()))

    def get(self, operation_id: str) -> OpT | None:
        """The registered operation ``operation_id``, or None."""
        return self._pending.get(operation_id)

    def add(self, operation: OpT) -> None:
        """Register ``operation`` (the kind refused a taken id first, with its message).

        Raises:
            ValueError: The id is taken.
        """
        if operation.operation_id in self._pending:
            raise ValueError(f"operation {operation.operation_id!r} is already registered")
        self._pending[operation.operation_id] = operation

    def forget(self, operation: OpT) -> None:
        """Unregister ``operation`` -- only that object: a newer one with its id stays."""
        if self._pending.get(operation.operation_id) is operation:
            del self._pending[operation.operation_id]

    def finish(self, operation: OpT, outcome: JSONObject) -> bool:
        """Finish ``operation`` with ``outcome`` unless it has finished already.

        Sets its outcome, wakes its waiters (:attr:`Operation.finished`) and calls
        ``on_finish``. It stays registered until :meth:`forget`: a kind may keep its id
        taken until its task has ended.

        Returns:
            True when this call finished it; False when it had finished before (no effect).
        """
        if operation.outcome is not None:
            return False
        operation.outcome = outcome
        operation.finished.set()
        self._on_finish(operation, outcome)
        return True

    def finish_all(self, outcome_of: Callable[[OpT], JSONObject | None]) -> int:
        """Finish every pending operation for which ``outcome_of`` gives an outcome.

        Returns:
            How many this call finished.
        """
        ended = 0
        for operation in self:
            if operation.outcome is None:
                outcome = outcome_of(operation)
                if outcome is not None and self.finish(operation, outcome):
                    ended += 1
        return ended
