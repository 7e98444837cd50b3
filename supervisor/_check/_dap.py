"""The DAP lifecycle battery: ``supervisor check dap [--launch JSON] -- CMD ARGS...``.

Instances: ``disconnect`` with ``terminateDebuggee: true`` (after a launch when a launch
configuration is given), ``disconnect`` with ``terminateDebuggee: false`` (the debuggee
must then survive), an instance whose stdin is closed, and one whose client is SIGKILLed.
What an adapter sends before its initialize response, the zombies it leaves, its leftovers and
its stdout hygiene are judged over every instance.

As an editor does, ``terminateDebuggee`` goes only to an adapter that announces
``supportTerminateDebuggee``, ``configurationDone`` only to one that supports it (after
``setExceptionBreakpoints`` when it defines exception filters or lacks ``configurationDone``),
and ``runInTerminal`` is served: the command runs (without a terminal) and the answer carries
its ``processId``; it is ended with the adapter's instance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import trio

from protocol import CoreError
from protocol._payload import check_request_values

from .._process._procfs import read_stat
from ._common import (
    REAPS_CHILDREN_RULE,
    Bounds,
    Leftovers,
    Zombies,
    describe_status,
    exit_on_eof,
    ms,
    no_answer,
    settle_zombies,
    workdir_of,
)
from ._lsp import PASSIVE_CHECKS, judge_passive, vanish_check
from ._peer import Program, open_program
from ._profiles import dap_initialize_arguments
from ._report import ConformanceReport, Outcome

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ("DAP_CHECKS", "check_debug_adapter")

_SPEC: Final = "DAP"
RULES: Final = {
    "initialize": f"{_SPEC} 'initialize': answered with success and the adapter's Capabilities",
    "requests-before-initialize": f"{_SPEC} 'initialize': 'the debug adapter is not allowed to"
    " send any requests or events to the client until it has responded with an initialize"
    " response'; the 'initialized' event comes 'after the initialize request has returned'",
    "launch": f"{_SPEC} 'launch' and 'configurationDone': after the 'initialized' event"
    " the debuggee starts (the 'process' event names it)",
    "disconnect": f"{_SPEC} 'disconnect': answered with success (bound 2 000 ms)",
    "debuggee-terminated": f"{_SPEC} 'disconnect' terminateDebuggee=true: the debuggee is"
    " terminated",
    "debuggee-kept": f"{_SPEC} 'disconnect' terminateDebuggee=false: the debuggee keeps"
    " running (honoured when supportTerminateDebuggee is announced)",
    "exit-after-disconnect": f"{_SPEC} 'disconnect': the adapter disconnects from the"
    " debuggee 'and then shuts down itself' (bound 1 000 ms)",
    "exit-on-eof": "an adapter on stdio must not outlive its client: the end of stdin ends it",
    "client-vanishes": "the client was SIGKILLed (its end of the pipes closes): the"
    " adapter ends, with its debuggee",
    "reaps-children": REAPS_CHILDREN_RULE,
    "no-leftovers": "an adapter's helper processes end with it (every descendant, marked or not)",
    "stdout-frames": f"{_SPEC} base protocol: stdout carries only Content-Length frames",
}
#: Every check, in the order of the report.
DAP_CHECKS: Final = tuple(RULES)


class _Battery:
    def __init__(
        self,
        argv: list[str],
        client: str,
        cwd: str,
        launch: dict[str, Any] | None,
        bounds: Bounds,
        only: Collection[str] | None,
    ) -> None:
        self.argv = argv
        self.client = client
        self.cwd = cwd
        self.launch_args = launch
        self.bounds = bounds
        self.only = only
        self.report = ConformanceReport("dap", list(argv), client)
        self.leftovers = Leftovers()
        self.zombies = Zombies()
        self.framed: list[Program] = []
        #: What the vanishing client's instance sent before its initialize answer.
        self.early_elsewhere: list[list[str]] = []
        self.results: dict[str, tuple[Outcome, str]] = {}

    def wants(self, *checks: str) -> bool:
        return self.only is None or any(c in self.only for c in checks)

    def note(self, check: str, outcome: Outcome, evidence: str) -> None:
        # The first verdict stands (a later instance repeats some checks).
        self.results.setdefault(check, (outcome, evidence))

    def started(self, program: Program) -> None:
        self.framed.append(program)
        self.zombies.watch(program.descendants)

    async def initialize(self, program: Program) -> tuple[dict[str, Any] | None, str]:
        answer, waited = await program.request(
            "initialize",
            dap_initialize_arguments(self.client),
            timeout_s=self.bounds.initialize,
        )
        if answer is None:
            why = await no_answer(program, self.bounds.initialize)
            if program.tree.returncode is not None:
                await self.leftovers.after_exit(program, "after it exited during initialize")
            tail = program.stderr_evidence()
            return None, why + (f"; stderr: {tail}" if tail else "")
        if answer.get("success") is not True:
            return None, f"answered success=false: {answer.get('message')!r}"
        body = answer.get("body")
        caps = body if isinstance(body, dict) else {}
        return caps, f"answered in {ms(waited)}; {len(caps)} capabilities"

    async def launch(self, program: Program, caps: dict[str, Any]) -> int | None:
        """Launch the debuggee; its pid, or None (the verdict is noted).

        The configuration sequence an editor sends (DAP 'initialized' event): after the
        event, ``setExceptionBreakpoints`` (no filter) when the adapter defines exception
        filters or has no ``configurationDone``, then ``configurationDone`` when it supports
        it.
        """
        assert self.launch_args is not None
        launch_id = program.send_request("launch", self.launch_args)
        deadline = trio.current_time() + self.bounds.initialize
        while not any(e.get("event") == "initialized" for e in program.events):
            if trio.current_time() > deadline or program.tree.returncode is not None:
                self.note("launch", Outcome.FAIL, "no 'initialized' event after launch")
                return None
            await trio.sleep(0.02)
        done_supported = bool(caps.get("supportsConfigurationDoneRequest"))
        if caps.get("exceptionBreakpointFilters") or not done_supported:
            program.send_request("setExceptionBreakpoints", {"filters": []})
        answer: dict[str, Any] | None = {}
        if done_supported:
            done = program.send_request("configurationDone", {})
            answer = await program.wait_answer(done, max(0.0, deadline - trio.current_time()))
        launched = await program.wait_answer(launch_id, max(0.0, deadline - trio.current_time()))
        if answer is None or launched is None or launched.get("success") is not True:
            why = launched.get("message") if launched else "no answer"
            self.note("launch", Outcome.FAIL, f"launch did not succeed: {why!r}")
            return None
        pid: int | None = None
        while trio.current_time() < deadline:
            for event in program.events:
                body = event.get("body")
                if event.get("event") == "process" and isinstance(body, dict):
                    found = body.get("systemProcessId")
                    if isinstance(found, int):
                        pid = found
            if pid is not None:
                break
            await trio.sleep(0.02)
        if pid is None:
            self.note("launch", Outcome.FAIL, "no 'process' event with systemProcessId")
            return None
        self.note("launch", Outcome.PASS, f"debuggee pid {pid} started")
        return pid

    async def session(self, *, terminate: bool) -> None:
        """Initialize, maybe launch, disconnect with ``terminateDebuggee``, watch the ends."""
        async with open_program(self.argv, dap=True, cwd=self.cwd) as program:
            self.started(program)
            caps, evidence = await self.initialize(program)
            self.note("initialize", Outcome.PASS if caps is not None else Outcome.FAIL, evidence)
            if caps is None:
                return
            debuggee: int | None = None
            debuggee_start: int | None = None
            if self.launch_args is not None:
                debuggee = await self.launch(program, caps)
                st = read_stat(debuggee) if debuggee is not None else None
                debuggee_start = st.starttime if st else None
            await settle_zombies(program.descendants)
            # As an editor: terminateDebuggee only to an adapter that announces it.
            arguments: dict[str, Any] = {"restart": False}
            if caps.get("supportTerminateDebuggee"):
                arguments["terminateDebuggee"] = terminate
            answer, waited = await program.request(
                "disconnect", arguments, timeout_s=self.bounds.shutdown
            )
            if answer is None:
                self.note("disconnect", Outcome.FAIL, f"no answer in {ms(self.bounds.shutdown)}")
            elif answer.get("success") is not True:
                self.note("disconnect", Outcome.FAIL, f"success=false: {answer.get('message')!r}")
            else:
                self.note("disconnect", Outcome.PASS, f"answered in {ms(waited)}")
            if terminate:
                await self._adapter_exit(program)
            if debuggee is not None:
                await self._debuggee_fate(debuggee, debuggee_start, caps, terminate=terminate)

    async def _adapter_exit(self, program: Program) -> None:
        start = trio.current_time()
        rc = await program.wait_exit(self.bounds.exit)
        if rc is not None:
            self.note(
                "exit-after-disconnect",
                Outcome.PASS if rc >= 0 else Outcome.FAIL,
                f"{describe_status(rc)} {ms(trio.current_time() - start)} after the"
                " disconnect answer",
            )
            await self.leftovers.after_exit(program, "after disconnect")
            return
        # What a careful client does next: close stdin, and see whether that is what it
        # waits for.
        await program.close_stdin()
        rc = await program.wait_exit(self.bounds.eof_exit)
        self.note(
            "exit-after-disconnect",
            Outcome.FAIL,
            f"still running {ms(self.bounds.exit)} after the disconnect answer"
            + (
                f"; {describe_status(rc)} only once its stdin was closed"
                if rc is not None
                else "; and after its stdin was closed"
            ),
        )
        if rc is not None:
            await self.leftovers.after_exit(program, "after disconnect and stdin EOF")

    async def _debuggee_fate(
        self, pid: int, start: int | None, caps: dict[str, Any], *, terminate: bool
    ) -> None:
        def running() -> bool:
            st = read_stat(pid)
            return st is not None and not st.dead and st.starttime == start

        if terminate:
            began = trio.current_time()
            # Not our child: no exit to wait on, only its /proc entry to poll.
            while running() and trio.current_time() - began < self.bounds.exit:  # noqa: ASYNC110
                await trio.sleep(0.02)
            if running():
                self.note(
                    "debuggee-terminated",
                    Outcome.FAIL,
                    f"debuggee pid {pid} still running {ms(self.bounds.exit)} after disconnect",
                )
            else:
                self.note(
                    "debuggee-terminated",
                    Outcome.PASS,
                    f"debuggee pid {pid} gone {ms(trio.current_time() - began)} after the answer",
                )
            return
        if not caps.get("supportTerminateDebuggee"):
            self.note(
                "debuggee-kept",
                Outcome.SKIP,
                "the adapter does not announce supportTerminateDebuggee",
            )
            return
        await trio.sleep(0.5)
        if running():
            self.note(
                "debuggee-kept", Outcome.PASS, f"debuggee pid {pid} still running 500 ms later"
            )
        else:
            self.note(
                "debuggee-kept", Outcome.FAIL, f"debuggee pid {pid} was ended although asked not to"
            )

    async def eof_session(self) -> None:
        async with open_program(self.argv, dap=True, cwd=self.cwd) as program:
            self.started(program)
            caps, evidence = await self.initialize(program)
            if caps is None:
                self.note("exit-on-eof", Outcome.SKIP, f"initialize failed: {evidence}")
                return
            await settle_zombies(program.descendants)
            await exit_on_eof(program, self.bounds.eof_exit, self.leftovers, self.note)

    async def run(self) -> ConformanceReport:
        await self.session(terminate=True)
        if self.launch_args is None:
            for check in ("launch", "debuggee-terminated", "debuggee-kept"):
                self.note(check, Outcome.SKIP, "no launch configuration (--launch)")
        elif self.wants("debuggee-kept"):
            await self.session(terminate=False)
        if self.wants("exit-on-eof"):
            await self.eof_session()
        if self.wants("client-vanishes"):
            await vanish_check(self, "dap", dap_initialize_arguments(self.client))
        judge_passive(self)
        for check in DAP_CHECKS:
            wanted = self.only is None or check in self.only or check == "initialize"
            if wanted or check in PASSIVE_CHECKS:
                outcome, evidence = self.results.get(check, (Outcome.SKIP, "not run"))
                self.report.add(check, outcome, evidence, RULES[check])
        return self.report


async def check_debug_adapter(
    argv: list[str],
    *,
    client: str = "vscode",
    cwd: str | None = None,
    launch: dict[str, Any] | None = None,
    bounds: Bounds | None = None,
    only: Collection[str] | None = None,
) -> ConformanceReport:
    """Run the DAP lifecycle battery against ``argv`` and return the report.

    Args:
        argv: The adapter's command line (no shell), speaking DAP on stdio.
        client: The client profile (``vscode``, ``neovim``, ``helix``).
        cwd: The working directory (default: ours).
        launch: The ``launch`` request's arguments; without them the debuggee checks skip.
            The debuggee should run for a while (a few seconds at least).
        bounds: The time bounds (default :meth:`Bounds.for_dap`).
        only: Run only these checks (``initialize`` always runs).

    Returns:
        A :class:`ConformanceReport`.

    Raises:
        ValueError: An unknown client profile or check name; a ``launch`` value JSON can't
            carry (a non-finite number, a lone surrogate), named by its path.
        CoreError: ``invalid_request``/``launch_failed``: the adapter cannot be started.

    **Cancellation:** every instance started is ended before this returns or raises.
    """
    dap_initialize_arguments(client)  # refuses an unknown profile up front
    if only is not None:
        unknown = set(only) - set(DAP_CHECKS)
        if unknown:
            raise ValueError(f"unknown check(s) {sorted(unknown)}; known: {', '.join(DAP_CHECKS)}")
    if launch is not None:
        try:
            check_request_values(launch, "launch")
        except CoreError as exc:
            raise ValueError(exc.message) from None
    workdir = workdir_of(cwd)
    battery = _Battery(list(argv), client, workdir, launch, bounds or Bounds.for_dap(), only)
    return await battery.run()
