"""A plugin backend written with ``supervisor.plugin_sdk`` for the SDK's own rules.

Plugin ``dev.test.sdk``. Its ``initialize`` hook registers ``hook.added`` (answers
``"added"``); its ``shutdown`` hook writes ``shutdown hook`` on stderr. Functions:

- ``diag.report {operation, code, count?}``: records ``degraded`` then ``recovered`` through
  the call's ``context.diagnostics``; answers null.
- ``quiet.poll``: answers ``"polled"``; its successes record no fact
  (``suppress_success_diagnostics``), its failure (``{fail: true}``) still does.
- ``loud.poll``: answers ``"polled"`` with the ordinary ``operationFinished`` fact.
- ``host.wait``: asks the host for ``lithe/host/credentials/get {key: "slow"}`` through the
  call's ``context.host`` and answers what it got.
- ``cred.check {key, secret?}``: calls ``host.credentials.get`` (or ``set`` with a secret)
  and answers ``{code}`` of the refusal (``PluginSdkError`` / ``HostError``) or ``"ok"``.

Run it as ``sys.executable tests/peers/sdk_backend.py`` (LSP framing on stdio).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from supervisor.plugin_sdk import (
    CallContext,
    HostError,
    Negotiated,
    PluginError,
    PluginSdkError,
    create_backend,
)

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

backend = create_backend("test-sdk", "1.0.0")
backend.suppress_success_diagnostics("quiet.poll")


@backend.on_initialize
async def _added(params: JSONValue | None, negotiated: Negotiated) -> None:
    async def added(params: JSONObject, context: CallContext) -> JSONValue:
        return "added"

    await backend.register_function("hook.added", added)


@backend.on_shutdown
async def _said_goodbye() -> None:
    print("shutdown hook", file=sys.stderr, flush=True)


@backend.function("diag.report")
async def diag_report(params: JSONObject, context: CallContext) -> JSONValue:
    operation, code, count = params["operation"], params["code"], params.get("count")
    assert isinstance(operation, str)
    assert isinstance(code, str)
    assert count is None or isinstance(count, int)
    await context.diagnostics.degraded(operation, code, count)
    await context.diagnostics.recovered(operation, code)
    return None


@backend.function("quiet.poll")
async def quiet_poll(params: JSONObject, context: CallContext) -> JSONValue:
    if params.get("fail"):
        raise PluginError("poll.failed", "The poll failed.")
    return "polled"


@backend.function("loud.poll")
async def loud_poll(params: JSONObject, context: CallContext) -> JSONValue:
    return "polled"


@backend.function("host.wait")
async def host_wait(params: JSONObject, context: CallContext) -> JSONValue:
    return await context.host.request("lithe/host/credentials/get", {"key": "slow"})


@backend.function("cred.check")
async def cred_check(params: JSONObject, context: CallContext) -> JSONValue:
    key, secret = params.get("key"), params.get("secret")
    try:
        if secret is None:
            await context.host.credentials.get(key)  # type: ignore[arg-type]
        else:
            await context.host.credentials.set(key, secret)  # type: ignore[arg-type]
    except (PluginSdkError, HostError) as exc:
        return {"code": exc.code}
    return "ok"


if __name__ == "__main__":
    sys.exit(backend.listen())
