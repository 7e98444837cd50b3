"""Suite-wide guards: no test may leave a process behind.

Every process the supervisor starts carries ``SUPERVISOR_SCOPE`` in its
environment (DESIGN.md invariant 1). A test passes only if every such process
that appeared while it ran is gone (exited, not a zombie) shortly after it
ends, and if the test process itself holds no unreaped child (invariant 3).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

MARKER = "SUPERVISOR_SCOPE"
#: Every process this test run starts inherits this variable, so the guard looks only at
#: our own processes and not at those of another test run on the same machine.
RUN_VARIABLE = "SUPERVISOR_TEST_RUN"
RUN_ID = uuid.uuid4().hex
os.environ[RUN_VARIABLE] = RUN_ID
#: A process that got SIGKILL can take a moment to be reaped by its parent;
#: this is how long a test's leftovers may take to disappear.
SETTLE_SECONDS = 3.0


def _state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from /proc/<pid>/stat, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ")".
    return data[data.rfind(b")") + 2 :].split(b" ", 1)[0].decode()


def _marked_live_processes() -> dict[int, str]:
    """Live (non-zombie) processes of this test run whose environment carries the marker."""
    found: dict[int, str] = {}
    needle = MARKER.encode() + b"="
    ours = f"{RUN_VARIABLE}={RUN_ID}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        entries = environ.split(b"\0")
        if ours not in entries or not any(entry.startswith(needle) for entry in entries):
            continue
        if _state(pid) in (None, "Z", "X"):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmdline = "?"
        found[pid] = cmdline
    return found


def _unreaped_children() -> list[int]:
    """Zombie children of this test process: somebody forgot to wait()."""
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return [pid for pid in pids if _state(pid) == "Z"]


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail the test if a marker-tagged process or an unreaped child outlives it."""
    if not os.path.isdir("/proc"):
        yield
        return
    before = set(_marked_live_processes())
    yield
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        leaked = {p: c for p, c in _marked_live_processes().items() if p not in before}
        zombies = _unreaped_children()
        if (not leaked and not zombies) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    problems = [f"pid {p} still running: {c}" for p, c in sorted(leaked.items())]
    problems += [f"pid {p} is an unreaped zombie child of the test process" for p in zombies]
    for pid in leaked:
        # Do not let one leak cascade into every later test.
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    if problems:
        pytest.fail("processes outlived the test:\n  " + "\n  ".join(problems), pytrace=False)
