"""One operation table: the pending operations of a session, each finished exactly once.

Every request a session runs for a client (an LSP request, a debug operation) is registered
under its operation id, may be finished from several places (its own task, a cancel, a
timeout, the session's end), and must produce its outcome -- one answer, one completion
event -- exactly once (the Core API contract "Operations": every request completes exactly once).
The table holds that rule; each kind keeps its outcome's shape and the event it emits.

:func:`run_operation` is the one procedure that runs a registered operation's step: under
its cancel scope (its deadline, its cancel), as a supervision boundary (an unexpected
exception ends this operation ``internal``, logged once, never the session), finished
exactly once whatever ends it first (its own outcome, a cancel, the deadline, the session's
end), then forgotten. A kind supplies only its protocol step and the shapes of its outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import trio

from .._boundary import log_failure, split_failure

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from protocol import JSONObject

__all__ = ("Finishable", "Operation", "OperationTable", "run_operation")


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
OutT = TypeVar("OutT")


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


class Finishable(Protocol):
    """What :func:`run_operation` needs of an operation: whether it has its outcome."""

    @property
    def done(self) -> bool:
        """Whether the operation has finished (its outcome is fixed)."""
        ...


async def run_operation(
    operation: Finishable,
    step: Callable[[], Awaitable[object]],
    *,
    scope: trio.CancelScope,
    what: str,
    finish: Callable[[OutT], object],
    forget: Callable[[], object],
    internal: Callable[[Exception], OutT],
    caught: Callable[[], OutT],
    ended: Callable[[], OutT],
    answer: Callable[[Exception], OutT | None] | None = None,
    after: Callable[[bool], object] | None = None,
) -> None:
    """Run one registered operation's ``step`` and finish the operation exactly once.

    The one operation path of every kind (the Core's commands, LSP requests, debug
    operations, plugin function calls): the kind registers the operation (refusing a taken
    id), then awaits this; it supplies only its protocol step and the shapes of its outcomes.
    Whatever ends the operation first gives its outcome -- the step's own (``finish`` from the
    step), an answer it raised, an unexpected failure, the scope's deadline or cancel, the
    session's end -- and the others change nothing.

    Args:
        operation: The operation; the runner finishes it only when it is not ``done``.
        step: The kind's protocol step (wait for its turn, send, wait for the answer); it
            finishes the operation with its outcome (``finish``) when it has one.
        scope: The operation's cancel scope: its deadline and its cancel (a kind's cancel
            finishes the operation first, then cancels the scope).
        what: Names the operation in the log (``"language-server session lsp-1 request
            op-3"``).
        finish: Finishes the operation with an outcome; a second call changes nothing.
        forget: Unregisters it (its id may then be reused), once, whatever happened.
        internal: The outcome of an unexpected exception inside the step, which is logged
            once with its traceback (the operation is a supervision boundary: it fails
            alone, never its session).
        caught: The outcome when the operation's own scope ended the step (its deadline, or
            a cancel that did not finish it first).
        ended: The outcome when the step ended from outside without one (the session ended,
            the caller was cancelled).
        answer: The outcome an exception of the step stands for when it is the kind's own
            answer, not a failure (the Core's :class:`~protocol.CoreError`), or None.
        after: Called with True once the runner itself finished the operation by ``caught``,
            False by ``ended`` (a debug adapter is then sent DAP ``cancel``).

    Raises:
        trio.Cancelled: A cancellation from outside (the session ending, the caller
            cancelled), after the operation was finished with ``ended()``.
    """
    try:
        with scope:
            try:
                await step()
            except BaseException as exc:
                failure, rest = split_failure(exc)
                if failure is None:
                    raise
                outcome = answer(failure) if answer is not None else None
                if outcome is None:
                    log_failure(what, failure)
                    outcome = internal(failure)
                finish(outcome)
                if rest is not None:
                    raise rest from None
    finally:
        try:
            if not operation.done:
                by_scope = scope.cancelled_caught
                finish(caught() if by_scope else ended())
                if after is not None:
                    after(by_scope)
        finally:
            forget()
