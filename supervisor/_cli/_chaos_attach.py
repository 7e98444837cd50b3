"""Chaos for backends (``supervisor chaos --attach``): clients attach, detach and reattach
at random moments while jobs, one-shot processes and terminals run, checked every round.

Each round starts a backend (:func:`~supervisor._cli._listen.serve_listen`, in this
process) on a fresh socket, with a *witness* client attached throughout that receives the
job notifications. Then ``random.Random(f"{seed}-{round}")`` draws a few clients; each
attaches at a random moment, starts a job (printing a known number of lines), a
``process.run`` that would sleep for a minute and a terminal write, then detaches at a
random moment -- by vanishing (end of input, requests in flight) or by ``shutdown`` and
``exit`` -- and half of them reattach as a new client that lists ``core.sessions`` and checks
that its job is there. Checks after the round:

- nothing lost: every job's ``job.finished`` reached the witness exactly once, with all of
  its output lines in order;
- nothing answered twice: no client got two replies to one request, and a client that
  detached in order got exactly one reply to each request;
- a vanished client's ``process.run`` ended with it (its pid is gone), and the terminals
  live on until the backend ends;
- nothing left: after ``shutdown {"scope": "backend"}`` every recorded pid is gone and the
  socket is removed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import trio

from .._endpoint import EndpointClosed, JSONRPCError, open_jsonrpc_endpoint
from .._process._procfs import read_stat

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue

    from .._endpoint import JSONRPCEndpoint

__all__ = ("AttachChaosReport", "run_attach_chaos")

#: How long one round may take before it counts as a violation (seconds).
_ROUND_BOUND_S: Final = 60.0
_JOB_LINES: Final = 20


@dataclass
class AttachChaosReport:
    """What ``supervisor chaos --attach`` found.

    Attributes:
        seed: The seed.
        rounds: Rounds run.
        clients: Clients attached in all (the witnesses aside).
        detaches: ``{"vanish": n, "shutdown": n}``.
        reattaches: Clients that attached again after a detach.
        violations: ``"round N: what"`` for each check that failed (empty: all passed).
    """

    seed: int
    rounds: int = 0
    clients: int = 0
    detaches: dict[str, int] = field(default_factory=lambda: {"vanish": 0, "shutdown": 0})
    reattaches: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether no round had a violation."""
        return not self.violations

    def to_json(self) -> JSONObject:
        """The wire form (``--json``)."""
        return {
            "seed": self.seed,
            "rounds": self.rounds,
            "clients": self.clients,
            "detaches": dict(self.detaches),
            "reattaches": self.reattaches,
            "violations": list(self.violations),
            "ok": self.ok,
        }

    def summary(self) -> str:
        """One line for people."""
        return (
            f"attach chaos: seed {self.seed}, {self.rounds} rounds, {self.clients} clients,"
            f" {self.detaches['vanish']} vanished, {self.detaches['shutdown']} shut down,"
            f" {self.reattaches} reattached, {len(self.violations)} violations"
        )


class _Client:
    """One connection to the backend, counting the replies to each of its requests."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.notifications: list[JSONObject] = []
        self.replies: dict[int, int] = {}
        self.sent = 0

    async def handle_notification(self, method: str, params: JSONValue | None) -> None:
        if isinstance(params, dict):
            self.notifications.append({"method": method, **params})

    async def handle_request(self, method: str, params: JSONValue | None) -> JSONValue:
        raise JSONRPCError(-32601, f"no such method: {method}")


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _alive(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and stat.state not in ("Z", "X")


async def _until_gone(pids: list[int], bound_s: float) -> list[int]:
    with trio.move_on_after(bound_s):
        while any(_alive(pid) for pid in pids):  # noqa: ASYNC110 - other processes: no event
            await trio.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


async def _read_pid(path: str, bound_s: float) -> int | None:
    with trio.move_on_after(bound_s):
        while True:
            with contextlib.suppress(OSError, ValueError), open(path) as f:  # noqa: ASYNC230
                return int(f.read())
            await trio.sleep(0.02)
    return None


class _Round:
    def __init__(self, report: AttachChaosReport, index: int, workdir: str) -> None:
        self.report = report
        self.index = index
        self.rng = random.Random(f"{report.seed}-{index}")
        self.workdir = workdir
        self.path = os.path.join(workdir, "b.sock")
        self.jobs: dict[str, str] = {}  # job id -> client name
        self.recorded: list[int] = []
        self.terminals: list[JSONValue] = []

    def violation(self, text: str) -> None:
        self.report.violations.append(f"round {self.index}: {text}")

    async def run(self) -> None:
        from ._listen import serve_listen

        with trio.move_on_after(_ROUND_BOUND_S) as bound:
            async with trio.open_nursery() as nursery:
                await nursery.start(functools.partial(serve_listen, self.path, idle_grace_ms=None))
                witness = _Client("witness")
                async with self._connect(witness) as endpoint:
                    await endpoint.request("initialize", {"capabilities": {}})
                    async with trio.open_nursery() as clients:
                        for number in range(self.rng.randint(1, 4)):
                            clients.start_soon(self._client, number, self.rng.random())
                    await self._await_jobs(witness)
                    await self._check_witness(witness)
                    alive = await endpoint.request("core.sessions", {})
                    terminals = alive.get("terminals") if isinstance(alive, dict) else None
                    for terminal in terminals if isinstance(terminals, list) else []:
                        if not isinstance(terminal, dict):
                            continue
                        if terminal.get("state") != "running":
                            self.violation(f"terminal {terminal.get('terminalID')} ended early")
                        if isinstance(pid := terminal.get("pid"), int):
                            self.recorded.append(pid)
                    await endpoint.request("shutdown", {"scope": "backend"})
                    await endpoint.notify("exit")
        if bound.cancelled_caught:
            self.violation(f"did not end within {_ROUND_BOUND_S:.0f} s")
        left = await _until_gone(self.recorded, 5.0)
        if left:
            self.violation(f"processes outlived the backend: {left}")
        if _exists(self.path):
            self.violation("the socket outlived the backend")

    @contextlib.asynccontextmanager
    async def _connect(self, client: _Client) -> AsyncIterator[JSONRPCEndpoint]:
        stream = await trio.open_unix_socket(self.path)
        async with open_jsonrpc_endpoint(
            stream,
            stream,
            request_handler=client.handle_request,
            notification_handler=client.handle_notification,
            name=client.name,
        ) as endpoint:
            yield endpoint

    async def _client(self, number: int, delay: float) -> None:
        await trio.sleep(delay * 0.3)
        name = f"c{number}"
        client = _Client(name)
        self.report.clients += 1
        vanish = self.rng.random() < 0.5
        reattach = self.rng.random() < 0.5
        stay_s = self.rng.uniform(0.0, 0.4)
        pid_file = os.path.join(self.workdir, f"{name}.run.pid")
        job_id: str | None = None
        run_answers: list[str] = []
        async with self._connect(client) as endpoint:
            await endpoint.request("initialize", {"capabilities": {}})
            script = (
                "import time\n"
                f"for i in range({_JOB_LINES}):\n"
                "    print('line', i, flush=True); time.sleep(0.01)\n"
            )
            # A root of its own: a test job replaces the one running on its root.
            root = os.path.join(self.workdir, name)
            os.makedirs(root, exist_ok=True)
            started = await endpoint.request(
                "job.start",
                {"kind": "test", "root": root, "argv": [sys.executable, "-c", script]},
            )
            assert isinstance(started, dict)
            job_id = str(started["jobId"])
            self.jobs[job_id] = name
            terminal = await endpoint.request(
                "terminal.create",
                {"executable": "sh", "arguments": ["-c", "exec cat"]},
            )
            assert isinstance(terminal, dict)
            self.terminals.append(terminal["terminalID"])
            await endpoint.request(
                "terminal.write", {"terminalID": terminal["terminalID"], "data": f"{name}\n"}
            )

            async def one_shot() -> None:
                sleeper = (
                    f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid()));"
                    " time.sleep(60)"
                )
                try:
                    await endpoint.request("process.run", {"argv": [sys.executable, "-c", sleeper]})
                    run_answers.append("result")
                except JSONRPCError as exc:
                    run_answers.append(f"error {exc.code}")
                except EndpointClosed:
                    pass

            async with trio.open_nursery() as inner:
                inner.start_soon(one_shot)
                run_pid = await _read_pid(pid_file, 10.0)
                if run_pid is None:
                    self.violation(f"{name}: its process.run never started")
                else:
                    self.recorded.append(run_pid)
                await trio.sleep(stay_s)
                if vanish:
                    self.report.detaches["vanish"] += 1
                    inner.cancel_scope.cancel()
                else:
                    self.report.detaches["shutdown"] += 1
                    # shutdown waits for the requests in flight: the sleeper must end first.
                    if run_pid is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(run_pid, 9)
                    await endpoint.request("shutdown", {})
                    await endpoint.notify("exit")
            if not vanish and len(run_answers) != 1:
                self.violation(f"{name}: process.run answered {len(run_answers)} times")
        if vanish and run_pid is not None and await _until_gone([run_pid], 10.0):
            self.violation(f"{name}: its process.run outlived its vanished client")
        if reattach:
            self.report.reattaches += 1
            again = _Client(f"{name}-again")
            async with self._connect(again) as endpoint:
                await endpoint.request("initialize", {"capabilities": {}})
                alive = await endpoint.request("core.sessions", {})
                assert isinstance(alive, dict)
                jobs = alive.get("jobs")
                listed = (
                    [j.get("id") for j in jobs if isinstance(j, dict)]
                    if isinstance(jobs, list)
                    else []
                )
                if job_id not in listed:
                    self.violation(f"{name}: its job {job_id} is not in core.sessions")
                terminals = alive.get("terminals")
                ids = (
                    [t.get("terminalID") for t in terminals if isinstance(t, dict)]
                    if isinstance(terminals, list)
                    else []
                )
                if not set(self.terminals) <= set(ids):
                    self.violation(f"{name}: a terminal is missing from core.sessions")
                await endpoint.request("shutdown", {})
                await endpoint.notify("exit")

    async def _await_jobs(self, witness: _Client) -> None:
        with trio.move_on_after(30.0):
            while True:
                finished = {
                    n.get("jobId") for n in witness.notifications if n["method"] == "job.finished"
                }
                if set(self.jobs) <= finished:
                    return
                await trio.sleep(0.05)

    async def _check_witness(self, witness: _Client) -> None:
        expected = "".join(f"line {i}\n" for i in range(_JOB_LINES))
        for job_id, name in self.jobs.items():
            finished = [
                n
                for n in witness.notifications
                if n["method"] == "job.finished" and n.get("jobId") == job_id
            ]
            if len(finished) != 1:
                self.violation(f"{name}: job {job_id} finished {len(finished)} times")
                continue
            text = "".join(
                str(n.get("text", ""))
                for n in witness.notifications
                if n["method"] == "job.output" and n.get("jobId") == job_id
            )
            if text != expected:
                status = finished[0].get("status")
                self.violation(f"{name}: job {job_id} ({status}) output lost: {text!r}")


async def run_attach_chaos(rounds: int, seed: int) -> AttachChaosReport:
    """Run ``rounds`` seeded rounds of attach/detach/reattach chaos; see the module doc."""
    report = AttachChaosReport(seed)
    for index in range(rounds):
        # Short: a Unix socket's path has at most 107 bytes.
        workdir = tempfile.mkdtemp(prefix="sv-chaos-", dir="/tmp")
        try:
            await _Round(report, index, workdir).run()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        report.rounds += 1
    return report
