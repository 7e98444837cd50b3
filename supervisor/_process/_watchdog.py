"""Crash-safe cleanup: a watchdog process that sweeps what a dead supervisor left behind.

Contract: when the supervisor
process dies -- SIGKILL included, when no ``finally`` of ours can run -- every process it
started is gone within 2 s, without waiting for a next start.

Strategy. On the first spawn of a process tree (``_tree.open_process_tree`` calls
:func:`ensure_watchdog`), the supervisor starts one tiny process, the *watchdog*, and keeps the
write end of a pipe whose read end is the watchdog's stdin. The kernel closes the write end
when the supervisor dies, however it dies, and the watchdog's ``read`` returns EOF. The
watchdog then sweeps: SIGKILL to every live process it can attribute to this supervisor
instance, process groups first (so a process forked during the sweep in such a group dies with
it), then each process, repeated until a scan finds none or :data:`SWEEP_BOUND_S` passes.
Then it exits.

What it attributes, so that the environment is not the only evidence (a descendant may
clear it: ``setsid env -i ...``):

- every process whose ``SUPERVISOR_SCOPE`` marker names this instance (see ``_marker``);
- the tree it was told about: the supervisor writes ``+<pid>`` on the pipe for each tree main
  it spawns (:func:`watch_tree`); the watchdog records the pid with its start time once it
  has checked the process is its supervisor's child (the supervisor named by the instance,
  pid and start time: never the watchdog's own parent, which is init or some subreaper once
  the supervisor died), and while any such process lives it
  takes an *ancestry snapshot* every :data:`SNAPSHOT_S`: every descendant of a recorded
  process is recorded too, with its start time, and keeps its record after its parent dies
  (a pid with another start time is another process and is dropped);
- at the sweep, the live descendants of everything recorded.

A descendant that both loses its parent and clears its marker within one snapshot interval
before the supervisor's death (or before the watchdog was told about its tree, which is
:data:`RECORD_DELAY_S` after the spawn, see :func:`watch_tree`) is the one case left
(cgroups would close it; they are not writable on every machine, see docs/architecture.md).

Why it is safe:

- Only the supervisor holds the write end: ``os.pipe`` makes both ends close-on-exec, every
  child is spawned with ``close_fds``, and a plain ``fork`` of the supervisor (no exec) closes
  its copy in the child (``os.register_at_fork``), so no descendant can keep the pipe open and
  delay the sweep. The write end is non-blocking: a watchdog that falls behind costs a record,
  never a stall of the supervisor.
- The watchdog carries no ``SUPERVISOR_SCOPE`` (it is neither swept nor counted as a leak) but
  is recognisable: ``SUPERVISOR_WATCHDOG=<instance>`` in its environment, the process name
  ``sv-watchdog`` and the argument ``supervisor-watchdog``.
- It runs in a session of its own, so a terminal's SIGINT/SIGHUP to the supervisor's group does
  not reach it (it also ignores both), and it never signals the supervisor's process group nor
  its own.
- It is ``python -I -S`` running this file as a script: only the standard library is
  imported, so it starts in tens of milliseconds and does not depend on the caller's
  ``sys.path``.
- A normal exit of the supervisor also closes the pipe (an ``atexit`` hook closes it and
  waits a moment for the watchdog, so no zombie of it stays); the sweep then finds nothing
  (every scope ended its processes) and the watchdog exits at once.

A process whose own end kills its direct children (a Ray worker hosting a node agent) starts
its watchdog *detached* (:func:`detach_watchdog`): a shell starts it in the background and
exits, so it runs on as init's child and is watched through a pidfd.

If the watchdog itself is killed, the supervisor starts a new one at its next spawn; if both
die, ``supervisor reap`` (or the next Core start, which calls ``reap_orphans``) ends the
orphans by marker.

This module must stay importable as a plain script: module-level imports are standard library
only; the supervisor-side functions import package modules lazily.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Final

__all__ = (
    "SWEEP_BOUND_S",
    "WATCHDOG_ARG",
    "WATCHDOG_ENV",
    "detach_watchdog",
    "drain_records",
    "ensure_watchdog",
    "find_watchdogs",
    "finish_watchdog",
    "nothing_to_sweep",
    "sweep_instance",
    "watch_tree",
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
#: Seconds between two ancestry snapshots while a recorded process lives.
SNAPSHOT_S: Final = 0.25
#: How long a normal exit of the supervisor waits for its watchdog to finish, in seconds.
_EXIT_WAIT_S: Final = 1.0


@dataclass
class _Watchdog:
    owner_pid: int
    pid: int
    write_fd: int
    #: The read end of the watchdog's stdout: ``<pid> <starttime>`` per descendant it records.
    feed_fd: int = -1
    pending: bytes = b""
    #: A pidfd of a detached watchdog (no child of ours to wait for), else -1.
    pidfd: int = -1
    #: The instance a detached watchdog guards, until its pid is taken (:func:`_settle`).
    starting: str = ""
    #: The shell that started a detached watchdog in the background, until it is reaped.
    first: int = 0

    def alive(self) -> bool:
        """Whether the watchdog still runs; reaps it when it has exited."""
        if self.starting:
            try:
                if not _settle(self, block=False):
                    return True  # starting: its first process runs, our records wait in its pipe
            except OSError:
                return False
        if self.pidfd >= 0:
            # Readable once it exited. A replacement started while we were a subreaper was
            # handed back to us by its first process's exit: then it is ours to reap.
            if not select.select([self.pidfd], [], [], 0)[0]:
                return True
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)
            return False
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == 0

    def close(self) -> None:
        """Close our ends (the pipe's write end first: that is what tells it we are gone).
        Twice is harmless: a closed end is -1."""
        fds = (self.write_fd, self.feed_fd, self.pidfd)
        self.write_fd = self.feed_fd = self.pidfd = -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


_current: _Watchdog | None = None


def _forget_in_child() -> None:
    # A forked copy of the supervisor is a new instance (its pid differs): it must not keep
    # the parent's pipe open, or the parent's watchdog would wait for the copy to exit too.
    global _current
    _unsent.clear()
    _flush_scheduled[0] = False
    if _current is not None:
        _current.close()
        _current = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def ensure_watchdog(*, settle: bool = True) -> int | None:
    """Make sure this supervisor process has a running watchdog; start one if not.

    Called before every spawn of a process tree. Cheap when the watchdog runs (one
    non-blocking ``waitpid``, or a ``select`` on its pidfd when detached); starting one costs
    one ``posix_spawn``, once per process (or again after the watchdog was killed). The
    watchdog starts as every child does (``_spawn.spawn``: own session, every signal at its
    default, an empty mask, only fds 0-2), with the pipe on stdin, its record feed on stdout,
    ``/dev/null`` on stderr, and without the scope marker; only its pid is kept, as it is
    meant to outlive us. After :func:`detach_watchdog` it is started detached (see there).

    Args:
        settle: For a detached watchdog, wait until it runs (else the next check does).

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

    if _current is not None and _current.owner_pid == me:
        # Killed behind our back (and reaped just now by alive()): replace it.
        _reaper.unregister_managed(_current.pid)
        _current.close()
        _current = None
    _current = _start(me, settle=settle)
    if _whole[0]:
        _tell(b"=1\n")
    global _atexit_pid
    if _atexit_pid != me:
        _atexit_pid = me
        atexit.register(_finish_at_exit)
    return _current.pid


def detach_watchdog(*, wait: bool = True) -> int | None:
    """Start this process's watchdog now, as no child of ours, and every replacement so.

    For a process whose own end kills its direct children first, such as a Ray worker
    (``kill_child_processes_on_worker_exit``): a watchdog among them would die with it and
    end nothing. A shell starts the watchdog in the background and exits at once, so it
    runs on as a child of init (or of the nearest subreaper above us), hands its pid back on
    its feed, and is watched through a pidfd. Call it before any process tree opens: while
    a tree is open this process is a subreaper, and a watchdog started then comes back to
    us as our child (it still works; only the kill above can reach it).

    Args:
        wait: Block until the watchdog runs (its interpreter's start, tens of milliseconds).
            Without, the process goes on (importing, opening its lanes, spawning) while the
            watchdog starts: what it is told meanwhile waits in its pipe, and its pid is
            taken once it is there (:func:`watchdog_pid` and the exit wait for it).

    Returns:
        The watchdog's pid (with ``wait=False``: the shell's, which starts it and exits), or
        None where it cannot work (no ``/proc``: not Linux).

    Raises:
        OSError: The watchdog could not be started.
    """
    _detached[0] = True
    return ensure_watchdog(settle=wait)


#: Whether watchdogs are started detached (one cell, set by :func:`detach_watchdog`).
_detached = [False]
#: The longest a detached watchdog may take to hand back its pid, in seconds.
_DETACH_BOUND_S: Final = 10.0


def _start(me: int, *, settle: bool) -> _Watchdog:
    from . import _reaper
    from ._marker import instance_id
    from ._spawn import DEVNULL, spawn

    instance = instance_id()
    read_fd, write_fd = os.pipe()  # both close-on-exec: no child of ours inherits them
    env = {k: v for k, v in os.environ.items() if k != _SCOPE_ENV}
    env[WATCHDOG_ENV] = instance
    argv = [sys.executable, "-I", "-S", os.path.abspath(__file__), WATCHDOG_ARG, instance]
    argv.append(str(os.getpgrp()))
    executable = sys.executable
    if _detached[0]:
        # A shell starts it in the background and exits at once: the watchdog is then no
        # child of ours. (A background command's stdin would be /dev/null: fd 3 keeps ours.)
        argv = [_SH, "-c", _BACKGROUND, "sh", *argv, _DETACH_ARG]
        executable = _SH
    feed_fd, feed_write_fd = os.pipe()  # close-on-exec too
    try:
        pid = spawn(executable, argv, env, stdin=read_fd, stdout=feed_write_fd, stderr=DEVNULL).pid
    except OSError:
        os.close(write_fd)
        os.close(feed_fd)
        raise
    finally:
        os.close(read_fd)
        os.close(feed_write_fd)
    # Its exit status is ours to collect (alive(), or _settle), not the orphan reaper's.
    _reaper.register_managed(pid)
    os.set_blocking(write_fd, False)
    watchdog = _Watchdog(me, pid, write_fd, feed_fd)
    if not _detached[0]:
        os.set_blocking(feed_fd, False)
        return watchdog
    watchdog.starting = instance
    watchdog.first = pid
    if settle:
        _settle(watchdog)
    return watchdog


def _settle(watchdog: _Watchdog, *, block: bool = True) -> bool:
    """Collect the shell that started a detached watchdog, and take its pid from its feed.

    Any thread may be first to need it (a spawn, the reaper's records, the exit): one settles
    it, the others wait for that, and none reads the feed before its pid line is taken.

    Args:
        block: Wait (at most :data:`_DETACH_BOUND_S`) for the pid line; without, only take
            it if it is there.

    Returns:
        True once settled; False while it is still starting (``block=False`` only): what it
        is told meanwhile waits in its pipe.

    Raises:
        OSError: It did not start (its ends are closed then).
    """
    from . import _reaper

    with _settle_lock:
        instance = watchdog.starting
        if not instance:
            return True
        if watchdog.first:
            # Until the shell exits the watchdog is its child, then init's (or the nearest
            # subreaper's above us). The shell must be gone before this process becomes a
            # subreaper (the next tree's spawn), or the watchdog would come back to us: a
            # shell's start and exit, about a millisecond.
            _wait_exit(watchdog.first, _DETACH_BOUND_S)
            _reaper.unregister_managed(watchdog.first)
            watchdog.first = 0
        try:
            if not _take_detached(watchdog, instance, _DETACH_BOUND_S if block else 0.0):
                return False
        except BaseException:
            watchdog.close()  # EOF: a watchdog that did start sweeps nothing and exits
            watchdog.starting = ""
            raise
        if _ppid(watchdog.pid) == watchdog.owner_pid:  # handed back to us, a subreaper
            _reaper.register_managed(watchdog.pid)
        os.set_blocking(watchdog.feed_fd, False)
        watchdog.starting = ""
        return True


_settle_lock = threading.Lock()


def _take_detached(watchdog: _Watchdog, instance: str, timeout_s: float) -> bool:
    """Read the detached watchdog's ``@<pid>`` line and hold a pidfd of it; False when the
    line has not come within ``timeout_s`` (what came of it is kept)."""
    deadline = time.monotonic() + timeout_s
    data = watchdog.pending
    while b"\n" not in data:
        left = max(0.0, deadline - time.monotonic())
        if not select.select([watchdog.feed_fd], [], [], left)[0]:
            watchdog.pending = data
            if timeout_s > 0:
                raise OSError("the detached watchdog did not start in time")
            return False
        chunk = os.read(watchdog.feed_fd, 4096)
        if not chunk:
            raise OSError("the detached watchdog exited at its start")
        data += chunk
    line, _, watchdog.pending = data.partition(b"\n")
    if line[:1] != b"@" or not line[1:].isdigit():
        raise OSError(f"the detached watchdog said {line!r}, not its pid")
    pid = int(line[1:])
    watchdog.pidfd = os.pidfd_open(pid)
    # The pidfd names a process from now on; make sure it is the watchdog and not a process
    # that took its pid after a (very) early death.
    if _env_value(pid, WATCHDOG_ENV) != instance:
        raise OSError("the detached watchdog exited at its start")
    watchdog.pid = pid
    return True


def _ppid(pid: int) -> int:
    stat = _stat(pid)
    return -1 if stat is None else stat[1]


#: The watchdog's last argument when it runs detached: its pid is the first line of its feed.
_DETACH_ARG: Final = "detach"
#: The shell that starts a detached watchdog, and its script (the watchdog's argv follows).
_SH: Final = "/bin/sh"
_BACKGROUND: Final = 'exec 3<&0; "$@" <&3 3<&- &'


_atexit_pid: int | None = None


def watch_tree(pid: int) -> None:
    """Tell the watchdog about the main process ``pid`` of a tree just spawned.

    The watchdog records it (once it has checked it is our child) and, from then on, its
    descendants (see the module docstring). Never blocks: when the pipe is full or the
    watchdog is gone, the record is dropped and the sweep relies on the marker.

    In a Trio run the record is sent :data:`RECORD_DELAY_S` later, with every other record
    due by then, and only for mains still unreaped: each record wakes the watchdog, a
    Python process, and on a small machine it took the CPU the new child needed (a
    ``process.run`` of ``/bin/true`` paid 30-40 us for it), while a tree that ended within
    the delay has nothing left to record (its end found its members by ancestry). A tree
    that lives longer is recorded after the delay, well within one ancestry snapshot
    (:data:`SNAPSHOT_S`).
    """
    _proven_clean[0] = False
    current = _current
    if current is None or current.owner_pid != os.getpid():
        return
    # Not imported here: a process without Trio (the watchdog script, `supervisor exec`'s
    # direct path) is in no Trio run.
    trio = sys.modules.get("trio")
    try:
        if trio is None:
            raise RuntimeError("no Trio")
        trio.lowlevel.current_trio_token()
    except RuntimeError:  # not in a Trio run: no timer to send it later
        _send_records([pid])
        return
    _unsent.append(pid)
    if not _flush_scheduled[0]:
        _flush_scheduled[0] = True
        trio.lowlevel.spawn_system_task(_send_later, name="supervisor watchdog records")


def watch_adopted(pid: int) -> None:
    """Tell the watchdog about ``pid``, an orphan this process adopted as subreaper.

    The reaper calls it for every adopted child it proves ours, before it reaps or leaves
    it, whatever its session or environment: the watchdog records it (it checks the
    process is still our child) and its descendants, as for a tree main. Sent at once.
    """
    _tell(b"+%d\n" % pid)


def set_whole_process(whole: bool) -> None:
    """Tell the watchdog whether no host shares this process (``_reaper.own_whole_process``).

    While it is so, every child of ours is ours -- a tree main or an adopted orphan -- and
    the watchdog's snapshots walk them all, so an orphan is recorded at the first snapshot
    after its adoption even when the reaper has not looked yet.
    """
    _whole[0] = whole
    _tell(b"=1\n" if whole else b"=0\n")


#: The last :func:`set_whole_process` (one cell), sent again to a new watchdog.
_whole = [False]


def _tell(line: bytes) -> None:
    current = _current
    if current is None or current.owner_pid != os.getpid():
        return
    with contextlib.suppress(OSError):
        os.write(current.write_fd, line)


#: How long a tree main's record may wait to be sent with others (seconds; see watch_tree).
RECORD_DELAY_S: Final = 0.02
#: Tree mains spawned in a Trio run and not told to the watchdog yet. Appending and taking a
#: prefix are single operations under the GIL: Trio runs in several threads share it.
_unsent: list[int] = []
_flush_scheduled = [False]


def _send_records(pids: list[int]) -> None:
    if pids:
        _tell(b"".join(b"+%d\n" % pid for pid in pids))


async def _send_later() -> None:
    import trio

    from . import _reaper

    try:
        await trio.sleep(RECORD_DELAY_S)
    finally:
        # Cancelled too (the run is ending): what is due is sent, never lost.
        _flush_scheduled[0] = False
        pids = _unsent[:]
        del _unsent[: len(pids)]
        _send_records([pid for pid in pids if _reaper.is_managed(pid)])


def drain_records() -> list[tuple[int, int]]:
    """The descendants the watchdog recorded since the last call, as ``(pid, starttime)``.

    Never blocks (reads what the pipe holds). The reaper asks for them before it judges a
    zombie it can not otherwise prove its own: one the watchdog saw alive under a tree of ours,
    with the same start time, is ours (a nested supervisor's child, its watchdog...).
    """
    current = _current
    if current is None or current.owner_pid != os.getpid():
        return []
    if current.starting and not current.alive():
        return []
    if current.starting or current.feed_fd < 0:  # its first line is its pid, not a record
        return []
    chunks = [current.pending]
    while True:
        try:
            chunk = os.read(current.feed_fd, 65536)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    *lines, current.pending = b"".join(chunks).split(b"\n")
    records: list[tuple[int, int]] = []
    for line in lines:
        pid_text, _, start_text = line.partition(b" ")
        if pid_text.isdigit() and start_text.isdigit():
            records.append((int(pid_text), int(start_text)))
    return records


def finish_watchdog() -> None:
    """End and collect this process's watchdog as a normal exit does (its ``atexit`` hook),
    for a process about to end without running the hooks (``os._exit``). Bounded; once."""
    _finish_at_exit()


def _finish_at_exit() -> None:
    # A normal exit: end the watchdog now and collect its status, rather than leave it to
    # init (which, in some containers, never reaps). Its sweep usually finds nothing, as every
    # scope has ended its processes; when one of them missed a process (it escaped the tree's
    # scans) the sweep is the backstop. The wait is bounded; a watchdog still sweeping is left.
    # Only a process that proved nothing of its is left (nothing_to_sweep) kills it instead:
    # `supervisor exec` of a short command would otherwise wait for it to start Python.
    global _current
    current = _current
    if current is None or current.owner_pid != os.getpid():
        return
    _current = None
    if current.starting:
        with contextlib.suppress(OSError):
            _settle(current)
    pidfd, current.pidfd = current.pidfd, -1
    current.close()
    try:
        if _proven_clean[0]:
            with contextlib.suppress(OSError):
                if pidfd >= 0:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                else:
                    os.kill(current.pid, signal.SIGKILL)
        _wait_exit(current.pid, _EXIT_WAIT_S, pidfd=pidfd)
    finally:
        if pidfd >= 0:
            os.close(pidfd)


#: Set by :func:`nothing_to_sweep`, cleared by the next tree's record (one cell).
_proven_clean = [False]


def nothing_to_sweep() -> None:
    """Say that no process of this supervisor instance is left, proven just now: no child but
    the watchdog (we are a child subreaper, so nothing of a tree lives elsewhere) and no
    process carrying the instance's marker (``_direct``). At a normal exit the watchdog is then
    killed rather than left to sweep. A tree spawned afterwards takes the proof back."""
    _proven_clean[0] = True


def _wait_exit(pid: int, bound_s: float, *, pidfd: int = -1) -> None:
    """Reap ``pid`` (a child of ours), waiting at most ``bound_s`` seconds for its exit.

    ``pidfd``: one the caller holds (and closes), for a process that may be no child of
    ours (a detached watchdog): then it is only waited for.
    """
    own = pidfd < 0
    if own:
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = -1
    try:
        if pidfd >= 0:
            # Readable at the exit: no polling, and no sleep that overshoots it.
            select.select([pidfd], [], [], bound_s)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return
        deadline = time.monotonic() + bound_s
        pause = 0.001
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return
            if done:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
    finally:
        if own and pidfd >= 0:
            os.close(pidfd)


def watchdog_pid() -> int | None:
    """The pid of this process's watchdog, or None when none was started (or it died).

    Waits for a detached watchdog that is still starting (see :func:`detach_watchdog`).
    """
    current = _current
    if current is not None and current.owner_pid == os.getpid() and current.starting:
        with contextlib.suppress(OSError):
            _settle(current)
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


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, pgid, starttime)`` from ``/proc/<pid>/stat``; None when gone."""
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[1]), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _state_and_pgid(pid: int) -> tuple[str, int] | None:
    stat = _stat(pid)
    return None if stat is None else (stat[0], stat[2])


def _children(pid: int) -> list[int]:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/children")
        if data:
            found.extend(int(child) for child in data.split())
    return found


class _Tracker:
    """The processes the watchdog knows to be its supervisor's: pid -> start time.

    Trees it was told about and every descendant an ancestry snapshot found; a record outlives
    its parent (an orphan keeps it), and is dropped when its pid is gone, a zombie, or another
    process (another start time).
    """

    def __init__(
        self, supervisor_pid: int, *, supervisor_start: int | None = None, report: bool = False
    ) -> None:
        self.supervisor_pid = supervisor_pid
        if supervisor_start is None:
            stat = _stat(supervisor_pid)
            supervisor_start = -1 if stat is None else stat[3]
        #: The supervisor's start time: its pid names it only while that matches.
        self.supervisor_start = supervisor_start
        self.known: dict[int, int] = {}
        #: Write each new record to stdout (a pipe the supervisor reads), as ``pid start``.
        self.report = report
        #: Whether no host shares the supervisor's process (``=1`` on the pipe): then every
        #: child of the supervisor is its own -- a tree main or an orphan it adopted as
        #: subreaper, whatever its session or environment -- and each snapshot walks them.
        self.whole = False

    def told(self, pid: int) -> None:
        """Record a tree main or an adopted orphan, once ``/proc`` shows it is the
        supervisor's live child."""
        stat = _stat(pid)
        if (
            stat is not None
            and stat[0] not in ("Z", "X")
            and stat[1] == self.supervisor_pid
            and self._supervisor_runs()
        ):
            self.known[pid] = stat[3]

    def _supervisor_runs(self) -> bool:
        stat = _stat(self.supervisor_pid)
        return stat is not None and stat[0] not in ("Z", "X") and stat[3] == self.supervisor_start

    def _supervisor_children(self) -> list[int]:
        """The supervisor's children, while it runs (its pid may be another process later)."""
        if not self.whole or not self._supervisor_runs():
            return []
        return _children(self.supervisor_pid)

    def snapshot(self) -> dict[int, int]:
        """Refresh the records and add the descendants found; return live pid -> pgid."""
        live: dict[int, int] = {}
        fresh: list[bytes] = []
        stack = [*self.known, *self._supervisor_children()]
        me = os.getpid()
        while stack:
            pid = stack.pop()
            if pid in live or pid == me:
                continue
            stat = _stat(pid)
            start = self.known.get(pid)
            if stat is None or stat[0] in ("Z", "X") or (start is not None and stat[3] != start):
                if start is not None:
                    del self.known[pid]
                continue
            if start is None:
                fresh.append(b"%d %d\n" % (pid, stat[3]))
            self.known[pid] = stat[3]
            live[pid] = stat[2]
            stack.extend(_children(pid))
        if fresh and self.report:
            # Tell the supervisor (stdout, non-blocking): a record it can not take now is
            # dropped, never waited for.
            with contextlib.suppress(OSError):
                os.write(1, b"".join(fresh))
        return live


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


def sweep_instance(
    instance: str,
    *,
    protect_pgids: frozenset[int] = frozenset(),
    tracked: _Tracker | None = None,
) -> list[int]:
    """SIGKILL every live process of ``instance``, groups first: those whose scope marker
    names it, and those ``tracked`` knows (with their live descendants).

    Scans again after each round of signals until a scan finds nothing alive or
    :data:`SWEEP_BOUND_S` seconds pass (a process stuck in uninterruptible sleep is left).

    Args:
        instance: The supervisor instance id (see ``_marker.instance_id``).
        protect_pgids: Process groups never signalled as a group (the supervisor's own);
            our own group is always protected.
        tracked: The watchdog's records of the trees it was told about.

    Returns:
        Every pid that was sent SIGKILL, sorted.
    """
    prefix = instance + "/"
    protected = protect_pgids | {0, 1, os.getpgrp()}
    me = os.getpid()
    signalled: set[int] = set()
    deadline = time.monotonic() + SWEEP_BOUND_S
    while True:
        victims: dict[int, int] = tracked.snapshot() if tracked is not None else {}
        for pid in _pids():
            if pid == me or pid in victims:
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


def _live_descendants(root: int) -> dict[int, int]:
    """Every live (non-zombie) descendant of ``root``, ``root`` excluded: pid -> pgid."""
    live: dict[int, int] = {}
    seen: set[int] = set()
    stack = _children(root)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stat = _stat(pid)
        if stat is None:
            continue
        if stat[0] not in ("Z", "X"):
            live[pid] = stat[2]
        stack.extend(_children(pid))
    return live


def _reap_children() -> dict[int, int]:
    """Collect every exited child of ours without blocking: pid -> wait status."""
    reaped: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped[pid] = status


def sweep_descendants(
    root: int, *, reap: bool = False, bound_s: float = SWEEP_BOUND_S
) -> list[int]:
    """SIGKILL every live descendant of ``root``, groups first, until none is left.

    The exact sweep of a process that is (or was) a child subreaper: every orphan of its
    trees came back to it, so its descendants are all of them, whatever their session,
    group or environment. Our own process group is never signalled as a group (invariant
    11), nor groups 0 and 1.

    Args:
        root: The process whose descendants end (itself excluded): this process (the
            guardian after the worker died, a worker whose guardian died).
        reap: Also collect the exit status of every child of ours that exits (only for a
            process all of whose children are its own: the guardian).
        bound_s: The longest it keeps scanning, in seconds (a process stuck in
            uninterruptible sleep is left).

    Returns:
        Every pid that was sent SIGKILL, sorted.
    """
    protected = {0, 1, os.getpgrp()}
    signalled: set[int] = set()
    deadline = time.monotonic() + bound_s
    while True:
        if reap:
            _reap_children()
        victims = _live_descendants(root)
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
    if reap:
        _reap_children()
    return sorted(signalled)


# -- the guardian: the parent of a command line's worker (see _guardian) ----------------------

#: An argument of the guardian's command line, so ``ps`` shows what it is.
GUARDIAN_ARG: Final = "supervisor-guardian"
#: The guardian's process name (``/proc/<pid>/comm``).
GUARDIAN_COMM: Final = "sv-guardian"
#: Signals the guardian passes on to its worker; blocked (and waited for) from before the
#: fork, so none is lost or acted on by default between the fork and the guardian's loop.
GUARDED_SIGNALS: Final = frozenset(
    {
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGCHLD,
    }
)
#: ``si_code`` of a signal the kernel sent (the terminal's ^C, ^\\, hang-up).
_SI_KERNEL: Final = 0x80


def guard(worker: int, *, same_group: bool) -> int:
    """Be the guardian of ``worker``, our child, until it exits; then end what it left.

    This process is a child subreaper (set before the fork, kept across ``exec``), so when
    the worker dies, SIGKILL included, every process it had -- its children and the orphans
    it had adopted -- becomes ours, and :func:`sweep_descendants` ends them all, exactly:
    no snapshot, marker or record is needed.

    Every signal of :data:`GUARDED_SIGNALS` but SIGCHLD is passed on to the worker, except,
    when ``same_group``, one the terminal sent (the worker is in our foreground process
    group and got it too).

    Returns:
        The worker's wait status.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # never SIG_IGN: we wait for our children
    signal.pthread_sigmask(signal.SIG_BLOCK, GUARDED_SIGNALS)
    while True:
        status = _reap_children().get(worker)
        if status is not None:
            break
        info = signal.sigwaitinfo(GUARDED_SIGNALS)
        if info.si_signo == signal.SIGCHLD or (same_group and info.si_code == _SI_KERNEL):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, info.si_signo)
    sweep_descendants(os.getpid(), reap=True)
    return status


def exit_as(status: int) -> int:
    """End this process as the wait ``status`` of another says it ended.

    The same exit code, or death by the same signal (without a core dump); returns
    ``128 + signal`` when the signal did not end us.
    """
    if not os.WIFSIGNALED(status):
        return os.waitstatus_to_exitcode(status)
    signum = os.WTERMSIG(status)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except (ImportError, OSError, ValueError):
        pass
    if signum not in (signal.SIGKILL, signal.SIGSTOP):
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), signum)
    return 128 + signum


def _guardian_main(argv: list[str]) -> int:
    """The guardian: ``watchdog.py supervisor-guardian WORKER_PID group|own``."""
    if len(argv) != 4 or argv[1] != GUARDIAN_ARG or not argv[2].isdigit():
        print(f"usage: {argv[0]} {GUARDIAN_ARG} WORKER_PID group|own", file=sys.stderr)
        return 2
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(GUARDIAN_COMM)
    return exit_as(guard(int(argv[2]), same_group=argv[3] == "group"))


def _watch(tracker: _Tracker) -> None:
    """Read the supervisor's ``+<pid>`` records until EOF (the supervisor is gone), taking an
    ancestry snapshot every :data:`SNAPSHOT_S` while a recorded process lives."""
    pending = b""
    next_snapshot = time.monotonic() + SNAPSHOT_S
    while True:
        busy = bool(tracker.known) or tracker.whole
        timeout = max(0.0, next_snapshot - time.monotonic()) if busy else None
        ready, _, _ = select.select([0], [], [], timeout)
        if ready:
            data = os.read(0, 4096)
            if not data:
                return
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if line[:1] == b"+" and line[1:].isdigit():
                    tracker.told(int(line[1:]))
                elif line in (b"=1", b"=0"):
                    tracker.whole = line == b"=1"
        if busy and time.monotonic() >= next_snapshot:
            tracker.snapshot()
            next_snapshot = time.monotonic() + SNAPSHOT_S
        elif not busy:
            next_snapshot = time.monotonic() + SNAPSHOT_S


def _instance_process(instance: str) -> tuple[int, int]:
    """The pid and start time an instance id ``<pid>.<starttime>.<pidns>.<boot>`` names."""
    pid_text, _, rest = instance.partition(".")
    start_text = rest.partition(".")[0]
    if pid_text.isdigit() and start_text.isdigit():
        return int(pid_text), int(start_text)
    return -1, -1  # not ours to judge: nothing is recorded, the marker sweep still runs


def _main(argv: list[str]) -> int:
    """The watchdog: ``watchdog.py supervisor-watchdog INSTANCE SUPERVISOR_PGID [detach]``."""
    if len(argv) not in (4, 5) or argv[1] != WATCHDOG_ARG or argv[4:] not in ([], [_DETACH_ARG]):
        print(f"usage: {argv[0]} {WATCHDOG_ARG} INSTANCE PGID [{_DETACH_ARG}]", file=sys.stderr)
        return 2
    instance, supervisor_pgid = argv[2], int(argv[3])
    if argv[4:]:
        # Detached (a shell started us in the background and exited): our pid, first on the
        # feed, before any record we may write.
        os.write(1, b"@%d\n" % os.getpid())
    # Terminal signals meant for the supervisor's job must not take the watchdog first.
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(WATCHDOG_COMM)
    # The supervisor is named by its instance (pid and start time), never by our parent: if
    # it died before we got here, we were re-parented -- to init, or to a subreaper such as an
    # IDE -- whose other children are none of ours.
    supervisor_pid, supervisor_start = _instance_process(instance)
    tracker = _Tracker(supervisor_pid, supervisor_start=supervisor_start, report=True)
    with contextlib.suppress(OSError):
        os.set_blocking(1, False)
    _watch(tracker)
    tracker.report = False  # the supervisor is gone: nobody reads the records any more
    sweep_instance(instance, protect_pgids=frozenset({supervisor_pgid}), tracked=tracker)
    return 0


if __name__ == "__main__":
    sys.exit(_guardian_main(sys.argv) if sys.argv[1:2] == [GUARDIAN_ARG] else _main(sys.argv))
