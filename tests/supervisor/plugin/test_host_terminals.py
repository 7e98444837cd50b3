"""``lithe/host/terminal/*`` served by the supervisor on its own PTY terminals, with a real
backend and real programs (issue 17; plugin-contract.md "Plugin-owned native terminals",
"Close, retained context and reopen")."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from supervisor._plugin._host import AllowAll, Consent, Show
from tests.supervisor.lsp._support import PY, as_obj, start
from tests.supervisor.plugin.test_example_backends import wait_gone
from tests.supervisor.plugin.test_host_services import (
    backend_notifications,
    code_of,
    host_calls,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.lsp._support import Session

BACKEND = os.path.join(os.path.dirname(__file__), "..", "..", "peers", "plugin_backend.py")
PLUGIN = "com.example.tool"
FUNCTIONS = {"version": 0, "functions": [{"id": "host.call"}, {"id": "seen.get"}]}
T = "lithe/host/terminal/"


class Recording(AllowAll):
    """Consents unless told not to; records what it was asked."""

    def __init__(self) -> None:
        self.consents: list[Consent] = []
        self.shown: list[Show] = []
        self.refuse = False

    async def consent(self, request: Consent) -> bool:
        self.consents.append(request)
        return not self.refuse

    async def show(self, request: Show) -> None:
        self.shown.append(request)


@pytest.fixture
def policy() -> Recording:
    return Recording()


@pytest.fixture
async def core(tmp_path: Path, policy: Recording) -> AsyncIterator[Core]:
    async with open_core(host_policy=policy, plugin_state_root=tmp_path / "state") as opened:
        yield opened


async def workspace(core: Core, tmp_path: Path, *extra: JSONObject) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True, exist_ok=True)
    contexts: list[JSONValue] = [{"contextID": "w1", "folders": [{"path": str(root)}]}, *extra]
    await core.call("workspace.setContexts", {"contexts": contexts})
    return root


async def backend(core: Core, tmp_path: Path) -> Session:
    session = await start(
        core,
        [PY, BACKEND, json.dumps(FUNCTIONS)],
        str(tmp_path),
        pluginId=PLUGIN,
        hostServices=["lithe/host/terminal/create", "workspace"],
        shutdownTimeoutMilliseconds=2000,
    )
    await session.wait_state("ready")
    return session


async def one(session: Session, method: str, params: JSONObject) -> JSONObject:
    (reply,) = await host_calls(session, {"method": method, "params": params})
    return reply


async def running(core: Core) -> dict[str, JSONObject]:
    listed = await core.call("terminal.list", {})
    assert isinstance(listed, list)
    return {str(as_obj(t)["terminalID"]): as_obj(t) for t in listed}


async def output_of(core: Core, terminal_id: str, needle: str) -> str:
    text = ""
    with trio.fail_after(20):
        while needle not in text:
            batch = as_obj(
                await core.call(
                    "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 500}
                )
            )
            events = batch["events"]
            assert isinstance(events, list)
            text += "".join(str(as_obj(e).get("data", "")) for e in events)
    return text


W1: JSONObject = {"contextID": "w1", "generation": 1}


async def created(session: Session, context: JSONObject) -> JSONObject:
    """A ``cat`` terminal the backend creates in ``context``."""
    return as_obj(
        (await one(session, T + "create", {"context": context, "executable": "cat"}))["result"]
    )


async def test_create_in_a_workspace_folder_and_exit_reaches_the_backend(
    core: Core, tmp_path: Path, policy: Recording
) -> None:
    root = await workspace(core, tmp_path)
    session = await backend(core, tmp_path)
    folders = as_obj(await one(session, "lithe/host/workspace/getFolders", {"context": W1}))
    root_id = as_obj(as_obj(folders["result"])["folders"][0])["rootID"]  # type: ignore[index]
    created = await one(
        session,
        T + "create",
        {
            "context": W1,
            "executable": "bash",
            "arguments": ["-c", "pwd; read line; exit 3"],
            "cwd": {"rootID": root_id, "path": "sub"},
            "title": "build",
            "show": False,
        },
    )
    result = as_obj(created["result"])
    terminal_id = str(result["terminalID"])
    assert result["generation"] == 1
    assert set(await running(core)) == {terminal_id}
    assert (await running(core))[terminal_id]["owner"] == session.id
    assert str(root / "sub") in await output_of(core, terminal_id, str(root / "sub"))
    assert policy.consents == [
        Consent(PLUGIN, T + "create", "bash", ("-c", "pwd; read line; exit 3"), str(root / "sub"))
    ]
    assert policy.shown == []  # show: false
    subscribed = as_obj(
        (await one(session, T + "onExit", {"context": W1, "terminalID": terminal_id}))["result"]
    )
    await core.call("terminal.write", {"terminalID": terminal_id, "data": "go\n"})
    (note,) = await backend_notifications(session, "lithe/host/subscriptions/notify", 1)
    assert note["params"] == {
        "subscriptionID": subscribed["subscriptionID"],
        "sequence": 1,
        "event": {
            "type": "exit",
            "terminalID": terminal_id,
            "generation": 1,
            "exitCode": 3,
            "reason": "exited",
        },
    }
    # Reopen (consent again, shown by default), close with a budget, dispose.
    reopened = as_obj(
        (await one(session, T + "reopen", {"context": W1, "terminalID": terminal_id}))["result"]
    )
    assert reopened["generation"] == 2
    assert len(policy.consents) == 2
    assert policy.shown == [Show(PLUGIN, "terminal", terminal_id)]
    assert (await one(session, T + "show", {"context": W1, "terminalID": terminal_id})) == {
        "result": None
    }
    closed = await one(
        session, T + "close", {"context": W1, "terminalID": terminal_id, "retainedContextBytes": 0}
    )
    assert closed == {"result": {"retainedContextBytes": 0}}
    # The subscription goes on across reopen: the close is generation 2's outcome.
    notes = await backend_notifications(session, "lithe/host/subscriptions/notify", 2)
    event = as_obj(as_obj(notes[1]["params"])["event"])
    assert (event["generation"], event["reason"]) == (2, "closed")
    assert as_obj(notes[1]["params"])["sequence"] == 2
    shown_closed = await one(session, T + "show", {"context": W1, "terminalID": terminal_id})
    assert code_of(shown_closed) == "plugin.host.preconditionFailed"
    assert (await one(session, T + "dispose", {"context": W1, "terminalID": terminal_id})) == {
        "result": None
    }
    assert terminal_id not in await running(core)
    gone = await one(session, T + "show", {"context": W1, "terminalID": terminal_id})
    assert code_of(gone) == "plugin.host.notFound"
    await session.stop()


async def test_refusals_start_nothing(core: Core, tmp_path: Path, policy: Recording) -> None:
    remote: JSONObject = {
        "contextID": "w2",
        "authority": {"kind": "remote", "id": "ssh"},
        "folders": [{"path": "/srv"}],
    }
    await workspace(core, tmp_path, remote, {"contextID": "w3", "folders": []})
    (tmp_path / "outside").mkdir()
    session = await backend(core, tmp_path)
    folders = as_obj(await one(session, "lithe/host/workspace/getFolders", {"context": W1}))
    root_id = as_obj(as_obj(folders["result"])["folders"][0])["rootID"]  # type: ignore[index]
    cat: JSONObject = {"context": W1, "executable": "cat"}
    w2: JSONObject = {"contextID": "w2", "generation": 1}
    w3: JSONObject = {"contextID": "w3", "generation": 1}
    old: JSONObject = {"contextID": "w1", "generation": 2}
    cases: list[tuple[JSONObject, str]] = [
        ({**cat, "rows": 10}, "plugin.host.unsupportedOption"),
        ({**cat, "context": w2}, "plugin.host.authorityUnsupported"),
        ({**cat, "context": w3}, "plugin.host.preconditionFailed"),
        ({**cat, "context": old}, "plugin.host.contextExpired"),
        ({**cat, "cwd": {"rootID": root_id, "path": "../outside"}}, "plugin.host.invalidParams"),
        ({**cat, "cwd": {"rootID": root_id, "path": "/etc"}}, "plugin.host.invalidParams"),
        ({**cat, "cwd": {"rootID": root_id, "path": "missing"}}, "plugin.host.invalidParams"),
        ({**cat, "cwd": {"rootID": "r0000000000000000", "path": ""}}, "plugin.host.notFound"),
        ({**cat, "executable": "./relative/cat"}, "plugin.host.invalidParams"),
        ({**cat, "show": "yes"}, "plugin.host.invalidParams"),
    ]
    requests: list[JSONObject] = [{"method": T + "create", "params": p} for p, _code in cases]
    replies = await host_calls(session, *requests)
    assert [code_of(r) for r in replies] == [code for _params, code in cases]
    unsupported = as_obj(as_obj(replies[0]["error"])["data"])
    assert unsupported == {"code": "plugin.host.unsupportedOption", "details": {"option": "rows"}}
    assert as_obj(replies[0]["error"])["code"] == -32018
    # No sendText and no listing of terminals for a backend.
    for method in (T + "sendText", T + "list"):
        assert code_of(await one(session, method, cat)) == "plugin.host.unavailable"
    policy.refuse = True
    denied = await one(session, T + "create", cat)
    assert code_of(denied) == "plugin.host.permissionDenied"
    assert as_obj(denied["error"])["code"] == -32010
    assert await running(core) == {}
    await session.stop()


async def test_handles_are_the_callers_and_end_with_their_context(
    core: Core, tmp_path: Path
) -> None:
    root = await workspace(core, tmp_path, {"contextID": "w2", "folders": [{"path": "/"}]})
    session = await backend(core, tmp_path)
    w2: JSONObject = {"contextID": "w2", "generation": 1}
    first = as_obj(
        (await one(session, T + "create", {"context": W1, "executable": "cat"}))["result"]
    )
    second = as_obj(
        (await one(session, T + "create", {"context": w2, "executable": "cat"}))["result"]
    )
    first_id, second_id = str(first["terminalID"]), str(second["terminalID"])
    pids = {str(t): int(str(as_obj(v)["pid"])) for t, v in (await running(core)).items()}
    # Another context's handle, or a host-created one, is not found.
    foreign = await one(session, T + "close", {"context": w2, "terminalID": first_id})
    assert code_of(foreign) == "plugin.host.notFound"
    host_made = as_obj(await core.call("terminal.create", {"executable": "cat"}))
    not_mine = await one(
        session, T + "dispose", {"context": W1, "terminalID": str(host_made["terminalID"])}
    )
    assert code_of(not_mine) == "plugin.host.notFound"
    # Replacing w1's generation disposes its terminal; w2's and the host's stay.
    await core.call(
        "workspace.setContexts",
        {
            "contexts": [
                {"contextID": "w1", "folders": [{"path": str(root)}, {"path": "/"}]},
                {"contextID": "w2", "folders": [{"path": "/"}]},
            ]
        },
    )
    await wait_gone({pids[first_id]})
    with trio.fail_after(20):
        while first_id in await running(core):  # noqa: ASYNC110 - polling the Core
            await trio.sleep(0.05)
    left = await running(core)
    assert second_id in left
    assert str(host_made["terminalID"]) in left
    # The backend's end disposes the rest of its terminals.
    await session.stop()
    await wait_gone({pids[second_id]})
    assert set(await running(core)) == {str(host_made["terminalID"])}


async def subscriptions_of(session: Session) -> JSONValue:
    return as_obj((await session.snapshot())["plugin"])["subscriptions"]


async def test_subscriptions_end_with_the_backend_process_and_their_context(
    core: Core, tmp_path: Path
) -> None:
    """Session exit cancels subscriptions and a replacement never hears an old one; closing
    or replacing the context disposes them and its terminals (plugin-contract.md "Public
    document, file and window methods", "Workspace contexts and capability discovery")."""
    root = await workspace(core, tmp_path)
    session = await backend(core, tmp_path)

    async def watched(context: JSONObject) -> tuple[str, int]:
        terminal_id = str((await created(session, context))["terminalID"])
        reply = await one(session, T + "onExit", {"context": context, "terminalID": terminal_id})
        assert "result" in reply
        pid = (await running(core))[terminal_id]["pid"]
        assert isinstance(pid, int)
        return terminal_id, pid

    first, first_pid = await watched(W1)
    assert await subscriptions_of(session) == 1
    await session.call("lsp.restartServer")
    await session.wait_for(
        lambda e: e["event"] == "stateChanged" and e["state"] == "ready" and e["generation"] == 2
    )
    await wait_gone({first_pid})
    assert await subscriptions_of(session) == 0
    # The old handle is not the new backend's.
    stale = await one(session, T + "show", {"context": W1, "terminalID": first})
    assert code_of(stale) == "plugin.host.notFound"
    _second, second_pid = await watched(W1)
    assert await subscriptions_of(session) == 1
    # Replacing the context's generation disposes the terminal and the subscription.
    await core.call(
        "workspace.setContexts",
        {"contexts": [{"contextID": "w1", "folders": [{"path": str(root)}, {"path": "/"}]}]},
    )
    await wait_gone({second_pid})
    assert await subscriptions_of(session) == 0
    w1_next: JSONObject = {"contextID": "w1", "generation": 2}
    third, third_pid = await watched(w1_next)
    # Closing it does the same.
    await core.call("workspace.setContexts", {"contexts": []})
    await wait_gone({third_pid})
    assert await subscriptions_of(session) == 0
    with trio.fail_after(20):
        while third in await running(core):  # noqa: ASYNC110 - polling the Core
            await trio.sleep(0.05)
    # No exit event reached the new backend process: each subscription ended first.
    notes = await backend_notifications(session, "lithe/host/subscriptions/notify", 0)
    assert notes == []
    changes = await backend_notifications(session, "lithe/host/workspace/didChangeContexts", 2)
    assert [as_obj(n["params"])["revision"] for n in changes][-1] == 3
    await session.stop()


async def test_process_services_refuse_a_remote_context(core: Core, tmp_path: Path) -> None:
    """File, search and process services answer a context whose authority they do not
    implement with plugin.host.authorityUnsupported and start nothing (plugin-contract.md
    "Workspace contexts and capability discovery"): terminals and runs."""
    remote: JSONObject = {
        "contextID": "w2",
        "authority": {"kind": "remote", "id": "ssh"},
        "folders": [{"path": str(tmp_path)}],
    }
    await workspace(core, tmp_path, remote)
    await core.call(
        "run.configurePlugin",
        {"pluginId": PLUGIN, "requiresTools": ["python"], "tools": {"python": PY}},
    )
    session = await start(
        core,
        [PY, BACKEND, json.dumps(FUNCTIONS)],
        str(tmp_path),
        pluginId=PLUGIN,
        hostServices=["lithe/host/terminal/create", "lithe/host/run/start"],
        shutdownTimeoutMilliseconds=2000,
    )
    await session.wait_state("ready")
    w2: JSONObject = {"contextID": "w2", "generation": 1}
    process: JSONObject = {
        "executable": {"kind": "tool", "tool": "python"},
        "arguments": ["-c", "pass"],
        "workingDirectory": "",
        "environment": {},
    }
    terminal, run = await host_calls(
        session,
        {"method": T + "create", "params": {"context": w2, "executable": "cat"}},
        {
            "method": "lithe/host/run/start",
            "params": {"context": w2, "label": "remote", "process": process},
        },
    )
    assert code_of(terminal) == "plugin.host.authorityUnsupported"
    assert code_of(run) == "plugin.host.authorityUnsupported"
    assert as_obj(terminal["error"])["code"] == -32012
    assert await running(core) == {}
    assert await core.call("run.list", {}) == []
    await session.stop()
