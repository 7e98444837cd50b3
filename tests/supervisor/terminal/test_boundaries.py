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

from supervisor._boundary import FaultPlan
from tests._faults import armed
from tests._procfs import runs_no_more
from tests.supervisor.terminal.test_terminals import (
    BASH,
    WAIT_S,
    Term,
    _dict,
    _refused,
    terminal_core,
)

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject
    from supervisor._core._core import Core

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


@pytest.mark.parametrize(
    "site",
    ["terminal.reader", "terminal.render", "terminal.exit", "terminal.cleanup", "terminal.outcome"],
)
async def test_a_failure_inside_a_terminal_ends_that_terminal_only(
    site: str, tmp_path: Path
) -> None:
    """An exception inside one terminal's task (or its cleanup) ends that terminal: it is
    ``failed`` with reason ``internal`` and a crash report, its processes (a background
    child too) are gone, a sibling terminal works, the Core answers."""
    pid_file = tmp_path / "pids"
    # "go" is written after the pid file, so a fault in the reader or the renderer fires
    # once the pids are known; the program exits by itself a second later (exit, cleanup).
    script = f'sleep 60 & echo "$$ $!" > {pid_file}; echo go; sleep 1'
    plan = FaultPlan(sites=(site,))
    async with terminal_core() as (core, _):
        with armed(plan):
            victim = await Term.create(core, "sh", "-c", script)
            await victim.call("terminal.onExit")
            outcome = await victim.next_exit()
        assert plan.fired == [site]
        assert outcome["reason"] == "internal"
        report = _dict(outcome["crashReport"])
        assert report == {
            "exceptionType": "InjectedFault",
            "message": f"injected fault at {site}",
            "stderrTail": [],
        }
        main_pid, child_pid = (int(p) for p in pid_file.read_text().split())
        assert runs_no_more(main_pid)
        assert runs_no_more(child_pid)
        listed = await _listed(core, victim.id)
        assert (listed["state"], listed["reason"], listed["crashReport"]) == (
            "failed",
            "internal",
            report,
        )
        await _refused(
            "plugin.host.preconditionFailed",
            core,
            "terminal.write",
            {"terminalID": victim.id, "data": "x"},
        )
        # A sibling terminal works and the Core answers.
        sibling = await Term.create(core, "bash", *BASH, environment={"PS1": "$ "})
        await sibling.type("echo sibling-$((5*5))\n")
        await sibling.until("sibling-25")
        assert await core.call("core.ping", {})
        # A failed terminal is reopenable like a closed one.
        reopened = _dict(await victim.call("terminal.reopen"))
        assert reopened["generation"] == 2
        await victim.until("go")
        await victim.call("terminal.dispose")
        await sibling.call("terminal.dispose")


async def test_output_written_just_before_the_exit_is_delivered() -> None:
    """The reader drains the PTY after the program's exit (bounded): a program that writes
    and exits at once loses nothing, a short line or 200 000 bytes."""
    script = (
        "import sys; sys.stdout.write('x' * 200_000 + '\\nlast-words-' + str(6 * 7));"
        " sys.stdout.flush()"
    )
    async with terminal_core() as (core, _):
        term = await Term.create(core, sys.executable, "-c", script)
        await term.call("terminal.onExit")
        outcome = await term.next_exit()
        await term.poll()
        assert (outcome["reason"], outcome["exitCode"]) == ("exited", 0)
        assert term.text.endswith("last-words-42")
        assert term.text.count("x") == 200_000
        assert not term.gap
        await term.call("terminal.dispose")


async def test_a_failure_of_the_exit_watch_during_a_close_is_the_close_outcome() -> None:
    """Issue 25: the exit watch may wake from the program's exit just before a close cancels
    it, and fail while the close is ending the processes; the close waits for it, so its
    outcome says ``internal`` rather than a clean close. Each round either fires there
    (then the outcome is ``internal``) or the close cancels the watch first (then nothing
    fires and the close is clean)."""
    async with terminal_core() as (core, _):
        for _ in range(4):
            plan = FaultPlan(sites=("terminal.exit",))
            with armed(plan):
                term = await Term.create(core, "bash", *BASH, environment={"PS1": "$ "})
                await term.call("terminal.onExit")
                await term.type("echo ready\n")
                await term.until("ready")
                await term.call("terminal.close")
                outcome = await term.next_exit()
            await term.call("terminal.dispose")
            if plan.fired:
                assert outcome["reason"] == "internal", outcome
            else:
                assert outcome["reason"] != "internal", outcome
