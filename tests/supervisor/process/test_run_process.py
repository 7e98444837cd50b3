"""``run_process`` (the ``process.run`` command) with real processes.

Issue 2 section 3; DESIGN.md invariants 2 and 10. Bounds on real timings are
generous; nothing sleeps to synchronise.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time

import pytest
import trio

from protocol import CoreError
from supervisor._process._oneshot import ProcessResult, run_process
from tests._procfs import state

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

PEERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "peers")
ESCAPE = os.path.join(PEERS, "escape.py")
FLOOD = os.path.join(PEERS, "flood.py")
SLOW_OUTPUT = os.path.join(PEERS, "slow_output.py")
IGNORE_TERM = os.path.join(PEERS, "ignore_term.py")
PY = sys.executable


async def test_exit_code_and_output() -> None:
    result = await run_process(
        [PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"]
    )
    assert result.exit_code == 3
    assert result.signal is None
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert not result.timed_out
    assert not result.truncated
    assert result.duration_ms > 0


async def test_killed_by_signal_reports_the_signal() -> None:
    result = await run_process([PY, "-c", "import os; os.kill(os.getpid(), 9)"])
    assert result.exit_code is None
    assert result.signal == signal.SIGKILL


async def test_to_wire_uses_reference_names() -> None:
    result = ProcessResult(0, None, "a", "b", False, True, 12)
    assert result.to_wire() == {
        "exitCode": 0,
        "signal": None,
        "stdout": "a",
        "stderr": "b",
        "timedOut": False,
        "truncated": True,
        "durationMs": 12,
    }


async def test_stdin_bytes_are_fed_and_none_is_devnull() -> None:
    echo = [PY, "-c", "import sys; sys.stdout.write(sys.stdin.read())"]
    assert (await run_process(echo, stdin=b"hello\n")).stdout == "hello\n"
    assert (await run_process(echo)).stdout == ""


async def test_env_reaches_the_child() -> None:
    result = await run_process(
        [PY, "-c", "import os; print(os.environ['RUN_TEST_VAR'])"], env={"RUN_TEST_VAR": "42"}
    )
    assert result.stdout == "42\n"


async def test_each_child_gets_the_environment_of_its_own_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The spawn keeps the last environment built (all but the scope marker): a change of a
    # value, of our own environment, or a variable removed must still reach the next child,
    # and each child gets a marker of its own, once.
    show = ["sh", "-c", 'echo "${RUN_TEST_VAR-unset}"; env | grep -c "^SUPERVISOR_SCOPE="']
    envs = ({"RUN_TEST_VAR": "1"}, {"RUN_TEST_VAR": "2"}, None, {"RUN_TEST_VAR": "é"})
    seen = [(await run_process(show, env=env)).stdout for env in envs]
    monkeypatch.setenv("RUN_TEST_VAR", "ours")
    seen.append((await run_process(show)).stdout)
    seen.append((await run_process(show, env={"RUN_TEST_VAR": None})).stdout)
    assert seen == ["1\n1\n", "2\n1\n", "unset\n1\n", "é\n1\n", "ours\n1\n", "unset\n1\n"]
    markers = [(await run_process(["sh", "-c", "echo $SUPERVISOR_SCOPE"])).stdout for _ in range(3)]
    assert len(set(markers)) == 3


async def test_invalid_utf8_is_replaced() -> None:
    result = await run_process([PY, "-c", "import os; os.write(1, b'a\\xffb')"])
    assert result.stdout == "a\ufffdb"


async def test_output_cap_truncates_without_blocking_the_program() -> None:
    seen: dict[str, int] = {"stdout": 0, "stderr": 0}

    def on_output(stream: str, chunk: bytes) -> None:
        seen[stream] += len(chunk)

    size = 5 * 1024 * 1024
    result = await run_process([PY, FLOOD, str(size)], max_output_bytes=1024, on_output=on_output)
    # The program ran to completion (exit 0): the cap neither blocked nor killed it.
    assert result.exit_code == 0
    assert not result.timed_out
    assert result.truncated
    assert result.stdout == "x" * 1024
    assert result.stderr == "x" * 1024
    assert seen == {"stdout": size, "stderr": size}


async def test_concurrent_flood_on_both_streams_is_kept_whole() -> None:
    size = 2 * 1024 * 1024
    result = await run_process([PY, FLOOD, str(size)])
    assert result.exit_code == 0
    assert len(result.stdout) == len(result.stderr) == size
    assert not result.truncated


async def test_a_flood_read_in_grown_pieces_keeps_every_byte_in_order() -> None:
    """A stream that fills its pipe is read into one reused buffer through a grown pipe
    (``_Multiplexer._read``): what is kept and every chunk handed to ``on_output`` are
    still the program's bytes, in order, each chunk a copy of its own."""
    chunks: list[bytes] = []

    def on_output(stream: str, chunk: bytes) -> None:
        if stream == "stdout":
            chunks.append(chunk)

    # 8 MiB of numbered lines: a reused buffer handed out by reference would repeat lines.
    # Written at once, so that the pipe stays full.
    program = (
        "import sys\nsys.stdout.buffer.write(b''.join(b'%09d\\n' % i for i in range(800_000)))\n"
    )
    expected = b"".join(b"%09d\n" % i for i in range(800_000))
    result = await run_process(
        [PY, "-c", program], max_output_bytes=3 * 1024 * 1024, on_output=on_output
    )
    assert result.exit_code == 0
    assert result.truncated
    assert b"".join(chunks) == expected
    assert result.stdout == expected[: 3 * 1024 * 1024].decode()


@pytest.mark.skipif(not hasattr(os, "splice"), reason="needs splice (Linux)")
@pytest.mark.parametrize("splice_works", [True, False])
async def test_output_past_the_cap_nobody_takes_is_discarded_in_the_kernel(
    monkeypatch: pytest.MonkeyPatch, splice_works: bool
) -> None:
    """Past the cap, with no on_output, the bytes are only counted: they are spliced to
    /dev/null, never copied to us; the head kept is the program's first bytes exactly, the
    program is not blocked, and where splice refuses the pipe (EINVAL) they are read as
    before, to the same result."""
    spliced: list[int] = []
    real_splice = os.splice

    def splice(src: int, dst: int, count: int, *args: object, **kwargs: object) -> int:
        if not splice_works:
            raise OSError(22, "Invalid argument")
        moved = real_splice(src, dst, count, *args, **kwargs)  # type: ignore[arg-type]
        spliced.append(moved)
        return moved

    monkeypatch.setattr(os, "splice", splice)
    lines = 800_000  # 8 MB of numbered lines, past a 3 MiB cap
    program = (
        "import sys\nsys.stdout.buffer.write(b''.join(b'%09d\\n' % i for i in range(800_000)))\n"
    )
    expected = b"".join(b"%09d\n" % i for i in range(lines))
    result = await run_process([PY, "-c", program], max_output_bytes=3 * 1024 * 1024)
    assert result.exit_code == 0
    assert result.truncated
    assert result.stdout == expected[: 3 * 1024 * 1024].decode()
    if splice_works:
        # What was past the cap went by splice (some of it may have come with the read
        # that reached the cap).
        assert len(expected) - 3 * 1024 * 1024 - 1024 * 1024 <= sum(spliced)
    else:
        assert spliced == []


async def test_output_exactly_at_the_cap_is_not_truncated() -> None:
    result = await run_process([PY, "-c", "print('x' * 9)"], max_output_bytes=10)
    assert result.stdout == "x" * 9 + "\n"
    assert not result.truncated


async def test_timeout_ends_the_tree_and_keeps_earlier_output() -> None:
    result = await run_process([PY, SLOW_OUTPUT], timeout_ms=1500, term_grace_ms=200)
    assert result.timed_out
    assert result.stdout == "before\n"
    assert result.stderr == "err-before\n"
    assert result.signal == signal.SIGTERM
    assert result.exit_code is None


async def test_timeout_with_term_ignoring_child_escalates_to_kill() -> None:
    result = await run_process([PY, IGNORE_TERM], timeout_ms=1500, term_grace_ms=200)
    assert result.timed_out
    assert result.stdout == "ready\n"
    assert result.signal == signal.SIGKILL


@pytest.mark.parametrize("mode", ["hold", "hold-ignore"])
async def test_grandchild_holding_stdout_does_not_stretch_the_call(mode: str) -> None:
    started = time.monotonic()
    result = await run_process([PY, ESCAPE, mode, "--exit"], term_grace_ms=200)
    elapsed = time.monotonic() - started
    assert result.exit_code == 0
    leftover = int(result.stdout.split()[0])
    # The holder sleeps for an hour; the call ends within exit + grace + drain.
    assert elapsed < 8
    assert state(leftover) is None


async def test_leftover_daemon_is_ended_after_a_normal_exit() -> None:
    result = await run_process([PY, ESCAPE, "daemon", "--exit"], term_grace_ms=200)
    assert result.exit_code == 0
    daemon = int(result.stdout.split()[0])
    assert state(daemon) is None


async def test_cancellation_ends_the_whole_tree_and_propagates() -> None:
    pids: list[int] = []
    with trio.CancelScope() as scope:

        def on_output(stream: str, chunk: bytes) -> None:
            if stream == "stdout":
                pids.extend(int(p) for p in chunk.split())
                scope.cancel()

        await run_process([PY, ESCAPE, "setsid"], on_output=on_output, term_grace_ms=200)
        pytest.fail("run_process returned although its scope was cancelled")
    assert scope.cancelled_caught
    assert len(pids) == 1
    assert state(pids[0]) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_output_bytes": 0},
        {"max_output_bytes": -5},
        {"max_output_bytes": True},
        {"timeout_ms": 0},
        {"timeout_ms": 1.5},
        {"timeout_ms": "100"},
        {"term_grace_ms": -1},
    ],
)
async def test_bad_limits_are_invalid_request(kwargs: dict[str, object]) -> None:
    with pytest.raises(CoreError) as caught:
        await run_process([PY, "-c", "pass"], **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_request"


@pytest.mark.parametrize(
    ("argv", "code"),
    [([], "invalid_request"), ([PY, "\0"], "invalid_request"), (["no-such-xyz"], "launch_failed")],
)
async def test_bad_argv_is_rejected(argv: list[str], code: str) -> None:
    with pytest.raises(CoreError) as caught:
        await run_process(argv)
    assert caught.value.code == code


async def test_child_that_closes_its_output_and_keeps_running() -> None:
    """Issue 8 goal 1: after EOF on both pipes the exit is awaited briefly in place; a
    child that goes on running without stdout and stderr is still waited for."""
    code = "import os, time\nprint('bye', flush=True)\nos.close(1)\nos.close(2)\ntime.sleep(0.3)"
    result = await run_process([PY, "-c", code])
    assert result.exit_code == 0
    assert result.stdout == "bye\n"
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("cwd", "program"),
    [("sub", "./where.sh"), ("sub", "../sub/where.sh"), ("sub/", "where/../where.sh")],
)
async def test_relative_executable_with_a_relative_cwd(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch, cwd: str, program: str
) -> None:
    """Newcomer report (`supervisor exec --cwd examples -- ./rel.sh`): the executable was
    checked against the cwd, then the spawn applied the relative cwd a second time and
    failed with launch_failed. Both are relative to our directory, as for subprocess."""
    top = os.fspath(tmp_path)
    os.makedirs(os.path.join(top, "sub", "where"))
    script = os.path.join(top, "sub", "where.sh")
    await trio.Path(script).write_text('#!/bin/sh\necho "$PWD"\n')
    await trio.Path(script).chmod(0o755)
    monkeypatch.chdir(top)
    result = await run_process([program], cwd=cwd)
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == os.path.join(top, "sub") + "\n"


async def test_relative_executable_missing_under_a_relative_cwd_is_launch_failed(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkdir(os.path.join(tmp_path, "sub"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CoreError) as info:
        await run_process(["./missing.sh"], cwd="sub")
    assert info.value.code == "launch_failed"
    assert info.value.message == "executable not found: ./missing.sh"


@pytest.mark.parametrize(
    "script",
    [
        # A grandchild in the tree's group, its output elsewhere: the pipes reach EOF at the
        # main process's exit while it runs on.
        "sleep 3600 >/dev/null 2>&1 & echo $!",
        # One level deeper: the subshell that forked it is gone too.
        "(sleep 3600 >/dev/null 2>&1 & echo $!)",
    ],
)
async def test_run_process_ends_a_grandchild_left_running(script: str) -> None:
    # The end without a wait (ProcessTree._end_nowait) is taken only when the leftovers check
    # finds nothing alive: a grandchild that outlived its parent must still be found and ended.
    result = await run_process(["sh", "-c", script], term_grace_ms=200)
    assert result.exit_code == 0
    leftover = int(result.stdout.split()[0])
    assert state(leftover) is None


async def test_run_process_leaves_no_descriptor_open() -> None:
    # Its pipes are closed bare (never Trio streams), the pidfd with them; its epoll goes back
    # to the run's pool, where the first call's stays for the next (the test below bounds it).
    await run_process(["true"])
    before = sorted(os.listdir("/proc/self/fd"))
    for stdin in (None, b"x" * 100_000, "text"):
        for _ in range(5):
            result = await run_process(["cat"], stdin=stdin)
            assert result.exit_code == 0
    assert sorted(os.listdir("/proc/self/fd")) == before


def _epoll_registrations(fd: int) -> int:
    """How many descriptors the epoll ``fd`` of this process watches (its ``tfd:`` lines)."""
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return sum(line.startswith("tfd:") for line in f)


async def test_pooled_epolls_are_empty_bounded_and_closed_with_the_run() -> None:
    # A multiplexer's epoll is reused by the next one of the run only when it holds nothing:
    # a registration left behind would report events under a number the next call may give
    # to another descriptor. Runs that end every way (exit, timeout, a grandchild holding
    # stdout past the drain, cancellation), many at once, then none may be left in the pool.
    from supervisor._process import _oneshot, _tree

    grandchild_holds = "sleep 3 & echo started"
    async with trio.open_nursery() as nursery:
        for _ in range(12):
            nursery.start_soon(run_process, ["true"])
            nursery.start_soon(functools.partial(run_process, ["sleep", "5"], timeout_ms=50))
            nursery.start_soon(run_process, ["sh", "-c", grandchild_holds])
        with trio.move_on_after(0.05):
            await run_process(["sleep", "5"])
    pool = _tree._epoll_pool.get()
    assert 0 < len(pool) <= _tree._POOLED_EPOLLS
    assert [_epoll_registrations(epoll.fileno()) for epoll in pool] == [0] * len(pool)
    # A run that left a registration behind gives its epoll up: it is never pooled.
    mux_fds: list[int] = []
    original_close = _oneshot._Multiplexer.close

    def close_dirty(self: _oneshot._Multiplexer) -> None:
        self._interest.add(-1)  # as if a removal had failed
        mux_fds.append(self.epoll.fileno())
        original_close(self)

    _oneshot._Multiplexer.close = close_dirty  # type: ignore[method-assign]
    try:
        pool.clear()  # (their descriptors close with the objects)
        await run_process(["true"])
    finally:
        _oneshot._Multiplexer.close = original_close  # type: ignore[method-assign]
    assert not pool
    assert mux_fds
    assert mux_fds[0] not in [int(name) for name in os.listdir("/proc/self/fd")]


def test_the_pool_closes_with_its_run() -> None:
    from supervisor._process import _tree

    async def main() -> list[int]:
        await run_process(["true"])
        return [epoll.fileno() for epoll in _tree._epoll_pool.get()]

    before = sorted(os.listdir("/proc/self/fd"))
    pooled = trio.run(main)
    assert pooled
    assert sorted(os.listdir("/proc/self/fd")) == before
