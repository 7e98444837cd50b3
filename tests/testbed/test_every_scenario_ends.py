"""Every testbed scenario, run through ``supervisor testbed run``, leaves nothing behind.

Each command runs under a small harness that is a child subreaper: whatever the command leaves
-- a process still running, a zombie nobody reaped, its watchdog -- is re-parented to the
harness once the command has exited, and the harness lists it (then ends and reaps it). A
scenario that never ends by itself (it hangs, or waits for a client that never comes) gets
SIGINT a second after its program started, as a user's Ctrl-C: the command ends the program's
tree and exits 130.
"""

from __future__ import annotations

import json
import sys

import pytest
import trio

from supervisor.testbed import SCENARIOS

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs a Linux child subreaper and procfs"
)

PY = sys.executable
#: Small sizes keep the floods and the storm quick; the scenario is the same.
OPTIONS = {
    "flood-stdout": ["--bytes", "3000"],
    "flood-stderr": ["--bytes", "3000"],
    "oversized-notification": ["--bytes", "3000"],
    "request-storm": ["--count", "20"],
    "exit-signal": ["--signal", "9"],
    # Escapees that stay in the program's session, so the tree's end can tell them its own
    # whenever they were forked. One that also left the session and dropped the marker
    # before any scan saw it is found by a supervisor's crash cleanup (tests/testbed/
    # test_crash.py), not yet by a tree's end (the teardown identity of _tree._belongs).
    "escape-artist": ["--trick", "pgrp", "--count", "4"],
}

HARNESS = r"""
import ctypes, json, os, signal, subprocess, sys, time

# A child subreaper: what the command leaves behind is re-parented here.
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
argv = sys.argv[1:]
command = subprocess.Popen(
    argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
)


def program_started():
    # The program's main process is the command's child that carries the scope marker (the
    # watchdog carries none). The command handles SIGINT from before that spawn on.
    for tid in os.listdir(f"/proc/{command.pid}/task"):
        with open(f"/proc/{command.pid}/task/{tid}/children") as f:
            for pid in f.read().split():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as env:
                        if b"SUPERVISOR_SCOPE=" in env.read():
                            return True
                except OSError:
                    pass
    return False


deadline = time.monotonic() + 60
try:
    while command.poll() is None and not program_started() and time.monotonic() < deadline:
        time.sleep(0.02)
except OSError:
    pass  # the command exited meanwhile
try:
    command.wait(timeout=1.0)  # the program's time to do its thing, or to end by itself
    interrupted = False
except subprocess.TimeoutExpired:
    command.send_signal(signal.SIGINT)  # Ctrl-C: the command ends the program's tree
    interrupted = True
_, stderr = command.communicate(timeout=60)


def children():
    found = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            found += [int(pid) for pid in f.read().split()]
    return found


def describe(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    state = data[data.rfind(b")") + 2 :].split()[0].decode()
    return f"pid {pid} state {state}: {cmdline[:120]}"


# A process killed at the very end of the command may take a moment to be re-parented and
# exit: give leftovers a generous bound to vanish before naming them.
deadline = time.monotonic() + 5
while children() and time.monotonic() < deadline:
    time.sleep(0.05)
left = [d for d in map(describe, children()) if d is not None]
for pid in children():
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
for pid in children():
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
print(json.dumps({
    "status": command.returncode,
    "interrupted": interrupted,
    "left": left,
    "stderr": stderr.decode(errors="replace")[-2000:],
}))
"""


def _arguments(name: str) -> list[str]:
    scenario = SCENARIOS[name]
    extra = list(OPTIONS.get(name, []))
    if "--exit" in scenario.options:
        extra.append("--exit")  # leave the processes behind: the command must end them
    return extra


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_the_scenario_leaves_nothing_behind(name: str) -> None:
    command = [PY, "-m", "supervisor", "testbed", "run", name, *_arguments(name)]
    done = await trio.run_process(
        [PY, "-c", HARNESS, *command], capture_stdout=True, capture_stderr=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    report = json.loads(done.stdout)
    assert report["left"] == [], report
    # The command ended as a command does: the program's status, or 130 after Ctrl-C.
    if report["interrupted"]:
        assert report["status"] == 130, report
    else:
        assert 0 <= report["status"] < 256, report
    assert "Traceback" not in report["stderr"] or name == "crash-on-initialize", report


def test_every_scenario_is_covered() -> None:
    """A new scenario is tested above without further work; its options, when it needs small
    ones, go in ``OPTIONS``."""
    assert set(OPTIONS) <= set(SCENARIOS)
