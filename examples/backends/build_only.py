"""Example build-only plugin backend (``dev.example.builder``): no plugin functions.

It is created with ``functions=False``, so it never answers ``litheFunctions`` even when the
host offers it (the plugin contract "Plugin functions": "A backend that does not answer
litheFunctions (a build-only backend) keeps serving its language ... and receives no
function calls"). The host refuses function calls for its session with ``not_supported``
(``details.code``: ``plugin.function.unavailable``); ordinary requests still work:

- ``workspace/executeCommand {command: "builder.compile", arguments: [root]}``: byte-compiles
  ``root`` with the real ``python -m compileall -q`` as a process tree bound to the request
  (a cancelled request ends it). Returns ``{exitCode}``.

Run it as a plugin backend: ``python examples/backends/build_only.py`` (LSP framing on stdio).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from supervisor import run_process
from supervisor.plugin_sdk import create_backend

if TYPE_CHECKING:
    from protocol import JSONValue

backend = create_backend(
    "example-builder",
    "1.0.0",
    capabilities={"executeCommandProvider": {"commands": ["builder.compile"]}},
    functions=False,
)


async def execute_command(params: JSONValue | None) -> JSONValue:
    if not isinstance(params, dict) or params.get("command") != "builder.compile":
        return None
    arguments = params.get("arguments")
    if not isinstance(arguments, list) or not arguments or not isinstance(arguments[0], str):
        return None
    result = await run_process([sys.executable, "-m", "compileall", "-q", arguments[0]])
    return {"exitCode": result.exit_code}


backend.on_request("workspace/executeCommand", execute_command)

if __name__ == "__main__":
    raise SystemExit(backend.listen())
