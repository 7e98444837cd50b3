"""SDK rules driven through a backend written for them (tests/peers/sdk_backend.py):
initialize/shutdown hooks, typed diagnostics, suppressed success facts, the fact that
precedes its answer, host requests bound to their call, and the local refusals
(plugin-sdk-node.md; plugin-contract.md "Structured plugin diagnostics")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import JSONRPCError
from supervisor.plugin_sdk import PluginSdkError
from supervisor.plugin_sdk._backend import _invoke_params, _wire_context

from ._host import CONTEXT, Host

if TYPE_CHECKING:
    from protocol import JSONObject

BACKEND = str(Path(__file__).resolve().parents[1] / "peers" / "sdk_backend.py")
PLUGIN = "dev.test.sdk"


async def test_initialize_and_shutdown_hooks() -> None:
    stderr: list[bytes] = []
    host = Host()
    async with host.open_backend(BACKEND, PLUGIN, stderr_sink=stderr) as peer:
        # The initialize hook registered a function before the answer listed them.
        listed = peer.initialize_result["capabilities"]["experimental"]["litheFunctions"]
        assert "hook.added" in [f["id"] for f in listed["functions"]]
        assert await peer.invoke("hook.added") == "added"
        assert b"shutdown hook" not in b"".join(stderr)
        assert await peer.endpoint.request("shutdown") is None
        with trio.fail_after(30):
            while b"shutdown hook" not in b"".join(stderr):  # noqa: ASYNC110 - stderr has no event
                await trio.sleep(0.02)
        await peer.endpoint.notify("exit")


async def test_typed_diagnostics_are_facts_of_the_call() -> None:
    host = Host()
    async with host.open_backend(BACKEND, PLUGIN) as peer:
        params: JSONObject = {"operation": "diag.report", "code": "index.stale", "count": 3}
        assert await peer.invoke("diag.report", params, operationID="op-diag") is None
        await peer.wait_for(lambda: len(peer.facts()) >= 3)
        degraded, recovered = peer.facts()[:2]
        assert degraded == {
            "kind": "degraded",
            "operation": "diag.report",
            "code": "index.stale",
            "count": 3,
            "operationId": "op-diag",
        }
        assert recovered == {
            "kind": "recovered",
            "operation": "diag.report",
            "code": "index.stale",
            "operationId": "op-diag",
        }
        # No free text: a message-like code is refused before anything is sent.
        with pytest.raises(JSONRPCError):
            await peer.invoke("diag.report", {"operation": "diag.report", "code": "has space"})


async def test_suppressed_successes_record_no_fact_and_failures_still_do() -> None:
    host = Host()
    async with host.open_backend(BACKEND, PLUGIN) as peer:
        for _ in range(3):
            assert await peer.invoke("quiet.poll") == "polled"
        assert await peer.invoke("loud.poll") == "polled"
        await peer.wait_for(lambda: peer.facts())
        assert [f["operation"] for f in peer.facts()] == ["loud.poll"]
        with pytest.raises(JSONRPCError):
            await peer.invoke("quiet.poll", {"fail": True})
        await peer.wait_for(lambda: len(peer.facts()) == 2)
        failed = peer.facts()[1]
        assert (failed["operation"], failed["kind"], failed["code"]) == (
            "quiet.poll",
            "operationFailed",
            "plugin.error",
        )


async def test_host_requests_of_a_call_end_with_it() -> None:
    host = Host()
    host.credential_delay_s = 600
    async with host.open_backend(BACKEND, PLUGIN) as peer:
        with trio.move_on_after(60) as guard:
            async with trio.open_nursery() as nursery:
                scope = trio.CancelScope()

                async def call() -> None:
                    with scope:
                        await peer.invoke("host.wait", context=CONTEXT)

                nursery.start_soon(call)
                await peer.wait_for(lambda: peer.host_outstanding == 1)
                scope.cancel()  # the host cancels the call ($/cancelRequest)
            # The SDK cancelled the call's own host request: the host's handler ended.
            while peer.host_outstanding:  # noqa: ASYNC110 - a counter, no event
                await trio.sleep(0.02)
        assert not guard.cancelled_caught


async def test_credentials_are_checked_before_anything_is_sent() -> None:
    host = Host()
    async with host.open_backend(BACKEND, PLUGIN) as peer:
        sent = len(peer.requests)
        checks: list[JSONObject] = [
            {"key": ""},
            {"key": "has space"},
            {"key": "k" * 129},
            {"key": "ok.key", "secret": "s" * (16 * 1024 + 1)},
        ]
        for params in checks:
            assert await peer.invoke("cred.check", params) == {"code": "sdk.host.invalidParams"}
        # getCapabilities may be asked once; no credentials request went out.
        assert [m for m, _ in peer.requests[sent:] if "credentials" in m] == []
        assert await peer.invoke("cred.check", {"key": "good:key-1.x"}) == "ok"
        assert [m for m, _ in peer.requests if "credentials" in m] == ["lithe/host/credentials/get"]


def test_a_context_is_reduced_to_its_id_and_generation() -> None:
    whole = {"contextID": "w1", "generation": 3, "name": "proj", "folders": [], "extra": 1}
    assert _wire_context(whole) == {"contextID": "w1", "generation": 3}
    assert _wire_context({"contextID": "w1", "generation": 0}) == {
        "contextID": "w1",
        "generation": 0,
    }
    malformed: list[object] = [
        None,
        [],
        {"contextID": "", "generation": 1},
        {"contextID": "w1"},
        {"contextID": "w1", "generation": True},
        {"contextID": 3, "generation": 1},
    ]
    for bad in malformed:
        with pytest.raises(PluginSdkError) as refused:
            _wire_context(bad)
        assert refused.value.code == "sdk.host.invalidContext"


@pytest.mark.parametrize(
    ("plugin_id", "function_id", "params", "timeout_ms", "parent"),
    [
        ("", "a.b", None, None, None),
        (3, "a.b", None, None, None),
        ("p", "Not.an.id", None, None, None),
        ("p", "a.b", [1], None, None),
        ("p", "a.b", None, 0, None),
        ("p", "a.b", None, True, None),
        ("p", "a.b", None, None, ""),
        ("p", "a.b", None, None, "x" * 129),
    ],
)
def test_a_malformed_call_is_refused_locally(
    plugin_id: object, function_id: object, params: object, timeout_ms: object, parent: object
) -> None:
    with pytest.raises(PluginSdkError) as refused:
        _invoke_params(CONTEXT, plugin_id, function_id, params, timeout_ms, parent)
    assert refused.value.code == "sdk.functions.invalidCall"
    with pytest.raises(PluginSdkError) as bad_context:
        _invoke_params({"generation": 1}, "p", "a.b", None, None, None)
    assert bad_context.value.code == "sdk.host.invalidContext"
    assert _invoke_params({**CONTEXT, "name": "x"}, "p", "a.b", {}, 5, "op-1") == {
        "pluginID": "p",
        "functionID": "a.b",
        "context": CONTEXT,
        "params": {},
        "timeoutMilliseconds": 5,
        "parentOperationID": "op-1",
    }
