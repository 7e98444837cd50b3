"""Peak memory under the edge's memory bounds (the README's bounds table), measured once.

``python -m benchmarks.bounds_memory [CASE...]`` runs each case in a fresh interpreter and
prints the peak resident size (``VmHWM``) of the process that holds the data (this one for
the Core cases, the ``supervisor serve`` child for the serve cases) and the largest answer.
Not a timed benchmark: one figure per bound, to check that the bound holds in memory too.

Cases:
    output: ``process.run`` of 1 GiB of NUL bytes on stdout and 1 GiB on stderr with
        ``maxOutputBytes`` at its 64 MiB maximum (the Core in this process).
    serve-output: the same through ``supervisor serve``; the answer frame's size.
    events: 64 jobs writing 1 MiB of NUL bytes each; once all ended, ``job.pollEvents``
        drains their queued events (the largest batch as JSON).
    inflight: 8 requests of 60 MiB each sent at once to ``supervisor serve`` (each holds its
        payload for 6 s): how many were refused ``busy``, and serve's peak.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import trio

from protocol import Frame, FrameDecoder
from supervisor import open_core
from supervisor._process._guardian import serving_pid

PY = sys.executable
_GIB_NUL = "import os\nb = bytes(1 << 20)\nfor _ in range(1024):\n    os.write({fd}, b)\n"


def _hwm(pid: str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


async def _output() -> dict[str, object]:
    both = _GIB_NUL.format(fd=1) + _GIB_NUL.format(fd=2)
    before = _hwm()
    async with open_core() as core:
        result = await core.call(
            "process.run", {"argv": [PY, "-c", both], "maxOutputBytes": 64 * 1024 * 1024}
        )
        answer = json.dumps({"id": 1, "ok": True, "data": result}, ensure_ascii=False)
    assert isinstance(result, dict)
    return {
        "answer": _mib(len(answer.encode())),
        "truncated": result["truncated"],
        "peak": _mib(_hwm()),
        "before": _mib(before),
    }


class _Serve:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [PY, "-m", "supervisor", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.frames: list[tuple[int, dict[str, Any]]] = []
        self.ready = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.send(0, "initialize", {"capabilities": {}})
        self.wait(1)

    def _read(self) -> None:
        decoder = FrameDecoder(max_body_bytes=1 << 30)
        assert self.process.stdout is not None
        while True:
            event = decoder.next_event()
            if isinstance(event, Frame):
                message = json.loads(event.body)
                with self.ready:
                    self.frames.append((len(event.body), message))
                    self.ready.notify_all()
                continue
            data = self.process.stdout.read1(1 << 20)  # type: ignore[attr-defined]
            if not data:
                return
            decoder.receive_data(data)

    def send(self, request_id: int, method: str, params: object) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body.encode()) + body.encode())
        self.process.stdin.flush()

    def wait(self, answers: int) -> None:
        with self.ready:
            self.ready.wait_for(lambda: len([m for _, m in self.frames if "id" in m]) >= answers)

    def close(self) -> int:
        peak = _hwm(str(serving_pid(self.process.pid)))  # the worker, not its guardian
        self.send(999_999, "shutdown", None)
        assert self.process.stdin is not None
        body = b'{"jsonrpc": "2.0", "method": "exit"}'
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.close()
        self.process.wait(60)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return peak


def _serve_output() -> dict[str, object]:
    serve = _Serve()
    both = _GIB_NUL.format(fd=1) + _GIB_NUL.format(fd=2)
    serve.send(1, "process.run", {"argv": [PY, "-c", both], "maxOutputBytes": 64 * 1024 * 1024})
    serve.wait(2)
    size, message = max(serve.frames, key=lambda frame: frame[0])
    peak = serve.close()
    result = message.get("result")
    return {
        "frame": _mib(size),
        "truncated": isinstance(result, dict) and result.get("truncated"),
        "servePeak": _mib(peak),
    }


async def _events() -> dict[str, object]:
    mib_nul = "import os; os.write(1, bytes(1 << 20))"
    largest = 0
    batches = 0
    async with open_core() as core:
        for _ in range(64):
            await core.call(
                "job.start", {"kind": "command", "root": "/tmp", "argv": [PY, "-c", mib_nul]}
            )
        # Every job ends before the first drain, so the queue holds all their events at once.
        while True:
            jobs = await core.call("job.list", {})
            assert isinstance(jobs, list)
            if all(isinstance(j, dict) and j["state"] == "finished" for j in jobs):
                break
            await trio.sleep(0.1)
        while True:
            batch = await core.call("job.pollEvents", {})
            assert isinstance(batch, dict)
            events = batch["events"]
            assert isinstance(events, list)
            if not events:
                break
            batches += 1
            largest = max(largest, len(json.dumps(batch, ensure_ascii=False).encode()))
    return {"batches": batches, "largestBatch": _mib(largest), "peak": _mib(_hwm())}


def _inflight() -> dict[str, object]:
    serve = _Serve()
    stdin = "x" * (60 * 1024 * 1024)
    # Long enough for serve to read all eight (about 0.5 s per 60 MiB frame when loaded).
    argv = [PY, "-c", "import time; time.sleep(6)"]
    for i in range(8):
        serve.send(10 + i, "process.run", {"argv": argv, "stdin": stdin})
    serve.wait(9)
    refused = [
        m["id"]
        for _, m in serve.frames
        if isinstance(m.get("error"), dict) and m["error"].get("data", {}).get("code") == "busy"
    ]
    peak = serve.close()
    return {"refusedBusy": len(refused), "servePeak": _mib(peak)}


CASES = {
    "output": lambda: trio.run(_output),
    "serve-output": _serve_output,
    "events": lambda: trio.run(_events),
    "inflight": _inflight,
}


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--one":
        started = time.monotonic()
        figures = CASES[argv[1]]()
        print(
            json.dumps({"case": argv[1], **figures, "seconds": round(time.monotonic() - started)})
        )
        return 0
    for case in argv or list(CASES):
        subprocess.run([PY, "-m", "benchmarks.bounds_memory", "--one", case], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
