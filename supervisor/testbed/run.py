"""Run one misbehaving program: supervised (``supervisor testbed run``) or raw.

``supervisor testbed run SCENARIO [options]`` (:func:`run_supervised`) starts the scenario's
program as a supervised process tree (own session and group, the scope marker), relays its
stdin, stdout and stderr to this terminal, and ends the whole tree -- SIGTERM, the TERM grace,
SIGKILL, the sweep by marker and ancestry -- when the program's main process exits, or when
this process gets SIGINT (Ctrl-C), SIGTERM or SIGHUP. It then says on stderr which processes
it ended. So a program that leaves a daemon behind, ignores SIGTERM or never exits is
watched the way a correct supervisor watches it, and nothing outlives the command.

``python -m supervisor.testbed.run SCENARIO [options]`` (:func:`main`) and ``supervisor
testbed run --no-supervise ...`` run the program itself in this process, unsupervised: what
it leaves behind stays (``supervisor reap`` does not know it: it carries no marker).

See :mod:`supervisor.testbed._programs` for the options and :data:`supervisor.testbed.SCENARIOS`
for what each program does.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

from .._process._ladder import DRAIN_AFTER_EXIT_MS
from .._process._tree import ProcessTree, TreeEndReport, open_process_tree
from ._programs import main, parser
from ._scenarios import program_argv

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator, Sequence

__all__ = ("main", "run_supervised")

#: The command as a user types it (usage and error messages name it).
PROG: Final = "supervisor testbed run"
#: Signals that end the program's tree; each one's status is 128 + its number.
_END_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: How long the program's output is still relayed after its main process exited, in
#: seconds (the exit and the end of the pipes are separate events): a process it left holding the
#: pipe never keeps the command waiting for more.
_DRAIN_S: Final = DRAIN_AFTER_EXIT_MS / 1000
_CHUNK_BYTES: Final = 65536


def _parser() -> argparse.ArgumentParser:
    p = parser()
    p.prog = PROG
    p.description = (
        "Run one misbehaving testbed program under the supervisor: its stdio is relayed to"
        " this terminal, and when its main process exits, or on Ctrl-C (SIGINT), SIGTERM or"
        " SIGHUP, its whole process tree is ended (SIGTERM, then SIGKILL after the grace)."
        " See `supervisor testbed list`."
    )
    p.add_argument(
        "--no-supervise",
        action="store_true",
        help="run the program itself in this process, unsupervised: what it leaves behind"
        " stays running",
    )
    return p


def run_supervised(argv: Sequence[str]) -> int:
    """``supervisor testbed run SCENARIO [options]``: run a program as a supervised tree.

    Args:
        argv: The scenario name and the program's options (``--pid-file``, ``--count``,
            ...), plus ``--no-supervise`` to run it raw in this process instead.

    Returns:
        The program's exit status (128+N when signal N ended its main process); 128+N
        when this process got signal N (SIGINT 130, SIGTERM 143, SIGHUP 129) and ended the
        tree; 2 for a bad scenario or option (argparse's usage error, nothing started).
    """
    p = _parser()
    options = p.parse_args(list(argv))
    try:
        program = program_argv(
            options.scenario,
            protocol=options.protocol,
            pid_file=options.pid_file,
            size_bytes=options.bytes,
            count=options.count,
            signal=options.signal,
            exit_after_setup=options.exit,
            trick=options.trick,
            orphan=options.orphan,
        )
    except ValueError as exc:
        p.error(str(exc))  # exits 2
    if options.no_supervise:
        # The program's own arguments: program_argv without the interpreter and the file.
        return main(program[2:])
    status, interrupted_by, report = trio.run(_supervise, program)
    _say_what_ended(interrupted_by, status, report)
    if interrupted_by is not None:
        return 128 + interrupted_by
    return status if status >= 0 else 128 - status


async def _supervise(program: list[str]) -> tuple[int, int | None, TreeEndReport | None]:
    """Run ``program`` as a tree with its stdio relayed; end the tree when it is done.

    Returns:
        ``(status, signal, report)``: the main process's status (negative: killed by that
        signal), the first signal this process got (None when the program ended by
        itself), and what ending the tree took (None when it could not start).
    """
    interrupted: list[int] = []
    # Installed before the spawn: from then on a signal ends the tree instead of raising
    # KeyboardInterrupt, and a SIGINT ignored by an inherited disposition (started with `&`
    # by a script) is handled too. The watcher keeps consuming signals while the tree
    # ends: a second Ctrl-C during the grace must not surface as a KeyboardInterrupt
    # (the receiver re-raises what is left pending when it closes).
    with trio.open_signal_receiver(*_END_SIGNALS) as signals:
        async with trio.open_nursery() as watcher:
            running = trio.CancelScope()
            watcher.start_soon(_watch_signals, signals, interrupted, running)
            try:
                tree = await open_process_tree(program)
            except CoreError as exc:
                watcher.cancel_scope.cancel()
                print(f"{PROG}: {exc.message}", file=sys.stderr)
                return 2, None, None
            status: int | None = None
            try:
                with running:
                    status = await _relay_until_exit(tree)
            finally:
                # Shielded and bounded; also ends what the program left running.
                report = await tree.aclose()
                watcher.cancel_scope.cancel()
    if status is None:
        status = report.returncode if report.returncode is not None else -signal.SIGKILL
    return status, (interrupted[0] if interrupted else None), report


async def _watch_signals(
    signals: AsyncIterator[int], interrupted: list[int], running: trio.CancelScope
) -> None:
    async for signum in signals:
        if not interrupted:
            interrupted.append(signum)
            running.cancel()


async def _relay_until_exit(tree: ProcessTree) -> int:
    """Relay the program's stdio until its main process exited and its output was drained.

    Returns:
        The main process's status (negative: killed by that signal).

    **Cancellation:** the relays stop; the tree keeps running (the caller ends it).
    """
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_relay_input, tree.stdin)
        async with trio.open_nursery() as outputs:
            outputs.start_soon(_relay_output, tree.stdout, sys.stdout.fileno())
            outputs.start_soon(_relay_output, tree.stderr, sys.stderr.fileno())
            status = await tree.wait()
            # The relays end at the end of the pipes, or at this bound.
            outputs.cancel_scope.deadline = trio.current_time() + _DRAIN_S
        nursery.cancel_scope.cancel()
    return status


def _read_input() -> bytes:
    try:
        return os.read(sys.stdin.fileno(), _CHUNK_BYTES)
    except (OSError, ValueError):  # no usable stdin: the program's input is empty
        return b""


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _relay_input(stream: trio.abc.SendStream | None) -> None:
    """Copy our stdin to the program's; our end of input is its end of input.

    Our stdin is read in a worker thread, never made non-blocking: it may be the terminal
    the shell shares with us. A read still blocked when the tree ends is abandoned.
    """
    if stream is None:
        return
    async with stream:
        while True:
            data = await trio.to_thread.run_sync(_read_input, abandon_on_cancel=True)
            if not data:
                return
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the program closed its stdin


async def _relay_output(stream: trio.abc.ReceiveStream | None, fd: int) -> None:
    """Copy one of the program's output pipes to our ``fd`` until the pipe ends.

    Writes go through a worker thread, as reads of stdin do: our stdout may be a terminal
    or a pipe others share. When our reader went away (``| head``) the program's pipe is
    closed too, so its next write fails as it would without us in between.
    """
    if stream is None:
        return
    try:
        while True:
            chunk = await stream.receive_some(_CHUNK_BYTES)
            if not chunk:
                return
            await trio.to_thread.run_sync(_write_all, fd, chunk, abandon_on_cancel=True)
    except BrokenPipeError:
        await stream.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return


def _say_what_ended(interrupted_by: int | None, status: int, report: TreeEndReport | None) -> None:
    """One line on stderr naming each process ended and how; nothing when none was."""
    if report is None:
        return
    ended = sorted({*report.terminated, *report.killed, *report.swept, *report.unkillable})
    if interrupted_by is not None:
        reason = f"{signal.Signals(interrupted_by).name}: ended the program's process tree"
    elif ended:
        how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"status {status}"
        reason = f"the program exited ({how}); ended what it left running"
    else:
        return
    parts = []
    for pid in ended:
        if pid not in report.killed:
            tags = ["SIGTERM"]
        elif pid in report.terminated:
            tags = ["SIGKILL after the TERM grace"]
        else:
            tags = ["SIGKILL"]
        if pid in report.swept:
            tags.append("outside the program's group")
        if pid in report.unkillable:
            tags.append("still alive after SIGKILL")
        parts.append(f"{pid} ({', '.join(tags)})")
    listed = ", ".join(parts) if parts else "nothing was left running"
    print(f"{PROG}: {reason}: {listed}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
