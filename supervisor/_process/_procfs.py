"""Small, allocation-light readers of Linux ``/proc``.

Contract: every function here is synchronous, never blocks on anything but procfs
reads, and treats a process that vanishes mid-read as gone (``None`` or an empty
result), never as an error. procfs is the only way to see processes that left a
tree's process group or session (setsid, double fork) and to read the scope marker
of a process we did not start ourselves, so the process-tree code and the reaper
build on these few primitives. On systems without ``/proc`` (macOS, the BSDs) each
reader falls back to psutil, which reads the same facts through the platform's own
interfaces (sysctl, libproc) more slowly; callers check :data:`HAVE_PROCFS` where the
difference matters. psutil is a dependency only off Linux (a platform marker), imported only
when ``/proc`` is missing: Linux always has it, so a Linux install neither needs nor loads
psutil (a Linux without ``/proc`` mounted gets a clear error from :func:`_psutil`).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

__all__ = (
    "HAVE_PROCFS",
    "ProcStat",
    "all_pids",
    "children_of",
    "children_of_main_thread",
    "own_pid",
    "read_env_var",
    "read_stat",
)


HAVE_PROCFS = os.path.isdir("/proc/self/task")

#: This process's id (one cell). A ``process.run`` asked the kernel for it seven times; it
#: changes only in a forked child, where ``os.register_at_fork`` renews it before any Python
#: code of the child runs (``os.fork``, and ``subprocess``'s fork when it runs a
#: ``preexec_fn``; a fork that runs no Python, such as ``posix_spawn``'s, never reads it).
_own_pid = [os.getpid()]


def _renew_own_pid() -> None:
    _own_pid[0] = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_own_pid)


def own_pid() -> int:
    """``os.getpid()`` without the system call (see ``_own_pid``;
    ``test_own_pid_is_renewed_in_a_forked_child``)."""
    return _own_pid[0]


@functools.cache
def _psutil() -> ModuleType:
    """psutil, for a system without ``/proc``.

    Raises:
        RuntimeError: psutil is not installed (a Linux without ``/proc`` mounted: the
            dependency is declared off Linux only).
    """
    try:
        import psutil
    except ImportError:
        raise RuntimeError(
            "/proc is not mounted and psutil is not installed: mount /proc (Linux), or"
            " pip install psutil"
        ) from None
    return psutil


def _psutil_state(status: str) -> str:
    """psutil's process status name as the one-letter state of ``/proc/<pid>/stat``."""
    psutil = _psutil()
    states: dict[Any, str] = {
        psutil.STATUS_RUNNING: "R",
        psutil.STATUS_SLEEPING: "S",
        psutil.STATUS_DISK_SLEEP: "D",
        psutil.STATUS_STOPPED: "T",
        psutil.STATUS_ZOMBIE: "Z",
        psutil.STATUS_DEAD: "X",
    }
    return states.get(status, "S")


#: procfs files are read in chunks of this many bytes; environ blocks larger than
#: one chunk are read to the end.
_CHUNK = 65536
#: A read of a ``children`` file shorter than this is its end. Not ``_CHUNK``: that file is
#: a seq_file, which hands out at most one page per read whatever the size asked, so a list of
#: more than about 680 pids takes several reads (one read lost the rest: zombies stayed).
_SHORT_PAGED_READ = 1024


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` that process-tree code needs.

    Attributes:
        pid: The process id.
        state: One-letter state (``R``, ``S``, ``D``, ``T``, ``Z``, ``X``, ...).
        ppid: Parent process id.
        pgid: Process group id.
        sid: Session id.
        starttime: Start time in clock ticks since boot; with ``pid`` it identifies a
            process across pid reuse.
        threads: Number of threads (1 when unknown); :func:`children_of` reads one file
            per thread, one without listing them when there is only one.
    """

    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    starttime: int
    threads: int = 1

    @property
    def dead(self) -> bool:
        """True for a zombie (exited, not yet reaped) or a process being torn down.

        A thread-group leader that exited while its other threads run shows ``Z`` too, but
        the process lives on (Node's workers, tsserver among them, do this): with more than
        one thread it counts as alive, to be waited for and signalled like any member.
        """
        return self.state in ("Z", "X") and self.threads <= 1


def _read(path: str, *, paged: bool = False) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    return _read_fd(fd, paged=paged)


def _read_fd(fd: int, *, paged: bool = False) -> bytes | None:
    """Read ``fd`` to its end and close it; None when a read fails."""
    try:
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            if len(chunk) < (_SHORT_PAGED_READ if paged else _CHUNK):
                break
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _psutil_stat(pid: int) -> ProcStat | None:
    psutil = _psutil()
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return ProcStat(
                pid=pid,
                state=_psutil_state(process.status()),
                ppid=process.ppid(),
                pgid=os.getpgid(pid),
                sid=os.getsid(pid),
                # Hundredths of a second: enough to tell a reused pid from the original.
                starttime=int(process.create_time() * 100),
                threads=process.num_threads(),
            )
    except (psutil.Error, OSError):
        return None


def read_stat(pid: int) -> ProcStat | None:
    """Parse ``/proc/<pid>/stat``; None when the process is gone."""
    if not HAVE_PROCFS:
        return _psutil_stat(pid)
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    # The command name is in parentheses and may itself hold spaces or ")".
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return ProcStat(
            pid=pid,
            state=fields[0].decode("ascii", "replace"),
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            sid=int(fields[3]),
            starttime=int(fields[19]),
            threads=int(fields[17]),
        )
    except (IndexError, ValueError):
        return None


def children_of(pid: int, threads: int = 0) -> list[int]:
    """Direct children of ``pid``, across all of its threads (``task/*/children``).

    ``threads`` is :attr:`ProcStat.threads` when the caller has it: a single-threaded
    process has one such file, read without listing ``task/`` (one read, not a directory
    listing, on every tree end).
    """
    if threads == 1 and HAVE_PROCFS:
        data = _read(f"/proc/{pid}/task/{pid}/children", paged=True)
        if data is not None:
            return [int(p) for p in data.split()]
    if not HAVE_PROCFS:
        psutil = _psutil()
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/children", paged=True)
        if data:
            found.extend(int(p) for p in data.split())
    return found


def children_of_main_thread(pid: int) -> list[int] | None:
    """Children forked by (or reparented to) ``pid``'s main thread only; None if unreadable.

    When a child subreaper adopts an orphan, the kernel hands it to the subreaper's first
    live thread, its main thread (``find_new_reaper``/``find_alive_thread``), so this one
    read finds every adopted orphan, where :func:`children_of` reads one file per thread
    (a Trio process keeps dozens of worker threads).
    """
    data = _read(f"/proc/{pid}/task/{pid}/children", paged=True)
    if data is None:
        return None
    return [int(p) for p in data.split()]


def all_pids() -> list[int]:
    """Every pid visible in ``/proc`` (psutil's list without procfs)."""
    if not HAVE_PROCFS:
        pids: list[int] = _psutil().pids()
        return pids
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    return [int(name) for name in names if name.isdigit()]


def _read_environ(pid: int) -> bytes | None:
    """``/proc/<pid>/environ``, or, once the main thread has exited while other threads run
    (a Go or Java helper can do this), the same block read through a live thread.

    The kernel reads a process's environment through its main thread's memory map, which goes
    when that thread exits: ``/proc/<pid>/environ`` then fails with ESRCH although the process
    runs. Every thread shares the map, so ``/proc/<pid>/task/<tid>/environ`` of any other
    thread still reads it. Only that error leads to the second read: a kernel thread (empty,
    no error) or a gone process (ENOENT) cost nothing more.
    """
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    except ProcessLookupError:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return None
        for tid in tids:
            if tid != str(pid):
                data = _read(f"/proc/{pid}/task/{tid}/environ")
                if data:
                    return data
        return None
    except OSError:
        return None
    return _read_fd(fd)


def read_env_var(pid: int, name: str) -> str | None:
    """The value of ``name`` in the environment ``pid`` was exec'd with, or None.

    Unreadable environments (another user's process, a zombie, a kernel thread)
    read as "not set". A process whose main thread exited while others run is read through
    one of them (see :func:`_read_environ`).
    """
    if not HAVE_PROCFS:
        psutil = _psutil()
        try:
            value: str | None = psutil.Process(pid).environ().get(name)
        except psutil.Error:
            return None
        return value
    data = _read_environ(pid)
    if not data:
        return None
    prefix = name.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("utf-8", "surrogateescape")
    return None
