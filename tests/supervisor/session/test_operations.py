"""The operation table: each operation finishes exactly once; a session's end finishes all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor._session._operations import Operation, OperationTable

if TYPE_CHECKING:
    from protocol import JSONObject


@dataclass(eq=False)
class _Op(Operation):
    generation: int = 1


def _table() -> tuple[OperationTable[_Op], list[tuple[str, JSONObject]]]:
    finished: list[tuple[str, JSONObject]] = []
    table: OperationTable[_Op] = OperationTable(
        lambda op, outcome: finished.append((op.operation_id, outcome))
    )
    return table, finished


def test_an_operation_finishes_once_and_the_first_outcome_wins() -> None:
    table, finished = _table()
    op = _Op("a")
    table.add(op)
    assert not op.done
    assert table.finish(op, {"result": 1}) is True
    assert table.finish(op, {"error": {"code": "cancelled"}}) is False
    assert op.outcome == {"result": 1}
    assert op.finished.is_set()
    assert finished == [("a", {"result": 1})]
    # Finished is not forgotten: the kind keeps the id taken until its task ends.
    assert "a" in table


def test_forget_removes_only_that_object() -> None:
    table, _ = _table()
    old = _Op("a")
    table.add(old)
    with pytest.raises(ValueError, match="already registered"):
        table.add(_Op("a"))
    table.forget(old)
    newer = _Op("a")
    table.add(newer)
    table.forget(old)  # a late forget of the old one leaves the newer one
    assert table.get("a") is newer
    assert len(table) == 1


def test_finish_all_ends_the_chosen_pending_ones_once() -> None:
    table, finished = _table()
    ops = [_Op("a", generation=1), _Op("b", generation=2), _Op("c", generation=1)]
    for op in ops:
        table.add(op)
    table.finish(ops[2], {"result": None})
    ended = table.finish_all(
        lambda op: {"error": {"code": "unavailable"}} if op.generation == 1 else None
    )
    assert ended == 1
    assert [name for name, _ in finished] == ["c", "a"]
    assert not ops[1].done
    assert table.finish_all(lambda op: {"error": {"code": "unavailable"}}) == 1
    assert [name for name, _ in finished] == ["c", "a", "b"]


async def test_waiters_wake_on_finish() -> None:
    table, _ = _table()
    op = _Op("a")
    table.add(op)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(op.finished.wait)
        await trio.lowlevel.checkpoint()
        table.finish(op, {"result": "ok"})
    assert op.outcome == {"result": "ok"}
