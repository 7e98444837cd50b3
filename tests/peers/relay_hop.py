"""A plugin backend written with the SDK for relay tests: hops through a list of plugins.

``hop.call {to: [pluginID...], sleepMs?, fan?, timeoutMs?, resultBytes?, fn?}``:

- with ``to``: relays ``hop.call {to: to[1:], sleepMs}`` to ``to[0]`` (``fan`` times at once
  when given) and returns ``{hops, inner}``; a refusal of the relay is returned as
  ``{error: <code>}`` so a test reads the exact code; ``timeoutMs`` is the relayed call's
  ``timeoutMilliseconds`` (60 000 when not given), ``fn`` the function relayed to (default
  ``hop.call``);
- without: runs a sleeping process bound to the call when ``sleepMs`` is given and returns
  ``{hops: 0, caller}``, or ``{blob}`` of about ``resultBytes`` bytes when given.

A cancelled call prints ``hop-cancelled <operationID>`` to stderr (the session's log), which
shows that the provider received ``$/cancelRequest``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import trio

from supervisor.plugin_sdk import CallContext, HostError, create_backend

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

backend = create_backend("relay-hop", "1.0.0")


async def _one(context: CallContext, to: list[JSONValue], params: JSONObject) -> JSONValue:
    assert context.workspace_context is not None
    try:
        reply = await context.host.functions.invoke(
            context.workspace_context,
            plugin_id=str(to[0]),
            function_id=str(params.get("fn") or "hop.call"),
            params={**params, "to": to[1:], "fan": None},
            timeout_ms=int(str(params.get("timeoutMs") or 60_000)),
        )
    except HostError as exc:
        return {"error": exc.code}
    assert isinstance(reply, dict)
    return reply.get("value")


@backend.function("hop.call")
async def hop(params: JSONObject, context: CallContext) -> JSONValue:
    try:
        to = params.get("to") or []
        assert isinstance(to, list)
        sleep_ms = params.get("sleepMs") or 0
        if to:
            fan = params.get("fan")
            if isinstance(fan, int):
                results: list[JSONValue] = [None] * fan

                async def one(index: int) -> None:
                    results[index] = await _one(context, to, params)

                async with trio.open_nursery() as nursery:
                    for index in range(fan):
                        nursery.start_soon(one, index)
                return {"fan": results}
            inner = await _one(context, to, params)
            hops = inner.get("hops") if isinstance(inner, dict) else None
            return {"hops": hops + 1 if isinstance(hops, int) else None, "inner": inner}
        size = params.get("resultBytes")
        if isinstance(size, int):
            return {"blob": "x" * size}
        if isinstance(sleep_ms, int) and sleep_ms > 0:
            await context.run([sys.executable, "-c", f"import time; time.sleep({sleep_ms / 1000})"])
        return {"hops": 0, "caller": context.caller}
    except trio.Cancelled:
        print(f"hop-cancelled {context.operation_id}", file=sys.stderr, flush=True)
        raise


if __name__ == "__main__":
    raise SystemExit(backend.listen())
