"""Crash cleanup without a window: the command line's process as a guardian and a worker.

Contract (docs/architecture.md "Process ownership"): when ``supervisor serve`` dies --
SIGKILL included, at any
moment -- every process it started or adopted is gone within 2 s.

Why the watchdog alone can not promise it. The watchdog (``_watchdog``) is a *child* of the
supervisor: it learns what the supervisor started, and takes an ancestry snapshot every
250 ms. When the supervisor dies, its children -- tree mains and the orphans it adopted as
child subreaper -- are re-parented by the kernel to its nearest living subreaper *ancestor*,
or to init. A process that was forked, left its session, cleared its environment and lost
its parent after the last snapshot is then linked to the supervisor by nothing the watchdog
can read. Only an ancestor keeps that link: the kernel itself hands every orphan to it.

Strategy. Before it serves, the command line splits its process (:func:`guard_process`):

- the **guardian** keeps the pid the client started (so its signals, its exit status, and
  its SIGKILL), becomes a child subreaper, and ``exec``\\ s a tiny stand-alone loop
  (``_watchdog.guard``: ``python -I -S _watchdog.py supervisor-guardian``) that passes the
  client's signals on to the worker, waits for it, then SIGKILLs every descendant it has
  left and exits as the worker did (same code, or death by the same signal);
- the **worker** (the forked child) runs the supervisor as before -- itself a child
  subreaper, with its own watchdog -- and holds the read end of a *lifeline* pipe whose
  only write end the guardian holds. A thread blocks on it; at EOF (the guardian died,
  however) it refuses every further spawn, SIGKILLs every descendant of the worker and
  exits.

So a SIGKILL of either process leaves the other alive, and whichever survives is an
ancestor of everything: the guardian of the worker's whole tree (orphans come to it when
the worker dies), the worker of its own. Both sweeps walk ``/proc/<pid>/task/*/children``
from themselves, so the session, the process group and the environment of a descendant do
not matter, nor does when it was forked. Only both processes killed at once (``kill -9``
of both pids) falls back to the watchdog, whose window is one snapshot interval.

Process groups. Without a terminal on stdin the worker leads a process group of its own,
so a signal to the client's process group reaches the guardian only, which passes it on
once (the worker never sees a SIGTERM twice), and a ``kill -9`` of that group leaves the
worker to sweep. With a terminal on stdin the worker stays in the guardian's group: it
reads the terminal in the foreground, job control (^Z) stops both, and the guardian does
not pass on what the terminal sent (the worker got it too).

Cost: one ``fork`` and one small process (about 10 MB resident) per command line; nothing
per spawn. Disabled with ``SUPERVISOR_GUARDIAN=0`` in the environment, where there is no
``/proc``, and when the process already runs threads (a fork would copy their locks).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
from typing import Final, NoReturn

from . import _watchdog

__all__ = ("GUARDIAN_ENV", "guard_process", "guardian_pid", "serving_pid")

logger = logging.getLogger("supervisor.guardian")

#: Set to ``0`` to run the command line in one process (the watchdog alone then cleans up).
GUARDIAN_ENV: Final = "SUPERVISOR_GUARDIAN"
_PR_SET_CHILD_SUBREAPER: Final = 36
#: The worker's exit status after its guardian died and it ended everything.
_ORPHANED_EXIT: Final = 128 + signal.SIGKILL

#: The guardian's pid, in the worker (one cell; None elsewhere).
_guardian = [0]


def guardian_pid() -> int | None:
    """The pid of this worker's guardian, or None when this process has none."""
    return _guardian[0] or None


def serving_pid(pid: int) -> int:
    """The process that serves for a command line started as ``pid`` (for measurements).

    ``pid`` itself when it runs without a guardian; otherwise the guardian's one child, the
    worker, which holds the supervisor's memory, descriptors and threads.
    """
    try:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() != _watchdog.GUARDIAN_COMM:
                return pid
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(child) for child in f.read().split()]
    except OSError:
        return pid
    return children[0] if len(children) == 1 else pid


def _set_subreaper(on: bool) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def guard_process() -> bool:
    """Split this process into a guardian (the parent) and a worker (the child, returning).

    Call it first thing in a command line that owns its process (``supervisor serve``),
    before any thread runs. The guardian never returns: it execs its loop and ends as the
    worker ends.

    Returns:
        True in the worker when the split happened; False when it did not (disabled, not
        Linux, threads already running, or the system refused), and the caller goes on as
        one process.
    """
    if os.environ.get(GUARDIAN_ENV) == "0" or not os.path.isdir("/proc/self/task"):
        return False
    if threading.active_count() != 1 or not sys.platform.startswith("linux"):
        return False
    if not _set_subreaper(True):
        return False
    same_group = os.isatty(0)
    read_fd, write_fd = os.pipe()  # close-on-exec; the guardian's end is made inheritable
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _watchdog.GUARDED_SIGNALS)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for fd in (read_fd, write_fd):
            os.close(fd)
        _set_subreaper(False)
        return False
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        os.close(write_fd)
        if not same_group:
            with contextlib.suppress(OSError):
                os.setpgid(0, 0)
        _guardian[0] = os.getppid()
        threading.Thread(
            target=_hold_lifeline, args=(read_fd,), name="supervisor-lifeline", daemon=True
        ).start()
        return True
    _become_guardian(pid, read_fd, write_fd, same_group=same_group)


def _become_guardian(worker: int, read_fd: int, write_fd: int, *, same_group: bool) -> NoReturn:
    """The parent's side: never returns."""
    if not same_group:
        # The worker calls it too; whichever runs first wins the race with its first spawn.
        with contextlib.suppress(OSError):
            os.setpgid(worker, worker)
    os.close(read_fd)
    os.set_inheritable(write_fd, True)
    # The guardian holds no end of the protocol stream: the client sees the end of output
    # when the worker exits, and the worker alone reads its input.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    argv = [sys.executable, "-I", "-S", os.path.abspath(_watchdog.__file__)]
    argv += [_watchdog.GUARDIAN_ARG, str(worker), "group" if same_group else "own"]
    try:
        os.execv(sys.executable, argv)
    except OSError:
        # The same loop in this interpreter: heavier, as safe.
        os._exit(_watchdog.exit_as(_watchdog.guard(worker, same_group=same_group)))


def _hold_lifeline(read_fd: int) -> None:
    """The worker's thread: block until the guardian is gone, then end everything."""
    with contextlib.suppress(OSError):
        while os.read(read_fd, 64):
            pass  # nothing is ever written: only the end of the pipe matters
    from ._spawn import refuse_spawns

    # From here on nothing new starts (a spawn in flight finishes first), so one sweep
    # that finds no descendant is final.
    refuse_spawns()
    with contextlib.suppress(Exception):
        logger.error("the guardian (pid %d) died: ending every process", _guardian[0])
    _watchdog.sweep_descendants(os.getpid())
    os._exit(_ORPHANED_EXIT)
