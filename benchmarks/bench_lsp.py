"""Language-server sessions: hover round trip, idle CPU, memory.

- Hover round trip: ``lsp.request`` + ``lsp.waitEvents`` until its ``requestCompleted``,
  through an in-process Core, against the same hover sent by a direct Trio client (hand
  framing over the pipes of its own ``ruff server``), alternating in one run; medians in
  milliseconds, ratio = ours / direct. ``ruff server`` answers in well under a millisecond,
  so the supervisor's own cost is what shows (pylsp's jedi hover would hide it).
- Idle CPU of 50 ready sessions (the fake server of tests/peers, so the servers' own CPU
  doesn't count): CPU time of this process over an idle interval, in ms per second, against
  the same interval with no session (the floor).
- Supervisor memory per ready session, over 100 ready sessions of the fake server, each kind
  of figure in a fresh interpreter (``--memory-probe``) so that memory an earlier phase freed
  can't hide the growth: the growth of the process's RSS divided by 100, and what
  ``tracemalloc`` traces (retained once all are ready, and the peak while they started)
  divided by 100, in KiB. Against the same 100 servers held by the direct Trio client
  (process, pipes, ``initialize`` answered), which is the floor of any client. One session
  is started and stopped first, so the Core's first-use allocations (imports, caches) are
  not counted. The servers' memory is theirs, not counted.

Run ``python -m benchmarks.bench_lsp`` to print the rows (``--memory`` for the memory row
alone).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
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
MEMORY_SESSIONS = 100
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


async def _idle() -> tuple[float, float]:
    async with open_core() as core:
        before_cpu = _cpu_s()
        await trio.sleep(IDLE_S)
        floor = (_cpu_s() - before_cpu) * 1000 / IDLE_S
        sids = [await _start(core, [sys.executable, FAKE]) for _ in range(SESSIONS)]
        before_cpu = _cpu_s()
        await trio.sleep(IDLE_S)
        idle = (_cpu_s() - before_cpu) * 1000 / IDLE_S
        await _stop_all(core, sids)
    return idle, floor


async def _stop_all(core: Core, sids: list[str]) -> None:
    async with trio.open_nursery() as nursery:
        for sid in sids:
            stop: JSONObject = {"sessionId": sid}
            nursery.start_soon(core.call, "lsp.stopServer", stop)


# -- memory per ready session (each probe in a fresh interpreter) ----------------------------


class _Held:
    """``count`` ready sessions, through the Core (``ours``) or the direct client."""

    def __init__(self, core: Core | None) -> None:
        self.core = core
        self.sids: list[str] = []
        self.direct: list[tuple[trio.Process, _Direct]] = []

    async def start(self, count: int) -> None:
        for _ in range(count):
            if self.core is not None:
                self.sids.append(await _start(self.core, [sys.executable, FAKE]))
                continue
            process = await trio.lowlevel.open_process(
                [sys.executable, FAKE], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            client = _Direct(process)
            await client.request(
                "initialize",
                {"processId": os.getpid(), "rootUri": "file://" + WORKDIR, "capabilities": {}},
            )
            await client.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
            self.direct.append((process, client))

    async def stop(self) -> None:
        if self.core is not None:
            await _stop_all(self.core, self.sids)
            self.sids.clear()
        for process, _ in self.direct:
            process.kill()
            await process.wait()
        self.direct.clear()


async def _probe_with(core: Core | None) -> dict[str, float]:
    held = _Held(core)
    await held.start(1)  # first-use allocations (imports, caches) are not a session's
    await held.stop()
    gc.collect()
    rss_before = _rss_kib()
    await held.start(MEMORY_SESSIONS)
    gc.collect()
    rss = (_rss_kib() - rss_before) / MEMORY_SESSIONS
    await held.stop()
    # tracemalloc's own bookkeeping inflates the RSS: its pass comes second.
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    await held.start(MEMORY_SESSIONS)
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    await held.stop()
    return {
        "rssKiB": rss,
        "retainedKiB": (current - base) / 1024 / MEMORY_SESSIONS,
        "peakKiB": (peak - base) / 1024 / MEMORY_SESSIONS,
    }


async def _probe(mode: str) -> dict[str, float]:
    if mode == "direct":
        return await _probe_with(None)
    async with open_core() as core:
        return await _probe_with(core)


def _run_probe(mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_lsp", "--memory-probe", mode],
        capture_output=True,
        check=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def measure_memory() -> dict[str, object]:
    """The memory row (see the module docstring); goal: at most 1 MiB per session, by RSS
    growth and by what is retained."""
    ours = _run_probe("ours")
    direct = _run_probe("direct")
    worst = max(ours["rssKiB"], ours["retainedKiB"])
    return row(
        f"supervisor memory per ready session ({MEMORY_SESSIONS} fake servers; RSS growth)",
        ours=ours["rssKiB"],
        peer=direct["rssKiB"],
        unit="KiB",
        peer_name="direct Trio client",
        ratio=ours["rssKiB"] / direct["rssKiB"] if direct["rssKiB"] > 0 else ours["rssKiB"],
        goal="<= 1024 KiB (RSS and retained)",
        met=ours["retainedKiB"] > 0 and worst <= 1024,
        note=(
            f"tracemalloc retained {ours['retainedKiB']:.1f} KiB, peak"
            f" {ours['peakKiB']:.1f} KiB per session (direct client"
            f" {direct['retainedKiB']:.1f} / {direct['peakKiB']:.1f})"
        ),
    )


def measure(*, rounds: int = 100) -> list[dict[str, object]]:
    """Measure the three figures; return one row each (see the module docstring)."""
    ours, direct = trio.run(_hover, rounds)
    idle, floor = trio.run(_idle)
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
        measure_memory(),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--memory-probe"]:
        print(json.dumps(trio.run(_probe, sys.argv[2])))
    elif sys.argv[1:2] == ["--memory"]:
        print(measure_memory())
    else:
        for line in measure(rounds=50):
            print(line)
