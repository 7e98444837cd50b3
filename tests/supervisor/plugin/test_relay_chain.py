"""The relay's call chain and the ends of a relayed call (issue 6; plugin-contract.md
"Cross-plugin calls": The call chain, Discovery and invocation, Hot activation).

``parentOperationID`` named, omitted, unknown, finished, or naming a call the host started;
a provider that withdraws the function mid-call; a snapshot that closes the context of a
call still waiting for its provider and of one already running. Run on the MockClock with
in-process providers: JSON-RPC endpoints over memory streams, the same endpoint the
supervisor gives a backend's stdio. Whether the provider was sent ``$/cancelRequest`` is
seen from its side: its handler task is cancelled.
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
from supervisor._plugin._relay_state import NOT_RUNNING_MESSAGE, RelayRefusal

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from protocol import JSONObject, JSONValue
    from supervisor._endpoint import JSONRPCEndpoint

CONTEXT: JSONObject = {"contextID": "w1", "generation": 1}
#: dev.a calls dev.b's fn.x; dev.b calls dev.c's fn.y and dev.a's fn.z.
SNAPSHOT: JSONObject = {
    "plugins": [
        {
            "pluginID": "dev.a",
            "exports": [{"id": "fn.z", "version": 1}],
            "calls": [{"id": "fn.x", "version": 1}],
        },
        {
            "pluginID": "dev.b",
            "exports": [{"id": "fn.x", "version": 1}],
            "calls": [{"id": "fn.y", "version": 1}, {"id": "fn.z", "version": 1}],
        },
        {"pluginID": "dev.c", "exports": [{"id": "fn.y", "version": 1}], "calls": []},
    ],
    "contexts": [{"contextID": "w1", "generation": 1, "authority": "local"}],
}
FUNCTIONS = frozenset({"fn.x", "fn.y", "fn.z"})


@dataclass
class Caller:
    """A calling session as the relay sees it."""

    plugin_id: str
    host_calls: frozenset[str] = frozenset()
    session_id: str = "s"
    events: list[tuple[str, JSONObject]] = field(default_factory=list)

    def emit_event(self, event: str, params: JSONObject) -> None:
        self.events.append((event, params))

    def serves_host_call(self, wire_id: str) -> bool:
        return wire_id in self.host_calls


@dataclass
class Provider:
    """What an in-process provider saw."""

    invoked: list[JSONObject] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    #: Outcomes of the calls its handler made: ``{"value": ...}`` or ``{"error": code}``.
    outcomes: list[JSONObject] = field(default_factory=list)


Handler = "Callable[[FunctionRelay, Provider, JSONObject], Awaitable[JSONValue]]"


@dataclass
class Relay:
    """The relay under test, its providers, and which of them run."""

    relay: FunctionRelay
    seen: dict[str, Provider]
    running: dict[str, JSONRPCEndpoint]


@asynccontextmanager
async def open_relay(
    handlers: dict[str, Callable[[FunctionRelay, Provider, JSONObject], Awaitable[JSONValue]]],
) -> AsyncIterator[Relay]:
    running: dict[str, JSONRPCEndpoint] = {}
    relay = FunctionRelay(
        lambda plugin_id: (
            ProviderHandle(FUNCTIONS, running[plugin_id]) if plugin_id in running else None
        )
    )
    relay.configure(SNAPSHOT)
    box = Relay(relay, {plugin_id: Provider() for plugin_id in handlers}, running)

    async def serve(plugin_id: str, *, task_status: trio.TaskStatus[None]) -> None:
        host_side, backend_side = trio.testing.memory_stream_pair()
        seen = box.seen[plugin_id]

        async def handle(method: str, params: JSONValue | None) -> JSONValue:
            assert method == "lithe/function/invoke"
            assert isinstance(params, dict)
            seen.invoked.append(params)
            try:
                return await handlers[plugin_id](relay, seen, params)
            except trio.Cancelled:
                seen.cancelled.append(str(params["operationID"]))
                raise

        async def refuse(method: str, params: JSONValue | None) -> JSONValue:
            raise JSONRPCError(-32601, method)

        async with (
            open_jsonrpc_endpoint(
                backend_side.send_stream, backend_side.receive_stream, request_handler=handle
            ),
            open_jsonrpc_endpoint(
                host_side.send_stream, host_side.receive_stream, request_handler=refuse
            ) as endpoint,
        ):
            running[plugin_id] = endpoint
            relay.changed()
            task_status.started()
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        for plugin_id in handlers:
            await nursery.start(serve, plugin_id)
        yield box
        nursery.cancel_scope.cancel()


def call_params(plugin_id: str, function_id: str, **extra: JSONValue) -> JSONObject:
    return {"pluginID": plugin_id, "functionID": function_id, "context": CONTEXT, **extra}


async def outcome(relay: FunctionRelay, caller: Caller, params: JSONObject) -> JSONObject:
    """A relayed call's outcome: ``{"value": ...}`` or ``{"error": code, "message": ...}``."""
    try:
        answer = await relay.invoke(caller, params)
    except RelayRefusal as refusal:  # refused by a check, before anything was written
        return {"error": refusal.code, "message": refusal.message, "number": refusal.number}
    except JSONRPCError as exc:  # ended after it was forwarded
        data, message, number = exc.data, exc.message, exc.code
    else:
        assert isinstance(answer, dict)
        return answer
    assert isinstance(data, dict)
    return {"error": data["code"], "message": message, "number": number}


async def sleeps(relay: FunctionRelay, provider: Provider, params: JSONObject) -> JSONValue:
    await trio.sleep_forever()


async def answers(relay: FunctionRelay, provider: Provider, params: JSONObject) -> JSONValue:
    await trio.lowlevel.checkpoint()
    return {"served": params["functionID"]}


async def b_calls(relay: FunctionRelay, provider: Provider, params: JSONObject) -> JSONValue:
    """dev.b's fn.x: ``params.do`` says what it does while it serves the call.

    ``sleep``: nothing; ``call``: call ``params.target`` (``[pluginID, functionID]``) with
    ``params.parent`` as parentOperationID (``"own"``: the operationID it serves; absent:
    omitted), record the outcome, then keep serving until cancelled.
    """
    inner = params["params"]
    assert isinstance(inner, dict)
    if inner.get("do") == "call":
        target = inner["target"]
        assert isinstance(target, list)
        extra: dict[str, JSONValue] = {}
        if "parent" in inner:
            parent = inner["parent"]
            extra["parentOperationID"] = params["operationID"] if parent == "own" else parent
        provider.outcomes.append(
            await outcome(
                relay,
                Caller("dev.b", frozenset({"host-op"})),
                call_params(str(target[0]), str(target[1]), **extra),
            )
        )
    await trio.sleep_forever()


async def run_x(
    relay: FunctionRelay, tag: str, results: dict[str, JSONObject], **inner: JSONValue
) -> None:
    results[tag] = await outcome(relay, Caller("dev.a"), call_params("dev.b", "fn.x", params=inner))


async def test_parent_named_makes_a_child_of_that_call_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The call chain: with parentOperationID the new call is a child of that call only;
    ending another call the backend serves leaves it running, ending its parent cancels it
    (the provider is sent $/cancelRequest)."""
    async with open_relay({"dev.b": b_calls, "dev.c": sleeps}) as box:
        results: dict[str, JSONObject] = {}
        async with trio.open_nursery() as nursery:
            other = trio.CancelScope()
            parent = trio.CancelScope()

            async def in_scope(scope: trio.CancelScope, tag: str, inner: JSONObject) -> None:
                with scope:
                    await run_x(box.relay, tag, results, **inner)

            sleep: JSONObject = {"do": "sleep"}
            nursery.start_soon(in_scope, other, "other", sleep)
            await trio.testing.wait_all_tasks_blocked()
            call_c: JSONObject = {"do": "call", "target": ["dev.c", "fn.y"], "parent": "own"}
            nursery.start_soon(in_scope, parent, "parent", call_c)
            await trio.testing.wait_all_tasks_blocked()
            assert len(box.seen["dev.c"].invoked) == 1
            other.cancel()
            await trio.testing.wait_all_tasks_blocked()
            # Not a child of the other call: still running at its provider.
            assert box.seen["dev.c"].cancelled == []
            assert box.relay.running_calls() == 2
            parent.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert box.seen["dev.c"].cancelled == [box.seen["dev.c"].invoked[0]["operationID"]]
        assert box.seen["dev.b"].outcomes[0]["error"] == "plugin.host.cancelled"
        assert box.relay.running_calls() == 0


async def test_parent_that_answers_ends_its_children(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The call chain: a call's ending cancels the calls made as its children. dev.b starts
    a relayed call to dev.c in the background of its call, then answers; the child is
    cancelled (plugin.host.cancelled) and dev.c is sent $/cancelRequest."""
    handlers: dict[str, Callable[[FunctionRelay, Provider, JSONObject], Awaitable[JSONValue]]]
    handlers = {"dev.b": sleeps, "dev.c": sleeps}
    async with trio.open_nursery() as background, open_relay(handlers) as box:
        child: list[JSONObject] = []

        async def spawns_then_answers(
            relay: FunctionRelay, provider: Provider, params: JSONObject
        ) -> JSONValue:
            async def call_c() -> None:
                child.append(
                    await outcome(
                        relay,
                        Caller("dev.b"),
                        call_params("dev.c", "fn.y", parentOperationID=params["operationID"]),
                    )
                )

            background.start_soon(call_c)
            await trio.testing.wait_all_tasks_blocked()
            assert len(box.seen["dev.c"].invoked) == 1  # the child runs at its provider
            return "answered"

        handlers["dev.b"] = spawns_then_answers
        answer = await outcome(box.relay, Caller("dev.a"), call_params("dev.b", "fn.x"))
        assert answer == {"value": "answered"}
        await trio.testing.wait_all_tasks_blocked()
        assert [(c["error"], c["number"]) for c in child] == [("plugin.host.cancelled", -32800)]
        assert box.seen["dev.c"].cancelled == [box.seen["dev.c"].invoked[0]["operationID"]]
        assert box.relay.running_calls() == 0
        background.cancel_scope.cancel()


async def test_parent_omitted_makes_a_child_of_every_call_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The call chain: without parentOperationID the new call is a child of every relayed
    call the backend serves at that moment, so ending any one of them cancels it."""
    async with open_relay({"dev.b": b_calls, "dev.c": sleeps}) as box:
        results: dict[str, JSONObject] = {}
        async with trio.open_nursery() as nursery:
            other = trio.CancelScope()

            async def other_call() -> None:
                with other:
                    await run_x(box.relay, "other", results, do="sleep")

            nursery.start_soon(other_call)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(
                lambda: run_x(box.relay, "parent", results, do="call", target=["dev.c", "fn.y"])
            )
            await trio.testing.wait_all_tasks_blocked()
            assert len(box.seen["dev.c"].invoked) == 1
            other.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert box.seen["dev.c"].cancelled == [box.seen["dev.c"].invoked[0]["operationID"]]
            assert box.seen["dev.b"].outcomes == [
                {
                    "error": "plugin.host.cancelled",
                    "message": "The parent call ended",
                    "number": -32800,
                }
            ]
            nursery.cancel_scope.cancel()


async def test_parent_not_running_is_cancelled_before_anything_is_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The call chain: a parentOperationID naming a call this backend does not serve (one
    that never existed, or one that finished) is plugin.host.cancelled with the reference's
    message; the provider is never written to."""
    async with open_relay({"dev.b": answers, "dev.c": answers}) as box:
        caller_b = Caller("dev.b")
        unknown = await outcome(
            box.relay, caller_b, call_params("dev.c", "fn.y", parentOperationID="relay-999")
        )
        assert unknown == {
            "error": "plugin.host.cancelled",
            "message": NOT_RUNNING_MESSAGE,
            "number": -32800,
        }
        # A relayed call dev.b served and finished.
        served = await outcome(box.relay, Caller("dev.a"), call_params("dev.b", "fn.x"))
        assert served == {"value": {"served": "fn.x"}}
        finished = box.seen["dev.b"].invoked[0]["operationID"]
        assert isinstance(finished, str)
        again = await outcome(
            box.relay, caller_b, call_params("dev.c", "fn.y", parentOperationID=finished)
        )
        assert again["error"] == "plugin.host.cancelled"
        assert again["message"] == NOT_RUNNING_MESSAGE
        assert box.seen["dev.c"].invoked == []


async def test_parent_started_by_the_host_starts_a_new_chain(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The call chain: a parentOperationID naming a call the host started directly starts a
    new chain. dev.b serves a relayed call of dev.a; calling dev.a back as a child of it (the
    parent omitted) is a cycle, while the same call under the host's call is not."""
    async with open_relay({"dev.a": answers, "dev.b": b_calls}) as box:
        results: dict[str, JSONObject] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_x(box.relay, "cycle", results, do="call", target=["dev.a", "fn.z"])
            )
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(
                lambda: run_x(
                    box.relay,
                    "new-chain",
                    results,
                    do="call",
                    target=["dev.a", "fn.z"],
                    parent="host-op",
                )
            )
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        outcomes = box.seen["dev.b"].outcomes
        assert {"error": "plugin.function.callCycle", "number": -32065} in [
            {k: v for k, v in o.items() if k != "message"} for o in outcomes
        ]
        assert {"value": {"served": "fn.z"}} in outcomes
        # dev.a's fn.z carries the caller field, written by the relay.
        assert box.seen["dev.a"].invoked[0]["caller"] == {"pluginID": "dev.b"}


async def test_withdrawal_mid_call_is_provider_unavailable_and_never_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Discovery and invocation: a provider that withdraws the function while the call runs
    ends it with plugin.function.providerUnavailable; the provider's operation is cancelled
    and the relay does not call it again."""
    async with open_relay({"dev.b": sleeps}) as box:
        results: dict[str, JSONObject] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run_x(box.relay, "x", results))
            await trio.testing.wait_all_tasks_blocked()
            box.relay.withdrawn("dev.b", ["fn.x"])
        assert results["x"]["error"] == "plugin.function.providerUnavailable"
        assert results["x"]["number"] == -32069
        await trio.testing.wait_all_tasks_blocked()
        wire_id = box.seen["dev.b"].invoked[0]["operationID"]
        assert box.seen["dev.b"].cancelled == [wire_id]
        assert len(box.seen["dev.b"].invoked) == 1


def changed_snapshot(change: str) -> JSONObject:
    plugins = SNAPSHOT["plugins"]
    assert isinstance(plugins, list)
    changed: list[JSONValue] = []
    for raw in plugins:
        assert isinstance(raw, dict)
        plugin = dict(raw)
        if change == "caller-undeclares" and plugin["pluginID"] == "dev.a":
            plugin["calls"] = []
        if change == "provider-changes-version" and plugin["pluginID"] == "dev.b":
            plugin["exports"] = [{"id": "fn.x", "version": 2}]
        if change == "waiting-caller-undeclares" and plugin["pluginID"] == "dev.b":
            plugin["calls"] = [{"id": "fn.z", "version": 1}]
        if change == "waiting-provider-disabled" and plugin["pluginID"] == "dev.c":
            plugin["enabled"] = False
        changed.append(plugin)
    contexts: list[JSONValue] = [{"contextID": "w1", "generation": 1, "authority": "local"}]
    if change == "close-context":
        contexts = []
    if change == "new-generation":
        contexts = [{"contextID": "w1", "generation": 2, "authority": "local"}]
    return {"plugins": changed, "contexts": contexts}


@pytest.mark.parametrize(
    ("change", "ended"),
    [
        (
            "close-context",
            {"running": "plugin.host.contextExpired", "waiting": "plugin.host.contextExpired"},
        ),
        (
            "new-generation",
            {"running": "plugin.host.contextExpired", "waiting": "plugin.host.contextExpired"},
        ),
        ("caller-undeclares", {"running": "plugin.function.notDeclared"}),
        ("provider-changes-version", {"running": "plugin.function.providerDisabled"}),
        ("waiting-caller-undeclares", {"waiting": "plugin.function.notDeclared"}),
        ("waiting-provider-disabled", {"waiting": "plugin.function.providerDisabled"}),
    ],
)
async def test_snapshot_change_ends_waiting_and_running_calls_at_once(
    autojump_clock: trio.testing.MockClock, change: str, ended: dict[str, str]
) -> None:
    """Hot activation: calls the new snapshot no longer allows end at once with the
    reference's code, both a call still waiting for its provider and one already running,
    whose provider is also sent $/cancelRequest; the calls it still allows go on."""
    async with open_relay({"dev.b": sleeps}) as box:
        results: dict[str, JSONObject] = {}
        waiting_caller = Caller("dev.b", frozenset({"host-op"}))

        async def waiting() -> None:
            # dev.c is not running: this call waits for it. Made under a call the host
            # started, it is no child of the running call dev.b serves.
            results["waiting"] = await outcome(
                box.relay,
                waiting_caller,
                call_params("dev.c", "fn.y", parentOperationID="host-op"),
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run_x(box.relay, "running", results))
            nursery.start_soon(waiting)
            await trio.testing.wait_all_tasks_blocked()
            assert waiting_caller.events == [
                ("functionProviderStartRequired", {"result": {"pluginID": "dev.c"}})
            ]
            start = trio.current_time()
            answer = box.relay.configure(changed_snapshot(change))
            assert answer["endedCalls"] == len(ended)
            await trio.testing.wait_all_tasks_blocked()
            assert trio.current_time() == start  # at once
            assert {tag: str(r["error"]) for tag, r in results.items()} == ended, (results, answer)
            running_wire = box.seen["dev.b"].invoked[0]["operationID"]
            expected_cancelled = [running_wire] if "running" in ended else []
            assert box.seen["dev.b"].cancelled == expected_cancelled
            assert box.relay.running_calls() == 2 - len(ended)
            nursery.cancel_scope.cancel()
