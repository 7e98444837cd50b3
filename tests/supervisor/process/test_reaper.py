"""Subreaper, reaping of adopted orphans, and ``reap_orphans`` (invariants 3 and 8)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

import pytest
import trio

from supervisor._process._marker import SCOPE_ENV, boot_id, instance_id, pid_namespace
from supervisor._process._procfs import read_stat
from supervisor._process._reaper import (
    adopted_children,
    reap_adopted_children,
    reap_orphans,
    sweep_orphans,
)
from supervisor._process._tree import open_process_tree

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

PEERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "peers")
ESCAPE = os.path.join(PEERS, "escape.py")
PY = sys.executable
SLEEPER = [PY, "-c", "import time\nwhile True: time.sleep(3600)"]


def state(pid: int) -> str | None:
    stat = read_stat(pid)
    return None if stat is None else stat.state


async def wait_for_state(pid: int, wanted: set[str | None]) -> None:
    """Poll /proc until ``pid`` is in one of ``wanted`` (bounded: 10 s)."""
    with trio.fail_after(10):
        while True:
            if state(pid) in wanted:
                return
            await trio.sleep(0.01)


def spawn_forged(marker: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env[SCOPE_ENV] = marker
    return subprocess.Popen(SLEEPER, env=env, start_new_session=True)


async def wait_for_marker(pid: int, marker: str) -> None:
    """Poll until ``pid`` has exec'd with ``marker`` (bounded: 10 s).

    Between fork and exec a child still shows its parent's environment, so a sweep that
    runs then rightly does not see the forged marker.
    """
    wanted = f"{SCOPE_ENV}={marker}".encode()
    with trio.fail_after(10):
        while True:
            if wanted in _environ(pid):
                return
            await trio.sleep(0.01)


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def spawn_host_child(
    argv: list[str], *, new_session: bool, stdout: int | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, start_new_session=new_session, stdout=stdout)


def spawn_plain(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv)


def here(pid: int, starttime: int) -> str:
    """An instance id of this pid namespace and boot."""
    return f"{pid}.{starttime}.{pid_namespace()}.{boot_id()}"


def dead_pid() -> int:
    """A pid that certainly has no process now."""
    proc = subprocess.Popen([PY, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("how", ["pid gone", "pid reused"])
async def test_reap_orphans_kills_processes_of_dead_instances(how: str) -> None:
    if how == "pid gone":
        owner = here(dead_pid(), 12345)
    else:
        # Our own pid with another start time: a supervisor that died and whose pid
        # was reused (by this test process).
        own_start = read_stat(os.getpid())
        assert own_start is not None
        owner = here(os.getpid(), own_start.starttime + 1)
    orphan = spawn_forged(f"{owner}/t1-forged")
    try:
        await wait_for_marker(orphan.pid, f"{owner}/t1-forged")
        assert orphan.pid in reap_orphans()
        await wait_for_state(orphan.pid, {"Z", None})
    finally:
        orphan.kill()
        orphan.wait()
    assert state(orphan.pid) is None


async def test_reap_orphans_spares_live_instances() -> None:
    init = read_stat(1)
    assert init is not None
    alive_owner = spawn_forged(f"{here(1, init.starttime)}/t1-alive")
    ours = spawn_forged(f"{instance_id()}/t1-ours")
    try:
        await wait_for_marker(alive_owner.pid, f"{here(1, init.starttime)}/t1-alive")
        await wait_for_marker(ours.pid, f"{instance_id()}/t1-ours")
        victims = reap_orphans()
        assert alive_owner.pid not in victims
        assert ours.pid not in victims
        assert state(alive_owner.pid) in ("S", "R")
        assert state(ours.pid) in ("S", "R")
    finally:
        for proc in (alive_owner, ours):
            proc.kill()
            proc.wait()


async def test_orphan_is_adopted_and_its_zombie_reaped() -> None:
    tree = await open_process_tree([PY, ESCAPE, "setsid"])
    assert tree.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        line += await tree.stdout.receive_some(100)
    grandchild = int(line)
    os.kill(tree.pid, signal.SIGKILL)
    assert await tree.wait() == -signal.SIGKILL
    # Subreaper: the orphan is now our child.
    stat = read_stat(grandchild)
    assert stat is not None
    assert stat.ppid == os.getpid()
    # It leads a session of its own, as a host's child started with start_new_session does:
    # only its marker, read while it lives, proves it ours (listing our children reads it).
    assert grandchild in adopted_children()
    os.kill(grandchild, signal.SIGKILL)
    await wait_for_state(grandchild, {"Z"})
    assert reap_adopted_children() == [grandchild]
    assert state(grandchild) is None
    report = await tree.aclose()
    assert report.unkillable == ()


async def test_reaping_never_steals_a_managed_childs_status() -> None:
    tree = await open_process_tree([PY, "-c", "raise SystemExit(7)"])
    await wait_for_state(tree.pid, {"Z"})
    assert reap_adopted_children() == []
    assert await tree.wait() == 7
    await tree.aclose()


async def test_reaping_never_touches_children_in_our_session() -> None:
    # Somebody else's child (same session as us): theirs to wait for.
    proc = spawn_plain([PY, "-c", "raise SystemExit(5)"])
    await wait_for_state(proc.pid, {"Z"})
    assert reap_adopted_children() == []
    assert proc.wait() == 5


def is_subreaper() -> bool:
    value = ctypes.c_int(0)
    assert ctypes.CDLL(None, use_errno=True).prctl(37, ctypes.byref(value), 0, 0, 0) == 0
    return bool(value.value)


async def test_a_host_is_a_subreaper_only_while_a_tree_is_open() -> None:
    """After the last tree ends, a host's own orphans go to init again, not to a process that
    would never reap them (PR_GET_CHILD_SUBREAPER)."""
    first = await open_process_tree(SLEEPER)
    second = await open_process_tree(SLEEPER)
    assert is_subreaper()
    await first.aclose()
    assert is_subreaper()
    await second.aclose()
    assert not is_subreaper()
    # A grandchild the host leaves behind is not ours to adopt.
    proc = spawn_host_child(
        [PY, "-c", "import subprocess as s; print(s.Popen(['sleep', '5'], stdout=s.DEVNULL).pid)"],
        new_session=False,
        stdout=subprocess.PIPE,
    )
    out, _ = proc.communicate()
    orphan = int(out)
    stat = read_stat(orphan)
    try:
        assert stat is None or stat.ppid != os.getpid()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan, signal.SIGKILL)


@pytest.mark.parametrize("new_session", [False, True])
async def test_reaping_never_takes_a_host_childs_status(new_session: bool) -> None:
    """A child the host forked itself keeps its exit status, in a new session or not."""
    proc = spawn_host_child([PY, "-c", "raise SystemExit(7)"], new_session=new_session)
    await wait_for_state(proc.pid, {"Z"})
    assert reap_adopted_children() == []
    assert proc.wait() == 7


@pytest.mark.parametrize(
    ("instance", "reason"),
    [
        ("{pid}.12345", "old marker form"),
        ("{pid}.12345.1.{boot}", "another pid namespace"),
        ("{pid}.12345.{ns}.0123456789abcdef0123456789abcdef", "another boot"),
    ],
)
async def test_unprovable_instances_are_left_alone_and_reported(instance: str, reason: str) -> None:
    """A marker whose instance can not be proven dead here (another pid namespace, another
    boot, the old form without either) is never ended; ``reap --dry-run`` reports it."""
    owner = instance.format(pid=dead_pid(), ns=pid_namespace(), boot=boot_id())
    marker = f"{owner}/t1-elsewhere"
    orphan = spawn_forged(marker)
    try:
        await wait_for_marker(orphan.pid, marker)
        dry = sweep_orphans(dry_run=True)
        assert orphan.pid not in dry.ended
        ((pid, named, why),) = [entry for entry in dry.left if entry[0] == orphan.pid]
        assert (pid, named) == (orphan.pid, owner)
        assert why.startswith(reason)
        assert orphan.pid not in reap_orphans()
        assert state(orphan.pid) in ("S", "R")
    finally:
        orphan.kill()
        orphan.wait()


async def test_a_dry_run_ends_nothing() -> None:
    owner = here(dead_pid(), 12345)
    marker = f"{owner}/t1-dry"
    orphan = spawn_forged(marker)
    try:
        await wait_for_marker(orphan.pid, marker)
        assert orphan.pid in sweep_orphans(dry_run=True).ended
        assert state(orphan.pid) in ("S", "R")
        assert orphan.pid in sweep_orphans().ended
        await wait_for_state(orphan.pid, {"Z", None})
    finally:
        orphan.kill()
        orphan.wait()


async def test_reap_orphans_lists_every_process_it_ends() -> None:
    """Regression (newcomer report, `supervisor reap`): it printed 4 pids but ended 6.

    The group of the first marked process was SIGKILLed while the scan went on, so its
    other members were already dead when the scan reached them and went unlisted. A
    member that cleared its environment (no marker) is ended with its group: it is
    listed too.
    """
    owner = here(dead_pid(), 12345)
    marker = f"{owner}/t1-group"
    leader, kids = spawn_group_with_members(marker)
    try:
        for kid in kids[:3]:
            await wait_for_marker(kid, marker)
        victims = reap_orphans()
        assert set(victims) >= {leader.pid, *kids}
        for pid in (leader.pid, *kids):
            await wait_for_state(pid, {"Z", None})
    finally:
        leader.kill()
        leader.wait()
    # The members were reparented to us (subreaper) or to init: reap what is ours.
    reap_adopted_children()
    for kid in kids:
        await wait_for_state(kid, {None})


def spawn_group_with_members(marker: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A forged-marker group leader (new session) with four members, one without the
    marker; returns the leader and the members' pids once they all run."""
    env = dict(os.environ)
    env[SCOPE_ENV] = marker
    code = (
        "import subprocess, sys, time\n"
        f"sleeper = {SLEEPER!r}\n"
        "kids = [subprocess.Popen(sleeper) for _ in range(3)]\n"
        "kids.append(subprocess.Popen(sleeper, env={}))\n"
        "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
        "time.sleep(3600)\n"
    )
    leader = subprocess.Popen(
        [PY, "-c", code], env=env, start_new_session=True, stdout=subprocess.PIPE
    )
    assert leader.stdout is not None
    try:
        with leader.stdout:
            kids = [int(pid) for pid in leader.stdout.readline().split()]
        assert len(kids) == 4
    except BaseException:
        leader.kill()
        leader.wait()
        raise
    return leader, kids


def test_the_command_line_called_in_a_process_gives_it_back_as_a_host() -> None:
    """``main()`` owns its process only while it runs: a test or program that calls it keeps
    its own children's exit statuses afterwards (it once left the whole-process claim on, and
    every later host child of the pytest process could be reaped)."""
    from supervisor._cli._main import main

    assert main(["--log-level", "ERROR", "exec", "--no-stdin", "--", "true"]) == 0
    assert not is_subreaper()
    proc = spawn_host_child([PY, "-c", "raise SystemExit(7)"], new_session=True)
    for _ in range(1000):  # bounded: 10 s
        if state(proc.pid) == "Z":
            break
        time.sleep(0.01)
    assert state(proc.pid) == "Z"
    assert reap_adopted_children() == []
    assert proc.wait() == 7
