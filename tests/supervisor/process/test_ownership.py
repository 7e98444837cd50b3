"""Process ownership that is exact (issue 14), with real processes.

- A host program that embeds the supervisor (``CoreThread``, ``open_core()``) keeps the exit
  status of every child it starts itself, before or after the Core, in a new session or not,
  while the Core runs ``process.run`` and a terminal session.
- A supervisor inside a pid namespace keeps its work while ``supervisor reap`` and another
  supervisor run outside it (skipped where ``unshare -pf --mount-proc`` is not allowed).
- After SIGKILL of the supervisor, a descendant that cleared its environment and left the
  session is gone within 2 s: with its parent alive, and orphaned after an ancestry snapshot;
  with the command line's guardian and without it (the watchdog alone).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from supervisor._process._reaper import is_managed
from tests._procfs import runs_no_more, serving_pid, stat_fields
from tests.supervisor.cli.test_serve import Client
from tests.testbed._poll import wait_until

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

PY = sys.executable
#: What a dead supervisor started is gone within this bound (the watchdog's contract).
CRASH_BOUND_S = 2.0

HOST = r"""
import json, os, subprocess, sys, time
import trio
from supervisor import CoreThread, open_core

PY = sys.executable


def host_children(first):
    # Exit statuses first and first + 1: one child in our session, one in a session of its own.
    code = "import sys, time; time.sleep(0.3); sys.exit({})"
    return [
        subprocess.Popen([PY, "-c", code.format(first)]),
        subprocess.Popen([PY, "-c", code.format(first + 1)], start_new_session=True),
    ]


# A command that leaves an orphan in a session of its own (adopted by the Core) and outlives
# the host's children, so the Core reaps while their zombies wait for the host.
RUN = {"id": "run", "command": "process.run", "payload": {"argv": [PY, "-c",
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'pass'], start_new_session=True)\n"
    "time.sleep(1)\n"
    "sys.exit(3)"]}}
TERM = {"id": "term", "command": "terminal.create",
        "payload": {"executable": "sleep", "arguments": ["30"]}}
before = host_children(7)
results = []
if sys.argv[1] == "CoreThread":
    with CoreThread() as core:
        after = host_children(9)
        results.append(json.loads(core.execute_json(json.dumps(RUN))))
        results.append(json.loads(core.execute_json(json.dumps(TERM))))
        time.sleep(0.2)
else:
    async def main():
        global after
        async with open_core() as core:
            after = host_children(9)
            results.append(await core.execute(RUN))
            results.append(await core.execute(TERM))
            await trio.sleep(0.2)
    trio.run(main)
statuses = [p.wait() for p in before + after]
print(json.dumps({"statuses": statuses, "results": results, "pid": os.getpid()}))
"""


def marked_processes(instance_prefix: str) -> list[int]:
    """Live processes whose scope marker starts with ``instance_prefix``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                entries = f.read().split(b"\0")
        except OSError:
            continue
        wanted = b"SUPERVISOR_SCOPE=" + instance_prefix.encode()
        if any(e.startswith(wanted) for e in entries) and not runs_no_more(int(name)):
            found.append(int(name))
    return found


@pytest.mark.parametrize("embedding", ["CoreThread", "open_core"])
async def test_a_host_keeps_the_exit_status_of_its_own_children(embedding: str) -> None:
    done = await trio.run_process(
        [PY, "-c", HOST, embedding], capture_stdout=True, capture_stderr=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    out = json.loads(done.stdout)
    # Started before and after the Core, in our session and in one of their own: every status
    # is the host's (the Core once collected those in a new session: the host saw 0).
    assert out["statuses"] == [7, 8, 9, 10]
    run, term = out["results"]
    assert run["ok"]
    assert run["data"]["exitCode"] == 3
    assert term["ok"], term
    # Nothing the Core started outlived it (the terminal's sleep, the orphan of the command).
    assert marked_processes(f"{out['pid']}.") == []


def _unshare_refusal() -> str | None:
    """Why ``unshare -pf --mount-proc`` can not run here, or None when it can."""
    try:
        probe = subprocess.run(
            ["unshare", "-pf", "--mount-proc", "true"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare is not available: {exc}"
    if probe.returncode != 0:
        detail = probe.stderr.decode(errors="replace").strip() or f"status {probe.returncode}"
        return f"this machine forbids a pid namespace (unshare -pf --mount-proc: {detail})"
    return None


def _pid_namespace_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _marked_in_namespace(inode: int) -> list[int]:
    """Live processes (outer pids) that carry a scope marker naming pid namespace ``inode``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                entries = f.read().split(b"\0")
        except OSError:
            continue
        for entry in entries:
            if entry.startswith(b"SUPERVISOR_SCOPE="):
                instance = entry.split(b"=", 1)[1].split(b"/", 1)[0].split(b".")
                ours = len(instance) == 4 and instance[2] == str(inode).encode()
                if ours and not runs_no_more(int(name)):
                    found.append(int(name))
    return found


async def test_a_supervisor_in_a_pid_namespace_keeps_its_work() -> None:
    refusal = await trio.to_thread.run_sync(_unshare_refusal)
    if refusal is not None:
        pytest.skip(refusal)
    inner = await trio.lowlevel.open_process(
        ["unshare", "-pf", "--mount-proc", PY, "-m", "supervisor", "testbed", "run", "hang"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # unshare forks the namespace's first process: our supervisor, pid 1 inside.
        children: list[int] = []

        def namespace_started() -> bool:
            children[:] = _children_of(inner.pid)
            return bool(children) and _pid_namespace_of(children[0]) not in (
                None,
                _pid_namespace_of(os.getpid()),
            )

        await wait_until(namespace_started)
        inode = _pid_namespace_of(children[0])
        assert inode is not None
        work: list[int] = []

        def work_started() -> bool:
            work[:] = _marked_in_namespace(inode)
            return bool(work)

        await wait_until(work_started)
        # Outside: a dry run reports the work and ends nothing; reap and a Core's start
        # (which sweeps orphans of dead instances) leave it alone.
        dry = await trio.run_process(
            [PY, "-m", "supervisor", "reap", "--dry-run", "--json"], capture_stdout=True
        )
        report = json.loads(dry.stdout)
        assert not set(work) & set(report["wouldReap"])
        left = {entry["pid"]: entry["reason"] for entry in report["left"]}
        for pid in work:
            assert left[pid] == "another pid namespace"
        reaped = await trio.run_process(
            [PY, "-m", "supervisor", "reap", "--json"], capture_stdout=True
        )
        assert not set(work) & set(json.loads(reaped.stdout)["reaped"])
        async with open_core() as core:
            response = await core.execute(
                {"id": "r", "command": "process.run", "payload": {"argv": ["true"]}}
            )
            assert response["ok"]
        await trio.sleep(0.2)
        assert all(not runs_no_more(pid) for pid in work)
        assert inner.returncode is None
    finally:
        # Ending the namespace's first process ends every process of the namespace.
        for pid in _children_of(inner.pid):
            _kill(pid)
        inner.kill()
        await inner.wait()
    await wait_until(lambda: all(runs_no_more(pid) for pid in work))
    await collect_adopted_orphans(*children)  # the namespace's first process


def _children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


async def collect_adopted_orphans(*also: int) -> None:
    """Collect the zombies of a killed supervisor's processes re-parented to this process.

    This test process is a child subreaper (its own Core made it one), and the orphans lead
    sessions of their own, as a host's own children may: the Core's reaper leaves such zombies
    to the host, which here is the test. ``also``: pids known to be orphans of the test's
    (in the test's session).
    """

    def collected() -> bool:
        zombies = [
            pid
            for pid in _children_of(os.getpid())
            if (fields := stat_fields(pid)) is not None
            and fields[0] == b"Z"
            and (int(fields[3]) != os.getsid(0) or pid in also)
            and not is_managed(pid)
        ]
        for pid in zombies:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        return not zombies

    await wait_until(collected)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


#: A main process that starts two descendants which clear their environment (no marker) and
#: lead sessions of their own: one whose parent stays alive, one orphaned 1.5 s later (its
#: parent exits; the watchdog's ancestry snapshots, every 0.25 s, have seen it by then).
LEAVERS = (
    "setsid env -i sleep 1000 & echo $! >> {pids}; "
    "(setsid env -i sleep 1000 & echo $! >> {pids}; sleep 1.5) & "
    "wait"
)


@pytest.mark.parametrize("guardian", ["guarded", "watchdog only"])
async def test_sigkill_ends_descendants_that_removed_the_marker_within_2_s(
    tmp_path: Path, guardian: str
) -> None:
    pids_file = tmp_path / "pids"
    env = dict(os.environ)
    if guardian != "guarded":
        env["SUPERVISOR_GUARDIAN"] = "0"
    server = await trio.lowlevel.open_process(
        [PY, "-m", "supervisor", "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    leavers: list[int] = []
    try:
        client = Client(server)
        await client.initialize()
        await client.send(
            {
                "jsonrpc": "2.0",
                "id": "run",
                "method": "process.run",
                "params": {"argv": ["sh", "-c", LEAVERS.format(pids=pids_file)]},
            }
        )

        def both_started() -> bool:
            text = pids_file.read_text() if pids_file.exists() else ""
            leavers[:] = [int(p) for p in text.split()]
            return len(leavers) == 2 and all(_is_clean_leader(pid) for pid in leavers)

        await wait_until(both_started)
        # The second one's parent exits: it is orphaned (adopted by the supervisor).
        await wait_until(lambda: _ppid(leavers[1]) == serving_pid(server.pid))
        server.send_signal(signal.SIGKILL)
        killed_at = trio.current_time()
        await server.wait()
        await wait_until(lambda: all(runs_no_more(pid) for pid in leavers))
        assert trio.current_time() - killed_at < CRASH_BOUND_S
    finally:
        for pid in leavers:
            _kill(pid)
        if server.returncode is None:
            server.kill()
        await server.wait()
    await wait_until(lambda: all(runs_no_more(pid) for pid in leavers))
    await collect_adopted_orphans()


def _ppid(pid: int) -> int | None:
    fields = stat_fields(pid)
    return None if fields is None else int(fields[1])


def _is_clean_leader(pid: int) -> bool:
    """``pid`` runs ``sleep``, leads its own session and has an empty environment."""
    fields = stat_fields(pid)
    if fields is None or int(fields[3]) != pid:
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
        with open(f"/proc/{pid}/comm", "rb") as f:
            comm = f.read().strip()
    except OSError:
        return False
    return comm == b"sleep" and environ == b""
