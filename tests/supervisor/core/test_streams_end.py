"""Every "wait until it ends" loop, written the obvious way, ends (issue 28).

For each event source -- a job, a language server, a debug session, a terminal -- the
loop a host writes first: start it, then drain its events until the one that says it ended
(``job.finished``, ``stateChanged`` to ``failed``, ``terminated``, ``exit``), with no other
call in between. Through each path: the Core's typed helpers (Trio), ``CoreThread.events``
(a blocking iterator) and ``supervisor serve`` (JSON-RPC; job events are pushed there as
notifications). The terminal's case used to hang on every path but CoreThread's: its exit
was queued only after a ``terminal.onExit``.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest
import trio

from supervisor import CoreThread, open_core
from tests.supervisor.cli.test_serve import serve_process

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject, JSONValue

PY = sys.executable
PEERS = Path(__file__).resolve().parents[2] / "peers"
#: A hang guard only (a loop that does not end fails here, not in pytest's own timeout).
WAIT_S = 60


@dataclass(frozen=True)
class Source:
    """How to start one source, and the event that says it ended."""

    kind: str
    start: str
    payload: Callable[[Path], JSONObject]
    id_field: str | None
    ended: Callable[[JSONObject], bool]


SOURCES = {
    "job": Source(
        "job",
        "job.start",
        lambda root: {"kind": "test", "root": str(root), "argv": [PY, "-c", "print('done')"]},
        None,
        lambda e: e["event"] == "job.finished",
    ),
    "lsp": Source(
        "lsp",
        "lsp.startServer",
        lambda root: {
            "serverId": "fake",
            "executable": PY,
            "arguments": [str(PEERS / "lsp_fake.py"), "--crash-in-initialize"],
            "workingDirectory": str(root),
            "rootUri": root.as_uri(),
        },
        "sessionId",
        lambda e: e["event"] == "stateChanged" and e["state"] in ("failed", "stopped"),
    ),
    "debug": Source(
        "debug",
        "debug.createSession",
        lambda root: {
            "adapterId": "fake",
            "rootPath": str(root),
            "adapter": {
                "executable": PY,
                "arguments": [str(PEERS / "dap_fake.py"), "crash-initialize"],
            },
        },
        "sessionId",
        lambda e: e["event"] == "terminated",
    ),
    "terminal": Source(
        "terminal",
        "terminal.create",
        lambda root: {"executable": PY, "arguments": ["-c", "print('bye')"], "cwd": str(root)},
        "terminalID",
        lambda e: e["event"] == "exit",
    ),
}


def _obj(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict), value
    return value


@pytest.mark.parametrize("kind", sorted(SOURCES))
async def test_through_the_typed_helpers(kind: str, tmp_path: Path) -> None:
    source = SOURCES[kind]
    with trio.fail_after(WAIT_S):
        async with open_core() as core:
            started = _obj(await core.call(source.start, source.payload(tmp_path)))
            source_id = str(started[source.id_field]) if source.id_field else ""
            last: JSONObject | None = None
            while last is None:
                events: list[object]
                if kind == "job":
                    events = list((await core.job_wait_events(timeout_milliseconds=5000)).events)
                elif kind == "lsp":
                    events = list((await core.lsp_wait_events(session_id=source_id)).events)
                elif kind == "debug":
                    events = list((await core.debug_wait_events(session_id=source_id)).events)
                else:
                    batch = await core.terminal_wait_events(terminal_id=source_id)
                    events = list(batch.events)
                for event in events:
                    wire = _obj(json.loads(_encode(event)))
                    if source.ended(wire):
                        last = wire
    assert source.ended(last)


def _encode(event: object) -> str:
    return msgspec.json.encode(event).decode()


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_through_core_thread_events(kind: str, tmp_path: Path) -> None:
    source = SOURCES[kind]
    with CoreThread() as core:
        request = {"id": 1, "command": source.start, "payload": source.payload(tmp_path)}
        response = _obj(json.loads(core.execute_json(json.dumps(request))))
        assert response["ok"], response
        data = _obj(response["data"])
        source_id = str(data[source.id_field]) if source.id_field else None
        with core.events(kind, source_id) as events:
            # A hang guard: closing the subscription ends the iteration (then next() fails).
            guard = threading.Timer(WAIT_S, events.close)
            guard.start()
            try:
                last = next(event for event in events if source.ended(event))
            finally:
                guard.cancel()
    assert source.ended(last)


@pytest.mark.parametrize("kind", sorted(SOURCES))
async def test_through_serve(kind: str, tmp_path: Path) -> None:
    source = SOURCES[kind]
    with trio.fail_after(WAIT_S):
        async with serve_process() as client:
            await client.initialize()
            reply = await client.request(source.start, source.payload(tmp_path))
            data = _obj(reply["result"])
            last: JSONObject | None = None
            if kind == "job":
                # serve pushes job events as notifications.
                while last is None:
                    for note in client.notifications:
                        params = _obj(note.get("params"))
                        if note["method"] == "job.finished":
                            last = {"event": "job.finished", **params}
                    if last is None:
                        message = await client.read_message()
                        assert message is not None
                        client.notifications.append(message)
            else:
                assert source.id_field is not None
                source_id = str(data[source.id_field])
                wait = f"{kind}.waitEvents"
                while last is None:
                    batch = await client.request(
                        wait, {str(source.id_field): source_id, "timeoutMilliseconds": 5000}
                    )
                    events = _obj(batch["result"])["events"]
                    assert isinstance(events, list)
                    for event in events:
                        if source.ended(_obj(event)):
                            last = _obj(event)
            await client.shut_down()
    assert source.ended(last)
