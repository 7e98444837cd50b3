"""``process.run``'s default deadline: ide-backend-protocol.schema.json's ``*/exec`` ends a
command "without [timeoutMs], after a day"; 0 asks for none (the envelope's rule)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from supervisor import open_core
from supervisor._api._base import decode_payload
from supervisor._api._process import ProcessRun
from supervisor._core._builtins import DEFAULT_PROCESS_RUN_TIMEOUT_MS, process_run_timeout_ms

if TYPE_CHECKING:
    import trio.testing


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({}, 86_400_000),
        ({"timeoutMilliseconds": 250}, 250),
        ({"timeoutMilliseconds": 0}, None),
        ({"timeoutMilliseconds": None}, None),
    ],
)
def test_absent_is_one_day_and_zero_is_none(
    payload: dict[str, int | None], expected: int | None
) -> None:
    assert DEFAULT_PROCESS_RUN_TIMEOUT_MS == 86_400_000
    decoded = decode_payload("process.run", ProcessRun, {"argv": ["true"], **payload})
    assert process_run_timeout_ms(decoded) == expected


async def test_a_command_without_a_timeout_ends_after_a_day(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The clock jumps while the command sleeps: a day passes at once, then the tree ends.
    async with open_core() as core:
        result = await core.call("process.run", {"argv": ["sleep", "100000"]})
    assert isinstance(result, dict)
    assert result["timedOut"] is True
    assert isinstance(result["durationMs"], int)
    assert result["durationMs"] >= DEFAULT_PROCESS_RUN_TIMEOUT_MS
