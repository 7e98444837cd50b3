"""The cross-plugin relay through the Core with real SDK backends (issue 6).

Backends: the SDK examples (``dev.example.caller`` -> ``dev.example.exporter`` ->
``dev.example.tools``) and ``tests/peers/relay_hop.py`` (an SDK backend that relays along
a list of plugins, for cycles, depth and fan-out, and prints ``hop-cancelled`` on stderr
when its call is cancelled, i.e. when it received ``$/cancelRequest``).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from supervisor._plugin._relay_state import GRACE_MS
from tests._procfs import collect_if_adopted
from tests.supervisor.lsp._support import PY, Session, as_obj, start
from tests.supervisor.plugin.test_example_backends import scoped_pids, wait_gone, wait_scoped

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "backends"
HOP = str(ROOT / "tests" / "peers" / "relay_hop.py")
RAW = str(ROOT / "tests" / "peers" / "plugin_backend.py")
CTX: JSONObject = {"contextID": "w1", "generation": 1}
HOPS = [f"hop.{c}" for c in "abcdefz"]
#: What tests/peers/plugin_backend.py exports to the relay (``com.example.tool``).
RAW_EXPORTS = ["big.result", "echo.value", "no.result", "slow.wait"]


#: The three example backends of examples/backends/: caller -> exporter -> tools.
EXAMPLE_PLUGINS: list[JSONValue] = [
    {
        "pluginID": "dev.example.caller",
        "enabled": True,
        "exports": [],
        "calls": [{"id": "project.describe", "version": 1}],
    },
    {
        "pluginID": "dev.example.exporter",
        "enabled": True,
        "exports": [{"id": "project.describe", "version": 1, "context": "workspace"}],
        "calls": [{"id": "tool.version", "version": 1}],
    },
    {
        "pluginID": "dev.example.tools",
        "enabled": True,
        "exports": [{"id": "tool.version", "version": 1, "context": "workspace"}],
        "calls": [],
    },
]


def snapshot(*, disabled: frozenset[str] = frozenset()) -> JSONObject:
    plugins: list[JSONValue] = [*EXAMPLE_PLUGINS]
    plugins += [
        {
            "pluginID": hop,
            "enabled": True,
            "exports": [{"id": "hop.call", "version": 1, "context": "workspace"}],
            "calls": [{"id": f, "version": 1} for f in ["hop.call", *RAW_EXPORTS]],
        }
        for hop in HOPS
    ]
    # tests/peers/plugin_backend.py: answers what an SDK backend never sends (a result over
    # 1 MiB, a reply without result) and ignores $/cancelRequest.
    plugins.append(
        {
            "pluginID": "com.example.tool",
            "enabled": True,
            "exports": [{"id": f, "version": 1} for f in RAW_EXPORTS],
            "calls": [],
        }
    )
    for plugin in plugins:
        assert isinstance(plugin, dict)
        if plugin["pluginID"] in disabled:
            plugin["enabled"] = False
    return {
        "plugins": plugins,
        "contexts": [{"contextID": "w1", "generation": 1, "authority": "local"}],
    }


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        await opened.call("lsp.configureFunctionRelay", snapshot())
        yield opened


async def backend(core: Core, cwd: str, plugin_id: str, script: str = HOP) -> tuple[Session, int]:
    session = await start(
        core, [PY, script], cwd, pluginId=plugin_id, shutdownTimeoutMilliseconds=5000
    )
    pid = (await session.wait_state("starting"))["pid"]
    assert isinstance(pid, int)
    await session.wait_state("ready")
    return session, pid


async def invoke(session: Session, plugin_id: str, function_id: str, params: JSONObject) -> str:
    reply = await session.call(
        "lsp.functionRequest",
        function={"pluginID": plugin_id, "functionID": function_id},
        params=params,
        context=CTX,
    )
    operation_id = reply["operationId"]
    assert isinstance(operation_id, str)
    return operation_id


async def value(
    session: Session, plugin_id: str, function_id: str, params: JSONObject
) -> JSONValue:
    done = await session.completed(await invoke(session, plugin_id, function_id, params))
    assert "result" in done, done
    return as_obj(done["result"])["value"]


async def cancelled_log(session: Session) -> JSONObject:
    return await session.wait_for(
        lambda e: e["event"] == "log" and "hop-cancelled" in str(e.get("message"))
    )


async def test_example_chain_result_caller_field_and_cancel_from_the_top(
    core: Core, tmp_path: Path
) -> None:
    cwd = str(tmp_path)
    _, tools_pid = await backend(core, cwd, "dev.example.tools", str(EXAMPLES / "tool_runner.py"))
    _, exporter_pid = await backend(
        core, cwd, "dev.example.exporter", str(EXAMPLES / "exporter.py")
    )
    caller, _ = await backend(core, cwd, "dev.example.caller", str(EXAMPLES / "caller.py"))
    # caller -> exporter -> tools: the relay writes each caller field itself.
    report = as_obj(
        await value(
            caller, "dev.example.caller", "report.build", {"project": "app", "nested": True}
        )
    )
    described = as_obj(report["report"])
    assert described["project"] == "app"
    assert described["caller"] == {"pluginID": "dev.example.caller"}
    nested = as_obj(described["nested"])
    assert nested["caller"] == {"pluginID": "dev.example.exporter"}
    assert str(nested["version"]).startswith("Python")
    # Cancelled from the top while both providers run processes for the chain.
    op = await invoke(
        caller,
        "dev.example.caller",
        "report.build",
        {"project": "app", "nested": True, "sleepMs": 300, "nestedSleepMs": 60_000},
    )
    sleeping = await wait_scoped(tools_pid, 1)
    await caller.call("lsp.cancelOperation", operationId=op)
    done = await caller.completed(op)
    assert as_obj(done["error"])["code"] == "requestCancelled"
    await wait_gone(sleeping | scoped_pids(exporter_pid))
    assert scoped_pids(tools_pid) == set()
    assert scoped_pids(exporter_pid) == set()


async def test_hop_chain_cancel_reaches_every_provider(core: Core, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    a, _ = await backend(core, cwd, "hop.a")
    b, b_pid = await backend(core, cwd, "hop.b")
    c, c_pid = await backend(core, cwd, "hop.c")
    op = await invoke(a, "hop.a", "hop.call", {"to": ["hop.b", "hop.c"], "sleepMs": 60_000})
    sleeping = await wait_scoped(c_pid, 1)
    await a.call("lsp.cancelOperation", operationId=op)
    assert as_obj((await a.completed(op))["error"])["code"] == "requestCancelled"
    # Every provider down the chain received $/cancelRequest, and its processes ended.
    await cancelled_log(b)
    await cancelled_log(c)
    await wait_gone(sleeping)
    assert scoped_pids(b_pid) == scoped_pids(c_pid) == set()


async def test_cycle_depth_and_the_ninth_call(core: Core, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    sessions: dict[str, Session] = {}
    async with trio.open_nursery() as nursery:

        async def open_one(hop: str) -> None:
            sessions[hop] = (await backend(core, cwd, hop))[0]

        for hop in HOPS[:6]:
            nursery.start_soon(open_one, hop)
    a = sessions["hop.a"]
    # A cycle: a -> b -> a; and a plugin calling itself.
    cycle = as_obj(await value(a, "hop.a", "hop.call", {"to": ["hop.b", "hop.a"]}))
    assert as_obj(cycle["inner"])["inner"] == {"error": "plugin.function.callCycle"}
    itself = as_obj(await value(a, "hop.a", "hop.call", {"to": ["hop.a"]}))
    assert itself["inner"] == {"error": "plugin.function.callCycle"}
    # Depth: four calls pass, the fifth is refused.
    four = as_obj(await value(a, "hop.a", "hop.call", {"to": ["hop.b", "hop.c", "hop.d", "hop.e"]}))
    assert four["hops"] == 4
    five = as_obj(
        await value(a, "hop.a", "hop.call", {"to": ["hop.b", "hop.c", "hop.d", "hop.e", "hop.f"]})
    )
    deepest: JSONValue = five
    for _ in range(5):  # a's result, then b's, c's, d's and e's: e -> f is the fifth call
        deepest = as_obj(deepest)["inner"]
    assert deepest == {"error": "plugin.function.depthExceeded"}
    # Eight relayed calls of one caller run at once; the ninth is refused.
    fanned = as_obj(
        await value(a, "hop.a", "hop.call", {"to": ["hop.b"], "fan": 9, "sleepMs": 1500})
    )
    results = fanned["fan"]
    assert isinstance(results, list)
    assert results.count({"error": "plugin.function.tooManyCalls"}) == 1
    assert results.count({"hops": 0, "caller": {"pluginID": "hop.a"}}) == 8


async def test_provider_exits_mid_call(core: Core, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    a, _ = await backend(core, cwd, "hop.a")
    _, b_pid = await backend(core, cwd, "hop.b")
    op = await invoke(a, "hop.a", "hop.call", {"to": ["hop.b"], "sleepMs": 60_000})
    sleeping = await wait_scoped(b_pid, 1)
    os.kill(b_pid, signal.SIGKILL)
    done = await a.completed(op)
    assert as_obj(as_obj(done["result"])["value"])["inner"] == {
        "error": "plugin.function.providerUnavailable"
    }
    await wait_gone(sleeping)
    collect_if_adopted(sleeping)  # orphans of the killed provider, ours as the host


async def test_snapshot_disables_a_provider_mid_call(core: Core, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    a, _ = await backend(core, cwd, "hop.a")
    b, b_pid = await backend(core, cwd, "hop.b")
    op = await invoke(a, "hop.a", "hop.call", {"to": ["hop.b"], "sleepMs": 60_000})
    sleeping = await wait_scoped(b_pid, 1)
    answer = as_obj(
        await core.call("lsp.configureFunctionRelay", snapshot(disabled=frozenset({"hop.b"})))
    )
    assert answer["endedCalls"] == 1
    done = await a.completed(op)
    assert as_obj(as_obj(done["result"])["value"])["inner"] == {
        "error": "plugin.function.providerDisabled"
    }
    await cancelled_log(b)
    await wait_gone(sleeping)
    # Refused at once now, before anything is written to the provider.
    again = as_obj(await value(a, "hop.a", "hop.call", {"to": ["hop.b"]}))
    assert again["inner"] == {"error": "plugin.function.providerDisabled"}


async def test_provider_not_running_is_announced_then_dispatched(
    core: Core, tmp_path: Path
) -> None:
    cwd = str(tmp_path)
    a, _ = await backend(core, cwd, "hop.a")
    op = await invoke(a, "hop.a", "hop.call", {"to": ["hop.z"]})
    started = await a.wait_for(lambda e: e["event"] == "functionProviderStartRequired")
    assert started["result"] == {"pluginID": "hop.z"}
    await backend(core, cwd, "hop.z")
    done = await a.completed(op)
    assert as_obj(as_obj(done["result"])["value"])["inner"] == {
        "hops": 0,
        "caller": {"pluginID": "hop.a"},
    }
    assert sum(1 for e in a.seen if e["event"] == "functionProviderStartRequired") == 1


async def test_caller_session_end_cancels_its_calls(core: Core, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    a, a_pid = await backend(core, cwd, "hop.a")
    b, b_pid = await backend(core, cwd, "hop.b")
    c, c_pid = await backend(core, cwd, "hop.c")
    await invoke(a, "hop.a", "hop.call", {"to": ["hop.b", "hop.c"], "sleepMs": 60_000})
    sleeping = await wait_scoped(c_pid, 1)
    os.kill(a_pid, signal.SIGKILL)
    # The caller's session ended: its call and the call made as its child are cancelled.
    await cancelled_log(b)
    await cancelled_log(c)
    await wait_gone(sleeping)
    assert scoped_pids(b_pid) == set()


async def test_deadline_and_result_bounds(core: Core, tmp_path: Path) -> None:
    cwd = str(tmp_path)
    a, _ = await backend(core, cwd, "hop.a")
    b, b_pid = await backend(core, cwd, "hop.b")
    timed = as_obj(
        await value(a, "hop.a", "hop.call", {"to": ["hop.b"], "sleepMs": 60_000, "timeoutMs": 500})
    )
    assert timed["inner"] == {"error": "plugin.host.timeout"}
    await cancelled_log(b)
    await wait_gone(scoped_pids(b_pid))
    relayed = as_obj(await value(a, "hop.a", "hop.call", {"to": ["hop.b"], "resultBytes": 300_000}))
    assert relayed["inner"] == {"error": "plugin.function.payloadTooLarge"}
    await start(
        core,
        [PY, RAW, json.dumps({"version": 0, "functions": [{"id": "big.result"}]})],
        cwd,
        pluginId="com.example.tool",
        shutdownTimeoutMilliseconds=2000,
    )
    huge = as_obj(
        await value(a, "hop.a", "hop.call", {"to": ["com.example.tool"], "fn": "big.result"})
    )
    assert huge["inner"] == {"error": "plugin.function.invalidResult"}
    fits = as_obj(await value(a, "hop.a", "hop.call", {"to": ["hop.b"], "resultBytes": 200_000}))
    assert len(str(as_obj(fits["inner"])["blob"])) == 200_000


async def raw_backend(core: Core, cwd: str, **extra: JSONValue) -> tuple[Session, int]:
    """tests/peers/plugin_backend.py as ``com.example.tool``."""
    functions = [{"id": f} for f in [*RAW_EXPORTS, "seen.get", "stop.reading"]]
    session = await start(
        core,
        [PY, RAW, json.dumps({"version": 0, "functions": functions})],
        cwd,
        pluginId="com.example.tool",
        shutdownTimeoutMilliseconds=2000,
        **extra,
    )
    pid = (await session.wait_state("starting"))["pid"]
    assert isinstance(pid, int)
    await session.wait_state("ready")
    return session, pid


async def test_reply_without_result_is_invalid_and_null_is_a_result(
    core: Core, tmp_path: Path
) -> None:
    """Issue 6: through the relay, a reply with neither result nor error is
    plugin.function.invalidResult; a null result is relayed as ``{value: null}``."""
    cwd = str(tmp_path)
    a, _ = await backend(core, cwd, "hop.a")
    await raw_backend(core, cwd)
    missing = as_obj(
        await value(a, "hop.a", "hop.call", {"to": ["com.example.tool"], "fn": "no.result"})
    )
    assert missing["inner"] == {"error": "plugin.function.invalidResult"}
    null = as_obj(
        await value(a, "hop.a", "hop.call", {"to": ["com.example.tool"], "fn": "echo.value"})
    )
    assert null == {"hops": None, "inner": None}


async def test_provider_that_stops_reading_is_isolated_then_fails_relay_write(
    core: Core, tmp_path: Path
) -> None:
    """Issue 6 "Isolation between backends": a provider that stops reading its stdin delays
    only the calls written to it; once a write to it stays blocked past its request timeout
    its session fails (transportFailed, stage relayWrite) and its calls end like those of
    any session failure. Nothing it ran survives."""
    cwd = str(tmp_path)
    a, _ = await backend(core, cwd, "hop.a")
    await backend(core, cwd, "hop.b")
    # Generous: the other calls below must finish well within it.
    tool, tool_pid = await raw_backend(core, cwd, requestTimeoutMilliseconds=5000)
    waiting = (
        await tool.call(
            "lsp.functionRequest",
            function={"pluginID": "com.example.tool", "functionID": "slow.wait"},
            timeoutMilliseconds=600_000,
        )
    )["operationId"]
    assert isinstance(waiting, str)
    stalled = (
        await tool.call(
            "lsp.functionRequest",
            function={"pluginID": "com.example.tool", "functionID": "stop.reading"},
        )
    )["operationId"]
    assert isinstance(stalled, str)
    assert "result" in await tool.completed(stalled)
    # 200 KB of params (under the 256 KiB bound) fill the stalled provider's pipe.
    blocked = await invoke(
        a,
        "hop.a",
        "hop.call",
        {"to": ["com.example.tool"], "fn": "echo.value", "pad": "x" * 200_000},
    )
    # Meanwhile the same caller's relayed call to another provider completes.
    other = as_obj(await value(a, "hop.a", "hop.call", {"to": ["hop.b"]}))
    assert other["inner"] == {"hops": 0, "caller": {"pluginID": "hop.a"}}
    assert not [e for e in a.seen if e.get("operationId") == blocked]
    failed = await tool.wait_state("failed")
    error = as_obj(failed["error"])
    assert (error["code"], error["stage"]) == ("transportFailed", "relayWrite")
    done = await a.completed(blocked)
    assert as_obj(as_obj(done["result"])["value"])["inner"] == {
        "error": "plugin.function.providerUnavailable"
    }
    ended = await tool.completed(waiting)
    assert as_obj(ended["error"])["code"] == "languageServerUnavailable"
    await wait_gone({tool_pid})


async def test_provider_ignoring_cancel_ends_at_the_relays_own_end(
    core: Core, tmp_path: Path
) -> None:
    """Issue 6: at the deadline the provider is sent $/cancelRequest; one that ignores it
    (and never answers) ends by the relay's own end, GRACE_MS after the deadline, with
    plugin.host.timeout. The exact instant is in plugin/test_relay_clock.py."""
    cwd = str(tmp_path)
    a, _ = await backend(core, cwd, "hop.a")
    tool, _ = await raw_backend(core, cwd)
    started = trio.current_time()
    timed = as_obj(
        await value(
            a,
            "hop.a",
            "hop.call",
            {"to": ["com.example.tool"], "fn": "slow.wait", "timeoutMs": 500},
        )
    )
    # Not before the relay's own end: the deadline plus GRACE_MS (a lower bound only).
    assert trio.current_time() - started >= (500 + GRACE_MS) / 1000
    assert timed["inner"] == {"error": "plugin.host.timeout"}
    seen = (
        await tool.call(
            "lsp.functionRequest",
            function={"pluginID": "com.example.tool", "functionID": "seen.get"},
        )
    )["operationId"]
    assert isinstance(seen, str)
    done = await tool.completed(seen)
    cancels = as_obj(as_obj(done["result"])["value"])["cancels"]
    assert isinstance(cancels, list)
    assert any(isinstance(c, str) and c.startswith("relay-") for c in cancels)


async def host_calls(
    session: Session, plugin_id: str, requests: list[JSONValue]
) -> list[JSONObject]:
    """Have tests/peers/plugin_backend.py send ``requests`` at once; their replies."""
    reply = await session.call(
        "lsp.functionRequest",
        function={"pluginID": plugin_id, "functionID": "host.call"},
        params={"requests": requests},
    )
    operation_id = reply["operationId"]
    assert isinstance(operation_id, str)
    done = await session.completed(operation_id)
    replies = as_obj(done["result"])["value"]
    assert isinstance(replies, list)
    return [as_obj(r) for r in replies]


def error_of(reply: JSONObject) -> tuple[JSONValue, JSONValue]:
    error = as_obj(reply["error"])
    return error["code"], error.get("data")


async def test_relay_methods_need_a_declared_call_and_refuse_a_caller_field(
    core: Core, tmp_path: Path
) -> None:
    """Issue 6 "Discovery and invocation" / "The caller field", through real sessions: a
    plugin that declares no call gets -32010 for both relay methods and getCapabilities
    lists no functions service; a plugin that declares calls sees both methods listed,
    gets the providers sorted without itself, and an invoke carrying a top-level caller is
    -32018 naming it; a parentOperationID naming no call it serves is plugin.host.cancelled
    with the reference's message."""
    cwd = str(tmp_path)
    functions = json.dumps({"version": 0, "functions": [{"id": "host.call"}]})
    relay_requests: list[JSONValue] = [
        {"method": "lithe/host/getCapabilities"},
        {"method": "lithe/host/functions/providers", "params": {"functionID": "hop.call"}},
        {
            "method": "lithe/host/functions/invoke",
            "params": {"pluginID": "hop.a", "functionID": "hop.call", "context": CTX},
        },
    ]
    # com.example.tool exports functions but declares no call.
    exporter = await start(
        core,
        [PY, RAW, functions],
        cwd,
        pluginId="com.example.tool",
        shutdownTimeoutMilliseconds=2000,
    )
    await exporter.wait_state("ready")
    caps, providers, invoked = await host_calls(exporter, "com.example.tool", relay_requests)
    assert "functions" not in as_obj(as_obj(caps["result"])["services"])
    denied = (-32010, {"code": "plugin.host.permissionDenied"})
    assert error_of(providers) == denied
    assert error_of(invoked) == denied
    await exporter.stop()
    # hop.f declares calls (and no hop.f backend runs elsewhere in this test).
    caller = await start(
        core, [PY, RAW, functions], cwd, pluginId="hop.f", shutdownTimeoutMilliseconds=2000
    )
    await caller.wait_state("ready")
    invoke_a: JSONObject = {"pluginID": "hop.a", "functionID": "hop.call", "context": CTX}
    caps, providers, forged, orphan = await host_calls(
        caller,
        "hop.f",
        [
            relay_requests[0],
            relay_requests[1],
            {
                "method": "lithe/host/functions/invoke",
                "params": {**invoke_a, "caller": {"pluginID": "hop.b"}},
            },
            {
                "method": "lithe/host/functions/invoke",
                "params": {**invoke_a, "parentOperationID": "relay-424242"},
            },
        ],
    )
    assert as_obj(as_obj(caps["result"])["services"])["functions"] == {
        "methods": ["lithe/host/functions/invoke", "lithe/host/functions/providers"],
        "notifications": [],
    }
    assert as_obj(providers["result"])["providers"] == [
        {"pluginID": hop, "version": 1} for hop in HOPS if hop != "hop.f"
    ]
    assert error_of(forged) == (
        -32018,
        {"code": "plugin.host.unsupportedOption", "details": {"option": "caller"}},
    )
    orphan_error = as_obj(orphan["error"])
    assert (orphan_error["code"], orphan_error["data"]) == (
        -32800,
        {"code": "plugin.host.cancelled"},
    )
    assert orphan_error["message"] == "The call this request belongs to is not running."
    # Nothing was forwarded: no provider was asked to start.
    assert not [e for e in caller.seen if e["event"] == "functionProviderStartRequired"]
    await caller.stop()
