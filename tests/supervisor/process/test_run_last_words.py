"""``process.run`` keeps reading through the stop ladder: a timeout and a cancellation keep
what the program writes from its SIGTERM handler (issue 24).

Both ways of reading are covered: the one-task multiplexer (epoll and pidfds) and the task per
pipe used where those are missing (forced here by hiding epoll).
"""

from __future__ import annotations

import os
import sys

import pytest
import trio

from supervisor._process import _oneshot
from supervisor._process._oneshot import run_process

PEERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "peers")
LAST_WORDS = os.path.join(PEERS, "last_words.py")
PY = sys.executable
LINES = 200
WAIT_S = 60
EXPECTED_OUT = (
    "ready\n"
    + "".join(f"last out {i}/{LINES}\n" for i in range(1, LINES + 1))
    + "last words done\n"
)
EXPECTED_ERR = "".join(f"last err {i}/{LINES}\n" for i in range(1, LINES + 1))


@pytest.fixture(params=["multiplexer", "tasks"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "tasks":
        monkeypatch.setattr(_oneshot, "_HAVE_EPOLL", False)
    return str(request.param)


async def test_timeout_keeps_the_sigterm_handlers_lines(reading: str) -> None:
    # Long enough for the program to be up (its handler installed) on a loaded machine.
    result = await run_process([PY, LAST_WORDS, f"--lines={LINES}"], timeout_ms=4000)
    assert result.timed_out
    assert result.exit_code == 0  # the handler's own exit
    assert result.stdout == EXPECTED_OUT
    assert result.stderr == EXPECTED_ERR


async def test_cancellation_keeps_reading_through_the_ladder(reading: str) -> None:
    """The caller is cancelled once the program is up: ``on_output`` still gets every line
    the SIGTERM handler writes before ``run_process`` lets the cancellation out."""
    seen = {"stdout": b"", "stderr": b""}
    up = trio.Event()

    def on_output(stream: str, chunk: bytes) -> None:
        seen[stream] += chunk
        if b"ready" in seen["stdout"]:
            up.set()

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def run() -> None:
                with scope:
                    await run_process([PY, LAST_WORDS, f"--lines={LINES}"], on_output=on_output)
                    raise AssertionError("run_process returned instead of being cancelled")

            nursery.start_soon(run)
            await up.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert seen["stdout"].decode() == EXPECTED_OUT
    assert seen["stderr"].decode() == EXPECTED_ERR
