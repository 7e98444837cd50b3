"""Every descendant of a program under check, marked or not, and the zombies it leaves.

A program's descendants are found three ways, because each alone misses some: by ancestry
(``/proc/<pid>/task/*/children`` from the program down, sampled while it runs, each process
remembered with its start time so a reused pid never counts), by the scope marker its
environment inherited (a process that double-forked away between two samples still carries
it, unless it scrubbed its environment), and by the child subreaper: the checker is one, so
an orphan re-parents to us instead of init and a sample sees it as our child. What ancestry
recorded is handed to the tree's end (``ProcessTree.note_members``), so the checker ends
every process it saw, whether its marker can be read then or not.

Each sample also notes the zombie children of the program and of its descendants (exited,
not yet collected by their parent), with when each was first seen: ``reaps-children``.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Final

from .._process._marker import SCOPE_ENV
from .._process._procfs import HAVE_PROCFS, all_pids, children_of, read_env_var, read_stat
from .._process._reaper import is_managed

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ("Descendants", "cmdline_of", "describe_running", "shorten_command")

#: What :func:`cmdline_of` adds to a process whose main thread exited while others run.
MAIN_THREAD_EXITED: Final = " (its main thread exited; it runs on in another)"
#: Characters of a command line kept in a finding (cut at a word boundary, then ``...``).
_COMMAND_CHARS: Final = 100
# A path longer than this is shown by its last part when a command line is too long.
_PATH_CHARS: Final = 24

#: Most processes remembered per program (a fork bomb must not grow our memory).
_MAX_SEEN: Final = 4096


def _read_cmdline(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4096)
    except OSError:
        return b""


def cmdline_of(pid: int) -> str:
    """``pid``'s command line (cut to 200 characters), or ``?``.

    A process whose main thread exited while others run reads an empty ``cmdline`` (as its
    ``environ``): it is read through another thread and said so.
    """
    raw = _read_cmdline(f"/proc/{pid}/cmdline")
    note = ""
    if not raw:
        st = read_stat(pid)
        if st is not None and st.state in ("Z", "X") and st.threads > 1:
            note = MAIN_THREAD_EXITED
            with contextlib.suppress(OSError):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    if tid != str(pid) and (
                        raw := _read_cmdline(f"/proc/{pid}/task/{tid}/cmdline")
                    ):
                        break
        elif st is not None and st.dead:
            # A zombie keeps no command line, only its name (as ps shows it).
            comm = _read_cmdline(f"/proc/{pid}/comm").strip()
            return f"[{comm.decode(errors='replace')}]" if comm else "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return shorten_command(text or "?", 200) + note


def shorten_command(command: str, limit: int = _COMMAND_CHARS) -> str:
    """``command`` cut to at most ``limit`` characters: long paths first shown by their last
    part (``.../_programs.py``), then cut at a word boundary and ``...`` added; the
    note :func:`cmdline_of` adds (``MAIN_THREAD_EXITED``) is kept whole, never cut."""
    note = ""
    if command.endswith(MAIN_THREAD_EXITED):
        command, note = command[: -len(MAIN_THREAD_EXITED)], MAIN_THREAD_EXITED
    if len(command) > limit:
        # Long paths first: what a reader needs is the program and its arguments, and where
        # a checkout or a venv lives would otherwise push them past the cut.
        command = " ".join(_shorten_path(word) for word in command.split(" "))
    if len(command) > limit:
        cut = command[:limit]
        space = cut.rfind(" ")
        # One long word (a path): cut inside it rather than keep nothing of it.
        command = (cut[:space] if space > limit // 2 else cut).rstrip() + " ..."
    return command + note


def _shorten_path(word: str) -> str:
    head, _, name = word.rpartition("/")
    return f".../{name}" if head and name and len(word) > _PATH_CHARS else word


def describe_running(live: Mapping[int, str]) -> str:
    """``3 left: pid 11, 12, 13 (CMD)``: the count first, then the pids of each command line
    (shortened once for all of them, by :func:`shorten_command`)."""
    by_command: dict[str, list[int]] = {}
    for pid, command in sorted(live.items()):
        by_command.setdefault(shorten_command(command), []).append(pid)
    groups = "; ".join(
        f"pid {', '.join(map(str, pids))} ({command})" for command, pids in by_command.items()
    )
    return f"{len(live)} left: {groups}"


class Descendants:
    """The processes one program started, found by ancestry, marker and adoption.

    Args:
        root: The program's pid.
        marker: The ``SUPERVISOR_SCOPE`` value it was started with (None: no marker scan).
        exclude: Pids that never count (the program itself is always excluded).
    """

    def __init__(self, root: int, marker: str | None, exclude: Iterable[int] = ()) -> None:
        self.root = root
        self.marker = marker
        self._exclude = {root, os.getpid(), *exclude}
        root_stat = read_stat(root)
        self._root_start = root_stat.starttime if root_stat else None
        #: ``{(pid, starttime): command line}`` of every descendant ever seen.
        self.seen: dict[tuple[int, int], str] = {}
        self._ours_before = set(self._our_children())
        #: ``{(pid, starttime): (parent pid, first seen, last seen)}``: zombie children of
        #: the program or its descendants (``time.monotonic()`` seconds).
        self.zombies: dict[tuple[int, int], tuple[int, float, float]] = {}
        self._zombies_now: set[tuple[int, int]] = set()

    @staticmethod
    def _our_children() -> list[int]:
        return children_of(os.getpid()) if HAVE_PROCFS else []

    def _remember(self, pid: int, parent: int | None = None) -> None:
        """Record ``pid``; a zombie whose parent is ``parent`` (a process of the program, not
        us) is noted as left unreaped."""
        if pid in self._exclude:
            return
        st = read_stat(pid)
        if st is None:
            return
        key = (pid, st.starttime)
        if parent is not None and st.dead and st.ppid == parent:
            now = time.monotonic()
            if key in self.zombies or len(self.zombies) < _MAX_SEEN:
                self.zombies[key] = (parent, self.zombies.get(key, (parent, now))[1], now)
                self._zombies_now.add(key)
        if key in self.seen:
            if not st.dead:
                # Read again while it lives: a child first seen between its fork and its exec
                # showed its parent's command line (a launcher named as the adapter).
                self.seen[key] = cmdline_of(pid)
        elif len(self.seen) < _MAX_SEEN:
            self.seen[key] = cmdline_of(pid)

    def sample(self) -> None:
        """Walk the program's process tree and our adopted children once."""
        if not HAVE_PROCFS:
            return
        self._zombies_now = set()
        stack: list[tuple[int, int | None]] = [(self.root, None)]
        visited: set[int] = set()
        while stack:
            pid, parent = stack.pop()
            if pid in visited:
                continue
            visited.add(pid)
            if pid != self.root:
                self._remember(pid, parent)
            stack.extend((child, pid) for child in children_of(pid))
        # Orphans re-parented to us (the child subreaper) that were not our children before
        # the program started: the program's, since the checker starts nothing else meanwhile.
        # Programs the checker itself started later (the next instance) are main processes
        # of their own trees, not adoptees.
        for pid in self._our_children():
            if pid not in self._ours_before and not is_managed(pid):
                self._remember(pid)

    def alive(self) -> dict[int, str]:
        """Descendants still running (zombies do not count): ``{pid: command line}``.

        Takes a last sample first, and scans every process for the marker.
        """
        self.sample()
        live: dict[int, str] = {}
        for (pid, start), cmd in self.seen.items():
            st = read_stat(pid)
            if st is not None and st.starttime == start and not st.dead:
                live[pid] = cmd
        if self.marker is not None and HAVE_PROCFS:
            for pid in all_pids():
                if pid in self._exclude or pid in live:
                    continue
                if read_env_var(pid, SCOPE_ENV) == self.marker:
                    st = read_stat(pid)
                    if st is not None and not st.dead:
                        live[pid] = cmdline_of(pid)
        return live

    def members(self) -> dict[int, int]:
        """Every process seen, the program itself included: ``{pid: start time}`` (for
        ``ProcessTree.note_members``)."""
        found = dict(self.seen.keys())
        if self._root_start is not None:
            found[self.root] = self._root_start
        return found

    def zombies_now(self) -> dict[tuple[int, int], float]:
        """The zombies of the last sample: ``{(pid, start): seconds seen a zombie so far}``."""
        return {key: self.zombies[key][2] - self.zombies[key][1] for key in self._zombies_now}

    def longest_zombie(self) -> tuple[int, int, float] | None:
        """``(pid, parent, seconds)`` of the zombie seen longest, or None when none was seen."""
        if not self.zombies:
            return None
        (pid, _start), (parent, first, last) = max(
            self.zombies.items(), key=lambda item: item[1][2] - item[1][1]
        )
        return pid, parent, last - first

    def root_alive(self) -> bool:
        """The program itself still runs (not a zombie, and not a reused pid)."""
        st = read_stat(self.root)
        return st is not None and not st.dead and st.starttime == self._root_start
