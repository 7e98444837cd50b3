"""The restart/backoff timing rule of a language-server session, on Trio's MockClock (issue 3).

DESIGN.md "restart budget": 5 crashes in 180 000 ms, backoff from 500 ms doubling to 8 000 ms.
The session's own restart loop runs here, with ``autojump_clock``: each generation fails to
launch (a missing executable, so no process is involved and the failure is instantaneous),
which the session treats like a crash. The times are the virtual clock's, so they are exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from supervisor._lsp._session import LspServerSpec, LspSession
from supervisor._lsp._state import RestartBudget
from supervisor._session._events import EventQueue

if TYPE_CHECKING:
    from protocol import JSONObject

MISSING = "/nonexistent/language-server"


def _session(budget: RestartBudget) -> LspSession:
    spec = LspServerSpec(
        server_id="missing",
        argv=[MISSING],
        env=None,
        cwd="/",
        root_uri="file:///",
        restart=True,
        budget=budget,
    )
    return LspSession("lsp-clock", spec, EventQueue())


async def _record(session: LspSession, seen: list[tuple[float, JSONObject]]) -> None:
    """Drain events as they come, noting the virtual time each batch was queued at."""
    while True:
        batch = await session.events.wait(3_600_000)
        events = batch["events"]
        assert isinstance(events, list)
        # The waiter wakes before the clock can move on: the time is the event's.
        seen.extend((trio.current_time(), event) for event in events)  # type: ignore[misc]


def _starts(start: float, seen: list[tuple[float, JSONObject]]) -> list[tuple[float, int]]:
    return [
        (round((at - start) * 1000), int(str(event["generation"])))
        for at, event in seen
        if event["event"] == "stateChanged" and event["state"] == "starting"
    ]


async def test_backoff_doubles_and_the_budget_is_spent_at_the_fifth_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    session = _session(RestartBudget())
    seen: list[tuple[float, JSONObject]] = []
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_record, session, seen)
        await nursery.start(session.run, None)
        await session.done.wait()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    # Starts at 0, then after 500, 1000, 2000 and 4000 ms of backoff; the 5th crash ends it.
    assert _starts(start, seen) == [(0, 1), (500, 2), (1500, 3), (3500, 4), (7500, 5)]
    assert round((trio.current_time() - start) * 1000) == 7500
    failures = [e for _, e in seen if e["event"] == "stateChanged" and e["state"] == "failed"]
    assert len(failures) == 5
    error = failures[0]["error"]
    assert isinstance(error, dict)
    assert (error["code"], error["stage"]) == ("launchFailed", "starting")
    backoffs = [e.get("backoffMilliseconds") for _, e in seen if e.get("reason") == "crash"]
    assert backoffs == [500, 1000, 2000, 4000]
    assert any("budget spent" in str(e.get("message")) for _, e in seen)
    facts = [e["code"] for _, e in seen if e["event"] == "fact"]
    # The executable does not exist: it could not be resolved (not: resolved, not started).
    assert facts == ["host.executableUnavailable"] * 5
    assert session.snapshot()["state"] == "failed"


async def test_window_slides_backoff_caps_and_a_stop_ends_the_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two crashes within 400 ms would spend it; with backoffs of 500 ms or more they never
    # fall in one window, so it restarts until stopped.
    budget = RestartBudget(
        max_crashes=2, window_ms=400, backoff_initial_ms=500, backoff_max_ms=1000
    )
    session = _session(budget)
    seen: list[tuple[float, JSONObject]] = []
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_record, session, seen)
        await nursery.start(session.run, None)
        await trio.sleep(3.0)  # virtual: crashes at 0, 500, 1500 and 2500 ms
        result = await session.stop()
        stopped_at = trio.current_time()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert _starts(start, seen) == [(0, 1), (500, 2), (1500, 3), (2500, 4)]
    assert result["state"] == "stopped"
    # The stop did not wait for the backoff (the next start was due at 3500 ms).
    assert round((stopped_at - start) * 1000) == 3000
    states = [e["state"] for _, e in seen if e["event"] == "stateChanged"]
    assert states[-2:] == ["failed", "stopped"]


async def test_a_launch_failure_without_restart_is_final(
    autojump_clock: trio.testing.MockClock,
) -> None:
    spec = LspServerSpec(
        server_id="missing", argv=[MISSING], env=None, cwd="/", root_uri="file:///"
    )
    session = LspSession("lsp-once", spec, EventQueue())
    async with trio.open_nursery() as nursery:
        await nursery.start(session.run, None)
        await session.done.wait()
    events = session.events.poll()["events"]
    assert isinstance(events, list)
    states = [e["state"] for e in events if isinstance(e, dict) and e["event"] == "stateChanged"]
    assert states == ["starting", "failed"]
    assert (await session.stop())["state"] == "failed"
