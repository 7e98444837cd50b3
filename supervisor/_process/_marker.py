"""The scope marker every supervised child carries, so a sweep finds it wherever it went.

A child's environment holds ``SUPERVISOR_SCOPE=<instance>/<scope>``:

- ``<instance>`` is ``<pid>.<starttime>.<pidns>.<boot>``: the supervisor's pid, its start
  time (field 22 of ``/proc/<pid>/stat``, clock ticks since boot), the inode of its pid
  namespace (``/proc/self/ns/pid``) and the machine's boot id
  (``/proc/sys/kernel/random/boot_id``, without dashes). A pid alone is reused after the
  supervisor dies; a pid and a start time name one process of one namespace on one boot,
  and only the namespace and the boot say *which* namespace and boot: a pid read from
  inside a container means another process outside it. So a sweep can prove an instance
  dead only when the marker names the sweeper's own namespace and boot.
- ``<scope>`` is unique per process tree within the instance, so a tree's sweep
  finds exactly its own descendants by marker even when they left its process
  group and session.

Markers of the older form ``<pid>.<starttime>/<scope>`` (no namespace, no boot) still parse,
but no sweep can prove their instance dead: their processes are left alone and reported.

The marker is applied last when building a child's environment, so a caller can
neither override nor remove it.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Final, Literal

from ._procfs import HAVE_PROCFS, all_pids, own_pid, read_env_var, read_stat

__all__ = (
    "SCOPE_ENV",
    "Marker",
    "Verdict",
    "boot_id",
    "instance_id",
    "instance_verdict",
    "marked_processes",
    "new_scope_marker",
    "parse_marker",
    "pid_namespace",
    "scopes_issued",
    "split_marker",
)


#: Name of the environment variable that carries the scope marker.
SCOPE_ENV: Final = "SUPERVISOR_SCOPE"

#: What a sweep can say of a marker's instance: it runs, it provably ended, or it cannot
#: tell (another pid namespace or boot, the old marker form, a process it may not read).
Verdict = Literal["alive", "dead", "unprovable"]

_cached_instance: tuple[int, str] | None = None
_scope_counter = itertools.count(1)
#: The last number ``_scope_counter`` gave (one cell, mutated in place).
_issued = [0]


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def pid_namespace() -> int:
    """The inode of this process's pid namespace (``/proc/self/ns/pid``); 0 when unknown."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def boot_id() -> str:
    """This boot's id, 32 hex digits (``/proc/sys/kernel/random/boot_id``); ``"0"`` if unknown."""
    text = _read_text("/proc/sys/kernel/random/boot_id")
    value = text.replace("-", "") if text else ""
    return value if value.isalnum() else "0"


def instance_id() -> str:
    """The identity of this supervisor process: ``"<pid>.<starttime>.<pidns>.<boot>"``.

    Recomputed after a fork (the pid changes). Without procfs the start time, the namespace
    and the boot are ``0``: such an instance can never be proven dead by another one.
    """
    global _cached_instance
    pid = own_pid()
    if _cached_instance is not None and _cached_instance[0] == pid:
        return _cached_instance[1]
    stat = read_stat(pid) if HAVE_PROCFS else None
    start = stat.starttime if stat is not None else 0
    value = f"{pid}.{start}.{pid_namespace()}.{boot_id()}"
    _cached_instance = (pid, value)
    return value


def new_scope_marker() -> str:
    """A fresh marker value ``"<instance>/<scope>"`` for one process tree."""
    # The random suffix keeps scopes distinct across a fork of the supervisor,
    # whose counter would otherwise continue from the same value in both copies.
    number = next(_scope_counter)
    _issued[0] = number
    return f"{instance_id()}/t{number}-{os.urandom(4).hex()}"


def scopes_issued() -> int:
    """How many markers this process has issued: one per process tree it started.

    The chaos runner's count of trees started; a difference of two readings counts the
    trees started in between (each gets its marker just before its spawn).
    """
    return _issued[0]


@dataclass(frozen=True, slots=True)
class Marker:
    """A parsed ``SUPERVISOR_SCOPE`` value.

    Attributes:
        instance: The ``<instance>`` part as written.
        pid: The supervisor's pid, in the supervisor's own pid namespace.
        starttime: Its start time in clock ticks since boot (0: written without procfs).
        pidns: The inode of its pid namespace; None in the old marker form.
        boot: The boot id it ran on; None in the old marker form.
        scope: The tree's scope within the instance.
    """

    instance: str
    pid: int
    starttime: int
    pidns: int | None
    boot: str | None
    scope: str


def parse_marker(value: str) -> Marker | None:
    """Parse a marker, current or old form; None if malformed."""
    instance, sep, scope = value.partition("/")
    if not sep:
        return None
    parts = instance.split(".")
    if len(parts) not in (2, 4) or not all(part.isdigit() for part in parts[:3]):
        return None
    if len(parts) == 2:
        return Marker(instance, int(parts[0]), int(parts[1]), None, None, scope)
    if not parts[3].isalnum():
        return None
    return Marker(instance, int(parts[0]), int(parts[1]), int(parts[2]), parts[3], scope)


def split_marker(value: str) -> tuple[int, int, str] | None:
    """Parse a marker into ``(pid, starttime, scope)``; None if malformed."""
    marker = parse_marker(value)
    return None if marker is None else (marker.pid, marker.starttime, marker.scope)


def instance_verdict(marker: Marker) -> tuple[Verdict, str]:
    """Whether the supervisor instance named by ``marker`` runs, provably ended, or neither.

    Dead needs proof, in this process's own pid namespace and on this boot: the marker names
    both, its pid is gone (``kill(pid, 0)`` says no such process), or ``/proc/<pid>/stat``
    shows a zombie or a process that started at another time (pid reuse). Everything else is
    ``"unprovable"``: the old marker form, another namespace (its pid means another process
    here), another boot, a start time written without procfs, a pid that exists but whose stat
    this process may not read.

    Returns:
        ``(verdict, reason)``; the reason is a short phrase for ``reap --dry-run``.
    """
    if marker.pidns is None or marker.boot is None:
        return "unprovable", "old marker form (no pid namespace, no boot id)"
    if marker.starttime == 0 or marker.pidns == 0 or marker.boot == "0":
        return "unprovable", "written without procfs"
    if marker.boot != boot_id():
        return "unprovable", "another boot"
    if marker.pidns != pid_namespace():
        return "unprovable", "another pid namespace"
    try:
        os.kill(marker.pid, 0)
    except ProcessLookupError:
        return "dead", "instance gone"
    except PermissionError:
        pass  # it exists; its stat says whether it is the same process
    stat = read_stat(marker.pid)
    if stat is None:
        return "unprovable", "instance pid exists but its stat is unreadable"
    if stat.dead:
        return "dead", "instance exited"
    if stat.starttime != marker.starttime:
        return "dead", "instance pid reused"
    return "alive", "instance runs"


def marked_processes() -> list[tuple[int, str]]:
    """``(pid, command line)`` of the live processes marked by this supervisor instance
    (``supervisor run``'s leftover check, a Ray agent's; empty without ``/proc``)."""
    if not HAVE_PROCFS:
        return []
    prefix = instance_id() + "/"
    found: list[tuple[int, str]] = []
    for pid in all_pids():
        value = read_env_var(pid, SCOPE_ENV)
        if value is None or not value.startswith(prefix):
            continue
        stat = read_stat(pid)
        if stat is None or stat.dead:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmdline = "?"
        found.append((pid, cmdline))
    return found
