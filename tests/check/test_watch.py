"""The checker's view of a program's descendants (supervisor/_check/_watch.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from supervisor._check._watch import Descendants
from supervisor._process._procfs import HAVE_PROCFS, children_of

pytestmark = pytest.mark.skipif(not HAVE_PROCFS, reason="reads /proc")

# The child sleeps between its fork and its exec: seen then, it shows its parent's command line.
FORK_THEN_EXEC = """
import os, sys, time
pid = os.fork()
if pid == 0:
    time.sleep(1.0)
    os.execv("/bin/sleep", ["/bin/sleep", "30"])
print(pid, flush=True)
os.waitpid(pid, 0)
"""


def test_a_child_first_seen_before_its_exec_is_named_by_what_it_execs() -> None:
    """A child sampled between its fork and its exec is named by its own command line once it
    has exec'd (it named the parent's: the reaps-children evidence of debugpy's launcher read
    `python -m debugpy.adapter` under load)."""
    program = subprocess.Popen([sys.executable, "-c", FORK_THEN_EXEC], stdout=subprocess.PIPE)
    try:
        assert program.stdout is not None
        child = int(program.stdout.readline())
        watch = Descendants(program.pid, None)
        watch.sample()
        (first,) = (cmd for (pid, _start), cmd in watch.seen.items() if pid == child)
        assert first.startswith(sys.executable), first  # the parent's, before the exec
        deadline = time.monotonic() + 30
        while not (cmd := _cmdline(child)).startswith("/bin/sleep"):
            assert time.monotonic() < deadline, cmd
            time.sleep(0.05)
        watch.sample()
        (now,) = (cmd for (pid, _start), cmd in watch.seen.items() if pid == child)
        assert now.startswith("/bin/sleep 30"), now
    finally:
        for pid in children_of(program.pid):
            os.kill(pid, 9)
        program.kill()
        program.wait()
        if program.stdout is not None:
            program.stdout.close()


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()
