"""PTY terminals (issue 5; issue 8 goal 7): keystroke echo and read throughput through the
supervisor's ``terminal.*`` commands, against the peers the goal names, in the same run.

Goal 7 of issue 8: keystroke echo at most 1.2x a ptyprocess loop; read throughput at least
0.9x a raw ``os.read`` loop on the same PTY.

- Keystroke echo (write to first output). Ours: one key goes in with ``terminal.write``
  (a Core command) while a ``terminal.waitEvents`` call already waits; the time until that
  call returns the echo. The peer: ``ptyprocess`` writes the key and blocks in ``read``.
  Measured twice, on the same kind of program for both sides:

  * *program echo*: ``stty raw -echo; exec cat``, the way a shell's line editor echoes
    each key itself (what a user of a terminal sees);
  * *line-discipline echo*: plain ``cat`` in cooked mode, where the kernel echoes the key
    without any program running: the smallest possible round trip, so it shows the
    supervisor's own per-keystroke cost most harshly.

  Rounds interleave ours and the peer; the ratio is the median of per-round ratios.
- Read throughput. A program writes ``MIB`` MiB of 80-byte lines to its terminal. Ours: from
  ``terminal.create`` until every byte arrived as ``output`` events drained with
  ``terminal.waitEvents`` (decoded, queued, handed to the retained-context renderer). The
  peer: ``os.read`` on the master of a PTY running the same program, from its spawn to EOF.
  Ratio = peer time / ours (higher is better).

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

from benchmarks._common import paired_ratios, row
from supervisor._core import open_core
from supervisor._terminal_service import open_terminal_service

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject
    from supervisor._core import Core

MIB = 8
#: Bytes the writer's output becomes on the master (the PTY turns "\n" into "\r\n").
TP_BYTES = MIB * 1024 * 1024 // (80 * 1024) * 1024 * 81
WRITER = (
    "import os\n"
    f"line = b'x' * 79 + b'\\n'\nblock = line * 1024\n"
    f"for _ in range({MIB} * 1024 * 1024 // len(block)):\n"
    "    os.write(1, block)\n"
)
#: The two echo programs: the program echoes (raw mode, like a line editor) or the kernel.
ECHO_PROGRAMS = {
    "program": ["sh", "-c", "stty raw -echo; echo ready; exec cat"],
    "kernel": ["sh", "-c", "echo ready; exec cat"],
}
ECHO_GOAL = 1.2
TP_GOAL = 0.9
WARMUP = 5


@asynccontextmanager
async def _core() -> AsyncIterator[Core]:
    async with open_core(services=[open_terminal_service]) as core:
        yield core


def _obj(value: Any) -> JSONObject:
    assert isinstance(value, dict)
    return value


def _events(batch: JSONObject) -> list[JSONObject]:
    events = batch["events"]
    assert isinstance(events, list)
    return [e for e in events if isinstance(e, dict)]


async def _drain_until(core: Core, terminal_id: str, needle: str) -> None:
    text = ""
    while needle not in text:
        batch = _obj(
            await core.call(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
            )
        )
        text += "".join(str(e.get("data", "")) for e in _events(batch))


async def _ours_echo_ms(core: Core, terminal_id: str, key: str) -> float:
    result: list[float] = []
    started = [0.0]

    async def wait_echo() -> None:
        while True:
            batch = _obj(
                await core.call(
                    "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
                )
            )
            if any(key in str(e.get("data", "")) for e in _events(batch)):
                result.append((time.perf_counter() - started[0]) * 1000)
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_echo)
        await trio.testing.wait_all_tasks_blocked()
        started[0] = time.perf_counter()
        await core.call("terminal.write", {"terminalID": terminal_id, "data": key})
    return result[0]


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
    terminal_id = str(created["terminalID"])
    await core.call("terminal.onExit", {"terminalID": terminal_id})
    received = 0
    exited = False
    while received < TP_BYTES:
        batch = _obj(
            await core.call(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
            )
        )
        received += sum(len(str(e.get("data", ""))) for e in _events(batch))
        exited = exited or any(e["event"] == "exit" for e in _events(batch))
    elapsed = (time.perf_counter() - started) * 1000
    # Untimed: the handle is busy until its natural-exit cleanup has sent the outcome.
    while not exited:
        batch = _obj(
            await core.call(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
            )
        )
        exited = any(e["event"] == "exit" for e in _events(batch))
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


async def _measure_echo(core: Core, argv: list[str], rounds: int) -> tuple[list[float], ...]:
    ours: list[float] = []
    peer: list[float] = []
    created = _obj(
        await core.call("terminal.create", {"executable": argv[0], "arguments": [*argv[1:]]})
    )
    terminal_id = str(created["terminalID"])
    proc = ptyprocess.PtyProcess.spawn(argv)
    try:
        await _drain_until(core, terminal_id, "ready")
        data = b""
        while b"ready" not in data:
            data += proc.read(4096)
        for i in range(WARMUP + rounds):
            key = chr(ord("a") + i % 26)
            if i % 2:
                peer_ms = _ptyprocess_echo_ms(proc, key.encode())
                ours_ms = await _ours_echo_ms(core, terminal_id, key)
            else:
                ours_ms = await _ours_echo_ms(core, terminal_id, key)
                peer_ms = _ptyprocess_echo_ms(proc, key.encode())
            if i >= WARMUP:
                ours.append(ours_ms)
                peer.append(peer_ms)
    finally:
        proc.close(force=True)
        await core.call("terminal.dispose", {"terminalID": terminal_id})
    return ours, peer


async def _measure(rounds: int, tp_rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    async with _core() as core:
        for kind, argv in ECHO_PROGRAMS.items():
            samples[f"{kind}-ours"], samples[f"{kind}-peer"] = await _measure_echo(
                core, argv, rounds
            )
        samples["tp-ours"], samples["tp-peer"] = [], []
        for i in range(1 + tp_rounds):  # the first pair is a warm-up
            if i % 2:
                peer = _raw_throughput_ms()
                ours = await _ours_throughput_ms(core)
            else:
                ours = await _ours_throughput_ms(core)
                peer = _raw_throughput_ms()
            if i:
                samples["tp-ours"].append(ours)
                samples["tp-peer"].append(peer)
    return samples


def measure(*, rounds: int = 200) -> list[dict[str, object]]:
    """Measure echo latency (both programs) and read throughput, interleaved with the peers.

    Args:
        rounds: Timed echo rounds per program (after a warm-up of 5); throughput runs
            ``max(5, rounds // 20)`` pairs.

    Returns:
        Rows in the ``benchmarks._common.row`` format: echo times in milliseconds (ratio
        ours / ptyprocess, lower is better), throughput in MB/s (ratio ours / raw loop,
        higher is better).
    """
    samples = trio.run(_measure, rounds, max(5, rounds // 20))
    rows: list[dict[str, object]] = []
    for kind, figure in (
        ("program", "PTY keystroke echo by the program (raw mode, like a shell), write->echo"),
        ("kernel", "PTY keystroke echo by the line discipline (cooked mode), write->echo"),
    ):
        ratios = paired_ratios(samples[f"{kind}-ours"], samples[f"{kind}-peer"])
        ratio = statistics.median(ratios)
        rows.append(
            row(
                figure,
                ours=statistics.median(samples[f"{kind}-ours"]),
                peer=statistics.median(samples[f"{kind}-peer"]),
                unit="ms",
                peer_name="ptyprocess loop",
                ratio=ratio,
                goal=f"<= {ECHO_GOAL}x",
                met=ratio <= ECHO_GOAL,
                ratios=ratios,
            )
        )
    ratios = [1 / r for r in paired_ratios(samples["tp-ours"], samples["tp-peer"])]
    ratio = statistics.median(ratios)
    rows.append(
        row(
            f"PTY read throughput, {MIB} MiB of lines, spawn to last byte (MB/s)",
            ours=TP_BYTES / 1000 / statistics.median(samples["tp-ours"]),
            peer=TP_BYTES / 1000 / statistics.median(samples["tp-peer"]),
            unit="MB/s",
            peer_name="raw os.read loop",
            ratio=ratio,
            goal=f">= {TP_GOAL}x",
            met=ratio >= TP_GOAL,
            ratios=ratios,
        )
    )
    return rows


if __name__ == "__main__":
    for item in measure():
        print(item)
