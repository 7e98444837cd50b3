"""plugin-contract.md "Plugin-owned sessions": what ``lsp.pluginServerRequest`` and
``lsp.pluginServerNotify`` answer, while the server's gates are closed and after; and what
``lsp.startServer`` hands the server (core-api.md "lsp.* session lifecycle")."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from protocol import CoreError
from supervisor import open_core
from tests.supervisor.lsp._support import as_obj, fake, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.lsp._support import Session

PLUGIN = "p1"
POLICY: JSONObject = {
    "requestMethods": [
        "test/fail",
        "test/rawReply",
        "test/sleep",
        "custom/echo",
        "workspace/executeCommand",
    ],
    "commands": ["build"],
}
GATES: JSONValue = [
    {"id": "ready", "until": "notification", "method": "custom/ready", "match": {"ok": True}}
]


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


async def plugin_request(
    core: Core, session: Session, method: str, params: JSONValue = None, **extra: JSONValue
) -> JSONValue:
    payload: JSONObject = {"sessionId": session.id, "pluginId": PLUGIN, "method": method, **extra}
    if params is not None:
        payload["params"] = params
    return await core.call("lsp.pluginServerRequest", payload)


async def test_initialization_options_and_server_info(core: Core, tmp_path: str) -> None:
    options: JSONObject = {"mode": "strict", "nested": {"list": [1, 2], "none": None}}
    session = await start(core, fake(), str(tmp_path), initializationOptions=options)
    await session.wait_state("ready")
    info = await session.wait_for(lambda e: e["event"] == "serverInfoChanged")
    assert info["serverInfo"] == {"name": "lsp-fake", "version": "1"}
    received = as_obj((await session.roundtrip("test/initializeParams"))["result"])
    assert received["initializationOptions"] == options
    await session.stop()


async def test_server_errors_and_oversized_results(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path), sessionPolicy=POLICY, pluginId=PLUGIN)
    await session.wait_state("ready")
    with pytest.raises(CoreError) as failed:
        await plugin_request(
            core,
            session,
            "test/fail",
            {"code": -32001, "message": "no index yet", "data": {"secret": "kept back"}},
        )
    assert failed.value.code == "plugin.host.languageServerError"
    # The server's data is not forwarded.
    assert failed.value.details == {"code": -32001, "message": "no index yet"}
    big = '"' + "x" * (1024 * 1024) + '"'
    with pytest.raises(CoreError) as too_big:
        await plugin_request(core, session, "test/rawReply", {"text": big})
    assert too_big.value.code == "plugin.host.limitExceeded"
    fits = '"' + "x" * (1024 * 1024 - 100) + '"'
    assert await plugin_request(core, session, "test/rawReply", {"text": fits}) == {
        "value": "x" * (1024 * 1024 - 100)
    }
    await session.stop()


async def test_requests_wait_in_order_for_the_gates_and_notifications_do_not(
    core: Core, tmp_path: str
) -> None:
    go = os.path.join(tmp_path, "ready")
    session = await start(
        core,
        fake(f"--ready-when={go}"),
        str(tmp_path),
        sessionPolicy=POLICY,
        pluginId=PLUGIN,
        gates=GATES,
    )
    await session.wait_for(lambda e: e["event"] == "featuresChanged")  # initialized
    counts: dict[int, int] = {}

    async def build(index: int) -> None:
        answer = as_obj(
            await plugin_request(
                core, session, "workspace/executeCommand", {"command": "build", "arguments": [0]}
            )
        )
        # count: how many executeCommand requests had reached the server with this one.
        counts[index] = int(str(as_obj(answer["value"])["count"]))

    async with trio.open_nursery() as nursery:
        for index in range(1, 6):
            nursery.start_soon(build, index)
            await trio.testing.wait_all_tasks_blocked()
        assert (await session.snapshot())["closedGates"] == ["ready"]
        # A notification is sent at once, gates or not.
        delivered = await core.call(
            "lsp.pluginServerNotify",
            {
                "sessionId": session.id,
                "pluginId": PLUGIN,
                "method": "custom/echo",
                "params": {"text": "not held"},
            },
        )
        assert delivered == {"delivered": True}
        await session.wait_for(lambda e: e["event"] == "log" and e["message"] == "echo not held")
        assert counts == {}
        await trio.Path(go).touch()
    # The server saw them in the order they were asked for.
    assert counts == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5}
    await session.stop()


async def test_waiting_requests_are_bounded_and_obey_their_deadline_and_cancel(
    core: Core, tmp_path: str
) -> None:
    never = os.path.join(tmp_path, "never")
    session = await start(
        core,
        fake(f"--ready-when={never}"),
        str(tmp_path),
        sessionPolicy=POLICY,
        pluginId=PLUGIN,
        gates=GATES,
        shutdownTimeoutMilliseconds=2000,
    )
    await session.wait_for(lambda e: e["event"] == "featuresChanged")
    # A waiting request still obeys its own deadline.
    with pytest.raises(CoreError) as timed_out:
        await plugin_request(core, session, "test/sleep", {"ms": 1}, timeoutMilliseconds=100)
    assert timed_out.value.code == "plugin.host.timeout"
    ended: list[str] = []

    async def wait_forever() -> None:
        try:
            await plugin_request(core, session, "test/sleep", {"ms": 1})
        except CoreError as exc:
            ended.append(exc.code)

    async with trio.open_nursery() as nursery:
        first = trio.CancelScope()

        async def cancelled_one() -> None:
            with first:
                await plugin_request(core, session, "test/sleep", {"ms": 1})

        nursery.start_soon(cancelled_one)
        for _ in range(127):
            nursery.start_soon(wait_forever)
        await trio.testing.wait_all_tasks_blocked()
        # 128 wait: the 129th is plugin.host.busy.
        with pytest.raises(CoreError) as busy:
            await plugin_request(core, session, "test/sleep", {"ms": 1})
        assert busy.value.code == "plugin.host.busy"
        # A waiting request that is cancelled leaves the queue: there is room again.
        first.cancel()
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait_forever)
        await trio.testing.wait_all_tasks_blocked()
        assert ended == []
        result = await session.stop()
        assert result["state"] == "stopped"
    # Stopping the server ends every waiting request with languageServerUnavailable.
    assert ended == ["plugin.host.languageServerUnavailable"] * 128


async def test_a_plugin_request_deadline_is_1_to_300000_ms(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path), sessionPolicy=POLICY, pluginId=PLUGIN)
    await session.wait_state("ready")
    for bad in (0, 300_001, -1, 1.5, True):
        with pytest.raises(CoreError) as refused:
            await plugin_request(core, session, "test/sleep", {"ms": 1}, timeoutMilliseconds=bad)
        assert refused.value.code == "plugin.host.invalidParams"
    edge = await plugin_request(core, session, "test/sleep", {"ms": 1}, timeoutMilliseconds=300_000)
    assert edge == {"value": "slept"}
    await session.stop()
