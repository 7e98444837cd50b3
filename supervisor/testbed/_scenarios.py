"""The scenario registry: what each testbed program does and what a correct supervisor does.

Each :class:`Scenario` names one misbehaving program (``_programs.py``), the protocols it can
speak, and the handling a supervisor owes it; ``tests/testbed`` holds one test
per scenario that shows this supervisor doing exactly that. ``supervisor testbed list``
prints this table.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Final

__all__ = ("SCENARIOS", "Scenario", "get_scenario", "program_argv")

_PROGRAM_FILE: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_programs.py")


@dataclass(frozen=True)
class Scenario:
    """One misbehaviour of a fixture program.

    Attributes:
        name: The scenario name (``supervisor testbed run NAME``).
        protocols: What the program speaks: ``"lsp"``, ``"dap"`` (``--protocol dap``),
            ``"job"`` (a plain program) or ``"pty"`` (a terminal program).
        summary: What the program does.
        handling: What a correct supervisor does with it (and the invariant it proves).
        options: The options that shape it (``--bytes``, ``--count``, ...).
    """

    name: str
    protocols: tuple[str, ...]
    summary: str
    handling: str
    options: tuple[str, ...] = ()

    def to_json(self) -> dict[str, str | list[str]]:
        """The wire form used by ``supervisor testbed list --json``."""
        return {
            "name": self.name,
            "protocols": list(self.protocols),
            "summary": self.summary,
            "handling": self.handling,
            "options": list(self.options),
        }


_RPC: Final = ("lsp", "dap")

#: Every scenario, by name: the control case, then the misbehaviours.
SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        Scenario(
            "well-behaved",
            _RPC,
            "A correct server: answers initialize, echoes requests, honours shutdown/exit.",
            "Control case: the session starts, requests complete, stop is polite (no signal).",
        ),
        Scenario(
            "crash-on-initialize",
            _RPC,
            "Exits with status 70 and a traceback on stderr when initialize arrives.",
            "The initialize request ends exactly once with 'the session ended';"
            " the crash is reported with the exit status and stderr tail; nothing is left.",
        ),
        Scenario(
            "exit-signal",
            ("job",),
            "Kills itself with a signal (default SIGKILL).",
            "process.run reports signal=N and exitCode=null; a job ends 'failed' with the"
            " signal; the process is reaped (no zombie).",
            ("--signal",),
        ),
        Scenario(
            "no-shutdown-reply",
            _RPC,
            "Never answers shutdown (DAP: disconnect) and ignores exit.",
            "Stopping waits for the reply only for its bound (LSP 3 000 ms, DAP 2 000 ms),"
            " then sends exit and waits for the exit (LSP 2 000 ms, DAP 1 000 ms), then"
            " SIGTERM ends it (SIGKILL only past the TERM grace): stop is bounded.",
        ),
        Scenario(
            "ignore-sigterm",
            ("job", *_RPC),
            "Ignores SIGTERM, SIGINT and SIGHUP, then hangs. With --protocol it serves LSP"
            " (DAP), answers shutdown (disconnect), but never exits: not on exit, not at the"
            " end of input.",
            "After the TERM grace (2 000 ms) the group gets SIGKILL; the end is bounded and"
            " the main process ends by SIGKILL. A language-server stop runs"
            " shutdown (answered), exit, the exit wait (2 000 ms), SIGTERM, the grace, SIGKILL.",
            ("--protocol",),
        ),
        Scenario(
            "grandchild-setsid",
            ("job",),
            "Starts a grandchild in a new session that ignores SIGTERM and holds stdout open.",
            "The sweep by marker and ancestry kills the grandchild although it left the group"
            " and session; the pipe it holds never stretches the deadline.",
            ("--exit", "--pid-file"),
        ),
        Scenario(
            "daemon",
            ("job",),
            "Double-forks a daemon (fork, setsid, fork) that ignores SIGTERM, closes stdio.",
            "The subreaper adopts the daemon and the sweep ends it; nothing outlives the"
            " scope, and no zombie stays.",
            ("--exit", "--pid-file"),
        ),
        Scenario(
            "zombie-maker",
            ("job", *_RPC),
            "Starts --count children that exit at once and never reaps them. With --protocol"
            " it serves LSP (DAP) meanwhile, its zombies staying as long as it runs.",
            "When the program ends, its zombies are re-parented to the supervisor (child"
            " subreaper) and reaped: no zombie remains. `supervisor check` fails it on"
            " reaps-children.",
            ("--count", "--exit", "--pid-file", "--protocol"),
        ),
        Scenario(
            "main-thread-exits",
            ("job", *_RPC),
            "Starts three helpers that ignore SIGTERM and whose main thread exits while another"
            " thread runs (as Go and Java helpers do): one in its session, one after setsid,"
            " one double-forked. Their /proc/PID/environ reads empty, their state reads Z. With"
            " --protocol it serves LSP (DAP) and leaves them when it exits.",
            "The helpers are alive, not zombies: the end of the tree finds them by ancestry"
            " with start times and by the marker read through a live thread, SIGKILLs them"
            " after the TERM grace, and nothing outlives the scope. `supervisor check` fails it"
            " on no-leftovers and client-vanishes, and leaves nothing.",
            ("--exit", "--pid-file", "--protocol"),
        ),
        Scenario(
            "flood-stdout",
            ("job",),
            "Writes --bytes (default 64 MiB + 1 KiB) to stdout as fast as it can.",
            "Output is read to the end and kept only up to the cap (truncated=true): the"
            " program is never blocked nor killed for it, memory stays bounded.",
            ("--bytes",),
        ),
        Scenario(
            "flood-stderr",
            ("job",),
            "Writes --bytes to stderr as fast as it can.",
            "stderr is read concurrently with stdout and capped the same way; job output"
            " events stay bounded; neither stream waits on the other.",
            ("--bytes",),
        ),
        Scenario(
            "stdin-stall",
            _RPC,
            "Answers initialize, then never reads stdin again.",
            "Only that session's writer blocks (flow control: it is waited for, never timed"
            " out, unless a write timeout is asked for); its requests end at their deadlines,"
            " a stop ends it; every other session and the Core keep answering.",
        ),
        Scenario(
            "malformed-header",
            _RPC,
            "Answers initialize with 'Content-Length: twelve', then hangs.",
            "The stream is broken: the session fails with a protocol error, the pending"
            " request ends exactly once, the process is ended (LSP base protocol framing).",
        ),
        Scenario(
            "char-content-length",
            _RPC,
            "Counts Content-Length in characters; its answers carry non-ASCII text.",
            "Lengths are counted in bytes: the cut body is a parse error and the rest of it"
            " stray text, never a wrong message; the request never gets an answer and ends"
            " exactly once at its deadline (a language server: initialize times out, the"
            " session fails with initializeTimeout).",
        ),
        Scenario(
            "answer-after-cancel",
            _RPC,
            "Holds each request until it is cancelled, then answers it anyway; serves"
            " everything else (shutdown, other requests) meanwhile.",
            "The request already ended 'cancelled' (or timed out); the late answer is ignored"
            " and never forwarded; the session goes on and stops politely.",
        ),
        Scenario(
            "double-answer",
            _RPC,
            "Answers every request twice with the same id.",
            "The first answer completes the request; the second is ignored.",
        ),
        Scenario(
            "unknown-id",
            _RPC,
            "Sends an answer to an id the client never used before each real answer.",
            "The stray answer is ignored (counted); the session and the real request go on.",
        ),
        Scenario(
            "request-storm",
            _RPC,
            "Sends --count server->client requests at once after initialize.",
            "Each gets exactly one answer (a result, or 'busy' past the concurrency bound);"
            " memory and pending work stay bounded and the client keeps answering (inv. 4, 6).",
            ("--count",),
        ),
        Scenario(
            "oversized-notification",
            _RPC,
            "Sends a notification whose body is --bytes long (default over 64 MiB).",
            "The frame is refused from its header alone (never buffered): the session fails"
            " with a protocol error, requests end, the process is ended.",
            ("--bytes",),
        ),
        Scenario(
            "escape-artist",
            ("job",),
            "Keeps starting processes that ignore SIGTERM and escape with one trick (--trick):"
            " a new session, a new process group, an empty environment (no scope marker),"
            " a double fork, or a mix every few milliseconds (window); with --orphan each"
            " one's parent exits at once. Keeps the --count newest (at most 16).",
            "Ending the tree finds every escapee by ancestry (orphans come back to the child"
            " subreaper) and ends it by TERM then KILL. A SIGKILL of `supervisor serve` at any"
            " moment ends them all within 2 s: its guardian or its worker, whichever is left,"
            " ends every descendant (invariant 14).",
            ("--trick", "--orphan", "--count", "--exit"),
        ),
        Scenario(
            "hang",
            ("job",),
            "Prints ready, then never answers and never exits.",
            "A deadline (timeoutMilliseconds, the job's timeout) or a cancel ends it: the call"
            " ends 'timed_out'/'cancelled' exactly once and the tree is ended."
            " Started as a language server, its initialize times out: the session fails"
            " (initializeTimeout) and its pending requests end once.",
        ),
        Scenario(
            "exit-with-pending",
            _RPC,
            "Exits with status 0 as soon as an ordinary request arrives, without answering.",
            "The pending request ends exactly once with 'the session ended'; an exit during a"
            " request is a crash, not a clean stop.",
        ),
        Scenario(
            "requests-before-initialize",
            _RPC,
            "Talks before answering initialize: LSP sends window/logMessage (allowed) and a"
            " workspace/configuration request (not allowed); DAP sends the initialized event"
            " before the initialize response.",
            "The client answers the early request and the session starts; `supervisor check`"
            " fails it on requests-before-initialize, naming the message (LSP 3.17"
            " 'initialize'; DAP 'initialize' and the 'initialized' event).",
        ),
        Scenario(
            "terminal-ignore-hangup",
            ("pty",),
            "A stubborn terminal program: ignores SIGHUP/SIGTERM/SIGINT, echoes lines and"
            " keeps running after end of input.",
            "Closing the terminal (hangup, end of input) is not enough: TERM then KILL end it"
            " within the bounds.",
        ),
    )
}


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name``.

    Raises:
        KeyError: There is no such scenario (the message lists the known ones).
    """
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def program_argv(
    scenario: str,
    *,
    protocol: str | None = None,
    pid_file: str | os.PathLike[str] | None = None,
    size_bytes: int | None = None,
    count: int | None = None,
    signal: int | None = None,
    exit_after_setup: bool = False,
    trick: str | None = None,
    orphan: bool = False,
    python: str = sys.executable,
) -> list[str]:
    """The argv that runs a scenario's program (hand it to ``process.run``, ``job.start``...).

    The program runs as a plain script (standard library plus :mod:`protocol`), which starts
    several times faster than ``python -m supervisor.testbed.run``.

    Args:
        scenario: A name from :data:`SCENARIOS`.
        protocol: ``"lsp"`` or ``"dap"`` for protocol programs; None: LSP.
        pid_file: Where the program appends every pid it starts (one per line).
        size_bytes: ``--bytes`` (flood and oversized-notification sizes), in bytes.
        count: ``--count`` (zombie-maker children, request-storm requests).
        signal: ``--signal`` (exit-signal's signal number).
        exit_after_setup: ``--exit``: leave the processes behind and exit 0.
        trick: ``--trick`` (escape-artist's: ``setsid``, ``pgrp``, ``env-i``,
            ``double-fork``, ``window`` or ``all``).
        orphan: ``--orphan`` (escape-artist: each escapee's parent exits at once).
        python: The interpreter (default: this one).

    Returns:
        The argv (a list of strings).

    Raises:
        KeyError: Unknown scenario.
        ValueError: ``protocol`` is not one the scenario speaks.
    """
    known = get_scenario(scenario)
    argv = [python, _PROGRAM_FILE, scenario]
    if protocol is not None:
        if protocol not in known.protocols or protocol not in _RPC:
            raise ValueError(f"scenario {scenario!r} does not speak {protocol!r}")
        argv += ["--protocol", protocol]
    if pid_file is not None:
        argv += ["--pid-file", os.fspath(pid_file)]
    if size_bytes is not None:
        argv += ["--bytes", str(size_bytes)]
    if count is not None:
        argv += ["--count", str(count)]
    if signal is not None:
        argv += ["--signal", str(signal)]
    if exit_after_setup:
        argv.append("--exit")
    if trick is not None:
        argv += ["--trick", trick]
    if orphan:
        argv.append("--orphan")
    return argv
