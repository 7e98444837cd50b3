"""The /proc readers, and their psutil fallback for systems without /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from supervisor._process import _procfs

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(params=["procfs", "psutil"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "procfs" and not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux /proc")
    monkeypatch.setattr(_procfs, "HAVE_PROCFS", request.param == "procfs")
    return str(request.param)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A child that has finished its exec: it runs, and says so on stdout.

    ``Popen`` returns once the exec closed its error pipe, which the kernel does before it
    writes the new program's environment bounds: until then ``/proc/<pid>/environ`` reads
    empty (seen on a loaded machine). The child's first line is certain to come after.
    """
    env = dict(os.environ, PROCFS_TEST_VAR="marked value")
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('running', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"running\n"
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(30)
        assert process.stdout is not None
        process.stdout.close()


def test_read_stat_of_a_child(backend: str, child: subprocess.Popen[bytes]) -> None:
    stat = _procfs.read_stat(child.pid)
    assert stat is not None
    assert stat.pid == child.pid
    assert stat.ppid == os.getpid()
    assert stat.pgid == child.pid  # its own group: start_new_session
    assert stat.sid == child.pid
    assert not stat.dead
    assert stat.starttime > 0


def test_children_and_pids(backend: str, child: subprocess.Popen[bytes]) -> None:
    assert child.pid in _procfs.children_of(os.getpid())
    assert child.pid in _procfs.all_pids()


def test_read_env_var(backend: str, child: subprocess.Popen[bytes]) -> None:
    assert _procfs.read_env_var(child.pid, "PROCFS_TEST_VAR") == "marked value"
    assert _procfs.read_env_var(child.pid, "PROCFS_TEST_ABSENT") is None


def test_a_gone_process_reads_as_gone(backend: str) -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(30)
    assert _procfs.read_stat(process.pid) is None
    assert _procfs.children_of(process.pid) == []
    assert _procfs.read_env_var(process.pid, "PATH") is None


def test_a_zombie_leader_with_live_threads_is_alive() -> None:
    """Issue 16: a Node worker whose main thread exited shows ``Z`` while its threads run."""
    leader = _procfs.ProcStat(10, "Z", 1, 10, 10, 0, threads=2)
    assert not leader.dead
    assert _procfs.ProcStat(10, "Z", 1, 10, 10, 0, threads=1).dead
    assert _procfs.ProcStat(10, "X", 1, 10, 10, 0).dead


def test_own_pid_is_renewed_in_a_forked_child() -> None:
    # own_pid() stands for os.getpid() on the spawn path (no system call): a forked copy of
    # the supervisor must see its own pid, or it would take the parent's subreaper state,
    # instance id and watchdog for its own.
    from supervisor._process import _reaper

    _reaper.tree_opening()  # a subreaper while it lasts, as the parent of a tree is
    try:
        assert _procfs.own_pid() == os.getpid()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report and leave without running the parent's cleanup
            try:
                ok = _procfs.own_pid() == os.getpid() and not _reaper.subreaper_active()
                os.write(write_end, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write_end)
        try:
            assert os.read(read_end, 1) == b"1"
        finally:
            os.close(read_end)
            os.waitpid(pid, 0)
    finally:
        _reaper.tree_ended()
    assert _procfs.own_pid() == os.getpid()
