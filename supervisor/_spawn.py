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
import os
import select
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Final, final

import trio

from ._procfs import HAVE_PROCFS, read_stat

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ("DEVNULL", "PIPE", "STDOUT", "SpawnedProcess", "spawn", "wait_exits")

PIPE: Final = subprocess.PIPE
DEVNULL: Final = subprocess.DEVNULL
STDOUT: Final = subprocess.STDOUT

#: Signals Python ignores that a child must see at their default disposition.
_RESET_SIGNALS: Final = tuple(
    sig for sig in (getattr(signal, "SIGPIPE", None), getattr(signal, "SIGXFSZ", None)) if sig
)
_HAVE_POSIX_SPAWN: Final = hasattr(os, "posix_spawn") and sys.platform.startswith("linux")
_HAVE_PIDFD: Final = hasattr(os, "pidfd_open")
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


async def wait_exits(processes: Mapping[int, int], deadline: float) -> bool:
    """Wait until every listed process has exited, or until ``deadline``.

    Ending a tree used to poll ``/proc`` with sleeps (2 ms first); this wakes up when the
    last of them exits (issue 8 goal 2). Each process gets a pidfd, which works for any
    process we may signal, child or not; all of them go into one private epoll whose
    descriptor Trio waits on. A pid whose start time no longer matches (it exited and the
    number was reused) or that is already a zombie counts as exited.

    Args:
        processes: ``{pid: starttime}`` (``/proc/<pid>/stat`` field 22, see ``_procfs``).
        deadline: A ``trio.current_time()`` value.

    Returns:
        False when pidfds or epoll are unavailable (nothing was waited for; the caller
        falls back to polling), True otherwise.

    **Cancellation:** cancellable (the callers run it shielded, under a deadline).
    """
    if not (_HAVE_PIDFD and HAVE_PROCFS and hasattr(select, "epoll")):
        return False
    epoll = select.epoll()
    watched: list[int] = []
    try:
        for pid, starttime in processes.items():
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue  # already reaped
            except OSError:
                return False
            st = read_stat(pid)
            if st is None or st.dead or st.starttime != starttime:
                os.close(fd)  # gone, or the number now names another process
                continue
            watched.append(fd)
            epoll.register(fd, select.EPOLLIN)
        remaining = len(watched)
        with trio.move_on_at(deadline):
            while remaining:
                for fd, _ in epoll.poll(0):
                    epoll.unregister(fd)
                    remaining -= 1
                if remaining:
                    await trio.lowlevel.wait_readable(epoll.fileno())
        await trio.lowlevel.checkpoint_if_cancelled()
        return True
    finally:
        with contextlib.suppress(RuntimeError):
            trio.lowlevel.notify_closing(epoll.fileno())
        epoll.close()
        for fd in watched:
            os.close(fd)
