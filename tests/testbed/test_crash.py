"""Crash-safe cleanup (DESIGN.md invariants 8 and 14, issues 7 and 25): SIGKILL the supervisor.

A real ``python -m supervisor serve`` runs jobs, a ``process.run``, a terminal and a
language-server session whose programs ignore SIGTERM (and SIGHUP), never answer
``shutdown``, start a grandchild in a new session and double-fork a daemon; it is then
SIGKILLed: the process the client started (the guardian: its worker ends everything), the
worker (the guardian ends everything), or, with ``SUPERVISOR_GUARDIAN=0``, the one process
(its watchdog ends everything carrying its instance marker). Each within 2 s. With the
watchdog killed too, ``supervisor reap`` ends them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor import open_core, open_process_tree
from supervisor._process import _watchdog
from supervisor._process._guardian import GUARDIAN_ENV
from supervisor._process._marker import SCOPE_ENV, boot_id, pid_namespace
from supervisor._process._procfs import read_env_var, read_stat
from supervisor._process._reaper import is_managed, reap_adopted_children
from supervisor._process._watchdog import (
    SNAPSHOT_S,
    WATCHDOG_ENV,
    ensure_watchdog,
    find_watchdogs,
    watchdog_pid,
)
from supervisor.testbed import program_argv
from tests._procfs import serving_pid
from tests.supervisor.cli.test_serve import Client
from tests.testbed._poll import wait_until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from protocol import JSONValue

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

PY = sys.executable
#: DESIGN.md invariant 14: what a dead supervisor started is gone within 2 s.
CRASH_BOUND_S = 2.0
BOUND_S = 30


def argv_of(scenario: str, **options: Any) -> list[JSONValue]:
    """``program_argv`` typed as a JSON array, for command payloads."""
    return list(program_argv(scenario, **options))


def alive(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is not None and not stat.dead


def marked_by(instance: str) -> list[int]:
    prefix = instance + "/"
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            value = read_env_var(int(name), SCOPE_ENV)
            if value is not None and value.startswith(prefix) and alive(int(name)):
                found.append(int(name))
    return found


def instance_of(pid: int) -> str:
    """The instance id of a supervisor of this pid namespace and boot."""
    stat = read_stat(pid)
    assert stat is not None
    return f"{pid}.{stat.starttime}.{pid_namespace()}.{boot_id()}"


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


async def wait_for_lines(path: Path, count: int) -> list[int]:
    await wait_until(lambda: len(_pids(path)) >= count)
    return _pids(path)


async def settle_zombies() -> None:
    # Orphans of the killed server were re-parented to us when we are a child subreaper;
    # collecting their status is then our job (invariant 3). Its tree mains lead sessions of
    # their own, as a host's own children may: the Core's reaper leaves those to the host,
    # which this test is.
    with trio.fail_after(BOUND_S):
        while True:
            reap_adopted_children()
            zombies = [
                pid
                for pid in _children()
                if (st := read_stat(pid)) is not None
                and st.state == "Z"
                and st.sid != os.getsid(0)
                and not is_managed(pid)
            ]
            if not zombies:
                return
            for pid in zombies:
                _collect(pid)
            await trio.sleep(0.02)


def _collect(zombie: int) -> None:
    """Collect a zombie child's status (never blocks: it has exited)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(zombie, os.WNOHANG)


def _children() -> list[int]:
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            pids.extend(int(p) for p in f.read().split())
    return pids


def worker_of(process: trio.Process) -> int:
    """The pid of the process that serves (the guardian's child, or ``process`` itself)."""
    return serving_pid(process.pid)


@pytest.fixture
async def busy_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Client, list[int]]]:
    """A ``supervisor serve`` running misbehavers: two jobs, a ``process.run``, a terminal and
    a language-server session (the last two when the Core has those services); with its
    guardian, or (``SUPERVISOR_GUARDIAN=0``) as one process."""
    env = dict(os.environ)
    if request.param != "guarded":
        env[GUARDIAN_ENV] = "0"
    process = await trio.lowlevel.open_process(
        [PY, "-m", "supervisor", "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        client = Client(process)
        commands = (await client.initialize())["commands"]
        # With a guardian, the client's process is the guardian; it serves through its child.
        assert (worker_of(process) != process.pid) == (request.param == "guarded")
        assert isinstance(commands, list)
        other_root = tmp_path / "other"  # one job at a time per root: a second lane
        other_root.mkdir()
        names = ("setsid", "daemon", "ignore", "terminal", "lsp")
        files = {name: tmp_path / f"{name}.pids" for name in names}
        await client.request(
            "job.start",
            {
                "kind": "build",
                "root": str(tmp_path),
                "argv": argv_of("grandchild-setsid", pid_file=files["setsid"]),
            },
        )
        await client.request(
            "job.start",
            {
                "kind": "test",
                "root": str(other_root),
                "argv": argv_of("daemon", pid_file=files["daemon"]),
            },
        )
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": "run",
                "method": "process.run",
                "params": {"argv": argv_of("ignore-sigterm", pid_file=files["ignore"])},
            }
        )
        pids = [
            *await wait_for_lines(files["setsid"], 2),
            *await wait_for_lines(files["daemon"], 2),
            *await wait_for_lines(files["ignore"], 1),
        ]
        if "terminal.create" in commands:
            argv = argv_of("terminal-ignore-hangup", pid_file=files["terminal"])
            reply = await client.request(
                "terminal.create", {"executable": argv[0], "arguments": argv[1:]}
            )
            assert "result" in reply, reply
            pids += await wait_for_lines(files["terminal"], 1)
        if "lsp.startServer" in commands:
            argv = argv_of("no-shutdown-reply", pid_file=files["lsp"])
            reply = await client.request(
                "lsp.startServer",
                {
                    "serverId": "crash-test",
                    "executable": argv[0],
                    "arguments": argv[1:],
                    "workingDirectory": str(tmp_path),
                    "rootUri": tmp_path.as_uri(),
                },
            )
            assert "result" in reply, reply
            pids += await wait_for_lines(files["lsp"], 1)
        yield client, pids
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await settle_zombies()


@pytest.mark.parametrize(
    ("busy_server", "victim"),
    [("guarded", "serve"), ("guarded", "worker"), ("watchdog only", "serve")],
    indirect=["busy_server"],
)
async def test_sigkill_leaves_nothing_within_2_s(
    busy_server: tuple[Client, list[int]], victim: str
) -> None:
    client, pids = busy_server
    worker = worker_of(client.process)
    instance = instance_of(worker)
    assert set(pids) <= set(marked_by(instance))
    watchdogs = find_watchdogs(instance)
    assert len(watchdogs) == 1
    # The watchdog carries no scope marker: it is neither swept nor counted as a leak.
    assert read_env_var(watchdogs[0], SCOPE_ENV) is None
    assert read_env_var(watchdogs[0], WATCHDOG_ENV) == instance

    os.kill(worker if victim == "worker" else client.process.pid, signal.SIGKILL)
    killed_at = trio.current_time()
    if victim == "worker":
        # The guardian ends what the worker left, then dies as its worker did.
        assert await client.process.wait() == -signal.SIGKILL
    else:
        await client.process.wait()
    # Both: a process in the middle of exiting has already dropped its environment (so
    # its marker) but is not yet a zombie.
    await wait_until(lambda: not marked_by(instance) and not any(alive(pid) for pid in pids))
    assert trio.current_time() - killed_at < CRASH_BOUND_S
    # Its work done, the watchdog exits.
    await wait_until(lambda: not any(alive(pid) for pid in watchdogs))


@pytest.mark.parametrize("busy_server", ["watchdog only"], indirect=True)
async def test_with_the_watchdog_killed_too_reap_ends_them(
    busy_server: tuple[Client, list[int]],
) -> None:
    client, pids = busy_server
    instance = instance_of(client.process.pid)
    (watchdog,) = find_watchdogs(instance)
    os.kill(watchdog, signal.SIGKILL)
    await wait_until(lambda: not alive(watchdog))
    client.process.send_signal(signal.SIGKILL)
    await client.process.wait()
    # Nobody sweeps now: the orphans wait for `supervisor reap` (or another Core's start,
    # which may come from any supervisor on this machine first).
    done = await trio.run_process(
        [PY, "-m", "supervisor", "reap", "--json"], capture_stdout=True, check=True
    )
    reaped = json.loads(done.stdout)["reaped"]
    assert isinstance(reaped, list)
    await wait_until(lambda: not marked_by(instance) and not any(alive(pid) for pid in pids))


def _forged_orphan() -> subprocess.Popen[bytes]:
    """A sleeper whose marker names a supervisor instance that is dead (its pid exited)."""
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    env = dict(os.environ)
    env[SCOPE_ENV] = f"{dead.pid}.1.{pid_namespace()}.{boot_id()}/t1-forged"
    return subprocess.Popen(
        [PY, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True
    )


async def test_core_start_reaps_orphans_of_dead_instances() -> None:
    orphan = _forged_orphan()
    try:
        await wait_until(lambda: read_env_var(orphan.pid, SCOPE_ENV) is not None)
        async with open_core():
            pass
        await wait_until(lambda: orphan.poll() is not None)
        # Its status is ours, the host's: the Core's reaper never takes a child it can not
        # prove its own (this one leads a session of its own, as a host's child may).
        assert orphan.wait() == -signal.SIGKILL
    finally:
        orphan.kill()
        orphan.wait()


async def test_watchdog_is_restarted_and_its_pipe_is_not_inherited() -> None:
    first = ensure_watchdog()
    assert first is not None
    assert watchdog_pid() == first
    os.kill(first, signal.SIGKILL)
    await wait_until(lambda: watchdog_pid() is None)
    tree = await open_process_tree([PY, "-c", "import time; time.sleep(60)"])
    try:
        second = watchdog_pid()
        assert second is not None
        assert second != first
        from supervisor._process import _watchdog

        current = _watchdog._current
        assert current is not None
        inode = os.fstat(current.write_fd).st_ino
        held = set()
        for fd in os.listdir(f"/proc/{tree.pid}/fd"):
            try:
                held.add(os.readlink(f"/proc/{tree.pid}/fd/{fd}"))
            except OSError:
                continue
        assert f"pipe:[{inode}]" not in held
    finally:
        await tree.aclose()


# -- every escape trick, SIGKILL at a random moment (issue 25) --------------------------------

#: escape-artist's tricks: a new session, an empty environment, a double fork, a new process
#: group, and a mix of them forked every few milliseconds (younger than any snapshot).
TRICKS = ("setsid", "env-i", "double-fork", "pgrp", "window")


def tagged(tag: str) -> list[int]:
    """Live processes whose command line holds ``tag`` (escapees name their pid file)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if tag.encode() in cmdline and alive(int(name)):
            found.append(int(name))
    return found


async def _start_artists(
    client: Client, tmp_path: Path, *, orphan: bool, exit_after: bool = False
) -> dict[str, Path]:
    """One escape-artist job per trick; returns each one's pid file once it has escapees."""
    files: dict[str, Path] = {}
    for trick in TRICKS:
        root = tmp_path / trick
        root.mkdir()
        files[trick] = tmp_path / f"{trick}.pids"
        argv = program_argv(
            "escape-artist",
            trick=trick,
            orphan=orphan,
            pid_file=files[trick],
            count=6,
            exit_after_setup=exit_after,
        )
        reply = await client.request(
            "job.start", {"kind": "test", "root": str(root), "argv": list(argv)}
        )
        assert "result" in reply, reply
    for path in files.values():
        # The artist's own pid, then its escapees'.
        await wait_for_lines(path, 7 if exit_after else 3)
    return files


@pytest.mark.parametrize("victim", ["serve", "worker"])
@pytest.mark.parametrize("form", ["direct", "orphan"])
async def test_no_escape_trick_outlives_a_sigkill_at_a_random_moment(
    tmp_path: Path, form: str, victim: str
) -> None:
    """Issue 25: whatever an escapee did -- a new session or process group, an empty
    environment, a double fork, forked a moment ago -- and whether its parent lives
    (``direct``) or it was re-parented to the supervisor (``orphan``), a SIGKILL of serve or
    of its worker ends it within 2 s."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    process = await trio.lowlevel.open_process(
        [PY, "-m", "supervisor", "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    tag = str(tmp_path)
    try:
        client = Client(process)
        await client.initialize()
        await _start_artists(client, tmp_path, orphan=form == "orphan")
        worker = worker_of(process)
        if form == "orphan":
            await wait_until(lambda: any(_ppid(pid) == worker for pid in tagged(tag)))
        await trio.sleep(rng.uniform(0, 0.5))
        os.kill(worker if victim == "worker" else process.pid, signal.SIGKILL)
        killed_at = trio.current_time()
        await wait_until(lambda: not tagged(tag), timeout_s=10)
        took = trio.current_time() - killed_at
        assert took < CRASH_BOUND_S, f"seed {seed}: the escapees lived {took:.2f} s"
    finally:
        with trio.CancelScope(shield=True):
            for pid in tagged(tag):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if process.returncode is None:
                process.kill()
            await process.wait()
            await settle_zombies()


async def test_the_watchdog_alone_ends_escapees_a_snapshot_has_seen(tmp_path: Path) -> None:
    """Without a guardian (``SUPERVISOR_GUARDIAN=0``) the watchdog ends every escapee its
    snapshots have seen: orphans re-parented to serve in a session of their own with an
    empty environment too (every child of a command line's process is its own)."""
    env = {**os.environ, GUARDIAN_ENV: "0"}
    process = await trio.lowlevel.open_process(
        [PY, "-m", "supervisor", "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    tag = str(tmp_path)
    try:
        client = Client(process)
        await client.initialize()
        await _start_artists(client, tmp_path, orphan=True, exit_after=True)
        await trio.sleep(4 * SNAPSHOT_S)
        process.kill()
        killed_at = trio.current_time()
        await wait_until(lambda: not tagged(tag), timeout_s=10)
        assert trio.current_time() - killed_at < CRASH_BOUND_S
    finally:
        with trio.CancelScope(shield=True):
            for pid in tagged(tag):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if process.returncode is None:
                process.kill()
            await process.wait()
            await settle_zombies()


def _ppid(pid: int) -> int | None:
    stat = read_stat(pid)
    return None if stat is None else stat.ppid


def test_a_watchdog_whose_supervisor_died_first_spares_its_new_parent() -> None:
    """Issue 25 (found by ``benchmarks.crash_kills``): a supervisor killed while its watchdog
    was starting left the watchdog re-parented (here: to this test process, as to an IDE that
    is a subreaper); it took its new parent for its supervisor and, the whole process being
    ours, SIGKILLed that parent's other children. The watchdog names its supervisor by the
    instance (pid and start time), so it finds nothing of a dead one to end."""
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    instance = f"{dead.pid}.1.{pid_namespace()}.{boot_id()}"
    bystander = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    watchdog = subprocess.Popen(
        [PY, "-I", "-S", _watchdog.__file__, "supervisor-watchdog", instance, str(os.getpgrp())],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        assert watchdog.stdin is not None
        # What a command line's supervisor tells it first: no host shares the process.
        watchdog.stdin.write(b"=1\n+%d\n" % bystander.pid)
        watchdog.stdin.flush()
        time.sleep(3 * SNAPSHOT_S)
        watchdog.stdin.close()  # the supervisor is "gone": the sweep runs
        assert watchdog.wait(timeout=BOUND_S) == 0
        assert bystander.poll() is None, "the watchdog ended a process that is not its own"
    finally:
        for process in (bystander, watchdog):
            process.kill()
            process.wait()


#: A supervisor process whose exit first SIGKILLs its direct children, as a Ray worker's
#: does (``kill_child_processes_on_worker_exit``): argv[1] "detach", "detach-later" or
#: "attached", argv[2]
#: the grandchild's pid file. Prints the watchdog's pid, then waits for a line on stdin.
_KILLS_ITS_CHILDREN = """
import os, signal, sys, trio
from supervisor import open_process_tree
from supervisor._process import _watchdog

if sys.argv[1] == "detach":
    print(_watchdog.detach_watchdog(), flush=True)
elif sys.argv[1] == "detach-later":  # as a node agent: it starts while the tree spawns
    _watchdog.detach_watchdog(wait=False)

async def main():
    # Without the scope marker (an empty environment): only the watchdog's ancestry records
    # can tie it to us, and no other supervisor's orphan sweep on this machine ends it.
    grandchild = "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
    grandchild += "'import time; time.sleep(300)'], env={}); "
    grandchild += "open(sys.argv[1], 'w').write(str(p.pid)); "
    grandchild += "time.sleep(300)"
    tree = await open_process_tree([sys.executable, "-c", grandchild, sys.argv[2]])
    if sys.argv[1] != "detach":
        print(_watchdog.watchdog_pid(), flush=True)
    while not os.path.exists(sys.argv[2]) or not open(sys.argv[2]).read():
        await trio.sleep(0.01)
    await trio.sleep(3 * _watchdog.SNAPSHOT_S)  # a snapshot has recorded the grandchild
    print("ready", flush=True)
    sys.stdin.readline()
    for tid in os.listdir("/proc/self/task"):
        for child in open(f"/proc/self/task/{tid}/children").read().split():
            os.kill(int(child), signal.SIGKILL)
    os._exit(0)

trio.run(main)
"""


@pytest.mark.parametrize("mode", ["detach", "detach-later", "attached"])
async def test_a_detached_watchdog_outlives_a_process_that_kills_its_children(
    tmp_path: Path, mode: str
) -> None:
    """Issue 27 (Ray lanes): a Ray worker's exit SIGKILLs its direct children first, so a
    node agent's watchdog must be none of them (``detach_watchdog``): then it ends the
    grandchild the killed tree main left, within the crash bound. Attached, the watchdog dies
    with the others and the grandchild is left: the reason detaching exists."""
    pid_file = tmp_path / "grandchild"
    process = await trio.lowlevel.open_process(
        [PY, "-c", _KILLS_ITS_CHILDREN, mode, str(pid_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    grandchild = -1
    try:
        with trio.fail_after(BOUND_S):
            out = b""
            while b"ready\n" not in out:
                chunk = await process.stdout.receive_some()
                assert chunk, out
                out += chunk
        watchdog = int(out.split()[0])
        grandchild = int(pid_file.read_text())
        assert alive(watchdog)
        assert alive(grandchild)
        assert (_ppid(watchdog) != process.pid) == mode.startswith("detach")
        await process.stdin.send_all(b"go\n")
        await process.wait()
        ended_at = trio.current_time()
        if mode.startswith("detach"):
            await wait_until(lambda: not alive(grandchild), timeout_s=10)
            assert trio.current_time() - ended_at < CRASH_BOUND_S
            await wait_until(lambda: not alive(watchdog), timeout_s=10)
        else:
            await trio.sleep(4 * SNAPSHOT_S)
            assert not alive(watchdog)
            assert alive(grandchild), "the attached watchdog was expected to die first"
    finally:
        with trio.CancelScope(shield=True):
            if grandchild > 0 and alive(grandchild):
                os.kill(grandchild, signal.SIGKILL)
            if process.returncode is None:
                process.kill()
            await process.wait()
            await settle_zombies()


@pytest.mark.parametrize("wait", [True, False])
def test_a_detached_watchdog_ends_with_a_normal_exit(wait: bool) -> None:
    """A normal exit closes the pipe and waits for the detached watchdog (through its pidfd,
    as it is no child to wait for): it is gone when the process is, even when the process
    never waited for its start."""
    code = (
        "from supervisor._process import _watchdog, _marker; "
        f"_watchdog.detach_watchdog(wait={wait}); "
        "print(_marker.instance_id(), _watchdog.watchdog_pid(), flush=True)"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=BOUND_S)
    assert out.returncode == 0, out.stderr
    instance, pid = out.stdout.split()
    assert int(pid) > 0
    assert find_watchdogs(instance) == []
    assert not alive(int(pid))
