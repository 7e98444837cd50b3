"""The scope marker every supervised child carries, so a sweep finds it wherever it went.

A child's environment holds ``SUPERVISOR_SCOPE=<instance>/<scope>``:

- ``<instance>`` is ``<pid>.<starttime>`` of the supervisor process, where
  ``starttime`` is field 22 of ``/proc/<pid>/stat`` (clock ticks since boot). A pid
  alone can be reused after the supervisor dies; the pair cannot, so a later
  ``supervisor reap`` can tell a live owner from a dead one.
- ``<scope>`` is unique per process tree within the instance, so a tree's sweep
  finds exactly its own descendants by marker even when they left its process
  group and session.

The marker is applied last when building a child's environment, so a caller can
neither override nor remove it.
"""

from __future__ import annotations

import itertools
import os
import secrets

from ._procfs import HAVE_PROCFS, read_stat

__all__ = (
    "SCOPE_ENV",
    "instance_alive",
    "instance_id",
    "new_scope_marker",
    "scopes_issued",
    "split_marker",
)


#: Name of the environment variable that carries the scope marker.
SCOPE_ENV = "SUPERVISOR_SCOPE"

_cached_instance: tuple[int, str] | None = None
_scope_counter = itertools.count(1)
#: The last number ``_scope_counter`` gave (one cell, mutated in place).
_issued = [0]


def instance_id() -> str:
    """The identity of this supervisor process: ``"<pid>.<starttime>"``.

    Recomputed after a fork (the pid changes). Without procfs the start time is
    ``0`` and only the pid identifies the instance.
    """
    global _cached_instance
    pid = os.getpid()
    if _cached_instance is not None and _cached_instance[0] == pid:
        return _cached_instance[1]
    stat = read_stat(pid) if HAVE_PROCFS else None
    value = f"{pid}.{stat.starttime if stat is not None else 0}"
    _cached_instance = (pid, value)
    return value


def new_scope_marker() -> str:
    """A fresh marker value ``"<instance>/<scope>"`` for one process tree."""
    # The random suffix keeps scopes distinct across a fork of the supervisor,
    # whose counter would otherwise continue from the same value in both copies.
    number = next(_scope_counter)
    _issued[0] = number
    return f"{instance_id()}/t{number}-{secrets.token_hex(4)}"


def scopes_issued() -> int:
    """How many markers this process has issued: one per process tree it started.

    The chaos runner's count of trees started; a difference of two readings counts the
    trees started in between (each gets its marker just before its spawn).
    """
    return _issued[0]


def split_marker(value: str) -> tuple[int, int, str] | None:
    """Parse a marker into ``(pid, starttime, scope)``; None if malformed."""
    instance, sep, scope = value.partition("/")
    if not sep:
        return None
    pid_text, dot, start_text = instance.partition(".")
    if not dot or not pid_text.isdigit() or not start_text.isdigit():
        return None
    return int(pid_text), int(start_text), scope


def instance_alive(pid: int, starttime: int) -> bool:
    """Whether the supervisor instance ``(pid, starttime)`` still runs.

    An instance is dead when its pid is gone, is a zombie, or now belongs to a
    process that started at another time (pid reuse).
    """
    stat = read_stat(pid)
    if stat is None or stat.dead:
        return False
    # A start time of 0 means the marker was written without procfs: trust the pid.
    return starttime == 0 or stat.starttime == starttime
