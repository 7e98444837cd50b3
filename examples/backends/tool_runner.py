"""Example plugin backend: runs real tools with progress and cancellation.

Functions (plugin ``dev.example.tools``):

- ``tool.compile {root}``: byte-compiles every ``*.py`` file below ``root`` with the real
  ``python -m py_compile``, one process per file, reporting progress per file. Returns
  ``{compiled, failed: [relative paths]}``; ``PluginError("tool.rootMissing")`` when
  ``root`` is not a directory.
- ``tool.run {steps, delayMs}``: streams a long-running tool (a child that starts a
  grandchild, then prints ``step i/n`` lines) and turns each line into progress. Cancelling
  the call ends the whole tree. Returns ``{steps, exitCode}``.
- ``tool.version {sleepMs?}``: exported; runs ``python --version`` and, when asked, a
  sleeping process first (for relayed-chain tests). Returns ``{version, caller}``; a
  cancelled call says so on stderr (``tool.version cancelled <operationID>``).
- ``tool.enableExtra`` / ``tool.disableExtra``: register / withdraw ``tool.extra
  {sleepMs?}`` at run time (it returns ``"extra"``, after a sleeping process when asked;
  withdrawing it while it runs revokes the call).
- ``tool.hostFlood {n}``: sends ``n`` concurrent ``lithe/host/credentials/get`` requests
  (the SDK keeps at most 16 unanswered). Returns ``{answered}``. The first refusal
  (a ``HostError``) cancels the requests still waiting and fails the call with
  ``PluginError("tool.hostRefused")``, whose message names the host's code and message.
- ``tool.noisy``: prints to stdout, which the SDK has pointed at stderr.

Run it as a plugin backend: ``python examples/backends/tool_runner.py`` (LSP framing on
stdio; see README "Plugin backends in Python").
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import trio

from supervisor.plugin_sdk import CallContext, HostError, PluginError, create_backend

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

backend = create_backend("example-tools", "1.0.0")

_STREAMING_TOOL = """
import subprocess, sys, time
steps, delay = int(sys.argv[1]), int(sys.argv[2]) / 1000
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
for i in range(1, steps + 1):
    time.sleep(delay)
    print(f"step {i}/{steps}", flush=True)
grandchild.kill()
grandchild.wait()
"""


@backend.function("tool.compile")
async def compile_tree(params: JSONObject, context: CallContext) -> JSONValue:
    root = params.get("root")
    if not isinstance(root, str):
        raise TypeError("root must be a string")  # reported generically, on purpose
    base = trio.Path(root)
    if not await base.is_dir():
        raise PluginError("tool.rootMissing", "The folder to compile does not exist.")
    files = sorted(await base.rglob("*.py"))
    failed: list[JSONValue] = []
    for index, path in enumerate(files, start=1):
        result = await context.run([sys.executable, "-m", "py_compile", str(path)])
        if result.exit_code != 0:
            failed.append(str(path.relative_to(base)))
        await context.progress(f"Compiled {index} of {len(files)}", index * 100 / len(files))
    return {"compiled": len(files) - len(failed), "failed": failed}


@backend.function("tool.run")
async def run_streaming(params: JSONObject, context: CallContext) -> JSONValue:
    steps = params.get("steps", 3)
    delay_ms = params.get("delayMs", 100)
    if not isinstance(steps, int) or not isinstance(delay_ms, int) or steps < 1:
        raise PluginError("tool.badParams", "steps and delayMs are positive integers.")
    argv = [sys.executable, "-c", _STREAMING_TOOL, str(steps), str(delay_ms)]
    async with context.open_process(argv) as tree:
        assert tree.stdout is not None
        pending = b""
        async for chunk in tree.stdout:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                done = int(line.split()[1].split(b"/")[0])
                await context.progress(line.decode(), done * 100 / steps)
        exit_code = await tree.wait()
    return {"steps": steps, "exitCode": exit_code}


@backend.function("tool.version")
async def tool_version(params: JSONObject, context: CallContext) -> JSONValue:
    sleep_ms = params.get("sleepMs")
    try:
        if isinstance(sleep_ms, int) and sleep_ms > 0:
            await context.run([sys.executable, "-c", f"import time; time.sleep({sleep_ms / 1000})"])
        result = await context.run([sys.executable, "--version"])
    except trio.Cancelled:
        # Cancelled by its caller ($/cancelRequest): its processes end with it. Console
        # output goes to stderr, which the host keeps as the session's log.
        print(f"tool.version cancelled {context.operation_id}", file=sys.stderr, flush=True)
        raise
    return {"version": result.stdout.strip(), "caller": context.caller}


async def _extra(params: JSONObject, context: CallContext) -> JSONValue:
    # With sleepMs it first runs a sleeping process bound to the call, so a test can
    # withdraw the function while it runs (revocation ends the call and the process).
    sleep_ms = params.get("sleepMs")
    if isinstance(sleep_ms, int) and sleep_ms > 0:
        await context.run([sys.executable, "-c", f"import time; time.sleep({sleep_ms / 1000})"])
    return "extra"


@backend.function("tool.enableExtra")
async def enable_extra(params: JSONObject, context: CallContext) -> JSONValue:
    await backend.register_function("tool.extra", _extra)
    ids: list[JSONValue] = list(backend.function_ids)
    return {"registered": ids}


@backend.function("tool.disableExtra")
async def disable_extra(params: JSONObject, context: CallContext) -> JSONValue:
    await backend.unregister_function("tool.extra")
    ids: list[JSONValue] = list(backend.function_ids)
    return {"registered": ids}


@backend.function("tool.hostFlood")
async def host_flood(params: JSONObject, context: CallContext) -> JSONValue:
    count = params.get("n", 20)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise PluginError("tool.badParams", "n is a non-negative integer.")
    answered = 0
    refusals: list[HostError] = []

    async def one(index: int) -> None:
        nonlocal answered
        try:
            await context.host.credentials.get(f"key.{index}")
        except HostError as exc:
            # Caught here, not around the nursery: there it would arrive wrapped in an
            # ExceptionGroup, which the SDK reports as an unexpected failure.
            refusals.append(exc)
            nursery.cancel_scope.cancel()  # the flood is over: the rest need no answer
            return
        answered += 1

    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(one, index)
    if refusals:
        refusal = refusals[0]
        raise PluginError(
            "tool.hostRefused",
            f"The host refused a credentials request ({refusal.code}): {refusal.message}",
        )
    return {"answered": answered}


@backend.function("tool.noisy")
async def noisy(params: JSONObject, context: CallContext) -> JSONValue:
    print("this line would corrupt the protocol if it reached stdout")
    return "quiet"


if __name__ == "__main__":
    raise SystemExit(backend.listen())
