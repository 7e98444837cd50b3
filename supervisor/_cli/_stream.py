"""``supervisor exec --stream -- ARGV...``: run one command as ``timeout`` and ``env`` do.

Contract: the command gets our stdin, stdout and stderr themselves (not pipes: its output
passes through unbuffered, colours and ``isatty`` included, and nothing is kept), runs as a
supervised process tree in a session of its own, and its whole tree ends when it exits, when
the deadline passes or when SIGINT/SIGTERM arrives (TERM to its group, a grace, KILL, a sweep
by scope marker and ancestry: what it left running in the background is gone too). The exit
status is that of ``timeout`` (GNU coreutils) for the same run:

- the command's own status, 128+N when a signal N ended it;
- 124 when the deadline passed (the tree is then ended);
- 125 when we refused to start it (a bad option value, a missing working directory);
- 126 when the program is found but can not be run (not executable, a directory);
- 127 when the program is not found;
- 130/143 when SIGINT/SIGTERM ended it (the tree first).

Why the JSON result stays ``exec``'s default: ``exec`` is the Core's ``process.run`` on the
command line, and its default output is that command's answer, the same object ``serve`` and
the envelope give, which scripts and the tests already read (exit code, signal, captured and
bounded output, ``timedOut``, ``truncated``); ``--stream`` is the mode for a person or a
script that wants the output as it comes and only the status, and takes the flag.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._process._direct import Unfinished
    from .._process._mux import ProcessResult

__all__ = (
    "EXIT_CANNOT_RUN",
    "EXIT_NOT_FOUND",
    "EXIT_REFUSED",
    "EXIT_TIMED_OUT",
    "exec_finish",
    "exec_stream",
    "finish",
    "launch_exit_status",
)

#: ``timeout``'s statuses (GNU coreutils): the deadline passed; we failed; the program is
#: found but can not be run; it is not found.
EXIT_TIMED_OUT: Final = 124
EXIT_REFUSED: Final = 125
EXIT_CANNOT_RUN: Final = 126
EXIT_NOT_FOUND: Final = 127


def launch_exit_status(details: object) -> int | None:
    """126 or 127 for a ``launch_failed`` about the program (``details.reason``), else None."""
    if not isinstance(details, dict):
        return None
    reason = details.get("reason")
    if reason == "notFound":
        return EXIT_NOT_FOUND
    if reason == "notExecutable":
        return EXIT_CANNOT_RUN
    return None


def _open_or_null(fd: int) -> int:
    """``fd`` when it is open, else ``-3`` (``subprocess.DEVNULL``): a closed stdio of ours
    gives the command ``/dev/null`` rather than a failed start."""
    import subprocess

    try:
        os.fstat(fd)
    except OSError:
        return subprocess.DEVNULL
    return fd


def exec_stream(
    argv: Sequence[str],
    *,
    timeout_ms: int | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    stdin: bool,
) -> int:
    """Run ``argv`` with our stdio and return the exit status (see the module docstring).

    A command that exits and leaves nothing runs without an event loop (``_process._direct``);
    anything else runs its own ``trio.run``. Call it from synchronous code only.

    Args:
        argv: The program and its arguments (no shell).
        timeout_ms: The deadline in milliseconds, None or 0 for none.
        cwd: The working directory, or None for ours.
        env: Variables set on top of our environment.
        stdin: Give the command our stdin (False: ``/dev/null``).
    """
    import subprocess

    from protocol import MAX_MILLISECONDS, CoreError

    if timeout_ms is not None and not 0 <= timeout_ms <= MAX_MILLISECONDS:
        print(
            f"supervisor exec: --timeout-ms must be 0 to {MAX_MILLISECONDS} (0: none)",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    if not argv:
        print(
            "supervisor exec: no command: supervisor exec --stream -- PROGRAM ...", file=sys.stderr
        )
        return EXIT_REFUSED

    stdio = (
        _open_or_null(0) if stdin else subprocess.DEVNULL,
        _open_or_null(1),
        _open_or_null(2),
    )
    from .._process._direct import direct_available

    if direct_available():
        return _stream_direct(argv, timeout_ms=timeout_ms, cwd=cwd, env=env, stdio=stdio)

    async def main() -> int:
        from .._process._tree import open_process_tree

        interrupted: list[int] = []
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            try:
                tree = await open_process_tree(
                    list(argv),
                    cwd=cwd,
                    env=env,
                    stdin=stdio[0],
                    stdout=stdio[1],
                    stderr=stdio[2],
                )
            except CoreError as exc:
                print(f"supervisor exec: {exc.message}", file=sys.stderr)
                return launch_exit_status(exc.details) or EXIT_REFUSED
            timed_out = False
            async with trio.open_nursery() as nursery:

                async def watch_signals() -> None:
                    async for signum in signals:
                        if not interrupted:
                            interrupted.append(signum)
                            nursery.cancel_scope.cancel()

                nursery.start_soon(watch_signals)
                deadline = trio.current_time() + (timeout_ms or 0) / 1000
                with trio.CancelScope(deadline=deadline if timeout_ms else float("inf")) as scope:
                    await tree.wait()
                timed_out = scope.cancelled_caught
                nursery.cancel_scope.cancel()
            # The main process has exited, or must end now: the whole tree goes (shielded
            # and bounded inside aclose), what it left in the background with it.
            await tree.aclose()
        code = tree.returncode
        assert code is not None
        return _status(interrupted, timed_out, code, timeout_ms)

    import trio

    return trio.run(main)


def _stream_direct(
    argv: Sequence[str],
    *,
    timeout_ms: int | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    stdio: tuple[int, int, int],
) -> int:
    """:func:`exec_stream` without starting Trio when the command leaves nothing
    (``_process._direct``; what needs the stop ladder is handed over to it)."""
    from protocol import CoreError

    from .._process._direct import run_direct, signals_to_pipe

    with signals_to_pipe() as (wake_fd, interrupted):
        try:
            outcome = run_direct(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=None,
                timeout_ms=timeout_ms or None,
                max_output_bytes=1,  # nothing is read: the command has our stdio
                wake_fd=wake_fd,
                interrupted=interrupted,
                stdio=stdio,
            )
        except CoreError as exc:
            print(f"supervisor exec: {exc.message}", file=sys.stderr)
            return launch_exit_status(exc.details) or EXIT_REFUSED
        result = finish(outcome, interrupted)
    if result is None:
        return _status(interrupted, False, 0, timeout_ms)
    code = -result.signal if result.signal is not None else result.exit_code
    assert code is not None
    return _status([], result.timed_out, code, timeout_ms)


def _status(interrupted: list[int], timed_out: bool, code: int, timeout_ms: int | None) -> int:
    """``exec --stream``'s exit status (``timeout``'s), said on stderr when we ended it."""
    if interrupted:
        name = signal.Signals(interrupted[0]).name
        print(f"supervisor exec: {name}: the command was ended", file=sys.stderr)
        return 128 + interrupted[0]
    if timed_out:
        print(
            f"supervisor exec: the command passed its deadline ({timeout_ms} ms) and was ended",
            file=sys.stderr,
        )
        return EXIT_TIMED_OUT
    return 128 - code if code < 0 else code


def finish(outcome: ProcessResult | Unfinished, interrupted: list[int]) -> ProcessResult | None:
    """``run_direct``'s outcome as a result: a run it handed over is finished on Trio
    (:func:`exec_finish`, which takes the wake-up descriptor over); None when a signal
    cancelled it. Call it inside ``signals_to_pipe``'s block."""
    from .._process._direct import Unfinished, release_wakeup

    if not isinstance(outcome, Unfinished):
        return outcome
    import trio

    release_wakeup()  # Trio takes it over
    return trio.run(exec_finish, outcome, interrupted)


async def exec_finish(run: Unfinished, interrupted: list[int]) -> ProcessResult | None:
    """Finish a run ``_process._direct.run_direct`` handed over, on Trio (``exec`` and ``exec
    --stream``); a signal meanwhile cancels it, and its tree still ends.

    Returns:
        The result, or None when SIGINT or SIGTERM cancelled the run (``interrupted`` names
        them).
    """
    import trio

    from .._process._oneshot import finish_direct

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for signum in signals:
                    # One at a time, as they come: the nursery cancels this loop.
                    interrupted.append(signum)  # noqa: PERF401

            nursery.start_soon(watch_signals)
            run.interrupted = run.interrupted or bool(interrupted)
            result = await finish_direct(run)
            nursery.cancel_scope.cancel()
    return None if interrupted else result
