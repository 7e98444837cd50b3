"""A process's state read from outside, the way the tests prove that nothing outlived them.

Read straight from ``/proc/<pid>/stat`` rather than through the supervisor's own procfs code, so
that the check does not lean on what it checks.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


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
    """True when ``pid`` has exited: reaped, or a zombie waiting to be reaped.

    A process whose main thread exited while another thread runs reads ``Z`` too, but runs
    (field 20 of ``stat`` counts its threads): it has not exited.
    """
    fields = stat_fields(pid)
    if fields is None:
        return True
    return fields[0] in (b"Z", b"X") and int(fields[17]) <= 1


def collect_if_adopted(pids: Iterable[int]) -> None:
    """Collect the zombies among ``pids`` that are children of this process; never blocks.

    A test that embeds the Core is its host. An orphan re-parented to it (its parent was
    killed) that leads a session of its own and died before the supervisor saw it alive could
    be the host's own child as far as the supervisor can tell, so the supervisor leaves it, and
    the host -- the test -- collects it.
    """
    for pid in pids:
        fields = stat_fields(pid)
        if fields is None or fields[0] != b"Z" or int(fields[1]) != os.getpid():
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def serving_pid(pid: int) -> int:
    """The process that serves for the ``supervisor`` command line started as ``pid``.

    With its guardian (``supervisor._process._guardian``), ``pid`` is the guardian and the
    supervisor is its one child; without (``SUPERVISOR_GUARDIAN=0``, no procfs) it is ``pid``.
    """
    try:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() != "sv-guardian":
                return pid
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(child) for child in f.read().split()]
    except OSError:
        return pid
    return children[0] if len(children) == 1 else pid
