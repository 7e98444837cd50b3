"""Issue 5 through ``supervisor serve``: terminal.* as JSON-RPC methods, and the example client."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from tests.supervisor.cli.test_serve import Client, _field, client

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = ("client",)  # the fixture, re-used from test_serve

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux PTYs")

ROOT = Path(__file__).resolve().parent.parent.parent.parent
WAIT_S = 30


async def _result(client: Client, method: str, params: JSONObject) -> JSONValue:
    reply = await client.request(method, params)
    assert "result" in reply, reply
    return reply["result"]


async def _read_until(client: Client, terminal_id: str, needle: str) -> str:
    text = ""
    with trio.fail_after(WAIT_S):
        while needle not in text:
            batch = await _result(
                client,
                "terminal.waitEvents",
                {"terminalID": terminal_id, "timeoutMilliseconds": 2000},
            )
            assert isinstance(batch, dict)
            events = batch["events"]
            assert isinstance(events, list)
            for event in events:
                assert isinstance(event, dict)
                if event["event"] == "output":
                    assert event["terminalID"] == terminal_id
                    text += str(event["data"])
    return text


async def test_terminal_commands_over_serve(client: Client) -> None:
    result = await client.initialize()
    commands = result["commands"]
    assert isinstance(commands, list)
    assert {
        "terminal.create",
        "terminal.write",
        "terminal.resize",
        "terminal.close",
        "terminal.reopen",
        "terminal.dispose",
        "terminal.onExit",
        "terminal.waitEvents",
        "terminal.pollEvents",
    } <= set(commands)
    created = await _result(
        client,
        "terminal.create",
        {
            "executable": "bash",
            "arguments": ["--norc", "--noprofile", "-i"],
            "environment": {"PS1": "$ "},
        },
    )
    assert isinstance(created, dict)
    assert created["generation"] == 1
    tid = str(created["terminalID"])
    await _result(client, "terminal.write", {"terminalID": tid, "data": "echo via-$((2+3))\n"})
    await _read_until(client, tid, "via-5")
    await _result(client, "terminal.resize", {"terminalID": tid, "rows": 40, "cols": 120})
    await _result(client, "terminal.write", {"terminalID": tid, "data": "stty size\n"})
    await _read_until(client, tid, "40 120")
    refused = await client.request("terminal.reopen", {"terminalID": tid})
    assert _field(refused, "error", "data", "code") == "plugin.host.preconditionFailed"
    closed = await _result(client, "terminal.close", {"terminalID": tid})
    assert isinstance(closed, dict)
    retained = closed["retainedContextBytes"]
    assert isinstance(retained, int)
    assert retained > 0
    reopened = await _result(client, "terminal.reopen", {"terminalID": tid})
    assert reopened == {"terminalID": tid, "generation": 2, "restoredContextBytes": retained}
    restored = await _read_until(client, tid, "via-5")
    assert "\x1b" not in restored.split("via-5")[0]
    await _result(client, "terminal.dispose", {"terminalID": tid})
    gone = await client.request("terminal.pollEvents", {"terminalID": tid})
    assert _field(gone, "error", "data", "code") == "not_found"
    bad = await client.request("terminal.create", {"executable": "./relative"})
    assert _field(bad, "error", "data", "code") == "invalid_request"
    await client.shut_down()


async def test_example_terminal_client_runs_bash_over_serve() -> None:
    result = await trio.run_process(
        [sys.executable, str(ROOT / "examples" / "terminal_client.py")],
        stdin=b"echo example-$((40+2))\nexit 5\n",
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=str(ROOT),
    )
    out = result.stdout.decode("utf-8", "replace")
    assert "example-42" in out, (out, result.stderr.decode("utf-8", "replace"))
    assert "exited, exit code 5" in out
    assert result.returncode == 5


@pytest.mark.parametrize(
    ("piped", "reason"),
    [(b"", "exited, exit code 0"), (b"sleep 100\n", "closed")],
    ids=["no-input", "input-ends-while-a-command-runs"],
)
async def test_example_terminal_client_ends_with_its_input(piped: bytes, reason: str) -> None:
    """Piped input that runs out without ``exit`` ends the client: Ctrl-D, then a close."""
    with trio.fail_after(WAIT_S):
        result = await trio.run_process(
            [sys.executable, str(ROOT / "examples" / "terminal_client.py")],
            stdin=piped,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=str(ROOT),
        )
    out = result.stdout.decode("utf-8", "replace")
    assert f"[terminal term-1: {reason}" in out, (out, result.stderr.decode("utf-8", "replace"))


async def test_a_program_writing_hostile_sequences_does_not_end_serve(client: Client) -> None:
    """A terminal program writes what made the renderer raise (vim's start-up query
    ``CSI ? 4 m``, a CSI with more parameters than its command takes, an erase mode the
    emulator rejects), plus OSC, DCS, C1 controls and bytes that are not UTF-8; serve keeps
    answering, the display falls back to plain text and says so, and another terminal in
    the same serve still works."""
    await client.initialize()
    hostile = (
        r"\033[?4m\033[?1;2n\033[1;2;3P\033[>4;2m\033]10;?\007\033P+q544e\033\\"
        r"\302\233\302\220\377\376\033[5K\033[99999999999999999999Ahostile-done\n"
    )
    created = await _result(
        client,
        "terminal.create",
        {"executable": "sh", "arguments": ["-c", f"printf '{hostile}'; exec sleep 60"]},
    )
    assert isinstance(created, dict)
    victim = str(created["terminalID"])
    await _read_until(client, victim, "hostile-done")
    with trio.fail_after(WAIT_S):
        while True:
            listed = await _result(client, "terminal.list", {})
            assert isinstance(listed, list)
            entry = next(e for e in listed if isinstance(e, dict) and e["terminalID"] == victim)
            if "renderFallback" in entry:
                break
            await trio.sleep(0.05)
    assert entry["state"] == "running"
    assert _field(await client.request("core.ping", {}), "result", "protocolVersion") == 1
    other = await _result(
        client,
        "terminal.create",
        {"executable": "bash", "arguments": ["--norc", "--noprofile", "-i"]},
    )
    assert isinstance(other, dict)
    tid = str(other["terminalID"])
    await _result(client, "terminal.write", {"terminalID": tid, "data": "echo still-$((3*3))\n"})
    await _read_until(client, tid, "still-9")
    closed = await _result(client, "terminal.close", {"terminalID": victim})
    assert isinstance(closed, dict)
    await client.shut_down()
