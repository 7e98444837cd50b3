"""Issue 5: PTY terminals against real programs (bash, curses, stubborn, flooding).

Every test drives a Core through its commands (the envelope's path) with real PTYs; the
suite's leak guard proves that nothing a terminal started survives its close, dispose, owner
or Core.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import sys
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
import trio
import trio.testing

import supervisor._process._tree
from protocol import CoreError
from protocol._json import encoded_size
from supervisor._core._core import open_core
from supervisor._flow import DEFAULT_HIGH_WATERMARK_BYTES
from supervisor._terminal._events import DEFAULT_MAX_OUTPUT_BYTES
from supervisor._terminal._pty import _RENDER_COALESCE_S, READ_CHUNK_BYTES, EndBounds
from supervisor._terminal._service import (
    MAX_HANDLES_PER_OWNER,
    MAX_TERMINAL_EVENTS,
    TerminalService,
    open_terminal_service,
)
from tests._procfs import runs_no_more, stat_fields

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from protocol import JSONObject, JSONValue
    from supervisor._core._core import Core
    from supervisor._core._service import ServiceContext

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux PTYs")

PY = sys.executable
PEERS = Path(__file__).resolve().parent.parent.parent / "peers"
BASH = ["--norc", "--noprofile", "-i"]
#: Generous: two cores shared with other test runs.
WAIT_S = 30
#: Short but real bounds, so the stubborn program's close takes seconds, not many.
FAST = EndBounds(hangup_ms=500, term_grace_ms=1000, kill_wait_ms=1000, drain_ms=500)


@asynccontextmanager
async def terminal_core(bounds: EndBounds = FAST) -> AsyncIterator[tuple[Core, TerminalService]]:
    services: list[TerminalService] = []

    @asynccontextmanager
    async def factory(context: ServiceContext) -> AsyncIterator[TerminalService]:
        async with open_terminal_service(context, bounds=bounds) as service:
            services.append(service)
            yield service

    async with open_core(services=[factory]) as core:
        yield core, services[0]


def _dict(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict), value
    return value


def _json_bytes(events: Sequence[JSONValue]) -> int:
    return sum(encoded_size(e) for e in events)


def _flood_numbers(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"flood line (\d+) é€", text)]


class Term:
    """One terminal handle seen through the Core's commands."""

    def __init__(self, core: Core, terminal_id: str) -> None:
        self.core = core
        self.id = terminal_id
        self.text = ""
        self.outputs: list[JSONObject] = []
        self.exits: list[JSONObject] = []
        self.gap = False

    @classmethod
    async def create(cls, core: Core, executable: str, *args: str, **fields: JSONValue) -> Term:
        payload: JSONObject = {"executable": executable, "arguments": list(args), **fields}
        result = _dict(await core.call("terminal.create", payload))
        assert result["generation"] == 1
        return cls(core, str(result["terminalID"]))

    async def call(self, command: str, **fields: JSONValue) -> JSONValue:
        return await self.core.call(command, {"terminalID": self.id, **fields})

    def _take(self, batch: JSONValue) -> list[JSONValue]:
        batch = _dict(batch)
        self.gap = self.gap or bool(batch["gap"])
        events = batch["events"]
        assert isinstance(events, list)
        for event in events:
            event = _dict(event)
            if event["event"] == "output":
                self.outputs.append(event)
                self.text += str(event["data"])
            else:
                self.exits.append(event)
        return events

    async def pump(self, timeout_ms: int = 2000) -> list[JSONValue]:
        return self._take(await self.call("terminal.waitEvents", timeoutMilliseconds=timeout_ms))

    async def poll(self) -> list[JSONValue]:
        return self._take(await self.call("terminal.pollEvents"))

    async def until(self, needle: str) -> None:
        with trio.fail_after(WAIT_S):
            while needle not in self.text:
                await self.pump()

    async def type(self, data: str) -> None:
        await self.call("terminal.write", data=data)

    async def next_exit(self) -> JSONObject:
        with trio.fail_after(WAIT_S):
            while not self.exits:
                await self.pump()
        return self.exits.pop(0)

    async def pid(self) -> int:
        for item in await self.core.call("terminal.list", {}):  # type: ignore[union-attr]
            item = _dict(item)
            if item["terminalID"] == self.id:
                pid = item["pid"]
                assert isinstance(pid, int)
                return pid
        raise AssertionError("no such terminal")


async def _wait_closed(core: Core) -> None:
    """Wait until the only terminal is closed (its natural-exit cleanup is done)."""
    with trio.fail_after(WAIT_S):
        while True:
            listed = _dict((await core.call("terminal.list", {}))[0])  # type: ignore[index]
            if listed["state"] == "closed":
                return
            await trio.sleep(0.05)


async def _refused(code: str, core: Core, command: str, payload: JSONObject) -> CoreError:
    with pytest.raises(CoreError) as info:
        await core.call(command, payload)
    assert info.value.code == code, info.value.message
    return info.value


async def test_interactive_bash_type_read_resize_exit() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(
            core,
            "bash",
            *BASH,
            environment={"PS1": "$ ", "ISSUE5": "five", "HOME": None},
            rows=24,
            cols=80,
            title="bash",
        )
        subscription = _dict(await term.call("terminal.onExit"))["subscriptionID"]
        await term.type("echo hello-$((6*7)) $ISSUE5 ${HOME-unset}\n")
        await term.until("hello-42 five unset")
        # The PTY is the controlling terminal of the shell's own session, and the shell
        # carries the scope marker.
        await term.type('tty; [ "$(ps -o sid= -p $$)" -eq $$ ] && echo "own-""session"\n')
        await term.until("own-session")
        assert "/dev/pts/" in term.text
        await term.type('echo "marker=${SUPERVISOR_SCOPE:+set}"\n')
        await term.until("marker=set")
        # SIGWINCH reaches the shell: $COLUMNS is updated from the new size.
        await term.call("terminal.resize", rows=33, cols=101)
        await term.type("stty size; echo cols=$COLUMNS\n")
        await term.until("33 101")
        await term.until("cols=101")
        pid = await term.pid()
        await term.type("exit 3\n")
        outcome = await term.next_exit()
        assert outcome == {
            "seq": outcome["seq"],
            "event": "exit",
            "type": "exit",
            "terminalID": term.id,
            "generation": 1,
            "exitCode": 3,
            "signal": None,
            "signalName": None,
            "reason": "exited",
            "subscriptionID": subscription,
        }
        assert runs_no_more(pid)
        listed = _dict((await core.call("terminal.list", {}))[0])  # type: ignore[index]
        assert listed["state"] == "closed"
        assert listed["title"] == "bash"
        assert "pid" not in listed
        await _refused(
            "plugin.host.preconditionFailed",
            core,
            "terminal.write",
            {"terminalID": term.id, "data": "x"},
        )
        await term.call("terminal.dispose")
        assert await core.call("terminal.list", {}) == []


def _terminal_foreground_group(pid: int) -> int:
    """The foreground group of ``pid``'s controlling terminal (``/proc/<pid>/stat`` tpgid)."""
    fields = stat_fields(pid)
    assert fields is not None
    return int(fields[5])


async def test_typing_is_rendered_once_per_coalescing_wait_not_per_keystroke() -> None:
    """Echoes that arrive while the display renders wait for the next coalescing wait, not
    for a worker thread each (typing rendered every few keystrokes, in a thread that took the
    GIL from the reader), and none is left unrendered: the render loop takes them all."""
    async with terminal_core() as (core, service):
        term = await Term.create(core, "sh", "-c", "stty raw -echo; echo ready; exec cat")
        await term.until("ready")
        process = service._handles.find(term.id).process
        assert process is not None
        display = process.display
        starts: list[float] = []
        render_pending = display.render_pending

        def recorded(max_chars: int | None = None) -> None:
            starts.append(time.perf_counter())
            render_pending(max_chars)

        display.render_pending = recorded  # type: ignore[method-assign]
        typed = ""
        for i in range(300):
            key = chr(ord("a") + i % 26)
            typed += key
            await term.type(key)
            with trio.fail_after(WAIT_S):
                while not term.text.endswith(typed):
                    await term.pump()
        with trio.fail_after(WAIT_S):
            while display.has_pending:  # noqa: ASYNC110 - the render loop sets no event
                await trio.sleep(0.01)
        assert starts
        # A trickle's renders are a coalescing wait apart (each waits from the end of the
        # one before); the clocks may differ by rounding only.
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert all(gap >= _RENDER_COALESCE_S - 0.001 for gap in gaps), gaps
        screen = _dict(await term.call("terminal.screen"))
        assert str(screen["text"]).endswith(typed[-26:])
        await term.call("terminal.dispose")


async def test_bash_job_control_ctrl_c_reaches_the_foreground_job() -> None:
    """Issue 8 goal 1: the PTY started by ``posix_spawn`` (an open of the slave by path in the
    new session) is bash's controlling terminal, so job control works: the foreground job
    runs in its own group, Ctrl-C interrupts it (the line discipline's SIGINT goes to the
    terminal's foreground group) and the shell lives on."""
    async with terminal_core() as (core, _):
        term = await Term.create(core, "bash", *BASH, environment={"PS1": "$ "})
        await term.call("terminal.onExit")
        await term.type("echo started-$((2*21))\n")
        await term.until("started-42")
        pid = await term.pid()
        await term.type("sleep 60\n")
        with trio.fail_after(WAIT_S):
            while True:
                sleepers = [c for c in psutil.Process(pid).children() if c.name() == "sleep"]
                if sleepers:
                    break
                await trio.sleep(0.02)
        (sleeper,) = sleepers
        # Job control: the job is its own group, and that group holds the terminal (the
        # stat's tpgid, the terminal's foreground group).
        assert os.getpgid(sleeper.pid) == sleeper.pid != pid
        assert _terminal_foreground_group(sleeper.pid) == sleeper.pid
        await term.type("\x03")
        with trio.fail_after(WAIT_S):
            await trio.to_thread.run_sync(sleeper.wait, WAIT_S)
        await term.type('echo "status=$?"\n')
        await term.until("status=130")  # 128 + SIGINT
        assert "no job control" not in term.text
        await term.type("exit 4\n")
        assert (await term.next_exit())["exitCode"] == 4
        await term.call("terminal.dispose")


async def test_curses_retained_context_is_the_displayed_frame() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, str(PEERS / "term_curses.py"), rows=20, cols=60)
        await term.until("FINAL-FRAME")
        await term.until("size=20x60")
        await term.call("terminal.resize", rows=22, cols=70)
        await term.until("resized=22x70")
        # Let the render loop catch up with the last frame before hanging up.
        await trio.sleep(0.3)
        closed = _dict(await term.call("terminal.close"))
        await term.poll()
        retained_bytes = closed["retainedContextBytes"]
        assert isinstance(retained_bytes, int)
        assert 0 < retained_bytes <= 16384
        reopened = _dict(await term.call("terminal.reopen"))
        assert reopened == {
            "terminalID": term.id,
            "generation": 2,
            "restoredContextBytes": retained_bytes,
        }
        await term.pump()
        first = next(e for e in term.outputs if e["generation"] == 2)
        restored = str(first["data"])
        assert len(restored.replace("\r\n", "\n").rstrip("\n").encode()) == retained_bytes
        # The rendered last frame: one counter line with the final value, no escapes.
        assert "\x1b" not in restored
        assert restored.count("count=") == 1
        assert "count=100" in restored
        assert "FINAL-FRAME" in restored
        assert "resized=22x70" in restored
        await term.until("size=22x70")  # generation 2 runs the program again
        await term.type("q")
        # Every generation's end is among its events, with no onExit subscription (issue 28):
        # the close of generation 1, then the exit of generation 2 after "q".
        assert (await term.next_exit())["generation"] == 1
        assert (await term.next_exit())["generation"] == 2
        await term.call("terminal.dispose")


async def test_stubborn_program_and_its_background_child_are_gone_after_close(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "pids"
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, str(PEERS / "term_stubborn.py"), str(pid_file))
        await term.call("terminal.onExit")
        await term.until("READY")
        main_pid, child_pid = (int(p) for p in pid_file.read_text().split())
        assert os.getpgid(child_pid) != os.getpgid(main_pid)
        result = _dict(await term.call("terminal.close", retainedContextBytes=0))
        assert result == {"retainedContextBytes": 0}
        assert runs_no_more(main_pid)
        assert runs_no_more(child_pid)
        outcome = await term.next_exit()
        assert (outcome["reason"], outcome["exitCode"], outcome["generation"]) == (
            "closed",
            None,
            1,
        )
        # Ended by a signal: its number and name (the stubborn program outlives HUP).
        assert outcome["signal"] in (signal.SIGTERM, signal.SIGKILL)
        assert outcome["signalName"] == signal.Signals(int(outcome["signal"])).name
        reopened = _dict(await term.call("terminal.reopen"))
        assert reopened["restoredContextBytes"] == 0
        await term.call("terminal.dispose")


async def test_bash_jobs_in_own_groups_nohup_and_setsid_are_gone_after_close() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(core, "bash", *BASH, environment={"PS1": "$ "})
        await term.type(
            "sleep 301 & echo job=$!; "
            "nohup sleep 302 >/dev/null 2>&1 & echo nohup=$!; "
            "trap '' HUP; (trap '' TERM; exec sleep 303) & echo ignoring=$!; trap - HUP\n"
        )
        await term.until("ignoring=")
        await term.type("echo listed-$((1+1))\n")
        await term.until("listed-2")
        pids = [
            int(line.split("=", 1)[1])
            for line in term.text.replace("\r", "").splitlines()
            if line.startswith(("job=", "nohup=", "ignoring="))
        ]
        assert len(pids) == 3
        # Job control put each background job into its own process group.
        assert len({os.getpgid(pid) for pid in pids}) == 3
        shell = await term.pid()
        await term.call("terminal.close")
        assert all(runs_no_more(pid) for pid in [shell, *pids])
        await term.call("terminal.dispose")


async def test_flooding_program_memory_bounded_close_not_blocked() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, str(PEERS / "term_flood.py"))
        await term.until("flood line")
        pid = await term.pid()
        # Nobody drains for a while: the reader is paused at the high watermark (issue 25),
        # so the queue stays bounded and nothing is dropped.
        await trio.sleep(2)
        events = await term.poll()
        assert len(events) <= MAX_TERMINAL_EVENTS
        assert not term.gap
        assert "\ufffd" not in term.text  # characters never split across events
        assert all(len(str(e["data"])) <= READ_CHUNK_BYTES for e in term.outputs)
        assert _json_bytes(events) <= DEFAULT_HIGH_WATERMARK_BYTES + 2 * READ_CHUNK_BYTES
        assert _json_bytes(events) <= DEFAULT_MAX_OUTPUT_BYTES
        numbers = _flood_numbers(term.text)
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # none lost
        # Taken, the output flows again.
        await term.pump()
        assert _flood_numbers(term.text)[-1] > numbers[-1]
        with trio.fail_after(WAIT_S):
            closed = _dict(await term.call("terminal.close"))
        assert runs_no_more(pid)
        assert 0 < closed["retainedContextBytes"] <= 16384  # type: ignore[operator]
        await term.poll()
        reopened = _dict(await term.call("terminal.reopen"))
        await term.poll()
        restored = str(next(e for e in term.outputs if e["generation"] == 2)["data"])
        lines = [line for line in restored.split("\r\n") if line]
        assert lines
        # Whole rendered lines; the first and last may be cut (budget, close mid-line).
        assert all(line.startswith("flood line ") for line in lines[1:-1]), [
            line for line in lines[1:-1] if not line.startswith("flood line ")
        ]
        assert reopened["generation"] == 2
        await term.call("terminal.dispose")


async def test_output_in_small_pieces_is_held_back_not_dropped() -> None:
    """A program writing a short line at a time makes an event per read of a few bytes: the
    event bound (256) comes long before the byte watermark (1 MiB). A consumer that drained
    once and then looks away for a while loses nothing: the reader pauses at half the event
    bound (the program then waits in its write), and every line arrives, in order."""
    lines = 800
    script = (
        "import sys, time\n"
        "sys.stdin.readline()\n"
        f"for i in range(1, {lines} + 1):\n"
        "    print('n', i, flush=True)\n"
        "    time.sleep(0.001)\n"  # one line per read: an event each
        "sys.stdin.readline()\n"
    )
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, "-c", script)
        await term.poll()  # a consumer exists
        await term.type("go\n")
        await trio.sleep(3)  # not drained meanwhile: far more than 256 lines are written
        with trio.fail_after(WAIT_S):
            await term.until(f"n {lines}\r\n")
        assert not term.gap
        numbers = [int(n) for n in re.findall(r"^n (\d+)\r$", term.text, re.MULTILINE)]
        assert numbers == list(range(1, lines + 1))
        await term.call("terminal.dispose")


async def test_utf8_split_across_writes_is_never_split_across_events() -> None:
    script = (
        "import os, time\n"
        "os.write(1, b'start \\xe2\\x82')\n"
        "time.sleep(0.3)\n"
        "os.write(1, b'\\xac done\\n')\n"
        "time.sleep(60)\n"
    )
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, "-c", script)
        await term.until("done")
        assert "start € done" in term.text
        assert all("\ufffd" not in str(e["data"]) for e in term.outputs)
        await term.call("terminal.dispose")


async def test_validation_starts_nothing() -> None:
    async with terminal_core() as (core, _):
        create = "terminal.create"
        await _refused("invalid_request", core, create, {"executable": "./x"})
        await _refused(
            "invalid_request", core, create, {"executable": "sh", "arguments": ["a"] * 257}
        )
        await _refused(
            "invalid_request", core, create, {"executable": "sh", "retainedContextBytes": 262145}
        )
        await _refused(
            "invalid_request",
            core,
            create,
            {"executable": "sh", "environment": {"SUPERVISOR_SCOPE": "x"}},
        )
        await _refused("launch_failed", core, create, {"executable": "no-such-program-5"})
        await _refused("launch_failed", core, create, {"executable": "/no/such/program"})
        await _refused("launch_failed", core, create, {"executable": "sh", "cwd": "/no/such/dir"})
        assert await core.call("terminal.list", {}) == []
        await _refused("not_found", core, "terminal.write", {"terminalID": "t9", "data": "x"})
        await _refused("invalid_request", core, "terminal.write", {"terminalID": "t9"})
        term = await Term.create(core, "cat")
        await _refused(
            "invalid_request", core, "terminal.write", {"terminalID": term.id, "data": "x" * 65537}
        )
        await _refused(
            "invalid_request", core, "terminal.resize", {"terminalID": term.id, "rows": 10}
        )
        await _refused(
            "invalid_request",
            core,
            "terminal.resize",
            {"terminalID": term.id, "rows": 0, "cols": 5},
        )
        await _refused(
            "invalid_request",
            core,
            "terminal.close",
            {"terminalID": term.id, "retainedContextBytes": 300000},
        )
        await term.call("terminal.dispose")
        await _refused("not_found", core, "terminal.dispose", {"terminalID": term.id})


async def test_handles_per_owner_and_dispose_owner() -> None:
    async with terminal_core() as (core, service):
        terms = [
            await Term.create(core, "cat", owner="plugin-a") for _ in range(MAX_HANDLES_PER_OWNER)
        ]
        error = await _refused(
            "plugin.host.limitExceeded",
            core,
            "terminal.create",
            {"executable": "cat", "owner": "plugin-a"},
        )
        assert error.details == {"limit": MAX_HANDLES_PER_OWNER}
        # Closed handles count; dispose releases one.
        await terms[0].call("terminal.close")
        await _refused(
            "plugin.host.limitExceeded",
            core,
            "terminal.create",
            {"executable": "cat", "owner": "plugin-a"},
        )
        await terms[0].call("terminal.dispose")
        terms[0] = await Term.create(core, "cat", owner="plugin-a")
        other = await Term.create(core, "cat", owner="plugin-b")
        pids = [await t.pid() for t in terms]
        waiter_result: list[str] = []

        async def wait_on_disposed() -> None:
            with pytest.raises(CoreError) as info:
                await terms[1].call("terminal.waitEvents", timeoutMilliseconds=60000)
            waiter_result.append(info.value.code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_on_disposed)
            await trio.testing.wait_all_tasks_blocked()
            assert await service.dispose_owner("plugin-a") == MAX_HANDLES_PER_OWNER
        assert waiter_result == ["not_found"]
        assert all(runs_no_more(pid) for pid in pids)
        assert service.terminal_ids() == (other.id,)
        assert await service.dispose_owner("plugin-a") == 0


async def test_reopen_busy_precondition_and_old_generation_events() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(core, "cat")
        await _refused(
            "plugin.host.preconditionFailed", core, "terminal.reopen", {"terminalID": term.id}
        )
        await term.type("gen-one\n")
        await term.until("gen-one")
        await term.type("still-gen-one\n")  # queued, never drained before the reopen

        results: list[str] = []

        async def close() -> None:
            try:
                await term.call("terminal.close")
                results.append("closed")
            except CoreError as exc:
                results.append(exc.code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close)
            nursery.start_soon(close)
        # Issue 24, the order rule: the second close waits for the first (both end a
        # terminal: nothing is skipped), then finds it closed.
        assert results == ["closed", "closed"]
        # Closing a closed terminal reports what is retained; a smaller budget trims it.
        assert _dict(await term.call("terminal.close", retainedContextBytes=4)) == {
            "retainedContextBytes": 4
        }
        reopened = _dict(await term.call("terminal.reopen"))
        assert reopened["generation"] == 2
        assert reopened["restoredContextBytes"] == 4
        await term.poll()
        generations = [int(str(e["generation"])) for e in term.outputs]
        assert 2 in generations
        assert generations == sorted(generations)
        assert "still-gen-one" not in "".join(
            str(e["data"]) for e in term.outputs if e["generation"] == 2
        )
        await term.call("terminal.dispose")


async def test_dispose_and_reopen_during_a_close_wait_for_it_in_order(tmp_path: Path) -> None:
    """Issue 24, the order rule: what arrives while a close runs takes effect after it, in
    arrival order (it was refused ``busy`` before): the dispose waits for the close (an
    ending command waits for an ending command ahead of it), then the reopen and the close
    find no terminal."""
    async with terminal_core() as (core, _):
        # It ignores SIGHUP and SIGTERM: its close lasts at least hangup + TERM grace.
        term = await Term.create(core, PY, str(PEERS / "term_stubborn.py"), str(tmp_path / "p"))
        await term.until("READY")
        results: list[str] = []

        async def attempt(command: str) -> None:
            try:
                await term.call(command)
                results.append(command)
            except CoreError as exc:
                results.append(exc.code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(attempt, "terminal.close")
            await trio.sleep(0.2)
            await attempt("terminal.dispose")
            await attempt("terminal.reopen")
            await attempt("terminal.close")
            await _refused(
                "not_found", core, "terminal.write", {"terminalID": term.id, "data": "x"}
            )
        assert results == ["terminal.close", "terminal.dispose", "not_found", "not_found"]


async def test_on_exit_once_per_generation_late_subscribe_and_across_reopen() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, "-c", "import sys; sys.exit(7)")
        await _wait_closed(core)
        # The exit is among the events without a subscription (issue 28); subscribing after
        # it adds no second event for that generation.
        subscription = _dict(await term.call("terminal.onExit"))["subscriptionID"]
        first = await term.next_exit()
        assert (first["exitCode"], first["reason"], first["generation"]) == (7, "exited", 1)
        assert "subscriptionID" not in first
        await _refused(
            "plugin.host.preconditionFailed", core, "terminal.onExit", {"terminalID": term.id}
        )
        await term.pump(300)
        assert term.exits == []
        # The subscription continues across reopen: one outcome for generation 2.
        await term.call("terminal.reopen")
        second = await term.next_exit()
        assert (second["generation"], second["exitCode"]) == (2, 7)
        await term.pump(300)
        assert term.exits == []
        # Disposing the subscription stops notifications and keeps the terminal.
        assert second["subscriptionID"] == subscription
        await core.call("terminal.disposeSubscription", {"subscriptionID": subscription})
        await _refused(
            "not_found", core, "terminal.disposeSubscription", {"subscriptionID": subscription}
        )
        # Without the subscription the exit is still queued, without its id.
        await term.call("terminal.reopen")
        third = await term.next_exit()
        assert third["generation"] == 3
        assert "subscriptionID" not in third
        await term.poll()
        assert term.exits == []
        await term.call("terminal.dispose")
        await _refused("not_found", core, "terminal.pollEvents", {"terminalID": term.id})


async def test_closing_the_core_ends_every_terminal(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    async with terminal_core() as (core, _):
        bash = await Term.create(core, "bash", *BASH, environment={"PS1": "$ "})
        stubborn = await Term.create(core, PY, str(PEERS / "term_stubborn.py"), str(pid_file))
        await stubborn.until("READY")
        await bash.type("sleep 300 & echo bg=$!\n")
        await bash.until("bg=")
        pids = [await bash.pid(), *(int(p) for p in pid_file.read_text().split())]
    assert all(runs_no_more(pid) for pid in pids)


# -- gaps closed after the first review (cancellation, memory, events, cwd) -------------------


def _marked_descendants() -> list[int]:
    """Live (non-zombie) descendants of this process that carry the scope marker."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and "SUPERVISOR_SCOPE" in proc.environ():
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _listed(result: JSONValue) -> list[JSONObject]:
    assert isinstance(result, list)
    return [_dict(item) for item in result]


async def _cancelled_call(core: Core, command: str, payload: JSONObject, *, mid: bool) -> bool:
    """Run ``command`` and cancel it before its first step (``mid=False``) or during the spawn.

    ``mid=True`` cancels while the spawn runs in a worker thread: the command then waits for
    that thread, which starts the PTY's program (the only place a create/reopen blocks). The
    spawn runs in a worker thread when many trees start at once (``_tree._THREADED_SPAWN_AT``);
    otherwise it is ``posix_spawn`` in the Trio thread, which nothing can interrupt, so the
    threshold is lowered to 0 for the call. The thread is held before it spawns until the
    cancel was made (waiting for every task to block raced a thread that spawned first).
    Returns True when the call was cancelled, False when it completed first.
    """
    done: list[bool] = []
    in_thread = trio.Event()
    cancelled = threading.Event()
    spawn_registered = supervisor._process._tree._spawn_registered

    def held_spawn(spawn_call: Callable[[], Any]) -> Any:
        trio.from_thread.run_sync(in_thread.set)
        cancelled.wait(WAIT_S)
        return spawn_registered(spawn_call)

    async def run(scope: trio.CancelScope) -> None:
        with scope:
            await core.call(command, payload)
            done.append(True)

    scope = trio.CancelScope()
    with pytest.MonkeyPatch.context() as patch:
        if mid:
            patch.setattr(supervisor._process._tree, "_THREADED_SPAWN_AT", 0)
            patch.setattr(supervisor._process._tree, "_spawn_registered", held_spawn)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, scope)
            if mid:
                with trio.fail_after(WAIT_S):
                    await in_thread.wait()
            scope.cancel()
            cancelled.set()
    return not done


async def test_cancelled_create_starts_nothing_or_closes_and_forgets_it() -> None:
    """Issue 5 gap 1: cancelling a create before or during its launch leaves nothing."""
    async with terminal_core() as (core, service):
        assert await _cancelled_call(core, "terminal.create", {"executable": "cat"}, mid=False)
        assert service.terminal_ids() == ()
        assert _marked_descendants() == []
        # During the spawn: the program started, the cancel closes it and forgets the handle
        # (its caller never learned the id).
        assert await _cancelled_call(core, "terminal.create", {"executable": "cat"}, mid=True)
        assert service.terminal_ids() == ()
        assert _marked_descendants() == []
        # The owner's handle count was released: 8 creates still work.
        terms = [await Term.create(core, "cat") for _ in range(MAX_HANDLES_PER_OWNER)]
        for term in terms:
            await term.call("terminal.dispose")


async def test_cancelled_reopen_keeps_a_consistent_closed_handle() -> None:
    """Issue 5 gap 1: a cancelled reopen leaves the handle closed, reopenable, nothing alive."""
    async with terminal_core() as (core, _):
        term = await Term.create(core, "cat")
        subscription = _dict(await term.call("terminal.onExit"))["subscriptionID"]
        await term.type("kept-line\n")
        await term.until("kept-line")
        retained = _dict(await term.call("terminal.close"))["retainedContextBytes"]
        assert isinstance(retained, int)
        assert retained > 0
        assert (await term.next_exit())["generation"] == 1
        payload: JSONObject = {"terminalID": term.id}

        # Before the launch: nothing starts, the generation and the retained text stay.
        assert await _cancelled_call(core, "terminal.reopen", payload, mid=False)
        (listed,) = _listed(await core.call("terminal.list", {}))
        assert (listed["state"], listed["generation"]) == ("closed", 1)
        assert _marked_descendants() == []
        await term.poll()
        assert all(e["generation"] == 1 for e in term.outputs)

        # During the spawn: generation 2 started and is closed again at once, with its own
        # outcome, and the handle keeps its retained text.
        assert await _cancelled_call(core, "terminal.reopen", payload, mid=True)
        (listed,) = _listed(await core.call("terminal.list", {}))
        assert (listed["state"], listed["generation"]) == ("closed", 2)
        assert "pid" not in listed
        assert _marked_descendants() == []
        outcome = await term.next_exit()
        assert (outcome["generation"], outcome["reason"], outcome["subscriptionID"]) == (
            2,
            "closed",
            subscription,
        )

        # Still consistent: a reopen works and restores the text kept before.
        reopened = _dict(await term.call("terminal.reopen"))
        assert reopened["generation"] == 3
        assert isinstance(reopened["restoredContextBytes"], int)
        with trio.fail_after(WAIT_S):
            while not any(e["generation"] == 3 for e in term.outputs):
                await term.pump()
        restored = str(next(e for e in term.outputs if e["generation"] == 3)["data"])
        assert "kept-line" in restored
        # Shown, never typed: cat would echo and repeat a line written to its stdin.
        await term.type("probe\n")
        await term.until("probe\r\nprobe")
        generation_3 = "".join(str(e["data"]) for e in term.outputs if e["generation"] == 3)
        assert generation_3.count("kept-line") == restored.count("kept-line")
        await term.call("terminal.dispose")


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


FLOOD_MB = 200
#: Generous: the queue (256 events of at most 16 KiB) and the renderer's pending text are a
#: few MiB; the rest is allocator slack on a busy machine.
RSS_GROWTH_BOUND_KIB = 48 * 1024


async def test_memory_stays_bounded_while_a_program_floods_200_mb() -> None:
    """Issue 5 gap 2: the supervisor's RSS while nobody drains a 200 MB flood."""
    script = (
        "import os, sys\n"
        "block = ('flood line é€ ' * 7 + '\\n').encode() * 512\n"
        f"for _ in range({FLOOD_MB} * 1_000_000 // len(block)):\n"
        "    os.write(1, block)\n"
        "os.write(1, b'FLOOD-DONE\\n')\n"
    )
    async with terminal_core() as (core, service):
        warm = await Term.create(core, PY, "-c", "print('warm')")
        await warm.until("warm")
        # Disposing while its natural-exit cleanup runs would be refused (busy).
        await _wait_closed(core)
        await warm.call("terminal.dispose")
        term = await Term.create(core, PY, "-c", script)
        await term.call("terminal.onExit")
        baseline = peak = _rss_kib()
        with trio.fail_after(120):
            while term.id in service.terminal_ids():
                listed = _listed(await core.call("terminal.list", {}))
                if listed[0]["state"] == "closed":
                    break
                peak = max(peak, _rss_kib())
                await trio.sleep(0.05)
        peak = max(peak, _rss_kib())
        await term.poll()
        # The whole flood went through (the exit outcome is never evicted by output, and the
        # newest output is still queued), and nothing was kept unbounded meanwhile.
        assert term.gap
        assert len(term.outputs) <= MAX_TERMINAL_EVENTS
        assert "FLOOD-DONE" in term.text
        assert [e["exitCode"] for e in term.exits] == [0]
        assert peak - baseline <= RSS_GROWTH_BOUND_KIB, (baseline, peak)
        await term.call("terminal.dispose")


async def test_exit_outcome_is_not_evicted_by_a_flood_after_reopen() -> None:
    """Issue 5 gap 3: output can not push an ``exit`` outcome out of the queue."""
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, str(PEERS / "term_flood.py"))
        await term.call("terminal.onExit")
        await term.until("flood line")
        await term.call("terminal.close", retainedContextBytes=0)
        # Not drained: generation 1's outcome waits in the queue while generation 2 floods.
        await term.call("terminal.reopen")
        await trio.sleep(1.5)
        batch = _dict(await term.call("terminal.pollEvents"))
        events = [_dict(e) for e in batch["events"]]  # type: ignore[union-attr]
        assert batch["gap"] is False
        exits = [e for e in events if e["event"] == "exit"]
        assert [(e["generation"], e["reason"]) for e in exits] == [(1, "closed")]
        outputs = [e for e in events if e["event"] == "output"]
        # The reader of generation 2 was paused at the high watermark (its consumer took
        # nothing): bounded, and nothing dropped.
        assert 0 < _json_bytes(outputs) <= DEFAULT_HIGH_WATERMARK_BYTES + 2 * READ_CHUNK_BYTES
        assert all(e["generation"] == 2 for e in outputs)
        seqs = [int(str(e["seq"])) for e in events]
        assert seqs == sorted(seqs)
        assert seqs[0] == exits[0]["seq"]  # queued first, still first
        await term.call("terminal.dispose")


async def test_seq_is_monotonic_per_handle_across_generations() -> None:
    """Issue 5 gap 4: events keep their seq across a reopen; seq never goes back."""
    async with terminal_core() as (core, _):
        term = await Term.create(core, "cat")
        await term.call("terminal.onExit")
        await term.type("one\n")
        await term.until("one")
        last_seq = max(int(str(e["seq"])) for e in term.outputs)
        await term.type("two\n")
        await trio.sleep(0.3)  # its echo is queued, not drained, when the close comes
        await term.call("terminal.close")
        await term.call("terminal.reopen")
        await term.type("three\n")
        await term.until("three")
        events = term.outputs + term.exits
        gen2 = [e for e in term.outputs if e["generation"] == 2]
        (outcome,) = term.exits
        # The output of generation 1 queued at reopen ("two") was dropped, not renumbered:
        # the outcome keeps the seq it got at close, after the dropped events' numbers.
        assert "two" not in "".join(str(e["data"]) for e in gen2[1:])
        assert int(str(outcome["seq"])) > last_seq + 1
        assert all(int(str(e["seq"])) > int(str(outcome["seq"])) for e in gen2)
        seqs = [int(str(e["seq"])) for e in events]
        assert len(set(seqs)) == len(seqs)
        assert sorted(int(str(e["seq"])) for e in gen2) == [int(str(e["seq"])) for e in gen2]
        await term.call("terminal.dispose")


async def test_cwd_is_an_absolute_path(tmp_path: Path) -> None:
    """Issue 5 gap 5: ``cwd`` is an absolute path; relative and {rootID, path} are refused."""
    async with terminal_core() as (core, _):
        term = await Term.create(core, "sh", "-c", "pwd; sleep 60", cwd=str(tmp_path))
        await term.until(str(tmp_path))
        await term.call("terminal.dispose")
        cwds: list[JSONValue] = ["relative/dir", ".", {"rootID": "r1", "path": "src"}]
        for cwd in cwds:
            error = await _refused(
                "invalid_request", core, "terminal.create", {"executable": "sh", "cwd": cwd}
            )
            assert error.details == {"field": "cwd"}
            # A {rootID, path} resource is refused by the declaration (cwd is a string).
            expected = "absolute path" if isinstance(cwd, str) else "must be a string"
            assert expected in error.message
        assert await core.call("terminal.list", {}) == []


async def test_screen_shows_what_another_client_read_and_seq_joins_it_to_the_live_output() -> None:
    """Issue 30: a client that attaches to a running terminal takes ``terminal.screen`` -- the
    displayed text, including output an earlier client already drained -- and continues with
    the output events after its ``seq``: nothing the screen shows comes again, nothing after
    it is missing."""
    async with terminal_core() as (core, _):
        first = await Term.create(core, "bash", *BASH, environment={"PS1": "$ "})
        await first.type("echo one-$((0+1))\n")
        await first.until("one-1")  # the first client drained it
        await first.type("echo two-$((1+1))\n")
        # The second client: nothing drained yet; the screen shows both answers.
        with trio.fail_after(WAIT_S):
            while True:
                screen = _dict(await first.call("terminal.screen"))
                if "two-2" in str(screen["text"]):
                    break
                await trio.sleep(0.05)
        assert "one-1" in str(screen["text"])
        assert (screen["rows"], screen["cols"], screen["generation"]) == (24, 80, 1)
        seq = screen["seq"]
        assert isinstance(seq, int)
        await first.type("echo three-$((2+1))\n")
        second = Term(core, first.id)
        with trio.fail_after(WAIT_S):
            after = ""
            while "three-3" not in after:
                await second.pump()
                after = "".join(
                    str(e["data"])
                    for e in second.outputs
                    if isinstance(e["seq"], int) and e["seq"] > seq
                )
        # What the screen showed is not in the events after its seq, only what came later.
        assert "two-2" not in after
        assert "one-1" not in after
        shown_again = [e for e in second.outputs if isinstance(e["seq"], int) and e["seq"] <= seq]
        assert all("three-3" not in str(e["data"]) for e in shown_again)
        await first.type("exit\n")
        await _wait_closed(core)
        closed = _dict(await first.call("terminal.screen"))
        assert "three-3" in str(closed["text"])
        # Closed, its screen includes the last output event, not the exit after it: a client
        # that skips what the screen includes still takes the exit.
        exit_event = await second.next_exit()
        assert closed["seq"] == max(_seq(e) for e in second.outputs)
        assert _seq(exit_event) > _seq(closed)


async def test_two_clients_draining_one_terminal_share_its_events_each_once() -> None:
    """Issue 30, the documented rule for two clients of one session: its event queue is one,
    and a drain takes what it returns, so each event goes to exactly one of the clients that
    wait on it -- none to both, none lost, each client's in order -- and the screen
    (``terminal.screen``) is how a client gets what the other one took."""
    script = "for i in $(seq 1 40); do echo line-$i; sleep 0.01; done"
    async with terminal_core() as (core, _):
        first = await Term.create(core, "sh", "-c", script)
        second = Term(core, first.id)

        async def drain(term: Term) -> None:
            with trio.fail_after(WAIT_S):
                while not (first.exits or second.exits):
                    await term.pump(200)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, first)
            nursery.start_soon(drain, second)
        await first.poll()
        taken = [[_seq(e) for e in term.outputs + term.exits] for term in (first, second)]
        for seqs in taken:
            assert seqs == sorted(seqs)
        assert not set(taken[0]) & set(taken[1])
        merged = sorted((e for term in (first, second) for e in term.outputs), key=_seq)
        text = "".join(str(e["data"]) for e in merged).replace("\r\n", "\n")
        assert text == "".join(f"line-{i}\n" for i in range(1, 41))
        assert not first.gap
        assert not second.gap
        await _wait_closed(core)
        screen = _dict(await first.call("terminal.screen"))
        lines = [line.strip() for line in str(screen["text"]).splitlines()]
        assert {"line-1", "line-40"} <= set(lines)


def _seq(event: JSONObject) -> int:
    seq = event["seq"]
    assert isinstance(seq, int)
    return seq


async def test_a_closed_terminal_that_retains_nothing_shows_no_event() -> None:
    """A closed terminal with ``retainedContextBytes: 0`` keeps no text: its screen includes
    no output event (``seq`` null), so a client that attaches takes the output still queued
    rather than skipping it."""
    async with terminal_core() as (core, _):
        term = await Term.create(core, "sh", "-c", "echo gone-$((2+3))", retainedContextBytes=0)
        await _wait_closed(core)
        screen = _dict(await term.call("terminal.screen"))
        assert (screen["text"], screen["seq"]) == ("", None)
        await term.until("gone-5")


async def test_a_reopened_terminals_screen_includes_the_restored_text_event() -> None:
    """After ``terminal.reopen`` the retained text is both on the screen and an ``output``
    event of the new generation; the screen's ``seq`` includes that event, so a client that
    attaches draws the restored text once and continues with the new program's output."""
    async with terminal_core() as (core, _):
        term = await Term.create(core, "sh", "-c", "read x; echo got-$x-$((1+1))")
        await term.type("a\n")
        await term.until("got-a-2")
        await term.next_exit()
        await _wait_closed(core)
        reopened = _dict(await term.call("terminal.reopen"))
        assert reopened["generation"] == 2
        screen = _dict(await term.call("terminal.screen"))
        assert "got-a-2" in str(screen["text"])
        await term.type("b\n")
        with trio.fail_after(WAIT_S):
            while "got-b-2" not in term.text:
                await term.pump()
        restored = [e for e in term.outputs if e["generation"] == 2 and "got-a-2" in str(e["data"])]
        assert [_seq(e) for e in restored] == [screen["seq"]]
        after = "".join(str(e["data"]) for e in term.outputs if _seq(e) > _seq(screen))
        assert "got-b-2" in after
        assert "got-a-2" not in after
