"""The posix_spawn path of process trees (issue 8 goals 1 and 2): invariants kept.

Issue 8: the spawn no longer goes through Trio's worker thread (``supervisor/_spawn.py``),
and a tree's end waits on pidfds instead of polling. These tests pin what the old path
guaranteed through ``subprocess.Popen``: own session and group, the marker, no leaked
descriptors, default SIGPIPE, launch failures that leave nothing behind, and a bounded
burst spawned through worker threads.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
import trio

from protocol import CoreError
from supervisor._marker import SCOPE_ENV
from supervisor._spawn import ExitWatch, wait_exits
from supervisor._tree import DEVNULL, open_process_tree

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

PY = sys.executable
PROBE = """
import json, os, signal, sys
print(json.dumps({
    "sid": os.getsid(0), "pgid": os.getpgrp(), "pid": os.getpid(),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "marker": os.environ.get("MARKER_NAME"),
}))
""".replace("MARKER_NAME", SCOPE_ENV)


async def _read_all(stream: trio.abc.ReceiveStream | None) -> bytes:
    assert stream is not None
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


def _write_file(path: str, data: bytes, *, mode: int) -> None:
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def _starttime(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return int(data[data.rfind(b")") + 2 :].split()[19])


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_spawned_child_keeps_the_tree_invariants() -> None:
    leaked_r, leaked_w = os.pipe()
    # A high number nobody else takes, made inheritable: what close_fds=True used to close.
    high = os.dup2(leaked_w, 900, inheritable=True)
    try:
        tree = await open_process_tree([PY, "-S", "-c", PROBE], stdin=DEVNULL)
        async with tree:
            info = json.loads(await _read_all(tree.stdout))
            assert await tree.wait() == 0
    finally:
        for fd in (leaked_r, leaked_w, high):
            os.close(fd)
    assert info["pid"] == tree.pid == info["sid"] == info["pgid"] == tree.pgid
    assert info["marker"] == tree.marker
    assert high not in info["fds"]


async def test_child_gets_sigpipe_at_its_default() -> None:
    # Python ignores SIGPIPE; a child must not inherit that (restore_signals=True).
    tree = await open_process_tree(["grep", "^SigIgn:", "/proc/self/status"], stdin=DEVNULL)
    async with tree:
        line = (await _read_all(tree.stdout)).decode()
        await tree.wait()
    ignored = int(line.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))


async def test_working_directory_path_keeps_them_too(tmp_path: os.PathLike[str]) -> None:
    tree = await open_process_tree(
        [PY, "-S", "-c", PROBE + "\nprint(os.getcwd())"], cwd=tmp_path, stdin=DEVNULL
    )
    async with tree:
        out = (await _read_all(tree.stdout)).decode().splitlines()
        await tree.wait()
    info = json.loads(out[0])
    assert out[1] == os.fspath(tmp_path)
    assert info["pid"] == info["sid"] == info["pgid"]
    assert info["marker"] == tree.marker


async def test_launch_failure_leaves_no_descriptor_behind(tmp_path: os.PathLike[str]) -> None:
    script = os.path.join(os.fspath(tmp_path), "not-executable.sh")
    _write_file(script, b"#!/bin/sh\n", mode=0o644)
    before = _fd_count()
    for _ in range(5):
        with pytest.raises(CoreError) as caught:
            await open_process_tree([script])
        assert caught.value.code == "launch_failed"
    assert _fd_count() == before


async def test_a_burst_of_spawns_goes_through_worker_threads_and_ends_clean() -> None:
    # More trees at once than the threshold: the later ones spawn in worker threads and
    # must be registered before the reaper can see them (nothing is reaped twice).
    trees = [await open_process_tree([PY, "-S", "-c", "pass"]) for _ in range(12)]
    codes = []
    for tree in trees:
        async with tree:
            codes.append(await tree.wait())
    assert codes == [0] * 12


async def test_wait_exits_wakes_when_the_last_process_exits() -> None:
    tree = await open_process_tree(
        [PY, "-S", "-c", "import time; time.sleep(60)"], stdout=DEVNULL, stderr=DEVNULL
    )
    async with tree:
        starttime = _starttime(tree.pid)
        os.kill(tree.pid, signal.SIGKILL)
        started = time.monotonic()
        assert await wait_exits({tree.pid: starttime}, trio.current_time() + 30)
        assert time.monotonic() - started < 20  # woke on the exit, not at the deadline
        assert await tree.wait() == -signal.SIGKILL


async def test_wait_exits_ignores_a_reused_pid() -> None:
    # A start time that does not match means "that process is gone": no wait at all.
    tree = await open_process_tree(
        [PY, "-S", "-c", "import time; time.sleep(60)"], stdout=DEVNULL, stderr=DEVNULL
    )
    async with tree:
        with trio.fail_after(20):
            assert await wait_exits({tree.pid: 1}, trio.current_time() + 60)


async def test_exit_watch_returns_at_the_deadline_then_on_the_exit() -> None:
    """Issue 8 goal 2: ``ExitWatch`` (pidfds plus a timerfd deadline under Trio's clock)."""
    tree = await open_process_tree(
        [PY, "-S", "-c", "import time; time.sleep(60)"], stdout=DEVNULL, stderr=DEVNULL
    )
    async with tree:
        watch = ExitWatch()
        try:
            watch.add(tree.pid, _starttime(tree.pid), verify=True)
            assert watch.pending == 1
            # Twice: the timer is re-armed, not left expired.
            assert not await watch.wait(trio.current_time() + 0.05)
            assert not await watch.wait(trio.current_time() + 0.05)
            os.kill(tree.pid, signal.SIGKILL)
            with trio.fail_after(20):
                assert await watch.wait(trio.current_time() + 60)
            assert watch.pending == 0
        finally:
            watch.close()
        assert await tree.wait() == -signal.SIGKILL


async def test_exit_watch_follows_a_mock_clock(autojump_clock: trio.abc.Clock) -> None:
    """Under a clock that is not Trio's system clock the deadline is Trio's own."""
    tree = await open_process_tree(
        [PY, "-S", "-c", "import time; time.sleep(60)"], stdout=DEVNULL, stderr=DEVNULL
    )
    async with tree:
        watch = ExitWatch()
        try:
            watch.add(tree.pid, _starttime(tree.pid))
            assert not await watch.wait(trio.current_time() + 3600)
        finally:
            watch.close()
        assert tree.returncode is None
        # Ended here rather than by aclose: a TERM grace in virtual time would be over
        # before the real process had any time to act on SIGTERM.
        os.kill(tree.pid, signal.SIGKILL)
        assert await tree.wait() == -signal.SIGKILL
