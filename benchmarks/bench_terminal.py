"""PTY terminals (issue 5): keystroke echo latency and output throughput through the
supervisor's ``terminal.*`` commands, against ptyprocess and a raw ``os.read`` loop on a
plain PTY, in the same run.

- Echo latency: a terminal runs ``cat``; one keystroke goes in with ``terminal.write`` and
  the time to the first ``output`` event that holds its echo is measured (ours: through a
  Core's command dispatch, ``terminal.waitEvents`` already waiting). The peers write the
  byte to the PTY master and block in ``read`` until the echo arrives.
- Throughput: a program writes ``MIB`` MiB of 80-byte lines to its terminal; the time from
  the start to the end of the output (ours: the ``exit`` outcome, every event drained) is
  measured. Ours does more per byte than the peers: incremental UTF-8 decoding, the event
  queue, and the bounded retained-context renderer.

Figures are medians in milliseconds; a ratio above 1 means ours is slower. The goals (at
most 10x for an echo, 5x for throughput) are ours; the issue asks for the measurement, not a bound.
Run ``python -m benchmarks bench_terminal`` to print the table.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import ptyprocess  # type: ignore[import-untyped]
import trio
import trio.testing

from supervisor._core import open_core
from supervisor._terminal_service import open_terminal_service

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject
    from supervisor._core import Core

MIB = 8
WRITER = (
    "import os\n"
    f"line = b'x' * 79 + b'\\n'\nblock = line * 1024\n"
    f"for _ in range({MIB} * 1024 * 1024 // len(block)):\n"
    "    os.write(1, block)\n"
)
#: Ours runs an event loop and a command dispatch per keystroke; the peers block in read().
GOALS = {"echo": 10.0, "tp": 5.0}
WARMUP = 3


@asynccontextmanager
async def _core() -> AsyncIterator[Core]:
    async with open_core(services=[open_terminal_service]) as core:
        yield core


def _obj(value: Any) -> JSONObject:
    assert isinstance(value, dict)
    return value


async def _ours_echo_ms(core: Core, terminal_id: str, key: str) -> float:
    result: list[float] = []

    async def wait_echo(started: list[float]) -> None:
        while True:
            batch = _obj(
                await core.call(
                    "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
                )
            )
            if any(key in str(e.get("data", "")) for e in batch["events"]):  # type: ignore[union-attr]
                result.append((time.perf_counter() - started[0]) * 1000)
                return

    started = [0.0]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_echo, started)
        await trio.testing.wait_all_tasks_blocked()
        started[0] = time.perf_counter()
        await core.call("terminal.write", {"terminalID": terminal_id, "data": key})
    return result[0]


def _raw_echo_ms(master: int, key: bytes) -> float:
    started = time.perf_counter()
    os.write(master, key)
    data = b""
    while key not in data:
        data += os.read(master, 4096)
    return (time.perf_counter() - started) * 1000


def _ptyprocess_echo_ms(proc: Any, key: bytes) -> float:
    started = time.perf_counter()
    proc.write(key)
    data = b""
    while key not in data:
        data += proc.read(4096)
    return (time.perf_counter() - started) * 1000


async def _ours_throughput_ms(core: Core) -> float:
    started = time.perf_counter()
    created = _obj(
        await core.call(
            "terminal.create", {"executable": sys.executable, "arguments": ["-c", WRITER]}
        )
    )
    terminal_id = created["terminalID"]
    await core.call("terminal.onExit", {"terminalID": terminal_id})
    done = False
    while not done:
        batch = _obj(
            await core.call(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
            )
        )
        done = any(e["event"] == "exit" for e in batch["events"])  # type: ignore[union-attr,index,call-overload]
    elapsed = (time.perf_counter() - started) * 1000
    await core.call("terminal.dispose", {"terminalID": terminal_id})
    return elapsed


def _raw_throughput_ms() -> float:
    started = time.perf_counter()
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    try:
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the slave side is closed
                break
    finally:
        os.close(master)
        proc.wait()
    return (time.perf_counter() - started) * 1000


def _ptyprocess_throughput_ms() -> float:
    started = time.perf_counter()
    proc = ptyprocess.PtyProcess.spawn([sys.executable, "-c", WRITER])
    try:
        while True:
            try:
                proc.read(65536)
            except EOFError:
                break
    finally:
        proc.close(force=True)
    return (time.perf_counter() - started) * 1000


def _spawn_raw_cat() -> tuple[int, subprocess.Popen[bytes]]:
    master, slave = os.openpty()
    proc = subprocess.Popen(
        ["cat"], stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    return master, proc


async def _measure(rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        name: [] for name in ("echo-ours", "echo-raw", "echo-ptyprocess")
    }
    samples.update({name: [] for name in ("tp-ours", "tp-raw", "tp-ptyprocess")})
    async with _core() as core:
        created = _obj(await core.call("terminal.create", {"executable": "cat"}))
        terminal_id = str(created["terminalID"])
        master, raw = _spawn_raw_cat()
        peer = ptyprocess.PtyProcess.spawn(["cat"])
        try:
            for i in range(WARMUP + rounds):
                key = chr(ord("a") + i % 26)
                ours = await _ours_echo_ms(core, terminal_id, key)
                raw_ms = _raw_echo_ms(master, key.encode())
                pp = _ptyprocess_echo_ms(peer, key.encode())
                if i >= WARMUP:
                    samples["echo-ours"].append(ours)
                    samples["echo-raw"].append(raw_ms)
                    samples["echo-ptyprocess"].append(pp)
        finally:
            peer.close(force=True)
            raw.kill()
            raw.wait()
            os.close(master)
            await core.call("terminal.dispose", {"terminalID": terminal_id})
        for i in range(max(3, rounds // 20)):
            ours = await _ours_throughput_ms(core)
            samples["tp-ours"].append(ours)
            samples["tp-raw"].append(_raw_throughput_ms())
            samples["tp-ptyprocess"].append(_ptyprocess_throughput_ms())
            del i
    return samples


def _paired_ratio(ours: list[float], peer: list[float]) -> float:
    return statistics.median(o / p for o, p in zip(ours, peer, strict=True))


def measure(*, rounds: int = 100) -> list[dict[str, object]]:
    """Measure echo latency and throughput, interleaved; return one row per figure and peer.

    Args:
        rounds: Timed echo rounds (after a warm-up of 3); throughput runs ``rounds // 20``
            times (at least 3).

    Returns:
        Rows ``{figure, ours, peer, unit, peer_name, ratio, goal, met}``; times in
        milliseconds, ``ratio`` above 1 means ours is slower.
    """
    samples = trio.run(_measure, rounds)
    rows: list[dict[str, object]] = []
    for kind, figure in (
        ("echo", "terminal.write -> first output echo (time)"),
        ("tp", f"terminal output of {MIB} MiB, start to end (time)"),
    ):
        for peer, name in (("raw", "os.read loop"), ("ptyprocess", "ptyprocess")):
            ratio = _paired_ratio(samples[f"{kind}-ours"], samples[f"{kind}-{peer}"])
            rows.append(
                {
                    "figure": figure,
                    "ours": round(statistics.median(samples[f"{kind}-ours"]), 3),
                    "peer": round(statistics.median(samples[f"{kind}-{peer}"]), 3),
                    "unit": "ms",
                    "peer_name": name,
                    "ratio": round(ratio, 3),
                    "goal": f"<= {GOALS[kind]}x",
                    "met": ratio <= GOALS[kind],
                }
            )
    return rows


if __name__ == "__main__":
    for row in measure():
        print(row)
