"""Example plugin backend that exports a function to other plugins (``dev.example.exporter``).

- ``project.describe {project, nested?, sleepMs?}`` (exported): describes a project. With
  ``sleepMs`` it first runs a sleeping process bound to the call; with ``nested`` it makes
  one more relayed call, ``tool.version`` of ``dev.example.tools``, as a child of the call
  it serves (the SDK fills in ``parentOperationID``). Returns ``{project, caller, nested}``;
  ``caller`` is the relay-written ``{pluginID}`` of whoever called. A cancelled call says
  so on stderr (``project.describe cancelled <operationID>``); cancelling it also cancels
  the nested call.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import trio

from supervisor.plugin_sdk import CallContext, PluginError, create_backend

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

backend = create_backend("example-exporter", "1.0.0")


@backend.function("project.describe")
async def describe(params: JSONObject, context: CallContext) -> JSONValue:
    project = params.get("project")
    if not isinstance(project, str):
        raise PluginError("project.missing", "Name a project to describe.")
    sleep_ms = params.get("sleepMs")
    nested: JSONValue = None
    try:
        if isinstance(sleep_ms, int) and sleep_ms > 0:
            await context.run([sys.executable, "-c", f"import time; time.sleep({sleep_ms / 1000})"])
        if params.get("nested") and context.workspace_context is not None:
            reply = await context.host.functions.invoke(
                context.workspace_context,
                plugin_id="dev.example.tools",
                function_id="tool.version",
                params={"sleepMs": params.get("nestedSleepMs", 0)},
                timeout_ms=60_000,
            )
            nested = reply.get("value") if isinstance(reply, dict) else None
    except trio.Cancelled:
        # Console output goes to stderr, which the host keeps as the session's log.
        print(f"project.describe cancelled {context.operation_id}", file=sys.stderr, flush=True)
        raise
    return {"project": project, "caller": context.caller, "nested": nested}


if __name__ == "__main__":
    raise SystemExit(backend.listen())
