"""``process.run``'s common path without an event loop: ``supervisor exec``'s start.

Why. ``supervisor exec -- CMD`` is called from scripts, often hundreds of times in a row, and
its start is most of what a short command costs: importing Trio alone takes more than twice
a whole ``python -c 'import subprocess; subprocess.run(["/bin/true"])'`` on the machines we
measure on (README "Start-up"). Most runs need nothing an event loop gives: the command starts,
writes its output, exits, and leaves nothing behind. So ``exec`` runs that path here, with the
very pieces ``process.run`` uses -- the launch checks and the spawn (``_launch``, ``_spawn``),
the scope marker, the watchdog and the subreaper, the multiplexer and its captures
(``_mux``) -- blocking its one thread between the multiplexer's passes.

What needs more is handed over, never done twice: when the deadline passes, when SIGINT or
SIGTERM arrives, when a pipe is still held open after the exit (a grandchild), or when
anything of the tree is left after the exit, :func:`run_direct` returns an :class:`Unfinished`
and the caller finishes it on Trio (``_oneshot.finish_direct``): the same multiplexer, the
same captures and the same stop ladder a ``process.run`` on the Core takes from that point.
Nothing is started when a check fails: the caller then takes the Core's path, whose answer is
the one every client gets (``invalid_request``, ``launch_failed``).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from . import _reaper, _watchdog
from ._launch import check_argv, check_cwd, check_env, resolve_executable, spawn_failed, spawned
from ._marker import SCOPE_ENV, marked_processes, new_scope_marker
from ._mux import Capture, Multiplexer, ProcessResult
from ._procfs import HAVE_PROCFS, children_of
from ._spawn import DEVNULL, PIPE, SpawnedProcess, spawn

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

__all__ = ("Unfinished", "direct_available", "release_wakeup", "run_direct", "signals_to_pipe")

#: Where this path can run: Linux, with pidfds (the exit on a descriptor), epoll and ``/proc``
#: (what is left after the exit, with the child subreaper every tree's start makes us).
_PLATFORM_OK: Final = (
    sys.platform.startswith("linux")
    and hasattr(os, "pidfd_open")
    and hasattr(select, "epoll")
    and HAVE_PROCFS
)


def direct_available() -> bool:
    """Whether :func:`run_direct` can run here (else the caller takes the Core's path)."""
    if not _PLATFORM_OK:
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))  # a kernel before 5.3, or a seccomp filter
    except OSError:
        return False
    return True


@contextlib.contextmanager
def signals_to_pipe() -> Iterator[tuple[int, list[int]]]:
    """SIGINT and SIGTERM, recorded and made readable on a pipe, for :func:`run_direct`.

    Yields ``(wake_fd, interrupted)``: ``wake_fd`` becomes readable when a signal arrives
    (``signal.set_wakeup_fd``), and each one is appended to ``interrupted``. A SIGINT ignored
    by an inherited disposition (a command started with `&` by a script) is ours too. The
    wake-up descriptor is given back when the block ends or :func:`release_wakeup` is called
    (before ``trio.run``, which takes it over); the handlers stay until the block ends, so
    no signal is lost in between (Trio's receiver replaces them while it runs).
    """
    interrupted: list[int] = []
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)

    def note(signum: int, frame: object) -> None:
        # Recorded here, acted on where run_direct wakes up (the pipe): the command's tree is
        # ended by the stop ladder, as a cancelled process.run's.
        interrupted.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    _wakeups.append(signal.set_wakeup_fd(wake_write))
    try:
        yield wake_read, interrupted
    finally:
        release_wakeup()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_read)
        os.close(wake_write)


#: The wake-up descriptor :func:`signals_to_pipe` replaced, until it is given back.
_wakeups: list[int] = []


def release_wakeup() -> None:
    """Give back the wake-up descriptor :func:`signals_to_pipe` replaced (idempotent)."""
    if _wakeups:
        signal.set_wakeup_fd(_wakeups.pop())


@dataclass
class Unfinished:
    """A run :func:`run_direct` handed over: what ``_oneshot.finish_direct`` continues.

    Attributes:
        process: The main process (reaped already when ``exited_at`` is set).
        args: Its argv.
        marker: The tree's scope marker.
        mux: The multiplexer as the direct path left it (its epoll is the caller's to close;
            the pipes stay open in ``process.pipes``).
        out: The stdout capture so far.
        err: The stderr capture so far.
        started: ``time.perf_counter()`` before the spawn.
        exited_at: ``time.perf_counter()`` when the exit was seen, or None while it runs.
        timed_out: The deadline passed while the main process ran.
        interrupted: SIGINT or SIGTERM arrived (the run is cancelled).
    """

    process: SpawnedProcess
    args: list[str]
    marker: str
    mux: Multiplexer
    out: Capture
    err: Capture
    started: float
    exited_at: float | None
    timed_out: bool
    interrupted: bool


def run_direct(
    argv: Sequence[str],
    *,
    cwd: str | None,
    env: Mapping[str, str | None] | None,
    stdin: str | None,
    timeout_ms: int | None,
    max_output_bytes: int,
    wake_fd: int,
    interrupted: list[int],
    stdio: tuple[int, int, int] | None = None,
) -> ProcessResult | Unfinished:
    """Run ``argv`` as ``process.run`` does, without an event loop, as far as it can go.

    Args:
        argv: The program and its arguments (no shell).
        cwd: The working directory, or None for ours.
        env: Changes to our environment (None removes a variable).
        stdin: Text for the command's stdin (then closed), or None for ``/dev/null``.
        timeout_ms: The deadline in milliseconds from the spawn, or None for none.
        max_output_bytes: Bytes kept per stream.
        wake_fd: Readable when a signal arrived (``signal.set_wakeup_fd``'s pipe).
        interrupted: The signals received so far (the caller's handler appends).
        stdio: Descriptors the command gets as its stdin, stdout and stderr (``exec
            --stream``: ours), instead of pipes read into the result; ``stdin`` is then None.

    Returns:
        The :class:`ProcessResult` when the command exited and left nothing (the tree is
        ended, every descriptor closed); else an :class:`Unfinished` to finish on Trio.

    Raises:
        CoreError: ``invalid_request`` or ``launch_failed`` from the launch checks or the
            spawn: nothing was started.
    """
    args = check_argv(argv)
    child_env = check_env(env)
    workdir = check_cwd(cwd)
    executable = resolve_executable(args[0], workdir, child_env)
    marker = new_scope_marker()
    child_env[SCOPE_ENV] = marker
    _watchdog.ensure_watchdog()  # sweeps our trees if we die, even by SIGKILL
    # A child subreaper while the tree is open (as every tree's start makes us): without it,
    # what the command leaves can not be proven gone, and the stop ladder always takes over.
    subreaper = _reaper.tree_opening()
    started = time.perf_counter()
    with _reaper.spawning():
        try:
            process = spawn(
                executable,
                args,
                child_env,
                cwd=workdir,
                stdin=(DEVNULL if stdin is None else PIPE) if stdio is None else stdio[0],
                stdout=PIPE if stdio is None else stdio[1],
                stderr=PIPE if stdio is None else stdio[2],
            )
        except OSError as exc:
            _reaper.tree_ended()
            raise spawn_failed(exc, args[0]) from exc
        spawned(process.pid)
    deadline = None if timeout_ms is None else started + timeout_ms / 1000
    out = Capture("stdout", max_output_bytes, None)
    err = Capture("stderr", max_output_bytes, None)
    pipes = process.pipes
    for fd in pipes.values():
        os.set_blocking(fd, False)
    stdin_fd = pipes.get("stdin")

    def close_stdin() -> None:
        fd = pipes.pop("stdin", None)
        if fd is not None:
            os.close(fd)

    readers = {} if stdio is not None else {pipes["stdout"]: out, pipes["stderr"]: err}
    mux = Multiplexer(process, process.pidfd, readers, stdin_fd, stdin or b"", close_stdin)

    def unfinished(*, timed_out: bool) -> Unfinished:
        exited = process.returncode is not None
        return Unfinished(
            process,
            args,
            marker,
            mux,
            out,
            err,
            started,
            time.perf_counter() if exited else None,
            timed_out,
            bool(interrupted),
        )

    if mux.pidfd is None:
        return unfinished(timed_out=False)  # no pidfd after all (out of descriptors)
    # What the Core's start does, done while the command runs: processes left by a supervisor
    # that died (SIGKILL, crash) end now (invariant 8).
    _reaper.reap_orphans()
    done = mux.run_blocking(until_exit=True, deadline=deadline, wake_fd=wake_fd)
    if not done or interrupted:
        return unfinished(timed_out=not interrupted)
    mux.stop_feeding()
    mux.drain_nowait()
    if mux.readers or not subreaper or _left_behind(process.pid):
        # A pipe held open by what the command left running, or something left: the stop
        # ladder's work, with its bounds.
        return unfinished(timed_out=False)
    return _finish(process, mux, out, err, started)


def _finish(
    process: SpawnedProcess, mux: Multiplexer, out: Capture, err: Capture, started: float
) -> ProcessResult:
    """The end of a run that exited and left nothing: what the stop ladder would have
    found and done (nothing to signal; the records closed), and the result."""
    mux.close()
    for fd in list(process.pipes.values()):
        os.close(fd)
    process.pipes.clear()
    _reaper.unregister_managed(process.pid)
    _reaper.tree_ended()
    if not marked_processes():
        # Nothing of ours is left anywhere, proven: the watchdog need not sweep at our exit.
        _watchdog.nothing_to_sweep()
    rc = process.returncode
    assert rc is not None
    return ProcessResult(
        exit_code=rc if rc >= 0 else None,
        signal=-rc if rc < 0 else None,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=False,
        truncated=out.truncated or err.truncated,
        duration_ms=math.ceil((time.perf_counter() - started) * 1000),
    )


def _left_behind(main_pid: int) -> bool:
    """Whether anything of the tree of ``main_pid`` (exited and reaped) may still exist.

    We are a child subreaper, so every process the command left -- in its group, in a
    session of its own, double-forked, without the marker -- became our child when its
    parent died: a child of ours other than the watchdog is something left (alive, or a
    zombie to collect), and the stop ladder takes over. The kernel re-parents a dying
    process's children before its pidfd reports the exit.
    """
    watchdog = _watchdog.watchdog_pid()
    return any(pid not in (watchdog, main_pid) for pid in children_of(os.getpid()))
