"""The order rule's cost: pipelined commands on one target, in order, against the same unordered.

docs/architecture.md "The order rule": commands on one target take effect in arrival order.
What that costs a client that pipelines is measured here, in the same run, on the same
target, against the same commands run without their place in line (each started as its own
task, as before the rule, so they may take effect in any order):

- ``terminal.write``: ``COMMANDS`` keystrokes of 16 bytes submitted from one task without
  waiting (``Core.submit``), to a program that reads and discards its input in raw mode;
  the time from the first submit until every answer is in, as commands per second.
- ``lsp.syncDocument``: ``COMMANDS`` full-text document changes (one ``didChange``
  notification each) pipelined to the fake language server of tests/peers, likewise.

Rounds alternate the two sides; the ratio is the median per-round ratio ours / unordered
(higher is better). What ordering adds per command: the turn taken where the command arrives
(two dict operations), the release, and -- the part that shows -- one Trio scheduler pass per
command waiting in line: when 2 000 commands are pipelined at once, the unordered ones all take
their effects in one pass (in any order), while each ordered one is woken by the release of the
one ahead of it, in the next pass. So the goal is 0.5x of unordered: a pipelined target still
takes thousands of commands per second (an editor sends tens; a paste is one write), in
order. A command that arrives at an idle target waits for no pass at all.

Run ``python -m benchmarks bench_order`` to print the rows.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

import trio

from benchmarks._common import paired_row
from supervisor import open_core

if TYPE_CHECKING:
    from protocol import JSONObject
    from supervisor import Core

COMMANDS = 2000
FAKE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "peers", "lsp_fake.py"
)


async def _ordered(core: Core, requests: list[tuple[str, JSONObject]]) -> float:
    start = time.perf_counter()
    submitted = [core.submit(command, payload) for command, payload in requests]
    for op in submitted:
        await op.result()
    return len(requests) / (time.perf_counter() - start)


async def _unordered(core: Core, requests: list[tuple[str, JSONObject]]) -> float:
    # The path of a command without its place in line: the Core's call, one task each.
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for command, payload in requests:
            nursery.start_soon(core._call, command, payload, None, None, None)
    return len(requests) / (time.perf_counter() - start)


async def _terminal(core: Core) -> str:
    created: Any = await core.call(
        "terminal.create",
        {"executable": "sh", "arguments": ["-c", "stty raw -echo; exec cat > /dev/null"]},
    )
    terminal_id = created["terminalID"]
    assert isinstance(terminal_id, str)
    return terminal_id


async def _session(core: Core) -> str:
    started: Any = await core.call(
        "lsp.startServer",
        {
            "serverId": "bench",
            "executable": sys.executable,
            "arguments": [FAKE, "--full-sync"],
            "workingDirectory": "/tmp",
            "rootUri": "file:///tmp",
        },
    )
    session_id = started["sessionId"]
    assert isinstance(session_id, str)
    # Ready: a request completes once the handshake is done.
    reply: Any = await core.call(
        "lsp.request", {"sessionId": session_id, "method": "test/documents", "params": {}}
    )
    operation_id = reply["operationId"]
    while True:
        batch: Any = await core.call(
            "lsp.waitEvents", {"sessionId": session_id, "timeoutMilliseconds": 5000}
        )
        if any(
            e["event"] == "requestCompleted" and e["operationId"] == operation_id
            for e in batch["events"]
        ):
            return session_id


async def _measure(rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {
        "terminal": [],
        "terminal_unordered": [],
        "lsp": [],
        "lsp_unordered": [],
    }
    async with open_core() as core:
        terminal_id = await _terminal(core)
        session_id = await _session(core)
        writes: list[tuple[str, JSONObject]] = [
            ("terminal.write", {"terminalID": terminal_id, "data": f"key {i:011d}\n"})
            for i in range(COMMANDS)
        ]
        uri = "file:///tmp/bench_order.py"
        changes: list[tuple[str, JSONObject]] = [
            (
                "lsp.syncDocument",
                {"sessionId": session_id, "uri": uri, "languageId": "python", "text": f"v = {i}"},
            )
            for i in range(COMMANDS)
        ]
        await _ordered(core, writes[:100])  # warm-up
        await _ordered(core, changes[:100])
        for _ in range(rounds):
            results["terminal"].append(await _ordered(core, writes))
            results["terminal_unordered"].append(await _unordered(core, writes))
            results["lsp"].append(await _ordered(core, changes))
            results["lsp_unordered"].append(await _unordered(core, changes))
        await core.call("terminal.dispose", {"terminalID": terminal_id})
        await core.call("lsp.stopServer", {"sessionId": session_id})
    return results


def measure(*, rounds: int = 10) -> list[dict[str, object]]:
    """Measure both rows (see the module docstring)."""
    results = trio.run(_measure, rounds)
    return [
        paired_row(
            f"pipelined terminal.write, {COMMANDS} keystrokes in order (commands/s; ratio >1 ="
            " faster)",
            results["terminal"],
            results["terminal_unordered"],
            unit="commands/s",
            peer_name="the same commands unordered",
            at_least=0.5,
        ),
        paired_row(
            f"pipelined lsp.syncDocument, {COMMANDS} didChange in order (commands/s; ratio >1 ="
            " faster)",
            results["lsp"],
            results["lsp_unordered"],
            unit="commands/s",
            peer_name="the same commands unordered",
            at_least=0.5,
        ),
    ]


if __name__ == "__main__":
    for measured in measure():
        print(measured)
