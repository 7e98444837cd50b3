"""The SDK's "Rules that keep Lithe in charge" (issue 6; plugin-sdk-node.md), in process.

A :class:`~supervisor.plugin_sdk.Backend` serves one session over a memory stream pair; the
test plays the host with the same JSON-RPC endpoint the supervisor uses. What the backend
writes is recorded on the host side, so "nothing was sent" is observed, not assumed.
Processes a call starts are real (children of the test process).
"""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from supervisor import JSONRPCError, open_jsonrpc_endpoint
from supervisor.plugin_sdk import (
    CallContext,
    HostError,
    PluginError,
    PluginSdkError,
    create_backend,
)

from ._host import wait_gone

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from protocol import JSONObject, JSONValue
    from supervisor import JSONRPCEndpoint
    from supervisor.plugin_sdk import Backend


@dataclass
class Seen:
    """What the host received from the backend."""

    requests: list[tuple[str, JSONValue]] = field(default_factory=list)
    notifications: list[tuple[str, JSONValue]] = field(default_factory=list)


@asynccontextmanager
async def session(
    backend: Backend, *, offer_functions: bool = True
) -> AsyncIterator[tuple[JSONRPCEndpoint, Seen]]:
    """Serve ``backend`` in process and initialize it; yields the host's endpoint."""
    host_side, backend_side = trio.testing.memory_stream_pair()
    seen = Seen()

    async def on_request(method: str, params: JSONValue | None) -> JSONValue:
        seen.requests.append((method, params))
        if method == "lithe/host/getCapabilities":
            return {"protocolVersion": 0, "services": {}, "limits": {}}
        return {"echo": method}

    async def on_notification(method: str, params: JSONValue | None) -> None:
        seen.notifications.append((method, params))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(backend.serve, backend_side.receive_stream, backend_side.send_stream)
        async with open_jsonrpc_endpoint(
            host_side.send_stream,
            host_side.receive_stream,
            request_handler=on_request,
            notification_handler=on_notification,
            name="backend",
        ) as endpoint:
            experimental: JSONObject = {"litheLogging": {"versions": [0]}}
            if offer_functions:
                experimental["litheFunctions"] = {"versions": [0]}
            await endpoint.request(
                "initialize", {"processId": None, "capabilities": {"experimental": experimental}}
            )
            await endpoint.notify("initialized", {})
            yield endpoint, seen
            await endpoint.notify("exit")


async def invoke(
    endpoint: JSONRPCEndpoint, function_id: str, operation_id: str, **extra: JSONValue
) -> JSONValue:
    return await endpoint.request(
        "lithe/function/invoke",
        {"functionID": function_id, "operationID": operation_id, "params": {}, **extra},
    )


async def test_lithe_methods_are_never_sent_by_hand() -> None:
    """Rule 2: a backend never sends lithe/function/invoke or lithe/build/*; the SDK
    refuses every lithe/* method outside ``host`` (which sends only lithe/host/*), and
    lifecycle and lithe/* handlers are reserved. Nothing reaches the host."""
    backend = create_backend("rules", "1.0.0")
    refusals: list[str] = []

    @backend.function("try.all")
    async def try_all(params: JSONObject, context: CallContext) -> JSONValue:
        attempts: list[Callable[[], Awaitable[object]]] = [
            partial(backend.send_request, "lithe/function/invoke", {}),
            partial(backend.send_request, "lithe/build/model", {}),
            partial(backend.send_notification, "lithe/log", {}),
            partial(backend.send_request, "shutdown"),
            partial(context.host.request, "lithe/function/invoke", {}),
            partial(context.host.request, "lithe/build/model", {}),
            partial(backend.host.request, "lithe/vcs/status", {}),
        ]
        for attempt in attempts:
            try:
                await attempt()
            except PluginSdkError as refused:
                refusals.append(refused.code)
        return None

    for method in ("initialize", "shutdown", "lithe/function/invoke", "lithe/x", "$/x"):
        with pytest.raises(PluginSdkError) as reserved:
            backend.on_request(method, try_all)  # type: ignore[arg-type]
        assert reserved.value.code == "sdk.reservedMethod"
    async with session(backend) as (endpoint, seen):
        assert await invoke(endpoint, "try.all", "op-1") is None
        # An ordinary request still goes out: the refusals above were the SDK's own.
        assert await backend.send_request("custom/ping", {}) == {"echo": "custom/ping"}
    assert refusals == ["sdk.reservedMethod"] * 4 + ["sdk.host.invalidMethod"] * 3
    assert seen.requests == [("custom/ping", {})]


async def test_host_requests_without_the_protocol_fail_locally() -> None:
    """plugin-sdk-node.md "Host services": without the litheFunctions offer, host requests
    fail locally with HostError plugin.host.unavailable and send nothing."""
    backend = create_backend("rules", "1.0.0")
    async with session(backend, offer_functions=False) as (_, seen):
        assert backend.functions_version is None
        with pytest.raises(HostError) as unavailable:
            await backend.host.credentials.get("k")
        assert unavailable.value.code == "plugin.host.unavailable"
        assert await backend.host.supports("lithe/host/credentials/get") is False
        with pytest.raises(HostError) as not_negotiated:
            await backend.register_function("late.one", _returns_none)
        assert not_negotiated.value.code == "plugin.host.unavailable"
    assert seen.requests == []


async def _returns_none(params: JSONObject, context: CallContext) -> JSONValue:
    await trio.lowlevel.checkpoint()
    return None


def _sleeper() -> list[str]:
    return [
        sys.executable,
        "-c",
        "import os, sys, time; print(os.getpid(), flush=True); time.sleep(600)",
    ]


async def test_work_left_running_ends_with_its_call() -> None:
    """Rule 5: when the handler returns, background work of the call (``start_soon``) and
    the process tree it runs are stopped; a progress report after the call settled is
    dropped."""
    backend = create_backend("rules", "1.0.0")
    started = trio.Event()
    pids: list[int] = []
    ended: list[str] = []
    contexts: list[CallContext] = []

    def on_output(stream: str, chunk: bytes) -> None:
        if stream == "stdout" and chunk.strip():
            pids.append(int(chunk.split()[0]))
            started.set()

    async def background(context: CallContext) -> None:
        try:
            await context.run(_sleeper(), on_output=on_output)
        except trio.Cancelled:
            ended.append("cancelled")
            raise

    @backend.function("leave.work")
    async def leave_work(params: JSONObject, context: CallContext) -> JSONValue:
        contexts.append(context)
        context.start_soon(background, context)
        await started.wait()
        return "returned"

    async with session(backend) as (endpoint, seen):
        assert await invoke(endpoint, "leave.work", "op-1") == "returned"
        assert ended == ["cancelled"]
        await wait_gone(set(pids))
        # The call settled: its context can no longer report progress.
        await contexts[0].progress("late", 50)
        await backend.send_notification("custom/marker", {})
        with trio.fail_after(10):
            while ("custom/marker", {}) not in seen.notifications:  # noqa: ASYNC110 - list
                await trio.sleep(0.01)
    assert not [n for n in seen.notifications if n[0] == "lithe/function/progress"]
    assert len(pids) == 1


async def test_the_call_context_reads_only_what_the_host_wrote() -> None:
    """The caller field: ``context.caller`` is ``{pluginID}`` of a relayed call, None for a
    call the host started or when the field is not exactly ``{pluginID}``; a caller key
    inside params is ordinary data. ``context.host`` fills parentOperationID."""
    backend = create_backend("rules", "1.0.0")
    seen_callers: list[JSONValue] = []

    @backend.function("who.calls")
    async def who_calls(params: JSONObject, context: CallContext) -> JSONValue:
        seen_callers.append(context.caller)
        return params.get("caller")

    async with session(backend) as (endpoint, _):
        assert await invoke(endpoint, "who.calls", "o1", caller={"pluginID": "dev.x"}) is None
        assert await invoke(endpoint, "who.calls", "o2") is None
        await invoke(endpoint, "who.calls", "o3", caller={"pluginID": "dev.x", "extra": 1})
        await invoke(endpoint, "who.calls", "o4", caller="dev.x")
        inner = await endpoint.request(
            "lithe/function/invoke",
            {"functionID": "who.calls", "operationID": "o5", "params": {"caller": "forged"}},
        )
        assert inner == "forged"
    assert seen_callers == [{"pluginID": "dev.x"}, None, None, None, None]


async def test_withdrawing_a_function_revokes_its_running_call() -> None:
    """Rule 5 / "Registration and withdrawal": unregister_function sends
    lithe/function/unregister and ends the function's running call here too (revoked),
    with the processes it ran."""
    backend = create_backend("rules", "1.0.0")
    pids: list[int] = []
    started = trio.Event()

    def on_output(stream: str, chunk: bytes) -> None:
        if stream == "stdout" and chunk.strip():
            pids.append(int(chunk.split()[0]))
            started.set()

    @backend.function("long.run")
    async def long_run(params: JSONObject, context: CallContext) -> JSONValue:
        await context.run(_sleeper(), on_output=on_output)
        return "finished"

    async with session(backend) as (endpoint, seen):
        errors: list[JSONRPCError] = []

        async def call() -> None:
            try:
                await invoke(endpoint, "long.run", "op-r")
            except JSONRPCError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            with trio.fail_after(20):
                await started.wait()
            await backend.unregister_function("long.run")
        await wait_gone(set(pids))
        assert [(e.code, e.data) for e in errors] == [(-32800, {"code": "plugin.function.revoked"})]
        assert ("lithe/function/unregister", {"ids": ["long.run"]}) in seen.requests
        assert backend.function_ids == []


async def test_a_plugin_error_from_concurrent_work_stays_presentable() -> None:
    """Rule 6 with Trio's concurrency: a PluginError raised in a task of the handler's own
    nursery, or of work started with ``context.start_soon``, reaches the host as that
    PluginError (as the first rejection of a ``Promise.all`` does), not as the generic
    failure an ExceptionGroup would be. A group with another error in it stays generic."""
    backend = create_backend("rules", "1.0.0")

    # Both raise at their first step, before any checkpoint: a group holds both.
    async def refuse(code: str) -> None:
        raise PluginError(code, f"{code} went wrong.")

    async def crash() -> None:
        raise RuntimeError("a bug")

    @backend.function("own.nursery")
    async def own_nursery(params: JSONObject, context: CallContext) -> JSONValue:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(refuse, "demo.first")
        return None

    @backend.function("call.nursery")
    async def call_nursery(params: JSONObject, context: CallContext) -> JSONValue:
        context.start_soon(refuse, "demo.background")
        await trio.sleep_forever()
        return None

    @backend.function("mixed.group")
    async def mixed_group(params: JSONObject, context: CallContext) -> JSONValue:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(refuse, "demo.mixed")
            nursery.start_soon(crash)
        return None

    async with session(backend) as (endpoint, _seen):
        for function_id, code in (
            ("own.nursery", "demo.first"),
            ("call.nursery", "demo.background"),
        ):
            with pytest.raises(JSONRPCError) as info:
                await invoke(endpoint, function_id, f"op-{function_id}")
            assert (info.value.message, info.value.data) == (f"{code} went wrong.", {"code": code})
        with pytest.raises(JSONRPCError) as info:
            await invoke(endpoint, "mixed.group", "op-mixed")
        assert (info.value.message, info.value.data) == ("The function failed.", None)
