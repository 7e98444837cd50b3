"""Process trees: spawn a child as the root of a supervised tree, and end the tree.

Contract:

- A tree is started from an argv, never through a shell, in a new session and
  process group whose id is recorded at spawn (``pgid == pid``) and never looked up
  again. Its environment carries the scope marker (see ``_marker``).
- Bad input is rejected before anything starts: ``invalid_request`` for a malformed
  argv, env or cwd value, ``launch_failed`` for a missing executable or cwd.
- Ending a tree (:meth:`ProcessTree.aclose`) is shielded and bounded: an optional
  polite step, SIGTERM+SIGCONT to the group and to known escapees, a grace period
  that ends early once everything is gone, SIGKILL to the group, a sweep by marker
  and by ancestry that SIGKILLs descendants which left the group or session, and a
  bounded wait after which survivors are *reported* as unkillable instead of hung
  on. Every zombie we own is reaped (see ``_reaper``). These are the signal steps of the
  stop ladder (``_ladder.stop_ladder``), which every kind ends its program with; the
  ladder adds the drain of the kind's readers and closes the pipes.

Finding a tree's processes. With the subreaper active (Linux), a live descendant
is either below the main process or was reparented to us, so walking
``/proc/<pid>/task/*/children`` from the main process and from our adopted
children (attributed to this tree by marker, or by session/group when the marker
was stripped) finds all of them cheaply. Whenever something was still alive, a
full ``/proc/*/environ`` scan for this tree's marker is added, and every process
ever seen is remembered by ``(pid, starttime)`` so an escapee reparented
elsewhere (no subreaper) is still found without being confused with a reused pid.

The walk always lists a member's children before that member is signalled: once its parent
is dead, a child that left the session and dropped the marker has nothing left that ties it
to this tree. With a grace, the whole walk comes first, then SIGTERM; with none
(``aclose(term_grace_ms=0)``, the subreaper active, no escapee seen before) the walk *is* the
kill: each member gets its SIGKILL as soon as its children (on every thread) are listed, so
the kernel kills the first members while the walk reads the others
(``ProcessTree._kill_walk``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

import trio

from .._handles import NoPublicConstructor
from . import _reaper, _watchdog
from ._ladder import KILL_WAIT_MS, POLITE_TIMEOUT_MS, TERM_GRACE_MS, StopBounds, stop_ladder
from ._launch import (
    check_argv,
    check_cwd,
    check_env,
    resolve_executable,
    spawn_failed,
    spawned,
)
from ._marker import SCOPE_ENV, new_scope_marker
from ._procfs import (
    HAVE_PROCFS,
    ProcStat,
    all_pids,
    children_of,
    own_pid,
    read_env_var,
    read_stat,
)
from ._spawn import ExitWatch, SpawnedProcess, spawn, spawn_forks

if TYPE_CHECKING:
    import select
    from types import TracebackType
    from typing import Self


__all__ = (
    "DEFAULT_KILL_WAIT_MS",
    "DEFAULT_POLITE_TIMEOUT_MS",
    "DEFAULT_TERM_GRACE_MS",
    "DEVNULL",
    "PIPE",
    "STDOUT",
    "PoliteStep",
    "ProcessTree",
    "TreeEndReport",
    "open_process_tree",
)

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT

#: Defaults for ending a tree, in milliseconds: the stop ladder's (``_ladder``).
DEFAULT_POLITE_TIMEOUT_MS = POLITE_TIMEOUT_MS
DEFAULT_TERM_GRACE_MS = TERM_GRACE_MS
DEFAULT_KILL_WAIT_MS = KILL_WAIT_MS

#: Polling of procfs while waiting for a tree to die starts fast (most trees die
#: within milliseconds of SIGTERM) and backs off to bound the cost.
_POLL_FIRST_S = 0.002
_POLL_MAX_S = 0.05
#: A precise (timerfd) deadline may wake a hair before Trio's float clock reads it as due.
_DEADLINE_EPSILON_S = 1e-6
#: The last scan of a TERM grace runs this long before its end (see ``_wait_gone``).
_LAST_SCAN_S = 0.002
#: The start time of a member watched before its stat was read (``_kill_walk``).
_START_UNREAD = -1

#: Main processes started and not yet seen exiting (one cell, mutated in place), and the
#: count from which a new spawn runs in a worker thread rather than in the Trio thread: as soon
#: as another tree of ours runs. A spawn blocks its thread until the child has exec'd
#: (0.15-0.4 ms, longer under load), and while it blocks the Trio thread, every other tree's
#: output and exit wait. From four trees on (the count until 2026-12-05), 2 000 jobs over 200
#: lanes ran at 0.80-1.05x a plain Trio loop; from one, 1.04-1.21x, with less of the Trio
#: thread's CPU per job (interleaved, load 10). A lone ``process.run`` still spawns inline
#: (a worker thread's round trip costs more than that wait when nothing else is waiting).
_running_mains = [0]
_THREADED_SPAWN_AT = 1

PoliteStep = Callable[[], Awaitable[object]]

#: Empty epolls kept for the next waiter of this Trio run (``process.run``'s multiplexer, a
#: tree end's ``ExitWatch``), at most this many.
_POOLED_EPOLLS = 16
_epoll_pool: trio.lowlevel.RunVar[list[select.epoll]] = trio.lowlevel.RunVar(
    "supervisor_mux_epolls"
)


class _ClosePool(trio.abc.Instrument):
    """Closes the run's pooled epolls when the run ends (its only hook: no per-step cost)."""

    def __init__(self, pool: list[select.epoll]) -> None:
        self.pool = pool

    def after_run(self) -> None:
        while self.pool:
            self.pool.pop().close()


def pooled_epoll() -> select.epoll | None:
    """An empty epoll an earlier waiter of this run gave back (:func:`pool_epoll`), or None.

    Creating an epoll, Trio's first registration of its descriptor (a failed
    ``EPOLL_CTL_MOD``, then the add) and its ``notify_closing`` and close cost about
    10 us per command or tree end; a pooled one stays registered with Trio (disarmed once
    it fired).
    """
    try:
        pool = _epoll_pool.get()
    except LookupError:
        pool = []
        _epoll_pool.set(pool)
        trio.lowlevel.add_instrument(_ClosePool(pool))
    return pool.pop() if pool else None


def pool_epoll(epoll: select.epoll) -> bool:
    """Keep ``epoll``, which holds no registration, for this run's next waiter; False (the
    caller closes it) when the pool is full or was never made in this run."""
    pool = _epoll_pool.get(_NO_POOL)  # made by the pooled_epoll() that handed one out
    if pool is _NO_POOL or len(pool) >= _POOLED_EPOLLS:
        return False
    pool.append(epoll)
    return True


#: What ``_epoll_pool`` reads as in a run that has none (never appended to).
_NO_POOL: list[select.epoll] = []


@dataclass(frozen=True)
class TreeEndReport:
    """What ending a process tree took.

    Attributes:
        returncode: The main process's status (negative: killed by that signal), or
            None if it could not be reaped (unkillable).
        polite_attempted: True when a polite step was given and the main process
            was still running.
        terminated: Pids that were sent SIGTERM (sorted).
        killed: Pids that were still alive after the grace and were sent SIGKILL.
        swept: Pids found outside the tree's process group (by marker or ancestry).
        unkillable: Pids still alive ``kill_wait_ms`` after SIGKILL (for example in
            uninterruptible sleep); nothing waits for them any longer.
        polite_error: ``repr`` of an exception the polite step raised, if any.
        duration_ms: Wall time the end took, in milliseconds.
    """

    returncode: int | None
    polite_attempted: bool
    terminated: tuple[int, ...]
    killed: tuple[int, ...]
    swept: tuple[int, ...]
    unkillable: tuple[int, ...]
    polite_error: str | None
    duration_ms: int


@final
class ProcessTree(metaclass=NoPublicConstructor):
    """A running child process and every process it starts, ended as one.

    Created only by :func:`open_process_tree`. Usable as an async context manager:
    leaving the block calls :meth:`aclose` with its defaults.

    Attributes:
        args: The argv the tree was started with.
        pid: The main process id.
        pgid: The tree's process group id, recorded at spawn (equal to ``pid``).
        marker: The ``SUPERVISOR_SCOPE`` value every process of the tree inherits.
        stdin: Stream to the child's stdin, or None when not piped.
        stdout: Stream from the child's stdout, or None when not piped.
        stderr: Stream from the child's stderr, or None when not piped.
    """

    def __init__(self, process: SpawnedProcess, args: list[str], marker: str) -> None:
        self._proc = process
        self.args = args
        self.pid: int = process.pid
        self.pgid: int = process.pid
        self.marker = marker
        self._exit_time: float | None = None
        self._seen: dict[int, int] = {}
        self._end_done: trio.Event | None = None
        self._report: TreeEndReport | None = None
        self._pipes_closed = False
        # The end's steps went through the scheduler (their wait for the exits): closing
        # the pipes right after needs no pass of its own (see ``_close_pipes``).
        self._end_yielded = False
        self._adopted_seen = False
        self._escapees_seen = False
        # The last scan found nothing alive and no zombie it had not reaped.
        self._scan_clean = False
        # A first scan ``_end_nowait`` made and found members alive in: the end's steps
        # start from it (taken with no await between, so it is as fresh as their own).
        self._first_live: dict[int, ProcStat] | None = None
        # Members ``_kill_walk`` signalled and watched without reading their stat.
        self._unidentified: list[int] = []

    def __repr__(self) -> str:
        return f"<ProcessTree pid={self.pid} marker={self.marker!r} returncode={self.returncode}>"

    # The pipes become Trio streams when first read here; ``process.run``'s multiplexer takes
    # the bare descriptors instead (``_raw_pipe``), which never meet Trio's epoll: no stream
    # objects to build and close, no ``notify_closing`` for them.

    @property
    def stdin(self) -> trio.abc.SendStream | None:
        """Stream to the child's stdin, or None when not piped."""
        return self._proc.stdin

    @property
    def stdout(self) -> trio.abc.ReceiveStream | None:
        """Stream from the child's stdout, or None when not piped."""
        return self._proc.stdout

    @property
    def stderr(self) -> trio.abc.ReceiveStream | None:
        """Stream from the child's stderr, or None when not piped."""
        return self._proc.stderr

    def _raw_pipe(self, name: str) -> int | None:
        """Our end of the pipe ``name`` (``"stdin"``, ``"stdout"``, ``"stderr"``) while it is
        not wrapped as a stream, else None; it stays the tree's to close (``_close_pipes``)."""
        return self._proc.pipes.get(name)

    def _close_raw_pipe(self, name: str) -> None:
        """Close the unwrapped pipe ``name`` now (Trio never saw it: no ``notify_closing``)."""
        fd = self._proc.pipes.pop(name, None)
        if fd is not None:
            os.close(fd)

    def _bare_pipes(self) -> Mapping[str, int] | None:
        """Our ends of the pipes by name when none was made a stream (the usual case), else
        None; they stay the tree's to close."""
        return None if self._proc._streams else self._proc.pipes

    def _streams_or_none(self) -> tuple[object, ...]:
        # The streams already made, without making the others.
        streams = self._proc._streams
        return tuple(streams.get(name) for name in ("stdin", "stdout", "stderr"))

    @property
    def returncode(self) -> int | None:
        """The main process's exit status, or None while it runs.

        Negative values mean "killed by that signal", as in :mod:`subprocess`.
        Reading it reaps the main process when it has exited.
        """
        rc = self._proc.returncode
        if rc is not None:
            self._note_exit()
        return rc

    def _exit_fd(self) -> int | None:
        """The main process's pidfd, for ``_process``'s multiplexer; None if unavailable."""
        return self._proc.pidfd

    @property
    def exit_time(self) -> float | None:
        """``trio.current_time()`` when the main process was first seen exited."""
        return self._exit_time

    def _note_exit(self) -> None:
        if self._exit_time is None:
            self._exit_time = trio.current_time()
            _reaper.unregister_managed(self.pid)
            _running_mains[0] -= 1

    async def wait(self) -> int:
        """Wait for the main process to exit; other tree members may still run.

        Returns:
            The exit status (negative: killed by that signal).

        **Cancellation:** cancellable; the tree keeps running.
        """
        rc = await self._proc.wait()
        self._note_exit()
        return rc

    # -- ending the tree ---------------------------------------------------------

    async def aclose(
        self,
        *,
        polite: PoliteStep | None = None,
        polite_timeout_ms: int = DEFAULT_POLITE_TIMEOUT_MS,
        term_grace_ms: int = DEFAULT_TERM_GRACE_MS,
        kill_wait_ms: int = DEFAULT_KILL_WAIT_MS,
    ) -> TreeEndReport:
        """End the whole tree, reap what is ours, and close the pipes.

        Steps: ``polite()`` (if given and the main process still runs) plus waiting
        for the main process, together bounded by ``polite_timeout_ms``; SIGTERM and
        SIGCONT to the process group and to known escapees; up to ``term_grace_ms``
        for everything to exit (returns as soon as it has); SIGKILL to the group and
        to every straggler found by marker and ancestry; up to ``kill_wait_ms`` for
        them to vanish, after which survivors are listed as ``unkillable``. The
        whole call is bounded by the sum of the three bounds plus procfs scans.
        After the main process has exited on its own, this still ends whatever it
        left running (background children, daemons).

        A second call (concurrent or later) joins the first and returns the same
        report; its arguments are ignored.

        Args:
            polite: Async callable with no arguments that asks the tree to exit
                (close stdin, an LSP ``shutdown``/``exit``). An exception it raises
                is recorded in ``polite_error`` and the end goes on.
            polite_timeout_ms: Bound on the polite step, in milliseconds.
            term_grace_ms: Time between SIGTERM and SIGKILL, in milliseconds.
            kill_wait_ms: Time to wait after SIGKILL before reporting survivors, in
                milliseconds.

        Returns:
            A :class:`TreeEndReport`.

        Raises:
            ValueError: A bound is negative.

        **Cancellation:** shielded: it completes (bounded) even when called from a
        cancelled scope; the caller's cancellation is delivered at its next
        checkpoint.
        """
        bounds = StopBounds(
            polite_ms=polite_timeout_ms, term_grace_ms=term_grace_ms, kill_wait_ms=kill_wait_ms
        )
        # The stop ladder without a drain: the caller reads the pipes, if anyone does.
        return await stop_ladder(self, bounds, polite=polite)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _close_pipes(self) -> None:
        if self._pipes_closed:
            return
        if self._close_pipes_nowait():
            # A schedule point, as every ``aclose`` has; the end's wait for the exits was
            # one when it waited (this call's, run just before without a pass between).
            if self._end_yielded:
                self._end_yielded = False
                return
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        self._pipes_closed = True
        self._close_raw_pipes()
        # Shielded: a cancelled caller (the stop ladder has no scope of its own when it has
        # nothing to drain) still closes every stream.
        with trio.CancelScope(shield=True):
            for stream in self._streams_or_none():
                if isinstance(stream, trio.abc.AsyncResource):
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await stream.aclose()
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _close_pipes_nowait(self) -> bool:
        """Close the pipes when each is unwrapped or an ``FdStream`` (closing one never
        blocks); False, closing nothing, when one needs an ``await``."""
        if self._pipes_closed:
            return True
        if not self._proc._streams:  # the usual case: no stream was made, only descriptors
            self._pipes_closed = True
            self._close_raw_pipes()
            return True
        streams = self._streams_or_none()
        if not all(s is None or isinstance(s, trio.lowlevel.FdStream) for s in streams):
            return False
        self._pipes_closed = True
        self._close_raw_pipes()
        for stream in streams:
            if isinstance(stream, trio.lowlevel.FdStream):
                stream.close()
        return True

    def _close_raw_pipes(self) -> None:
        pipes = self._proc.pipes
        while pipes:
            _, fd = pipes.popitem()
            with contextlib.suppress(OSError):
                os.close(fd)

    def _end_reported(self) -> bool:
        """Whether ending the tree is done (its report final); for ``_process``."""
        return self._report is not None

    async def _end(
        self,
        *,
        polite: PoliteStep | None = None,
        polite_timeout_ms: int = DEFAULT_POLITE_TIMEOUT_MS,
        term_grace_ms: int = DEFAULT_TERM_GRACE_MS,
        kill_wait_ms: int = DEFAULT_KILL_WAIT_MS,
    ) -> TreeEndReport:
        """End every process of the tree without closing the pipes (shielded)."""
        for name, value in (
            ("polite_timeout_ms", polite_timeout_ms),
            ("term_grace_ms", term_grace_ms),
            ("kill_wait_ms", kill_wait_ms),
        ):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if self._report is not None or self._end_nowait() is not None:
            # Already ended: the report is final. No scheduler pass here; ``aclose`` (the
            # public way in) still makes one when it closes the pipes.
            assert self._report is not None
            return self._report
        with trio.CancelScope(shield=True):
            if self._end_done is not None:
                await self._end_done.wait()
                assert self._report is not None
                return self._report
            self._end_done = trio.Event()
            try:
                self._report = await self._end_steps(
                    polite, polite_timeout_ms, term_grace_ms, kill_wait_ms
                )
            finally:
                self._end_done.set()
                self._ended(self._report)
        assert self._report is not None
        return self._report

    def _end_nowait(self) -> TreeEndReport | None:
        """End the tree at once when that takes no wait: its main process has exited and
        been reaped, and the leftovers check finds nothing of the tree alive. Returns the
        report, or None (nothing was signalled; the caller runs the steps, which start from
        this scan).

        The check is the steps' own first scan (:meth:`_first_scan`, the same proof: our
        children listed, the main process's descendants reparented to us, the members seen,
        the marker scan where ancestry may miss one); with nothing alive, the steps would
        signal nothing, wait for nothing and report the same, so this is them without the
        cancel scope, the event and the exit watch that only a wait needs. A grandchild that
        outlived the main process is alive here, and the steps run
        (``test_run_process_ends_a_grandchild_left_running``).
        """
        if self._report is not None:
            return self._report
        if self._end_done is not None or self.returncode is None:
            return None
        started = trio.current_time()
        live = self._first_scan()
        if live:
            self._first_live = live
            return None
        report = self._report = TreeEndReport(
            returncode=self.returncode,
            polite_attempted=False,
            terminated=(),
            killed=(),
            swept=(),
            unkillable=(),
            polite_error=None,
            duration_ms=math.ceil((trio.current_time() - started) * 1000),
        )
        self._ended(report)
        return report

    def _ended(self, report: TreeEndReport | None) -> None:
        """The bookkeeping of an end (``report`` None: the steps failed)."""
        if self._scan_clean:
            # Nothing of the tree is left, alive or zombie: no pid to prove ours.
            _reaper.forget_ours(self._seen)
        elif self._adopted_seen or report is None or report.terminated or report.killed:
            # Orphans of this tree may have turned zombie since the last scan.
            _reaper.reap_adopted_children()
        _reaper.tree_ended()

    async def _end_steps(
        self,
        polite: PoliteStep | None,
        polite_timeout_ms: int,
        term_grace_ms: int,
        kill_wait_ms: int,
    ) -> TreeEndReport:
        started = trio.current_time()
        polite_attempted, polite_error = await self._polite_step(polite, polite_timeout_ms)
        terminated: list[int] = []
        killed: list[int] = []
        swept: set[int] = set()
        # Every live member found gets a pidfd in ``watch``: the waits below wake up on the
        # last exit, and the SIGKILL at the end of the grace is on time (see ExitWatch).
        watch = ExitWatch(epoll=pooled_epoll)
        try:
            first_live, self._first_live = self._first_live, None
            kill_sent = False
            if (
                first_live is None
                and term_grace_ms == 0
                and watch.available
                and not self._marker_scan_needed()
            ):
                # No grace: each member is killed as soon as its children are listed.
                live = self._kill_walk(watch, killed, swept)
                kill_sent = True
            else:
                live = first_live or self._first_scan()
            if live and term_grace_ms > 0:
                live, terminated, kill_sent = await self._term_step(
                    live, watch, term_grace_ms, swept
                )
            # (With no grace SIGTERM would only delay SIGKILL: ``aclose(term_grace_ms=0)``.)
            if live:
                live = await self._kill_step(live, watch, kill_wait_ms, kill_sent, killed, swept)
        finally:
            self._end_yielded = watch.yielded
            watch.close(pool=pool_epoll)
        if self.returncode is None and not live:
            # Dead but not yet reaped by Trio: the pidfd wait returns at once.
            with trio.move_on_after(max(kill_wait_ms / 1000, 0.1)):
                await self.wait()
        return TreeEndReport(
            returncode=self.returncode,
            polite_attempted=polite_attempted,
            terminated=tuple(terminated),
            killed=tuple(sorted(killed)),
            swept=tuple(sorted(swept)),
            unkillable=tuple(sorted(live)),
            polite_error=polite_error,
            duration_ms=math.ceil((trio.current_time() - started) * 1000),
        )

    async def _polite_step(
        self, polite: PoliteStep | None, polite_timeout_ms: int
    ) -> tuple[bool, str | None]:
        """Ask a running tree to exit and wait for its main process, both within the bound.

        Returns ``(attempted, error)``: whether ``polite`` ran, and the ``repr`` of what it
        raised (None when it raised nothing).
        """
        if polite is None or self.returncode is not None:
            return False, None
        polite_error: str | None = None
        with trio.move_on_after(polite_timeout_ms / 1000):
            try:
                await polite()
            except Exception as exc:
                polite_error = repr(exc)
            await self.wait()
        return True, polite_error

    def _first_scan(self) -> dict[int, ProcStat]:
        """Find the tree's live members before any signal is sent: pid -> stat."""
        # The first scan runs before any signal: it walks the tree while every member
        # is still attached to its parent, which is the only way to find a member that
        # left the session and dropped the marker (ancestry); signalling first would
        # orphan it. Members seen are remembered (``_seen``), so later scans find them.
        # With the subreaper active, ancestry alone finds every live descendant (an
        # orphan is reparented to us, never to init), so a tree whose members all stay
        # in its group skips the full marker scan, which reads the environment of every
        # process on the machine (milliseconds). Once a member left the group or
        # session, or without a subreaper, the scan runs as well, so escapees whose
        # ancestry was lost get SIGTERM too.
        # The pidfds are opened after the first signal, not during this walk: the
        # signal goes out sooner, and a member that dies meanwhile is still a zombie
        # (or gone: ``ExitWatch.add`` skips it).
        live = self._collect(full_scan=self._marker_scan_needed())
        if live and not self._marker_scan_needed() and self._escaped(live):
            live = self._collect(full_scan=True)
        return live

    def _kill_walk(
        self, watch: ExitWatch, killed: list[int], swept: set[int]
    ) -> dict[int, ProcStat]:
        """SIGKILL every member, each as soon as its children are listed, then the group;
        return the members found alive afterwards (each watched in ``watch``).

        The first scan's proof without its wait: a member is signalled only once its
        children (on every thread) are listed, so a child that left the group and the
        session and dropped the marker is still tied to the tree by its parent when the
        parent dies (it is then reparented to us, the subreaper, and found again as ours).
        The kernel kills the members met first while the walk reads the others. Before
        the kill a member costs a ``stat`` of its ``task`` directory (its thread count: the
        directory's link count is 2 plus the threads), its children's list and the signal;
        after the group's SIGKILL, while they die, a pidfd and ``getpgid`` each. Their
        ``/proc/<pid>/stat`` (10 us each) is read only when a wait ends with one alive
        (:meth:`_identify`): the common end reaps them all through their pidfds. A member
        the walk reached by ancestry needs no identity check before its signal (it is the
        listed child of a member); one remembered from an earlier scan does.

        Appends every pid signalled to ``killed`` (a member that had already exited
        unreaped, a zombie, too: it was signalled) and those outside the group to ``swept``.
        Only with pidfds, the subreaper active (orphans come to us) and no escapee seen
        before (``_marker_scan_needed``): the marker scan then runs after the kill
        (``_kill_step``).
        """
        me = own_pid()
        roots: list[int] = [self.pid] if self.returncode is None else []
        adopted = _reaper.adopted_stats()
        if adopted:
            self._adopted_seen = True
            _reaper.reap_zombies(adopted)
            roots.extend(st.pid for st in adopted if not st.dead and self._belongs(st))
        # Whose identity is known without a stat read: the main process (our child, not
        # reaped: its pid can not be reused), our adopted children just read, and below
        # the children listed from a member.
        known = set(roots)
        roots.extend(self._seen)
        signalled: list[int] = []
        visited: set[int] = set()
        stack = roots
        while stack:
            pid = stack.pop()
            if pid in visited or pid == me:
                continue
            visited.add(pid)
            if pid not in known:
                st = read_stat(pid)
                if st is None or st.starttime != self._seen.get(pid):
                    self._seen.pop(pid, None)
                    _reaper.forget_ours((pid,))
                    continue
            try:
                threads = os.stat(f"/proc/{pid}/task").st_nlink - 2
            except OSError:
                continue  # gone (and reaped)
            children = children_of(pid, threads)
            self._signal(pid, signal.SIGKILL)
            signalled.append(pid)
            known.update(children)
            stack.extend(children)
        self._signal_group(signal.SIGKILL)
        live: dict[int, ProcStat] = {}
        for pid in signalled:
            # The pidfd pins the process (the waits and the reaping go through it) and its
            # group is one system call; its stat read (the start time, for the records that
            # prove its zombie ours) waits until a wait ends with it alive (_identify).
            if not watch.add(pid, _START_UNREAD):
                continue  # gone: reaped by its parent before the signal
            try:
                pgid = os.getpgid(pid)
            except OSError:
                continue
            killed.append(pid)
            if pgid != self.pgid:
                swept.add(pid)
                self._escapees_seen = True
            # Only its group is read from this stand-in (``_kill_step``, until its first
            # scan replaces it).
            live[pid] = ProcStat(pid, "R", 0, pgid, 0, _START_UNREAD)
        self._unidentified = signalled
        return live

    def _identify(self) -> None:
        """Record the members ``_kill_walk`` signalled unread (``_seen``, ``note_ours``):
        a scan that is not ``members_gone``'s walks them, and their zombies must be provably
        ours to be reaped."""
        pids, self._unidentified = self._unidentified, []
        for pid in pids:
            st = read_stat(pid)
            if st is None:
                if self._seen.pop(pid, None) is not None:
                    _reaper.forget_ours((pid,))
            elif self._seen.get(pid) != st.starttime:
                self._seen[pid] = st.starttime
                _reaper.note_ours(pid, st.starttime)

    async def _term_step(
        self,
        live: dict[int, ProcStat],
        watch: ExitWatch,
        term_grace_ms: int,
        swept: set[int],
    ) -> tuple[dict[int, ProcStat], list[int], bool]:
        """SIGTERM+SIGCONT the members and wait up to the grace for them to exit.

        Adds the members outside the group to ``swept``. Returns ``(live, terminated,
        kill_sent)``: those still alive, every pid signalled (sorted), and whether the wait
        already sent SIGKILL to the survivors at the end of the grace.
        """
        swept.update(pid for pid, st in live.items() if st.pgid != self.pgid)
        self._signal_members(live, signal.SIGTERM)
        self._signal_members(live, signal.SIGCONT)
        self._watch_all(watch, live)
        terminated = sorted(live)
        live = await self._wait_gone(
            live, watch, trio.current_time() + term_grace_ms / 1000, terminated
        )
        terminated.sort()
        return live, terminated, bool(live)  # SIGKILL sent by _wait_gone, at the deadline

    async def _kill_step(
        self,
        live: dict[int, ProcStat],
        watch: ExitWatch,
        kill_wait_ms: int,
        kill_sent: bool,
        killed: list[int],
        swept: set[int],
    ) -> dict[int, ProcStat]:
        """SIGKILL the survivors and rescan until none is found or ``kill_wait_ms`` passed.

        Appends every pid killed to ``killed`` and those outside the group to ``swept``;
        returns the members still alive at the end (the unkillable ones).
        """
        killed.extend(pid for pid in live if pid not in killed)
        swept.update(pid for pid, st in live.items() if st.pgid != self.pgid)
        if not kill_sent:
            self._signal_members(live, signal.SIGKILL)
            self._watch_all(watch, live)
        # The waits below run in real time under any clock (see _wait_exits), so
        # the bound is kept in real time too.
        real_deadline = time.perf_counter() + kill_wait_ms / 1000
        first = True
        while True:
            # The members just killed die first; a scan while they die finds nothing
            # new (without the subreaper, the marker scan below runs at once).
            all_gone = False
            if not (first and self._marker_scan_needed()):
                left_s = max(0.0, real_deadline - time.perf_counter())
                all_gone = await self._wait_exits(
                    watch, trio.current_time() + left_s, _POLL_FIRST_S, real_time=True
                )
            if not all_gone and self._unidentified:
                self._identify()
            live = self._collect(
                full_scan=first and self._marker_scan_needed(),
                watch=watch,
                members_gone=all_gone,
            )
            first = False
            for pid, st in live.items():
                if st.pgid != self.pgid:
                    swept.add(pid)
                if pid not in killed:
                    killed.append(pid)
                self._signal(pid, signal.SIGKILL)
            if not live or time.perf_counter() >= real_deadline:
                return live

    async def _wait_gone(
        self,
        live: dict[int, ProcStat],
        watch: ExitWatch,
        deadline: float,
        terminated: list[int],
    ) -> dict[int, ProcStat]:
        """Wait until ``deadline`` (a Trio time) for the ``live`` members (and what they
        fork) to exit; return those still alive then, already sent SIGKILL.

        Members that appear meanwhile get SIGTERM and SIGCONT of their own when a scan
        finds them (they are appended to ``terminated``).

        Scans run while waiting, the last one :data:`_LAST_SCAN_S` before the deadline, so
        that nothing stands between the deadline and the SIGKILL (to the group and to
        every member known to have left it): a scan costs a fraction of a millisecond, and
        longer while the killed members compete for the CPU. Members
        forked after that last scan are found after the kill, as orphans reparented to us.
        """
        delay = _POLL_FIRST_S
        while True:
            scan_at = deadline - _LAST_SCAN_S
            if trio.current_time() < scan_at:
                all_gone = await self._wait_exits(watch, scan_at, delay)
                delay = min(delay * 2, _POLL_MAX_S)
            else:
                all_gone = await self._wait_exits(watch, deadline, delay)
                if not all_gone and trio.current_time() >= deadline - _DEADLINE_EPSILON_S:
                    self._signal_members(live, signal.SIGKILL)
                    return live
            live = self._collect(full_scan=False, watch=watch, members_gone=all_gone)
            if not live:
                return live
            for pid in live.keys() - set(terminated):
                self._signal(pid, signal.SIGTERM)
                self._signal(pid, signal.SIGCONT)
                terminated.append(pid)

    async def _wait_exits(
        self, watch: ExitWatch, deadline: float, poll_delay_s: float, *, real_time: bool = False
    ) -> bool:
        """Wait for the watched processes to exit, at most until ``deadline`` and at most
        :data:`_POLL_MAX_S` at a time (the caller's next scan finds what they forked).

        With pidfds this returns as soon as the last of them exits; without, it sleeps
        ``poll_delay_s`` (polling). The slice bound also keeps Trio's ``autojump_clock``
        honest: with one long wait on a descriptor, it would jump straight to the deadline
        while the real processes had no real time to die.

        ``real_time`` is for the wait after SIGKILL: under a clock other than Trio's
        system clock (``MockClock``) it lasts as long in real time (see ``ExitWatch``).

        Returns:
            True when every watched process is known to have exited (pidfds only).
        """
        now = trio.current_time()
        until = min(deadline, now + _POLL_MAX_S)
        if watch.available:
            return await watch.wait(until, real_time=real_time)
        await trio.sleep(max(0.0, min(poll_delay_s, until - now)))
        return False

    def _marker_scan_needed(self) -> bool:
        """Whether ancestry may miss members (see :meth:`_end_steps`)."""
        return self._escapees_seen or not _reaper.subreaper_active()

    def _escaped(self, live: Mapping[int, ProcStat]) -> bool:
        if any(st.pgid != self.pgid for st in live.values()):
            self._escapees_seen = True
        return self._escapees_seen

    @staticmethod
    def _watch_all(watch: ExitWatch, live: Mapping[int, ProcStat]) -> None:
        for pid, st in live.items():
            watch.add(pid, st.starttime)

    def _signal_members(self, live: Mapping[int, ProcStat], sig: int) -> None:
        """``sig`` to the group, and to each member of ``live`` that left it."""
        self._signal_group(sig)
        for pid, st in live.items():
            if st.pgid != self.pgid:
                self._signal(pid, sig)

    def _signal_group(self, sig: int) -> None:
        # Invariant 11: never our own group; the group id is the one recorded at spawn.
        if self.pgid <= 1 or self.pgid == os.getpgrp():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def _signal(self, pid: int, sig: int) -> None:
        if pid == own_pid():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)

    def _collect(
        self, *, full_scan: bool, watch: ExitWatch | None = None, members_gone: bool = False
    ) -> dict[int, ProcStat]:
        """The tree's live (non-zombie) processes; reaps our zombies on the way.

        Args:
            full_scan: Also read every process's environment for the marker.
            watch: Where to add every live member found (a pidfd each).
            members_gone: Every member a scan found alive has since exited (its pidfd
                said so) and the subreaper is active: then a live descendant can only be
                one forked since that scan, and its oldest ancestor among them has been
                reparented to us, so the walk starts from our adopted children alone
                (no re-reading of the dead members).
        """
        rc = self.returncode  # reaps the main process once it has exited
        if not HAVE_PROCFS:
            _reaper.reap_adopted_children()
            return self._collect_without_procfs(main_alive=rc is None)
        me = own_pid()
        ancestry_only = members_gone and not full_scan and _reaper.subreaper_active()
        roots: list[int] = [self.pid] if rc is None and not ancestry_only else []
        if ancestry_only and watch is not None:
            # Members seen exiting that the subreaper adopted are reaped through their
            # pidfds (no stat read, no reused pid): the listing below then finds only what
            # they forked since the last scan, and on the common end nothing at all.
            reaped = watch.reap_exited(_reaper.managed_pids())
            for pid in reaped:
                self._seen.pop(pid, None)
            _reaper.forget_ours(reaped)
        # Listing our children costs a few microseconds; reading and reaping them happens
        # only when there are any (the common end, no orphans at all, pays for the list).
        adopted = _reaper.adopted_stats(reap_exited=self._seen if ancestry_only else None)
        if adopted:
            self._adopted_seen = True
            _reaper.reap_zombies(adopted)
            roots.extend(st.pid for st in adopted if not st.dead and self._belongs(st))
        if not ancestry_only:
            roots.extend(self._seen)
        if full_scan:
            roots.extend(
                pid
                for pid in all_pids()
                if pid != me and read_env_var(pid, SCOPE_ENV) == self.marker
            )
        live: dict[int, ProcStat] = {}
        visited: set[int] = set()
        zombies = False  # dead members the reaping above did not see dead yet
        stack = roots
        while stack:
            pid = stack.pop()
            if pid in visited or pid == me:
                continue
            visited.add(pid)
            st = read_stat(pid)
            if st is None:
                if self._seen.pop(pid, None) is not None:
                    _reaper.forget_ours((pid,))
                continue
            known_start = self._seen.get(pid)
            if known_start is not None and known_start != st.starttime:
                # The pid was reused by an unrelated process.
                self._seen.pop(pid, None)
                _reaper.forget_ours((pid,))
                continue
            if known_start is None:
                self._seen[pid] = st.starttime
                _reaper.note_ours(pid, st.starttime)
            if st.dead:
                zombies = True
            else:
                live[pid] = st
                if watch is not None:
                    watch.add(pid, st.starttime)
            stack.extend(children_of(pid, st.threads))
        self._scan_clean = not live and not zombies
        return live

    def note_members(self, members: Mapping[int, int]) -> None:
        """Record processes the caller saw this tree start, ``{pid: start time}`` (clock ticks
        since boot, ``/proc/<pid>/stat`` field 22), so that ending the tree ends them too.

        Once a member's parent has exited, its ancestry is gone (it was re-parented to the
        subreaper), and its scope marker may be unreadable (an environment scrubbed on exec),
        while it left the tree's session and group: nothing found at the end ties it to this
        tree. A caller that watched the tree while it ran (the conformance checker samples its
        ancestry every 20 ms) hands over what it recorded, and the end treats those processes
        as members it had seen itself. A pid whose start time differs by then was reused by an
        unrelated process and is left alone.
        """
        me = os.getpid()
        for pid, start in members.items():
            if pid not in (me, self.pid) and pid not in self._seen:
                self._seen[pid] = start
                _reaper.note_ours(pid, start)

    def _belongs(self, st: ProcStat) -> bool:
        """Whether our adopted child ``st`` is of this tree: recorded by ancestry (with its
        start time), carrying the marker (read through a live thread when the main thread has
        exited), or, with its marker gone, in the tree's session or group."""
        if st.pid in self._seen:
            return self._seen[st.pid] == st.starttime
        value = read_env_var(st.pid, SCOPE_ENV)
        if value is not None:
            return value == self.marker
        if st.pid == self.pid:
            return False  # the main process's pid, reused: its start time differed above
        return st.sid == self.pid or st.pgid == self.pgid

    def _collect_without_procfs(self, *, main_alive: bool) -> dict[int, ProcStat]:
        # No procfs, no ancestry: the main process and its group are all we know.
        live: dict[int, ProcStat] = {}
        if main_alive:
            live[self.pid] = ProcStat(self.pid, "S", os.getpid(), self.pgid, self.pid, 0)
        elif self.pgid > 1 and self.pgid != os.getpgrp():
            try:
                os.killpg(self.pgid, 0)
            except (ProcessLookupError, PermissionError):
                pass
            else:
                live[-self.pgid] = ProcStat(-self.pgid, "S", 0, self.pgid, self.pid, 0)
        return live


def _spawn_registered(spawn_call: Callable[[], SpawnedProcess]) -> SpawnedProcess:
    """Spawn in a worker thread and register the pid there, before the thread hands it
    back: until then the reaper's scans would take the new child for an orphan."""
    process = spawn_call()
    _reaper.register_managed(process.pid)
    return process


async def open_process_tree(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str | None] | None = None,
    stdin: int = PIPE,
    stdout: int = PIPE,
    stderr: int = PIPE,
    pty_slave_fd: int | None = None,
) -> ProcessTree:
    """Start ``argv`` as the root of a new supervised process tree.

    The child runs in its own session and process group (``pgid == pid``), with
    the environment ``os.environ`` updated by ``env`` (a None value removes the
    variable) and then ``SUPERVISOR_SCOPE`` set to a fresh marker that neither can
    override or remove, so a sweep can always find it. It starts clean whatever we were started
    with: every signal at its default, an empty signal mask, only fds 0-2 (``_spawn``). On
    Linux the supervisor is a child subreaper while a tree is open. Nothing is started when
    validation fails.

    Args:
        argv: Program and arguments; no shell. ``argv[0]`` without a slash is
            looked up on the child's ``PATH``.
        cwd: Working directory of the child; default: ours.
        env: Changes to our environment for the child.
        stdin: ``PIPE``, ``DEVNULL``, or a descriptor of ours (>= 0: the child gets a copy;
            we keep ours).
        stdout: ``PIPE``, ``DEVNULL`` or a descriptor.
        stderr: ``PIPE``, ``DEVNULL``, ``STDOUT`` or a descriptor.
        pty_slave_fd: The slave side of a pseudo-terminal (for terminals). When
            given, ``stdin``/``stdout``/``stderr`` are ignored: the child gets this
            terminal as fds 0, 1 and 2, and as the controlling terminal of its new
            session, so job control, SIGWINCH and hang-up work as in a real terminal.
            On Linux the child opens the slave by its path after ``setsid`` (a
            ``posix_spawn`` file action, no worker thread); elsewhere it is forked in
            a worker thread and runs ``TIOCSCTTY`` (see ``_spawn.spawn_forks``).
            The tree's streams are then None; the caller keeps the master side and
            closes its copy of the slave after spawn.

    Returns:
        The running :class:`ProcessTree`. The caller must end it with
        :meth:`ProcessTree.aclose` (or ``async with``).

    Raises:
        CoreError: ``invalid_request`` for an empty argv, a non-string or
            NUL-containing argument, or a malformed env or cwd value;
            ``launch_failed`` when the executable or the cwd is missing or unusable.

    **Cancellation:** not cancellable once the spawn has begun (a child is never
    started behind the caller's back).
    """
    return await _open_tree(
        argv,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        pty_slave_fd=pty_slave_fd,
        yield_after_spawn=True,
    )


async def _open_tree(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str | None] | None = None,
    stdin: int = PIPE,
    stdout: int = PIPE,
    stderr: int = PIPE,
    pty_slave_fd: int | None = None,
    pass_fd: tuple[int, str] | None = None,
    yield_after_spawn: bool,
) -> ProcessTree:
    """:func:`open_process_tree`; ``yield_after_spawn=False`` skips the scheduler pass
    after an in-thread spawn, for a caller that waits on the tree right away (one pass
    less per ``process.run``). It is still a cancel point. ``pass_fd`` is ``spawn``'s (a
    job's report pipe)."""
    args = check_argv(argv)
    child_env = check_env(env)
    workdir = check_cwd(cwd)
    for name, value, allowed in (
        ("stdin", stdin, (PIPE, DEVNULL)),
        ("stdout", stdout, (PIPE, DEVNULL)),
        ("stderr", stderr, (PIPE, DEVNULL, STDOUT)),
    ):
        # A descriptor of ours (>= 0) is passed as it is (``exec --stream``: our stdio).
        if value not in allowed and value < 0:
            raise ValueError(f"{name} must be one of {allowed} or a descriptor, got {value!r}")
    executable = resolve_executable(args[0], workdir, child_env)
    marker = new_scope_marker()
    child_env[SCOPE_ENV] = marker
    # -- PTY option: the slave becomes fds 0-2 and the controlling terminal.
    if pty_slave_fd is not None and not os.isatty(pty_slave_fd):
        raise ValueError("pty_slave_fd must be an open terminal file descriptor")
    _watchdog.ensure_watchdog()  # sweeps our trees if we die, even by SIGKILL
    # The process is a child subreaper while a tree is open (released at the last tree end).
    _reaper.tree_opening()
    try:
        # A cancelled caller starts nothing; once the spawn has begun nothing cancels it.
        await trio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        _reaper.tree_ended()
        raise
    # posix_spawn in this thread, no worker-thread round trip (_spawn). The spawn
    # blocks its thread until the child has exec'd; when many trees start at once on a busy
    # machine that wait grows (the child queues for a CPU) and would stall every other task,
    # so a burst goes to worker threads, as does the fork fallback (see spawn_forks).
    spawn_call = functools.partial(
        spawn,
        executable,
        args,
        child_env,
        cwd=workdir,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        tty=pty_slave_fd,
        pass_fd=pass_fd,
    )
    threaded = _running_mains[0] >= _THREADED_SPAWN_AT or spawn_forks(workdir, pty_slave_fd)
    process: SpawnedProcess
    with _reaper.spawning():
        try:
            if threaded:
                process = await trio.to_thread.run_sync(_spawn_registered, spawn_call)
            else:
                process = spawn_call()
        except OSError as exc:
            _reaper.tree_ended()
            raise spawn_failed(exc, args[0]) from exc
        spawned(process.pid)
        _running_mains[0] += 1
    if not threaded and yield_after_spawn:
        # The spawn blocked without yielding: give other tasks their turn (never raises).
        await trio.lowlevel.cancel_shielded_checkpoint()
    return ProcessTree._create(process, args, marker)
