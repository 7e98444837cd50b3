"""Example plugin backend: uses the host's services (plugin ``dev.example.workbench``).

Each function works in the workspace context of the call (``context.workspace_context``;
none is ``PluginError("workbench.noContext")``):

- ``workbench.terminal {script?}``: opens a terminal running ``bash -c <script>`` in the
  context's first root folder (``lithe/host/terminal/create``, ``cwd: {rootID, path: ""}``,
  ``show: false``), subscribes to its exit (``onExit``) and waits for it. Returns
  ``{terminalID, exitCode, reason}``, and keeps the last exit in the context's state store
  (``stateDirectory`` from ``workspace/getContext``, ``open_state_store``).
- ``workbench.run {code?}``: starts a Run session of ``python -c <code>`` in the workspace
  root (``lithe/host/run/start`` with the ``python`` tool) and waits for its
  ``lithe/host/run/didExit``. Returns ``{runID, exitCode}``.
- ``workbench.symbols {uri, serverID?}``: asks the plugin's language server (``serverID``,
  default ``python``) for ``textDocument/documentSymbol`` through
  ``lithe/host/languageServer/request``. Returns ``{names}``.
- ``workbench.state``: what the backend heard: ``{contextsRevision, commands,
  lastTerminalExit}`` (``lastTerminalExit`` from the state store of the call's context).

It also handles ``workbench.hello`` commands (``on_command``) and context changes
(``on_contexts_changed``). Grants it needs: ``workspace``, ``lithe/host/terminal/create``,
``lithe/host/run/start``, ``lithe/host/languageServer/request``. Run it as a plugin backend:
``python examples/backends/workbench.py`` (see README "Plugin backends in Python").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from supervisor.plugin_sdk import CallContext, PluginError, create_backend, open_state_store

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

backend = create_backend("example-workbench", "1.0.0")
#: Run exits heard before or after the run/start answer, by runID.
run_exits: dict[str, JSONObject] = {}
run_exited = trio.Event()
heard: JSONObject = {"contextsRevision": None, "commands": []}


def _context_of(context: CallContext) -> JSONObject:
    workspace = context.workspace_context
    if workspace is None:
        raise PluginError("workbench.noContext", "Open a workspace first.")
    return workspace


@backend.function("workbench.terminal")
async def open_terminal(params: JSONObject, context: CallContext) -> JSONValue:
    workspace = _context_of(context)
    script = params.get("script", "echo workbench in $PWD; exit 7")
    if not isinstance(script, str):
        raise PluginError("workbench.badScript", "script must be text")
    folders = (await context.host.workspace.get_folders(workspace)).get("folders")
    if not isinstance(folders, list) or not folders or not isinstance(folders[0], dict):
        raise PluginError("workbench.noFolder", "The workspace has no folder.")
    exits: list[JSONObject] = []
    exited = trio.Event()

    async def on_exit(event: JSONObject, info: JSONObject) -> None:
        exits.append(event)
        exited.set()

    created = await context.host.terminal.create(
        workspace,
        "bash",
        ["-c", script],
        title="Workbench",
        cwd={"rootID": folders[0]["rootID"], "path": ""},
        show=False,
    )
    terminal_id = str(created["terminalID"])
    subscription = await context.host.terminal.on_exit(workspace, terminal_id, on_exit)
    await exited.wait()
    await subscription.dispose()
    outcome: JSONObject = {
        "terminalID": terminal_id,
        "exitCode": exits[0].get("exitCode"),
        "reason": exits[0].get("reason"),
    }
    state = await context.host.workspace.get_context(workspace)
    store = await open_state_store(str(state["stateDirectory"]))
    await store.set("lastTerminalExit", outcome)
    await context.host.terminal.dispose(workspace, terminal_id)
    return outcome


@backend.function("workbench.run")
async def start_run(params: JSONObject, context: CallContext) -> JSONValue:
    global run_exited
    workspace = _context_of(context)
    code = params.get("code", "raise SystemExit(3)")
    if not isinstance(code, str):
        raise PluginError("workbench.badCode", "code must be text")
    run_id = await context.host.run.start(
        workspace,
        "Workbench run",
        {
            "executable": {"kind": "tool", "tool": "python"},
            "arguments": ["-c", code],
            "workingDirectory": "",
            "environment": {},
        },
    )
    while run_id not in run_exits:
        await run_exited.wait()
        run_exited = trio.Event()
    return {"runID": run_id, "exitCode": run_exits[run_id].get("exitCode")}


async def on_run_exit(params: JSONObject) -> None:
    run_id = params.get("runID")
    if isinstance(run_id, str):
        run_exits[run_id] = params
        run_exited.set()


@backend.function("workbench.symbols")
async def symbols(params: JSONObject, context: CallContext) -> JSONValue:
    workspace = _context_of(context)
    result = await context.host.request(
        "lithe/host/languageServer/request",
        {
            "context": {"contextID": workspace["contextID"], "generation": workspace["generation"]},
            "serverID": params.get("serverID", "python"),
            "method": "textDocument/documentSymbol",
            "params": {"textDocument": {"uri": params.get("uri")}},
        },
    )
    value = result.get("value") if isinstance(result, dict) else None
    found = value if isinstance(value, list) else []
    names: list[JSONValue] = [
        symbol["name"] for symbol in found if isinstance(symbol, dict) and "name" in symbol
    ]
    return {"names": names}


@backend.function("workbench.state")
async def state(params: JSONObject, context: CallContext) -> JSONValue:
    answer: JSONObject = dict(heard)
    workspace = context.workspace_context
    if workspace is not None:
        got = await context.host.workspace.get_context(workspace)
        store = await open_state_store(str(got["stateDirectory"]))
        answer["lastTerminalExit"] = store.get("lastTerminalExit")
    return answer


async def on_hello(params: JSONObject) -> None:
    commands = heard["commands"]
    assert isinstance(commands, list)
    commands.append(params)


async def on_contexts(params: JSONObject) -> None:
    heard["contextsRevision"] = params.get("revision")


backend.on_host_notification("lithe/host/run/didExit", on_run_exit)
backend.on_command("workbench.hello", on_hello)
backend.on_contexts_changed(on_contexts)

if __name__ == "__main__":
    raise SystemExit(backend.listen())
