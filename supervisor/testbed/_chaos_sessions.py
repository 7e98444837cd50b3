"""The chaos runner's session steps: language-server, plugin, debug and terminal sessions.

Each driver runs one :class:`~supervisor.testbed.ChaosStep` through the Core's commands only
(the same ones an editor backend sends), records exactly one outcome for it, and records a
violation when a lifecycle rule breaks (a process outlives its step, a zombie stays, a request
ends twice or never):

- ``lsp`` (a scenario program as a language server) and ``plugin`` (the testbed plugin
  backend, :mod:`._backend`): every ``lsp.request`` / ``lsp.functionRequest`` ends in exactly
  one ``requestCompleted`` event, whether it got a result, was cancelled
  (``lsp.cancelOperation``), timed out, or the session ended under it.
- ``debug`` (a scenario program as a DAP adapter) and ``debugpy`` (the real adapter and a
  real debuggee): the launch operation ends in exactly one ``operationCompleted`` or
  ``operationFailed`` event (none when it was refused before it was registered, or cancelled
  through the Core before its handler ran), and the session ends with exactly one
  ``terminated`` event.
- ``terminal`` (bash, or the testbed's stubborn PTY program): writes and resizes at random
  moments, then an exit, a close or a dispose; every call ends once (a result or the code
  of its deadline), and a closed terminal's generation gets exactly one ``exit`` outcome.

An event queue that overflowed (``gap: true``) makes the exact counts unknowable; the count
is then only bounded above. Leaks (a process of the step still alive, a zombie) are checked
by the round for every kind alike.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
import random
import shutil
import sys
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

from .._boundary import FaultPlan, InjectedFault, fault_unit
from ._backend import CHAOS_PLUGIN_ID, backend_argv
from ._scenarios import program_argv

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from protocol import JSONObject, JSONValue

    from .._core._core import Core
    from ._chaos import ChaosStep

__all__ = (
    "BUG_CODES",
    "StepContext",
    "available_peers",
    "plugin_ids",
    "prepare_workdir",
    "relay_snapshot",
    "run_debug",
    "run_debugpy",
    "run_lsp",
    "run_plugin",
    "run_terminal",
    "scenario_program",
    "step_rng",
)

#: Core error codes that mean the runner or the Core is wrong, not the program.
BUG_CODES: Final = frozenset({"invalid_request", "not_supported", "internal"})


def _ends_internal(exc: CoreError) -> bool:
    """An ``internal`` answer, or a refusal because the session failed ``internal`` (its
    ``lastExit``): a request sent to a session its contained failure ended."""
    if exc.code == "internal":
        return True
    last = exc.details.get("lastExit") if exc.details else None
    refused = exc.code == "invalid_request"
    return refused and isinstance(last, dict) and last.get("code") == "internal"


#: Debug operation failures (``details.reason``) that a misbehaving adapter may cause.
_DEBUG_REASONS: Final = frozenset(
    {"refused", "adapterError", "cancelled", "timedOut", "sessionEnded"}
)
#: How long a step waits for events it expects (a completion, ``terminated``), in seconds.
EVENT_WAIT_S: Final = 10.0

#: The debuggee's file name in the run's scratch directory.
DEBUGGEE_FILE: Final = "chaos_debuggee.py"
#: The debuggee of ``debugpy`` steps: records its pid, then exits at once or runs until ended.
_DEBUGGEE: Final = """import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()}\\n")
if sys.argv[2] == "exit":
    print("chaos debuggee done")
    sys.exit(0)
while True:
    time.sleep(0.05)
"""


def prepare_workdir(workdir: str) -> None:
    """Write the files the steps need into the run's scratch directory (the debuggee)."""
    with open(os.path.join(workdir, DEBUGGEE_FILE), "w") as f:
        f.write(_DEBUGGEE)


def step_rng(step: ChaosStep) -> random.Random:
    """The step's own random choices (writes, calls, ...): a function of the step alone.

    So a step keeps its choices when the shrinker removes the steps around it.
    """
    return random.Random(f"{step.via}/{step.scenario}/{step.action}/{step.at_ms}")


def available_peers() -> dict[str, str]:
    """Peers that are missing on this machine, by step scenario name, with the reason."""
    missing: dict[str, str] = {}
    if shutil.which("bash") is None:
        missing["bash"] = "bash is not on PATH"
    # The adapter runs with this interpreter (``python -m debugpy.adapter``).
    if importlib.util.find_spec("debugpy") is None:
        missing["debugpy"] = "debugpy is not installed (pip install debugpy; the test extra)"
    return missing


def scenario_program(step: ChaosStep, pid_file: str, *, protocol: str | None = None) -> list[str]:
    """The argv of a step's scenario program, sized so that a round stays short.

    The long benchmark run (``benchmarks/bench_chaos.py``) uses the same sizes: the large
    floods are each scenario's own test.
    """
    flood = step.scenario in ("flood-stdout", "flood-stderr")
    leaves = step.scenario in ("grandchild-setsid", "daemon", "zombie-maker")
    count: int | None = None
    if step.scenario == "zombie-maker":
        count = 3
    elif step.scenario == "request-storm":
        count = 200
    return program_argv(
        step.scenario,
        protocol=protocol,
        pid_file=pid_file,
        size_bytes=2 * 1024 * 1024 if flood else None,
        count=count,
        exit_after_setup=leaves,
    )


#: The index of the step whose task is running (set by :meth:`StepContext.step_unit`).
_step_index: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "chaos_step_index", default=None
)
#: The type name of the injected exception, as crash reports and ``internal`` messages give it.
_INJECTED: Final = InjectedFault.__name__
#: The fault site that ends a request before its handler runs (nothing started yet).
_DISPATCH_SITE: Final = "request.dispatch"


class StepContext:
    """One round's bookkeeping, shared by its steps.

    Attributes:
        core: The Core every step talks to.
        label: The round's label (``r12``, ``r12-shrink3``), part of every id it makes.
        workdir: A scratch directory for the whole run.
        violations: What went wrong, one line each.
        outcomes: How each step ended, by step index (exactly one entry when it ended once).
        pid_files: Where each step's programs append the pids they start.
        fault: In a fault round, the armed plan (it fires only inside ``fault_step``).
        fault_step: The step whose unit the fault is injected into, or None.
        internal: By step index, every sign that something of the step ended ``internal``
            (a command answered ``internal``, an event with code or reason ``internal``).
        fired_during: The step's command in flight when the fault fired in its unit (the
            fault may have fired in a task of the unit all the same), or None.
        failed_by_program: The steps whose session failed by its program's doing.
    """

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
        self.core = core
        self.steps = steps
        self.label = label
        self.workdir = workdir
        self.violations: list[str] = []
        self.outcomes: dict[int, list[str]] = {i: [] for i in range(len(steps))}
        self.pid_files = [os.path.join(workdir, f"{label}-{i}.pids") for i in range(len(steps))]
        self.fault = fault
        self.fault_step = fault_step
        self.internal: dict[int, list[str]] = {i: [] for i in range(len(steps))}
        self.fired_during: str | None = None
        #: Steps whose session failed by its program's doing (see :meth:`note_events`).
        self.failed_by_program: set[int] = set()

    @contextlib.contextmanager
    def step_unit(self, index: int) -> Iterator[None]:
        """Run the body (and every task it starts in the Core) as step ``index``'s unit."""
        token = _step_index.set(index)
        try:
            with fault_unit(f"{self.label}/{index}"):
                yield
        finally:
            _step_index.reset(token)

    def expects_internal(self, index: int, exc: CoreError) -> bool:
        """True when ``exc`` is the ``internal`` end of the step a fault was injected into,
        on the injected exception (any other ``internal`` is a bug the fault uncovered)."""
        return (
            _ends_internal(exc)
            and _INJECTED in exc.message
            and index == self.fault_step
            and self.fault is not None
            and bool(self.fault.fired)
        )

    async def call(
        self,
        command: str,
        payload: JSONObject,
        *,
        operation_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> JSONValue:
        """``Core.call`` for the running step, noting every ``internal`` answer it gets.

        A request ended by the injected fault before its handler ran started nothing, so it
        is sent once more (the plan fires once); the step then goes on as without the fault.
        """
        index = _step_index.get()
        fired_before = len(self.fault.fired) if self.fault is not None else 0
        try:
            return await self.core.call(
                command, payload, operation_id=operation_id, timeout_ms=timeout_ms
            )
        except CoreError as exc:
            if exc.code != "internal" or index is None:
                raise
            self.internal[index].append(f"{command} answered internal: {exc.message}")
            if not (self.expects_internal(index, exc) and _DISPATCH_SITE in exc.message):
                raise
        finally:
            fired = self.fault is not None and len(self.fault.fired) > fired_before
            if fired and index == self.fault_step:
                self.fired_during = command
        return await self.core.call(
            command, payload, operation_id=operation_id, timeout_ms=timeout_ms
        )

    def outcome(self, index: int, what: str) -> None:
        """Record how step ``index`` ended."""
        self.outcomes[index].append(what)

    def violation(self, index: int, text: str) -> None:
        """Record a violation of step ``index``."""
        self.violations.append(f"step {index} ({self.steps[index].describe()}): {text}")

    def refused(self, index: int, exc: CoreError, *, bugs: frozenset[str] = BUG_CODES) -> None:
        """Record a command's error as the step's outcome; a violation when it is a bug code
        (``internal`` is none in the step a fault was injected into)."""
        self.outcome(index, exc.code)
        if exc.code in bugs and not self.expects_internal(index, exc):
            self.violation(index, f"{exc.code}: {exc.message}")

    def note_events(self, index: int, seen: list[JSONObject]) -> None:
        """Note the step's events that say ``internal``; one that ends a session or terminal
        ``internal`` must carry a crash report. Note too a session that failed by its
        program's doing (a ``stateChanged`` to ``failed`` that is not ``internal``)."""
        for event in seen:
            if (
                event.get("event") == "stateChanged"
                and event.get("state") == "failed"
                and not _says_internal(event)
            ):
                self.failed_by_program.add(index)
            if not _says_internal(event):
                continue
            name = event.get("event")
            self.internal[index].append(f"event {name} internal")
            reports = list(_values_of(event, "crashReport"))
            if name in _ENDING_EVENTS and not reports:
                self.violation(index, f"{name} internal without a crash report")
            for report in reports:
                kind = report.get("exceptionType") if isinstance(report, dict) else None
                if kind != _INJECTED:
                    self.violation(index, f"{name} internal on {kind}: {report}")


#: Fault sites between recording an outcome and delivering it: the unit that ends there is
#: the delivery (the request that ran it answers ``internal``), so the event may be lost to
#: a subscriber that was already there (a later one still gets the recorded outcome).
_DELIVERY_SITES: Final = frozenset({"terminal.outcome"})
#: Events that end a session, a terminal generation or a session state with a reason.
_ENDING_EVENTS: Final = frozenset({"exit", "terminated", "stateChanged"})
#: Keys whose value ``"internal"`` says a unit ended on a contained failure.
_INTERNAL_KEYS: Final = frozenset({"code", "reason", "errorCode", "sessionEndReason"})


def _says_internal(value: JSONValue) -> bool:
    if isinstance(value, dict):
        return any(
            (key in _INTERNAL_KEYS and item == "internal") or _says_internal(item)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return any(_says_internal(item) for item in value)
    return False


def _values_of(value: JSONValue, key: str) -> Iterator[JSONValue]:
    """Every value of ``key`` at any depth of ``value``."""
    if isinstance(value, dict):
        for name, item in value.items():
            if name == key:
                yield item
            else:
                yield from _values_of(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _values_of(item, key)


class _Events:
    """A session's event queue drained through ``<kind>.waitEvents`` / ``<kind>.pollEvents``.

    Keeps every event it saw (a step's sessions live for a second or two, so this is small).
    """

    def __init__(self, ctx: StepContext, kind: str, key: str, session_id: str) -> None:
        self.ctx = ctx
        self.kind = kind
        self.key = key
        self.session_id = session_id
        self.seen: list[JSONObject] = []
        self.gap = False

    def take(self, batch: JSONValue) -> None:
        """Add the events of a ``*.waitEvents`` / ``*.pollEvents`` reply."""
        if not isinstance(batch, dict):
            return
        self.gap = self.gap or bool(batch.get("gap"))
        events = batch.get("events")
        if isinstance(events, list):
            self.seen.extend(e for e in events if isinstance(e, dict))

    async def wait_for(self, predicate: Callable[[list[JSONObject]], bool]) -> bool:
        """Drain until ``predicate(seen)`` holds or :data:`EVENT_WAIT_S` passed."""
        with trio.move_on_after(EVENT_WAIT_S):
            while not predicate(self.seen):
                self.take(
                    await self.ctx.call(
                        f"{self.kind}.waitEvents",
                        {self.key: self.session_id, "timeoutMilliseconds": 500},
                    )
                )
            return True
        return False

    async def poll(self) -> None:
        """Take what is queued now (never blocks)."""
        self.take(await self.ctx.call(f"{self.kind}.pollEvents", {self.key: self.session_id}))

    def count(self, event: str, **match: JSONValue) -> int:
        """Events called ``event`` whose fields equal ``match``."""
        return sum(
            1
            for e in self.seen
            if e.get("event") == event and all(e.get(k) == v for k, v in match.items())
        )

    def check_once(self, ctx: StepContext, index: int, what: str, count: int) -> None:
        """Exactly once (at most once after a gap, or after a fault in the delivery of the
        event itself), or a violation."""
        lost = ctx.fault is not None and any(site in _DELIVERY_SITES for site in ctx.fault.fired)
        may_miss = self.gap or (lost and index == ctx.fault_step)
        if count > 1 or (count == 0 and not may_miss):
            ctx.violation(index, f"{what} {count} times")


def _completed(operation_id: str) -> Callable[[list[JSONObject]], bool]:
    def done(seen: list[JSONObject]) -> bool:
        return any(
            e.get("event") == "requestCompleted" and e.get("operationId") == operation_id
            for e in seen
        )

    return done


# -- language servers and plugin backends (lsp.*) -------------------------------------------


async def _start_server(
    ctx: StepContext, index: int, server_id: str, argv: list[str], **options: JSONValue
) -> str | None:
    """``lsp.startServer`` of ``argv`` in the run's directory; its session id, or None when
    the Core refused it (counted as such)."""
    arguments: list[JSONValue] = list(argv[1:])
    try:
        started = await ctx.call(
            "lsp.startServer",
            {
                "serverId": server_id,
                "executable": argv[0],
                "arguments": arguments,
                "workingDirectory": ctx.workdir,
                "rootUri": "file://" + ctx.workdir,
                **options,
            },
        )
    except CoreError as exc:
        ctx.refused(index, exc)
        return None
    return _get_str(started, "sessionId")


async def run_lsp(ctx: StepContext, index: int, step: ChaosStep) -> None:
    """A scenario program as a language server (``lsp.startServer``), one request in it."""
    session_id = await _start_server(
        ctx,
        index,
        f"chaos-{ctx.label}-{index}",
        scenario_program(step, ctx.pid_files[index]),
        initializeTimeoutMilliseconds=1000,
        shutdownTimeoutMilliseconds=300,
    )
    if session_id is None:
        return
    events = _Events(ctx, "lsp", "sessionId", session_id)
    operation_id: str | None = None
    try:
        request: JSONObject = {
            "sessionId": session_id,
            "method": "work",
            "params": {},
            "timeoutMilliseconds": step.at_ms if step.action == "deadline" else 500,
        }
        try:
            operation_id = _get_str(await ctx.call("lsp.request", request), "operationId")
        except CoreError as exc:
            ctx.refused(index, exc)
        if operation_id is not None:
            if step.action == "cancel":
                await trio.sleep(step.at_ms / 1000)
                await ctx.call(
                    "lsp.cancelOperation", {"sessionId": session_id, "operationId": operation_id}
                )
            await events.wait_for(_completed(operation_id))
    finally:
        with trio.CancelScope(shield=True):
            await _end_lsp(ctx, index, session_id, events)
        ctx.note_events(index, events.seen)
    if operation_id is not None:
        done = events.count("requestCompleted", operationId=operation_id)
        events.check_once(ctx, index, "the request completed", done)
        ctx.outcome(index, "request completed")


async def _end_lsp(ctx: StepContext, index: int, session_id: str, events: _Events) -> None:
    await _cleanup(ctx, index, "lsp.stopServer", {"sessionId": session_id})
    await events.poll()
    await _cleanup(ctx, index, "lsp.destroyServer", {"sessionId": session_id})


#: The workspace context of relayed calls (in the relay snapshot of :func:`relay_snapshot`).
RELAY_CONTEXT: Final[JSONObject] = {"contextID": "chaos", "generation": 1}


def plugin_ids(index: int) -> tuple[str, str]:
    """The plugin IDs of step ``index``'s backend and of the provider its calls relay to.

    A plugin has at most one backend, and a round's steps run side by side: one pair per step
    slot (rounds run one after the other, and a step ends its sessions).
    """
    caller = f"{CHAOS_PLUGIN_ID}.s{index}"
    return caller, caller + "p"


def relay_snapshot(max_steps: int) -> JSONObject:
    """``lsp.configureFunctionRelay``'s snapshot for a run: each slot's backend may relay
    ``chaos.work`` to its own provider, in :data:`RELAY_CONTEXT`."""
    plugins: list[JSONValue] = []
    for index in range(max_steps):
        caller, provider = plugin_ids(index)
        work: list[JSONValue] = [{"id": "chaos.work", "version": 1}]
        plugins.append({"pluginID": caller, "enabled": True, "exports": [], "calls": work})
        plugins.append({"pluginID": provider, "enabled": True, "exports": work, "calls": []})
    return {"plugins": plugins, "contexts": [{**RELAY_CONTEXT, "authority": "local"}]}


async def run_plugin(ctx: StepContext, index: int, step: ChaosStep) -> None:
    """The testbed plugin backend as a plugin-owned session, with function calls in it.

    One to three calls (each a child with a grandchild, bound to the call): ``chaos.work``,
    or, in two steps in five, ``chaos.relay`` through the host to a second backend (the
    provider), whose relayed ``chaos.work`` is the caller's call's child. Then by
    ``step.action``: let them finish, cancel some at ``at_ms``, or give each a deadline of
    ``at_ms``. One step in five stops the session while calls may still run, so they end as
    "the session ended".
    """
    rng = step_rng(step)
    plugin_id, provider_id = plugin_ids(index)
    relayed = rng.random() < 0.4
    provider_session: str | None = None
    if relayed:
        provider_session = await _start_backend(ctx, index, provider_id, "provider")
        if provider_session is None:
            return
    try:
        await _plugin_calls(ctx, index, step, rng, plugin_id, provider_id if relayed else None)
    finally:
        if provider_session is not None:
            provider_events = _Events(ctx, "lsp", "sessionId", provider_session)
            with trio.CancelScope(shield=True):
                await _end_lsp(ctx, index, provider_session, provider_events)
            ctx.note_events(index, provider_events.seen)


async def _start_backend(ctx: StepContext, index: int, plugin_id: str, role: str) -> str | None:
    return await _start_server(
        ctx,
        index,
        f"chaos-{role}-{ctx.label}-{index}",
        backend_argv(pid_file=ctx.pid_files[index]),
        pluginId=plugin_id,
        initializeTimeoutMilliseconds=10_000,
        shutdownTimeoutMilliseconds=2000,
    )


async def _plugin_calls(
    ctx: StepContext,
    index: int,
    step: ChaosStep,
    rng: random.Random,
    plugin_id: str,
    provider_id: str | None,
) -> None:
    session_id = await _start_backend(ctx, index, plugin_id, "plugin")
    if session_id is None:
        return
    events = _Events(ctx, "lsp", "sessionId", session_id)
    operations: list[str] = []
    try:
        await events.wait_for(lambda seen: any(_ready_or_ended(e) for e in seen))
        if _fault_fired_in(ctx, index) and any(_ended_internal(e) for e in events.seen):
            # The injected fault ended the session before its backend negotiated: a call
            # now is refused (plugin.function.unavailable), as for any backend not running.
            await _expect_unavailable(ctx, index, session_id, plugin_id)
            return
        for _ in range(rng.randint(1, 3)):
            ms = rng.choice((0, 50, 300, 800))
            payload: JSONObject = {
                "sessionId": session_id,
                "function": {"pluginID": plugin_id, "functionID": "chaos.work"},
                "params": {"ms": ms},
                "timeoutMilliseconds": step.at_ms if step.action == "deadline" else 8000,
            }
            if provider_id is not None:
                payload["function"] = {"pluginID": plugin_id, "functionID": "chaos.relay"}
                payload["params"] = {"to": provider_id, "ms": ms}
                payload["context"] = RELAY_CONTEXT
            try:
                reply = await ctx.call("lsp.functionRequest", payload)
            except CoreError as exc:
                # Unavailable functions (the backend not ready in time) are the backend's
                # doing; a malformed request is ours.
                ctx.refused(index, exc)
                return
            operations.append(_get_str(reply, "operationId"))
        if step.action == "cancel":
            await trio.sleep(step.at_ms / 1000)
            for operation_id in operations:
                if rng.random() < 0.7:
                    await ctx.call(
                        "lsp.cancelOperation",
                        {"sessionId": session_id, "operationId": operation_id},
                    )
        if rng.random() >= 0.2:
            await events.wait_for(lambda seen: all(_completed(op)(seen) for op in operations))
    finally:
        with trio.CancelScope(shield=True):
            await _end_lsp(ctx, index, session_id, events)
        ctx.note_events(index, events.seen)
    for operation_id in operations:
        done = events.count("requestCompleted", operationId=operation_id)
        events.check_once(ctx, index, f"call {operation_id} completed", done)
    ctx.outcome(index, "calls completed")


def _ready_or_ended(event: JSONObject) -> bool:
    """The backend registered its functions, or the session ended (failed or stopped)."""
    return event.get("event") == "functionsChanged" or (
        event.get("event") == "stateChanged" and event.get("state") in ("failed", "stopped")
    )


def _ended_internal(event: JSONObject) -> bool:
    return (
        event.get("event") == "stateChanged"
        and event.get("state") == "failed"
        and event.get("reason") == "internal"
    )


async def _expect_unavailable(
    ctx: StepContext, index: int, session_id: str, plugin_id: str
) -> None:
    """A function call to a session whose backend is not running is refused ``not_supported``
    with ``plugin.function.unavailable`` (the plugin contract "Invocation"); anything else is
    a violation."""
    try:
        await ctx.call(
            "lsp.functionRequest",
            {
                "sessionId": session_id,
                "function": {"pluginID": plugin_id, "functionID": "chaos.work"},
                "params": {"ms": 0},
            },
        )
    except CoreError as exc:
        code = (exc.details or {}).get("code")
        if exc.code != "not_supported" or code != "plugin.function.unavailable":
            ctx.violation(index, f"a call to the failed session: {exc.code} ({code})")
        ctx.outcome(index, "refused: the session failed")
    else:
        ctx.violation(index, "a call to the failed session was accepted")


# -- debug sessions (debug.*) ---------------------------------------------------------------


async def run_debug(ctx: StepContext, index: int, step: ChaosStep) -> None:
    """A scenario program as a DAP adapter (``--protocol dap``): create, launch, disconnect."""
    argv = scenario_program(step, ctx.pid_files[index], protocol="dap")
    await _debug_session(ctx, index, step, argv, {}, launch_timeout_ms=500)


async def run_debugpy(ctx: StepContext, index: int, step: ChaosStep) -> None:
    """debugpy's adapter and a real debuggee: launch, then exit, disconnect or a deadline.

    ``finish``: the debuggee exits by itself and the session ends ``terminated``.
    ``cancel``: the launch is cancelled, or (when it already ended) the session is
    disconnected at ``at_ms`` with the debuggee running. ``deadline``: the launch has a
    deadline of ``at_ms``; the session is then disconnected.
    """
    debuggee = os.path.join(ctx.workdir, DEBUGGEE_FILE)
    configuration: JSONObject = {
        "program": debuggee,
        "args": [ctx.pid_files[index], "exit" if step.action == "finish" else "run"],
        "console": "internalConsole",
        "cwd": ctx.workdir,
    }
    argv = [sys.executable, "-m", "debugpy.adapter"]
    await _debug_session(ctx, index, step, argv, configuration, launch_timeout_ms=20_000)


async def _debug_session(
    ctx: StepContext,
    index: int,
    step: ChaosStep,
    argv: list[str],
    configuration: JSONObject,
    *,
    launch_timeout_ms: int,
) -> None:
    arguments: list[JSONValue] = list(argv[1:])
    try:
        created = await ctx.call(
            "debug.createSession",
            {
                "adapterId": step.scenario,
                "rootPath": ctx.workdir,
                "adapter": {"executable": argv[0], "arguments": arguments},
            },
        )
    except CoreError as exc:
        ctx.refused(index, exc)
        return
    session_id = _get_str(created, "sessionId")
    events = _Events(ctx, "debug", "sessionId", session_id)
    launch_id = f"{ctx.label}-{index}-launch"
    core_id = f"{ctx.label}-{index}-core"
    # Through the session (debug.cancelOperation) or through the Core (Core.cancel): the
    # latter may land before the handler registered the operation, so it may leave none.
    via_core = step.at_ms % 2 == 1
    expect_event = True
    try:
        async with trio.open_nursery() as nursery:
            if step.action == "cancel":
                # The cancel lands at at_ms: on the pending launch, or (when the launch has
                # ended by then) on nothing, and the disconnect comes right after it.
                nursery.start_soon(_cancel_launch, ctx, index, session_id, launch_id, core_id)
            try:
                await ctx.call(
                    "debug.launch",
                    {
                        "sessionId": session_id,
                        "operationId": launch_id,
                        "configuration": configuration,
                        "timeoutMilliseconds": (
                            step.at_ms if step.action == "deadline" else launch_timeout_ms
                        ),
                    },
                    operation_id=core_id,
                )
            except CoreError as exc:
                reason = (exc.details or {}).get("reason")
                if reason == "refused" or (reason is None and exc.code == "cancelled" and via_core):
                    expect_event = False
                bugs = BUG_CODES if reason not in _DEBUG_REASONS else frozenset({"internal"})
                ctx.refused(index, exc, bugs=bugs)
            else:
                ctx.outcome(index, "launched")
            if step.action == "finish" and step.scenario == "debugpy":
                # The debuggee exits by itself; a testbed adapter's session runs on.
                await events.wait_for(
                    lambda seen: any(e.get("event") == "terminated" for e in seen)
                )
    finally:
        with trio.CancelScope(shield=True):
            await _cleanup(ctx, index, "debug.disconnect", {"sessionId": session_id})
            await events.poll()
            await _cleanup(ctx, index, "debug.destroySession", {"sessionId": session_id})
        ctx.note_events(index, events.seen)
    ended = events.count("operationCompleted", operationId=launch_id) + events.count(
        "operationFailed", operationId=launch_id
    )
    if expect_event:
        events.check_once(ctx, index, "the launch ended", ended)
    elif ended > 1:
        ctx.violation(index, f"the launch ended {ended} times")
    events.check_once(ctx, index, "the session ended (terminated)", events.count("terminated"))


async def _cancel_launch(
    ctx: StepContext, index: int, session_id: str, launch_id: str, core_id: str
) -> None:
    step = ctx.steps[index]
    await trio.sleep(step.at_ms / 1000)
    if step.at_ms % 2 == 1:
        ctx.core.cancel(core_id)
    else:
        await _cleanup(
            ctx,
            index,
            "debug.cancelOperation",
            {"sessionId": session_id, "operationId": launch_id},
        )


async def _cleanup(
    ctx: StepContext,
    index: int,
    command: str,
    payload: JSONObject,
    *,
    ended: _Events | None = None,
) -> None:
    """A command that must succeed whatever the program did; its failure is a violation.

    With ``ended`` (a terminal's events), a ``busy`` answer in the step a fault was injected
    into -- the terminal's own cleanup of its failure is running -- is retried once that
    cleanup's ``exit`` outcome arrived.
    """
    try:
        await ctx.call(command, payload)
    except CoreError as exc:
        if ctx.expects_internal(index, exc):
            return
        if exc.code == "busy" and ended is not None and _fault_fired_in(ctx, index):
            await ended.wait_for(lambda seen: any(e.get("event") == "exit" for e in seen))
            await _cleanup(ctx, index, command, payload)
            return
        ctx.violation(index, f"{command} failed: {exc.code}: {exc.message}")


def _fault_fired_in(ctx: StepContext, index: int) -> bool:
    return index == ctx.fault_step and ctx.fault is not None and bool(ctx.fault.fired)


# -- terminals (terminal.*) -----------------------------------------------------------------


async def run_terminal(ctx: StepContext, index: int, step: ChaosStep) -> None:
    """A terminal: writes and resizes at random moments, then an exit, close or dispose.

    ``finish`` (bash only): ``exit`` is typed and the ``exit`` outcome awaited.
    ``cancel``: at ``at_ms`` the terminal is closed (hang-up, TERM, KILL), or disposed at once.
    ``deadline``: every call runs under a deadline ``at_ms`` from the start (the envelope's
    ``timeoutMilliseconds``); the call in flight then ends ``timed_out``.
    """
    rng = step_rng(step)
    if step.scenario == "bash":
        executable = shutil.which("bash") or "bash"
        arguments: list[JSONValue] = ["--norc", "--noprofile"]
    else:
        argv = scenario_program(step, ctx.pid_files[index])
        executable, arguments = argv[0], list(argv[1:])
    try:
        created = await ctx.call(
            "terminal.create",
            {
                "executable": executable,
                "arguments": arguments,
                "title": f"chaos {ctx.label}-{index}",
                "rows": rng.randint(5, 60),
                "cols": rng.randint(20, 200),
            },
        )
    except CoreError as exc:
        ctx.refused(index, exc)
        return
    terminal_id = _get_str(created, "terminalID")
    events = _Events(ctx, "terminal", "terminalID", terminal_id)
    deadline = trio.current_time() + step.at_ms / 1000
    disposed = False
    try:
        await ctx.call("terminal.onExit", {"terminalID": terminal_id})
        ended = await _terminal_script(ctx, step, events, deadline, rng)
        if step.action == "cancel":
            await trio.sleep_until(deadline)
            if rng.random() < 0.3:
                await events.poll()  # what the terminal said so far (a dispose drops it)
                await ctx.call("terminal.dispose", {"terminalID": terminal_id})
                disposed = True
                ended = "disposed"
    except CoreError as exc:
        ctx.refused(index, exc)
        ended = ""
    finally:
        if not disposed:
            with trio.CancelScope(shield=True):
                await _cleanup(
                    ctx, index, "terminal.close", {"terminalID": terminal_id}, ended=events
                )
                await events.poll()
                await _cleanup(
                    ctx, index, "terminal.dispose", {"terminalID": terminal_id}, ended=events
                )
        ctx.note_events(index, events.seen)
    if not disposed:
        outcomes = events.count("exit", generation=1)
        events.check_once(ctx, index, "the exit outcome arrived", outcomes)
    if ended:
        ctx.outcome(index, ended)


async def _terminal_script(
    ctx: StepContext, step: ChaosStep, events: _Events, deadline: float, rng: random.Random
) -> str:
    """Type, resize and read at random; returns how the interaction ended.

    Raises:
        CoreError: A call failed other than by its deadline.
    """
    terminal: JSONObject = {"terminalID": events.session_id}

    async def call(command: str, payload: JSONObject) -> None:
        timeout_ms: int | None = None
        if step.action == "deadline":
            timeout_ms = max(1, int((deadline - trio.current_time()) * 1000))
        reply = await ctx.call(command, {**terminal, **payload}, timeout_ms=timeout_ms)
        if command == "terminal.waitEvents":
            events.take(reply)  # an exit outcome read here still counts

    try:
        for _ in range(rng.randint(1, 5)):
            if step.action != "finish" and trio.current_time() >= deadline:
                break
            kind = rng.randrange(3)
            if kind == 0:
                await call("terminal.write", {"data": "echo chaos\n"})
            elif kind == 1:
                await call(
                    "terminal.resize", {"rows": rng.randint(5, 60), "cols": rng.randint(20, 200)}
                )
            else:
                await call("terminal.waitEvents", {"timeoutMilliseconds": rng.randint(10, 300)})
            await trio.sleep(rng.random() * 0.05)
        if step.action == "finish":
            await call("terminal.write", {"data": "exit\n"})
            exited = await events.wait_for(lambda seen: any(e.get("event") == "exit" for e in seen))
            return "exited" if exited else "still running"
        if step.action == "deadline":
            # Blocks past the deadline unless output arrives: then read again.
            while True:
                await call("terminal.waitEvents", {"timeoutMilliseconds": 60_000})
    except CoreError as exc:
        if exc.code != "timed_out" or step.action != "deadline":
            raise
        return "timed_out"
    return "closed"


def _get_str(value: JSONValue, key: str) -> str:
    found = value.get(key) if isinstance(value, dict) else None
    if not isinstance(found, str):
        raise CoreError("internal", f"the reply has no {key}: {value!r}")
    return found
