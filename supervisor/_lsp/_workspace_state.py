"""Per-workspace state directories of a language server (the plugin contract "Plugin-owned
sessions", "State and retention").

The host keeps one state directory per workspace for each server, under the plugin's storage;
a start refreshes its own directory's modification time, and a sweep after the start deletes
what the server's ``state.retention`` lets go. :func:`expired_names` is that rule as pure code
(the reference's ``plugins.languageServers.stateRetention``); :func:`prepare` and :func:`sweep`
do the file work, touching only names they listed themselves.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("Retention", "WorkspaceState", "expired_names", "is_state_name", "prepare", "sweep")

_DAY_S: Final = 86_400


@dataclass(frozen=True)
class Retention:
    """``state.retention``: keep at most ``max_entries`` directories, none older than
    ``max_age_days``."""

    max_entries: int
    max_age_days: int


@dataclass(frozen=True)
class WorkspaceState:
    """Where one start's state lives: ``root/name``; ``active_names`` are the open
    workspaces' directories (never pruned); ``retention`` None keeps everything."""

    root: str
    name: str
    retention: Retention | None = None
    active_names: frozenset[str] = frozenset()

    @property
    def directory(self) -> str:
        """The server's ``workspaceStateDirectory`` for this start (absolute)."""
        return os.path.join(self.root, self.name)


def is_state_name(name: str) -> bool:
    """A single path component: not empty, no separator or NUL, not ``.`` or ``..``."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


def expired_names(
    retention: Retention,
    now_s: float,
    entries: Iterable[tuple[str, float]],
    active_names: Iterable[str],
) -> list[str]:
    """The directories a sweep deletes, sorted.

    A directory older than ``max_age_days`` goes; of the rest, all but the newest ones that
    fit in the ``max_entries`` the open workspaces leave free. An open workspace's directory
    is never pruned, and a name that is not a single path component is ignored.

    Args:
        retention: The server's ``state.retention``.
        now_s: The time of the sweep, Unix seconds.
        entries: ``(name, last modified, Unix seconds)`` of the directories found.
        active_names: The open workspaces' directory names.
    """
    active = set(active_names)
    found = [(name, mtime) for name, mtime in entries if is_state_name(name)]
    expired = {
        name
        for name, mtime in found
        if name not in active and now_s - mtime > retention.max_age_days * _DAY_S
    }
    rest = sorted(
        ((name, mtime) for name, mtime in found if name not in active and name not in expired),
        key=lambda entry: (-entry[1], entry[0]),
    )
    free = max(0, retention.max_entries - len({name for name, _ in found if name in active}))
    expired.update(name for name, _ in rest[free:])
    return sorted(expired)


def _prepare(state: WorkspaceState) -> None:
    os.makedirs(state.directory, mode=0o700, exist_ok=True)
    os.utime(state.directory)


async def prepare(state: WorkspaceState) -> None:
    """Create this start's directory (and the root) if needed and refresh its modification
    time. Raises OSError."""
    await trio.to_thread.run_sync(_prepare, state)


def _list(root: str) -> list[tuple[str, float]]:
    entries: list[tuple[str, float]] = []
    with os.scandir(root) as listing:
        for entry in listing:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            # Only real directories: a symlink or a file in the root is not ours to delete.
            if stat.S_ISDIR(info.st_mode) and is_state_name(entry.name):
                entries.append((entry.name, info.st_mtime))
    return entries


def _sweep(state: WorkspaceState, now_s: float) -> list[str]:
    assert state.retention is not None
    active = {*state.active_names, state.name}
    expired = expired_names(state.retention, now_s, _list(state.root), active)
    deleted: list[str] = []
    for name in expired:
        path = os.path.join(state.root, name)
        try:
            # rmtree never follows a symlink inside the tree; the entry itself was a real
            # directory when it was listed, and is checked again here.
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path)
                deleted.append(name)
        except OSError:
            continue
    return deleted


async def sweep(state: WorkspaceState, now_s: float) -> list[str]:
    """Delete the directories :func:`expired_names` lets go; the names deleted.

    This start's own directory and ``active_names`` are kept. Nothing is deleted without a
    retention. A directory that can not be deleted is skipped.
    """
    if state.retention is None:
        await trio.lowlevel.checkpoint()
        return []
    return await trio.to_thread.run_sync(_sweep, state, now_s)
