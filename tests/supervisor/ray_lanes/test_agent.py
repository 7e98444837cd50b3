"""The node agent without a cluster: Ray must run it as a threaded actor, and a pending
event pull must not hold back commands. Runs without Ray (the Ray check is skipped)."""

from __future__ import annotations

import inspect
import threading
from typing import TYPE_CHECKING, Any

import pytest

from supervisor._ray._agent import NodeAgent

if TYPE_CHECKING:
    from pathlib import Path

#: Only keeps a broken agent from hanging the test; nothing is timed against it.
BOUND_S = 60.0


def test_the_agent_has_no_async_method() -> None:
    # One ``async def`` would make Ray run the class as an asyncio actor: one call at a
    # time, every command waiting behind the pending event pull.
    found = [
        name
        for name, member in inspect.getmembers(NodeAgent)
        if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
    ]
    assert found == []


def test_ray_takes_the_agent_for_a_threaded_actor() -> None:
    # importorskip: skipped without the [ray] extra, and Ray's import is quiet under -bb.
    async_compat = pytest.importorskip("ray._private.async_compat")
    assert not async_compat.has_async_methods(NodeAgent)


def _request(root: Path) -> dict[str, Any]:
    return {
        "kind": "command",
        "root": str(root),
        "argv": ["/bin/true"],
        "cwd": None,
        "env": None,
        "timeout_ms": None,
        "supersede": False,
        "report": False,
        "lane": None,
    }


def test_a_pending_pull_returns_the_events_of_commands_sent_meanwhile(tmp_path: Path) -> None:
    """A pull waiting (as the runner's always is) sees a job's events as they happen."""
    agent = NodeAgent("here", 1 << 20)
    try:
        pulled: list[Any] = []
        # Waits up to BOUND_S for a first event: it returns early only if the commands
        # below ran while it waited.
        puller = threading.Thread(target=lambda: pulled.append(agent.events(0, BOUND_S)))
        puller.start()
        assert agent.commands([("start", True, "job-1", _request(tmp_path))]) == [True]
        puller.join(BOUND_S)
        assert not puller.is_alive()
        assert pulled[0], "the pull returned no event"
        assert pulled[0][0][1:] == ("job.started", pulled[0][0][2])
        assert pulled[0][0][2]["jobId"] == "job-1"
        # The rest of the job's events, then nothing left behind.
        events = list(pulled[0])
        while not any(method == "job.finished" for _, method, _ in events):
            events += agent.events(events[-1][0], BOUND_S)
        assert [method for _, method, _ in events][-1] == "job.finished"
        assert agent.leftovers(1.0) == []
    finally:
        agent.shutdown()
