"""What the LSP and DAP batteries share: bounds, exit wording, and the checks judged over every
instance (what comes before the initialize answer, zombies, leftovers, stdout hygiene)."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Final

import trio

from .._process._procfs import HAVE_PROCFS
from ._report import Outcome
from ._watch import describe_running

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._peer import Program
    from ._watch import Descendants

__all__ = (
    "REAPS_CHILDREN_RULE",
    "ZOMBIE_BOUND_S",
    "Bounds",
    "Leftovers",
    "Zombies",
    "behind",
    "describe_status",
    "early_verdict",
    "exit_on_eof",
    "settle_leftovers",
    "settle_zombies",
    "stdout_verdict",
)

#: How long a program's descendants get to follow it out after it exited, in seconds.
LEFTOVER_SETTLE_S: Final = 1.0
#: How long a child of the program may stay a zombie (exited, not collected), in seconds.
ZOMBIE_BOUND_S: Final = 1.0
#: How often ``settle_zombies`` samples, in seconds.
_ZOMBIE_SAMPLE_S: Final = 0.02
#: How much longer than the bound ``settle_zombies`` waits at most, in seconds.
_ZOMBIE_SETTLE_SLACK_S: Final = 3.0
#: The rule of ``reaps-children`` (both protocols).
REAPS_CHILDREN_RULE: Final = (
    "POSIX wait(2): a process collects each child that exited, else the child stays a zombie"
    " holding its pid and process slot; no child of the program or of its helpers stays a"
    " zombie over 1 000 ms, in any instance"
)


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


def behind(program: Program, rid: object) -> str:
    """``; the instance had not answered M sent N ms earlier`` when a request of ours sent
    before ``rid`` on the same instance is still unanswered, else ``""``: a server that works
    through requests one by one is still busy with that one, and the finding must say so (the
    check that failed is not to blame)."""
    earlier = program.unanswered_before(rid)
    if earlier is None:
        return ""
    method, before = earlier
    return f"; the instance had not answered {method} sent {ms(before)} earlier"


def cut_json(value: object, limit: int = 120) -> str:
    """``value`` as compact JSON for evidence, cut to ``limit`` characters (``...``)."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=repr)
    return text if len(text) <= limit else text[:limit] + "..."


def plural(count: int, noun: str) -> str:
    """``1 instance``, ``3 instances``, ``2 children``."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}{'ren' if noun.endswith('child') else 's'}"


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
        if live:
            self.found.append(f"{step}: {describe_running(live)}")

    def verdict(self) -> tuple[Outcome, str]:
        """The ``no-leftovers`` outcome and evidence."""
        if not self.looked:
            return (
                Outcome.SKIP,
                "the program never exited on its own (the checker ended it), so its leftovers"
                " were not judged",
            )
        if self.found:
            return Outcome.FAIL, "; ".join(self.found)
        return (
            Outcome.PASS,
            f"nothing of it ran {ms(LEFTOVER_SETTLE_S)} after each of"
            f" {plural(self.looked, 'exit')} (ancestry with start times, scope marker, child"
            " subreaper)",
        )


class Zombies:
    """The ``reaps-children`` check across a battery: the zombie children of every instance
    (each instance's :class:`~._watch.Descendants` notes them while it samples)."""

    def __init__(self) -> None:
        self.watched: list[Descendants] = []

    def watch(self, descendants: Descendants) -> None:
        self.watched.append(descendants)

    def verdict(self) -> tuple[Outcome, str]:
        """The ``reaps-children`` outcome and evidence."""
        if not self.watched:
            return Outcome.SKIP, "no instance ran"
        if not HAVE_PROCFS:
            return Outcome.SKIP, "needs /proc to see zombies"
        seen = sum(len(d.zombies) for d in self.watched)
        late = [
            (longest, d)
            for d in self.watched
            if (longest := d.longest_zombie()) is not None and longest[2] > ZOMBIE_BOUND_S
        ]
        if late:
            (pid, parent, age), worst = max(late, key=lambda item: item[0][2])
            count = sum(
                1
                for d in self.watched
                for (_p, first, last) in d.zombies.values()
                if last - first > ZOMBIE_BOUND_S
            )
            who = "the program" if parent == worst.root else "its process"
            what = next((cmd for (p, _s), cmd in worst.seen.items() if p == pid), "?")
            return Outcome.FAIL, (
                f"{plural(count, 'child')} stayed a zombie (exited, not collected) over"
                f" {ms(ZOMBIE_BOUND_S)}, on {len(late)} of {plural(len(self.watched), 'instance')};"
                f" the longest: pid {pid} ({what}), a child of {who} {parent}, at least"
                f" {ms(age)}"
            )
        if seen:
            longest_ms = max(
                (last - first for d in self.watched for (_p, first, last) in d.zombies.values()),
                default=0.0,
            )
            return Outcome.PASS, (
                f"{plural(seen, 'exited child')} collected, none a zombie over"
                f" {ms(ZOMBIE_BOUND_S)}"
                f" (the longest seen {ms(longest_ms)}), across"
                f" {plural(len(self.watched), 'instance')}"
            )
        return Outcome.PASS, (
            f"no child left a zombie across {plural(len(self.watched), 'instance')} (sampled"
            " every 20 ms)"
        )


async def settle_zombies(descendants: Descendants) -> None:
    """Before an instance ends, give each zombie child the time to be judged: wait until every
    one seen was collected or has stayed over :data:`ZOMBIE_BOUND_S` (no wait when there is
    none). A program that keeps making children that it collects at once holds this up by
    milliseconds; :data:`_ZOMBIE_SETTLE_SLACK_S` past the bound, it goes on regardless."""
    # Ages are measured between samples, so the bound is judged however late a busy machine
    # wakes us; the deadline only keeps a stalled sampler from holding the instance forever.
    deadline = trio.current_time() + ZOMBIE_BOUND_S + _ZOMBIE_SETTLE_SLACK_S
    while trio.current_time() < deadline:
        descendants.sample()
        if all(age > ZOMBIE_BOUND_S for age in descendants.zombies_now().values()):
            return
        await trio.sleep(_ZOMBIE_SAMPLE_S)


def early_verdict(programs: list[Program], extra: list[list[str]]) -> tuple[Outcome, str]:
    """The ``requests-before-initialize`` outcome and evidence over every instance that got
    an ``initialize`` answer (``extra``: what the vanishing client's instance sent)."""
    lists = [p.early for p in programs if p.initialize_answered] + extra
    allowed = sorted({m for p in programs for m in p.early_allowed})
    if not lists:
        return Outcome.SKIP, "no instance answered initialize"
    bad = [early for early in lists if early]
    if bad:
        names = list(dict.fromkeys(m for early in bad for m in early))
        return Outcome.FAIL, (
            f"sent {', '.join(names[:6])} before its initialize answer, in {len(bad)} of"
            f" {plural(len(lists), 'instance')}"
        )
    return Outcome.PASS, (
        "nothing the rule forbids before its initialize answer, in"
        f" {plural(len(lists), 'instance')}"
        + (f" (sent {', '.join(allowed)}, which it allows)" if allowed else "")
    )


async def settle_leftovers(program: Program) -> dict[int, str]:
    deadline = trio.current_time() + LEFTOVER_SETTLE_S
    while True:
        live = program.descendants.alive()
        if not live or trio.current_time() >= deadline:
            return live
        await trio.sleep(0.05)


def stdout_verdict(programs: list[Program]) -> tuple[Outcome, str]:
    """The ``stdout-frames`` outcome and evidence over every instance."""
    stray = sum(p.stray_bytes for p in programs)
    # What the developer needs to find the print: the first stray text, escaped and bounded.
    first = next((p for p in programs if p.stray_first is not None), None)
    shown = f", first: {first.stray_first}" if first is not None else ""
    broken = [p for p in programs if p.protocol_error]
    if broken:
        if first is broken[0] and first.stray_began_stdout:
            shown = ""  # its stdout's start is quoted already (``yes``)
        return (
            Outcome.FAIL,
            f"stdout stopped being a frame stream: it {broken[0].protocol_error}"
            + (f"; and {stray} bytes outside frames{shown}" if stray else ""),
        )
    if stray:
        return Outcome.FAIL, f"{stray} bytes on stdout outside frames{shown}"
    return Outcome.PASS, f"only frames on stdout across {plural(len(programs), 'instance')}"


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
