"""Terminals owned by a plugin backend session end with it (issue 6; plugin-contract.md
"Plugin-owned native terminals").

A backend asks for a terminal with ``lithe/host/terminal/create``; here the client serves it
(``RouteToClient``: issue 17 has the supervisor serve it itself, see
test_host_terminals.py): it creates it with ``terminal.create {owner: <sessionId>}`` and
answers the host request. "Ending the
backend session ... does the same [as dispose] for only its owned terminals; user-created
terminals are unaffected", and "a handle from another ... replacement backend is
notFound": when the session's backend process ends (a stop, or a restart that replaces
it) its terminals are disposed -- processes gone, handles forgotten, no further events.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest

from protocol import CoreError
from supervisor import open_core
from supervisor._plugin._host import RouteToClient
from tests.supervisor.lsp._support import PY, as_obj, start
from tests.supervisor.plugin.test_example_backends import wait_gone

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.lsp._support import Session

BACKEND = os.path.join(os.path.dirname(__file__), "..", "..", "peers", "plugin_backend.py")
PLUGIN = "com.example.tool"


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core(host_policy=RouteToClient()) as opened:
        yield opened


async def terminals(core: Core) -> dict[str, JSONObject]:
    listed = await core.call("terminal.list", {})
    assert isinstance(listed, list)
    return {str(as_obj(t)["terminalID"]): as_obj(t) for t in listed}


async def backend_terminal(
    core: Core, session: Session, answered: set[JSONValue]
) -> tuple[str, int]:
    """The backend asks for a terminal; the host creates it for the session and answers."""
    reply = await session.call(
        "lsp.functionRequest",
        function={"pluginID": PLUGIN, "functionID": "host.call"},
        params={
            "requests": [
                {
                    "method": "lithe/host/terminal/create",
                    "params": {
                        "context": {"contextID": "w1", "generation": 1},
                        "executable": "cat",
                    },
                }
            ]
        },
    )
    operation_id = reply["operationId"]
    assert isinstance(operation_id, str)
    # Every hostRequest event stays in session.seen: take the one not answered yet.
    asked = await session.wait_for(
        lambda e: (
            e["event"] == "hostRequest"
            and e["method"] == "lithe/host/terminal/create"
            and as_obj(e["result"])["hostRequestID"] not in answered
        )
    )
    host_request_id = as_obj(asked["result"])["hostRequestID"]
    answered.add(host_request_id)
    created = as_obj(await core.call("terminal.create", {"owner": session.id, "executable": "cat"}))
    await session.call("lsp.hostResponse", hostRequestID=host_request_id, result=created)
    done = await session.completed(operation_id)
    assert as_obj(done["result"])["value"] == [{"result": created}]
    terminal_id = str(created["terminalID"])
    pid = (await terminals(core))[terminal_id]["pid"]
    assert isinstance(pid, int)
    return terminal_id, pid


async def assert_disposed(core: Core, terminal_id: str, pid: int) -> None:
    assert terminal_id not in await terminals(core)
    with pytest.raises(CoreError) as gone:
        await core.call("terminal.pollEvents", {"terminalID": terminal_id})
    assert gone.value.code == "not_found"
    await wait_gone({pid})


async def test_backend_end_disposes_only_its_terminals(core: Core, tmp_path: str) -> None:
    functions = {"version": 0, "functions": [{"id": "host.call"}]}
    session = await start(
        core,
        [PY, BACKEND, json.dumps(functions)],
        str(tmp_path),
        pluginId=PLUGIN,
        hostServices=["lithe/host/terminal/create"],
        shutdownTimeoutMilliseconds=2000,
    )
    await session.wait_state("ready")
    host_terminal = as_obj(await core.call("terminal.create", {"executable": "cat"}))
    foreign = as_obj(
        await core.call("terminal.create", {"owner": "another-session", "executable": "cat"})
    )
    # A restart replaces the backend: the old backend's terminal is disposed.
    answered: set[JSONValue] = set()
    first, first_pid = await backend_terminal(core, session, answered)
    await session.call("lsp.restartServer")
    await assert_disposed(core, first, first_pid)
    await session.wait_for(
        lambda e: e["event"] == "stateChanged" and e["state"] == "ready" and e["generation"] == 2
    )
    # The new backend's terminal ends when the session stops.
    second, second_pid = await backend_terminal(core, session, answered)
    stopped = await session.stop()
    assert stopped["state"] == "stopped"
    await assert_disposed(core, second, second_pid)
    # Terminals the host created, or another owner's, are unaffected.
    left = await terminals(core)
    assert left[str(host_terminal["terminalID"])]["state"] == "running"
    assert left[str(foreign["terminalID"])]["state"] == "running"
