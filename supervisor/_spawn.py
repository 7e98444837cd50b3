"""Spawning a tree's main process without a worker-thread round trip, and waiting on it.

Strategy (issue 8 goal 1). ``trio.lowlevel.open_process`` runs ``subprocess.Popen`` in a
worker thread because a ``fork()`` of a large parent can take milliseconds. We spawn with
``os.posix_spawn`` instead, which glibc implements with ``clone(CLONE_VM | CLONE_VFORK)``:
no page tables are copied, the calling thread is suspended only until the child has
exec'd (about 150 us for ``/bin/true``), and an exec failure is reported synchronously as
an ``OSError``. Blocking the Trio thread for that long costs less than handing the call to
a thread and back (about 0.5 ms measured), and nothing can run between the spawn and the
registration of the pid with the reaper. The exit is then awaited on a pidfd
(``trio.lowlevel.wait_readable``), as Trio itself does.

The invariants the old path got from ``Popen`` hold here too:

- own session and process group: ``setsid=True`` (``POSIX_SPAWN_SETSID``), so
  ``pgid == pid`` from the first instruction of the child (DESIGN.md invariants 1, 11);
- the environment given is the child's whole environment (the caller adds the marker);
- no descriptor leaks into the child: our pipes are created ``O_CLOEXEC`` and placed on
  0/1/2 with ``dup2`` (which clears the flag on the copy only); descriptors some other code
  made inheritable are closed in the child with one close action each, found by listing
  ``/proc/self/fd`` -- the ``close_fds=True`` of ``subprocess``;
- SIGPIPE and SIGXFSZ, which Python ignores, are reset to their default in the child and its
  signal mask is emptied (``restore_signals=True`` of ``subprocess``);
- ``PR_SET_PDEATHSIG`` is never used (invariant 11).

``os.posix_spawn`` has no ``chdir`` action before Python 3.13, so a spawn with a working
directory goes through ``subprocess.Popen`` -- called synchronously, which uses ``vfork``
for our arguments -- with the same pipes; its ``Popen`` object is kept only so that its
bookkeeping never reaps the pid behind our back.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import select
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Final, final

import trio

from ._procfs import HAVE_PROCFS, read_stat

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ("DEVNULL", "PIPE", "STDOUT", "ExitWatch", "SpawnedProcess", "spawn", "wait_exits")

PIPE: Final = subprocess.PIPE
DEVNULL: Final = subprocess.DEVNULL
STDOUT: Final = subprocess.STDOUT

#: Signals Python ignores that a child must see at their default disposition.
_RESET_SIGNALS: Final = tuple(
    sig for sig in (getattr(signal, "SIGPIPE", None), getattr(signal, "SIGXFSZ", None)) if sig
)
_HAVE_POSIX_SPAWN: Final = hasattr(os, "posix_spawn") and sys.platform.startswith("linux")
_HAVE_PIDFD: Final = hasattr(os, "pidfd_open")
_HAVE_EPOLL: Final = hasattr(select, "epoll")
_FD_DIR: Final = "/proc/self/fd"


def _decode_status(status: int) -> int:
    # subprocess's convention: negative for "killed by that signal".
    return os.waitstatus_to_exitcode(status)


@final
class SpawnedProcess:
    """A spawned child: its pid, its pipes, and a wait that does not poll.

    The same surface :class:`trio.Process` offers the process-tree code (``pid``,
    ``returncode``, ``wait``, ``stdin``/``stdout``/``stderr``), without its worker thread.
    Created by :func:`spawn` only.

    Attributes:
        pid: The child's process id (also its session and process group id).
        stdin: Trio stream to the child's stdin, or None when not piped.
        stdout: Trio stream from the child's stdout, or None when not piped.
        stderr: Trio stream from the child's stderr, or None when not piped.
    """

    def __init__(
        self,
        pid: int,
        stdin: trio.abc.SendStream | None,
        stdout: trio.abc.ReceiveStream | None,
        stderr: trio.abc.ReceiveStream | None,
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self._popen = popen
        self._returncode: int | None = None
        self._wait_lock = trio.Lock()
        self._pidfd: int | None = None
        if _HAVE_PIDFD:
            # A kernel without pidfd_open (before 5.3) gets the thread fallback in wait().
            with contextlib.suppress(OSError):
                self._pidfd = os.pidfd_open(pid)

    def __repr__(self) -> str:
        return f"<SpawnedProcess pid={self.pid} returncode={self._returncode}>"

    def __del__(self) -> None:
        # Only the descriptor is released here; the process is the tree's to end.
        pidfd, self._pidfd = getattr(self, "_pidfd", None), None
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)

    @property
    def pidfd(self) -> int | None:
        """The pidfd (readable once the child has exited), or None once reaped or unsupported.

        For a caller that multiplexes it with other descriptors (``_process``); it must
        stop watching it before reading :attr:`returncode`, which closes it on reaping.
        """
        return self._pidfd

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), or None while it runs.

        Reading it reaps the child once it has exited (``waitpid(WNOHANG)``). When the
        status was collected elsewhere (``ECHILD``) it reads 0, as in :mod:`subprocess`.
        """
        if self._returncode is None:
            self._poll()
        return self._returncode

    def _poll(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self._set_returncode(0)
            return
        if pid == self.pid:
            self._set_returncode(_decode_status(status))

    def _set_returncode(self, rc: int) -> None:
        self._returncode = rc
        if self._popen is not None:
            # Popen must not waitpid() a pid we reaped (it could be reused by then).
            self._popen.returncode = rc
        if not self._wait_lock.locked():
            # A waiter (it holds the lock) closes the descriptor itself once it wakes.
            self._close_pidfd()

    def _close_pidfd(self) -> None:
        pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            # Trio's epoll may still hold a registration for this number.
            with contextlib.suppress(RuntimeError):  # outside a Trio run: none
                trio.lowlevel.notify_closing(pidfd)
            os.close(pidfd)

    async def wait(self) -> int:
        """Wait until the child exits and reap it.

        Returns:
            The exit status (negative: killed by that signal).

        **Cancellation:** cancellable; the child keeps running. Concurrent waiters are
        served one at a time (a pidfd has one reader in Trio) and all get the status.
        """
        if self.returncode is not None:
            await trio.lowlevel.checkpoint()
            return self._returncode  # type: ignore[return-value]  # set by the poll
        # Uncontended (the usual case), the lock is taken without a scheduling pass.
        try:
            self._wait_lock.acquire_nowait()
        except trio.WouldBlock:
            await self._wait_lock.acquire()
        try:
            while self.returncode is None:
                if self._pidfd is not None:
                    await trio.lowlevel.wait_readable(self._pidfd)
                else:
                    # No pidfd: block a worker thread in waitid(WNOWAIT), which leaves
                    # the zombie for the poll above to reap, like Trio's own fallback.
                    await trio.to_thread.run_sync(
                        os.waitid,
                        os.P_PID,
                        self.pid,
                        os.WEXITED | os.WNOWAIT,
                        abandon_on_cancel=True,
                    )
        finally:
            if self._returncode is not None:
                self._close_pidfd()
            self._wait_lock.release()
        return self._returncode


def _inherited_fds(keep: Sequence[int]) -> list[int]:
    """Descriptors above 2 that would survive an exec (not CLOEXEC), except ``keep``."""
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return []
    found: list[int] = []
    for name in names:
        fd = int(name)
        if fd <= 2 or fd in keep:
            continue
        try:
            if os.get_inheritable(fd):
                found.append(fd)
        except OSError:
            continue  # the listing's own descriptor, already closed
    return found


def spawn(
    executable: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str | None = None,
    stdin: int = PIPE,
    stdout: int = PIPE,
    stderr: int = PIPE,
) -> SpawnedProcess:
    """Start ``executable`` with ``argv`` in a new session, synchronously.

    Validation is the caller's (``_tree``); this only spawns. Returns once the child has
    exec'd; the calling thread is blocked that long (about 0.1-0.3 ms, see the module
    docstring).

    Args:
        executable: Absolute path of the program (already resolved on the child's PATH).
        argv: The arguments, ``argv[0]`` included.
        env: The child's entire environment.
        cwd: The child's working directory, or None for ours.
        stdin: ``PIPE`` or ``DEVNULL``.
        stdout: ``PIPE`` or ``DEVNULL``.
        stderr: ``PIPE``, ``DEVNULL`` or ``STDOUT`` (the stdout target).

    Returns:
        The :class:`SpawnedProcess`, its pipes wrapped as Trio streams.

    Raises:
        OSError: The program could not be executed (missing, not executable, bad
            format) or a pipe could not be created; nothing is left running and every
            descriptor opened here is closed.
    """
    opened: list[int] = []  # every descriptor of ours; the child-side ones close below
    child_side: list[int] = []
    ours: dict[str, int] = {}
    try:
        null = -1
        if DEVNULL in (stdin, stdout, stderr):
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            opened.append(null)
            child_side.append(null)
        targets: list[int] = []
        for name, mode in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)):
            if mode == PIPE:
                read_end, write_end = os.pipe2(os.O_CLOEXEC)
                opened += (read_end, write_end)
                if name == "stdin":
                    ours[name], child = write_end, read_end
                else:
                    ours[name], child = read_end, write_end
                child_side.append(child)
                targets.append(child)
            elif mode == DEVNULL:
                targets.append(null)
            else:  # STDOUT, for stderr only (checked by the caller)
                targets.append(targets[1])
        popen: subprocess.Popen[bytes] | None = None
        if _HAVE_POSIX_SPAWN and cwd is None:
            actions: list[tuple[int, int] | tuple[int, int, int]] = [
                (os.POSIX_SPAWN_DUP2, source, target) for target, source in enumerate(targets)
            ]
            actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds(opened)]
            pid = os.posix_spawn(
                executable,
                list(argv),
                env,
                file_actions=actions,
                setsid=True,
                setsigmask=(),
                setsigdef=_RESET_SIGNALS,
            )
        else:
            popen = subprocess.Popen(
                list(argv),
                executable=executable,
                cwd=cwd,
                env=env,
                stdin=targets[0],
                stdout=targets[1],
                stderr=targets[2],
                start_new_session=True,
                close_fds=True,
            )
            pid = popen.pid
    except BaseException:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    for fd in child_side:
        os.close(fd)
    return SpawnedProcess(
        pid,
        trio.lowlevel.FdStream(ours["stdin"]) if "stdin" in ours else None,
        trio.lowlevel.FdStream(ours["stdout"]) if "stdout" in ours else None,
        trio.lowlevel.FdStream(ours["stderr"]) if "stderr" in ours else None,
        popen,
    )


#: Clock ids and flags of ``timerfd_create(2)`` / ``timerfd_settime(2)`` (Linux ABI).
_CLOCK_MONOTONIC: Final = 1
_TFD_CLOEXEC: Final = os.O_CLOEXEC
_TFD_NONBLOCK: Final = os.O_NONBLOCK
_TFD_TIMER_ABSTIME: Final = 1
#: How long after a precise (timerfd) deadline Trio's own deadline backs it up, in seconds.
_TIMER_BACKUP_S: Final = 0.05


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


class _TimerFd:
    """A ``CLOCK_MONOTONIC`` timerfd armed at absolute deadlines, through libc.

    ``os.timerfd_create`` exists only from Python 3.13; the two calls are small enough
    for ctypes. Raises ``OSError`` (or ``AttributeError`` from a libc without them).
    """

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_CLOEXEC | _TFD_NONBLOCK)
        if fd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
        self._settime = libc.timerfd_settime
        self.fd: int = fd

    def arm(self, monotonic_s: float) -> None:
        """Expire once at ``monotonic_s`` (``time.perf_counter()`` seconds); resets expiry."""
        # A deadline already past must still expire: all zeros would disarm the timer.
        when = max(monotonic_s, 1e-9)
        sec = int(when)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(sec, int((when - sec) * 1e9)))
        if self._settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None):
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))

    def close(self) -> None:
        os.close(self.fd)


def _monotonic_offset() -> float | None:
    """``trio.current_time() - time.perf_counter()`` under Trio's system clock, else None.

    Trio's ``SystemClock`` is ``perf_counter()`` (``CLOCK_MONOTONIC``) plus a constant
    offset; any other clock (``MockClock`` in tests) has no fixed relation to the kernel's.
    """
    clock = trio.lowlevel.current_clock()
    offset = getattr(clock, "offset", None)
    if type(clock).__name__ != "SystemClock" or not isinstance(offset, float):
        return None
    return offset


@final
class ExitWatch:
    """Processes being ended, watched through their pidfds, with a precise deadline.

    Ending a tree used to poll ``/proc`` with sleeps; this wakes up when the last watched
    process exits (issue 8 goal 2). Each process gets a pidfd (works for any process we
    may signal, child or not); all of them go into one private epoll whose descriptor
    Trio waits on, so a whole tree costs one wake-up. Under Trio's system clock a timerfd
    in the same epoll carries the deadline: Trio rounds its own timeouts up to the next
    millisecond (``epoll_wait``), which would push a SIGKILL due at the end of a TERM grace
    up to a millisecond late; the timerfd fires on time (nanosecond resolution, no slack).

    Not thread-safe; one task uses it. :meth:`close` releases every descriptor.
    """

    def __init__(self) -> None:
        self._available = _HAVE_PIDFD and HAVE_PROCFS and _HAVE_EPOLL
        # Created on the first add: most tree ends (nothing left alive) never need it.
        self._epoll: select.epoll | None = None
        self._fds: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, starttime)
        self._watched: set[tuple[int, int]] = set()
        self._timer: _TimerFd | None = None
        self._timer_failed = False

    @property
    def available(self) -> bool:
        """False where pidfds or epoll are missing: the caller polls instead."""
        return self._available

    @property
    def pending(self) -> int:
        """How many watched processes have not been seen exiting."""
        return len(self._fds)

    def add(self, pid: int, starttime: int, *, verify: bool = False) -> None:
        """Watch ``pid`` (identified by ``starttime``) until it exits.

        Args:
            pid: The process id.
            starttime: ``/proc/<pid>/stat`` field 22, read just before (see ``_procfs``).
            verify: Read the stat again after opening the pidfd and drop the process when
                it is a zombie or its start time differs (the number was reused): for a
                caller whose ``starttime`` may be old.

        A process already gone, or already watched, is skipped. Without pidfd support
        (``available`` False) this does nothing.
        """
        if not self._available or (pid, starttime) in self._watched:
            return
        if self._epoll is None:
            self._epoll = select.epoll()
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return  # already reaped (ESRCH), or out of descriptors: the caller's scans see it
        if verify:
            st = read_stat(pid)
            if st is None or st.dead or st.starttime != starttime:
                os.close(fd)
                return
        self._watched.add((pid, starttime))
        self._fds[fd] = (pid, starttime)
        self._epoll.register(fd, select.EPOLLIN)

    def _collect_exits(self) -> bool:
        """Note the exits the epoll reports; True when the timer fired."""
        if self._epoll is None:
            return False
        fired = False
        for fd, _ in self._epoll.poll(0):
            if self._timer is not None and fd == self._timer.fd:
                fired = True
                continue
            self._epoll.unregister(fd)
            del self._fds[fd]
            os.close(fd)
        return fired

    def _arm_timer(self, deadline: float, *, real_time: bool) -> bool:
        """Arm the timerfd at the Trio time ``deadline``; False when Trio's clock must do.

        With ``real_time`` and a clock other than Trio's system clock, the timer is armed
        as far ahead in real time as ``deadline`` is in the clock's time.
        """
        if self._timer_failed or math.isinf(deadline):
            return False
        offset = _monotonic_offset()
        if offset is None:
            if not real_time:
                return False
            offset = trio.current_time() - time.perf_counter()
        assert self._epoll is not None
        try:
            if self._timer is None:
                self._timer = _TimerFd()
                self._epoll.register(self._timer.fd, select.EPOLLIN)
            self._timer.arm(deadline - offset)
        except (OSError, AttributeError):
            # No timerfd (seccomp, an exotic libc): Trio's millisecond timeouts it is.
            self._timer_failed = True
            return False
        return True

    async def wait(self, deadline: float, *, real_time: bool = False) -> bool:
        """Wait until every watched process has exited, or until ``deadline``.

        Args:
            deadline: A ``trio.current_time()`` value; met to the microsecond under
                Trio's system clock (a timerfd), else as Trio's own deadlines are.
            real_time: Under another clock (``MockClock`` in tests), wait as long in
                real time instead: for processes that need real time to act, such as
                dying after SIGKILL, which a jumping clock would not give them.

        Returns:
            True when every watched process has exited (at once if none is watched),
            False when the deadline came first.

        Raises:
            RuntimeError: ``available`` is False.

        **Cancellation:** cancellable (the callers run it shielded, under a deadline).
        """
        if not self._available:
            raise RuntimeError("no pidfd support: poll instead")
        self._collect_exits()
        if not self._fds:
            await trio.lowlevel.checkpoint_if_cancelled()
            return True
        assert self._epoll is not None  # created by the add of a process in _fds
        precise = self._arm_timer(deadline, real_time=real_time)
        backup = deadline + _TIMER_BACKUP_S if precise else deadline
        if precise and real_time and _monotonic_offset() is None:
            backup = math.inf  # the timer alone: a jumping clock must not cut it short
        with trio.move_on_at(backup):
            while True:
                await trio.lowlevel.wait_readable(self._epoll.fileno())
                if self._collect_exits():
                    break
                if not self._fds:
                    await trio.lowlevel.checkpoint_if_cancelled()
                    return True
        await trio.lowlevel.checkpoint_if_cancelled()
        return not self._fds

    def close(self) -> None:
        """Release the epoll, the pidfds and the timer (idempotent); adds are ignored
        afterwards."""
        self._available = False
        epoll, self._epoll = self._epoll, None
        if epoll is not None:
            with contextlib.suppress(RuntimeError):  # outside a Trio run: nothing registered
                trio.lowlevel.notify_closing(epoll.fileno())
            epoll.close()
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.close()


async def wait_exits(processes: Mapping[int, int], deadline: float) -> bool:
    """Wait until every listed process has exited, or until ``deadline``.

    A pid whose start time no longer matches (it exited and the number was reused) or
    that is already a zombie counts as exited. See :class:`ExitWatch`.

    Args:
        processes: ``{pid: starttime}`` (``/proc/<pid>/stat`` field 22, see ``_procfs``).
        deadline: A ``trio.current_time()`` value.

    Returns:
        False when pidfds or epoll are unavailable (nothing was waited for; the caller
        falls back to polling), True otherwise.

    **Cancellation:** cancellable (the callers run it shielded, under a deadline).
    """
    watch = ExitWatch()
    try:
        if not watch.available:
            return False
        for pid, starttime in processes.items():
            watch.add(pid, starttime, verify=True)
        await watch.wait(deadline)
        return True
    finally:
        watch.close()
