"""A process's state read from outside, the way the tests prove that nothing outlived them.

Read straight from ``/proc/<pid>/stat`` rather than through the supervisor's own procfs code, so
that the check does not lean on what it checks.
"""

from __future__ import annotations


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[state, ppid, pgrp, ...]``,
    so field N of proc(5) is at index N - 3), or None when ``pid`` is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name sits in parentheses and may itself hold ")".
    return data[data.rfind(b")") + 2 :].split()


def state(pid: int) -> str | None:
    """The one-letter state of ``pid`` (``R``, ``S``, ``Z``, ``X``...), or None when it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else fields[0].decode()


def runs_no_more(pid: int) -> bool:
    """True when ``pid`` has exited: reaped, or a zombie waiting to be reaped."""
    return state(pid) in (None, "Z", "X")
