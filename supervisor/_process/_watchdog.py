"""Crash-safe cleanup: a watchdog process that sweeps what a dead supervisor left behind.

Contract: when the supervisor
process dies -- SIGKILL included, when no ``finally`` of ours can run -- every process it
started is gone within 2 s, without waiting for a next start.

Strategy. On the first spawn of a process tree (``_tree.open_process_tree`` calls
:func:`ensure_watchdog`), the supervisor starts one tiny process, the *watchdog*, and keeps the
write end of a pipe whose read end is the watchdog's stdin. Nobody ever writes to it; the
kernel closes the write end when the supervisor dies, however it dies, and the watchdog's
``read`` returns EOF. The watchdog then sweeps ``/proc`` for every live process whose
``SUPERVISOR_SCOPE`` marker names this supervisor instance (``<pid>.<starttime>/...``, see
``_marker``): SIGKILL to their process groups first (so a process forked during the sweep in
such a group dies with it), then to each process, repeated until a scan finds none or
:data:`SWEEP_BOUND_S` passes. Then it exits.

Why it is safe:

- Only the supervisor holds the write end: ``os.pipe`` makes both ends close-on-exec, every
  child is spawned with ``close_fds``, and a plain ``fork`` of the supervisor (no exec) closes
  its copy in the child (``os.register_at_fork``), so no descendant can keep the pipe open and
  delay the sweep.
- The watchdog carries no ``SUPERVISOR_SCOPE`` (it is neither swept nor counted as a leak) but
  is recognisable: ``SUPERVISOR_WATCHDOG=<instance>`` in its environment, the process name
  ``sv-watchdog`` and the argument ``supervisor-watchdog``.
- It runs in a session of its own, so a terminal's SIGINT/SIGHUP to the supervisor's group does
  not reach it (it also ignores both), and it never signals the supervisor's process group nor
  its own.
- It is ``python -I -S`` running this file as a script: only the standard library is
  imported, so it starts in tens of milliseconds and does not depend on the caller's
  ``sys.path``.
- A normal exit of the supervisor also closes the pipe; the sweep then finds nothing (every
  scope ended its processes) and the watchdog exits at once.

If the watchdog itself is killed, the supervisor starts a new one at its next spawn; if both
die, ``supervisor reap`` (or the next Core start, which calls ``reap_orphans``) ends the
orphans by marker.

This module must stay importable as a plain script: module-level imports are standard library
only; the supervisor-side functions import package modules lazily.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Final

__all__ = (
    "SWEEP_BOUND_S",
    "WATCHDOG_ARG",
    "WATCHDOG_ENV",
    "ensure_watchdog",
    "find_watchdogs",
    "sweep_instance",
    "watchdog_pid",
)

#: Environment variable naming the supervisor instance a watchdog guards.
WATCHDOG_ENV: Final = "SUPERVISOR_WATCHDOG"
#: An argument of the watchdog's command line, so ``ps`` shows what it is.
WATCHDOG_ARG: Final = "supervisor-watchdog"
#: The watchdog's process name (``/proc/<pid>/comm``, at most 15 bytes).
WATCHDOG_COMM: Final = "sv-watchdog"
#: The longest a sweep keeps scanning for processes that are still alive, in seconds.
SWEEP_BOUND_S: Final = 3.0
#: The marker variable (``_marker.SCOPE_ENV``; repeated because this file runs stand-alone).
_SCOPE_ENV: Final = "SUPERVISOR_SCOPE"
_SWEEP_PAUSE_S: Final = 0.02


@dataclass
class _Watchdog:
    owner_pid: int
    pid: int
    write_fd: int

    def alive(self) -> bool:
        """Whether the watchdog still runs; reaps it when it has exited."""
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == 0


_current: _Watchdog | None = None


def _forget_in_child() -> None:
    # A forked copy of the supervisor is a new instance (its pid differs): it must not keep
    # the parent's pipe open, or the parent's watchdog would wait for the copy to exit too.
    global _current
    if _current is not None:
        with contextlib.suppress(OSError):
            os.close(_current.write_fd)
        _current = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def ensure_watchdog() -> int | None:
    """Make sure this supervisor process has a running watchdog; start one if not.

    Called before every spawn of a process tree. Cheap when the watchdog runs (one
    non-blocking ``waitpid``); starting one costs one ``posix_spawn``, once per process (or
    again after the watchdog was killed). The watchdog starts as every child does
    (``_spawn.spawn``: own session, every signal at its default, an empty mask, only fds
    0-2), with the pipe on stdin and ``/dev/null`` on stdout and stderr, and without the
    scope marker; only its pid is kept, as it is meant to outlive us.

    Returns:
        The watchdog's pid, or None where it cannot work (no ``/proc``: not Linux).

    Raises:
        OSError: The watchdog could not be started.
    """
    global _current
    me = os.getpid()
    # The usual call first: one waitpid, no procfs lookup (this runs on
    # every spawn; the isdir below costs more than the waitpid).
    if _current is not None and _current.owner_pid == me and _current.alive():
        return _current.pid
    if not os.path.isdir("/proc/self/task"):
        return None
    from . import _reaper
    from ._marker import instance_id
    from ._spawn import DEVNULL, spawn

    if _current is not None and _current.owner_pid == me:
        # Killed behind our back (and reaped just now by alive()): replace it.
        _reaper.unregister_managed(_current.pid)
        with contextlib.suppress(OSError):
            os.close(_current.write_fd)
        _current = None
    instance = instance_id()
    read_fd, write_fd = os.pipe()  # both close-on-exec: no child of ours inherits them
    env = {k: v for k, v in os.environ.items() if k != _SCOPE_ENV}
    env[WATCHDOG_ENV] = instance
    argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), WATCHDOG_ARG, instance]
    argv.append(str(os.getpgrp()))
    try:
        pid = spawn(sys.executable, argv, env, stdin=read_fd, stdout=DEVNULL, stderr=DEVNULL).pid
    except OSError:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    # Its exit status is ours to collect (alive() above), not the orphan reaper's.
    _reaper.register_managed(pid)
    _current = _Watchdog(me, pid, write_fd)
    return pid


def watchdog_pid() -> int | None:
    """The pid of this process's watchdog, or None when none was started (or it died)."""
    if _current is None or _current.owner_pid != os.getpid() or not _current.alive():
        return None
    return _current.pid


# -- procfs, stand-alone (the watchdog imports nothing of ours) --------------------------------


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _env_value(pid: int, name: str) -> str | None:
    data = _read(f"/proc/{pid}/environ")
    if not data:
        return None
    prefix = name.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("utf-8", "surrogateescape")
    return None


def _state_and_pgid(pid: int) -> tuple[str, int] | None:
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[2])
    except (IndexError, ValueError):
        return None


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def find_watchdogs(instance: str | None = None) -> list[int]:
    """Live watchdog processes, optionally only the one guarding ``instance``.

    Args:
        instance: A supervisor instance id (``"<pid>.<starttime>"``), or None for all.

    Returns:
        Their pids, sorted.
    """
    found: list[int] = []
    for pid in _pids():
        value = _env_value(pid, WATCHDOG_ENV)
        if value is None or (instance is not None and value != instance):
            continue
        state = _state_and_pgid(pid)
        if state is not None and state[0] not in ("Z", "X"):
            found.append(pid)
    return sorted(found)


def sweep_instance(instance: str, *, protect_pgids: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILL every live process whose scope marker names ``instance``, groups first.

    Scans again after each round of signals until a scan finds nothing alive or
    :data:`SWEEP_BOUND_S` seconds pass (a process stuck in uninterruptible sleep is left).

    Args:
        instance: The supervisor instance id, ``"<pid>.<starttime>"``.
        protect_pgids: Process groups never signalled as a group (the supervisor's own);
            our own group is always protected.

    Returns:
        Every pid that was sent SIGKILL, sorted.
    """
    prefix = instance + "/"
    protected = protect_pgids | {0, 1, os.getpgrp()}
    me = os.getpid()
    signalled: set[int] = set()
    deadline = time.monotonic() + SWEEP_BOUND_S
    while True:
        victims: dict[int, int] = {}
        for pid in _pids():
            if pid == me:
                continue
            value = _env_value(pid, _SCOPE_ENV)
            if value is None or not value.startswith(prefix):
                continue
            state = _state_and_pgid(pid)
            if state is not None and state[0] not in ("Z", "X"):
                victims[pid] = state[1]
        if not victims:
            break
        for pgid in set(victims.values()) - protected:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        signalled.update(victims)
        if time.monotonic() >= deadline:
            break
        time.sleep(_SWEEP_PAUSE_S)
    return sorted(signalled)


def _main(argv: list[str]) -> int:
    """The watchdog: ``watchdog.py supervisor-watchdog INSTANCE SUPERVISOR_PGID``."""
    if len(argv) != 4 or argv[1] != WATCHDOG_ARG:
        print(f"usage: {argv[0]} {WATCHDOG_ARG} INSTANCE PGID", file=sys.stderr)
        return 2
    instance, supervisor_pgid = argv[2], int(argv[3])
    # Terminal signals meant for the supervisor's job must not take the watchdog first.
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(WATCHDOG_COMM)
    while os.read(0, 4096):
        pass  # nobody writes; only EOF (the supervisor is gone) matters
    sweep_instance(instance, protect_pgids=frozenset({supervisor_pgid}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
