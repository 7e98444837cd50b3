"""Language-server sessions (issue 3 "Measurements"): hover round trip, idle CPU, memory.

- Hover round trip: ``lsp.request`` + ``lsp.waitEvents`` until its ``requestCompleted``,
  through an in-process Core, against the same hover sent by a direct Trio client (hand
  framing over the pipes of its own ``ruff server``), alternating in one run; medians in
  milliseconds, ratio = ours / direct. ``ruff server`` answers in well under a millisecond,
  so the supervisor's own cost is what shows (pylsp's jedi hover would hide it).
- Idle CPU of 50 ready sessions (the fake server of tests/peers, so the servers' own CPU
  doesn't count): CPU time of this process over an idle interval, in ms per second, against
  the same interval with no session (the floor).
- Supervisor memory per session: growth of this process's RSS over 50 ready sessions,
  divided by 50, in KiB (the servers' memory is theirs, not counted).

Run ``python -m benchmarks.bench_lsp`` to print the rows.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import trio

from benchmarks._common import paired_row, row
from supervisor import open_core

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue
    from supervisor import Core

BIN = os.path.dirname(sys.executable)
RUFF = os.path.join(BIN, "ruff")
FAKE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "peers", "lsp_fake.py"
)
SESSIONS = 50
IDLE_S = 2.0
WORKDIR = "/tmp"
URI = "file:///tmp/bench_lsp_hover.py"
HOVER: JSONObject = {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 1}}


async def _drain_until(core: Core, sid: str, predicate: Any) -> dict[str, Any]:
    while True:
        batch: Any = await core.call(
            "lsp.waitEvents", {"sessionId": sid, "timeoutMilliseconds": 30000}
        )
        for event in batch["events"]:
            if predicate(event):
                return dict(event)


async def _start(core: Core, argv: list[str]) -> str:
    arguments: list[JSONValue] = [*argv[1:]]
    reply: Any = await core.call(
        "lsp.startServer",
        {
            "serverId": "bench",
            "executable": argv[0],
            "arguments": arguments,
            "workingDirectory": WORKDIR,
            "rootUri": "file://" + WORKDIR,
        },
    )
    sid = str(reply["sessionId"])
    await _drain_until(core, sid, lambda e: e.get("state") == "ready")
    return sid


class _Direct:
    """A minimal hand-framed LSP client over a process's pipes."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.buffer = b""
        self.next_id = 0

    async def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        await self.stdin.send_all(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def read(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += await self.stdout.receive_some(65536)
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = int(head.split(b":", 1)[1])
        while len(rest) < length:
            rest += await self.stdout.receive_some(65536)
        self.buffer = rest[length:]
        message: dict[str, Any] = json.loads(rest[:length])
        return message

    async def request(self, method: str, params: Any) -> Any:
        self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            message = await self.read()
            if message.get("id") == self.next_id and "method" not in message:
                return message.get("result")
            if "method" in message and "id" in message:  # a server request: accept it
                await self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})


async def _hover(rounds: int) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    direct_ms: list[float] = []
    process = await trio.lowlevel.open_process(
        [RUFF, "server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        direct = _Direct(process)
        await direct.request(
            "initialize",
            {"processId": os.getpid(), "rootUri": "file://" + WORKDIR, "capabilities": {}},
        )
        await direct.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        doc = {"uri": URI, "languageId": "python", "version": 1, "text": "x = 1\n"}
        await direct.send(
            {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": doc}}
        )
        async with open_core() as core:
            sid = await _start(core, [RUFF, "server"])
            await core.call(
                "lsp.syncDocument",
                {"sessionId": sid, "uri": URI, "languageId": "python", "text": "x = 1\n"},
            )
            for i in range(rounds + 10):
                started = time.perf_counter()
                reply: Any = await core.call(
                    "lsp.request",
                    {"sessionId": sid, "method": "textDocument/hover", "params": HOVER},
                )
                op = reply["operationId"]
                await _drain_until(
                    core,
                    sid,
                    lambda e, op=op: e["event"] == "requestCompleted" and e["operationId"] == op,
                )
                mid = time.perf_counter()
                await direct.request("textDocument/hover", HOVER)
                ended = time.perf_counter()
                if i >= 10:
                    ours.append((mid - started) * 1000)
                    direct_ms.append((ended - mid) * 1000)
            await core.call("lsp.stopServer", {"sessionId": sid})
    finally:
        with trio.CancelScope(shield=True):
            process.kill()
            await process.wait()
    return ours, direct_ms


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _idle_and_memory() -> tuple[float, float, float]:
    async with open_core() as core:
        before_cpu = _cpu_s()
        await trio.sleep(IDLE_S)
        floor = (_cpu_s() - before_cpu) * 1000 / IDLE_S
        rss_before = _rss_kib()
        sids = [await _start(core, [sys.executable, FAKE]) for _ in range(SESSIONS)]
        rss_per_session = (_rss_kib() - rss_before) / SESSIONS
        before_cpu = _cpu_s()
        await trio.sleep(IDLE_S)
        idle = (_cpu_s() - before_cpu) * 1000 / IDLE_S
        async with trio.open_nursery() as nursery:
            for sid in sids:
                stop: JSONObject = {"sessionId": sid}
                nursery.start_soon(core.call, "lsp.stopServer", stop)
    return idle, floor, rss_per_session


def measure(*, rounds: int = 100) -> list[dict[str, object]]:
    """Measure the three figures; return one row each (see the module docstring)."""
    ours, direct = trio.run(_hover, rounds)
    idle, floor, memory = trio.run(_idle_and_memory)
    return [
        paired_row(
            "lsp hover round trip via Core vs direct Trio client (ruff server; time)",
            ours,
            direct,
            unit="ms",
            peer_name="direct client",
            at_most=3,
        ),
        row(
            f"idle CPU of {SESSIONS} ready sessions (supervisor process)",
            ours=idle,
            peer=floor,
            unit="ms/s",
            peer_name="no sessions",
            ratio=idle / floor if floor else idle,
            goal="<= 5 ms/s",
            met=idle <= 5,
        ),
        row(
            "supervisor memory per ready session (RSS growth / sessions)",
            ours=memory,
            peer=0.0,
            unit="KiB",
            peer_name="-",
            ratio=memory,
            goal="<= 1024 KiB",
            met=memory <= 1024,
        ),
    ]


if __name__ == "__main__":
    for line in measure(rounds=50):
        print(line)
