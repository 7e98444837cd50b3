"""Example plugin backend that calls another plugin's function (``dev.example.caller``).

- ``report.build {project, nested?, sleepMs?, nestedSleepMs?}``: finds the providers of
  ``project.describe`` through the relay, calls the first one in the page's workspace
  context (passing the params on) and returns ``{report: <value>}``. The exporter may nest
  one more call, so a host sees the chain caller -> exporter -> tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from supervisor.plugin_sdk import CallContext, PluginError, create_backend

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

backend = create_backend("example-caller", "1.0.0")


@backend.function("report.build")
async def build_report(params: JSONObject, context: CallContext) -> JSONValue:
    workspace = context.workspace_context
    if workspace is None or not await context.host.supports("lithe/host/functions/invoke"):
        raise PluginError("report.noRelay", "This host cannot call other plugins.")
    found = await context.host.functions.providers("project.describe")
    providers = found.get("providers") if isinstance(found, dict) else None
    if not isinstance(providers, list) or not providers:
        raise PluginError("report.noProvider", "Install a plugin that describes projects.")
    first = providers[0]
    assert isinstance(first, dict)
    plugin_id = first["pluginID"]
    assert isinstance(plugin_id, str)
    reply = await context.host.functions.invoke(
        workspace,
        plugin_id=plugin_id,
        function_id="project.describe",
        params=params,
        timeout_ms=60_000,
    )
    return {"report": reply.get("value") if isinstance(reply, dict) else None}


if __name__ == "__main__":
    raise SystemExit(backend.listen())
