"""A terminal program's last words are in its output and its retained screen (issue 24).

tests/peers/last_words.py prints numbered lines from its SIGHUP and SIGTERM handlers. Whatever
ends the terminal -- ``terminal.close`` (its hang-up, or the TERM step when the program ignores
SIGHUP) or the program's own exit -- every line is in the ``output`` events before the
``exit`` event, and the end of them is in the retained text a reopen shows. A close used to
discard what the program wrote once the close began.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest
import trio

from tests.supervisor.terminal.test_terminals import PEERS, PY, WAIT_S, _dict, terminal_core

if TYPE_CHECKING:
    from protocol import JSONObject
    from supervisor._core._core import Core

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux PTYs")

LAST_WORDS = str(PEERS / "last_words.py")
LINES = 100


async def _events_until_exit(core: Core, terminal_id: str) -> list[JSONObject]:
    """Every event of the terminal, in order, up to and with its ``exit``."""
    events: list[JSONObject] = []
    with trio.fail_after(WAIT_S):
        while not any(e["event"] == "exit" for e in events):
            batch = _dict(
                await core.call(
                    "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 2000}
                )
            )
            assert batch["gap"] is False
            raw = batch["events"]
            assert isinstance(raw, list)
            events.extend(_dict(e) for e in raw)
    return events


async def _start(core: Core, *flags: str) -> str:
    created = _dict(
        await core.call(
            "terminal.create",
            {
                "executable": PY,
                "arguments": [LAST_WORDS, f"--lines={LINES}", *flags],
                "retainedContextBytes": 65536,
            },
        )
    )
    terminal_id = str(created["terminalID"])
    await core.call("terminal.onExit", {"terminalID": terminal_id})
    text = ""
    with trio.fail_after(WAIT_S):
        while "ready" not in text:
            batch = _dict(
                await core.call(
                    "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 2000}
                )
            )
            raw = batch["events"]
            assert isinstance(raw, list)
            text += "".join(str(_dict(e).get("data", "")) for e in raw)
    return terminal_id


def _check(events: list[JSONObject]) -> JSONObject:
    """Every last line once, all of them before the ``exit`` event; returns it."""
    (exit_event,) = [e for e in events if e["event"] == "exit"]
    assert events[-1] is exit_event
    text = "".join(str(e["data"]) for e in events if e["event"] == "output")
    for i in range(1, LINES + 1):
        assert text.count(f"last out {i}/{LINES}\r\n") == 1, (i, text[-200:])
        assert text.count(f"last err {i}/{LINES}\r\n") == 1, (i, text[-200:])
    assert text.count("last words done") == 1, text[-200:]
    return exit_event


async def _retained(core: Core, terminal_id: str) -> str:
    """The retained text, as a reopen shows it (then the new generation is disposed)."""
    reopened = _dict(await core.call("terminal.reopen", {"terminalID": terminal_id}))
    assert reopened["generation"] == 2
    batch = _dict(await core.call("terminal.pollEvents", {"terminalID": terminal_id}))
    raw = batch["events"]
    assert isinstance(raw, list)
    first = _dict(raw[0])
    assert first["generation"] == 2
    await core.call("terminal.dispose", {"terminalID": terminal_id})
    return str(first["data"])


@pytest.mark.parametrize("step", ["hang-up", "TERM"])
async def test_close(step: str) -> None:
    flags = ("--ignore-hup",) if step == "TERM" else ()
    async with terminal_core() as (core, _service):
        terminal_id = await _start(core, *flags)
        await core.call("terminal.close", {"terminalID": terminal_id})
        exit_event = _check(await _events_until_exit(core, terminal_id))
        assert exit_event["reason"] == "closed"
        assert exit_event["exitCode"] == 0  # the handler's own exit
        assert "last words done" in await _retained(core, terminal_id)


async def test_natural_exit() -> None:
    async with terminal_core() as (core, _service):
        terminal_id = await _start(core, "--exit-after=200")
        exit_event = _check(await _events_until_exit(core, terminal_id))
        assert exit_event["reason"] == "exited"
        assert exit_event["exitCode"] == 0
        assert "last words done" in await _retained(core, terminal_id)


async def test_many_closes_at_once_lose_nothing() -> None:
    async with terminal_core() as (core, _service):
        ids = [await _start(core) for _ in range(6)]

        async def close(terminal_id: str) -> None:
            await core.call("terminal.close", {"terminalID": terminal_id})
            _check(await _events_until_exit(core, terminal_id))

        async with trio.open_nursery() as nursery:
            for terminal_id in ids:
                nursery.start_soon(close, terminal_id)
