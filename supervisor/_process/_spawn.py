"""Spawning every child the supervisor starts, without a worker-thread round trip, and
waiting on it.

One function, :func:`spawn`, starts every kind of child: ``process.run`` and jobs, language
servers, debug adapters, plugin backends, testbed programs (pipes), terminals and DAP
``runInTerminal`` (a PTY), with or without a working directory, and the watchdog (a pipe of
its own on stdin). Every child starts in the same clean state:

- its own session and process group: ``POSIX_SPAWN_SETSID``, so ``pgid == sid == pid`` from
  the first instruction of the child, so the group is never looked up later;
- every signal whose disposition can change (all but SIGKILL and SIGSTOP, realtime ones and
  the C library's internal ones included) at ``SIG_DFL`` (``POSIX_SPAWN_SETSIGDEF`` with that
  full set), and an empty signal mask (``POSIX_SPAWN_SETSIGMASK``). A supervisor started
  with signals ignored or blocked (``nohup``, a CI agent, a service manager) passes neither
  on: a child ends on SIGTERM, a terminal's program on hang-up and on SIGQUIT, as anywhere
  else. (The C library visits every signal in the child either way, so the full set costs
  nothing there.);
- only fds 0, 1 and 2 open: our pipes are created ``O_CLOEXEC`` and placed on 0/1/2 with a
  ``dup2`` action (which clears the flag on the copy only); every other descriptor is closed
  in the child by one ``closefrom(3)`` action, or, where the C library lacks it, by one close
  action per descriptor some other code made inheritable, found by listing
  ``/proc/self/fd`` (the ``close_fds=True`` of ``subprocess``). The one exception is a
  descriptor the caller passes on purpose (``pass_fd``, a job's report pipe): it is placed
  on fd 3 (``closefrom(4)`` then), or kept at its own number by the fork fallback, and the
  child's environment names the number;
- stdin as the caller asked (a pipe, ``/dev/null``, a descriptor of the caller's, or the
  terminal); the environment given is the child's whole environment (the caller adds the
  scope marker);
- ``PR_SET_PDEATHSIG`` is never used: it fires when the spawning *thread* exits.

Why ``posix_spawn`` (spawn speed). ``trio.lowlevel.open_process`` runs
``subprocess.Popen`` in a worker thread because a ``fork()`` of a large parent can take
milliseconds. glibc implements ``posix_spawn`` with ``clone(CLONE_VM | CLONE_VFORK)``: no page
tables are copied, the calling thread is suspended only until the child has exec'd (about
150 us for ``/bin/true``), and an exec failure is reported synchronously as an ``OSError``.
Blocking the Trio thread for that long costs less than handing the call to a thread and back
(about 0.5 ms measured), and nothing can run between the spawn and the registration of the
pid with the reaper. The exit is then awaited on a pidfd (``trio.lowlevel.wait_readable``),
as Trio itself does.

One call. Every child is started by the C library's ``posix_spawn`` called through ctypes
(:class:`_LibcSpawn`), with attributes built once: ``os.posix_spawn`` has no ``chdir`` file
action, and glibc's ``posix_spawn`` sets its two internal signals (32 and 33, which
``sigaddset`` refuses and ``os.posix_spawn`` therefore can not name) to ``SIG_IGN`` in the
child unless they are in the ``SETSIGDEF`` set, which ctypes can write directly. A working
directory is one more file action, ``posix_spawn_file_actions_addchdir_np`` (glibc 2.29,
musl 1.1.24), and the descriptors from 3 up are closed by one
``posix_spawn_file_actions_addclosefrom_np`` (glibc 2.34), which spares the listing of
``/proc/self/fd``. (Measured on glibc 2.36 with ``benchmarks.bench_spawn``: spawn+wait of
``/bin/true`` through ``process.run`` costs what ``os.posix_spawn`` did, about 1.34x
``subprocess.run``, with or without a cwd; the ctypes call's argument conversion is paid
back by the ``closefrom`` action.)

A program on a PTY gets, instead of pipes, a first file action that opens the slave by its
path as fd 0, without ``O_NOCTTY``; fds 1 and 2 are copies of it. The child is by then the
leader of a new session with no controlling terminal (the C library runs ``setsid`` before
the file actions), so on Linux that open makes the PTY its controlling terminal, which is what
``TIOCSCTTY`` in a ``preexec_fn`` did at the cost of a ``fork`` in a worker thread (3.8 ms
against 0.3 ms measured).

The fork fallback. Where none of that can be done -- not Linux, a C library whose
``posix_spawn`` ctypes can not reach, one without ``posix_spawn_file_actions_addchdir_np``
(with a cwd), a PTY without a path here (another devpts instance) -- :func:`spawn` forks
through ``subprocess.Popen`` with a ``preexec_fn`` that resets every signal to its default,
empties the mask and, for a PTY, runs ``TIOCSCTTY``: the same child, at the cost of a
``fork``. :func:`spawn_forks` says when; the caller then runs :func:`spawn` in a worker
thread.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import fcntl
import functools
import math
import os
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from ._marker import SCOPE_ENV
from ._procfs import HAVE_PROCFS, read_stat

if TYPE_CHECKING:
    from collections.abc import Callable, Container, Mapping, Sequence

    import trio

# Trio is imported where it is used, not here: spawning, polling and reaping a child are plain
# system calls, and `supervisor exec` runs its common path without an event loop (``_direct``).

__all__ = (
    "DEVNULL",
    "PIPE",
    "STDOUT",
    "ExitWatch",
    "SpawnedProcess",
    "refuse_spawns",
    "spawn",
    "spawn_forks",
    "wait_exits",
)

PIPE: Final = subprocess.PIPE
DEVNULL: Final = subprocess.DEVNULL
STDOUT: Final = subprocess.STDOUT

#: Every signal whose disposition can change (all but SIGKILL and SIGSTOP; the C library's
#: internal ones are not valid_signals()): each starts at its default in a child, whatever
#: we ignore -- Python ignores SIGPIPE and SIGXFSZ, a launcher may ignore SIGHUP or SIGTERM.
_DEFAULT_SIGNALS: Final = tuple(
    sorted(
        int(sig) for sig in signal.valid_signals() if sig not in (signal.SIGKILL, signal.SIGSTOP)
    )
)
#: The C library's internal signals (glibc: 32 and 33; not valid_signals(), see _LibcSpawn).
_LIBC_INTERNAL_SIGNALS: Final = tuple(
    sig
    for sig in range(1, signal.NSIG)
    if sig not in _DEFAULT_SIGNALS and sig not in (signal.SIGKILL, signal.SIGSTOP)
)
#: Where opening a terminal makes it a new session's controlling one (System V behaviour;
#: BSDs need TIOCSCTTY), and where the posix_spawn constants below hold.
_LINUX: Final = sys.platform.startswith("linux")
_HAVE_PIDFD: Final = hasattr(os, "pidfd_open")
_HAVE_EPOLL: Final = hasattr(select, "epoll")
_FD_DIR: Final = "/proc/self/fd"
#: Where a descriptor passed on purpose (``spawn(pass_fd=...)``) lands in the child.
_PASSED_FD: Final = 3


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
        pipes: Our ends of the child's pipes not yet wrapped as streams, by name
            (``"stdin"``, ``"stdout"``, ``"stderr"``): a caller without an event loop reads
            and closes them itself (``_direct``); the stream properties take them.
    """

    def __init__(
        self,
        pid: int,
        pipes: dict[str, int],
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        self.pipes = pipes
        self._streams: dict[str, Any] = {}
        self._popen = popen
        self._returncode: int | None = None
        # Created by the first wait(): a child polled without Trio never needs it.
        self._wait_lock: trio.Lock | None = None
        self._pidfd: int | None = None
        # Whether wait() gave the pidfd to Trio's epoll (only then may a Trio task be
        # waiting on it when it closes; a ``pidfd`` caller stops watching before reaping).
        self._pidfd_in_trio = False
        if _HAVE_PIDFD:
            # A kernel without pidfd_open (before 5.3) gets the thread fallback in wait().
            with contextlib.suppress(OSError):
                self._pidfd = os.pidfd_open(pid)

    def __repr__(self) -> str:
        return f"<SpawnedProcess pid={self.pid} returncode={self._returncode}>"

    def _stream(self, name: str) -> Any:
        stream = self._streams.get(name)
        if stream is None:
            fd = self.pipes.pop(name, None)
            if fd is None:
                return None
            import trio

            stream = self._streams[name] = trio.lowlevel.FdStream(fd)
        return stream

    @property
    def stdin(self) -> trio.abc.SendStream | None:
        """Trio stream to the child's stdin, or None when not piped (or closed unwrapped)."""
        stream: trio.abc.SendStream | None = self._stream("stdin")
        return stream

    @property
    def stdout(self) -> trio.abc.ReceiveStream | None:
        """Trio stream from the child's stdout, or None when not piped."""
        stream: trio.abc.ReceiveStream | None = self._stream("stdout")
        return stream

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None:
        """Trio stream from the child's stderr, or None when not piped."""
        stream: trio.abc.ReceiveStream | None = self._stream("stderr")
        return stream

    def __del__(self) -> None:
        # Only the descriptors are released here; the process is the tree's to end.
        pidfd, self._pidfd = getattr(self, "_pidfd", None), None
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)
        for fd in getattr(self, "pipes", {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)

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
        if self._wait_lock is None or not self._wait_lock.locked():
            # A waiter (it holds the lock) closes the descriptor itself once it wakes.
            self._close_pidfd()

    def _close_pidfd(self) -> None:
        pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            if self._pidfd_in_trio:
                # Trio's epoll may still hold a registration for this number.
                _notify_closing(pidfd)
            os.close(pidfd)

    async def wait(self) -> int:
        """Wait until the child exits and reap it.

        Returns:
            The exit status (negative: killed by that signal).

        **Cancellation:** cancellable; the child keeps running. Concurrent waiters are
        served one at a time (a pidfd has one reader in Trio) and all get the status.
        """
        import trio

        if self._wait_lock is None:
            self._wait_lock = trio.Lock()
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
                    self._pidfd_in_trio = True
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


def _notify_closing(fd: int) -> None:
    """Tell Trio ``fd`` is about to close, when Trio runs here (else nothing waits on it)."""
    trio = sys.modules.get("trio")
    if trio is not None:
        with contextlib.suppress(RuntimeError):  # outside a Trio run: nothing registered
            trio.lowlevel.notify_closing(fd)


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


#: ``posix_spawnattr_setflags`` bits, identical in glibc and musl (Linux).
_POSIX_SPAWN_SETSIGDEF: Final = 0x04
_POSIX_SPAWN_SETSIGMASK: Final = 0x08
_POSIX_SPAWN_SETSID: Final = 0x80
#: Room for ``posix_spawnattr_t`` (336 bytes on x86-64 glibc), ``posix_spawn_file_actions_t``
#: (80) and ``sigset_t`` (128): opaque to us, so sized generously for any ABI.
_OPAQUE_BYTES: Final = 1024

_FileAction = tuple[int, int] | tuple[int, int, int] | tuple[int, int, str, int, int]


def _add_signal_bit(sigset: ctypes.Array[ctypes.c_char], sig: int) -> None:
    """``sigaddset`` for a signal the C library keeps to itself (glibc's 32 and 33), which
    ``sigaddset`` refuses: a Linux ``sigset_t`` is an array of ``unsigned long`` with the bit
    ``sig - 1``, in glibc as in musl."""
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    words = (ctypes.c_ulong * (_OPAQUE_BYTES // ctypes.sizeof(ctypes.c_ulong))).from_buffer(sigset)
    words[(sig - 1) // bits] |= 1 << ((sig - 1) % bits)


@final
class _LibcSpawn:
    """The C library's ``posix_spawn`` through ctypes, with the attributes every child gets.

    ``os.posix_spawn`` is not used: it has no ``chdir`` file action, and it can not reset
    the C library's internal signals (see ``__init__``). Created once (see
    :func:`_libc_spawn`); raises ``OSError`` or ``AttributeError`` when the library or one
    of its functions is missing. The spawn attributes are the same for every child, so
    they are built once here and only read by each ``posix_spawn`` (which makes concurrent
    spawns from worker threads safe). The call releases the GIL (ctypes ``CDLL``), so
    other threads run while the child execs.

    Attributes:
        can_chdir: The C library has ``posix_spawn_file_actions_addchdir_np`` (glibc 2.29,
            musl 1.1.24): :meth:`spawn` takes a cwd.
        closes_from: It has ``posix_spawn_file_actions_addclosefrom_np`` (glibc 2.34):
            :meth:`spawn` closes every descriptor from 3 up in the child, and the caller
            adds no close actions.
    """

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        ptr, c_int, c_char_p = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
        signatures: dict[str, list[Any]] = {
            "posix_spawn_file_actions_init": [ptr],
            "posix_spawn_file_actions_destroy": [ptr],
            "posix_spawn_file_actions_adddup2": [ptr, c_int, c_int],
            "posix_spawn_file_actions_addclose": [ptr, c_int],
            "posix_spawn_file_actions_addopen": [ptr, c_int, c_char_p, c_int, ctypes.c_uint],
            "posix_spawn_file_actions_addchdir_np": [ptr, c_char_p],
            "posix_spawn_file_actions_addclosefrom_np": [ptr, c_int],
            "posix_spawnattr_init": [ptr],
            "posix_spawnattr_setflags": [ptr, ctypes.c_short],
            "posix_spawnattr_setsigmask": [ptr, ptr],
            "posix_spawnattr_setsigdefault": [ptr, ptr],
            "sigemptyset": [ptr],
            "sigaddset": [ptr, c_int],
            "posix_spawn": [ptr, c_char_p, ptr, ptr, ptr, ptr],
        }
        optional = {
            "posix_spawn_file_actions_addchdir_np",
            "posix_spawn_file_actions_addclosefrom_np",
        }
        fn: dict[str, Any] = {}
        for name, argtypes in signatures.items():
            fn[name] = getattr(libc, name, None) if name in optional else getattr(libc, name)
            if fn[name] is not None:
                fn[name].argtypes = argtypes
                fn[name].restype = c_int
        self._actions_init = fn["posix_spawn_file_actions_init"]
        self._actions_destroy = fn["posix_spawn_file_actions_destroy"]
        self._add = {
            os.POSIX_SPAWN_DUP2: fn["posix_spawn_file_actions_adddup2"],
            os.POSIX_SPAWN_CLOSE: fn["posix_spawn_file_actions_addclose"],
            os.POSIX_SPAWN_OPEN: fn["posix_spawn_file_actions_addopen"],
        }
        self._addchdir = fn["posix_spawn_file_actions_addchdir_np"]
        self._addclosefrom = fn["posix_spawn_file_actions_addclosefrom_np"]
        self.can_chdir: bool = self._addchdir is not None
        self.closes_from: bool = self._addclosefrom is not None
        self._posix_spawn = fn["posix_spawn"]
        self._built_actions: dict[
            tuple[tuple[_FileAction, ...], str | None, int], ctypes.Array[ctypes.c_char]
        ] = {}
        #: The last environment built, without its scope marker (see :meth:`_environment`).
        self._env_built: _BuiltEnv | None = None
        # Never destroyed: it lives as long as the process (one per process).
        self._attr = ctypes.create_string_buffer(_OPAQUE_BYTES)
        empty = ctypes.create_string_buffer(_OPAQUE_BYTES)
        defaults = ctypes.create_string_buffer(_OPAQUE_BYTES)
        _check(fn["posix_spawnattr_init"](self._attr))
        _check(fn["sigemptyset"](empty))
        _check(fn["sigemptyset"](defaults))
        for sig in _DEFAULT_SIGNALS:
            _check(fn["sigaddset"](defaults, sig))
        # glibc's posix_spawn sets its internal signals (32, 33) to SIG_IGN in the child
        # unless they are in this set, and SIG_IGN survives the exec: every child would
        # start with them ignored, unlike after fork+exec.
        for sig in _LIBC_INTERNAL_SIGNALS:
            _add_signal_bit(defaults, sig)
        _check(fn["posix_spawnattr_setsigmask"](self._attr, empty))
        _check(fn["posix_spawnattr_setsigdefault"](self._attr, defaults))
        flags = _POSIX_SPAWN_SETSID | _POSIX_SPAWN_SETSIGMASK | _POSIX_SPAWN_SETSIGDEF
        _check(fn["posix_spawnattr_setflags"](self._attr, flags))

    def spawn(
        self,
        executable: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        actions: Sequence[_FileAction],
        cwd: str | None,
        first_closed: int = 3,
    ) -> int:
        """``posix_spawn`` with ``actions``, then, where :attr:`closes_from`, every
        descriptor from ``first_closed`` up closed, then ``chdir(cwd)`` unless it is None
        (only where :attr:`can_chdir`). Returns the pid; raises ``OSError`` (the program
        could not be executed, the cwd could not be entered) as ``os.posix_spawn`` does.

        The file actions are built once per distinct list (descriptor numbers are reused,
        so a few lists serve nearly every spawn) and only read by ``posix_spawn``; the
        argument and environment vectors are one buffer and an array of addresses into it.
        Each ctypes conversion costs about a microsecond, and a spawn made some seventy of
        them (a tenth of a ``process.run`` of ``/bin/true``)."""
        file_actions, kept = self._file_actions(tuple(actions), cwd, first_closed)
        # What os.fsencode does, in one call per entry (this runs once per spawn).
        encoding = sys.getfilesystemencoding()
        args = [arg.encode(encoding, "surrogateescape") for arg in argv]
        built, scope = self._environment(env, encoding)
        # The arguments and the scope marker (the one entry new at each spawn) in one buffer;
        # the rest of the environment is the built one's, pointed to as it is.
        strings = ctypes.create_string_buffer(b"\0".join(args) + b"\0" + scope + b"\0")
        base = ctypes.addressof(strings)
        head = array.array(_POINTER_TYPECODE, [0] * (len(args) + 1))  # args, NULL
        offset = 0
        for index, item in enumerate(args):
            head[index] = base + offset
            offset += len(item) + 1
        tail = array.array(_POINTER_TYPECODE, [base + offset, 0] if scope else [0])
        pointers = head + built.pointers + tail
        vectors = pointers.buffer_info()[0]
        pid = ctypes.c_int(0)
        try:
            err = self._posix_spawn(
                ctypes.byref(pid),
                os.fsencode(executable),
                file_actions,
                self._attr,
                vectors,
                vectors + len(head) * pointers.itemsize,
            )
        finally:
            if not kept:
                self._actions_destroy(file_actions)
        del built  # alive until here: the vectors point into its buffer
        del strings  # alive until here: the vectors point into it
        if err:
            raise OSError(err, os.strerror(err), executable)
        return pid.value

    def _environment(self, env: Mapping[str, str], encoding: str) -> tuple[_BuiltEnv, bytes]:
        """``env`` without its scope marker, built as C strings and their addresses, and the
        marker's entry (``b""`` when it has none).

        Every tree's environment is ours plus its own marker: encoding it and writing the
        addresses of its entries, some thirty-five here, was about 8 us per spawn, now paid
        when the rest of it changes. The built one is only read by ``posix_spawn`` and kept
        alive by each caller until its call returns (a spawn in another thread may rebuild).
        """
        rest = dict(env)
        scope = rest.pop(SCOPE_ENV, None)
        built = self._env_built
        if built is None or built.env != rest:
            entries = [f"{k}={v}".encode(encoding, "surrogateescape") for k, v in rest.items()]
            strings = ctypes.create_string_buffer(b"\0".join(entries) + b"\0")
            base = ctypes.addressof(strings)
            pointers = array.array(_POINTER_TYPECODE, [0] * len(entries))
            offset = 0
            for index, item in enumerate(entries):
                pointers[index] = base + offset
                offset += len(item) + 1
            built = self._env_built = _BuiltEnv(rest, strings, pointers)
        if scope is None:
            return built, b""
        return built, f"{SCOPE_ENV}={scope}".encode(encoding, "surrogateescape")

    def _file_actions(
        self, actions: tuple[_FileAction, ...], cwd: str | None, first_closed: int
    ) -> tuple[ctypes.Array[ctypes.c_char], bool]:
        """The built file actions for this list, and whether they are kept built (else the
        caller destroys them after its spawn; see :meth:`spawn`)."""
        key = (actions, cwd, first_closed)
        built = self._built_actions.get(key)
        if built is not None:
            return built, True
        file_actions = ctypes.create_string_buffer(_OPAQUE_BYTES)
        _check(self._actions_init(file_actions))
        try:
            for action in actions:
                if action[0] == os.POSIX_SPAWN_OPEN:
                    _, fd, path, flags, mode = action  # type: ignore[misc]
                    _check(self._add[action[0]](file_actions, fd, os.fsencode(path), flags, mode))
                else:
                    _check(self._add[action[0]](file_actions, *action[1:]))
            if self._addclosefrom is not None:
                _check(self._addclosefrom(file_actions, first_closed))
            if cwd is not None:
                _check(self._addchdir(file_actions, os.fsencode(cwd)))
        except BaseException:
            self._actions_destroy(file_actions)
            raise
        # Kept for the process's life (never destroyed: a spawn in another thread may be
        # reading it); bounded, so a host with ever-new lists builds the rest each time.
        if len(self._built_actions) >= _BUILT_ACTIONS_MAX:
            return file_actions, False
        # Two threads building the same list: the first one kept serves both.
        return file_actions, self._built_actions.setdefault(key, file_actions) is file_actions


@final
@dataclass(frozen=True, slots=True)
class _BuiltEnv:
    """An environment built for ``posix_spawn`` (see ``_LibcSpawn._environment``).

    Attributes:
        env: What it was built from (compared with the next spawn's).
        strings: Its ``NAME=value`` entries, each ending in a NUL, in one C buffer.
        pointers: The address of each entry in ``strings``, in order (no final NULL).
    """

    env: dict[str, str]
    strings: ctypes.Array[ctypes.c_char]
    pointers: array.array[int]


#: Distinct file-action lists kept built (see ``_LibcSpawn.spawn``).
_BUILT_ACTIONS_MAX: Final = 256
#: The ``array`` type code of a C pointer.
_POINTER_TYPECODE: Final = "Q" if ctypes.sizeof(ctypes.c_void_p) == 8 else "I"


def _check(result: int) -> None:
    """Raise the ``OSError`` a C library call reported: ``posix_spawn*`` functions return
    the error number, ``sigemptyset``/``sigaddset`` return -1 and set ``errno``."""
    if result:
        err = ctypes.get_errno() if result == -1 else result
        raise OSError(err, os.strerror(err))


#: ``[spawner or None]`` once looked up; empty until the first spawn.
_libc_spawn_cache: list[_LibcSpawn | None] = []


def _libc_spawn() -> _LibcSpawn | None:
    """The ctypes spawner, or None where the C library's posix_spawn can not be used."""
    if not _libc_spawn_cache:
        spawner: _LibcSpawn | None = None
        if _LINUX:
            try:
                spawner = _LibcSpawn()
            except (OSError, AttributeError):
                spawner = None
        _libc_spawn_cache.append(spawner)
    return _libc_spawn_cache[0]


def _tty_path(tty: int) -> str | None:
    """The path a child opens to get ``tty``'s terminal, or None when it has none here.

    ``ttyname`` checks that the path names this very device (a PTY from another devpts
    instance, as in some containers, has no path here).
    """
    try:
        return os.ttyname(tty)
    except OSError:
        return None


def spawn_forks(cwd: str | None, tty: int | None = None) -> bool:
    """Whether :func:`spawn` with this cwd and terminal takes the fork fallback.

    False on Linux where the C library's ``posix_spawn`` is reachable through ctypes, unless
    a cwd is given and the C library lacks ``posix_spawn_file_actions_addchdir_np`` (glibc
    before 2.29, musl before 1.1.24), or the terminal has no path here (see
    :func:`_tty_path`). When True, :func:`spawn` forks (a ``fork`` of a large parent can
    take milliseconds): call it from a worker thread.
    """
    return _forks(cwd, no_tty_path=tty is not None and _tty_path(tty) is None)


def _forks(cwd: str | None, *, no_tty_path: bool) -> bool:
    libc_spawn = _libc_spawn()
    return libc_spawn is None or no_tty_path or (cwd is not None and not libc_spawn.can_chdir)


def _reset_in_child(*, controlling_tty: bool) -> None:
    """The fork fallback's ``preexec_fn``: what the spawn attributes do, done by hand.

    Runs in the child between ``fork`` and ``exec``, after ``setsid`` (subprocess runs
    ``preexec_fn`` after ``start_new_session``). Dispositions first, then the mask: a
    signal unblocked while a handler of ours is still installed would run Python code.
    A session leader gains a controlling terminal only by opening one or by ``TIOCSCTTY``;
    ``Popen`` only ``dup2``s the slave onto 0-2, hence the ioctl.
    """
    for sig in _DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    if controlling_tty:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _fork_spawn(
    executable: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    targets: list[int],
    *,
    tty: bool,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """The fork fallback (see :func:`spawn_forks`): ``Popen`` with :func:`_reset_in_child`."""
    try:
        return subprocess.Popen(
            list(argv),
            executable=executable,
            cwd=cwd,
            env=env,
            stdin=targets[0],
            stdout=targets[1],
            stderr=targets[2],
            start_new_session=True,
            close_fds=True,
            pass_fds=pass_fds,
            preexec_fn=functools.partial(_reset_in_child, controlling_tty=tty),
        )
    except subprocess.SubprocessError as exc:  # the preexec_fn raised (TIOCSCTTY refused)
        raise OSError(f"could not prepare the child: {exc}") from exc


class _SpawnGate:
    """Spawns in flight, and whether new ones are refused (the process is ending).

    A worker whose guardian died (``_guardian``) sweeps its descendants once nothing can
    start any more: :meth:`close` waits for the spawns in flight (each lasts until its child
    has exec'd), and every later one raises. Spawns never wait for each other here.
    """

    def __init__(self) -> None:
        # Entered as the plain lock (C: a Condition's own ``with`` is Python, twice per spawn);
        # the condition on it is for close() alone, so leave() notifies only once closed.
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._in_flight = 0
        self._closed = False

    def enter(self) -> None:
        """Count a spawn in flight; raises ``OSError`` (ESHUTDOWN) once closed. Pair each
        with :meth:`leave` (not a generator context manager: this runs once per spawn)."""
        with self._lock:
            if self._closed:
                raise OSError(errno.ESHUTDOWN, "the supervisor is ending: no new process starts")
            self._in_flight += 1

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._closed and not self._in_flight:
                self._drained.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drained.wait_for(lambda: not self._in_flight, timeout=1.0)


_gate = _SpawnGate()


def refuse_spawns() -> None:
    """Refuse every spawn from now on, once those in flight have finished (bounded: 1 s).

    For a process that is ending everything it started from another thread (a worker whose
    guardian died): after this, a sweep that finds no descendant is final.
    """
    _gate.close()


def spawn(
    executable: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str | None = None,
    stdin: int = PIPE,
    stdout: int = PIPE,
    stderr: int = PIPE,
    tty: int | None = None,
    pass_fd: tuple[int, str] | None = None,
) -> SpawnedProcess:
    """Start ``executable`` with ``argv`` in a new session, clean, synchronously.

    The one way the supervisor starts a child (see the module docstring for the state every
    child starts in). Validation is the caller's (``_tree``); this only spawns. Returns once
    the child has exec'd; the calling thread is blocked that long (about 0.1-0.3 ms), or for
    a ``fork`` where :func:`spawn_forks` is True (call it from a worker thread then).

    Args:
        executable: Absolute path of the program (already resolved on the child's PATH).
        argv: The arguments, ``argv[0]`` included.
        env: The child's entire environment.
        cwd: The child's working directory, or None for ours.
        stdin: ``PIPE``, ``DEVNULL``, or a descriptor of the caller's (>= 0, which it
            keeps and closes) to place on fd 0.
        stdout: ``PIPE``, ``DEVNULL`` or a descriptor (as for ``stdin``).
        stderr: ``PIPE``, ``DEVNULL``, ``STDOUT`` (the stdout target) or a descriptor.
        tty: A terminal (a PTY slave) whose device becomes fds 0, 1 and 2 and the
            controlling terminal of the child's session; the three modes above are then
            ignored and no stream is returned. The caller keeps and closes this descriptor.
        pass_fd: ``(descriptor, variable)``: one more descriptor of the caller's (which it
            keeps and closes) that the child gets, as fd 3, or at its own number in the
            fork fallback; ``env[variable]`` is set to that number in the child's
            environment. Every other descriptor from 3 up is still closed.

    Returns:
        The :class:`SpawnedProcess`; its pipes become Trio streams when first used.

    Raises:
        OSError: The program could not be executed (missing, not executable, bad
            format), the cwd or the terminal could not be used or a pipe could not be
            created; nothing is left running and every descriptor opened here is closed.
    """
    _gate.enter()
    try:
        return _spawn(executable, argv, env, cwd, stdin, stdout, stderr, tty, pass_fd)
    finally:
        _gate.leave()


def _spawn(
    executable: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    stdin: int,
    stdout: int,
    stderr: int,
    tty: int | None,
    pass_fd: tuple[int, str] | None,
) -> SpawnedProcess:
    opened: list[int] = []  # every descriptor of ours; the child-side ones close below
    child_side: list[int] = []
    ours: dict[str, int] = {}
    try:
        if tty is not None:
            targets = [tty, tty, tty]
        else:
            targets = _open_stdio(stdin, stdout, stderr, opened, child_side, ours)
        tty_path = None if tty is None else _tty_path(tty)
        popen: subprocess.Popen[bytes] | None = None
        if _forks(cwd, no_tty_path=tty is not None and tty_path is None):
            pass_fds: tuple[int, ...] = ()
            if pass_fd is not None:
                pass_fds = (pass_fd[0],)
                env = {**env, pass_fd[1]: str(pass_fd[0])}
            popen = _fork_spawn(
                executable, argv, env, cwd, targets, tty=tty is not None, pass_fds=pass_fds
            )
            pid = popen.pid
        else:
            libc_spawn = _libc_spawn()
            assert libc_spawn is not None  # not _forks(), checked above
            actions = _file_actions(
                targets, tty_path, opened, libc_spawn.closes_from, passed=pass_fd is not None
            )
            first_closed = 3
            if pass_fd is not None:
                # Placed after fds 0-2 and before every descriptor is closed from fd 4 up.
                actions.append((os.POSIX_SPAWN_DUP2, pass_fd[0], _PASSED_FD))
                env = {**env, pass_fd[1]: str(_PASSED_FD)}
                first_closed = _PASSED_FD + 1
            pid = libc_spawn.spawn(executable, argv, env, actions, cwd, first_closed)
    except BaseException:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    for fd in child_side:
        os.close(fd)
    return SpawnedProcess(pid, ours, popen)


def _open_stdio(
    stdin: int,
    stdout: int,
    stderr: int,
    opened: list[int],
    child_side: list[int],
    ours: dict[str, int],
) -> list[int]:
    """Open the pipes and ``/dev/null`` behind the child's fds 0-2; return those 3 fds.

    Every descriptor opened is appended to ``opened`` (for the caller to close on failure),
    the child's ends also to ``child_side`` (closed once the child has them), and our pipe
    ends go into ``ours`` by stream name.
    """
    targets: list[int] = []
    null = -1
    if DEVNULL in (stdin, stdout, stderr):
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        opened.append(null)
        child_side.append(null)
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
        elif mode == STDOUT:  # for stderr only (checked by the caller)
            targets.append(targets[1])
        else:
            targets.append(mode)
    return targets


def _file_actions(
    targets: list[int],
    tty_path: str | None,
    opened: list[int],
    closes_from: bool,
    *,
    passed: bool = False,
) -> list[_FileAction]:
    """The ``posix_spawn`` file actions that give the child its fds 0-2 and nothing else.

    With ``tty_path`` the terminal is opened as fd 0 and copied to 1 and 2; else
    ``targets`` are copied onto 0-2. Without ``closes_from`` (an older libc) every other
    descriptor we have open is closed one by one, fd 3 aside when ``passed`` (the caller
    places its descriptor there next).
    """
    actions: list[_FileAction]
    if tty_path is not None:
        # No O_NOCTTY: this open makes the terminal the new session's controlling one.
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, tty_path, os.O_RDWR, 0),
            (os.POSIX_SPAWN_DUP2, 0, 1),
            (os.POSIX_SPAWN_DUP2, 0, 2),
        ]
    else:
        actions = [(os.POSIX_SPAWN_DUP2, source, target) for target, source in enumerate(targets)]
    if not closes_from:
        keep = [*opened, _PASSED_FD] if passed else opened
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds(keep)]
    return actions


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


#: libc's ``timerfd_create`` and ``timerfd_settime``, looked up once (see _timerfd_calls).
_TIMERFD_CALLS: list[tuple[Any, Any]] = []


def _timerfd_calls() -> tuple[Any, Any]:
    """libc's two timerfd calls, looked up on first use and kept: a ``CDLL`` and its
    function objects cost about 30 us of CPU per tree end that waits.

    Raises:
        AttributeError: libc has no such call.
    """
    if not _TIMERFD_CALLS:
        libc = ctypes.CDLL(None, use_errno=True)
        _TIMERFD_CALLS.append((libc.timerfd_create, libc.timerfd_settime))
    return _TIMERFD_CALLS[0]


class _TimerFd:
    """A ``CLOCK_MONOTONIC`` timerfd armed at absolute deadlines, through libc.

    ``os.timerfd_create`` exists only from Python 3.13; the two calls are small enough
    for ctypes. Raises ``OSError`` (or ``AttributeError`` from a libc without them).
    """

    def __init__(self) -> None:
        create, self._settime = _timerfd_calls()
        fd = create(_CLOCK_MONOTONIC, _TFD_CLOEXEC | _TFD_NONBLOCK)
        if fd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
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
    import trio

    clock = trio.lowlevel.current_clock()
    offset = getattr(clock, "offset", None)
    if type(clock).__name__ != "SystemClock" or not isinstance(offset, float):
        return None
    return offset


@final
class ExitWatch:
    """Processes being ended, watched through their pidfds, with a precise deadline.

    Ending a tree used to poll ``/proc`` with sleeps; this wakes up when the last watched
    process exits. Each process gets a pidfd (works for any process we
    may signal, child or not); all of them go into one private epoll whose descriptor
    Trio waits on, so a whole tree costs one wake-up. Under Trio's system clock a timerfd
    in the same epoll carries the deadline: Trio rounds its own timeouts up to the next
    millisecond (``epoll_wait``), which would push a SIGKILL due at the end of a TERM grace
    up to a millisecond late; the timerfd fires on time (nanosecond resolution, no slack).

    Not thread-safe; one task uses it. :meth:`close` releases every descriptor.
    """

    def __init__(self, *, epoll: Callable[[], select.epoll | None] | None = None) -> None:
        self._available = _HAVE_PIDFD and HAVE_PROCFS and _HAVE_EPOLL
        # Created on the first add: most tree ends (nothing left alive) never need it.
        self._epoll: select.epoll | None = None
        # Where the first add takes an empty epoll from (a pool), before making one.
        self._epoll_source = epoll
        self._fds: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, starttime)
        # The pidfds of those seen exiting, kept until close: reaping through them
        # (reap_exited) needs no stat read and cannot hit a reused pid.
        self._exited: dict[int, int] = {}  # pidfd -> pid
        self._watched: set[tuple[int, int]] = set()
        self._timer: _TimerFd | None = None
        self._timer_failed = False
        #: Whether a :meth:`wait` went through the scheduler (waited on the epoll).
        self.yielded = False

    @property
    def available(self) -> bool:
        """False where pidfds or epoll are missing: the caller polls instead."""
        return self._available

    @property
    def pending(self) -> int:
        """How many watched processes have not been seen exiting."""
        return len(self._fds)

    def add(self, pid: int, starttime: int, *, verify: bool = False) -> bool:
        """Watch ``pid`` (identified by ``starttime``) until it exits.

        Args:
            pid: The process id.
            starttime: ``/proc/<pid>/stat`` field 22, read just before (see ``_procfs``).
            verify: Read the stat again after opening the pidfd and drop the process when
                it is a zombie or its start time differs (the number was reused): for a
                caller whose ``starttime`` may be old.

        A process already gone, or already watched, is skipped. Without pidfd support
        (``available`` False) this does nothing.

        Returns:
            True when the process is watched (now or already).
        """
        if not self._available:
            return False
        if (pid, starttime) in self._watched:
            return True
        if self._epoll is None:
            pooled = self._epoll_source() if self._epoll_source is not None else None
            self._epoll = pooled if pooled is not None else select.epoll()
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return False  # already reaped (ESRCH), or out of descriptors: the scans see it
        if verify:
            st = read_stat(pid)
            if st is None or st.dead or st.starttime != starttime:
                os.close(fd)
                return False
        self._watched.add((pid, starttime))
        self._fds[fd] = (pid, starttime)
        self._epoll.register(fd, select.EPOLLIN)
        return True

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
            self._exited[fd] = self._fds.pop(fd)[0]
        return fired

    def reap_exited(self, skip: Container[int]) -> list[int]:
        """Reap the watched processes seen exiting that are our children (orphans the
        subreaper adopted), through their pidfds (``waitid(P_PIDFD)``); never blocks.

        A pidfd names one process, so no stat read has to prove the zombie is the one
        watched (a reused pid cannot be reaped by mistake), and no ``/proc`` read is made.
        A process that is not our child (``ECHILD``) is left to its parent.

        Args:
            skip: Pids to leave alone: processes whose status someone else collects (a
                tree's main process, which its ``SpawnedProcess`` reaps).

        Returns:
            The pids reaped.
        """
        reaped: list[int] = []
        for fd, pid in self._exited.items():
            if pid in skip:
                continue
            try:
                if os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG) is not None:
                    reaped.append(pid)
            except OSError:
                continue  # ECHILD: not ours to reap (or reaped already)
        return reaped

    def _arm_timer(self, deadline: float, *, real_time: bool) -> bool:
        """Arm the timerfd at the Trio time ``deadline``; False when Trio's clock must do.

        With ``real_time`` and a clock other than Trio's system clock, the timer is armed
        as far ahead in real time as ``deadline`` is in the clock's time.
        """
        if self._timer_failed or math.isinf(deadline):
            return False
        import trio

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
        import trio

        self._collect_exits()
        if not self._fds:
            await trio.lowlevel.checkpoint_if_cancelled()
            return True
        assert self._epoll is not None  # created by the add of a process in _fds
        system_clock = _monotonic_offset() is not None
        # A real-time wait (after SIGKILL) under Trio's system clock needs no timerfd: Trio's
        # own deadline is real time, and a millisecond of rounding does not matter there
        # (the timer is for the SIGKILL due at the end of a TERM grace). Its create,
        # register and arm cost about 20 us of CPU per SIGKILLed tree.
        precise = (not real_time or not system_clock) and self._arm_timer(
            deadline, real_time=real_time
        )
        if not precise and self._timer is not None:
            # An earlier deadline's timer stays readable once it fired: it would end every
            # wait at once (a busy loop for the whole bound).
            self._epoll.unregister(self._timer.fd)
            self._timer.close()
            self._timer = None
        backup = deadline + _TIMER_BACKUP_S if precise else deadline
        if precise and real_time and not system_clock:
            backup = math.inf  # the timer alone: a jumping clock must not cut it short
        with trio.move_on_at(backup):
            while True:
                self.yielded = True
                await trio.lowlevel.wait_readable(self._epoll.fileno())
                if self._collect_exits():
                    break
                if not self._fds:
                    await trio.lowlevel.checkpoint_if_cancelled()
                    return True
        await trio.lowlevel.checkpoint_if_cancelled()
        return not self._fds

    def close(self, *, pool: Callable[[select.epoll], bool] | None = None) -> None:
        """Release the epoll, the pidfds and the timer (idempotent); adds are ignored
        afterwards.

        Args:
            pool: Offered the epoll when nothing is registered in it any more (every
                watched process seen exiting, no timer); it returns True when it keeps it
                (then it stays open), False to have it closed.
        """
        self._available = False
        epoll, self._epoll = self._epoll, None
        empty = not self._fds and self._timer is None
        if epoll is not None and pool is not None and empty and pool(epoll):
            epoll = None
        if epoll is not None:
            _notify_closing(epoll.fileno())
            epoll.close()
        for fd in (*self._fds, *self._exited):
            os.close(fd)
        self._fds.clear()
        self._exited.clear()
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
