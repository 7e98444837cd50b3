"""The client capabilities a session declares are exactly what it serves (issue 16).

A server that believes our ``initialize`` may send every request our capabilities allow; each
must get an LSP answer, not -32601. The host may bring its editor's own capability set and
answer the server requests it wants (``hostRequests``, ``lsp.serverRequestResponse``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from protocol import CoreError
from supervisor import open_core
from supervisor._lsp._client import (
    DECLARED_BY,
    DEFAULT_CLIENT_CAPABILITIES,
    SERVED_REQUESTS,
    check_client_policy,
    declared_requests,
)
from tests._procfs import runs_no_more
from tests.supervisor.lsp._support import Session, as_obj, fake, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


#: A valid params object for each request we serve (what a real server sends).
_PARAMS: dict[str, JSONValue] = {
    "workspace/configuration": {"items": [{"section": "x"}]},
    "workspace/workspaceFolders": None,
    "window/showMessageRequest": {
        "type": 2,
        "message": "Reload the project?",
        "actions": [{"title": "Yes"}, {"title": "No"}],
    },
    "window/workDoneProgress/create": {"token": "t1"},
    "client/registerCapability": {
        "registrations": [{"id": "1", "method": "workspace/didChangeWatchedFiles"}]
    },
    "client/unregisterCapability": {
        "unregisterations": [{"id": "1", "method": "workspace/didChangeWatchedFiles"}]
    },
}


def test_every_default_capability_that_allows_a_server_request_is_served() -> None:
    declared = declared_requests(DEFAULT_CLIENT_CAPABILITIES)
    assert declared <= SERVED_REQUESTS
    # The ones issue 16 found answered -32601 while declared.
    assert {"workspace/workspaceFolders", "window/showMessageRequest"} <= declared
    assert set(DECLARED_BY) >= SERVED_REQUESTS
    assert set(_PARAMS) == SERVED_REQUESTS


def test_a_host_capability_set_must_name_who_answers_what_it_declares() -> None:
    editor: JSONObject = {
        "workspace": {"applyEdit": True, "workspaceFolders": True},
        "window": {"showDocument": {"support": True}},
    }
    with pytest.raises(CoreError) as info:
        check_client_policy(editor, None)
    assert info.value.code == "invalid_request"
    assert as_obj(info.value.details)["unservedRequests"] == [
        "window/showDocument",
        "workspace/applyEdit",
    ]
    policy = check_client_policy(editor, ["workspace/applyEdit", "window/showDocument"])
    assert policy.capabilities == editor
    assert policy.host_requests == {"workspace/applyEdit", "window/showDocument"}
    bad_lists: list[JSONValue] = ["nope", ["x", 3], [""]]
    for bad in bad_lists:
        with pytest.raises(CoreError):
            check_client_policy(None, bad)
    with pytest.raises(CoreError):
        check_client_policy([], None)


async def test_capabilities_as_deep_as_the_json_limit_are_read_not_a_crash(
    core: Core, tmp_path: str
) -> None:
    # 506 levels passes the 512-level JSON limit; reading it once raised RecursionError,
    # answered `internal`. Deep inside: a dynamicRegistration, which declares
    # client/registerCapability (served by the session).
    deep: JSONObject = {"dynamicRegistration": True}
    for _ in range(505):
        deep = {"nested": deep}
    assert "client/registerCapability" in declared_requests({"textDocument": deep})
    session = await start(core, fake(), str(tmp_path), clientCapabilities={"textDocument": deep})
    snapshot = await session.snapshot()
    pid = snapshot["pid"]
    assert isinstance(pid, int)
    assert (await session.stop())["state"] == "stopped"
    assert runs_no_more(pid)


async def ask(session: Session, method: str, params: JSONValue) -> JSONObject:
    """Have the fake server send ``method`` to us; its reply as the server saw it."""
    payload: JSONObject = {"method": method}
    if params is not None:
        payload["params"] = params
    return as_obj((await session.roundtrip("test/ask", payload))["result"])


async def test_each_declared_server_request_gets_its_lsp_answer(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path), workspaceConfiguration={"x": 1})
    await session.wait_state("ready")
    sent = as_obj((await session.roundtrip("test/initializeParams"))["result"])
    assert sent["capabilities"] == DEFAULT_CLIENT_CAPABILITIES
    answers = {m: await ask(session, m, p) for m, p in _PARAMS.items()}
    assert all("code" not in a for a in answers.values()), answers
    assert answers["workspace/workspaceFolders"]["result"] == sent["workspaceFolders"]
    assert answers["workspace/workspaceFolders"]["result"] == [
        {"uri": "file://" + str(tmp_path), "name": str(tmp_path).rsplit("/", 1)[-1]}
    ]
    assert answers["workspace/configuration"]["result"] == [1]
    # No one to choose an action: null, and the message still reaches the host.
    assert answers["window/showMessageRequest"]["result"] is None
    log = await session.wait_for(
        lambda e: e["event"] == "log" and e.get("source") == "window/showMessageRequest"
    )
    assert (log["level"], log["message"]) == ("warning", "Reload the project?")
    # Not declared, not served.
    assert (await ask(session, "workspace/applyEdit", {"edit": {}}))["code"] == -32601
    snapshot = await session.snapshot()
    pid = snapshot["pid"]
    assert isinstance(pid, int)
    assert (await session.stop())["state"] == "stopped"
    assert runs_no_more(pid)


async def test_the_host_answers_the_requests_it_owns(core: Core, tmp_path: str) -> None:
    editor: JSONObject = {
        **DEFAULT_CLIENT_CAPABILITIES,
        "workspace": {"workspaceFolders": True, "applyEdit": True},
    }
    session = await start(
        core,
        fake(),
        str(tmp_path),
        clientCapabilities=editor,
        hostRequests=["workspace/applyEdit", "window/showMessageRequest"],
        requestTimeoutMilliseconds=30_000,
    )
    await session.wait_state("ready")
    sent = as_obj((await session.roundtrip("test/initializeParams"))["result"])
    assert sent["capabilities"] == editor
    edit: JSONValue = {"label": "rename", "edit": {"changes": {}}}
    operation_id = await session.request(
        "test/ask", {"method": "workspace/applyEdit", "params": edit}
    )
    forwarded = await session.wait_for(lambda e: e["event"] == "serverRequest")
    assert (forwarded["method"], forwarded["params"]) == ("workspace/applyEdit", edit)
    request_id = forwarded["requestId"]
    answered = await session.call(
        "lsp.serverRequestResponse", requestId=request_id, result={"applied": True}
    )
    assert answered == {"accepted": True}
    reply = as_obj((await session.completed(operation_id))["result"])
    assert reply == {"result": {"applied": True}}
    # A second answer is ignored.
    again = await session.call("lsp.serverRequestResponse", requestId=request_id, result=None)
    assert again == {"accepted": False}
    # The host may refuse with a JSON-RPC error; the server gets it as sent.
    operation_id = await session.request(
        "test/ask",
        {"method": "window/showMessageRequest", "params": {"type": 3, "message": "ok?"}},
    )
    forwarded = await session.wait_for(
        lambda e: e["event"] == "serverRequest" and e["requestId"] != request_id
    )
    await session.call(
        "lsp.serverRequestResponse",
        requestId=forwarded["requestId"],
        error={"code": -32800, "message": "dismissed"},
    )
    reply = as_obj((await session.completed(operation_id))["result"])
    assert (reply["code"], reply["message"]) == (-32800, "dismissed")
    with pytest.raises(CoreError) as info:
        await session.call(
            "lsp.serverRequestResponse", requestId="sr-9", error={"code": "x", "message": 1}
        )
    assert info.value.code == "invalid_request"
    # An LSP integer is 32-bit: a code beyond it never reaches the server.
    with pytest.raises(CoreError) as wide:
        await session.call(
            "lsp.serverRequestResponse", requestId="sr-9", error={"code": 10**30, "message": ""}
        )
    assert wide.value.code == "invalid_request"
    assert as_obj(wide.value.details)["field"] == "error.code"
    assert (await session.stop())["state"] == "stopped"


async def test_capabilities_nobody_serves_start_nothing(core: Core, tmp_path: str) -> None:
    with pytest.raises(CoreError) as info:
        await start(
            core, fake(), str(tmp_path), clientCapabilities={"workspace": {"applyEdit": True}}
        )
    assert info.value.code == "invalid_request"
    with pytest.raises(CoreError) as info:
        await core.call("lsp.snapshot", {"sessionId": "lsp-1"})
    assert info.value.code == "not_found"
