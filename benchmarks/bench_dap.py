"""Teardown of a debugpy session, ours vs a direct DAP client (goal 6 of the README's table).

Each round starts ``python -m debugpy.adapter`` over stdio, launches a script that stops at a
breakpoint, then times "disconnect until the adapter, the debugpy launcher and the debuggee
are all gone":

- *direct*: a bare Trio DAP client (our sans-I/O :class:`protocol._dap.DAPConnection` for the
  framing, nothing else) sends ``disconnect {terminateDebuggee: true}``, waits for the answer,
  closes the adapter's stdin (debugpy's adapter exits only on stdin EOF), waits for its exit
  and then for the launcher and the debuggee to be gone;
- *ours*: ``debug.disconnect`` through the Core (which does the same, then ends the adapter's
  tree and sweeps by marker), until the same processes are gone.

Both run in the same process and the same run, interleaved (the order alternates per round),
after one warm-up each; the figure is the median of the per-round times in milliseconds and
the goal the median of the paired ratios (ours / direct <= 1.2).

Run ``python -m benchmarks.bench_dap`` to print the row.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

import psutil
import trio

from benchmarks._common import paired_row
from protocol import NEED_DATA
from protocol._dap import DAPConnection, DAPEvent, DAPResponse
from supervisor._core._core import open_core

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue
    from supervisor._core._core import Core

GOAL = 1.2
#: At most this many timed rounds (each starts two real debugpy sessions, ~1 s each).
MAX_ROUNDS = 10
_SCRIPT = "x = 1\ny = x + 1\nprint(y)\n"
_ADAPTER = [sys.executable, "-m", "debugpy.adapter"]
_ARGUMENTS: list[JSONValue] = ["-m", "debugpy.adapter"]
_WAIT_S = 60.0
_POLL_S = 0.002


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


async def _wait_gone(pids: list[int]) -> None:
    # Polled: there is no portable "process ended" notification for a non-child.
    with trio.fail_after(_WAIT_S):
        while not all(_gone(pid) for pid in pids):  # noqa: ASYNC110
            await trio.sleep(_POLL_S)


def _descendants(pid: int) -> list[int]:
    return [child.pid for child in psutil.Process(pid).children(recursive=True)]


class _DirectClient:
    """A bare DAP client over an adapter's stdio (the peer of the benchmark)."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.conn = DAPConnection()

    async def send(self, command: str, arguments: JSONValue = None) -> int:
        seq, frame = self.conn.request(command, arguments)
        await self.stdin.send_all(frame)
        return seq

    async def until(self, *, response_to: int | None = None, event: str | None = None) -> None:
        while True:
            message = self.conn.next_event()
            if message is NEED_DATA:
                data = await self.stdout.receive_some(65536)
                if not data:
                    raise RuntimeError("the adapter closed its stdout")
                self.conn.receive_data(data)
                continue
            if isinstance(message, DAPResponse) and message.request_seq == response_to:
                return
            if isinstance(message, DAPEvent) and message.event == event:
                return


async def _direct_round(path: str) -> float:
    process = await trio.lowlevel.open_process(
        _ADAPTER,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        client = _DirectClient(process)
        seq = await client.send("initialize", {"adapterID": "debugpy", "pathFormat": "path"})
        await client.until(response_to=seq)
        await client.send("launch", {"program": path, "console": "internalConsole"})
        await client.until(event="initialized")
        breakpoints: JSONObject = {"source": {"path": path}, "breakpoints": [{"line": 2}]}
        await client.send("setBreakpoints", breakpoints)
        await client.send("configurationDone")
        await client.until(event="stopped")
        others = _descendants(process.pid)
        started = time.perf_counter()
        seq = await client.send("disconnect", {"restart": False, "terminateDebuggee": True})
        await client.until(response_to=seq)
        await client.stdin.aclose()
        await process.wait()
        await _wait_gone(others)
        return (time.perf_counter() - started) * 1000
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _our_round(core: Core, path: str) -> float:
    created = await core.call(
        "debug.createSession",
        {
            "adapterId": "debugpy",
            "rootPath": os.path.dirname(path),
            "adapter": {"executable": _ADAPTER[0], "arguments": _ARGUMENTS},
        },
    )
    assert isinstance(created, dict)
    adapter_pid = created["adapterPid"]
    assert isinstance(adapter_pid, int)
    sid: JSONObject = {"sessionId": created["sessionId"]}
    await core.call("debug.setBreakpoints", {**sid, "path": path, "breakpoints": [{"line": 2}]})
    await core.call(
        "debug.launch", {**sid, "configuration": {"program": path, "console": "internalConsole"}}
    )
    with trio.fail_after(_WAIT_S):
        while True:
            batch = await core.call("debug.waitEvents", {**sid, "timeoutMilliseconds": 10_000})
            assert isinstance(batch, dict)
            events = batch["events"]
            assert isinstance(events, list)
            if any(isinstance(e, dict) and e["event"] == "stopped" for e in events):
                break
    pids = [adapter_pid, *_descendants(adapter_pid)]
    started = time.perf_counter()
    await core.call("debug.disconnect", sid)
    await _wait_gone(pids)
    elapsed = (time.perf_counter() - started) * 1000
    await core.call("debug.destroySession", sid)
    return elapsed


async def _measure(rounds: int, path: str) -> tuple[list[float], list[float]]:
    # The direct rounds run inside the Core too: it is a child subreaper, so its reaper
    # collects the direct launcher and debuggee once the adapter is gone.
    async with open_core() as core:
        await _direct_round(path)  # warm-up: imports, pyc files
        await _our_round(core, path)
        ours: list[float] = []
        direct: list[float] = []
        for index in range(rounds):
            if index % 2:
                ours.append(await _our_round(core, path))
                direct.append(await _direct_round(path))
            else:
                direct.append(await _direct_round(path))
                ours.append(await _our_round(core, path))
        return ours, direct


def measure(*, rounds: int = 5) -> list[dict[str, object]]:
    """Measure debugpy teardown through ``debug.disconnect`` against a direct client.

    Args:
        rounds: Timed round pairs after one warm-up, at most :data:`MAX_ROUNDS` (each
            starts two real debugpy sessions).

    Returns:
        One row (see :mod:`benchmarks._common`) in milliseconds; the goal is the median
        paired ratio ours / direct <= 1.2.
    """
    rounds = max(1, min(rounds, MAX_ROUNDS))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "target.py")
        with open(path, "w") as f:
            f.write(_SCRIPT)
        ours, direct = trio.run(_measure, rounds, path)
    return [
        paired_row(
            "debugpy teardown: disconnect until adapter, launcher, debuggee gone",
            ours,
            direct,
            unit="ms",
            peer_name="direct DAP client (disconnect, stdin EOF)",
            at_most=GOAL,
        )
    ]


if __name__ == "__main__":
    for result in measure():
        print(result)
