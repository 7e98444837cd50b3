"""Terminals as supervision boundaries: hostile output, failures inside a terminal's tasks.

Whatever a program writes degrades at worst its own terminal's rendered text; an unexpected
exception inside a terminal's reader, render loop, exit watcher or cleanup ends that terminal
only (``failed``, reason ``internal``, a crash report), by the normal stop ladder, while a
sibling terminal and the Core go on. Real programs in real PTYs; the suite's leak guard
proves that nothing outlives a test.
"""

from __future__ import annotations

import shutil
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from tests.supervisor.test_terminal import BASH, WAIT_S, Term, _dict, terminal_core

if TYPE_CHECKING:
    from protocol import JSONObject
    from supervisor._core import Core

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux PTYs")


async def _listed(core: Core, terminal_id: str) -> JSONObject:
    listed = await core.call("terminal.list", {})
    assert isinstance(listed, list)
    for item in listed:
        if _dict(item)["terminalID"] == terminal_id:
            return _dict(item)
    raise AssertionError(f"no terminal {terminal_id}")


@pytest.mark.skipif(shutil.which("vim") is None, reason="vim is not installed")
async def test_vim_starts_renders_and_quits() -> None:
    """vim's start-up queries (``CSI ? 4 m`` among them) made the renderer raise and ended
    the Core; now they render, and the retained text is vim's screen."""
    async with terminal_core() as (core, _):
        term = await Term.create(
            core, "vim", "-u", "NONE", "-N", environment={"TERM": "xterm-256color"}
        )
        await term.call("terminal.onExit")
        await term.until("~")
        await trio.sleep(0.3)  # let the render loop take the screen
        assert "renderFallback" not in await _listed(core, term.id)
        assert await core.call("core.ping", {})
        await term.type("\x1b:q!\r")
        outcome = await term.next_exit()
        assert outcome["exitCode"] == 0
        assert outcome["reason"] == "exited"
        await term.call("terminal.dispose")


async def test_a_sequence_the_emulator_rejects_falls_back_and_the_terminal_runs_on() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(core, "bash", *BASH, environment={"PS1": "$ "})
        await term.type("printf 'one\\n\\033[5Ktwo\\n'\n")
        await term.until("two")
        with trio.fail_after(WAIT_S):
            while True:
                listed = await _listed(core, term.id)
                if "renderFallback" in listed:
                    break
                await trio.sleep(0.05)
        assert listed["state"] == "running"
        assert str(listed["renderFallback"]).startswith("UnboundLocalError")
        await term.type("echo after-$((4*4))\n")
        await term.until("after-16")
        closed = _dict(await term.call("terminal.close"))
        assert closed["retainedContextBytes"]
        reopened = _dict(await term.call("terminal.reopen"))
        await term.until("after-16")  # the retained plain text, restored
        assert reopened["generation"] == 2
        await term.call("terminal.dispose")
