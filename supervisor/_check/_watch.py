"""Every descendant of a program under check, marked or not.

A program's descendants are found three ways, because each alone misses some: by ancestry
(``/proc/<pid>/task/*/children`` from the program down, sampled while it runs, each process
remembered with its start time so a reused pid never counts), by the scope marker its
environment inherited (a process that double-forked away between two samples still carries
it, unless it scrubbed its environment), and by the child subreaper: the checker is one, so
an orphan re-parents to us instead of init and a sample sees it as our child.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from .._process._marker import SCOPE_ENV
from .._process._procfs import HAVE_PROCFS, all_pids, children_of, read_env_var, read_stat
from .._process._reaper import is_managed

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("Descendants", "cmdline_of")

#: Most processes remembered per program (a fork bomb must not grow our memory).
_MAX_SEEN: Final = 4096


def cmdline_of(pid: int) -> str:
    """``pid``'s command line (cut to 200 characters), or ``?``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return text[:200] or "?"


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

    @staticmethod
    def _our_children() -> list[int]:
        return children_of(os.getpid()) if HAVE_PROCFS else []

    def _remember(self, pid: int) -> None:
        if pid in self._exclude or len(self.seen) >= _MAX_SEEN:
            return
        st = read_stat(pid)
        if st is None:
            return
        key = (pid, st.starttime)
        if key not in self.seen:
            self.seen[key] = cmdline_of(pid)

    def sample(self) -> None:
        """Walk the program's process tree and our adopted children once."""
        if not HAVE_PROCFS:
            return
        stack = [self.root]
        visited: set[int] = set()
        while stack:
            pid = stack.pop()
            if pid in visited:
                continue
            visited.add(pid)
            if pid != self.root:
                self._remember(pid)
            stack.extend(children_of(pid))
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

    def root_alive(self) -> bool:
        """The program itself still runs (not a zombie, and not a reused pid)."""
        st = read_stat(self.root)
        return st is not None and not st.dead and st.starttime == self._root_start
