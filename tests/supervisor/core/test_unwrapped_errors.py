"""Errors leave ``open_core()``, ``CoreThread`` and the CLI as themselves (issue 13).

Inside, Trio's strict exception groups stay on; at these edges a lone exception is unwrapped
from the groups of the nurseries it crossed, and a group of two or more leaves as it is.
"""

from __future__ import annotations

import sys
import traceback

import pytest
import trio

import supervisor._process._direct
from supervisor import Core, CoreThread, open_core
from supervisor._cli._main import main


class _Mine(Exception):
    pass


async def test_an_error_in_the_block_arrives_as_itself() -> None:
    cause = KeyError("the cause")

    async def fail_in_the_block() -> None:
        async with open_core() as core:
            await core.call("core.ping", {})
            raise _Mine("raised by the caller") from cause

    with pytest.raises(_Mine) as info:
        await fail_in_the_block()
    assert type(info.value) is _Mine
    # Its own chain is kept, and the traceback still reaches the line that raised it.
    assert info.value.__cause__ is cause
    assert "raised by the caller" in "".join(traceback.format_exception(info.value))
    assert any(
        frame.name == "fail_in_the_block"
        for frame in traceback.extract_tb(info.value.__traceback__)
    )


async def test_a_group_of_the_callers_own_leaves_as_that_group() -> None:
    mine = ExceptionGroup("two failures", [_Mine("a"), _Mine("b")])
    with pytest.raises(ExceptionGroup) as info:
        async with open_core():
            raise mine
    # The same group (Trio may hand on a copy it derived: the same message and members).
    assert info.value.message == "two failures"
    assert info.value.exceptions == mine.exceptions


async def test_a_cancellation_of_the_caller_stays_a_cancellation() -> None:
    with trio.move_on_after(0.05) as scope:
        async with open_core():
            await trio.sleep_forever()
    assert scope.cancelled_caught


def test_a_core_thread_that_fails_to_start_names_the_failure_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: Core, *args: object) -> None:
        raise _Mine("no Core today")

    monkeypatch.setattr(Core, "__init__", refuse)
    with pytest.raises(RuntimeError, match="failed to start") as info, CoreThread():
        pass  # pragma: no cover -- never entered
    assert type(info.value.__cause__) is _Mine


def test_the_cli_lets_an_unhandled_error_leave_unwrapped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(self: Core, request: object) -> object:
        raise _Mine("a bug around the command")

    monkeypatch.setattr(Core, "execute", broken)
    # exec's own path without the Core (_process/_direct.py) is not this test's subject.
    monkeypatch.setattr(supervisor._process._direct, "direct_available", lambda: False)
    with pytest.raises(_Mine, match="a bug around the command"):
        main(["exec", "--", sys.executable, "-c", "pass"])
