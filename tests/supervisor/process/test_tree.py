"""Process trees with real processes: marker, session, validation, ending a tree.

DESIGN.md invariants 1-3 and 11; issue 2 section 3. Timings are real (the trees
are real processes), so bounds are generous and nothing sleeps to synchronise:
tests read the peers' own "ready"/pid lines and observe /proc.
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
from supervisor._process._marker import SCOPE_ENV, instance_id, parse_marker
from supervisor._process._tree import DEVNULL, ProcessTree, open_process_tree
from tests._procfs import stat_fields, state

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

PEERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "peers")
ENV_INFO = os.path.join(PEERS, "env_info.py")
IGNORE_TERM = os.path.join(PEERS, "ignore_term.py")
ESCAPE = os.path.join(PEERS, "escape.py")
PY = sys.executable
SLEEP = [PY, "-c", "import time\nwhile True: time.sleep(3600)"]


def ppid_of(pid: int) -> int | None:
    fields = stat_fields(pid)
    return None if fields is None else int(fields[1])


def environ_of(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read()


def my_children() -> set[int]:
    found: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            found.update(int(p) for p in f.read().split())
    return found


async def read_line(stream: trio.abc.ReceiveStream | None) -> bytes:
    assert stream is not None
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(4096)
        assert chunk, f"EOF before a full line: {data!r}"
        data += chunk
    return data


async def tree_info(tree: ProcessTree) -> dict[str, object]:
    info = json.loads(await read_line(tree.stdout))
    assert isinstance(info, dict)
    await tree.wait()
    return info


# -- invariant 1: marker, session, group ------------------------------------------


async def test_marker_is_set_unique_and_names_this_instance() -> None:
    async with await open_process_tree([PY, ENV_INFO]) as first:
        info1 = await tree_info(first)
    async with await open_process_tree([PY, ENV_INFO]) as second:
        info2 = await tree_info(second)
    assert info1["marker"] == first.marker
    assert info2["marker"] == second.marker
    assert first.marker != second.marker
    parsed = parse_marker(first.marker)
    assert parsed is not None
    assert parsed.instance == instance_id()
    assert parsed.pid == os.getpid()
    # The pid namespace and the boot name the instance beside the pid and its start time.
    assert parsed.pidns == os.stat("/proc/self/ns/pid").st_ino
    boot = trio.Path("/proc/sys/kernel/random/boot_id")
    assert parsed.boot == (await boot.read_text()).strip().replace("-", "")


@pytest.mark.parametrize("override", ["forged/value", None])
async def test_caller_env_cannot_override_or_remove_marker(override: str | None) -> None:
    os.environ["TREE_TEST_REMOVE_ME"] = "1"
    try:
        tree = await open_process_tree(
            [PY, ENV_INFO, "TREE_TEST_ADDED", "TREE_TEST_REMOVE_ME", "PATH"],
            env={SCOPE_ENV: override, "TREE_TEST_ADDED": "yes", "TREE_TEST_REMOVE_ME": None},
        )
    finally:
        del os.environ["TREE_TEST_REMOVE_ME"]
    async with tree:
        info = await tree_info(tree)
    assert info["marker"] == tree.marker
    assert info["vars"] == {
        "TREE_TEST_ADDED": "yes",
        "TREE_TEST_REMOVE_ME": None,
        "PATH": os.environ.get("PATH"),
    }


async def test_child_leads_its_own_session_and_group() -> None:
    async with await open_process_tree([PY, ENV_INFO]) as tree:
        info = await tree_info(tree)
    assert tree.pgid == tree.pid == info["pid"]
    assert info["pgid"] == info["sid"] == tree.pid
    assert tree.pgid != os.getpgrp()
    assert tree.returncode == 0


def test_no_public_constructor() -> None:
    with pytest.raises(TypeError):
        ProcessTree()  # type: ignore[call-arg]


# -- bad input starts nothing -------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "cwd", "code", "needle"),
    [
        ([], None, "invalid_request", "empty"),
        ("echo hi", None, "invalid_request", "list"),
        ([PY, 3], None, "invalid_request", "argv[1]"),
        ([PY, b"x"], None, "invalid_request", "argv[1]"),
        ([PY, "a\0b"], None, "invalid_request", "NUL"),
        ([""], None, "invalid_request", "argv[0]"),
        (["no-such-program-xyz"], None, "launch_failed", "no-such-program-xyz"),
        (["/nonexistent/bin/prog"], None, "launch_failed", "/nonexistent/bin/prog"),
        (["./missing-relative"], None, "launch_failed", "missing-relative"),
        ([PY, "-c", "pass"], "/nonexistent-dir-xyz", "launch_failed", "/nonexistent-dir-xyz"),
        ([PY, "-c", "pass"], ENV_INFO, "launch_failed", "not a directory"),
        ([PEERS], None, "launch_failed", "directory"),
    ],
)
async def test_bad_input_is_rejected_before_anything_starts(
    argv: object, cwd: str | None, code: str, needle: str
) -> None:
    before = my_children()
    with pytest.raises(CoreError) as caught:
        await open_process_tree(argv, cwd=cwd)  # type: ignore[arg-type]
    assert caught.value.code == code
    assert needle in caught.value.message
    assert my_children() == before


@pytest.mark.parametrize("env", [{"A=B": "x"}, {"": "x"}, {"X": "a\0b"}, {"X": 3}])
async def test_bad_env_is_invalid_request(env: dict[str, object]) -> None:
    with pytest.raises(CoreError) as caught:
        await open_process_tree([PY, "-c", "pass"], env=env)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_request"


async def test_executable_is_looked_up_on_the_childs_path() -> None:
    with pytest.raises(CoreError) as caught:
        await open_process_tree(["env"], env={"PATH": "/nonexistent-path-dir"})
    assert caught.value.code == "launch_failed"


async def test_relative_executable_resolves_against_cwd() -> None:
    tree = await open_process_tree(
        ["./" + os.path.basename(PY), "-c", "pass"], cwd=os.path.dirname(PY), stdin=DEVNULL
    )
    assert await tree.wait() == 0
    await tree.aclose()


# -- ending a tree --------------------------------------------------------------------


async def test_term_ends_a_cooperative_tree_early() -> None:
    tree = await open_process_tree(SLEEP)
    started = time.monotonic()
    report = await tree.aclose(term_grace_ms=60_000)
    # Returned as soon as the tree died, not after the 60 s grace.
    assert time.monotonic() - started < 10
    assert report.returncode == -signal.SIGTERM
    assert report.terminated == (tree.pid,)
    assert report.killed == ()
    assert report.unkillable == ()
    assert state(tree.pid) is None


async def test_term_ignoring_child_is_killed_after_grace() -> None:
    tree = await open_process_tree([PY, IGNORE_TERM])
    assert await read_line(tree.stdout) == b"ready\n"
    report = await tree.aclose(term_grace_ms=200, kill_wait_ms=5000)
    assert report.returncode == -signal.SIGKILL
    assert report.killed == (tree.pid,)
    assert report.duration_ms >= 200
    assert state(tree.pid) is None


async def test_polite_step_closing_stdin_needs_no_signal() -> None:
    tree = await open_process_tree([PY, "-c", "import sys; sys.stdin.read()"])
    assert tree.stdin is not None
    report = await tree.aclose(polite=tree.stdin.aclose, polite_timeout_ms=30_000)
    assert report.polite_attempted
    assert report.returncode == 0
    assert report.terminated == ()


async def test_polite_step_that_fails_or_hangs_is_bounded() -> None:
    async def hang() -> None:
        raise RuntimeError("peer refused")

    tree = await open_process_tree(SLEEP)
    report = await tree.aclose(polite=hang, polite_timeout_ms=100)
    assert report.polite_error is not None
    assert "peer refused" in report.polite_error
    assert report.returncode == -signal.SIGTERM


@pytest.mark.parametrize("exit_first", [False, True])
async def test_grandchild_in_new_session_ignoring_term_is_gone(exit_first: bool) -> None:
    argv = [PY, ESCAPE, "setsid"] + (["--exit"] if exit_first else [])
    tree = await open_process_tree(argv)
    grandchild = int(await read_line(tree.stdout))
    assert state(grandchild) not in (None, "Z")
    if exit_first:
        assert await tree.wait() == 0
        # Subreaper: the orphan was reparented to us, not to init.
        assert ppid_of(grandchild) == os.getpid()
    report = await tree.aclose(term_grace_ms=200)
    assert grandchild in report.swept
    assert grandchild in report.killed
    assert report.unkillable == ()
    # Gone, and reaped by us (it became our child): not even a zombie.
    assert state(grandchild) is None


async def test_escapee_without_marker_is_found_by_ancestry() -> None:
    tree = await open_process_tree([PY, ESCAPE, "setsid-clean"])
    grandchild = int(await read_line(tree.stdout))
    assert SCOPE_ENV.encode() not in environ_of(grandchild)
    report = await tree.aclose(term_grace_ms=200)
    assert grandchild in report.swept
    assert state(grandchild) is None


#: A Python member that starts, from a thread of its own (which then stays), a child in a new
#: session with an empty environment (no marker): only the child list of that thread
#: (``/proc/<pid>/task/<tid>/children``) ties the child to the tree.
_ESCAPE_FROM_A_THREAD = f"""
import subprocess, sys, threading, time
def start():
    child = subprocess.Popen([sys.executable, {IGNORE_TERM!r}], start_new_session=True,
                             stdout=subprocess.PIPE, env={{}})
    child.stdout.readline()
    print(child.pid, flush=True)
    time.sleep(3600)
threading.Thread(target=start, daemon=True).start()
time.sleep(3600)
"""


@pytest.mark.parametrize("shape", ["child", "grandchild", "from-a-thread"])
async def test_sigkill_without_grace_ends_an_unmarked_escapee(shape: str) -> None:
    """Issue 26: with no grace every member is SIGKILLed as soon as its children are listed
    (its thread count read from its ``task`` directory), not after a scan of the whole
    tree. An escapee in a new session without the marker, whose parent that kill ends, is
    still tied to the tree by ancestry: it is killed, reported swept, and reaped by us."""
    argv = {
        "child": [PY, ESCAPE, "setsid-clean"],
        # ``sh`` stays the parent of the escaping program (no exec of a last command).
        "grandchild": ["/bin/sh", "-c", f"{PY} {ESCAPE} setsid-clean; exit 0"],
        "from-a-thread": [PY, "-c", _ESCAPE_FROM_A_THREAD],
    }[shape]
    tree = await open_process_tree(argv)
    escapee = int(await read_line(tree.stdout))
    assert SCOPE_ENV.encode() not in environ_of(escapee)
    assert os.getsid(escapee) == escapee
    report = await tree.aclose(term_grace_ms=0)
    assert report.returncode == -signal.SIGKILL
    assert escapee in report.killed
    assert escapee in report.swept
    assert report.unkillable == ()
    assert state(escapee) is None


async def test_stopped_tree_gets_sigcont_with_sigterm() -> None:
    tree = await open_process_tree(SLEEP)
    os.kill(tree.pid, signal.SIGSTOP)
    started = time.monotonic()
    report = await tree.aclose(term_grace_ms=60_000)
    # A stopped process acts on SIGTERM only once continued; no SIGKILL was needed.
    assert time.monotonic() - started < 10
    assert report.returncode == -signal.SIGTERM
    assert report.killed == ()


async def test_double_forked_daemon_is_gone() -> None:
    tree = await open_process_tree([PY, ESCAPE, "daemon"])
    daemon = int(await read_line(tree.stdout))
    assert state(daemon) not in (None, "Z")
    assert os.getsid(daemon) != tree.pid
    assert ppid_of(daemon) == os.getpid()
    report = await tree.aclose(term_grace_ms=200)
    assert daemon in report.swept
    assert state(daemon) is None


async def test_main_exit_still_ends_what_it_left_running() -> None:
    tree = await open_process_tree([PY, ESCAPE, "hold", "--exit"])
    leftover = int(await read_line(tree.stdout))
    assert await tree.wait() == 0
    assert state(leftover) not in (None, "Z")
    report = await tree.aclose()
    assert report.returncode == 0
    assert leftover in report.terminated
    assert state(leftover) is None


async def test_aclose_twice_joins_the_first() -> None:
    tree = await open_process_tree([PY, IGNORE_TERM])
    assert await read_line(tree.stdout) == b"ready\n"
    reports = []

    async def close() -> None:
        reports.append(await tree.aclose(term_grace_ms=200))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close)
        nursery.start_soon(close)
    assert len(reports) == 2
    assert reports[0] is reports[1]
    assert await tree.aclose(term_grace_ms=0) is reports[0]


async def test_aclose_from_a_cancelled_scope_still_ends_the_tree() -> None:
    tree = await open_process_tree([PY, ESCAPE, "setsid"])
    grandchild = int(await read_line(tree.stdout))
    with trio.CancelScope() as scope:
        scope.cancel()
        report = await tree.aclose(term_grace_ms=200)
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert report.returncode == -signal.SIGTERM
    assert state(grandchild) is None
    assert state(tree.pid) is None


async def test_negative_bound_is_a_value_error() -> None:
    tree = await open_process_tree(SLEEP)
    with pytest.raises(ValueError, match="term_grace_ms"):
        await tree.aclose(term_grace_ms=-1)
    await tree.aclose()


FORK_ON_TERM = """
import os, signal, subprocess, sys, time
SLEEPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
def on_term(*_):
    # Ignored from its birth (the disposition is inherited across exec), not only once its
    # Python has started: a rescan's SIGTERM can reach it before that on a loaded machine.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # New session and an empty environment: only ancestry can find it.
    child = subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=True, env={})
    print(child.pid, flush=True)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


async def test_member_forked_during_the_grace_is_found_and_killed() -> None:
    """Issue 8 goal 2: the pidfd waits of the grace still rescan the tree, so a member
    that appears after SIGTERM (and leaves the session, without the marker) is killed."""
    tree = await open_process_tree([PY, "-c", FORK_ON_TERM])
    assert await read_line(tree.stdout) == b"ready\n"
    reports = []

    async def close() -> None:
        reports.append(await tree.aclose(term_grace_ms=1000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close)
        late = int(await read_line(tree.stdout))
    (report,) = reports
    assert report.returncode == -signal.SIGKILL
    assert late in report.killed
    assert late in report.swept
    assert report.unkillable == ()
    assert state(late) is None
    assert state(tree.pid) is None


async def test_term_ignoring_tree_with_escapee_is_killed_at_the_deadline() -> None:
    """The SIGKILL at the end of the grace reaches the members outside the group too."""
    tree = await open_process_tree([PY, ESCAPE, "setsid"])
    grandchild = int(await read_line(tree.stdout))
    os.kill(tree.pid, signal.SIGSTOP)  # stopped: it acts on SIGTERM only after SIGCONT
    report = await tree.aclose(term_grace_ms=100)
    assert grandchild in report.killed
    assert report.unkillable == ()
    assert state(grandchild) is None
    assert state(tree.pid) is None


async def test_a_spawn_goes_to_a_worker_thread_once_another_tree_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A spawn blocks its thread until the child has exec'd: inline only while no other tree
    # of ours runs (nothing else waits then), in a worker thread as soon as one does, so the
    # Trio thread keeps serving the others (2 000 jobs over 200 lanes, README).
    threaded: list[object] = []
    run_sync = trio.to_thread.run_sync

    async def counting(fn: object, *args: object, **kwargs: object) -> object:
        threaded.append(fn)
        return await run_sync(fn, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    first = await open_process_tree(SLEEP, stdin=DEVNULL)
    try:
        assert threaded == []
        second = await open_process_tree(SLEEP, stdin=DEVNULL)
        await second.aclose()
        assert len(threaded) == 1
    finally:
        await first.aclose()
    lone = await open_process_tree(["true"], stdin=DEVNULL)
    await lone.aclose()
    assert len(threaded) == 1
