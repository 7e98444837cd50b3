"""What the LSP and DAP batteries share: bounds, leftovers, stdout hygiene, exit wording."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Final

import trio

from ._report import Outcome

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._peer import Program
    from ._report import ConformanceReport

__all__ = (
    "Bounds",
    "Leftovers",
    "describe_status",
    "exit_on_eof",
    "record_stdout",
    "settle_leftovers",
)

#: How long a program's descendants get to follow it out after it exited, in seconds.
LEFTOVER_SETTLE_S: Final = 1.0


@dataclass(frozen=True)
class Bounds:
    """Every time bound of the checks, in seconds.

    The stop bounds are the supervisor's own (README "How it ends processes"): an editor
    that waits longer than these is rare, so a program that needs more is reported.

    Attributes:
        initialize: The ``initialize`` answer.
        request: An ordinary request's answer (and a cancelled one's).
        shutdown: The LSP ``shutdown`` answer (DAP: ``disconnect``).
        exit: The exit after ``exit`` (DAP: after the ``disconnect`` answer).
        eof_exit: The exit after stdin is closed.
        vanish_exit: The exit after the client was SIGKILLed.
        stall: How long the client stops reading.
    """

    initialize: float = 10.0
    request: float = 5.0
    shutdown: float = 3.0
    exit: float = 2.0
    eof_exit: float = 2.0
    vanish_exit: float = 5.0
    stall: float = 1.0

    def scaled(self, factor: float) -> Bounds:
        """Every bound but ``stall`` times ``factor`` (a slow machine, a JIT-started peer)."""
        return replace(
            self,
            **{f.name: getattr(self, f.name) * factor for f in fields(self) if f.name != "stall"},
        )

    @classmethod
    def for_dap(cls) -> Bounds:
        """DAP's stop bounds: 2 000 ms for the ``disconnect`` answer, 1 000 ms to exit."""
        return cls(shutdown=2.0, exit=1.0)


def workdir_of(cwd: str | None) -> str:
    """The absolute working directory of the programs under check (default: ours)."""
    return os.path.abspath(cwd or os.getcwd())


async def no_answer(program: Program, waited_s: float) -> str:
    """Why a request got no answer: our own message came back (an echo), it wrote what is no
    frame, it ended (how), or the bound passed."""
    if program.echoed:
        return (
            f"echoed our request back instead of answering ({len(program.echoed)} of our"
            f" messages came back verbatim, first: {program.echoed[0]})"
        )
    if program.eof:
        rc = await program.wait_exit(1.0)
        if program.protocol_error is not None:
            # We stopped reading; its stdout may well be open still.
            return program.protocol_error + (
                f", then {describe_status(rc)}" if rc is not None else " (still running)"
            )
        return (
            f"{describe_status(rc)} without answering"
            if rc is not None
            else "closed its stdout without answering"
        )
    if program.protocol_error is not None:
        return f"no answer in {ms(waited_s)}; it {program.protocol_error}"
    return f"no answer in {ms(waited_s)}"


def cut_json(value: object, limit: int = 120) -> str:
    """``value`` as compact JSON for evidence, cut to ``limit`` characters (``...``)."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=repr)
    return text if len(text) <= limit else text[:limit] + "..."


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def describe_status(rc: int | None) -> str:
    """``exited 0``, ``killed by SIGPIPE``, or ``still running``."""
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited {rc}"


class Leftovers:
    """Leftovers found after programs that exited on their own, across a battery."""

    def __init__(self) -> None:
        self.looked = 0
        self.found: list[str] = []

    async def after_exit(self, program: Program, step: str) -> None:
        """Give the descendants :data:`LEFTOVER_SETTLE_S` to follow, then note survivors."""
        self.looked += 1
        live = await settle_leftovers(program)
        for pid, cmd in sorted(live.items()):
            self.found.append(f"{step}: pid {pid} still running: {cmd}")

    def report(self, report: ConformanceReport, rule: str) -> None:
        if not self.looked:
            report.add(
                "no-leftovers",
                Outcome.SKIP,
                "the program never exited on its own (the checker ended it), so its leftovers"
                " were not judged",
                rule,
            )
        elif self.found:
            report.add("no-leftovers", Outcome.FAIL, "; ".join(self.found), rule)
        else:
            report.add(
                "no-leftovers",
                Outcome.PASS,
                f"nothing of it ran {ms(LEFTOVER_SETTLE_S)} after each of {self.looked}"
                " exits (ancestry with start times, scope marker, child subreaper)",
                rule,
            )


async def settle_leftovers(program: Program) -> dict[int, str]:
    deadline = trio.current_time() + LEFTOVER_SETTLE_S
    while True:
        live = program.descendants.alive()
        if not live or trio.current_time() >= deadline:
            return live
        await trio.sleep(0.05)


def record_stdout(report: ConformanceReport, programs: list[Program], rule: str) -> None:
    stray = sum(p.stray_bytes for p in programs)
    errors = [p.protocol_error for p in programs if p.protocol_error]
    if errors:
        report.add(
            "stdout-frames",
            Outcome.FAIL,
            f"stdout stopped being a frame stream: it {errors[0]}"
            + (f"; and {stray} bytes outside frames" if stray else ""),
            rule,
        )
    elif stray:
        report.add("stdout-frames", Outcome.FAIL, f"{stray} bytes on stdout outside frames", rule)
    else:
        report.add(
            "stdout-frames",
            Outcome.PASS,
            f"only frames on stdout across {len(programs)} instances",
            rule,
        )


async def exit_on_eof(
    program: Program,
    bound_s: float,
    leftovers: Leftovers,
    note: Callable[[str, Outcome, str], None],
) -> None:
    """The ``exit-on-eof`` check of both batteries: close the program's stdin, then it must
    exit on its own (not by a signal) within ``bound_s`` seconds; its leftovers are judged."""
    await program.close_stdin()
    start = trio.current_time()
    rc = await program.wait_exit(bound_s)
    if rc is None:
        note("exit-on-eof", Outcome.FAIL, f"still running {ms(bound_s)} after its stdin closed")
        return
    note(
        "exit-on-eof",
        Outcome.FAIL if rc < 0 else Outcome.PASS,
        f"{describe_status(rc)} {ms(trio.current_time() - start)} after its stdin closed",
    )
    await leftovers.after_exit(program, "after stdin EOF")
