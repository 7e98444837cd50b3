"""Child subreaper, reaping of adopted orphans, and the orphan sweep.

Strategy. On Linux the supervisor makes itself a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``, once per process), so a descendant whose
parent dies -- a double-forked daemon, a grandchild left behind -- is reparented to
us instead of to init. That keeps every live descendant of a tree reachable by
ancestry, and makes those orphans our children: we must reap them, or they stay zombies.

Trio waits for the children it spawned by pid (through a pidfd), so a blanket
``waitpid(-1)`` would steal their exit statuses. Instead we list our children from
``/proc/self/task/*/children`` and reap only zombies that are

- not a main process we spawned and whose status Trio has yet to collect
  (the *managed* registry below), and
- not in our own session: every tree starts in a new session and no descendant
  can move back into ours, so a child in our session belongs to other code (for
  example ``trio.run_process`` or ``subprocess.run`` in a thread) and is theirs
  to wait for.

While a spawn is in flight the new child's pid is not yet registered; during that
window zombies that lead their own session (which is what a freshly spawned tree
main looks like) are left for a later pass.

``PR_SET_PDEATHSIG`` is never used: Trio spawns from a worker thread, and the
kernel sends that signal when the *thread* that forked exits, which kills the
child about ten seconds after spawn.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from typing import TYPE_CHECKING

from ._marker import SCOPE_ENV, instance_alive, instance_id, split_marker
from ._procfs import (
    HAVE_PROCFS,
    ProcStat,
    all_pids,
    children_of,
    children_of_main_thread,
    read_env_var,
    read_stat,
)

if TYPE_CHECKING:
    from collections.abc import Container, Iterable, Iterator


__all__ = (
    "adopted_children",
    "adopted_stats",
    "ensure_subreaper",
    "is_managed",
    "reap_adopted_children",
    "reap_orphans",
    "reap_zombies",
    "register_managed",
    "spawning",
    "subreaper_active",
    "unregister_managed",
)

_PR_SET_CHILD_SUBREAPER = 36

_subreaper_pid: int | None = None
_subreaper_active = False
_managed: set[int] = set()
_spawns_in_flight = 0


def ensure_subreaper() -> bool:
    """Make this process a child subreaper (Linux), once per process.

    Returns:
        True when the process is a child subreaper; False where the facility does
        not exist (not Linux, or prctl refused), in which case orphans reparent to
        init and are found by marker and remembered ancestry instead.
    """
    global _subreaper_pid, _subreaper_active
    pid = os.getpid()
    if _subreaper_pid == pid:
        return _subreaper_active
    _subreaper_pid = pid
    _subreaper_active = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper_active = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper_active = False
    return _subreaper_active


def subreaper_active() -> bool:
    """Whether :func:`ensure_subreaper` succeeded in this process."""
    return _subreaper_pid == os.getpid() and _subreaper_active


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Mark a spawn in flight, so reaping leaves fresh session leaders alone."""
    global _spawns_in_flight
    _spawns_in_flight += 1
    try:
        yield
    finally:
        _spawns_in_flight -= 1


def register_managed(pid: int) -> None:
    """Record a main process whose exit status Trio will collect."""
    _managed.add(pid)


def unregister_managed(pid: int) -> None:
    """Forget a main process once Trio has reaped it."""
    _managed.discard(pid)


def is_managed(pid: int) -> bool:
    """Whether ``pid`` is a spawned main process not yet reaped by Trio."""
    return pid in _managed


def adopted_children() -> list[int]:
    """Our children that are adopted descendants of some tree (live or zombie).

    Excludes managed main processes and children in our own session (other code's).
    """
    return [st.pid for st in adopted_stats()]


def adopted_stats(*, reap_exited: Container[int] = ()) -> list[ProcStat]:
    """:func:`adopted_children` with the ``/proc/<pid>/stat`` read to find them.

    Args:
        reap_exited: Pids of tree members known to have exited (their pidfds said so):
            those among our children are reaped on the way without reading their stat,
            and left out of the result (one ``waitpid`` each, no procfs read).
    """
    if not HAVE_PROCFS:
        return []
    my_sid = os.getsid(0)
    found: list[ProcStat] = []
    me = os.getpid()
    # Orphans are reparented to our main thread; the other threads' children are what
    # they spawned themselves (tree mains, which are managed, or other code's, in our
    # session), so reading them all is only needed when the main thread is unreadable.
    children = children_of_main_thread(me)
    for pid in children if children is not None else children_of(me):
        if pid in _managed:
            continue
        if pid in reap_exited:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if done == pid:
                continue
        stat = read_stat(pid)
        if stat is None or stat.sid == my_sid:
            continue
        found.append(stat)
    return found


def reap_zombies(stats: Iterable[ProcStat]) -> list[int]:
    """Reap the zombies among ``stats`` (from :func:`adopted_stats`); never blocks.

    The one reaping pass of a tree end, on stats it has just read (no second procfs read), with
    the rules of :func:`reap_adopted_children`.

    Returns:
        The pids reaped.
    """
    reaped: list[int] = []
    for stat in stats:
        if stat.state != "Z" or (_spawns_in_flight and stat.sid == stat.pid):
            continue
        try:
            done, _ = os.waitpid(stat.pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done == stat.pid:
            reaped.append(stat.pid)
    return reaped


def reap_adopted_children() -> list[int]:
    """Reap zombie children we adopted as subreaper; never touches Trio's own.

    Call it at every tree end and when the supervisor closes. Never blocks.

    Returns:
        The pids reaped.
    """
    return reap_zombies(adopted_stats())


def reap_orphans() -> list[int]:
    """End processes left by dead supervisor instances (``supervisor reap``).

    Finds every process whose environment carries ``SUPERVISOR_SCOPE`` naming a
    supervisor instance that is no longer running (its pid is gone, is a zombie,
    or was reused: the start time differs), and every live member of such a
    process's group (one that cleared its environment is still part of the tree),
    sends SIGKILL to those groups (never our own) and to each process, then reaps
    what became our zombie child, so a crashed run leaves nothing. Never blocks: it
    signals and returns; SIGKILL cannot be ignored, so the processes are gone
    moments later.

    Returns:
        The pids that were signalled, sorted: the marked processes and the other
        members of their groups, found before the first signal is sent (a process
        that joins a group after that scan is killed with it but not listed).
    """
    if not HAVE_PROCFS:
        return []
    me = os.getpid()
    my_instance = instance_id()
    my_pgid = os.getpgrp()
    verdicts: dict[tuple[int, int], bool] = {}
    victims: set[int] = set()
    groups: set[int] = set()
    pids = all_pids()
    # Find everything first, signal afterwards: a killpg sent while scanning would turn
    # the group's other members into zombies before the scan reaches them, and they
    # would go unlisted.
    for pid in pids:
        if pid == me:
            continue
        value = read_env_var(pid, SCOPE_ENV)
        if value is None:
            continue
        parsed = split_marker(value)
        if parsed is None:
            continue
        owner_pid, owner_start, _ = parsed
        if f"{owner_pid}.{owner_start}" == my_instance:
            continue
        key = (owner_pid, owner_start)
        if key not in verdicts:
            verdicts[key] = instance_alive(owner_pid, owner_start)
        if verdicts[key]:
            continue
        stat = read_stat(pid)
        if stat is None or stat.dead:
            continue
        victims.add(pid)
        if stat.pgid not in (my_pgid, 0, 1):
            groups.add(stat.pgid)
    if groups:
        for pid in pids:
            if pid == me or pid in victims:
                continue
            stat = read_stat(pid)
            if stat is not None and not stat.dead and stat.pgid in groups:
                victims.add(pid)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    reap_adopted_children()
    return sorted(victims)
