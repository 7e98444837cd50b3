"""The chaos runner: random, seeded mixes of misbehaving programs, checked after every round.

Contract (issue 7 "A chaos runner"): each round starts a random mix of scenario programs as
``process.run`` calls, jobs and sessions (a JSON-RPC endpoint on the program's stdio, as a
language-server session has), and cancels them, gives them deadlines, or lets them finish, at
random moments. Everything random comes from ``random.Random(f"{seed}-{round}")``, so a seed
and a round number reproduce a round exactly (the programs' own timing aside). After each
round it checks:

- no process carrying this supervisor instance's scope marker survives (the round's trees
  are all ended) and this process has no zombie child (invariants 2, 3);
- every step ended exactly once and within its bound (a result, an error code, cancelled,
  timed out, or "the session ended"; invariant 4);
- every job got exactly one ``job.finished`` with a status, after at most one
  ``job.started``;
- the supervisor's memory stays bounded (resident size, event queue) and it keeps answering
  ``core.ping`` (invariant 6).

A round with a violation is shrunk: steps are removed one at a time while the round still
fails, and the shortest failing step list is reported with the seed.

Sessions run two ways: an endpoint on the program's stdio (always), and, when the Core has
the ``lsp.*`` service, real language-server sessions (``lsp.startServer``, ``lsp.request``,
``lsp.cancelOperation``, ``lsp.stopServer``), whose every request must get exactly one
``requestCompleted`` event.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

from .._core import open_core
from .._endpoint import EndpointClosed, JSONRPCError
from .._marker import SCOPE_ENV, instance_id
from .._procfs import all_pids, children_of, read_env_var, read_stat
from .._reaper import reap_adopted_children
from ._fixtures import open_scenario_session
from ._scenarios import program_argv

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject, JSONValue

    from .._core import Core

__all__ = ("BASE_VIAS", "ChaosReport", "ChaosStep", "plan_round", "run_chaos")

#: How long one step may take before it counts as "never ended", in seconds (generous: the
#: worst legitimate step is a TERM grace plus a kill wait plus a slow start).
STEP_BOUND_S: Final = 30.0
#: How long a round's leftovers may take to disappear after every step ended, in seconds.
SETTLE_S: Final = 3.0
#: Growth of the resident set size over the first round's that counts as unbounded, in bytes.
DEFAULT_MAX_RSS_GROWTH_BYTES: Final = 256 * 1024 * 1024
#: The most steps in one round.
DEFAULT_MAX_STEPS: Final = 4

#: Plain programs (process.run and jobs), with whether they end by themselves.
_PLAIN: Final[dict[str, bool]] = {
    "exit-signal": True,
    "grandchild-setsid": True,
    "daemon": True,
    "zombie-maker": True,
    "flood-stdout": True,
    "flood-stderr": True,
    "hang": False,
    "ignore-sigterm": False,
    "terminal-ignore-hangup": False,
    "crash-on-initialize": True,  # stdin is /dev/null: a protocol program sees EOF and exits
}
#: LSP programs run as sessions.
_SESSIONS: Final = (
    "well-behaved",
    "crash-on-initialize",
    "no-shutdown-reply",
    "answer-after-cancel",
    "double-answer",
    "unknown-id",
    "exit-with-pending",
    "malformed-header",
    "char-content-length",
    "request-storm",
    "oversized-notification",
    "stdin-stall",
)
#: Programs that take seconds to end by design (TERM is ignored): picked less often.
_SLOW: Final = frozenset({"ignore-sigterm", "terminal-ignore-hangup"})
_JOB_STATUSES: Final = frozenset({"ok", "failed", "cancelled", "denied", "superseded"})
#: Ways a step runs with the foundation's services alone (sessions: an endpoint on the
#: program's stdio, weighted double so protocol misbehaviour is frequent).
BASE_VIAS: Final = ("process.run", "job", "session", "session")
#: Core error codes that mean the runner or the Core is wrong, not the program.
_BUG_CODES: Final = frozenset({"invalid_request", "not_supported", "internal"})


@dataclass(frozen=True)
class ChaosStep:
    """One thing a round does.

    Attributes:
        scenario: The scenario name.
        via: ``"process.run"``, ``"job"``, ``"session"`` (an endpoint on the program's
            stdio) or ``"lsp"`` (an ``lsp.*`` session of the Core).
        action: ``"finish"`` (let it end by itself), ``"cancel"`` (cancel it after
            ``at_ms``) or ``"deadline"`` (a deadline of ``at_ms``).
        at_ms: When the cancel comes, or the deadline, in milliseconds from the step's start.
    """

    scenario: str
    via: str
    action: str
    at_ms: int

    def describe(self) -> str:
        """A one-line human form, e.g. ``job hang deadline@300ms``."""
        when = f"@{self.at_ms}ms" if self.action != "finish" else ""
        return f"{self.via} {self.scenario} {self.action}{when}"

    def to_json(self) -> JSONObject:
        """The wire form (``--json``)."""
        return {
            "scenario": self.scenario,
            "via": self.via,
            "action": self.action,
            "atMilliseconds": self.at_ms,
        }


@dataclass
class ChaosReport:
    """The counts and verdict of a chaos run.

    Attributes:
        seed: The seed.
        iterations: Rounds run.
        scenarios_run: Steps run (each one scenario program).
        cancels: Steps cancelled on purpose.
        deadlines: Steps given a deadline.
        processes_started: Processes the programs reported starting (pid files).
        processes_reaped: Of those, the ones gone (exited and reaped) after their round.
        violations: What went wrong, one line each (empty: the run passed).
        failing_round: The first round with a violation, or None.
        failing_steps: The shortest step list found that still fails that round.
    """

    seed: int
    iterations: int = 0
    scenarios_run: int = 0
    cancels: int = 0
    deadlines: int = 0
    processes_started: int = 0
    processes_reaped: int = 0
    violations: list[str] = field(default_factory=list)
    failing_round: int | None = None
    failing_steps: list[ChaosStep] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when there was no violation."""
        return not self.violations

    def to_json(self) -> JSONObject:
        """The wire form printed by ``supervisor chaos --json``."""
        return {
            "seed": self.seed,
            "iterations": self.iterations,
            "scenariosRun": self.scenarios_run,
            "cancels": self.cancels,
            "deadlines": self.deadlines,
            "processesStarted": self.processes_started,
            "processesReaped": self.processes_reaped,
            "violations": list(self.violations),
            "failingRound": self.failing_round,
            "failingSteps": [step.to_json() for step in self.failing_steps],
            "ok": self.ok,
        }

    def summary(self) -> str:
        """The counts as one line of text."""
        return (
            f"seed {self.seed}: {self.iterations} rounds, {self.scenarios_run} scenarios,"
            f" {self.cancels} cancels, {self.deadlines} deadlines,"
            f" {self.processes_started} processes started, {self.processes_reaped} reaped,"
            f" {len(self.violations)} violations"
        )


def plan_round(
    seed: int,
    round_index: int,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    vias: tuple[str, ...] = BASE_VIAS,
) -> list[ChaosStep]:
    """The steps of one round: a pure function of its arguments.

    Args:
        seed: The run's seed.
        round_index: The round, from 0.
        max_steps: The most steps in a round (at least 1).
        vias: How steps may run: :data:`BASE_VIAS`, plus ``"lsp"`` when the Core has the
            ``lsp.*`` service (``lsp.startServer``).

    Returns:
        One to ``max_steps`` steps.
    """
    rng = random.Random(f"{seed}-{round_index}")
    steps: list[ChaosStep] = []
    for _ in range(rng.randint(1, max(1, max_steps))):
        via = rng.choice(vias)
        if via in ("session", "lsp"):
            scenario = rng.choice(_SESSIONS)
            ends_alone = True  # the session script bounds every request itself
        else:
            names = [n for n in _PLAIN if n not in _SLOW or rng.random() < 0.15]
            scenario = rng.choice(names)
            ends_alone = _PLAIN[scenario]
        actions = ("finish", "cancel", "deadline") if ends_alone else ("cancel", "deadline")
        action = rng.choice(actions)
        steps.append(ChaosStep(scenario, via, action, rng.randint(20, 800)))
    return steps


def _program(step: ChaosStep, pid_file: str) -> list[str]:
    # Small sizes keep a round short; the long benchmark run covers the big floods.
    flood = step.scenario in ("flood-stdout", "flood-stderr")
    leaves = step.scenario in ("grandchild-setsid", "daemon", "zombie-maker")
    return program_argv(
        step.scenario,
        pid_file=pid_file,
        size_bytes=2 * 1024 * 1024 if flood else None,
        count=3 if step.scenario == "zombie-maker" else None,
        exit_after_setup=leaves,
    )


class _Round:
    """One round's execution and bookkeeping."""

    def __init__(self, core: Core, steps: list[ChaosStep], label: str, workdir: str) -> None:
        self.core = core
        self.steps = steps
        self.label = label
        self.workdir = workdir
        self.violations: list[str] = []
        self.outcomes: dict[int, list[str]] = {i: [] for i in range(len(steps))}
        self.job_ids: dict[str, int] = {}
        self.job_events: list[JSONObject] = []
        self.pid_files = [os.path.join(workdir, f"{label}-{i}.pids") for i in range(len(steps))]

    def outcome(self, index: int, what: str) -> None:
        self.outcomes[index].append(what)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            drain = trio.CancelScope()
            nursery.start_soon(self._drain_job_events, drain)
            async with trio.open_nursery() as steps:
                for index, step in enumerate(self.steps):
                    steps.start_soon(self._bounded, index, step)
            # Every job has finished now; its last events may still be in the queue.
            drain.cancel()
        self.job_events.extend(_events(self.core.job_events.poll()))

    async def _drain_job_events(self, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                self.job_events.extend(_events(await self.core.job_events.wait(60_000)))

    async def _bounded(self, index: int, step: ChaosStep) -> None:
        with trio.move_on_after(STEP_BOUND_S) as bound:
            if step.via == "process.run":
                await self._process_run(index, step)
            elif step.via == "job":
                await self._job(index, step)
            elif step.via == "lsp":
                await self._lsp(index, step)
            else:
                await self._session(index, step)
        if bound.cancelled_caught:
            self.violations.append(f"step {index} ({step.describe()}) did not end in time")
            self.outcome(index, "unbounded")

    async def _process_run(self, index: int, step: ChaosStep) -> None:
        operation_id = f"{self.label}-{index}"
        argv: list[JSONValue] = list(_program(step, self.pid_files[index]))
        payload: JSONObject = {"argv": argv}
        timeout_ms: int | None = None
        if step.action == "deadline":
            # Either the command's own timeout or the envelope's deadline.
            if step.at_ms % 2:
                payload["timeoutMilliseconds"] = step.at_ms
            else:
                timeout_ms = step.at_ms
        async with trio.open_nursery() as nursery:
            if step.action == "cancel":
                nursery.start_soon(self._cancel_later, operation_id, step.at_ms)
            try:
                result = await self.core.call(
                    "process.run", payload, operation_id=operation_id, timeout_ms=timeout_ms
                )
            except CoreError as exc:
                self.outcome(index, exc.code)
                if exc.code not in ("cancelled", "timed_out"):
                    self.violations.append(f"step {index} ({step.describe()}): {exc.code}")
            else:
                self.outcome(index, "timed out" if _get(result, "timedOut") else "result")
            nursery.cancel_scope.cancel()

    async def _cancel_later(self, operation_id: str, at_ms: int) -> None:
        await trio.sleep(at_ms / 1000)
        self.core.cancel(operation_id)

    async def _job(self, index: int, step: ChaosStep) -> None:
        root = os.path.join(self.workdir, f"root-{self.label}-{index}")
        os.makedirs(root, exist_ok=True)
        argv: list[JSONValue] = list(_program(step, self.pid_files[index]))
        payload: JSONObject = {"kind": "test", "root": root, "argv": argv}
        if step.action == "deadline":
            payload["timeoutMilliseconds"] = step.at_ms
        started = await self.core.call("job.start", payload)
        job_id = _get(started, "jobId")
        assert isinstance(job_id, str)
        self.job_ids[job_id] = index
        if step.action == "cancel":
            await trio.sleep(step.at_ms / 1000)
            await self.core.call("job.cancel", {"jobId": job_id})
        # job.list is the Core's own view; the events are checked after the round.
        while True:
            jobs = _list(await self.core.call("job.list", {}))
            if not any(_get(j, "id") == job_id and _get(j, "state") != "finished" for j in jobs):
                break
            await trio.sleep(0.02)
        self.outcome(index, "job ended")

    async def _session(self, index: int, step: ChaosStep) -> None:
        storm = step.scenario == "request-storm"
        oversized = step.scenario == "oversized-notification"
        ended = "cancelled"
        scope = trio.CancelScope()
        if step.action != "finish":
            scope.deadline = trio.current_time() + step.at_ms / 1000
        with scope:
            async with open_scenario_session(
                step.scenario,
                pid_file=self.pid_files[index],
                term_grace_ms=500,
                count=200 if storm else None,
                max_inbound_concurrency=8 if storm else 128,
                size_bytes=2 * 1024 * 1024 if oversized else None,
                max_body_bytes=1024 * 1024 if oversized else 64 * 1024 * 1024,
                write_timeout_ms=300 if step.scenario == "stdin-stall" else 10_000,
            ) as session:
                ended = await _session_script(session.endpoint)
        self.outcome(index, ended if not scope.cancelled_caught else step.action)

    async def _lsp(self, index: int, step: ChaosStep) -> None:
        """A language-server session of the ``lsp.*`` service running the program."""
        argv = _program(step, self.pid_files[index])
        arguments: list[JSONValue] = list(argv[1:])
        try:
            started = await self.core.call(
                "lsp.startServer",
                {
                    "serverId": f"chaos-{self.label}-{index}",
                    "executable": argv[0],
                    "arguments": arguments,
                    "workingDirectory": self.workdir,
                    "rootUri": "file://" + self.workdir,
                    "initializeTimeoutMilliseconds": 3000,
                    "shutdownTimeoutMilliseconds": 1000,
                },
            )
        except CoreError as exc:
            self.outcome(index, exc.code)
            if exc.code in _BUG_CODES:
                self.violations.append(f"step {index} ({step.describe()}): {exc}")
            return
        session_id = _get(started, "sessionId")
        assert isinstance(session_id, str)
        completions: list[JSONObject] = []
        gap = False
        try:
            request: JSONObject = {"sessionId": session_id, "method": "work", "params": {}}
            request["timeoutMilliseconds"] = step.at_ms if step.action == "deadline" else 2000
            try:
                operation_id = _get(await self.core.call("lsp.request", request), "operationId")
            except CoreError as exc:
                operation_id = None
                self.outcome(index, exc.code)
                if exc.code in _BUG_CODES:
                    self.violations.append(f"step {index} ({step.describe()}): {exc}")
            if operation_id is not None:
                if step.action == "cancel":
                    await trio.sleep(step.at_ms / 1000)
                    await self.core.call(
                        "lsp.cancelOperation",
                        {"sessionId": session_id, "operationId": operation_id},
                    )
                with trio.move_on_after(10):
                    while not completions:
                        batch = await self.core.call(
                            "lsp.waitEvents", {"sessionId": session_id, "timeoutMilliseconds": 500}
                        )
                        gap = gap or bool(_get(batch, "gap"))
                        completions += _completions(batch, operation_id)
        finally:
            with trio.CancelScope(shield=True):
                await self.core.call("lsp.stopServer", {"sessionId": session_id})
                batch = await self.core.call("lsp.pollEvents", {"sessionId": session_id})
                await self.core.call("lsp.destroyServer", {"sessionId": session_id})
        if operation_id is None:
            return
        gap = gap or bool(_get(batch, "gap"))
        completions += _completions(batch, operation_id)
        if len(completions) != 1 and not gap:
            self.violations.append(
                f"step {index} ({step.describe()}): request completed {len(completions)} times"
            )
        self.outcome(index, "request completed")

    def check(self, core_pings: bool) -> None:
        for index, seen in self.outcomes.items():
            if len(seen) != 1:
                step = self.steps[index]
                self.violations.append(f"step {index} ({step.describe()}) ended {len(seen)} times")
        finished: dict[str, int] = {}
        started: dict[str, int] = {}
        for event in self.job_events:
            job_id = event.get("jobId")
            if not isinstance(job_id, str) or job_id not in self.job_ids:
                continue
            if event.get("event") == "job.finished":
                finished[job_id] = finished.get(job_id, 0) + 1
                if event.get("status") not in _JOB_STATUSES:
                    self.violations.append(f"job {job_id} finished without a valid status")
            elif event.get("event") == "job.started":
                started[job_id] = started.get(job_id, 0) + 1
        for job_id, index in self.job_ids.items():
            if finished.get(job_id, 0) != 1:
                self.violations.append(
                    f"job of step {index} ({self.steps[index].describe()}) finished"
                    f" {finished.get(job_id, 0)} times"
                )
            if started.get(job_id, 0) > 1:
                self.violations.append(f"job of step {index} started twice")
        if not core_pings:
            self.violations.append("core.ping did not answer")


async def _session_script(endpoint: object) -> str:
    """Initialize, one request, shutdown, exit; each request bounded. Returns how it ended."""
    from .._endpoint import JSONRPCEndpoint

    assert isinstance(endpoint, JSONRPCEndpoint)
    try:
        await endpoint.request("initialize", {"capabilities": {}}, timeout_ms=5000)
        await endpoint.request("work", {"n": 1}, timeout_ms=1000)
        await endpoint.request("shutdown", timeout_ms=1000)
        await endpoint.notify("exit")
    except EndpointClosed:
        return "session ended"
    except trio.TooSlowError:
        return "timed out"
    except JSONRPCError:
        return "error"
    return "result"


def _completions(batch: JSONValue, operation_id: JSONValue) -> list[JSONObject]:
    """The ``requestCompleted`` events of ``operation_id`` in an ``lsp.*Events`` batch."""
    return [
        event
        for event in _events(batch if isinstance(batch, dict) else {})
        if event.get("event") == "requestCompleted" and event.get("operationId") == operation_id
    ]


def _events(batch: JSONObject) -> list[JSONObject]:
    events = batch.get("events")
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


def _get(value: JSONValue, key: str) -> JSONValue:
    return value.get(key) if isinstance(value, dict) else None


def _list(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def _marked_processes(instance: str) -> list[int]:
    """Live processes whose scope marker names ``instance``."""
    prefix = instance + "/"
    me = os.getpid()
    found: list[int] = []
    for pid in all_pids():
        if pid == me:
            continue
        value = read_env_var(pid, SCOPE_ENV)
        if value is not None and value.startswith(prefix):
            stat = read_stat(pid)
            if stat is not None and not stat.dead:
                found.append(pid)
    return found


def _zombie_children() -> list[int]:
    zombies: list[int] = []
    for pid in children_of(os.getpid()):
        stat = read_stat(pid)
        if stat is not None and stat.state == "Z":
            zombies.append(pid)
    return zombies


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _gone(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is None


def _read_pids(path: str) -> list[int]:
    try:
        with open(path) as f:
            return [int(line) for line in f.read().split()]
    except (OSError, ValueError):
        return []


async def _settle(instance: str) -> tuple[list[int], list[int]]:
    """Wait (bounded) until no marked process and no zombie child remain; return what's left."""
    deadline = trio.current_time() + SETTLE_S
    while True:
        reap_adopted_children()
        survivors = _marked_processes(instance)
        zombies = _zombie_children()
        if (not survivors and not zombies) or trio.current_time() >= deadline:
            return survivors, zombies
        await trio.sleep(0.02)


async def _ping(core: Core) -> bool:
    with trio.move_on_after(5):
        return isinstance(await core.call("core.ping", {}), dict)
    return False


async def _run_steps(
    core: Core, steps: list[ChaosStep], label: str, workdir: str, report: ChaosReport | None
) -> list[str]:
    """Run one round's steps and check it; returns its violations (and counts into report)."""
    chaos_round = _Round(core, steps, label, workdir)
    await chaos_round.run()
    pings = await _ping(core)
    chaos_round.check(pings)
    survivors, zombies = await _settle(instance_id())
    for pid in survivors:
        chaos_round.violations.append(f"pid {pid} survived its round")
        with contextlib.suppress(OSError):
            os.kill(pid, 9)  # do not let one leak cascade into the next rounds
    chaos_round.violations.extend(f"pid {pid} is an unreaped zombie" for pid in zombies)
    if report is not None:
        report.scenarios_run += len(steps)
        report.cancels += sum(step.action == "cancel" for step in steps)
        report.deadlines += sum(step.action == "deadline" for step in steps)
        for path in chaos_round.pid_files:
            pids = _read_pids(path)
            report.processes_started += len(pids)
            report.processes_reaped += sum(_gone(pid) for pid in pids)
    return chaos_round.violations


async def run_chaos(
    iterations: int,
    seed: int,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_rss_growth_bytes: int = DEFAULT_MAX_RSS_GROWTH_BYTES,
    shrink: bool = True,
    on_round: Callable[[int, list[ChaosStep], list[str]], None] | None = None,
) -> ChaosReport:
    """Run ``iterations`` seeded rounds against one Core and check each one.

    Stops at the first round with a violation, after shrinking it (when ``shrink``).

    Args:
        iterations: Rounds to run.
        seed: The seed; the same seed plans the same rounds.
        max_steps: The most steps in a round.
        max_rss_growth_bytes: Growth of this process's resident set size over its size after
            the first round that counts as a violation, in bytes.
        shrink: Look for the shortest failing step list of a failing round.
        on_round: Called after each round with ``(round, steps, violations)``.

    Returns:
        A :class:`ChaosReport`.

    Raises:
        ValueError: ``iterations`` is negative or ``max_steps`` is below 1.

    **Cancellation:** cancelling it ends the running round's programs (shielded, bounded),
    then closes the Core, which ends everything else it started.
    """
    if iterations < 0 or max_steps < 1:
        raise ValueError("iterations must be >= 0 and max_steps >= 1")
    report = ChaosReport(seed=seed)
    baseline_rss: int | None = None
    with tempfile.TemporaryDirectory(prefix="supervisor-chaos-") as workdir:
        async with open_core() as core:
            vias = BASE_VIAS + (("lsp",) if "lsp.startServer" in core.commands else ())
            for round_index in range(iterations):
                steps = plan_round(seed, round_index, max_steps=max_steps, vias=vias)
                violations = await _run_steps(core, steps, f"r{round_index}", workdir, report)
                report.iterations += 1
                rss = _rss_bytes()
                if baseline_rss is None:
                    baseline_rss = rss
                elif rss - baseline_rss > max_rss_growth_bytes:
                    violations.append(
                        f"resident memory grew by {rss - baseline_rss} bytes since round 0"
                    )
                queued = core.job_events.statistics().queued
                if queued:
                    violations.append(f"{queued} job events left in the queue after the round")
                if on_round is not None:
                    on_round(round_index, steps, violations)
                if violations:
                    report.violations.extend(f"round {round_index}: {v}" for v in violations)
                    report.failing_round = round_index
                    report.failing_steps = (
                        await _shrink(core, steps, round_index, workdir) if shrink else steps
                    )
                    break
    return report


async def _shrink(
    core: Core, steps: list[ChaosStep], round_index: int, workdir: str
) -> list[ChaosStep]:
    """Remove steps one at a time while the round still fails; at most 2 passes."""
    current = list(steps)
    attempt = 0
    for _ in range(2):
        changed = False
        index = 0
        while index < len(current) and len(current) > 1:
            candidate = current[:index] + current[index + 1 :]
            attempt += 1
            label = f"r{round_index}-shrink{attempt}"
            if await _run_steps(core, candidate, label, workdir, None):
                current = candidate
                changed = True
            else:
                index += 1
        if not changed:
            break
    return current
