"""The cross-plugin relay through ``supervisor serve`` with the example backends (issue 6).

A real ``supervisor serve`` process, driven by the plain framed client of test_serve.py,
runs the three SDK examples in ``examples/backends/`` as plugin-owned sessions:
``dev.example.caller`` -> ``dev.example.exporter`` -> ``dev.example.tools`` (the exporter
nests one more relayed call). The examples print ``<function> cancelled <operationID>`` on
stderr when a call of theirs is cancelled, which reaches the host as the session's ``log``
events: the proof that each provider received ``$/cancelRequest``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tests.supervisor.lsp._support import as_obj
from tests.supervisor.plugin.test_example_backends import (
    ServeSession,
    open_served_backend,
    scoped_pids,
    wait_gone,
    wait_scoped,
)
from tests.supervisor.plugin.test_relay import EXAMPLE_PLUGINS

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue
    from tests.supervisor.cli.test_serve import Client

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "backends"
CONTEXT: JSONObject = {"contextID": "w1", "generation": 1, "authority": "local"}
SNAPSHOT: JSONObject = {"plugins": EXAMPLE_PLUGINS, "contexts": [CONTEXT]}


async def open_backend(
    client: Client, cwd: str, plugin_id: str, script: str
) -> tuple[ServeSession, int]:
    return await open_served_backend(client, cwd, script, script, plugin_id)


async def report(caller: ServeSession, **params: JSONValue) -> str:
    reply = await caller.call(
        "lsp.functionRequest",
        function={"pluginID": "dev.example.caller", "functionID": "report.build"},
        params={"project": "app", "nested": True, **params},
        context={"contextID": "w1", "generation": 1},
    )
    operation_id = reply["operationId"]
    assert isinstance(operation_id, str)
    return operation_id


async def logged(session: ServeSession, text: str) -> JSONObject:
    return await session.wait_for(lambda e: e["event"] == "log" and text in str(e.get("message")))


async def test_relayed_chain_and_cancel_from_the_top_through_serve(
    client: Client, tmp_path: Path
) -> None:
    cwd = str(tmp_path)
    await client.initialize()
    configured = await client.request("lsp.configureFunctionRelay", SNAPSHOT)
    assert as_obj(configured["result"])["plugins"] == 3
    tools, tools_pid = await open_backend(client, cwd, "dev.example.tools", "tool_runner.py")
    exporter, exporter_pid = await open_backend(client, cwd, "dev.example.exporter", "exporter.py")
    caller, caller_pid = await open_backend(client, cwd, "dev.example.caller", "caller.py")
    # caller -> exporter -> tools (nested): one result, each caller field written by the relay.
    done = await caller.completed(await report(caller))
    described = as_obj(as_obj(as_obj(done["result"])["value"])["report"])
    assert described["caller"] == {"pluginID": "dev.example.caller"}
    nested = as_obj(described["nested"])
    assert nested["caller"] == {"pluginID": "dev.example.exporter"}
    assert str(nested["version"]).startswith("Python")
    # Cancelled from the top while the nested call runs a process in the tools backend.
    operation_id = await report(caller, nestedSleepMs=600_000)
    sleeping = await wait_scoped(tools_pid, 1)
    cancelled = await caller.call("lsp.cancelOperation", operationId=operation_id)
    assert cancelled["cancelled"] is True
    ended = await caller.completed(operation_id)
    assert as_obj(ended["error"])["code"] == "requestCancelled"
    # Every provider down the chain received $/cancelRequest ...
    await logged(exporter, "project.describe cancelled relay-")
    await logged(tools, "tool.version cancelled relay-")
    # ... and every process of every call is gone; the backends themselves still run.
    await wait_gone(sleeping)
    assert scoped_pids(tools_pid) == scoped_pids(exporter_pid) == scoped_pids(caller_pid) == set()
    again = await caller.completed(await report(caller))
    assert "result" in again
    # serve's shutdown ends the three backends.
    await client.shut_down()
    await wait_gone({tools_pid, exporter_pid, caller_pid})
