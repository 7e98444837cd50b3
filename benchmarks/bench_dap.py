"""Teardown of a debugpy session: ``debug.disconnect`` of a launched, paused debuggee (issue 4).

Each round creates a session over ``python -m debugpy.adapter``, launches a script that stops
at a breakpoint, then times ``debug.disconnect`` until the adapter, the debugpy launcher and
the debuggee are all gone. The peer figure is the bound DESIGN.md "DAP stop" allows before
SIGTERM (2 000 ms reply + 1 000 ms exit): a ratio well below 1 means debugpy ends on the
polite path (disconnect, stdin EOF) and nothing is signalled. Figures are medians in
milliseconds.

Run ``python -m benchmarks.bench_dap`` to print the row.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import TYPE_CHECKING

import trio

from supervisor._core import open_core

if TYPE_CHECKING:
    from supervisor._core import Core

POLITE_BOUND_MS = 3000.0
GOAL = 0.5
_SCRIPT = "x = 1\ny = x + 1\nprint(y)\n"


async def _one_round(core: Core, path: str) -> float:
    created = await core.call(
        "debug.createSession",
        {
            "adapterId": "debugpy",
            "rootPath": os.path.dirname(path),
            "adapter": {"executable": sys.executable, "arguments": ["-m", "debugpy.adapter"]},
        },
    )
    assert isinstance(created, dict)
    sid = {"sessionId": created["sessionId"]}
    await core.call("debug.setBreakpoints", {**sid, "path": path, "breakpoints": [{"line": 2}]})
    await core.call(
        "debug.launch", {**sid, "configuration": {"program": path, "console": "internalConsole"}}
    )
    while True:
        batch = await core.call("debug.waitEvents", {**sid, "timeoutMilliseconds": 10_000})
        assert isinstance(batch, dict)
        events = batch["events"]
        assert isinstance(events, list)
        if any(isinstance(e, dict) and e["event"] == "stopped" for e in events):
            break
    started = time.perf_counter()
    await core.call("debug.disconnect", sid)
    elapsed = (time.perf_counter() - started) * 1000
    await core.call("debug.destroySession", sid)
    return elapsed


async def _measure(rounds: int, path: str) -> list[float]:
    async with open_core() as core:
        await _one_round(core, path)  # warm-up: imports, pyc files
        return [await _one_round(core, path) for _ in range(rounds)]


def measure(*, rounds: int = 5) -> list[dict[str, object]]:
    """Measure ``debug.disconnect`` of a paused debugpy session.

    Args:
        rounds: Timed rounds after one warm-up (each starts a real debugpy session).

    Returns:
        One row ``{figure, ours, peer, unit, peer_name, ratio, goal, met}`` in milliseconds.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "target.py")
        with open(path, "w") as f:
            f.write(_SCRIPT)
        ours = statistics.median(trio.run(_measure, min(rounds, 10), path))
    ratio = ours / POLITE_BOUND_MS
    return [
        {
            "figure": "debug.disconnect of a paused debugpy session (time vs polite bound)",
            "ours": round(ours, 3),
            "peer": POLITE_BOUND_MS,
            "unit": "ms",
            "peer_name": "DAP stop polite bound",
            "ratio": round(ratio, 3),
            "goal": f"<= {GOAL}x",
            "met": ratio <= GOAL,
        }
    ]


if __name__ == "__main__":
    for row in measure():
        print(row)
