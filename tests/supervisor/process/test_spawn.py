"""The posix_spawn path of process trees (issue 8 goals 1 and 2): invariants kept.

Issue 8: the spawn no longer goes through Trio's worker thread (``supervisor/_process/_spawn.py``),
and a tree's end waits on pidfds instead of polling. These tests pin what the old path
guaranteed through ``subprocess.Popen``: own session and group, the marker, no leaked
descriptors, default SIGPIPE, launch failures that leave nothing behind, and a bounded
burst spawned through worker threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time

import pytest
import trio

import supervisor._process._spawn
from protocol import CoreError
from supervisor._process._marker import SCOPE_ENV
from supervisor._process._procfs import children_of
from supervisor._process._spawn import ExitWatch, wait_exits
from supervisor._process._tree import DEVNULL, open_process_tree
from supervisor._process._watchdog import ensure_watchdog
from tests._procfs import stat_fields, state

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
    fields = stat_fields(pid)
    assert fields is not None
    return int(fields[19])


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


async def test_exit_watch_reaps_exited_children_through_their_pidfds() -> None:
    """``reap_exited`` reaps the watched processes that exited and are our children (the
    orphans a tree end adopted), leaves those in ``skip`` (a main process its
    ``SpawnedProcess`` reaps) and never touches a process that is not our child."""
    # The peer is the raw system call on purpose: a child no tree or Trio knows about.
    child = os.posix_spawn("/bin/sleep", ["sleep", "60"], os.environ)  # noqa: ASYNC221
    skipped = os.posix_spawn("/bin/sleep", ["sleep", "60"], os.environ)  # noqa: ASYNC221
    # A grandchild (its parent, the shell, alive and waiting): exits but is not ours.
    tree = await open_process_tree(
        ["/bin/sh", "-c", "sleep 60 & wait"], stdout=DEVNULL, stderr=DEVNULL
    )
    async with tree:
        children: list[int] = []
        with trio.fail_after(20):
            while not children:
                await trio.sleep(0.01)
                children = children_of(tree.pid)
        grandchild = children[0]
        watch = ExitWatch()
        try:
            for pid in (child, skipped, grandchild):
                watch.add(pid, _starttime(pid), verify=True)
            for pid in (child, skipped, grandchild):
                os.kill(pid, signal.SIGKILL)
            with trio.fail_after(20):
                assert await watch.wait(trio.current_time() + 60)
            assert watch.reap_exited({skipped}) == [child]
            assert state(child) is None  # reaped, not a zombie
            assert state(skipped) == "Z"  # left to whoever reaps it
            assert watch.reap_exited({skipped}) == []  # once only
        finally:
            watch.close()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(skipped, 0)  # noqa: ASYNC222  # a zombie: returns at once


async def test_exit_watch_real_time_wait_after_a_fired_timer_still_waits() -> None:
    """A real-time wait (the one after SIGKILL) under Trio's system clock uses Trio's own
    deadline, not the timerfd; the timer an earlier precise wait armed, fired and readable,
    must not end it at once (it would spin for the whole bound)."""
    tree = await open_process_tree(
        [PY, "-S", "-c", "import time; time.sleep(60)"], stdout=DEVNULL, stderr=DEVNULL
    )
    async with tree:
        watch = ExitWatch()
        try:
            watch.add(tree.pid, _starttime(tree.pid), verify=True)
            assert not await watch.wait(trio.current_time() + 0.02)  # the timer fires
            started = time.perf_counter()
            assert not await watch.wait(trio.current_time() + 0.2, real_time=True)
            assert time.perf_counter() - started >= 0.15
        finally:
            watch.close()


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


# -- programs on a PTY: posix_spawn opens the slave, which becomes the controlling terminal --

TTY_PROBE = """
import json, os
# Opening /dev/tty succeeds only with a controlling terminal.
os.close(os.open("/dev/tty", os.O_RDWR))
print(json.dumps({
    "tty": [os.ttyname(fd) for fd in (0, 1, 2)],
    "foreground": os.tcgetpgrp(0) == os.getpgrp(),
    "sid": os.getsid(0), "pgid": os.getpgrp(), "pid": os.getpid(), "cwd": os.getcwd(),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "marker": os.environ.get("MARKER_NAME"),
}))
""".replace("MARKER_NAME", SCOPE_ENV)


def _read_master(master: int) -> bytes:
    """Everything the terminal's programs wrote, until every slave side is closed (EIO)."""
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: no slave side open any more
            return data
        if not chunk:
            return data
        data += chunk


@pytest.mark.parametrize("path", ["posix_spawn", "posix_spawn with cwd", "fork fallback"])
async def test_pty_program_gets_the_terminal_as_its_controlling_one(
    path: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 8 goals 1 and 7: ``os.posix_spawn`` (no cwd), the C library's with its chdir
    action (a cwd), and the fork + ``TIOCSCTTY`` fallback kept for other systems all give the
    same child: the PTY on fds 0-2, as its controlling terminal, in the foreground."""
    cwd = None if path == "posix_spawn" else os.fspath(tmp_path)
    if path == "fork fallback":
        monkeypatch.setattr(supervisor._process._spawn, "_forks", lambda cwd, no_tty_path: True)
    leaked_r, leaked_w = os.pipe()
    high = os.dup2(leaked_w, 901, inheritable=True)
    master, slave = os.openpty()
    try:
        tree = await open_process_tree([PY, "-S", "-c", TTY_PROBE], cwd=cwd, pty_slave_fd=slave)
        expected_tty = os.ttyname(slave)
        os.close(slave)
        async with tree:
            assert (tree.stdin, tree.stdout, tree.stderr) == (None, None, None)
            assert await tree.wait() == 0
            output = await trio.to_thread.run_sync(_read_master, master)
    finally:
        for fd in (leaked_r, leaked_w, high, master):
            os.close(fd)
        with contextlib.suppress(OSError):
            os.close(slave)
    info = json.loads(output.decode().strip().splitlines()[-1])
    assert info["tty"] == [expected_tty] * 3
    assert info["foreground"] is True
    assert info["pid"] == tree.pid == info["sid"] == info["pgid"] == tree.pgid
    assert info["cwd"] == (cwd or os.getcwd())
    assert info["marker"] == tree.marker
    assert high not in info["fds"]
    assert [fd for fd in info["fds"] if fd > 2] == [3]  # the listing's own descriptor


async def test_closing_the_master_hangs_up_the_pty_program() -> None:
    """The kernel's hang-up reaches only a controlling process: closing the master sends
    SIGHUP to the program spawned on the slave (its handler's exit status proves it)."""
    script = (
        "import os, signal\n"
        "signal.signal(signal.SIGHUP, lambda *_: os._exit(7))\n"
        "os.write(1, b'ready\\n')\n"
        "while True:\n"
        "    signal.pause()\n"
    )
    master, slave = os.openpty()
    try:
        tree = await open_process_tree([PY, "-S", "-c", script], pty_slave_fd=slave)
    finally:
        os.close(slave)
    async with tree:
        try:
            with trio.fail_after(30):
                seen = b""
                while b"ready" not in seen:
                    await trio.lowlevel.wait_readable(master)
                    seen += os.read(master, 1024)
        finally:
            trio.lowlevel.notify_closing(master)
            os.close(master)
        with trio.fail_after(30):
            assert await tree.wait() == 7


async def test_pty_launch_failure_with_a_cwd_leaves_nothing(tmp_path: os.PathLike[str]) -> None:
    """An exec failure through the C library's posix_spawn (the path a cwd takes) is
    ``launch_failed`` like any other, and leaves no descriptor behind."""
    master, slave = os.openpty()
    try:
        before = _fd_count()
        script = os.path.join(os.fspath(tmp_path), "not-executable.sh")
        _write_file(script, b"#!/bin/sh\n", mode=0o644)
        with pytest.raises(CoreError) as caught:
            await open_process_tree([script], cwd=tmp_path, pty_slave_fd=slave)
        assert caught.value.code == "launch_failed"
        assert _fd_count() == before
    finally:
        os.close(slave)
        os.close(master)


def test_a_killed_watchdog_is_replaced_by_the_next_check() -> None:
    """``ensure_watchdog`` (run before every spawn) checks its watchdog first with one
    ``waitpid``; one killed behind our back is reaped and replaced."""
    first = ensure_watchdog()
    assert first is not None
    assert ensure_watchdog() == first
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while state(first) not in ("Z", None) and time.monotonic() < deadline:
        time.sleep(0.01)
    second = ensure_watchdog()
    assert second is not None
    assert second != first
    assert state(first) is None  # reaped
    assert ensure_watchdog() == second
