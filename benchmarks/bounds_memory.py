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
    inflight: 16 requests of 12 MiB each sent at once to ``supervisor serve`` (each holds
        its payload for 20 s): how many were refused ``busy`` (the 96 MiB budget holds 8),
        and serve's peak.
    serve-full: every budget of one ``supervisor serve`` full at once (issue 25): requests
        in flight up to their budget, the client reading nothing while a 60 MiB answer and
        more wait to be written, and 16 language servers logging without pause whose events
        nobody drains (the Core's 64 MiB event budget). Serve's peak against its documented
        total (README "Memory bounds": 528 MiB).
"""

from __future__ import annotations

import json
import os
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
        #: Cleared: the client reads nothing (as a busy editor).
        self.reading = threading.Event()
        self.reading.set()
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
            self.reading.wait()
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

    def rss(self) -> int:
        with open(f"/proc/{serving_pid(self.process.pid)}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def close(self) -> int:
        self.reading.set()
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


#: The in-flight case: requests of this many bytes of stdin, and how many.
_HELD_BYTES = 12 * 1024 * 1024
_HELD_REQUESTS = 16


def _hold_requests(serve: _Serve, first_id: int, seconds: int) -> None:
    stdin = "x" * _HELD_BYTES
    argv = [PY, "-c", f"import time; time.sleep({seconds})"]
    for i in range(_HELD_REQUESTS):
        serve.send(first_id + i, "process.run", {"argv": argv, "stdin": stdin})


def _refused(serve: _Serve) -> int:
    return sum(
        1
        for _, m in serve.frames
        if isinstance(m.get("error"), dict) and m["error"].get("data", {}).get("code") == "busy"
    )


def _inflight() -> dict[str, object]:
    serve = _Serve()
    idle = serve.rss()
    _hold_requests(serve, 10, 20)
    serve.wait(1 + _HELD_REQUESTS)
    peak = serve.close()
    return {"refusedBusy": _refused(serve), "serveIdle": _mib(idle), "servePeak": _mib(peak)}


_LOGGERS = 16


def _serve_full() -> dict[str, object]:
    fake = os.path.join(os.path.dirname(__file__), "..", "tests", "peers", "lsp_fake.py")
    cwd = os.getcwd()
    serve = _Serve()
    idle = serve.rss()
    for n in range(_LOGGERS):
        serve.send(
            100 + n,
            "lsp.startServer",
            {
                "serverId": f"logger{n}",
                "executable": PY,
                "arguments": [fake],
                "workingDirectory": cwd,
                "rootUri": "file://" + cwd,
            },
        )
    serve.wait(1 + _LOGGERS)
    time.sleep(3)  # every server is ready
    for n, (_, message) in enumerate(m for m in list(serve.frames) if m[1].get("id", 0) >= 100):
        session = message["result"]["sessionId"]
        serve.send(
            200 + n,
            "lsp.request",
            {
                "sessionId": session,
                "method": "test/logFlood",
                "params": {"perSecond": 50, "bytes": 20_000},
            },
        )
    serve.wait(1 + 2 * _LOGGERS)
    serve.reading.clear()  # the client reads nothing from here on
    _hold_requests(serve, 10, 25)
    big = "import sys; sys.stdout.write('y' * (60 * 1024 * 1024))"
    serve.send(300, "process.run", {"argv": [PY, "-c", big], "maxOutputBytes": 64 * 1024 * 1024})
    serve.send(
        301,
        "job.start",
        {"kind": "command", "root": cwd, "argv": ["sh", "-c", "yes | head -c 100000000"]},
    )
    samples = []
    for _ in range(20):
        time.sleep(1)
        samples.append(serve.rss())
    serve.reading.set()
    serve.wait(3 + 2 * _LOGGERS + _HELD_REQUESTS)
    peak = serve.close()
    return {
        "refusedBusy": _refused(serve),
        "serveIdle": _mib(idle),
        "serveRssDuringStall": _mib(max(samples)),
        "servePeak": _mib(peak),
        "documentedTotal": "528.0 MiB",
    }


CASES = {
    "output": lambda: trio.run(_output),
    "serve-output": _serve_output,
    "events": lambda: trio.run(_events),
    "inflight": _inflight,
    "serve-full": _serve_full,
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
