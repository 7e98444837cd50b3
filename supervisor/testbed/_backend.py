"""A plugin backend for the chaos runner: well-behaved, with calls that own process trees.

Run as ``python -m supervisor.testbed._backend [--pid-file PATH]``: a plugin backend
(:mod:`supervisor.plugin_sdk`, LSP framing on stdio) whose functions the chaos runner calls
through ``lsp.functionRequest`` and then cancels, times out or lets finish. It misbehaves
in no way; what it proves is that a call's end -- a result, a cancel, a deadline, or the
session ending under it -- ends the call exactly once and ends every process the call
started.

Functions (plugin :data:`CHAOS_PLUGIN_ID`):

- ``chaos.work {ms}``: reports progress, then runs a child that starts a grandchild and
  sleeps ``ms`` milliseconds (both append their pids to ``--pid-file``), bound to the call.
  Returns ``{ms, exitCode}``.
- ``chaos.relay {to, ms}``: relays ``chaos.work {ms}`` to the plugin ``to`` through the
  host (``lithe/host/functions/invoke``, in the call's workspace context) and returns
  ``{relayed: <its value>}``, or ``{relayed: {code}}`` when the relay refused or failed.
- ``chaos.echo {...}``: returns its params.

Each ``chaos.work`` and ``chaos.relay`` call also asks the host ``lithe/host/getCapabilities``
(a host request, so the host's handling of one is exercised too); a failure of that request
is the host's and the call goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Final

from supervisor.plugin_sdk import CallContext, HostError, create_backend

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = ("CHAOS_PLUGIN_ID", "backend_argv", "main")

#: The plugin id the chaos runner gives the backend's session (``pluginId``).
CHAOS_PLUGIN_ID: Final = "dev.supervisor.chaos"

#: The call's child: records its pid, starts a grandchild that does the same, then sleeps.
#: (Its own ``Popen`` is the supervised program's business, not a spawn of the supervisor's:
#: the call's child itself starts through ``_spawn.spawn``.)
_WORKER: Final = """
import os, subprocess, sys, time
pid_file, seconds = sys.argv[1], float(sys.argv[2])
def record(pid):
    if pid_file:
        with open(pid_file, "a") as f:
            f.write(f"{pid}\\n")
record(os.getpid())
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
record(grandchild.pid)
time.sleep(seconds)
grandchild.kill()
grandchild.wait()
"""

backend = create_backend("testbed-chaos", "1.0.0")
_pid_file = ""


@backend.function("chaos.work")
async def work(params: JSONObject, context: CallContext) -> JSONValue:
    """Run a child with a grandchild for ``params["ms"]`` milliseconds."""
    ms = params.get("ms", 100)
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        ms = 100
    await _ask_host(context)
    await context.progress("working", 0)
    result = await context.run([sys.executable, "-c", _WORKER, _pid_file, str(ms / 1000)])
    await context.progress("done", 100)
    return {"ms": ms, "exitCode": result.exit_code}


@backend.function("chaos.relay")
async def relay(params: JSONObject, context: CallContext) -> JSONValue:
    """Relay ``chaos.work {ms}`` to the plugin ``params["to"]``."""
    await _ask_host(context)
    workspace = context.workspace_context
    if workspace is None:
        return {"relayed": {"code": "noContext"}}
    try:
        reply = await context.host.functions.invoke(
            workspace,
            plugin_id=str(params.get("to")),
            function_id="chaos.work",
            params={"ms": params.get("ms", 100)},
        )
    except HostError as exc:
        return {"relayed": {"code": exc.code}}
    return {"relayed": reply.get("value") if isinstance(reply, dict) else reply}


async def _ask_host(context: CallContext) -> None:
    with contextlib.suppress(HostError):
        await context.host.request("lithe/host/getCapabilities", {})


@backend.function("chaos.echo")
async def echo(params: JSONObject, context: CallContext) -> JSONValue:
    """Return the params."""
    return params


def backend_argv(*, pid_file: str | os.PathLike[str] | None = None) -> list[str]:
    """The argv that runs this backend with this interpreter.

    Args:
        pid_file: Where the backend and every process its calls start append their pids.
    """
    argv = [sys.executable, "-m", "supervisor.testbed._backend"]
    if pid_file is not None:
        argv += ["--pid-file", os.fspath(pid_file)]
    return argv


def main(argv: list[str] | None = None) -> int:
    """Serve the plugin protocol on stdio until ``exit``; returns the exit status."""
    global _pid_file
    parser = argparse.ArgumentParser(prog="python -m supervisor.testbed._backend")
    parser.add_argument("--pid-file", default="", help="append every pid started here")
    options = parser.parse_args(argv)
    _pid_file = options.pid_file
    if _pid_file:
        with open(_pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    return backend.listen()


if __name__ == "__main__":
    raise SystemExit(main())
