"""Plugin-owned sessions through the Core with a real backend process (issue 6, host side)."""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING

import pytest
import trio

from protocol import CoreError
from supervisor import open_core
from tests.supervisor.lsp._support import PY, as_obj, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.lsp._support import Session

BACKEND = os.path.join(os.path.dirname(__file__), "..", "..", "peers", "plugin_backend.py")
FUNCS = [
    "echo.value",
    "slow.wait",
    "progress.report",
    "fail.now",
    "big.result",
    "no.result",
    "host.call",
    "host.cancel",
    "reg.change",
    "log.send",
    "seen.get",
    "progress.stale",
    "late.reply",
    "last.words",
]
PLUGIN = "com.example.tool"


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


async def backend(
    core: Core, tmp: str, answer: JSONValue = "default", **extra: JSONValue
) -> Session:
    if answer == "default":
        answer = {"version": 0, "functions": [{"id": f} for f in FUNCS]}
    extra.setdefault("pluginId", PLUGIN)
    extra.setdefault("shutdownTimeoutMilliseconds", 2000)
    return await start(
        core, [PY, BACKEND, json.dumps(answer), json.dumps({"version": 0})], tmp, **extra
    )


async def call(
    session: Session, function: str, params: JSONValue = None, **extra: JSONValue
) -> JSONObject:
    payload: dict[str, JSONValue] = {
        "function": {"pluginID": PLUGIN, "functionID": function},
        **extra,
    }
    if params is not None:
        payload["params"] = params
    op = (await session.call("lsp.functionRequest", **payload))["operationId"]
    assert isinstance(op, str)
    return await session.completed(op)


async def seen_cancels(session: Session, count: int) -> list[JSONValue]:
    # $/cancelRequest is written by the call's task as it ends: poll, bounded.
    with trio.fail_after(30):
        while True:
            seen = as_obj(as_obj((await call(session, "seen.get"))["result"])["value"])
            cancels = seen["cancels"]
            assert isinstance(cancels, list)
            if len(cancels) >= count:
                return cancels
            await trio.sleep(0.05)


def completions(session: Session, op: str) -> int:
    return sum(
        1 for e in session.seen if e["event"] == "requestCompleted" and e["operationId"] == op
    )


async def test_negotiation_invocation_outcomes_and_progress(core: Core, tmp_path: str) -> None:
    s = await backend(core, str(tmp_path), hostServices=["credentials"])
    changed = await s.wait_for(lambda e: e["event"] == "functionsChanged")
    assert changed["functions"] == sorted(FUNCS)
    assert changed["removed"] == []
    await s.wait_state("ready")
    seen = as_obj(as_obj((await call(s, "seen.get"))["result"])["value"])
    assert seen["initialize"] == {
        "litheFunctions": {"versions": [0]},
        "litheLogging": {"versions": [0]},
    }
    assert as_obj((await call(s, "echo.value", {"value": None}))["result"]) == {"value": None}
    failed = as_obj(
        (await call(s, "fail.now", {"message": "é" * 900, "code": "db.locked"}))["error"]
    )
    assert failed["code"] == "plugin.function.failed"
    assert failed["pluginErrorCode"] == "db.locked"
    assert len(str(failed["message"]).encode()) <= 1024
    big = as_obj((await call(s, "big.result"))["error"])
    assert big["code"] == "plugin.function.invalidResult"
    # A reply with neither result nor error is no result, not a null one.
    missing = as_obj((await call(s, "no.result"))["error"])
    assert missing["code"] == "plugin.function.invalidResult"
    timed = as_obj((await call(s, "slow.wait", timeoutMilliseconds=200))["error"])
    assert timed["code"] == "requestTimeout"
    # Progress is mapped back to the host id; the wire id is opaque and late reports drop.
    done = await call(
        s,
        "progress.report",
        {"reports": [{"message": "x" * 2000, "percentage": 40}, {"percentage": 400}]},
        operationId="p1",
    )
    assert as_obj(done["result"]) == {"value": "done"}
    await s.call(
        "lsp.functionRequest",
        function={"pluginID": PLUGIN, "functionID": "echo.value"},
        params={"value": 1},
        operationId="p1",
    )
    again = await s.wait_for(
        lambda e: e["event"] == "requestCompleted" and e["operationId"] == "p1" and e is not done
    )
    assert as_obj(again["result"]) == {"value": 1}
    progress = [e for e in s.seen if e["event"] == "requestProgress"]
    assert len(progress) == 1
    assert as_obj(progress[0]["result"]) == {
        "operationID": "p1",
        "message": "x" * 1024,
        "percentage": 40,
    }
    # Cancel: requestCancelled and the backend got $/cancelRequest for that wire id.
    op = (
        await s.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "slow.wait"},
            operationId="c1",
        )
    )["operationId"]
    assert (await s.call("lsp.cancelOperation", operationId=op))["cancelled"] is True
    assert as_obj((await s.completed("c1"))["error"])["code"] == "requestCancelled"
    cancels = await seen_cancels(s, 2)
    assert len(cancels) == 2
    assert "c1" not in cancels
    # Refusals, before anything is written.
    refusals: list[tuple[JSONObject, str, str]] = [
        ({"pluginID": PLUGIN, "functionID": "Bad"}, "invalid_request", "invalidReference"),
        ({"pluginID": "com.other", "functionID": "echo.value"}, "permission_denied", "wrongPlugin"),
        ({"pluginID": PLUGIN, "functionID": "no.such"}, "not_supported", "unknown"),
    ]
    for function, code, plugin_code in refusals:
        with pytest.raises(CoreError) as refused:
            await s.call("lsp.functionRequest", function=function)
        assert refused.value.code == code
        assert refused.value.details == {"code": f"plugin.function.{plugin_code}"}
    with pytest.raises(CoreError) as bad_params:
        await s.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "echo.value"},
            params=[1],
        )
    assert bad_params.value.code == "invalid_request"
    assert bad_params.value.details == {"code": "plugin.function.invalidParams"}
    # Revocation: withdrawing a running function ends its call once, with $/cancelRequest.
    await s.call(
        "lsp.functionRequest",
        function={"pluginID": PLUGIN, "functionID": "slow.wait"},
        operationId="r1",
    )
    reg = await call(
        s,
        "reg.change",
        {
            "requests": [
                {
                    "method": "lithe/function/register",
                    "params": {"functions": [{"id": "new.one"}, {"id": "new.one"}]},
                },
                {"method": "lithe/function/register", "params": {"functions": [{"id": "new.one"}]}},
                {"method": "lithe/function/unregister", "params": {"ids": ["slow.wait"]}},
            ]
        },
    )
    replies = as_obj(reg["result"])["value"]
    assert isinstance(replies, list)
    assert as_obj(as_obj(replies[0])["error"])["code"] == -32602
    assert (
        as_obj(as_obj(as_obj(replies[0])["error"])["data"])["code"]
        == "plugin.function.invalidRegistration"
    )
    assert as_obj(replies[1]) == {"result": None}
    assert as_obj(replies[2]) == {"result": None}
    assert as_obj((await s.completed("r1"))["error"])["code"] == "plugin.function.revoked"
    changes = [e for e in s.seen if e["event"] == "functionsChanged"]
    # The three requests were sent at once, so they may be handled in any order.
    assert any(e["removed"] == ["slow.wait"] for e in changes)
    latest = changes[-1]["functions"]
    assert isinstance(latest, list)
    assert "new.one" in latest
    assert "slow.wait" not in latest
    assert completions(s, "r1") == 1
    assert len(await seen_cancels(s, 3)) == 3
    # The session's end completes a running call with its terminal error.
    await s.call(
        "lsp.functionRequest",
        function={"pluginID": PLUGIN, "functionID": "new.one"},
        operationId="e1",
    )
    await s.stop()
    assert as_obj((await s.completed("e1"))["error"])["code"] == "languageServerUnavailable"


async def test_host_requests(core: Core, tmp_path: str) -> None:
    s = await backend(core, str(tmp_path), hostServices=["credentials"])
    await s.wait_state("ready")
    op = (
        await s.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "host.call"},
            params={
                "requests": [
                    {"method": "lithe/host/getCapabilities"},
                    {
                        "method": "lithe/host/subscriptions/dispose",
                        "params": {"subscriptionID": "s1"},
                    },
                    {"method": "lithe/host/nothing"},
                    {"method": "lithe/host/workspace/listContexts"},
                    {"method": "lithe/host/credentials/get", "params": {"key": "k", "x": 1}},
                    {"method": "lithe/function/invoke", "params": {}},
                    {"method": "lithe/host/credentials/get", "params": {"key": "a"}},
                    {"method": "lithe/host/credentials/get", "params": {"key": "b"}},
                ]
            },
        )
    )["operationId"]
    assert isinstance(op, str)
    first = await s.wait_for(lambda e: e["event"] == "hostRequest")
    second = await s.wait_for(lambda e: e["event"] == "hostRequest" and e is not first)
    # Handled concurrently: order them by the key they ask for.
    pair = sorted((first, second), key=lambda e: str(as_obj(as_obj(e["result"])["params"])["key"]))
    ids = [as_obj(e["result"])["hostRequestID"] for e in pair]
    assert as_obj(pair[0]["result"])["service"] == "credentials"
    await s.call("lsp.hostResponse", hostRequestID=ids[0], result={"secret": "s"})
    await s.call(
        "lsp.hostResponse",
        hostRequestID=ids[1],
        error={"message": "gone", "code": "plugin.host.notFound", "details": {"a": 1}},
    )
    with pytest.raises(CoreError) as again:
        await s.call("lsp.hostResponse", hostRequestID=ids[0], result=None)
    assert again.value.code == "invalid_request"
    replies = as_obj((await s.completed(op))["result"])["value"]
    assert isinstance(replies, list)
    caps = as_obj(as_obj(replies[0])["result"])
    assert set(as_obj(caps["services"])) == {"host", "subscriptions", "commands", "credentials"}
    assert as_obj(replies[1]) == {"result": None}
    codes = [as_obj(as_obj(as_obj(r)["error"])["data"])["code"] for r in replies[2:6]]
    assert codes == [
        "plugin.host.unavailable",
        "plugin.host.permissionDenied",
        "plugin.host.unsupportedOption",
        "plugin.function.recursiveCall",
    ]
    assert as_obj(replies[6]) == {"result": {"secret": "s"}}
    err = as_obj(as_obj(replies[7])["error"])
    assert err["code"] == -32016
    assert err["data"] == {
        "code": "plugin.host.notFound",
        "details": {"a": 1},
    }
    # 16 pending at most; the 17th is refused at once.
    many: list[JSONValue] = [
        {"method": "lithe/host/credentials/get", "params": {"key": f"k{i}"}} for i in range(17)
    ]
    op2 = (
        await s.call(
            "lsp.functionRequest",
            function={"pluginID": PLUGIN, "functionID": "host.call"},
            params={"requests": many},
        )
    )["operationId"]
    assert isinstance(op2, str)
    pending: list[JSONObject] = []
    while len(pending) < 16:
        await s.drain(2000)
        pending = [e for e in s.seen if e["event"] == "hostRequest"][2:]
    for event in pending:
        await s.call("lsp.hostResponse", hostRequestID=as_obj(event["result"])["hostRequestID"])
    results = as_obj((await s.completed(op2))["result"])["value"]
    assert isinstance(results, list)
    assert sum(1 for r in results if "error" in as_obj(r)) == 1
    refused17 = next(as_obj(r) for r in results if "error" in as_obj(r))
    assert as_obj(as_obj(refused17["error"])["data"])["code"] == "plugin.host.limitExceeded"
    # A backend's $/cancelRequest: -32800 plugin.host.cancelled and hostRequestCancelled.
    cancelled = await call(
        s, "host.cancel", {"method": "lithe/host/credentials/get", "params": {"key": "z"}}
    )
    error = as_obj(as_obj(cancelled["result"])["value"])
    assert error["code"] == -32800
    assert error["data"] == {"code": "plugin.host.cancelled"}
    gone = await s.wait_for(lambda e: e["event"] == "hostRequestCancelled")
    with pytest.raises(CoreError) as late:
        await s.call("lsp.hostResponse", hostRequestID=gone["hostRequestID"], result=None)
    assert late.value.code == "invalid_request"
    # Host notifications.
    delivered = await s.call(
        "lsp.hostNotify", method="lithe/host/commands/didRun", params={"commandID": "go"}
    )
    assert delivered == {"delivered": True}
    bad_notifications: list[tuple[str, JSONObject]] = [
        ("lithe/host/workspace/didChangeContexts", {"revision": 1}),
        ("lithe/host/subscriptions/notify", {"subscriptionID": "s", "sequence": 0, "event": {}}),
        ("lithe/host/unknown", {}),
    ]
    for method, params in bad_notifications:
        with pytest.raises(CoreError) as refused:
            await s.call("lsp.hostNotify", method=method, params=params)
        assert refused.value.code == "invalid_request"
    seen = as_obj(as_obj((await call(s, "seen.get"))["result"])["value"])
    assert seen["notifications"] == [
        {"method": "initialized", "params": {}},
        {"method": "lithe/host/commands/didRun", "params": {"commandID": "go"}},
    ]
    # lithe/log: a fact, then malformed input gives one rejected warning only.
    await call(
        s,
        "log.send",
        {
            "facts": [
                {"kind": "operationFinished", "operation": "echo.value", "durationMs": 5},
                {"kind": "operationFinished", "operation": "free text"},
                {"kind": "bogus"},
            ]
        },
    )
    facts = [e for e in s.seen if e["event"] == "fact" and e.get("operation") == "echo.value"]
    assert facts
    assert facts[0]["catalogEvent"] == "plugins.operation.finished"
    rejected = [
        e
        for e in s.seen
        if e["event"] == "fact" and e["catalogEvent"] == "plugins.diagnostics.rejected"
    ]
    assert len(rejected) == 1
    await s.stop()


@pytest.mark.parametrize(
    "answer",
    [None, {"version": 7}, {"version": 0, "functions": [{"id": "a"}, {"id": "a"}]}],
)
async def test_not_negotiated(core: Core, tmp_path: str, answer: JSONValue) -> None:
    s = await backend(core, str(tmp_path), answer)
    await s.wait_state("ready")
    assert not [e for e in s.seen if e["event"] == "functionsChanged"]
    with pytest.raises(CoreError) as refused:
        await s.call("lsp.functionRequest", function={"pluginID": PLUGIN, "functionID": "a"})
    assert refused.value.code == "not_supported"
    assert refused.value.details == {"code": "plugin.function.unavailable"}
    await s.stop()


async def test_host_owned_session_offers_nothing(core: Core, tmp_path: str) -> None:
    with pytest.raises(CoreError) as refused:
        await start(core, [PY, BACKEND, "null"], str(tmp_path), hostServices=["credentials"])
    assert refused.value.code == "invalid_request"
    s = await start(core, [PY, BACKEND, json.dumps({"version": 0})], str(tmp_path))
    await s.wait_state("ready")
    with pytest.raises(CoreError) as unavailable:
        await s.call("lsp.functionRequest", function={"pluginID": PLUGIN, "functionID": "a"})
    assert unavailable.value.code == "not_supported"
    assert unavailable.value.details == {"code": "plugin.function.unavailable"}
    with pytest.raises(CoreError):
        await s.call(
            "lsp.hostNotify", method="lithe/host/commands/didRun", params={"commandID": "x"}
        )
    await s.stop()


# -- issue 6 audit: each code and bound below is asserted by a test that fails without it ----

REGISTRY_REQUESTS: list[JSONValue] = [
    {"method": "lithe/function/register", "params": {"functions": [{"id": "late.one"}]}},
    {"method": "lithe/function/unregister", "params": {"ids": ["late.one"]}},
]


async def test_functions_changed_is_published_even_when_empty(core: Core, tmp_path: str) -> None:
    """Issue 6 "Negotiation": a negotiated registry is published even when it is empty."""
    s = await backend(core, str(tmp_path), {"version": 0})
    await s.wait_state("ready")
    changed = [e for e in s.seen if e["event"] == "functionsChanged"]
    assert len(changed) == 1
    assert (changed[0]["functions"], changed[0]["removed"]) == ([], [])
    plugin = as_obj((await s.snapshot())["plugin"])
    assert plugin["functionsNegotiated"] is True
    # Negotiated with no functions, it may still register at run time.
    done = await s.roundtrip("test/send", {"requests": REGISTRY_REQUESTS[:1]})
    assert done["result"] == [{"result": None}]
    added = await s.wait_for(lambda e: e["event"] == "functionsChanged" and e is not changed[0])
    assert (added["functions"], added["removed"]) == (["late.one"], [])
    await s.stop()


@pytest.mark.parametrize("owner", ["host", "plugin-not-negotiated"])
async def test_register_and_unregister_are_method_not_found_without_the_protocol(
    core: Core, tmp_path: str, owner: str
) -> None:
    """Issue 6: host-owned sessions neither offer nor accept the protocol (-32601 for
    register/unregister), and a plugin backend that did not negotiate it is answered the
    same way."""
    if owner == "host":
        s = await start(core, [PY, BACKEND, json.dumps({"version": 0})], str(tmp_path))
    else:
        s = await backend(core, str(tmp_path), None)
    await s.wait_state("ready")
    # Nor the host services or the relay (plugin-contract.md "Compatibility": -32601).
    requests: list[JSONValue] = [
        *REGISTRY_REQUESTS,
        {"method": "lithe/host/getCapabilities"},
        {"method": "lithe/host/functions/providers", "params": {"functionID": "a"}},
    ]
    done = await s.roundtrip("test/send", {"requests": requests})
    replies = done["result"]
    assert isinstance(replies, list)
    assert [as_obj(as_obj(r)["error"])["code"] for r in replies] == [-32601] * 4
    assert not [e for e in s.seen if e["event"] == "functionsChanged"]
    offered = as_obj((await s.roundtrip("test/seen"))["result"])["initialize"]
    if owner == "host":
        # Nothing of the protocol is offered to a host-owned server.
        assert offered is None or not {"litheFunctions", "litheLogging"} & set(as_obj(offered))
    else:
        assert offered == {"litheFunctions": {"versions": [0]}, "litheLogging": {"versions": [0]}}
    await s.stop()


async def test_late_progress_of_an_ended_call_never_reaches_a_call_reusing_its_id(
    core: Core, tmp_path: str
) -> None:
    """Issue 6 "Invocation"/"Progress": a report naming the wire operationID of a call that
    ended is dropped, even while a new call runs under the same host operationId."""
    s = await backend(core, str(tmp_path))
    await s.wait_state("ready")
    first = await call(s, "echo.value", {"value": 1}, operationId="same")
    assert as_obj(first["result"]) == {"value": 1}
    await s.call(
        "lsp.functionRequest",
        function={"pluginID": PLUGIN, "functionID": "progress.stale"},
        operationId="same",
    )
    second = await s.wait_for(
        lambda e: e["event"] == "requestCompleted" and e["operationId"] == "same" and e is not first
    )
    assert as_obj(second["result"]) == {"value": None}
    progress = [e for e in s.seen if e["event"] == "requestProgress"]
    # The running call's own report arrives; the earlier call's (its wire id) does not.
    assert [as_obj(e["result"]) for e in progress] == [
        {"operationID": "same", "message": "current"}
    ]
    await s.stop()


async def test_default_deadline_is_the_sessions_request_timeout(core: Core, tmp_path: str) -> None:
    """Issue 6 "Invocation": without timeoutMilliseconds a call ends at the session's
    request timeout (requestTimeout), and the backend is sent $/cancelRequest."""
    s = await backend(core, str(tmp_path), requestTimeoutMilliseconds=300)
    await s.wait_state("ready")
    timed = await call(s, "slow.wait")
    assert as_obj(timed["error"])["code"] == "requestTimeout"
    assert len(await seen_cancels(s, 1)) == 1
    await s.stop()


async def _host_notify_refused(session: Session, reason: str) -> None:
    """``lsp.hostNotify`` on ``session`` fails with invalid_request naming ``reason``."""
    with pytest.raises(CoreError) as refused:
        await session.call(
            "lsp.hostNotify", method="lithe/host/commands/didRun", params={"commandID": "x"}
        )
    assert refused.value.code == "invalid_request"
    assert reason in refused.value.message


async def test_host_notify_refuses_a_session_that_is_not_ready_or_not_plugin_owned(
    core: Core, tmp_path: str
) -> None:
    """Issue 6 "Host notifications": a plugin-owned session that is not ready yet, and a
    host-owned session, are refused with invalid_request; nothing is delivered."""
    slow = await start(
        core,
        [PY, BACKEND, json.dumps({"version": 0}), json.dumps({"version": 0}), "600000"],
        str(tmp_path),
        pluginId=PLUGIN,
        shutdownTimeoutMilliseconds=1000,
    )
    await slow.wait_state("initializing")
    await _host_notify_refused(slow, "not ready")
    await slow.stop()
    host_owned = await start(core, [PY, BACKEND, json.dumps({"version": 0})], str(tmp_path))
    await host_owned.wait_state("ready")
    await _host_notify_refused(host_owned, "not plugin-owned")
    await host_owned.stop()


async def test_log_facts_reach_the_structured_log_and_unnegotiated_ones_warn_once(
    core: Core, tmp_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 6 "Structured plugin diagnostics": an accepted fact goes to the supervisor's
    structured log; input from a backend that did not negotiate litheLogging is rejected
    with one category-only plugins.diagnostics.rejected warning per session."""
    caplog.set_level(logging.INFO, logger="supervisor.plugins")
    fact: JSONObject = {"kind": "operationFinished", "operation": "echo.value", "durationMs": 5}
    s = await backend(core, str(tmp_path))
    await s.wait_state("ready")
    await call(s, "log.send", {"facts": [fact]})
    await s.wait_for(lambda e: e["event"] == "fact" and e.get("operation") == "echo.value")
    logged = [
        r
        for r in caplog.records
        if hasattr(r, "plugin_fact") and r.plugin_fact["operation"] == "echo.value"
    ]
    assert len(logged) == 1
    assert logged[0].levelno == logging.INFO
    assert logged[0].plugin_fact == {
        "catalogEvent": "plugins.operation.finished",
        "level": "info",
        "kind": "operationFinished",
        "operation": "echo.value",
        "durationMs": 5,
        "pluginId": PLUGIN,
        "channel": f"plugins/{PLUGIN}/host",
    }
    await s.stop()
    caplog.clear()
    functions = json.dumps({"version": 0, "functions": [{"id": f} for f in FUNCS]})
    quiet = await start(core, [PY, BACKEND, functions, "null"], str(tmp_path), pluginId=PLUGIN)
    await quiet.wait_state("ready")
    await call(quiet, "log.send", {"facts": [fact, fact, {"kind": "bogus"}]})
    rejected = await quiet.wait_for(
        lambda e: e["event"] == "fact" and e["catalogEvent"] == "plugins.diagnostics.rejected"
    )
    assert rejected["category"] == "unnegotiated"
    assert "operation" not in rejected  # category only: nothing of the payload is kept
    await call(quiet, "seen.get")  # every fact above was read before this reply
    await quiet.drain()
    # The session's own start fact is the host's; of the backend's facts none is accepted.
    facts = [
        e
        for e in quiet.seen
        if e["event"] == "fact" and e.get("operation") != "languageServer/start"
    ]
    assert facts == [rejected]
    assert as_obj((await quiet.snapshot())["plugin"])["factsRejected"] == 3
    warnings = [r for r in caplog.records if "plugins.diagnostics.rejected" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    # Only the host's own fact about the start reaches the plugin's channel.
    assert [r.plugin_fact["operation"] for r in caplog.records if hasattr(r, "plugin_fact")] == [
        "languageServer/start"
    ]
    await quiet.stop()


async def test_at_most_600_facts_per_minute_per_session(
    core: Core, tmp_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 6 "Structured plugin diagnostics": ingress admits at most 600 facts per minute
    per session; the rest are counted as dropped, not logged. (The session's own
    languageServer/start fact counts against the same allowance.) 610 facts sent at once
    arrive well within a minute."""
    caplog.set_level(logging.INFO, logger="supervisor.plugins")
    s = await backend(core, str(tmp_path))
    await s.wait_state("ready")
    host_facts = len([e for e in s.seen if e["event"] == "fact"])
    fact: JSONObject = {"kind": "operationFinished", "operation": "echo.value", "durationMs": 1}
    await call(s, "log.send", {"facts": [fact] * 610})
    await call(s, "seen.get")  # every fact above was read before this reply
    assert as_obj((await s.snapshot())["facts"]) == {
        "admitted": 600,
        "dropped": 610 + host_facts - 600,
    }
    # The host's own facts share the plugin's channel and its allowance.
    logged = [r for r in caplog.records if hasattr(r, "plugin_fact")]
    assert len(logged) == 600
    await s.stop()


async def test_late_reply_after_the_deadline_is_ignored(core: Core, tmp_path: str) -> None:
    """Issue 6 "Invocation": after a call ended (requestTimeout), its late reply and late
    progress are ignored: exactly one requestCompleted, no requestProgress."""
    s = await backend(core, str(tmp_path))
    await s.wait_state("ready")
    timed = await call(s, "late.reply", {"ms": 1500}, timeoutMilliseconds=200, operationId="l1")
    assert as_obj(timed["error"])["code"] == "requestTimeout"
    # seen.get is answered after the late reply (the peer answers in order): by then the
    # late reply and its progress report have been read.
    cancels = await seen_cancels(s, 1)
    assert len(cancels) == 1
    await s.drain()
    assert completions(s, "l1") == 1
    assert not [e for e in s.seen if e["event"] == "requestProgress"]
    await s.stop()


async def test_what_a_backend_writes_just_before_it_exits_is_drained(
    core: Core, tmp_path: str
) -> None:
    """A call's reply, a log message and a stderr line written right before the exit arrive."""
    s = await backend(core, str(tmp_path))
    await s.wait_state("ready")
    done = await call(s, "last.words", {"message": "goodbye"})
    assert done.get("result") == {"value": "last"}, done
    log = await s.wait_for(lambda e: e["event"] == "log" and e["source"] == "window/logMessage")
    assert log["message"] == "goodbye"
    failed = await s.wait_state("failed")
    assert as_obj(failed["error"])["exitCode"] == 5
    snapshot = await s.snapshot()
    assert "last words on stderr" in str(snapshot["stderrTail"])
    assert snapshot["pid"] is None
