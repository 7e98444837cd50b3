"""Issue 5: PTY terminals against real programs (bash, curses, stubborn, flooding).

Every test drives a Core through its commands (the envelope's path) with real PTYs; the
suite's leak guard proves that nothing a terminal started survives its close, dispose, owner
or Core.
"""

from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from protocol import CoreError
from supervisor._core import open_core
from supervisor._terminal import EndBounds
from supervisor._terminal_service import (
    MAX_HANDLES_PER_OWNER,
    MAX_TERMINAL_EVENTS,
    TerminalService,
    open_terminal_service,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor._core import Core
    from supervisor._service import ServiceContext

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux PTYs")

PY = sys.executable
PEERS = Path(__file__).resolve().parent.parent / "peers"
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


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :].startswith((b"Z", b"X"))


def _dict(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict), value
    return value


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
            "reason": "exited",
            "subscriptionID": subscription,
        }
        assert _gone(pid)
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
        assert (await term.next_exit() if term.exits else None) is None
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
        assert _gone(main_pid)
        assert _gone(child_pid)
        outcome = await term.next_exit()
        assert (outcome["reason"], outcome["exitCode"], outcome["generation"]) == (
            "closed",
            None,
            1,
        )
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
        assert all(_gone(pid) for pid in [shell, *pids])
        await term.call("terminal.dispose")


async def test_flooding_program_memory_bounded_close_not_blocked() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, str(PEERS / "term_flood.py"))
        await term.until("flood line")
        pid = await term.pid()
        # Nobody drains for a while: the queue stays bounded and reports the gap.
        await trio.sleep(2)
        events = await term.poll()
        assert len(events) <= MAX_TERMINAL_EVENTS
        assert term.gap
        assert "\ufffd" not in term.text  # characters never split across events
        assert all(len(str(e["data"])) <= 16384 for e in term.outputs)
        with trio.fail_after(WAIT_S):
            closed = _dict(await term.call("terminal.close"))
        assert _gone(pid)
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
        assert all(_gone(pid) for pid in pids)
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
        assert sorted(results) == ["busy", "closed"]
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


async def test_dispose_and_reopen_during_a_close_are_busy(tmp_path: Path) -> None:
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
                "plugin.host.preconditionFailed",
                core,
                "terminal.write",
                {"terminalID": term.id, "data": "x"},
            )
        assert results == ["busy", "busy", "busy", "terminal.close"]
        await term.call("terminal.dispose")


async def test_on_exit_once_per_generation_late_subscribe_and_across_reopen() -> None:
    async with terminal_core() as (core, _):
        term = await Term.create(core, PY, "-c", "import sys; sys.exit(7)")
        await _wait_closed(core)
        # Subscribing after the exit delivers the recorded outcome once.
        subscription = _dict(await term.call("terminal.onExit"))["subscriptionID"]
        first = await term.next_exit()
        assert (first["exitCode"], first["reason"], first["generation"]) == (7, "exited", 1)
        assert first["subscriptionID"] == subscription
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
        await core.call("terminal.disposeSubscription", {"subscriptionID": subscription})
        await _refused(
            "not_found", core, "terminal.disposeSubscription", {"subscriptionID": subscription}
        )
        await term.call("terminal.reopen")
        await _wait_closed(core)
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
    assert all(_gone(pid) for pid in pids)
