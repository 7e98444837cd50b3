"""``lsp.notify``, ``forwardNotifications: ["*"]`` and requests to a failed session (issue 28).

What the session client (``Core.language_server``) stands on: a notification of the
caller's own, every server notification as an event, and a failed session that says why at
once instead of accepting a request it can only end later.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from protocol import CoreError
from supervisor import CoreThread, open_core
from tests.supervisor.cli.test_serve import serve_process
from tests.supervisor.lsp._support import as_obj, fake, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


async def test_notify_reaches_the_server(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path))
    await session.wait_state("ready")
    sent = await session.call("lsp.notify", method="custom/echo", params={"text": "hi"})
    assert sent == {"delivered": True}
    # The fake answers custom/echo with a window/logMessage: the round trip proves delivery.
    echoed = await session.wait_for(lambda e: e["event"] == "log" and e["message"] == "echo hi")
    assert echoed["source"] == "window/logMessage"
    await session.stop()


@pytest.mark.parametrize(
    ("method", "command"),
    [
        ("textDocument/didOpen", "lsp.syncDocument"),
        ("textDocument/didChange", "lsp.syncDocument"),
        ("textDocument/didClose", "lsp.closeDocument"),
        ("workspace/didChangeConfiguration", "lsp.updateWorkspaceConfiguration"),
        ("exit", "lsp.stopServer"),
        ("$/cancelRequest", "lsp.cancelOperation"),
    ],
)
async def test_notify_refuses_what_the_session_sends_itself(
    core: Core, tmp_path: str, method: str, command: str
) -> None:
    session = await start(core, fake(), str(tmp_path))
    await session.wait_state("ready")
    with pytest.raises(CoreError) as refused:
        await session.call("lsp.notify", method=method, params={})
    assert refused.value.code == "invalid_request"
    assert refused.value.details == {"field": "method"}
    assert command in refused.value.message
    documents = await session.roundtrip("test/documents")
    assert documents["result"] == []  # nothing reached the server
    await session.stop()


async def test_forward_every_notification_that_is_not_an_event_of_its_own(
    core: Core, tmp_path: str
) -> None:
    session = await start(
        core, fake(), str(tmp_path), sessionPolicy={"forwardNotifications": ["*"]}
    )
    await session.wait_state("ready")
    await session.roundtrip("test/notify", {"method": "custom/status", "params": {"busy": True}})
    forwarded = await session.wait_for(lambda e: e["event"] == "serverNotification")
    assert (forwarded["method"], forwarded["params"]) == ("custom/status", {"busy": True})
    # A log message stays a log event and is not forwarded a second time.
    await session.roundtrip(
        "test/notify", {"method": "window/logMessage", "params": {"type": 3, "message": "m"}}
    )
    await session.roundtrip("test/notify", {"method": "custom/last", "params": {}})
    last = await session.wait_for(
        lambda e: e["event"] == "serverNotification" and e["method"] == "custom/last"
    )
    forwarded_methods = [
        e["method"]
        for e in session.seen
        if e["event"] == "serverNotification" and int(str(e["seq"])) <= int(str(last["seq"]))
    ]
    assert forwarded_methods == ["custom/status", "custom/last"]
    assert any(e["event"] == "log" and e["message"] == "m" for e in session.seen)
    await session.stop()


async def test_a_failed_session_refuses_requests_and_notifications_with_the_reason(
    core: Core, tmp_path: str
) -> None:
    """Issue 28: a server that exits at start used to accept a request and fail it later."""
    session = await start(core, fake("--crash-in-initialize"), str(tmp_path))
    await session.wait_state("failed")
    attempts: list[tuple[str, dict[str, JSONValue]]] = [
        ("lsp.request", {"method": "textDocument/hover", "params": {}}),
        ("lsp.notify", {"method": "custom/echo", "params": {"text": "x"}}),
    ]
    for command, extra in attempts:
        with pytest.raises(CoreError) as refused:
            await session.call(command, **extra)
        assert refused.value.code == "invalid_request"
        assert "failed (exitedEarly)" in refused.value.message
        details = as_obj(refused.value.details)
        last_exit = as_obj(details["lastExit"])
        assert (details["state"], last_exit["code"], last_exit["exitCode"]) == (
            "failed",
            "exitedEarly",
            3,
        )
        assert "fatal: cannot initialize" in str(details["stderrTail"])
    # A stopped session says so too.
    stopped = await start(core, fake(), str(tmp_path))
    await stopped.wait_state("ready")
    await stopped.stop()
    with pytest.raises(CoreError) as refused:
        await stopped.request("test/sleep", {"ms": 1})
    assert "is stopped" in refused.value.message


def _crashed_session_payload(tmp_path: str) -> JSONObject:
    argv = fake("--crash-in-initialize")
    arguments: list[JSONValue] = [*argv[1:]]
    return {
        "serverId": "fake",
        "executable": argv[0],
        "arguments": arguments,
        "workingDirectory": str(tmp_path),
        "rootUri": f"file://{tmp_path}",
    }


def test_the_refusal_through_core_thread(tmp_path: str) -> None:
    with CoreThread() as core:

        def call(command: str, payload: JSONObject) -> JSONObject:
            request = {"id": 1, "command": command, "payload": payload}
            return as_obj(json.loads(core.execute_json(json.dumps(request))))

        session_id = as_obj(call("lsp.startServer", _crashed_session_payload(tmp_path))["data"])[
            "sessionId"
        ]
        with core.events("lsp", str(session_id)) as events:
            next(e for e in events if e["event"] == "stateChanged" and e["state"] == "failed")
        refused = call("lsp.request", {"sessionId": session_id, "method": "textDocument/hover"})
        error = as_obj(refused["error"])
        assert error["code"] == "invalid_request"
        assert as_obj(as_obj(error["details"])["lastExit"])["exitCode"] == 3


async def test_the_refusal_through_serve(tmp_path: str) -> None:
    async with serve_process() as client:
        await client.initialize()
        started = await client.request("lsp.startServer", _crashed_session_payload(tmp_path))
        session_id = as_obj(started["result"])["sessionId"]
        failed = False
        while not failed:
            batch = await client.request(
                "lsp.waitEvents", {"sessionId": session_id, "timeoutMilliseconds": 5000}
            )
            events = as_obj(batch["result"])["events"]
            assert isinstance(events, list)
            failed = any(as_obj(e).get("state") == "failed" for e in events)
        refused = await client.request(
            "lsp.request", {"sessionId": session_id, "method": "textDocument/hover"}
        )
        data = as_obj(as_obj(refused["error"])["data"])
        assert data["code"] == "invalid_request"
        assert "failed (exitedEarly)" in str(data["message"])
        details = as_obj(data["details"])
        assert as_obj(details["lastExit"])["exitCode"] == 3
        assert "fatal: cannot initialize" in str(details["stderrTail"])
        await client.shut_down()
