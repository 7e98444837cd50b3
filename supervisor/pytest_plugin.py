"""A pytest plugin for people who test process lifecycles (a ``pytest11`` entry point).

Fixtures:

- ``no_leaked_processes``: fails the test when a process carrying the scope marker
  (``SUPERVISOR_SCOPE``) that appeared during the test outlives it, listing each with its
  command line, or when the test process holds an unreaped (zombie) child. Only processes
  of this pytest run are looked at: the plugin puts ``SUPERVISOR_TEST_RUN=<uuid>`` into the
  environment at start, and every process the run starts inherits it, so another test run
  on the same machine never trips the guard. Request it (or make it autouse in a
  ``conftest.py``) where you want it.
- ``supervisor_core``: a running :class:`supervisor.Core` (Trio, via pytest-trio), closed,
  with everything it started, when the test ends.
- ``supervisor_scenario`` / ``supervisor_scenario_session``:
  :func:`supervisor.testbed.open_scenario` and :func:`supervisor.testbed.open_scenario_session`,
  to start a misbehaving program under a chosen scenario.

Example (a language-server author checks that a server which never answers ``shutdown`` is
still stopped within the bounds)::

    import trio
    from supervisor.testbed import SCENARIOS

    async def test_stop_is_bounded(supervisor_scenario_session, no_leaked_processes):
        async with supervisor_scenario_session("no-shutdown-reply") as session:
            await session.endpoint.request("initialize", {"capabilities": {}})
            with trio.move_on_after(1):
                await session.endpoint.request("shutdown")
            report = await session.tree.aclose(term_grace_ms=500)
            assert session.tree.pid in report.terminated
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

    from ._core._core import Core

__all__ = (
    "RUN_VARIABLE",
    "SETTLE_SECONDS",
    "marked_live_processes",
    "no_leaked_processes",
    "supervisor_core",
    "supervisor_scenario",
    "supervisor_scenario_session",
    "unreaped_children",
)

#: The scope marker every supervised process carries (``supervisor.SCOPE_ENV``).
_MARKER: Final = "SUPERVISOR_SCOPE"
#: Every process a test run starts inherits this variable, so the guard looks only at the
#: processes of this run and never at those of another run on the same machine.
RUN_VARIABLE: Final = "SUPERVISOR_TEST_RUN"
#: A process that got SIGKILL can take a moment to be reaped by its parent; this is how long
#: a test's leftovers may take to disappear, in seconds.
SETTLE_SECONDS: Final = 3.0
#: ``/proc/<pid>/comm`` of a supervisor's watchdog (``supervisor._process._watchdog``).
_WATCHDOG_COMM: Final = "sv-watchdog"


def pytest_configure(config: pytest.Config) -> None:
    """Give this run its own id (inherited by every process it starts)."""
    os.environ[RUN_VARIABLE] = uuid.uuid4().hex


def _stat(pid: int) -> tuple[str, str] | None:
    """``(comm, state)`` of ``pid`` from /proc/<pid>/stat, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ")".
    close = data.rfind(b")")
    comm = data[data.find(b"(") + 1 : close].decode(errors="replace")
    return comm, data[close + 2 :].split(b" ", 1)[0].decode()


def marked_live_processes(run_id: str | None = None) -> dict[int, str]:
    """Live (non-zombie) processes of a test run whose environment carries the scope marker.

    Args:
        run_id: The run whose processes count (default: this run's ``SUPERVISOR_TEST_RUN``;
            when that is unset, every marked process counts).

    Returns:
        ``{pid: command line}``.
    """
    run = run_id if run_id is not None else os.environ.get(RUN_VARIABLE)
    found: dict[int, str] = {}
    needle = _MARKER.encode() + b"="
    ours = f"{RUN_VARIABLE}={run}".encode() if run else None
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
        if ours is not None and ours not in entries:
            continue
        if not any(entry.startswith(needle) for entry in entries):
            continue
        stat = _stat(pid)
        if stat is None or stat[1] in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmdline = "?"
        found[pid] = cmdline
    return found


def _children() -> list[int]:
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except OSError:
            continue
    return pids


def _reap_adopted_watchdogs() -> None:
    # A supervisor started by the test (``supervisor serve``) leaves its watchdog behind when
    # it exits; the watchdog sweeps and exits, and is re-parented to this process when it is a
    # child subreaper. Collecting that status is the subreaper's duty, not a leak of the test.
    for pid in _children():
        stat = _stat(pid)
        if stat is not None and stat == (_WATCHDOG_COMM, "Z"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def unreaped_children() -> list[int]:
    """Zombie children of this process: somebody forgot to ``wait()``."""
    _reap_adopted_watchdogs()
    zombies: list[int] = []
    for pid in _children():
        stat = _stat(pid)
        if stat is not None and stat[1] == "Z":
            zombies.append(pid)
    return zombies


def _children_in_exec() -> list[int]:
    """Live children of this process whose exec has begun but not finished.

    ``posix_spawn`` returns once the child's exec has replaced its memory, before the new
    program's arguments and environment are in place: until then ``/proc/<pid>/environ``
    reads empty, so a process a test has just started does not show its marker yet. On a
    busy machine the child may wait that long for a CPU, past the guard's first scan.
    """
    found: list[int] = []
    for pid in _children():
        stat = _stat(pid)
        if stat is None or stat[1] in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if not f.read(1):
                    found.append(pid)
        except OSError:
            continue
    return found


@pytest.fixture
def no_leaked_processes() -> Iterator[None]:
    """Fail the test if a marker-tagged process or an unreaped child outlives it.

    Leftovers get :data:`SETTLE_SECONDS` to disappear; the survivors are then listed with
    their command lines, SIGKILLed (so one leak does not cascade into later tests), and the
    test fails.
    """
    if not os.path.isdir("/proc"):
        yield
        return
    before = set(marked_live_processes())
    yield
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        starting = _children_in_exec()  # scanned again once their marker shows
        leaked = {p: c for p, c in marked_live_processes().items() if p not in before}
        zombies = unreaped_children()
        if (not leaked and not zombies and not starting) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    problems = [f"pid {p} still running: {c}" for p, c in sorted(leaked.items())]
    problems += [f"pid {p} is an unreaped zombie child of the test process" for p in zombies]
    # Do not let one leak cascade into every later test: end the survivors, collect the
    # zombies (the failure above already names them).
    for pid in leaked:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    for pid in zombies:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    if problems:
        pytest.fail("processes outlived the test:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.fixture
async def supervisor_core() -> AsyncIterator[Core]:
    """A running Core with the default services; closed (everything ended) after the test.

    An async fixture: pytest-trio runs it for Trio tests (``trio_mode = true`` or
    ``@pytest.mark.trio``).
    """
    from ._core._core import open_core

    async with open_core() as core:
        yield core


@pytest.fixture
def supervisor_scenario() -> Callable[..., contextlib.AbstractAsyncContextManager[object]]:
    """:func:`supervisor.testbed.open_scenario`: ``async with supervisor_scenario(name, ...)``."""
    from .testbed import open_scenario

    return open_scenario


@pytest.fixture
def supervisor_scenario_session() -> Callable[..., contextlib.AbstractAsyncContextManager[object]]:
    """:func:`supervisor.testbed.open_scenario_session` (an LSP program with an endpoint)."""
    from .testbed import open_scenario_session

    return open_scenario_session
