"""examples/backends/workbench.py end to end through ``supervisor serve`` (issue 17): the
backend opens a terminal (bash), starts a Run session (python) and asks a real language
server (pylsp) for symbols, all through the host services the supervisor serves itself,
and hears commands and context changes. Everything it started ends with serve."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.supervisor.cli.test_serve import serve_process
from tests.supervisor.lsp._support import PY, PYLSP, as_obj
from tests.supervisor.plugin.test_example_backends import (
    ServeSession,
    open_served_backend,
)

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from protocol import JSONObject, JSONValue

PLUGIN = "dev.example.workbench"
REF: JSONObject = {"contextID": "w1", "generation": 1}
GRANTS: list[JSONValue] = [
    "workspace",
    "lithe/host/terminal/create",
    "lithe/host/run/start",
    "lithe/host/languageServer/request",
]


async def test_workbench_through_serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    source = workspace / "m.py"
    source.write_text("def greet(name):\n    return name\n", encoding="utf-8")
    folders: list[JSONValue] = [{"path": str(workspace)}]
    async with serve_process(grace_s=20) as client:
        await client.initialize()
        configure: list[tuple[str, JSONObject]] = [
            ("workspace.setContexts", {"contexts": [{"contextID": "w1", "folders": folders}]}),
            (
                "run.configurePlugin",
                {"pluginId": PLUGIN, "requiresTools": ["python"], "tools": {"python": PY}},
            ),
        ]
        for method, params in configure:
            assert "result" in await client.request(method, params)
        bench, _pid = await open_served_backend(
            client, str(tmp_path), "workbench", "workbench.py", PLUGIN, hostServices=GRANTS
        )
        reply = await client.request(
            "lsp.startServer",
            {
                "serverId": "python",
                "executable": PYLSP,
                "workingDirectory": str(workspace),
                "rootUri": workspace.as_uri(),
                "sessionPolicy": {"requestMethods": ["textDocument/documentSymbol"]},
                "contribution": {"pluginID": PLUGIN, "context": REF},
            },
        )
        pylsp = ServeSession(client, str(as_obj(reply["result"])["sessionId"]))
        await pylsp.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] == "ready")

        async def call(function_id: str, params: JSONObject) -> JSONValue:
            started = await bench.call(
                "lsp.functionRequest",
                function={"pluginID": PLUGIN, "functionID": function_id},
                params=params,
                context=REF,
            )
            done = await bench.completed(started["operationId"])
            assert "result" in done, done
            return as_obj(done["result"])["value"]

        terminal = as_obj(await call("workbench.terminal", {}))
        assert (terminal["exitCode"], terminal["reason"]) == (7, "exited")
        run = as_obj(await call("workbench.run", {"code": "raise SystemExit(3)"}))
        assert run["exitCode"] == 3
        symbols = as_obj(await call("workbench.symbols", {"uri": source.as_uri()}))
        assert "greet" in symbols["names"]  # type: ignore[operator]
        # Nothing went to the client: the supervisor served every host request.
        assert not [e for e in bench.seen if e["event"] == "hostRequest"]
        # A command and a change of contexts reach the backend's handlers.
        notified = await client.request(
            "lsp.hostNotify",
            {
                "sessionId": bench.id,
                "method": "lithe/host/commands/didRun",
                "params": {"commandID": "workbench.hello", "context": REF},
            },
        )
        assert notified["result"] == {"delivered": True}
        more: list[JSONValue] = [
            {"contextID": "w1", "folders": folders},
            {"contextID": "w2", "folders": [{"path": str(tmp_path)}]},
        ]
        assert "result" in await client.request("workspace.setContexts", {"contexts": more})
        state = as_obj(await call("workbench.state", {}))
        assert state["commands"] == [{"commandID": "workbench.hello", "workspaceContext": REF}]
        assert state["contextsRevision"] == 2
        assert state["lastTerminalExit"] == terminal
        terminals = await client.request("terminal.list", {})
        assert terminals["result"] == []  # the backend disposed its terminal
        await client.shut_down()
