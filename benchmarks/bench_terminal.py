"""PTY terminals (goal 7 of the README's table): keystroke echo and read throughput through the
supervisor's ``terminal.*`` commands, against the peers the goal names, in the same run.

Goal 7 of the README's table: keystroke echo at most 1.2x a ptyprocess loop; read throughput
at least 0.9x a raw ``os.read`` loop on the same PTY.

Which path is ours: ``Core.call`` in the same Trio program, the cheapest way any host
reaches a terminal (``supervisor serve`` and ``CoreThread`` add their own transport on top;
there is no other Python terminal API). Nothing is left out of the timed part: the command
dispatch, payload validation, the reader task, decoding, the retained-context feed, the
event queue and the ``terminal.waitEvents`` call that returns the output.

- Keystroke echo (write to first output). Ours: one key goes in with ``terminal.write``
  (a Core command) while a ``terminal.waitEvents`` call already waits; the time until that
  call returns the echo. The peer: ``ptyprocess`` writes the key and blocks in ``read``.
  Measured twice, on the same kind of program for both sides:

  * *program echo*: ``stty raw -echo; exec cat``, the way a shell's line editor echoes
    each key itself (what a user of a terminal sees);
  * *line-discipline echo*: plain ``cat`` in cooked mode, where the kernel echoes the key
    without any program running: the smallest possible round trip, so it shows the
    supervisor's own per-keystroke cost most harshly.

  Rounds interleave ours and the peer; the ratio is the median of per-round ratios. A third
  contestant, not judged, runs interleaved too and is printed as the row's note: a bare
  Trio program (one reader task waiting on the master, an event, no Core) on its own PTY
  running the same program, i.e. the floor of any Trio reader.
- Read throughput. A program writes ``MIB`` MiB of 80-byte lines to its terminal. Ours:
  ``output`` events drained with ``terminal.waitEvents`` (decoded, queued, handed to the
  retained-context renderer). The peer: ``os.read`` on the master of a PTY running the same
  program. Both sides are timed over the same window, from the first output that arrives
  to the last byte, and the rate counts the bytes after that first output: this is the read
  path's throughput. Starting the program is goal 1's figure (``bench_spawn``); the row's
  note gives the ratio from the spawn (``terminal.create`` / ``Popen``) to the last byte as
  well, so what the spawn costs here stays visible. Ratio = ours / peer (higher is better).
  A third contestant, not judged, runs interleaved too and is printed in the note: a bare
  Trio reader (``wait_readable``, then non-blocking reads until the master drains, up to
  64 KiB a pass; no decoding, no events, no Core) on its own PTY running the same program,
  i.e. the floor of any Trio reader against the blocking raw loop.

Run ``python -m benchmarks bench_terminal`` to print the table.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ptyprocess  # type: ignore[import-untyped]
import trio
import trio.testing

from benchmarks._common import paired_ratios, paired_row
from supervisor._core._core import open_core
from supervisor._terminal._service import open_terminal_service

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject
    from supervisor._core._core import Core

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


@dataclass
class _Throughput:
    """One throughput run: milliseconds from the spawn and from the first output to the
    last byte, and the bytes of that first output."""

    spawn_to_last_ms: float
    first_to_last_ms: float
    first_bytes: int

    @property
    def read_mb_s(self) -> float:
        return (TP_BYTES - self.first_bytes) / 1000 / self.first_to_last_ms


async def _ours_throughput(core: Core) -> _Throughput:
    started = time.perf_counter()
    created = _obj(
        await core.call(
            "terminal.create", {"executable": sys.executable, "arguments": ["-c", WRITER]}
        )
    )
    terminal_id = str(created["terminalID"])
    await core.call("terminal.onExit", {"terminalID": terminal_id})
    received = 0
    first = 0.0
    first_bytes = 0
    exited = False
    while received < TP_BYTES:
        batch = _obj(
            await core.call(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
            )
        )
        size = sum(len(str(e.get("data", ""))) for e in _events(batch))
        if size and not first_bytes:
            first, first_bytes = time.perf_counter(), size
        received += size
        exited = exited or any(e["event"] == "exit" for e in _events(batch))
    last = time.perf_counter()
    # Untimed: the handle is busy until its natural-exit cleanup has sent the outcome.
    while not exited:
        batch = _obj(
            await core.call(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
            )
        )
        exited = any(e["event"] == "exit" for e in _events(batch))
    await core.call("terminal.dispose", {"terminalID": terminal_id})
    return _Throughput((last - started) * 1000, (last - first) * 1000, first_bytes)


def _raw_throughput() -> _Throughput:
    started = time.perf_counter()
    master, proc = _writer_on_pty()
    received = 0
    first = last = 0.0
    first_bytes = 0
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the slave side is closed
                break
            if not data:
                break
            if not first_bytes:
                first, first_bytes = time.perf_counter(), len(data)
            received += len(data)
            if received >= TP_BYTES and not last:
                last = time.perf_counter()
    finally:
        os.close(master)
        proc.wait()
    assert received == TP_BYTES, received
    return _Throughput((last - started) * 1000, (last - first) * 1000, first_bytes)


def _writer_on_pty() -> tuple[int, subprocess.Popen[bytes]]:
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    return master, proc


async def _trio_throughput() -> _Throughput:
    """The bare Trio reader's throughput run (the floor printed in the row's note)."""
    started = time.perf_counter()
    master, proc = _writer_on_pty()
    os.set_blocking(master, False)
    received = 0
    first = last = 0.0
    first_bytes = 0
    eof = False
    try:
        while not eof:
            await trio.lowlevel.wait_readable(master)
            size = 0
            while size < 65536:
                try:
                    data = os.read(master, 65536 - size)
                except BlockingIOError:
                    break
                except OSError:  # EIO: the slave side is closed
                    eof = True
                    break
                if not data:
                    eof = True
                    break
                size += len(data)
            if size and not first_bytes:
                first, first_bytes = time.perf_counter(), size
            received += size
            if received >= TP_BYTES and not last:
                last = time.perf_counter()
    finally:
        os.close(master)
        proc.wait()
    assert received == TP_BYTES, received
    return _Throughput((last - started) * 1000, (last - first) * 1000, first_bytes)


class _TrioFloor:
    """The floor of any Trio reader: a task waits on the master and sets an event, no Core.

    The same program runs on a PTY of its own (``os.openpty``); it is a yardstick printed
    next to the rows, not a contestant.
    """

    def __init__(self, argv: list[str]) -> None:
        self.master, slave = os.openpty()
        self._proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        os.set_blocking(self.master, False)
        self.data = b""
        self.arrived = trio.Event()

    async def read_loop(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self.master)
            try:
                data = os.read(self.master, 65536)
            except BlockingIOError:
                continue
            except OSError:  # EIO: the program is gone
                return
            if not data:
                return
            self.data += data
            self.arrived.set()

    async def until(self, needle: bytes) -> None:
        while needle not in self.data:
            self.arrived = trio.Event()
            await self.arrived.wait()

    async def echo_ms(self, key: bytes) -> float:
        self.data = b""
        started = time.perf_counter()
        os.write(self.master, key)
        await self.until(key)
        return (time.perf_counter() - started) * 1000

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()
        os.close(self.master)


async def _measure_echo(core: Core, argv: list[str], rounds: int) -> tuple[list[float], ...]:
    ours: list[float] = []
    peer: list[float] = []
    floor: list[float] = []
    created = _obj(
        await core.call("terminal.create", {"executable": argv[0], "arguments": [*argv[1:]]})
    )
    terminal_id = str(created["terminalID"])
    proc = ptyprocess.PtyProcess.spawn(argv)
    bare = _TrioFloor(argv)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bare.read_loop)
            await _drain_until(core, terminal_id, "ready")
            await bare.until(b"ready")
            data = b""
            while b"ready" not in data:
                data += proc.read(4096)
            for i in range(WARMUP + rounds):
                key = chr(ord("a") + i % 26)
                # Each contestant goes first, second and third equally often.
                order = [0, 1, 2][i % 3 :] + [0, 1, 2][: i % 3]
                for who in order:
                    if who == 0:
                        ours_ms = await _ours_echo_ms(core, terminal_id, key)
                    elif who == 1:
                        peer_ms = _ptyprocess_echo_ms(proc, key.encode())
                    else:
                        floor_ms = await bare.echo_ms(key.encode())
                if i >= WARMUP:
                    ours.append(ours_ms)
                    peer.append(peer_ms)
                    floor.append(floor_ms)
            nursery.cancel_scope.cancel()
    finally:
        proc.close(force=True)
        bare.close()
        await core.call("terminal.dispose", {"terminalID": terminal_id})
    return ours, peer, floor


async def _measure(rounds: int, tp_rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    async with _core() as core:
        for kind, argv in ECHO_PROGRAMS.items():
            (
                samples[f"{kind}-ours"],
                samples[f"{kind}-peer"],
                samples[f"{kind}-floor"],
            ) = await _measure_echo(core, argv, rounds)
        for name in ("tp-ours", "tp-peer", "tp-floor", "spawn-ours", "spawn-peer"):
            samples[name] = []
        for i in range(1 + tp_rounds):  # the first round is a warm-up
            # Each contestant goes first, second and third equally often.
            runs: dict[int, _Throughput] = {}
            for who in [0, 1, 2][i % 3 :] + [0, 1, 2][: i % 3]:
                if who == 0:
                    runs[0] = await _ours_throughput(core)
                elif who == 1:
                    runs[1] = _raw_throughput()
                else:
                    runs[2] = await _trio_throughput()
            ours, peer, floor = runs[0], runs[1], runs[2]
            if i:
                samples["tp-ours"].append(ours.read_mb_s)
                samples["tp-peer"].append(peer.read_mb_s)
                samples["tp-floor"].append(floor.read_mb_s)
                samples["spawn-ours"].append(ours.spawn_to_last_ms)
                samples["spawn-peer"].append(peer.spawn_to_last_ms)
    return samples


def measure(*, rounds: int = 200) -> list[dict[str, object]]:
    """Measure echo latency (both programs) and read throughput, interleaved with the peers.

    Args:
        rounds: Timed echo rounds per program (after a warm-up of 5); throughput runs
            ``max(5, rounds // 20)`` pairs.

    Returns:
        Rows in the ``benchmarks._common.row`` format: echo times in milliseconds (ratio
        ours / ptyprocess, lower is better; the note gives the bare Trio floor), read
        throughput in MB/s from the first output to the last byte (ratio ours / raw loop,
        higher is better; the note gives the ratio from the spawn on and the bare Trio
        reader's ratio, the floor of any Trio reader).
    """
    samples = trio.run(_measure, rounds, max(5, rounds // 20))
    rows: list[dict[str, object]] = []
    for kind, figure in (
        ("program", "PTY keystroke echo by the program (raw mode, like a shell), write->echo"),
        ("kernel", "PTY keystroke echo by the line discipline (cooked mode), write->echo"),
    ):
        floor = statistics.median(paired_ratios(samples[f"{kind}-floor"], samples[f"{kind}-peer"]))
        rows.append(
            paired_row(
                figure,
                samples[f"{kind}-ours"],
                samples[f"{kind}-peer"],
                unit="ms",
                peer_name="ptyprocess loop",
                at_most=ECHO_GOAL,
                note=(
                    f"bare Trio reader (no Core) "
                    f"{statistics.median(samples[f'{kind}-floor']):.4f} ms, {floor:.2f}x"
                ),
            )
        )
    from_spawn = statistics.median(
        [p / o for o, p in zip(samples["spawn-ours"], samples["spawn-peer"], strict=True)]
    )
    tp_floor = statistics.median(paired_ratios(samples["tp-floor"], samples["tp-peer"]))
    rows.append(
        paired_row(
            f"PTY read throughput, {MIB} MiB of lines, first output to last byte (MB/s)",
            samples["tp-ours"],
            samples["tp-peer"],
            unit="MB/s",
            peer_name="raw os.read loop",
            at_least=TP_GOAL,
            note=(
                f"from the spawn to the last byte {from_spawn:.2f}x; bare Trio reader (no Core) "
                f"{tp_floor:.2f}x"
            ),
        )
    )
    return rows


if __name__ == "__main__":
    for item in measure():
        print(item)
