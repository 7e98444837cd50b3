"""A soak of ``supervisor serve``: real sessions kept busy for N minutes, serve's vitals sampled.

``python -m benchmarks.soak [--minutes 60] [--sample-seconds 60] [--json FILE] [--plot PNG]``

One ``supervisor serve`` (its guardian and its worker, as an editor starts it) is driven over
stdio the way an editor backend drives it, by concurrent loops until the time is up:

- two language servers, ``pylsp`` and ``ruff server``: a document changed every second or
  two, ``hover`` / ``completion`` / ``documentSymbol`` requests, their events drained with
  ``lsp.waitEvents``; every few minutes a restart (``lsp.restartServer``), and now and then a
  long ``lsp.waitEvents`` cancelled with ``$/cancelRequest``;
- a debugpy session on a debuggee that loops past a breakpoint: every stop is inspected
  (``stackTrace``) and continued; every few minutes the session is disconnected, destroyed
  and created again;
- two bash terminals: ``yes | head -c 300000`` typed every few seconds, resizes, output
  drained with ``terminal.waitEvents``; recreated every few minutes;
- jobs started every second or two on four lanes, half of them cancelled at a random moment;
- a slow reader: every few minutes the client stops reading serve's output for
  ``--slow-reader-seconds``.

Every ``--sample-seconds`` it reads serve's worker (``/proc/<pid>``): resident memory, open
descriptors, threads, CPU (percent of one core over the interval) and live descendants. The
run fails when a request is unanswered (no answer within 120 s, or none at the end) or answered
twice, when a job does not get exactly one ``job.finished``, or when a vital grows past its
bound (see :data:`BOUNDS`), each measured from the baseline: the sample at the end of the
first interval after warm-up (every session started and warm), so start-up costs do not count.
Exit status 0 when it passed, 1 when it failed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from protocol import EOF, NEED_DATA, Frame, FrameDecoder
from supervisor._process._guardian import serving_pid

PY = sys.executable
#: A request not answered within this long is a failure (a slow-reader pause included).
ANSWER_BOUND_S: Final = 120.0
_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")

#: Bounds on the growth of each vital over its baseline, with why.
BOUNDS: Final[dict[str, tuple[float, str]]] = {
    "rssMiB": (
        64.0,
        "every queue and buffer in serve is bounded; 64 MiB over the warm baseline is more"
        " than any of them can hold for these sessions, so past it something accumulates",
    ),
    "fds": (
        24.0,
        "each session holds a fixed few (pipes, a PTY, pidfds) and restarts replace them;"
        " 24 more than the baseline is a leak of one per restart within the hour",
    ),
    "threads": (
        8.0,
        "Trio's worker threads come and go (idle ones exit after 10 s); 8 more than the"
        " baseline stay only if something parks threads",
    ),
    "cpuPercent": (
        25.0,
        "the load is the same all along, so serve's CPU share must stay level: the mean of"
        " the last third of the samples may exceed the mean of the first third by at most"
        " 25 points of one core",
    ),
    "processes": (
        12.0,
        "the sessions' processes are a fixed set (servers, adapter, debuggee, shells, a job"
        " or two); 12 more than the baseline means trees are left behind",
    ),
}

DEBUGGEE: Final = """\
import time
count = 0
while True:
    count += 1
    time.sleep(0.3)
"""
DEBUGGEE_BREAK_LINE: Final = 4
DOCUMENT: Final = '''\
import os


def greet(name: str) -> str:
    """Say hello."""
    return "hello " + name


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def bump(self) -> int:
        self.value += 1
        return self.value


print(greet(os.getcwd()), Counter().bump())
'''


@dataclass
class Sample:
    """serve's vitals at one moment."""

    minute: float
    rss_mib: float
    fds: int
    threads: int
    cpu_percent: float
    processes: int

    def to_json(self) -> dict[str, float]:
        return {
            "minute": round(self.minute, 2),
            "rssMiB": round(self.rss_mib, 1),
            "fds": self.fds,
            "threads": self.threads,
            "cpuPercent": round(self.cpu_percent, 1),
            "processes": self.processes,
        }


@dataclass
class Tally:
    """What the run counts and what went wrong."""

    requests: int = 0
    answers: int = 0
    cancels: int = 0
    jobs: int = 0
    jobs_cancelled: int = 0
    stops: int = 0
    restarts: int = 0
    slow_pauses: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    #: serve's vitals once every session ended, before ``shutdown``.
    after: Sample | None = None


class Client:
    """JSON-RPC over serve's stdio: every answer counted by id, reading pausable."""

    def __init__(self, process: trio.Process, tally: Tally) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._tally = tally
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.Event] = {}
        self._replies: dict[int, dict[str, Any]] = {}
        self._sent: dict[int, tuple[str, float]] = {}
        self._count: dict[int, int] = {}
        self._write_lock = trio.Lock()
        self._reading = trio.Event()
        self._reading.set()
        self.job_events: list[dict[str, Any]] = []
        #: Set at the end of serve's output.
        self.closed = trio.Event()

    async def read_loop(self) -> None:
        decoder = FrameDecoder(max_body_bytes=256 * 1024 * 1024)
        while True:
            event = decoder.next_event()
            if event is NEED_DATA:
                await self._reading.wait()
                data = await self._stdout.receive_some(1 << 16)
                if not data:
                    decoder.receive_eof()
                else:
                    decoder.receive_data(data)
                continue
            if event is EOF:
                self.closed.set()
                return
            if isinstance(event, Frame):
                self._take(json.loads(event.body))

    def _take(self, message: dict[str, Any]) -> None:
        if "method" in message:
            if str(message["method"]).startswith("job."):
                self.job_events.append(message)
            return
        request_id = message.get("id")
        if not isinstance(request_id, int):
            self._tally.violations.append(f"an answer without a known id: {message!r:.200}")
            return
        count = self._count.get(request_id, 0) + 1
        self._count[request_id] = count
        self._tally.answers += 1
        if count > 1:
            method = self._sent.get(request_id, ("?", 0.0))[0]
            self._tally.violations.append(f"request {request_id} ({method}) answered {count} times")
            return
        self._replies[request_id] = message
        waiter = self._waiting.pop(request_id, None)
        if waiter is not None:
            waiter.set()

    async def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        async with self._write_lock:
            await self._stdin.send_all(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def call(
        self, method: str, params: Any = None, *, cancel_after_s: float | None = None
    ) -> dict[str, Any]:
        """Send a request and wait for its answer (the whole message: result or error)."""
        request_id = next(self._ids)
        done = trio.Event()
        self._waiting[request_id] = done
        self._sent[request_id] = (method, time.monotonic())
        self._tally.requests += 1
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        if cancel_after_s is not None:
            with trio.move_on_after(cancel_after_s):
                await done.wait()
            if not done.is_set():
                self._tally.cancels += 1
                await self.send(
                    {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": request_id}}
                )
        with trio.move_on_after(ANSWER_BOUND_S):
            await done.wait()
        if not done.is_set():
            self._tally.violations.append(
                f"request {request_id} ({method}) unanswered after {ANSWER_BOUND_S:.0f} s"
            )
            self._waiting.pop(request_id, None)
            raise trio.TooSlowError
        reply = self._replies.pop(request_id)
        if "error" in reply:
            code = str((reply["error"].get("data") or {}).get("code", reply["error"]["code"]))
            self._tally.errors[f"{method}: {code}"] = (
                self._tally.errors.get(f"{method}: {code}", 0) + 1
            )
        return reply

    async def result(self, method: str, params: Any = None) -> Any:
        """The result of a request that must succeed; None (counted) when it failed."""
        reply = await self.call(method, params)
        return reply.get("result")

    def unanswered(self) -> list[str]:
        return [f"{i} ({self._sent[i][0]})" for i in self._sent if i not in self._count]

    @contextlib.contextmanager
    def paused(self) -> Any:
        self._reading = trio.Event()
        try:
            yield
        finally:
            self._reading.set()


# -- the workloads --------------------------------------------------------------------------


class Soak:
    def __init__(self, client: Client, tally: Tally, workdir: str, seed: int) -> None:
        self.client = client
        self.tally = tally
        self.workdir = workdir
        self.rng = random.Random(seed)

    async def _sleep(self, low: float, high: float) -> None:
        await trio.sleep(self.rng.uniform(low, high))

    async def _drain(self, kind: str, key: str, session_id: str, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                await self.client.call(
                    f"{kind}.waitEvents", {key: session_id, "timeoutMilliseconds": 1000}
                )

    # language servers

    async def language_server(self, name: str, argv: list[str], restart_every_s: float) -> None:
        path = _write(os.path.join(self.workdir, f"{name}_doc.py"), DOCUMENT)
        uri = "file://" + path
        started = await self.client.result(
            "lsp.startServer",
            {
                "serverId": name,
                "executable": argv[0],
                "arguments": argv[1:],
                "workingDirectory": self.workdir,
                "rootUri": "file://" + self.workdir,
                "restart": True,
            },
        )
        session_id = started["sessionId"]
        drain = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._drain, "lsp", "sessionId", session_id, drain)
            version = 0
            last_restart = time.monotonic()
            try:
                while True:
                    version += 1
                    text = DOCUMENT + f"\nvalue_{version} = {version}\n"
                    await self.client.call(
                        "lsp.syncDocument",
                        {"sessionId": session_id, "uri": uri, "languageId": "python", "text": text},
                    )
                    method, params = self.rng.choice(
                        [
                            ("textDocument/hover", {"line": 5, "character": 12}),
                            ("textDocument/completion", {"line": 18, "character": 8}),
                            ("textDocument/documentSymbol", None),
                        ]
                    )
                    request: dict[str, Any] = {"textDocument": {"uri": uri}}
                    if params is not None:
                        request["position"] = params
                    await self.client.call(
                        "lsp.request",
                        {
                            "sessionId": session_id,
                            "method": method,
                            "params": request,
                            "timeoutMilliseconds": 10_000,
                        },
                    )
                    if self.rng.random() < 0.1:
                        # A long poll the client gives up on.
                        await self.client.call(
                            "lsp.waitEvents",
                            {"sessionId": session_id, "timeoutMilliseconds": 30_000},
                            cancel_after_s=self.rng.uniform(0.05, 0.5),
                        )
                    if time.monotonic() - last_restart > restart_every_s:
                        last_restart = time.monotonic()
                        self.tally.restarts += 1
                        await self.client.call("lsp.restartServer", {"sessionId": session_id})
                    await self._sleep(0.5, 2.0)
            finally:
                drain.cancel()
                with trio.CancelScope(shield=True):
                    await self.client.call("lsp.stopServer", {"sessionId": session_id})
                    await self.client.call("lsp.destroyServer", {"sessionId": session_id})

    # debugpy

    async def debugger(self, recreate_every_s: float) -> None:
        target = _write(os.path.join(self.workdir, "debuggee.py"), DEBUGGEE)
        while True:
            await self._debug_session(target, recreate_every_s)
            self.tally.restarts += 1

    async def _debug_session(self, target: str, lifetime_s: float) -> None:
        created = await self.client.result(
            "debug.createSession",
            {
                "adapterId": "debugpy",
                "rootPath": self.workdir,
                "adapter": {"executable": PY, "arguments": ["-m", "debugpy.adapter"]},
            },
        )
        sid = {"sessionId": created["sessionId"]}
        try:
            await self.client.call(
                "debug.setBreakpoints",
                {**sid, "path": target, "breakpoints": [{"line": DEBUGGEE_BREAK_LINE}]},
            )
            await self.client.call(
                "debug.launch",
                {
                    **sid,
                    "configuration": {
                        "program": target,
                        "console": "internalConsole",
                        "cwd": self.workdir,
                    },
                    "timeoutMilliseconds": 60_000,
                },
            )
            until = time.monotonic() + lifetime_s
            while time.monotonic() < until:
                reply = await self.client.call(
                    "debug.waitEvents", {**sid, "timeoutMilliseconds": 2000}
                )
                events = (reply.get("result") or {}).get("events") or []
                stopped = [e for e in events if e.get("event") == "stopped"]
                if not stopped:
                    continue
                self.tally.stops += 1
                thread = {"threadId": stopped[-1]["threadId"]}
                await self.client.call("debug.inspect", {**sid, "kind": "stackTrace", **thread})
                await self._sleep(0.2, 1.5)
                await self.client.call("debug.execute", {**sid, "command": "continue", **thread})
        finally:
            with trio.CancelScope(shield=True):
                await self.client.call("debug.disconnect", sid)
                await self.client.call("debug.destroySession", sid)

    # terminals

    async def terminal(self, recreate_every_s: float) -> None:
        bash = shutil.which("bash") or "bash"
        while True:
            created = await self.client.result(
                "terminal.create",
                {"executable": bash, "arguments": ["--norc", "--noprofile"], "cwd": self.workdir},
            )
            tid = {"terminalID": created["terminalID"]}
            drain = trio.CancelScope()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        self._drain, "terminal", "terminalID", tid["terminalID"], drain
                    )
                    until = time.monotonic() + recreate_every_s
                    while time.monotonic() < until:
                        if self.rng.random() < 0.5:
                            await self.client.call(
                                "terminal.write", {**tid, "data": "yes | head -c 300000\n"}
                            )
                        else:
                            await self.client.call(
                                "terminal.resize",
                                {
                                    **tid,
                                    "rows": self.rng.randint(10, 60),
                                    "cols": self.rng.randint(40, 200),
                                },
                            )
                        await self._sleep(1.0, 4.0)
                    drain.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    await self.client.call("terminal.dispose", tid)
            self.tally.restarts += 1

    # jobs

    async def jobs(self) -> None:
        program = (
            "import time\nfor i in range(200):\n    print('line', i, flush=True)\n"
            "    time.sleep(0.01)\n"
        )
        for number in itertools.count():
            root = os.path.join(self.workdir, f"lane-{number % 4}")
            os.makedirs(root, exist_ok=True)
            reply = await self.client.call(
                "job.start", {"kind": "command", "root": root, "argv": [PY, "-c", program]}
            )
            job_id = (reply.get("result") or {}).get("jobId")
            self.tally.jobs += 1
            if job_id is not None and self.rng.random() < 0.5:
                await self._sleep(0.05, 2.0)
                self.tally.jobs_cancelled += 1
                await self.client.call("job.cancel", {"jobId": job_id})
            await self._sleep(0.5, 2.0)

    # the slow reader

    async def slow_reader(self, every_s: float, pause_s: float) -> None:
        while True:
            await trio.sleep(every_s)
            self.tally.slow_pauses += 1
            with self.client.paused():
                await trio.sleep(pause_s)


def _write(path: str, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


# -- sampling -------------------------------------------------------------------------------


def _status(pid: int) -> dict[str, str]:
    found: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            found[name] = value.strip()
    return found


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _descendants(pid: int) -> int:
    count = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            count += len(children)
            stack.extend(children)
    return count


class Sampler:
    def __init__(self, pid: int, started: float) -> None:
        self.pid = pid
        self.started = started
        self.samples: list[Sample] = []
        self._ticks = _cpu_ticks(pid)
        self._at = time.monotonic()

    def take(self, *, keep: bool = True) -> Sample:
        now = time.monotonic()
        ticks = _cpu_ticks(self.pid)
        cpu = (ticks - self._ticks) / _CLK_TCK / max(now - self._at, 1e-6) * 100
        self._ticks, self._at = ticks, now
        status = _status(self.pid)
        sample = Sample(
            minute=(now - self.started) / 60,
            rss_mib=int(status["VmRSS"].split()[0]) / 1024,
            fds=len(os.listdir(f"/proc/{self.pid}/fd")),
            threads=int(status["Threads"]),
            cpu_percent=cpu,
            processes=_descendants(self.pid),
        )
        if keep:
            self.samples.append(sample)
        return sample


def check_bounds(samples: list[Sample], warmup: int) -> list[str]:
    """The vitals that grew past :data:`BOUNDS` over the baseline (sample ``warmup``)."""
    if len(samples) <= warmup:
        return []
    base = samples[warmup].to_json()
    rest = [s.to_json() for s in samples[warmup:]]
    found: list[str] = []
    for name in ("rssMiB", "fds", "threads", "processes"):
        bound = BOUNDS[name][0]
        peak = max(s[name] for s in rest)
        if peak - base[name] > bound:
            found.append(
                f"{name} grew from {base[name]} to {peak} (bound: +{bound:g}): {BOUNDS[name][1]}"
            )
    if len(rest) >= 6:
        third = len(rest) // 3
        first = statistics.mean(s["cpuPercent"] for s in rest[:third])
        last = statistics.mean(s["cpuPercent"] for s in rest[-third:])
        if last - first > BOUNDS["cpuPercent"][0]:
            found.append(
                f"cpuPercent rose from {first:.1f} to {last:.1f} (bound: +"
                f"{BOUNDS['cpuPercent'][0]:g}): {BOUNDS['cpuPercent'][1]}"
            )
    return found


def plot(samples: list[Sample], path: str, title: str) -> None:
    """Draw the vitals over time (matplotlib, the ``bench`` extra) into a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s.minute for s in samples]
    panels: list[tuple[str, list[float]]] = [
        ("resident memory (MiB)", [s.rss_mib for s in samples]),
        ("open descriptors", [float(s.fds) for s in samples]),
        ("threads", [float(s.threads) for s in samples]),
        ("CPU (% of one core)", [s.cpu_percent for s in samples]),
        ("live descendants", [float(s.processes) for s in samples]),
    ]
    figure, axes = plt.subplots(len(panels), 1, figsize=(8, 10), sharex=True)
    for axis, (label, values) in zip(axes, panels, strict=True):
        axis.plot(minutes, values, marker=".", linewidth=1)
        axis.set_ylabel(label, fontsize=8)
        axis.set_ylim(bottom=0, top=max(max(values) * 1.3, 1.0))
        axis.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


# -- the run --------------------------------------------------------------------------------


def _job_findings(events: list[dict[str, Any]]) -> list[str]:
    finished: dict[str, int] = {}
    started: set[str] = set()
    for message in events:
        params = message.get("params") or {}
        job_id = str(params.get("jobId"))
        if message["method"] == "job.started":
            started.add(job_id)
        elif message["method"] == "job.finished":
            finished[job_id] = finished.get(job_id, 0) + 1
    found = [f"job {j} finished {n} times" for j, n in finished.items() if n != 1]
    found += [f"job {j} started and never finished" for j in started - set(finished)]
    return found


async def run(args: argparse.Namespace) -> tuple[Tally, list[Sample]]:
    tally = Tally()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"soak: {args.minutes} minutes, seed {seed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="supervisor-soak-") as workdir:
        process = await trio.lowlevel.open_process(
            [PY, "-m", "supervisor", "--log-level", "ERROR", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
        )
        client = Client(process, tally)
        started = time.monotonic()
        samplers: list[Sampler] = []
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.read_loop)
                await client.result("initialize", {"capabilities": {}})
                worker = serving_pid(process.pid)
                sampler = Sampler(worker, started)
                samplers.append(sampler)
                soak = Soak(client, tally, workdir, seed)
                work = trio.CancelScope(deadline=trio.current_time() + args.minutes * 60)
                with work:
                    async with trio.open_nursery() as loops:
                        pylsp = shutil.which("pylsp") or os.path.join(os.path.dirname(PY), "pylsp")
                        ruff = shutil.which("ruff") or os.path.join(os.path.dirname(PY), "ruff")
                        restart = args.restart_every_seconds
                        loops.start_soon(soak.language_server, "pylsp", [pylsp], restart)
                        loops.start_soon(soak.language_server, "ruff", [ruff, "server"], restart)
                        loops.start_soon(soak.debugger, restart)
                        loops.start_soon(soak.terminal, restart)
                        loops.start_soon(soak.terminal, restart * 1.5)
                        loops.start_soon(soak.jobs)
                        loops.start_soon(
                            soak.slow_reader,
                            args.slow_reader_every_seconds,
                            args.slow_reader_seconds,
                        )
                        while True:
                            await trio.sleep(args.sample_seconds)
                            sample = sampler.take()
                            print(json.dumps(sample.to_json()), flush=True)
                # The loops ended their sessions (shielded); the last events settle.
                await trio.sleep(2)
                tally.after = sampler.take(keep=False)
                shutdown = await client.call("shutdown")
                if "error" in shutdown:
                    tally.violations.append(f"shutdown failed: {shutdown['error']}")
                await client.send({"jsonrpc": "2.0", "method": "exit"})
                with trio.move_on_after(60):
                    await client.closed.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(30):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        left = client.unanswered()
        if left:
            tally.violations.append(f"{len(left)} requests never answered: {', '.join(left[:10])}")
        tally.violations += _job_findings(client.job_events)
        if process.returncode != 0:
            tally.violations.append(f"serve exited {process.returncode} after shutdown and exit")
        samples = samplers[0].samples if samplers else []
        tally.violations += check_bounds(samples, warmup=args.warmup_samples)
    return tally, samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--sample-seconds", type=float, default=60.0)
    p.add_argument(
        "--warmup-samples",
        type=int,
        default=1,
        help="samples before the baseline (the baseline is the next one)",
    )
    p.add_argument("--restart-every-seconds", type=float, default=240.0)
    p.add_argument("--slow-reader-every-seconds", type=float, default=180.0)
    p.add_argument(
        "--slow-reader-seconds",
        type=float,
        default=5.0,
        help="how long the client stops reading each time",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", default=None, help="write the samples and the verdict here")
    p.add_argument("--plot", default=None, help="draw the vitals into this PNG (matplotlib)")
    args = p.parse_args(argv)
    tally, samples = trio.run(run, args)
    verdict = {
        "minutes": args.minutes,
        "samples": [s.to_json() for s in samples],
        "requests": tally.requests,
        "answers": tally.answers,
        "cancels": tally.cancels,
        "jobs": tally.jobs,
        "jobsCancelled": tally.jobs_cancelled,
        "debugStops": tally.stops,
        "restarts": tally.restarts,
        "slowReaderPauses": tally.slow_pauses,
        "afterSessionsEnded": tally.after.to_json() if tally.after is not None else None,
        "errors": tally.errors,
        "violations": tally.violations,
        "bounds": {name: bound for name, (bound, _) in BOUNDS.items()},
        "ok": not tally.violations,
    }
    print(json.dumps({k: v for k, v in verdict.items() if k != "samples"}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(verdict, f, indent=1)
    if args.plot and samples:
        plot(
            samples,
            args.plot,
            f"supervisor serve, {args.minutes:g}-minute soak: {tally.requests} requests,"
            f" {tally.jobs} jobs, {tally.stops} debug stops, {tally.restarts} restarts",
        )
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
