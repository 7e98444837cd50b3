"""Child subreaper, exact reaping of adopted orphans, and the orphan sweep.

Strategy. On Linux the supervisor makes itself a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``) while any process tree is open (:func:`tree_opening`,
:func:`tree_ended`), so a descendant whose parent dies -- a double-forked daemon, a
grandchild left behind -- is reparented to us instead of to init. That keeps every live
descendant of a tree reachable by ancestry, and makes those orphans our children: we must
reap them, or they stay zombies.

The process may be a host program that embeds the supervisor and starts children of its own
(``subprocess.Popen``, with or without a new session). Their exit statuses are the host's:
reaping is exact, never a blanket ``waitpid(-1)``. We list our children from
``/proc/self/task/*/children`` and reap a zombie only when we can prove it is not a child the
host forked itself:

- a main process we spawned is reaped by its own ``SpawnedProcess`` (the *managed*
  registry below), never here;
- a process a tree scan saw as one of its members, that carried this instance's marker, or
  that the watchdog's ancestry snapshots saw under one of our trees (``_watchdog``), is
  recorded with its start time (:func:`note_ours`); a zombie with that pid and start time is
  ours;
- any other child is an orphan we adopted, and nobody else may wait for it, when it is not a
  session leader and is not in a session the host process has been in: a child the host forks
  inherits the host's session and can only leave it by ``setsid``, which makes it a session
  leader.

A zombie child that is a session leader nobody recorded (it may be the host's own child
started with ``start_new_session``) is left alone: losing a host's exit status is worse than
a zombie. Our own such orphans are recorded while alive, by the tree scans and by
:func:`adopted_stats` reading the marker of every unknown session leader it lists; one that
died before any of them saw it stays a zombie of the host. The ``supervisor`` command line
owns its whole process (:func:`own_whole_process`): there every unmanaged child outside our
session is an adopted orphan.

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
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from . import _watchdog
from ._marker import SCOPE_ENV, Verdict, instance_id, instance_verdict, parse_marker
from ._procfs import (
    HAVE_PROCFS,
    ProcStat,
    all_pids,
    children_of,
    children_of_main_thread,
    own_pid,
    read_env_var,
    read_stat,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Set as AbstractSet


__all__ = (
    "OrphanReport",
    "adopted_children",
    "adopted_stats",
    "ensure_subreaper",
    "forget_ours",
    "is_managed",
    "managed_pids",
    "note_ours",
    "own_whole_process",
    "owning_whole_process",
    "provably_ours",
    "reap_adopted_children",
    "reap_orphans",
    "reap_zombies",
    "register_managed",
    "spawning",
    "subreaper_active",
    "sweep_orphans",
    "tree_ended",
    "tree_opening",
    "unregister_managed",
)

_PR_SET_CHILD_SUBREAPER = 36

_subreaper_pid: int | None = None
_subreaper_active = False
_managed: set[int] = set()
_spawns_in_flight = 0
#: Processes proven ours (tree members seen alive, carriers of our marker): pid -> start time.
_ours: dict[int, int] = {}
#: Every session this process has been seen in; a child it forked itself is in one of them
#: or leads its own.
_host_sessions: set[int] = set()
#: Whether no host shares this process (one cell, set by :func:`own_whole_process`).
_whole_process = [False]
#: Process trees between their spawn and their end (one cell), under ``_trees_lock``: Cores on
#: several threads of one host share the process's subreaper state.
_trees_open = [0]
#: Adopted children told to the watchdog, as ``(pid, start time)``.
_told_watchdog: set[tuple[int, int]] = set()
#: ``_ours`` is pruned of processes gone (or pids reused) past this many records.
_OURS_PRUNE_AT = 4096
_trees_lock = threading.Lock()


def _set_subreaper(on: int) -> bool:
    """``prctl(PR_SET_CHILD_SUBREAPER, on)``; True when it succeeded.

    The C library's ``prctl`` is looked up once: every tree's start and end toggle the
    subreaper, and loading the library and building the function each time cost 10-40 us.
    """
    if not _prctl:
        _prctl.append(ctypes.CDLL(None, use_errno=True).prctl)
    return bool(_prctl[0](_PR_SET_CHILD_SUBREAPER, on, 0, 0, 0) == 0)


#: ``[libc.prctl]`` once looked up (see :func:`_set_subreaper`).
_prctl: list[Any] = []


def ensure_subreaper() -> bool:
    """Make this process a child subreaper (Linux), once per process.

    Returns:
        True when the process is a child subreaper; False where the facility does
        not exist (not Linux, or prctl refused), in which case orphans reparent to
        init and are found by marker and remembered ancestry instead.
    """
    global _subreaper_pid, _subreaper_active
    pid = own_pid()
    if _subreaper_pid == pid:
        return _subreaper_active
    _subreaper_pid = pid
    _subreaper_active = False
    if sys.platform.startswith("linux"):
        try:
            _subreaper_active = _set_subreaper(1)
        except (OSError, AttributeError):
            _subreaper_active = False
    return _subreaper_active


def tree_opening() -> bool:
    """Count a process tree about to be spawned, and be a child subreaper from now on.

    Pair every call with one :func:`tree_ended` (the tree's end, or a spawn that failed).

    Returns:
        What :func:`ensure_subreaper` returns.
    """
    with _trees_lock:
        _trees_open[0] += 1
        return ensure_subreaper()


def tree_ended() -> None:
    """Count a tree ended; after the last one, stop being a child subreaper.

    A host's own orphans (its grandchildren) then go to init again rather than to a process
    that would leave their zombies to nobody (the reaping above never takes a child in the
    host's session nor an unknown session leader). The ``supervisor`` command line owns its
    whole process (:func:`own_whole_process`) and stays a subreaper.
    """
    global _subreaper_pid, _subreaper_active
    with _trees_lock:
        _trees_open[0] = max(0, _trees_open[0] - 1)
        if _trees_open[0] or _whole_process[0] or not subreaper_active():
            return
        with contextlib.suppress(OSError, AttributeError):
            _set_subreaper(0)
        _subreaper_pid = None
        _subreaper_active = False


def subreaper_active() -> bool:
    """Whether :func:`ensure_subreaper` succeeded in this process."""
    return _subreaper_pid == own_pid() and _subreaper_active


class _Spawning:
    """:func:`spawning`'s context manager (a class: cheaper than a generator per spawn)."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _spawns_in_flight
        _spawns_in_flight += 1

    def __exit__(self, *exc_info: object) -> None:
        global _spawns_in_flight
        _spawns_in_flight -= 1


_SPAWNING: Final = _Spawning()


def spawning() -> _Spawning:
    """Mark a spawn in flight for the ``with`` block, so reaping leaves fresh session
    leaders alone."""
    return _SPAWNING


def register_managed(pid: int) -> None:
    """Record a main process whose exit status Trio will collect."""
    _managed.add(pid)


def unregister_managed(pid: int) -> None:
    """Forget a main process once Trio has reaped it."""
    _managed.discard(pid)


def managed_pids() -> AbstractSet[int]:
    """The main processes whose exit status Trio will collect (a live view, not a copy)."""
    return _managed


def is_managed(pid: int) -> bool:
    """Whether ``pid`` is a spawned main process not yet reaped by Trio."""
    return pid in _managed


def note_ours(pid: int, starttime: int) -> None:
    """Record ``pid`` (started at ``starttime``) as a process of ours: a tree member or a
    carrier of our marker. Its zombie, when it becomes our child, is ours to reap."""
    _ours[pid] = starttime


def forget_ours(pids: Iterable[int]) -> None:
    """Drop the records of ``pids`` (gone, or their tree ended clean)."""
    for pid in pids:
        _ours.pop(pid, None)


def _sessions() -> set[int]:
    with contextlib.suppress(OSError):
        _host_sessions.add(os.getsid(0))
    return _host_sessions


_sessions()  # the session we started in: what the host forks before any tree inherits it


def own_whole_process() -> None:
    """Declare that no host shares this process (the ``supervisor`` command line).

    Then a child outside our sessions that we did not spawn can only be an orphan we adopted,
    session leader or not, and every such zombie is reaped. Embedded in a host (``open_core``,
    ``CoreThread``) the supervisor never assumes it, as such a child may be the host's own.
    Prefer :func:`owning_whole_process`, which gives the claim back.
    """
    _whole_process[0] = True
    _watchdog.set_whole_process(True)


@contextlib.contextmanager
def owning_whole_process() -> Iterator[None]:
    """:func:`own_whole_process` for the length of the block, then a host again.

    The command line's ``main()`` runs in its own process, but tests and programs may call it
    in theirs: when it returns, that process's own children are the host's once more, and the
    process stops being a child subreaper if no tree is open.
    """
    global _subreaper_pid, _subreaper_active
    own_whole_process()
    try:
        yield
    finally:
        with _trees_lock:
            _whole_process[0] = False
            _watchdog.set_whole_process(False)
            if not _trees_open[0] and subreaper_active():
                with contextlib.suppress(OSError, AttributeError):
                    _set_subreaper(0)
                _subreaper_pid = None
                _subreaper_active = False


def provably_ours(stat: ProcStat) -> bool:
    """Whether our child ``stat`` is one we may reap: recorded as ours, or an adopted orphan.

    See the module docstring: a child the host forked is in a session the host has been in,
    or leads a session of its own; neither is reaped unless recorded (or unless no host
    shares the process: :func:`own_whole_process`).
    """
    if _ours.get(stat.pid) == stat.starttime or _whole_process[0]:
        return True
    return stat.sid != stat.pid and stat.sid not in _sessions()


def _take_watchdog_records() -> None:
    """Record as ours what the watchdog's ancestry snapshots saw under our trees.

    One non-blocking read when nothing is new. The records of processes gone since are
    pruned once they pile up (a process reaped by its own parent never comes back to us).
    """
    _ours.update(_watchdog.drain_records())
    if len(_ours) > _OURS_PRUNE_AT:
        for pid, starttime in list(_ours.items()):
            stat = read_stat(pid)
            if stat is None or stat.starttime != starttime:
                del _ours[pid]


def adopted_children() -> list[int]:
    """Our children that are adopted descendants of some tree (live or zombie).

    Excludes managed main processes and children in a session of ours (the host's).
    """
    return [st.pid for st in adopted_stats()]


def adopted_stats(*, reap_exited: Mapping[int, int] | None = None) -> list[ProcStat]:
    """:func:`adopted_children` with the ``/proc/<pid>/stat`` read to find them.

    A live child leading a session of its own that nobody recorded has its marker read: one
    of this instance is recorded as ours (:func:`note_ours`), so its zombie can be reaped later.

    Args:
        reap_exited: Tree members known to have exited (their pidfds said so), pid -> start
            time: those among our children are reaped on the way, once their stat shows the
            same process, and left out of the result.
    """
    if not HAVE_PROCFS:
        return []
    found: list[ProcStat] = []
    # The watchdog's records prove ours what no other fact does; they are needed only for an
    # unknown child (the common tree end has none, after its members were reaped by pidfd).
    # Likewise our sessions and marker prefix (a ``getsid`` and a lookup): only for one.
    records_taken = False
    sessions: set[int] = _host_sessions
    prefix = ""
    me = own_pid()
    # Orphans are reparented to our main thread; the other threads' children are what
    # they spawned themselves (tree mains, which are managed, or other code's, in our
    # session), so reading them all is only needed when the main thread is unreadable.
    children = children_of_main_thread(me)
    for pid in children if children is not None else children_of(me):
        if pid in _managed:
            continue
        if not records_taken:
            _take_watchdog_records()
            records_taken = True
            sessions = _sessions()
            prefix = instance_id() + "/"
        stat = read_stat(pid)
        if stat is None or stat.sid in sessions:
            continue
        if reap_exited and reap_exited.get(pid) == stat.starttime and stat.dead:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    _ours.pop(pid, None)
                    continue
        if not stat.dead and stat.sid == stat.pid and _ours.get(pid) != stat.starttime:
            marker = read_env_var(pid, SCOPE_ENV)
            if marker is not None and marker.startswith(prefix):
                note_ours(pid, stat.starttime)
        if not stat.dead:
            _record_adopted(stat)
        found.append(stat)
    return found


def _record_adopted(stat: ProcStat) -> None:
    """Tell the watchdog about a live adopted child we can prove ours, once per process.

    Before the reaper reaps or leaves it, whatever its session or environment: the
    watchdog then ends it (and what it starts) if we die, even after it lost every trace
    of its tree. Embedded in a host, only a child recorded as ours counts (an unknown one
    may be the host's); owning the whole process, every adopted child does.
    """
    key = (stat.pid, stat.starttime)
    if key in _told_watchdog:
        return
    if not _whole_process[0] and _ours.get(stat.pid) != stat.starttime:
        return
    if len(_told_watchdog) >= _OURS_PRUNE_AT:
        _told_watchdog.clear()  # a repeated record costs the watchdog one stat read
    _told_watchdog.add(key)
    _watchdog.watch_adopted(stat.pid)


def reap_zombies(stats: Iterable[ProcStat]) -> list[int]:
    """Reap the zombies among ``stats`` (from :func:`adopted_stats`) that are provably ours
    (:func:`provably_ours`); never blocks.

    The one reaping pass of a tree end, on stats it has just read (no second procfs read), with
    the rules of :func:`reap_adopted_children`.

    Returns:
        The pids reaped.
    """
    reaped: list[int] = []
    for stat in stats:
        if stat.state != "Z" or (_spawns_in_flight and stat.sid == stat.pid):
            continue
        if not provably_ours(stat):
            continue
        try:
            done, _ = os.waitpid(stat.pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done == stat.pid:
            _ours.pop(stat.pid, None)
            reaped.append(stat.pid)
    return reaped


def reap_adopted_children() -> list[int]:
    """Reap zombie children we adopted as subreaper; never touches Trio's own nor the host's.

    Call it at every tree end and when the supervisor closes. Never blocks.

    Returns:
        The pids reaped.
    """
    return reap_zombies(adopted_stats())


@dataclass(frozen=True, slots=True)
class OrphanReport:
    """What a sweep for orphans of dead supervisors found (``supervisor reap``).

    Attributes:
        ended: Pids sent SIGKILL (for a dry run: that would be), sorted: processes whose
            marker names an instance proven dead, and the other members of their groups.
        left: Marked processes left alone because their instance could not be proven dead,
            as ``(pid, instance, reason)`` sorted by pid: another pid namespace, another boot,
            the old marker form (see ``_marker.instance_verdict``).
    """

    ended: list[int] = field(default_factory=list)
    left: list[tuple[int, str, str]] = field(default_factory=list)


def reap_orphans() -> list[int]:
    """End processes left by dead supervisor instances; :func:`sweep_orphans`' ended pids."""
    return sweep_orphans().ended


def sweep_orphans(*, dry_run: bool = False) -> OrphanReport:
    """End processes left by dead supervisor instances (``supervisor reap``).

    Finds every process whose environment carries ``SUPERVISOR_SCOPE`` naming a
    supervisor instance that is provably dead in our own pid namespace and on this boot
    (its pid is gone, is a zombie, or was reused: the start time differs), and every live
    member of such a process's group (one that cleared its environment is still part of the
    tree), sends SIGKILL to those groups (never our own, nor one holding a process whose
    instance runs or is unprovable) and to each process, then reaps what became our zombie
    child, so a crashed run leaves nothing. A marker whose instance cannot be proven dead
    (another namespace or boot, the old form) is left alone and reported. Never blocks: it
    signals and returns; SIGKILL cannot be ignored, so the processes are gone moments later.

    Args:
        dry_run: Only find and report; signal nothing.

    Returns:
        The pids signalled (the marked processes and the other members of their groups,
        found before the first signal is sent: a process that joins a group after that scan is
        killed with it but not listed) and the marked processes left alone.
    """
    report = OrphanReport()
    if not HAVE_PROCFS:
        return report
    me = os.getpid()
    my_instance = instance_id()
    my_pgid = os.getpgrp()
    verdicts: dict[str, tuple[Verdict, str]] = {}
    victims: set[int] = set()
    groups: set[int] = set()
    spared_groups: set[int] = set()
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
        marker = parse_marker(value)
        if marker is None:
            continue
        if marker.instance not in verdicts:
            verdicts[marker.instance] = (
                ("alive", "this instance")
                if marker.instance == my_instance
                else instance_verdict(marker)
            )
        verdict, reason = verdicts[marker.instance]
        stat = read_stat(pid)
        if stat is None or stat.dead:
            continue
        if verdict != "dead":
            spared_groups.add(stat.pgid)
            if verdict == "unprovable":
                report.left.append((pid, marker.instance, reason))
            continue
        victims.add(pid)
        if stat.pgid not in (my_pgid, 0, 1):
            groups.add(stat.pgid)
    groups -= spared_groups
    if groups:
        for pid in pids:
            if pid == me or pid in victims:
                continue
            stat = read_stat(pid)
            if stat is not None and not stat.dead and stat.pgid in groups:
                value = read_env_var(pid, SCOPE_ENV)
                if value is None or parse_marker(value) is None:
                    victims.add(pid)  # the marker cleared: a member of the dead tree's group
    report.ended.extend(sorted(victims))
    report.left.sort()
    if dry_run:
        return report
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    reap_adopted_children()
    return report
