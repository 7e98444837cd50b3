"""The relay's deadline, to the instant (issue 6; plugin-contract.md "Cross-plugin calls").

At a relayed call's deadline the provider is sent ``$/cancelRequest`` (its session's own
timeout) and the calls made as the call's children are cancelled; the call then ends when
the provider answers, or by the relay's own end ``GRACE_MS`` after the deadline, with
``plugin.host.timeout`` either way. Run on the MockClock with in-process providers: JSON-RPC
endpoints over memory streams, the same endpoint the supervisor gives a backend's stdio.
The same bound through real backend processes is in plugin/test_relay.py.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from supervisor._endpoint import JSONRPCError, open_jsonrpc_endpoint
from supervisor._plugin._relay import FunctionRelay, ProviderHandle
from supervisor._plugin._relay_state import (
    DEFAULT_TIMEOUT_MS,
    GRACE_MS,
    MAX_TIMEOUT_MS,
    PROVIDER_START_MS,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from protocol import JSONObject, JSONValue
    from supervisor._endpoint import JSONRPCEndpoint

CONTEXT: JSONObject = {"contextID": "w1", "generation": 1}
SNAPSHOT: JSONObject = {
    "plugins": [
        {"pluginID": "dev.a", "exports": [], "calls": [{"id": "fn.x", "version": 1}]},
        {
            "pluginID": "dev.b",
            "exports": [{"id": "fn.x", "version": 1}],
            "calls": [{"id": "fn.y", "version": 1}],
        },
        {"pluginID": "dev.c", "exports": [{"id": "fn.y", "version": 1}], "calls": []},
    ],
    "contexts": [{"contextID": "w1", "generation": 1, "authority": "local"}],
}
TIMEOUT_MS = 1000


@dataclass
class Caller:
    """A calling session as the relay sees it."""

    plugin_id: str
    session_id: str = "s"
    events: list[tuple[str, JSONObject]] = field(default_factory=list)

    def emit_event(self, event: str, params: JSONObject) -> None:
        self.events.append((event, params))

    def serves_host_call(self, wire_id: str) -> bool:
        return False


@dataclass
class Provider:
    """What an in-process provider saw: when it was cancelled, what its child call got."""

    cancelled_at: list[float] = field(default_factory=list)
    child: list[tuple[JSONValue, float]] = field(default_factory=list)
    release: trio.Event = field(default_factory=trio.Event)


@asynccontextmanager
async def providers(
    handlers: dict[str, Callable[[Provider, JSONObject], Awaitable[JSONValue]]],
) -> AsyncIterator[tuple[FunctionRelay, dict[str, Provider]]]:
    """A relay whose providers are in-process endpoints running ``handlers``."""
    endpoints: dict[str, JSONRPCEndpoint] = {}
    seen = {plugin_id: Provider() for plugin_id in handlers}
    relay = FunctionRelay(
        lambda plugin_id: (
            ProviderHandle(frozenset({"fn.x", "fn.y"}), endpoints[plugin_id])
            if plugin_id in endpoints
            else None
        )
    )
    relay.configure(SNAPSHOT)

    async def serve(plugin_id: str, *, task_status: trio.TaskStatus[None]) -> None:
        host_side, backend_side = trio.testing.memory_stream_pair()

        async def handle(method: str, params: JSONValue | None) -> JSONValue:
            assert method == "lithe/function/invoke"
            assert isinstance(params, dict)
            return await handlers[plugin_id](seen[plugin_id], params)

        async with (
            open_jsonrpc_endpoint(
                backend_side.send_stream, backend_side.receive_stream, request_handler=handle
            ),
            open_jsonrpc_endpoint(
                host_side.send_stream, host_side.receive_stream, request_handler=handle
            ) as endpoint,
        ):
            endpoints[plugin_id] = endpoint
            task_status.started()
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        for plugin_id in handlers:
            await nursery.start(serve, plugin_id)
        yield relay, seen
        for provider in seen.values():
            provider.release.set()
        nursery.cancel_scope.cancel()


async def invoke_x(relay: FunctionRelay) -> tuple[JSONValue, float]:
    """Call dev.b's fn.x as dev.a; the error code it ends with, and when."""
    with pytest.raises(JSONRPCError) as info:
        await relay.invoke(
            Caller("dev.a"),
            {
                "pluginID": "dev.b",
                "functionID": "fn.x",
                "context": CONTEXT,
                "timeoutMilliseconds": TIMEOUT_MS,
            },
        )
    data = info.value.data
    assert isinstance(data, dict)
    return data["code"], trio.current_time()


async def cooperates(provider: Provider, params: JSONObject) -> JSONValue:
    try:
        await trio.sleep_forever()
    finally:
        provider.cancelled_at.append(trio.current_time())


async def answers_late(provider: Provider, params: JSONObject) -> JSONValue:
    try:
        await trio.sleep_forever()
    except trio.Cancelled:
        provider.cancelled_at.append(trio.current_time())
    with trio.CancelScope(shield=True):
        await trio.sleep(1)
    return {"late": True}


async def ignores(provider: Provider, params: JSONObject) -> JSONValue:
    try:
        await trio.sleep_forever()
    except trio.Cancelled:
        provider.cancelled_at.append(trio.current_time())
    with trio.CancelScope(shield=True):
        await provider.release.wait()
    return None


@pytest.mark.parametrize(
    ("handler", "ends_after_deadline_s"),
    [(cooperates, 0.0), (answers_late, 1.0), (ignores, GRACE_MS / 1000)],
    ids=["answers-the-cancel", "answers-within-grace", "never-answers"],
)
async def test_deadline_cancels_at_provider_then_ends_by_answer_or_grace(
    autojump_clock: trio.testing.MockClock,
    handler: Callable[[Provider, JSONObject], Awaitable[JSONValue]],
    ends_after_deadline_s: float,
) -> None:
    async with providers({"dev.b": handler}) as (relay, seen):
        deadline = trio.current_time() + TIMEOUT_MS / 1000
        code, ended_at = await invoke_x(relay)
        assert code == "plugin.host.timeout"
        assert seen["dev.b"].cancelled_at == [pytest.approx(deadline)]
        assert ended_at == pytest.approx(deadline + ends_after_deadline_s)
        assert relay.running_calls() == 0


async def test_deadline_cancels_children_even_when_the_provider_ignores_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ "Cancelling a call, its deadline, ... cancels its children down the chain": the
    child ends at the parent's deadline, not at the relay's own end."""
    relay_box: list[FunctionRelay] = []

    async def calls_c_and_ignores(provider: Provider, params: JSONObject) -> JSONValue:
        with trio.CancelScope(shield=True):
            try:
                await relay_box[0].invoke(
                    Caller("dev.b", "s-b"),
                    {"pluginID": "dev.c", "functionID": "fn.y", "context": CONTEXT},
                )
            except JSONRPCError as exc:
                provider.child.append((exc.data, trio.current_time()))
            await provider.release.wait()
        return None

    async with providers({"dev.b": calls_c_and_ignores, "dev.c": cooperates}) as (
        relay,
        seen,
    ):
        relay_box.append(relay)
        deadline = trio.current_time() + TIMEOUT_MS / 1000
        code, ended_at = await invoke_x(relay)
        assert code == "plugin.host.timeout"
        assert ended_at == pytest.approx(deadline + GRACE_MS / 1000)
        [(child_error, child_ended_at)] = seen["dev.b"].child
        assert child_error == {"code": "plugin.host.cancelled"}
        assert child_ended_at == pytest.approx(deadline)
        # The child's provider was sent $/cancelRequest at the parent's deadline.
        assert seen["dev.c"].cancelled_at == [pytest.approx(deadline)]
        assert relay.running_calls() == 0


@pytest.mark.parametrize(
    ("timeout_ms", "ends_after_s"),
    [(None, DEFAULT_TIMEOUT_MS / 1000), (10**9, MAX_TIMEOUT_MS / 1000)],
    ids=["default", "capped"],
)
async def test_default_and_capped_deadline(
    autojump_clock: trio.testing.MockClock, timeout_ms: int | None, ends_after_s: float
) -> None:
    """``timeoutMilliseconds`` defaults to 60 000 and is capped at 600 000."""
    async with providers({"dev.b": cooperates}) as (relay, seen):
        params: JSONObject = {"pluginID": "dev.b", "functionID": "fn.x", "context": CONTEXT}
        if timeout_ms is not None:
            params["timeoutMilliseconds"] = timeout_ms
        start = trio.current_time()
        with pytest.raises(JSONRPCError) as info:
            await relay.invoke(Caller("dev.a"), params)
        assert info.value.data == {"code": "plugin.host.timeout"}
        assert trio.current_time() - start == pytest.approx(ends_after_s)
        assert seen["dev.b"].cancelled_at == [pytest.approx(start + ends_after_s)]


@pytest.mark.parametrize(
    ("timeout_ms", "code", "ends_after_s"),
    [
        (None, "plugin.function.providerUnavailable", PROVIDER_START_MS / 1000),
        (5000, "plugin.host.timeout", 5.0),
    ],
    ids=["start-wait-passes", "deadline-first"],
)
async def test_provider_not_running(
    autojump_clock: trio.testing.MockClock,
    timeout_ms: int | None,
    code: str,
    ends_after_s: float,
) -> None:
    """ "Providers that are not running": functionProviderStartRequired once per waiting
    provider; providerUnavailable after 30 s, unless the relay's deadline comes first."""
    async with providers({}) as (relay, _):
        caller = Caller("dev.a")
        params: JSONObject = {"pluginID": "dev.b", "functionID": "fn.x", "context": CONTEXT}
        if timeout_ms is not None:
            params["timeoutMilliseconds"] = timeout_ms
        start = trio.current_time()
        outcomes: list[JSONValue] = []

        async def one() -> None:
            with pytest.raises(JSONRPCError) as info:
                await relay.invoke(caller, params)
            outcomes.append(info.value.data)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
        assert outcomes == [{"code": code}] * 2
        assert trio.current_time() - start == pytest.approx(ends_after_s)
        assert caller.events == [
            ("functionProviderStartRequired", {"result": {"pluginID": "dev.b"}})
        ]
