"""Helpers shared by the LSP session tests: start a session, collect its events."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject, JSONValue
    from supervisor import Core

PY = sys.executable
PEERS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "peers"
)
FAKE = os.path.join(PEERS, "lsp_fake.py")
BIN = os.path.dirname(PY)
PYLSP = os.path.join(BIN, "pylsp")
RUFF = os.path.join(BIN, "ruff")
#: Generous: the machine is shared; never a timing assertion, only a hang guard.
WAIT_S = 60


def as_obj(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict), value
    return value


class Session:
    """A session started through the Core, with every event it has drained so far."""

    def __init__(self, core: Core, session_id: str) -> None:
        self.core = core
        self.id = session_id
        self.seen: list[JSONObject] = []
        self.gaps = 0

    async def call(self, command: str, **payload: JSONValue) -> JSONObject:
        return as_obj(await self.core.call(command, {"sessionId": self.id, **payload}))

    async def drain(self, timeout_ms: int = 0) -> list[JSONObject]:
        batch = await self.call("lsp.waitEvents", timeoutMilliseconds=timeout_ms)
        if batch["gap"]:
            self.gaps += 1
        events = batch["events"]
        assert isinstance(events, list)
        new = [as_obj(event) for event in events]
        self.seen.extend(new)
        return new

    async def wait_for(self, predicate: Callable[[JSONObject], bool]) -> JSONObject:
        for event in self.seen:
            if predicate(event):
                return event
        with trio.fail_after(WAIT_S):
            while True:
                for event in await self.drain(5000):
                    if predicate(event):
                        return event

    async def wait_state(self, state: str) -> JSONObject:
        return await self.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] == state)

    async def completed(self, operation_id: str) -> JSONObject:
        return await self.wait_for(
            lambda e: e["event"] == "requestCompleted" and e["operationId"] == operation_id
        )

    async def request(self, method: str, params: JSONValue = None, **extra: JSONValue) -> str:
        payload: dict[str, JSONValue] = {"method": method, **extra}
        if params is not None:
            payload["params"] = params
        reply = await self.call("lsp.request", **payload)
        operation_id = reply["operationId"]
        assert isinstance(operation_id, str)
        return operation_id

    async def roundtrip(
        self, method: str, params: JSONValue = None, **extra: JSONValue
    ) -> JSONObject:
        return await self.completed(await self.request(method, params, **extra))

    async def snapshot(self) -> JSONObject:
        return await self.call("lsp.snapshot")

    async def stop(self) -> JSONObject:
        return await self.call("lsp.stopServer")


async def start(core: Core, argv: list[str], cwd: str, **extra: JSONValue) -> Session:
    payload: dict[str, JSONValue] = {
        "serverId": os.path.basename(argv[0]),
        "executable": argv[0],
        "arguments": list(argv[1:]),
        "workingDirectory": cwd,
        "rootUri": "file://" + cwd,
        **extra,
    }
    reply = as_obj(await core.call("lsp.startServer", payload))
    session_id = reply["sessionId"]
    assert isinstance(session_id, str)
    return Session(core, session_id)


def fake(*flags: str) -> list[str]:
    return [PY, FAKE, *flags]


def steps(result: JSONObject) -> list[str]:
    timeline = result["timeline"]
    assert isinstance(timeline, list)
    return [str(as_obj(step)["step"]) for step in timeline]
