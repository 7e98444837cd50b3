"""Regressions for what the structured fuzzer (tests/fuzz, issue 13) found in lsp.* commands."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import trio

from supervisor import open_core
from supervisor.testbed import program_argv

if TYPE_CHECKING:
    from protocol import JSONValue


async def test_two_restarts_at_once_both_answer(tmp_path: os.PathLike[str]) -> None:
    """A restart while another one waited for the new generation was answered ``internal``
    ("Trio events cannot be treated as bools"); the second one now joins the first."""
    argv = program_argv("well-behaved", protocol="lsp")
    arguments: list[JSONValue] = list(argv[1:])
    async with open_core() as core:
        started = await core.call(
            "lsp.startServer",
            {
                "serverId": "fuzz",
                "executable": argv[0],
                "arguments": arguments,
                "workingDirectory": os.fspath(tmp_path),
                "rootUri": f"file://{os.fspath(tmp_path)}",
            },
        )
        assert isinstance(started, dict)
        session_id = started["sessionId"]
        results: list[object] = []

        async def restart() -> None:
            results.append(await core.call("lsp.restartServer", {"sessionId": session_id}))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(restart)
                nursery.start_soon(restart)
        assert len(results) == 2
        assert all(isinstance(r, dict) and r["generation"] >= 2 for r in results)
        await core.call("lsp.stopServer", {"sessionId": session_id})
