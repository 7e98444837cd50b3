"""The chaos runner: random, seeded mixes of misbehaving programs, checked after every round.

Contract: each round starts a random mix of steps -- scenario
programs as ``process.run`` calls, jobs, endpoint sessions (a JSON-RPC endpoint on the
program's stdio) and language servers (``lsp.*``); the testbed plugin backend as a
plugin-owned session with function calls (``lsp.functionRequest``); scenario programs as
debug adapters and debugpy with a real debuggee (``debug.*``); bash or a stubborn PTY program
as terminals (``terminal.*``) -- and cancels them, gives them deadlines, or lets them finish,
at random moments. Everything random comes from ``random.Random(f"{seed}-{round}")`` and the
step itself, so a seed, a round number and the same available peers reproduce a round
exactly (the programs' own timing aside). A kind whose peer is missing (debugpy not
installed, no bash) is skipped and named in the report. After each round it checks:

- no process carrying this supervisor instance's scope marker survives, nor any process a
  step's program recorded in its pid file (a plugin call's children carry the backend's own
  marker), and this process has no zombie child;
- every step ended exactly once and within its bound, and inside it every request,
  function call and debug operation ended exactly once (a result, an error code, cancelled,
  timed out, or "the session ended"), every session exactly once; see
  :mod:`._chaos_sessions`;
- every job got exactly one ``job.finished`` with a status, after at most one
  ``job.started``;
- the supervisor's memory stays bounded (resident size, event queue) and it keeps answering
  ``core.ping``.

A round with a violation is shrunk: steps are removed one at a time while the round still
fails, and the shortest failing step list is reported with the seed.

Cost: a round lasts as long as its slowest step. Programs that ignore SIGTERM cost a TERM
grace (2 s) and servers that never answer ``shutdown`` the stop's bounds, so they are drawn
less often (:data:`_COSTLY`); everything else ends in a fraction of a second.
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

from .._boundary import FAULT_SITES, FaultPlan, arm_faults
from .._core._core import open_core
from .._endpoint import EndpointClosed, JSONRPCError
from .._process._marker import SCOPE_ENV, instance_id, scopes_issued
from .._process._procfs import all_pids, children_of, read_env_var, read_stat
from .._process._reaper import reap_adopted_children
from ._chaos_sessions import (
    StepContext,
    available_peers,
    prepare_workdir,
    relay_snapshot,
    run_debug,
    run_debugpy,
    run_lsp,
    run_plugin,
    run_terminal,
    scenario_program,
)
from ._fixtures import open_scenario_session
from ._order_probe import order_probe

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from protocol import JSONObject, JSONValue

    from .._core._core import Core

__all__ = (
    "ALL_VIAS",
    "VIA_WEIGHTS",
    "ChaosReport",
    "ChaosStep",
    "available_vias",
    "fault_sites",
    "plan_fault",
    "plan_round",
    "run_chaos",
)

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
#: Protocol programs run as sessions (endpoint, language server, debug adapter).
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
#: Terminal programs: bash, and the testbed's PTY program that ignores the hang-up.
_TERMINALS: Final[dict[str, bool]] = {"bash": True, "terminal-ignore-hangup": False}
#: How often a costly program is drawn, relative to the others (1.0), by via. A round lasts
#: as long as its slowest step: most steps end within a fraction of a second, but programs
#: that ignore SIGTERM cost a TERM grace (2 000 ms), a language server that never answers
#: ``shutdown`` (or stops reading) the ``exit`` wait (2 000 ms), a debug adapter the
#: ``disconnect`` and exit waits (3 000 ms). Drawn this rarely, about one round in ten has
#: one, so 200 rounds take two to three minutes; the endpoint sessions end their programs
#: with a short grace of their own, so nothing is costly there.
_COSTLY: Final[dict[str, dict[str, float]]] = {
    "process.run": {
        "ignore-sigterm": 0.05,
        "terminal-ignore-hangup": 0.05,
        "daemon": 0.1,
        "grandchild-setsid": 0.1,
    },
    "lsp": {"no-shutdown-reply": 0.1, "stdin-stall": 0.1},
    "debug": {"no-shutdown-reply": 0.1, "stdin-stall": 0.1},
    "terminal": {"terminal-ignore-hangup": 0.05},
}
_COSTLY["job"] = _COSTLY["process.run"]
_JOB_STATUSES: Final = frozenset({"ok", "failed", "cancelled", "denied", "superseded"})
#: Every way a step runs, with how often it is drawn (relative weights). ``session`` is an
#: endpoint on the program's stdio (the foundation's services alone); the others go through
#: the Core's ``lsp.*`` (``lsp``, ``plugin``), ``debug.*`` (``debug``, ``debugpy``) and
#: ``terminal.*`` commands. debugpy is drawn least: a launch it can't finish makes it
#: ignore ``disconnect`` (a 3 000 ms stop).
VIA_WEIGHTS: Final[dict[str, float]] = {
    "process.run": 1.0,
    "job": 1.0,
    "session": 1.5,
    "lsp": 1.5,
    "plugin": 1.0,
    "debug": 1.5,
    "debugpy": 0.3,
    "terminal": 1.5,
}
#: Every via, in a stable order.
ALL_VIAS: Final = tuple(VIA_WEIGHTS)
#: The Core command each via needs.
_VIA_COMMANDS: Final = {
    "process.run": "process.run",
    "job": "job.start",
    "session": "core.ping",
    "lsp": "lsp.startServer",
    "plugin": "lsp.functionRequest",
    "debug": "debug.createSession",
    "debugpy": "debug.createSession",
    "terminal": "terminal.create",
}


def available_vias(
    commands: Collection[str], missing_peers: Mapping[str, str]
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The vias a Core and this machine can run, and the skipped ones with the reason.

    Args:
        commands: The Core's command names (``Core.commands``).
        missing_peers: Peers that are not installed, by name (``"debugpy"``, ``"bash"``),
            with the reason.

    Returns:
        ``(vias, skipped)``: the usable vias of :data:`ALL_VIAS` and
        ``{name: reason}`` for each via or peer left out.
    """
    skipped: dict[str, str] = {}
    vias: list[str] = []
    for via in ALL_VIAS:
        command = _VIA_COMMANDS[via]
        if command not in commands:
            skipped[via] = f"the Core has no {command}"
        elif via in missing_peers:
            skipped[via] = missing_peers[via]
        else:
            vias.append(via)
    if "terminal" in vias and "bash" in missing_peers:
        skipped["bash"] = missing_peers["bash"]
    return tuple(vias), skipped


@dataclass(frozen=True)
class ChaosStep:
    """One thing a round does.

    Attributes:
        scenario: The scenario name, or the peer that is not a testbed program:
            ``"chaos-backend"`` (``plugin``), ``"debugpy"``, ``"bash"`` (``terminal``).
        via: How it runs: ``"process.run"``, ``"job"``, ``"session"`` (an endpoint on the
            program's stdio), ``"lsp"`` (a language server), ``"plugin"`` (a plugin-owned
            session and its function calls), ``"debug"`` (the program as a debug adapter),
            ``"debugpy"`` or ``"terminal"`` (see :data:`ALL_VIAS`).
        action: ``"finish"`` (let it end by itself), ``"cancel"`` (cancel it after
            ``at_ms``) or ``"deadline"`` (a deadline of ``at_ms``); what each means for a
            session kind is in :mod:`supervisor.testbed._chaos_sessions`.
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
        process_trees_started: Process trees this supervisor started (commands, jobs,
            sessions and their restarts, adapters, terminals and their reopens, backends),
            counted by the scope markers it issued. The processes of a tree's own making
            (children, daemons, a debuggee, a backend call's tools) are not in it.
        processes_recorded: Processes the programs wrote to their pid files: each testbed
            program once it is running (one ended during its start writes nothing), the
            processes it starts, a plugin call's tools, a debuggee.
        processes_reaped: Of the recorded ones, those gone (exited and reaped) after their
            round.
        steps_by_via: Steps run, by via (``{"terminal": 12, ...}``).
        skipped: Vias and peers left out, with the reason (``{"debugpy": "debugpy is not
            installed ..."}``): their steps are never drawn.
        violations: What went wrong, one line each (empty: the run passed).
        failing_round: The first round with a violation, or None.
        failing_steps: The shortest step list found that still fails that round.
        faults_fired: In a fault run (``faults=True``), how often each fault site fired
            (``{"lsp.reader": 3, ...}``); a round whose chosen unit never reached a matching
            site ran without one.
        order_probes: Rounds whose order probe ran (:mod:`._order_probe`: pipelined
            keystrokes and resizes on one terminal, checked against what its program read).
        order_operations: Commands the order probes pipelined, over all rounds.
        fault_run: Whether faults were injected (``faults=True``).
    """

    seed: int
    iterations: int = 0
    scenarios_run: int = 0
    cancels: int = 0
    deadlines: int = 0
    process_trees_started: int = 0
    processes_recorded: int = 0
    processes_reaped: int = 0
    steps_by_via: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    failing_round: int | None = None
    failing_steps: list[ChaosStep] = field(default_factory=list)
    faults_fired: dict[str, int] = field(default_factory=dict)
    order_probes: int = 0
    order_operations: int = 0
    fault_run: bool = False

    @property
    def ok(self) -> bool:
        """True when there was no violation."""
        return not self.violations

    @property
    def faults_never_fired(self) -> list[str]:
        """In a fault run, the fault points (``FAULT_SITES``) that never fired, sorted."""
        if not self.fault_run:
            return []
        return sorted(FAULT_SITES - set(self.faults_fired))

    def to_json(self) -> JSONObject:
        """The wire form printed by ``supervisor chaos --json``."""
        never: list[JSONValue] = list(self.faults_never_fired)
        return {
            "seed": self.seed,
            "iterations": self.iterations,
            "scenariosRun": self.scenarios_run,
            "cancels": self.cancels,
            "deadlines": self.deadlines,
            "processTreesStarted": self.process_trees_started,
            "processesRecorded": self.processes_recorded,
            "processesReaped": self.processes_reaped,
            "stepsByVia": dict(self.steps_by_via),
            "skipped": dict(self.skipped),
            "violations": list(self.violations),
            "failingRound": self.failing_round,
            "failingSteps": [step.to_json() for step in self.failing_steps],
            "faultsFired": dict(self.faults_fired),
            "orderProbes": self.order_probes,
            "orderOperations": self.order_operations,
            "faultsNeverFired": never,
            "ok": self.ok,
        }

    def summary(self) -> str:
        """The counts as text: one line, plus one per via and one per skipped kind."""
        lines = [
            f"seed {self.seed}: {self.iterations} rounds, {self.scenarios_run} scenarios,"
            f" {self.cancels} cancels, {self.deadlines} deadlines,"
            f" {self.process_trees_started} process trees started,"
            f" {self.processes_recorded} processes recorded ({self.processes_reaped} reaped),"
            f" {self.order_probes} order probes ({self.order_operations} pipelined commands),"
            f" {len(self.violations)} violations"
        ]
        if self.steps_by_via:
            counts = ", ".join(f"{via} {n}" for via, n in sorted(self.steps_by_via.items()))
            lines.append(f"  steps by via: {counts}")
        if self.faults_fired:
            counts = ", ".join(f"{site} {n}" for site, n in sorted(self.faults_fired.items()))
            lines.append(f"  faults fired: {counts}")
        if self.fault_run:
            never = ", ".join(self.faults_never_fired) or "none"
            lines.append(f"  fault points never fired: {never}")
        lines.extend(f"  skipped {name}: {reason}" for name, reason in self.skipped.items())
        return "\n".join(lines)


def plan_round(
    seed: int,
    round_index: int,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    vias: tuple[str, ...] = ALL_VIAS,
    missing_peers: Collection[str] = (),
) -> list[ChaosStep]:
    """The steps of one round: a pure function of its arguments.

    Args:
        seed: The run's seed.
        round_index: The round, from 0.
        max_steps: The most steps in a round (at least 1).
        vias: How steps may run (:data:`ALL_VIAS`, or what :func:`available_vias` leaves),
            each drawn as often as its :data:`VIA_WEIGHTS` says.
        missing_peers: Peers that are not installed (``"bash"``): never drawn.

    Returns:
        One to ``max_steps`` steps.
    """
    rng = random.Random(f"{seed}-{round_index}")
    steps: list[ChaosStep] = []
    for _ in range(rng.randint(1, max(1, max_steps))):
        via = rng.choices(vias, weights=[VIA_WEIGHTS.get(v, 1.0) for v in vias])[0]
        ends_alone: Mapping[str, bool]
        if via in ("session", "lsp", "debug"):
            ends_alone = dict.fromkeys(_SESSIONS, True)  # the step bounds every request itself
        elif via == "plugin":
            ends_alone = {"chaos-backend": True}
        elif via == "debugpy":
            ends_alone = {"debugpy": True}
        elif via == "terminal":
            ends_alone = {n: alone for n, alone in _TERMINALS.items() if n not in missing_peers}
        else:
            ends_alone = _PLAIN
        names = list(ends_alone)
        costly = _COSTLY.get(via, {})
        scenario = rng.choices(names, weights=[costly.get(n, 1.0) for n in names])[0]
        actions = (
            ("finish", "cancel", "deadline") if ends_alone[scenario] else ("cancel", "deadline")
        )
        action = rng.choice(actions)
        steps.append(ChaosStep(scenario, via, action, rng.randint(20, 800)))
    return steps


#: The fault points a step's unit may reach, by via: each is chosen as often as the others,
#: so that a point late in a unit's life (an exit watch, an outcome) fires as often as one
#: early in it (a handshake), which would otherwise always fire first. Besides, one fault in
#: :data:`_REQUEST_SHARE` goes to the unit's requests instead (``request.dispatch``: the
#: request ends before its handler ran). An endpoint ``session`` step talks to its program
#: without the Core, so it has none; ``process.run`` has only its request.
_LSP_SITES: Final = ("lsp.handshake", "lsp.reader", "lsp.stderr", "lsp.exitWatch")
_DAP_SITES: Final = (
    "dap.initialize",
    "dap.configure",
    "dap.reader",
    "dap.writer",
    "dap.drain",
    "dap.exit",
    "dap.operation",
)
_FAULT_SITES: Final[dict[str, tuple[str, ...]]] = {
    "process.run": (),
    "job": ("job.spawn", "job.output", "job.exit"),
    "lsp": (*_LSP_SITES, "lsp.request"),
    "plugin": (
        "plugin.call",
        "plugin.hostRequest",
        "plugin.notification",
        "plugin.relay",
        *_LSP_SITES,
    ),
    "debug": _DAP_SITES,
    "debugpy": _DAP_SITES,
    "terminal": (
        "terminal.reader",
        "terminal.render",
        "terminal.exit",
        "terminal.cleanup",
        "terminal.outcome",
    ),
}
#: Points only a scenario that sends requests to the supervisor reaches (``request-storm``:
#: a server's requests, an adapter's reverse requests), by via.
_STORM_SITES: Final[dict[str, tuple[str, ...]]] = {
    "lsp": ("lsp.serverRequest",),
    "debug": ("dap.reverse",),
}
_REQUEST_SHARE: Final = 0.25
#: The share of a request storm's faults that go to the points only a storm reaches.
_STORM_SHARE: Final = 0.5


def fault_sites(step: ChaosStep) -> tuple[str, ...]:
    """The fault points the unit of ``step`` can reach (``request.dispatch`` aside)."""
    sites = _FAULT_SITES.get(step.via, ())
    if step.scenario == "request-storm":
        sites += _STORM_SITES.get(step.via, ())
    return sites


#: Sites inside the handling of a request the *program* sent (a server's request, a plugin's
#: host request, an adapter's reverse request): the unit that ends is that request, answered
#: ``internal`` to the program, which the runner does not see; the session goes on.
_PEER_ANSWERED_SITES: Final = frozenset({"lsp.serverRequest", "plugin.hostRequest", "dap.reverse"})
#: Likewise a fault in the end a ``terminal.dispose`` runs -- its cleanup, or the exit watch
#: the dispose wakes (seed 9000001, round 159): the stop ladder ends the processes and the
#: handle is gone with its events, so nothing is left to say ``internal``.
_DISPOSE_SITES: Final = frozenset({"terminal.cleanup", "terminal.exit"})
#: And a fault in a session's exit watch once the session had already failed by its
#: program's doing (seeds 9000003 and 9000005: a malformed header failed the session, then
#: the watch of the exit that followed failed): the first reason of a failure stands (the
#: session already ended ``failed``); ours is contained and logged. Had the fault come
#: before that end was decided, the session would have ended ``internal``.
_EXIT_WATCH_SITES: Final = frozenset({"lsp.exitWatch", "dap.exit"})


def plan_fault(seed: int, round_index: int, steps: list[ChaosStep]) -> tuple[int, FaultPlan] | None:
    """The fault of one round in a fault run: a pure function of its arguments.

    One step is chosen, and a plan that fires once, only inside that step's unit (its
    requests and every task they started: the session, terminal or job), at one fault point
    the step's kind can reach (:func:`fault_sites`), each as likely as the others. The chance
    per call of the point varies by round, so a point reached many times (a reader) fires
    early or late in the unit's life; a unit that never reaches its point runs without a
    fault.

    Returns:
        ``(step index, plan)``, or None when no step of the round can be given a fault.
    """
    rng = random.Random(f"{seed}-{round_index}-fault")
    targets = [i for i, step in enumerate(steps) if step.via in _FAULT_SITES]
    if not targets:
        return None
    index = rng.choice(targets)
    step = steps[index]
    sites = fault_sites(step)
    storm = _STORM_SITES.get(step.via, ()) if step.scenario == "request-storm" else ()
    if storm and rng.random() < _STORM_SHARE:
        # The one scenario that reaches these points gets them often: it is rare itself.
        site = rng.choice(storm)
    elif sites and rng.random() >= _REQUEST_SHARE:
        site = rng.choice(sites)
    else:
        site = "request.dispatch"
    probability = 1.0 if site == "request.dispatch" else rng.choice((1.0, 0.5, 0.2))
    plan = FaultPlan(
        sites=(site,),
        probability=probability,
        limit=1,
        rng=random.Random(f"{seed}-{round_index}-fault-rng"),
        unit=None,  # set by the round: its label names the unit
    )
    return index, plan


class _Round(StepContext):
    """One round's execution and bookkeeping."""

    def __init__(
        self,
        core: Core,
        steps: list[ChaosStep],
        label: str,
        workdir: str,
        *,
        fault: FaultPlan | None = None,
        fault_step: int | None = None,
    ) -> None:
        super().__init__(core, steps, label, workdir, fault=fault, fault_step=fault_step)
        self.job_ids: dict[str, int] = {}
        self.job_events: list[JSONObject] = []
        #: Commands the round's order probe pipelined (0 when it could not run).
        self.order_operations = 0

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            drain = trio.CancelScope()
            nursery.start_soon(self._drain_job_events, drain)
            async with trio.open_nursery() as steps:
                # The order rule, beside the steps (outside their fault units).
                steps.start_soon(self._order_probe)
                for index, step in enumerate(self.steps):
                    steps.start_soon(self._bounded, index, step)
            # Every job has finished now; its last events may still be in the queue.
            drain.cancel()
        self.job_events.extend(_events(self.core.job_events.poll()))

    async def _order_probe(self) -> None:
        with trio.move_on_after(STEP_BOUND_S) as bound:
            violations, self.order_operations = await order_probe(
                self.core, self.workdir, self.label
            )
            self.violations.extend(violations)
        if bound.cancelled_caught:
            self.violations.append(f"order probe: did not end within {STEP_BOUND_S} s")

    async def _drain_job_events(self, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                self.job_events.extend(_events(await self.core.job_events.wait(60_000)))

    async def _bounded(self, index: int, step: ChaosStep) -> None:
        with self.step_unit(index), trio.move_on_after(STEP_BOUND_S) as bound:
            try:
                if step.via == "process.run":
                    await self._process_run(index, step)
                elif step.via == "job":
                    await self._job(index, step)
                elif step.via == "session":
                    await self._session(index, step)
                else:
                    await _SESSION_STEPS[step.via](self, index, step)
            except CoreError as exc:
                # A command the step relies on failed (job.start, lsp.waitEvents, ...): a
                # finding to report with the seed, not a reason to stop the run unshrunk.
                if not self.expects_internal(index, exc):
                    self.violation(index, f"unexpected {exc.code}: {exc.message}")
                self.outcome(index, exc.code)
        if bound.cancelled_caught:
            self.violations.append(f"step {index} ({step.describe()}) did not end in time")
            self.outcome(index, "unbounded")

    async def _process_run(self, index: int, step: ChaosStep) -> None:
        operation_id = f"{self.label}-{index}"
        argv: list[JSONValue] = list(scenario_program(step, self.pid_files[index]))
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
                result = await self.call(
                    "process.run", payload, operation_id=operation_id, timeout_ms=timeout_ms
                )
            except CoreError as exc:
                self.outcome(index, exc.code)
                if exc.code not in ("cancelled", "timed_out") and not self.expects_internal(
                    index, exc
                ):
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
        argv: list[JSONValue] = list(scenario_program(step, self.pid_files[index]))
        payload: JSONObject = {"kind": "test", "root": root, "argv": argv}
        if step.action == "deadline":
            payload["timeoutMilliseconds"] = step.at_ms
        started = await self.call("job.start", payload)
        job_id = _get(started, "jobId")
        assert isinstance(job_id, str)
        self.job_ids[job_id] = index
        if step.action == "cancel":
            await trio.sleep(step.at_ms / 1000)
            await self.call("job.cancel", {"jobId": job_id})
        # job.list is the Core's own view; the events are checked after the round.
        while True:
            jobs = _list(await self.call("job.list", {}))
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
                write_timeout_ms=300 if step.scenario == "stdin-stall" else None,
            ) as session:
                ended = await _session_script(session.endpoint)
        self.outcome(index, ended if not scope.cancelled_caught else step.action)

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
                if event.get("errorCode") == "internal":
                    self.internal[self.job_ids[job_id]].append("job.finished internal")
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
        self._check_containment()

    def _check_containment(self) -> None:
        """Only the unit the fault fired in ended ``internal``; nothing else did."""
        fired = self.fault is not None and bool(self.fault.fired)
        for index, signs in self.internal.items():
            if not signs:
                continue
            if not fired or index != self.fault_step:
                where = f"the fault was in step {self.fault_step}" if fired else "no fault fired"
                self.violation(index, f"ended internal ({signs[0]}), but {where}")
        if fired and self.fault_step is not None and not self.internal[self.fault_step]:
            assert self.fault is not None
            site = self.fault.fired[0]
            unseen = (
                site in _PEER_ANSWERED_SITES
                or (site in _DISPOSE_SITES and self.fired_during == "terminal.dispose")
                or (site in _EXIT_WATCH_SITES and self.fault_step in self.failed_by_program)
            )
            if not unseen:
                self.violation(
                    self.fault_step, f"a fault fired at {site} but nothing ended internal"
                )


_SESSION_STEPS: Final = {
    "lsp": run_lsp,
    "plugin": run_plugin,
    "debug": run_debug,
    "debugpy": run_debugpy,
    "terminal": run_terminal,
}


async def _session_script(endpoint: object) -> str:
    """Initialize, one request, shutdown, exit; each request bounded. Returns how it ended."""
    from .._endpoint import JSONRPCEndpoint

    assert isinstance(endpoint, JSONRPCEndpoint)
    try:
        # Short bounds: every program answers at once or never (a round lasts as long as
        # its slowest step).
        await endpoint.request("initialize", {"capabilities": {}}, timeout_ms=1000)
        await endpoint.request("work", {"n": 1}, timeout_ms=500)
        await endpoint.request("shutdown", timeout_ms=500)
        await endpoint.notify("exit")
    except EndpointClosed:
        return "session ended"
    except trio.TooSlowError:
        return "timed out"
    except JSONRPCError:
        return "error"
    return "result"


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


def _alive(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and not stat.dead


async def _settle(instance: str, recorded: list[int]) -> tuple[list[int], list[int]]:
    """Wait (bounded) until no marked or recorded process and no zombie child remain.

    Returns:
        ``(survivors, zombies)`` left when the bound passed (both empty when all is well).
    """
    deadline = trio.current_time() + SETTLE_S
    while True:
        reap_adopted_children()
        survivors = sorted({*_marked_processes(instance), *filter(_alive, recorded)})
        zombies = _zombie_children()
        if (not survivors and not zombies) or trio.current_time() >= deadline:
            return survivors, zombies
        await trio.sleep(0.02)


async def _ping(core: Core) -> bool:
    with trio.move_on_after(5):
        return isinstance(await core.call("core.ping", {}), dict)
    return False


async def _run_steps(
    core: Core,
    steps: list[ChaosStep],
    label: str,
    workdir: str,
    report: ChaosReport | None,
    fault: tuple[int, FaultPlan] | None = None,
) -> list[str]:
    """Run one round's steps and check it; returns its violations (and counts into report).

    With ``fault`` (``(step index, plan)``), the plan is armed for the round, firing only
    inside that step's unit.
    """
    fault_step, plan = fault if fault is not None else (None, None)
    if plan is not None:
        plan.unit = f"{label}/{fault_step}"
    chaos_round = _Round(core, steps, label, workdir, fault=plan, fault_step=fault_step)
    trees_before = scopes_issued()
    previous = arm_faults(plan) if plan is not None else None
    try:
        await chaos_round.run()
    finally:
        if plan is not None:
            arm_faults(previous)
    trees_started = scopes_issued() - trees_before
    pings = await _ping(core)
    chaos_round.check(pings)
    recorded = [pid for path in chaos_round.pid_files for pid in _read_pids(path)]
    survivors, zombies = await _settle(instance_id(), recorded)
    for pid in survivors:
        chaos_round.violations.append(f"pid {pid} survived its round")
        with contextlib.suppress(OSError):
            os.kill(pid, 9)  # do not let one leak cascade into the next rounds
    chaos_round.violations.extend(f"pid {pid} is an unreaped zombie" for pid in zombies)
    if report is not None:
        report.scenarios_run += len(steps)
        report.cancels += sum(step.action == "cancel" for step in steps)
        report.deadlines += sum(step.action == "deadline" for step in steps)
        for step in steps:
            report.steps_by_via[step.via] = report.steps_by_via.get(step.via, 0) + 1
        report.process_trees_started += trees_started
        report.order_probes += chaos_round.order_operations > 0
        report.order_operations += chaos_round.order_operations
        report.processes_recorded += len(recorded)
        report.processes_reaped += sum(_gone(pid) for pid in recorded)
        for site in plan.fired if plan is not None else ():
            report.faults_fired[site] = report.faults_fired.get(site, 0) + 1
    return chaos_round.violations


async def run_chaos(
    iterations: int,
    seed: int,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_rss_growth_bytes: int = DEFAULT_MAX_RSS_GROWTH_BYTES,
    shrink: bool = True,
    on_round: Callable[[int, list[ChaosStep], list[str]], None] | None = None,
    only: Collection[str] | None = None,
    faults: bool = False,
) -> ChaosReport:
    """Run ``iterations`` seeded rounds against one Core and check each one.

    Stops at the first round with a violation, after shrinking it (when ``shrink``).

    With ``faults``, each round also injects one fault (:func:`plan_fault`): an exception
    raised at a random fault point inside one random step's unit -- a request, or the
    session, terminal, job or plugin call it started. The round then also checks that only
    that unit ended ``internal`` (a command answered ``internal``, a session or terminal
    ``failed`` with reason ``internal`` and a crash report, a job finished ``failed`` with
    ``errorCode: "internal"``), while every other step ended as without the fault. The
    other checks (nothing left alive, every request and session ended exactly once, the
    Core answers) hold as in any round. A failing fault round is reported unshrunk.

    Args:
        iterations: Rounds to run.
        seed: The seed; the same seed plans the same rounds.
        max_steps: The most steps in a round.
        max_rss_growth_bytes: Growth of this process's resident set size over its size after
            the first round that counts as a violation, in bytes.
        shrink: Look for the shortest failing step list of a failing round.
        on_round: Called after each round with ``(round, steps, violations)``.
        only: Draw only these vias (names from :data:`ALL_VIAS`); None: every via this
            Core and machine can run. A named via that can't run is skipped (reported).
        faults: Inject one fault per round (see above); ``faults_fired`` counts the sites.

    Returns:
        A :class:`ChaosReport`; ``skipped`` names the vias and peers left out.

    Raises:
        ValueError: ``iterations`` is negative, ``max_steps`` is below 1, or ``only``
            names an unknown via.

    **Cancellation:** cancelling it ends the running round's programs (shielded, bounded),
    then closes the Core, which ends everything else it started.
    """
    if iterations < 0 or max_steps < 1:
        raise ValueError("iterations must be >= 0 and max_steps >= 1")
    if only is not None and not set(only) <= set(ALL_VIAS):
        raise ValueError(f"unknown via in {sorted(only)}; known: {sorted(set(ALL_VIAS))}")
    report = ChaosReport(seed=seed, fault_run=faults)
    baseline_rss: int | None = None
    missing = available_peers()
    with tempfile.TemporaryDirectory(prefix="supervisor-chaos-") as workdir:
        prepare_workdir(workdir)
        async with open_core() as core:
            if "lsp.configureFunctionRelay" in core.commands:
                await core.call("lsp.configureFunctionRelay", relay_snapshot(max_steps))
            vias, report.skipped = available_vias(core.commands, missing)
            if only is not None:
                vias = tuple(via for via in vias if via in only)
                report.skipped = {
                    k: v for k, v in report.skipped.items() if k in only or k == "bash"
                }
                if not vias:
                    raise ValueError(f"none of {sorted(only)} can run here: {report.skipped}")
            for round_index in range(iterations):
                steps = plan_round(
                    seed, round_index, max_steps=max_steps, vias=vias, missing_peers=missing
                )
                fault = plan_fault(seed, round_index, steps) if faults else None
                violations = await _run_steps(
                    core, steps, f"r{round_index}", workdir, report, fault
                )
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
                        await _shrink(core, steps, round_index, workdir)
                        if shrink and not faults
                        else steps
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
