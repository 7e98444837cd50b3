"""Two real language servers (pylsp and ``ruff server``) through the Python API and serve.

The flows of issue 3 "Real input": start, ready, open a real Python file, its diagnostics,
hover or documentSymbol, a cancelled request, a request that times out, an edit that changes
the diagnostics, stop, and nothing left running (the conftest leak guard).

A request is made to time out, or to be cancelled while the server certainly has not answered
yet, by stopping the server process with SIGSTOP for that moment: that holds on a loaded
machine, where "a short deadline" would not.

Diagnostics come from pyflakes inside pylsp (``python-lsp-server[pyflakes]``) and from ruff's
own rules; the file has an undefined name and an unused import, and the edit removes both.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from tests.supervisor.cli.test_serve import Client, serve_process
from tests.supervisor.lsp._support import PYLSP, RUFF, WAIT_S, Session, as_obj, start, steps

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

SOURCE = """import os


def greet(name):
    return "hello " + nam


class Greeter:
    def run(self):
        return greet("x")
"""
FIXED = SOURCE.replace("+ nam\n", "+ name\n").replace("import os\n", "")

SERVERS = {
    "pylsp": [PYLSP],
    "ruff": [RUFF, "server"],
}
#: A request each server answers (ruff has no documentSymbol; its hover answers null here).
QUERY = {"pylsp": "textDocument/documentSymbol", "ruff": "textDocument/hover"}
POSITION: JSONObject = {"line": 3, "character": 5}


#: The errors of SOURCE each server reports, as (source, code or message) pairs.
EXPECTED = {
    "pylsp": {("pyflakes", "undefined name 'nam'"), ("pyflakes", "'os' imported but unused")},
    "ruff": {("Ruff", "F821"), ("Ruff", "F401")},
}
UNDEFINED = {"pylsp": ("pyflakes", "undefined name 'nam'"), "ruff": ("Ruff", "F821")}


def _errors(server: str, event: JSONObject) -> set[tuple[str, str]]:
    """The (source, code-or-message) pairs of a ``diagnostics`` event, as EXPECTED spells them."""
    diagnostics = event["diagnostics"]
    assert isinstance(diagnostics, list)
    key = "message" if server == "pylsp" else "code"
    return {
        (str(as_obj(d).get("source")), str(as_obj(d).get(key)))
        for d in diagnostics
        if as_obj(d).get("source") in ("pyflakes", "Ruff")
    }


def _project(tmp_path: str) -> tuple[str, str]:
    """Write the real file the servers are pointed at; return its path and URI."""
    path = os.path.join(tmp_path, "greet.py")
    with open(path, "w") as f:
        f.write(SOURCE)
    return path, "file://" + path


@pytest.mark.parametrize("server", sorted(SERVERS))
async def test_real_server_flow_through_the_python_api(server: str, tmp_path: str) -> None:
    _, uri = _project(str(tmp_path))
    async with open_core() as core:
        session = await start(core, SERVERS[server], str(tmp_path))
        await session.wait_state("ready")
        features = await session.wait_for(lambda e: e["event"] == "featuresChanged")
        assert "textDocumentSync" in as_obj(features["capabilities"])
        text = SOURCE
        opened = await session.call("lsp.syncDocument", uri=uri, languageId="python", text=text)
        assert opened == {"documentVersion": 1, "changed": True}
        first = await session.wait_for(lambda e: e["event"] == "diagnostics" and e["uri"] == uri)
        assert EXPECTED[server] <= _errors(server, first)
        # hover (pylsp, via jedi) or documentSymbol (both).
        symbols = await session.roundtrip(
            "textDocument/documentSymbol", {"textDocument": {"uri": uri}}
        )
        if server == "pylsp":
            names = {as_obj(s)["name"] for s in symbols["result"]}  # type: ignore[union-attr]
            assert {"greet", "Greeter"} <= names
            hover = await session.roundtrip(
                "textDocument/hover",
                {"textDocument": {"uri": uri}, "position": {"line": 3, "character": 5}},
            )
            assert "greet" in str(hover["result"])
        else:
            assert as_obj(symbols["error"])["code"] == "languageServerError"
        # An edit that changes the diagnostics.
        changed = await session.call("lsp.syncDocument", uri=uri, languageId="python", text=FIXED)
        assert changed == {"documentVersion": 2, "changed": True}
        second = await session.wait_for(
            lambda e: e["event"] == "diagnostics" and e["uri"] == uri and e.get("version") == 2
        )
        assert _errors(server, second) == set()
        # And an edit that brings an error back.
        broken = FIXED.replace("+ name\n", "+ nam\n")
        await session.call("lsp.syncDocument", uri=uri, languageId="python", text=broken)
        third = await session.wait_for(
            lambda e: e["event"] == "diagnostics" and e["uri"] == uri and e.get("version") == 3
        )
        assert _errors(server, third) == {UNDEFINED[server]}
        # A timed-out and a cancelled request, while the server can't answer.
        pid = (await session.snapshot())["pid"]
        assert isinstance(pid, int)
        os.kill(pid, signal.SIGSTOP)
        try:
            params: JSONObject = {"textDocument": {"uri": uri}, "position": POSITION}
            timed = await session.roundtrip(QUERY[server], params, timeoutMilliseconds=300)
            assert as_obj(timed.get("error", {}))["code"] == "requestTimeout", timed
            operation = await session.request(QUERY[server], params)
            assert (await session.call("lsp.cancelOperation", operationId=operation))["cancelled"]
            cancelled = await session.completed(operation)
            assert as_obj(cancelled["error"])["code"] == "requestCancelled"
        finally:
            os.kill(pid, signal.SIGCONT)
        after = await session.roundtrip(QUERY[server], params)
        assert "result" in after
        result = await session.stop()
        assert result["state"] == "stopped"
        assert "terminated" not in steps(result)  # a well-behaved server gets no signal
        assert as_obj(result["lastExit"])["exitCode"] == 0
        completions = [e["operationId"] for e in session.seen if e["event"] == "requestCompleted"]
        assert len(completions) == len(set(completions))  # each exactly once


async def _serve_call(client: Client, method: str, params: JSONObject) -> JSONValue:
    reply = await client.request(method, params)
    assert "error" not in reply, reply
    return reply["result"]


async def _serve_wait(
    client: Client, session_id: str, seen: list[JSONObject], predicate: object
) -> JSONObject:
    assert callable(predicate)
    with trio.fail_after(60):
        while True:
            for event in seen:
                if predicate(event):
                    return event
            batch = as_obj(
                await _serve_call(
                    client, "lsp.waitEvents", {"sessionId": session_id, "timeoutMilliseconds": 5000}
                )
            )
            events = batch["events"]
            assert isinstance(events, list)
            seen.extend(as_obj(e) for e in events)


@pytest.mark.parametrize("server", sorted(SERVERS))
async def test_real_server_through_supervisor_serve(server: str, tmp_path: str) -> None:
    _, uri = _project(str(tmp_path))
    async with serve_process() as client:
        commands = (await client.initialize())["commands"]
        assert isinstance(commands, list)
        assert "lsp.startServer" in commands
        argv = SERVERS[server]
        arguments: list[JSONValue] = [*argv[1:]]
        started = as_obj(
            await _serve_call(
                client,
                "lsp.startServer",
                {
                    "serverId": server,
                    "executable": argv[0],
                    "arguments": arguments,
                    "workingDirectory": str(tmp_path),
                    "rootUri": "file://" + str(tmp_path),
                },
            )
        )
        sid = str(started["sessionId"])
        seen: list[JSONObject] = []
        await _serve_wait(client, sid, seen, lambda e: e.get("state") == "ready")
        text = SOURCE
        await _serve_call(
            client,
            "lsp.syncDocument",
            {"sessionId": sid, "uri": uri, "languageId": "python", "text": text},
        )
        diagnostics = await _serve_wait(
            client, sid, seen, lambda e: e["event"] == "diagnostics" and e["uri"] == uri
        )
        assert EXPECTED[server] <= _errors(server, diagnostics)
        params: JSONObject = {"textDocument": {"uri": uri}, "position": POSITION}

        async def request(**extra: JSONValue) -> str:
            payload: JSONObject = {"sessionId": sid, "method": QUERY[server], "params": params}
            payload.update(extra)
            return str(as_obj(await _serve_call(client, "lsp.request", payload))["operationId"])

        async def completed(operation_id: str) -> JSONObject:
            return await _serve_wait(
                client,
                sid,
                seen,
                lambda e: e["event"] == "requestCompleted" and e["operationId"] == operation_id,
            )

        assert "result" in await completed(await request())
        # An edit that changes the diagnostics: both errors fixed.
        await _serve_call(
            client,
            "lsp.syncDocument",
            {"sessionId": sid, "uri": uri, "languageId": "python", "text": FIXED},
        )
        fixed = await _serve_wait(
            client,
            sid,
            seen,
            lambda e: e["event"] == "diagnostics" and e["uri"] == uri and e.get("version") == 2,
        )
        assert _errors(server, fixed) == set()
        # A request that times out and one that is cancelled, while the server can't answer.
        pid = as_obj(await _serve_call(client, "lsp.snapshot", {"sessionId": sid}))["pid"]
        assert isinstance(pid, int)
        os.kill(pid, signal.SIGSTOP)
        try:
            timed = await completed(await request(timeoutMilliseconds=300))
            assert as_obj(timed.get("error", {}))["code"] == "requestTimeout", timed
            operation = await request(operationId="to-cancel")
            assert operation == "to-cancel"
            cancel: JSONObject = {"sessionId": sid, "operationId": operation}
            assert as_obj(await _serve_call(client, "lsp.cancelOperation", cancel))["cancelled"]
            cancelled = await completed(operation)
            assert as_obj(cancelled["error"])["code"] == "requestCancelled"
        finally:
            os.kill(pid, signal.SIGCONT)
        assert "result" in await completed(await request())
        stopped = as_obj(await _serve_call(client, "lsp.stopServer", {"sessionId": sid}))
        assert stopped["state"] == "stopped"
        assert "terminated" not in steps(stopped)
        completions = [e["operationId"] for e in seen if e["event"] == "requestCompleted"]
        assert len(completions) == len(set(completions)) == 4  # each exactly once
        missing = await client.request("lsp.snapshot", {"sessionId": "nope"})
        assert as_obj(as_obj(missing["error"])["data"])["code"] == "not_found"
        await client.shut_down()


async def _settled_diagnostics(session: Session) -> tuple[JSONObject, dict[str, list[JSONValue]]]:
    """``lsp.snapshot {includeDiagnostics}`` taken between two drains that brought no new
    ``diagnostics`` event, and the last diagnostics each URI's events carried: the snapshot
    is then the state those events left, so the two must agree."""
    with trio.fail_after(WAIT_S):
        while True:
            await session.drain()
            state = await session.call("lsp.snapshot", includeDiagnostics=True)
            if not [e for e in await session.drain(200) if e["event"] == "diagnostics"]:
                break
    last: dict[str, list[JSONValue]] = {}
    for event in session.seen:
        if event["event"] == "diagnostics":
            diagnostics = event["diagnostics"]
            assert isinstance(diagnostics, list)
            last[str(event["uri"])] = diagnostics
    return state, last


def _documents(state: JSONObject) -> dict[str, JSONObject]:
    documents = state["documents"]
    assert isinstance(documents, list)
    return {str(as_obj(d)["uri"]): as_obj(d) for d in documents}


@pytest.mark.parametrize("server", sorted(SERVERS))
async def test_snapshot_replays_each_open_documents_latest_diagnostics(
    server: str, tmp_path: str
) -> None:
    """Issue 30: a client that attaches takes ``lsp.snapshot {includeDiagnostics: true}``
    and has, for each open document, the diagnostics of the last ``diagnostics`` event
    another client drained -- the newest after an edit, none for a closed document -- and
    without the flag only their count."""
    _, uri = _project(str(tmp_path))
    other = os.path.join(str(tmp_path), "other.py")
    other_uri = "file://" + other
    broken = FIXED.replace("+ name\n", "+ nam\n")
    with open(other, "w") as f:  # noqa: ASYNC230 - a few bytes
        f.write(broken)
    async with open_core() as core:
        session = await start(core, SERVERS[server], str(tmp_path))
        await session.wait_state("ready")
        await session.call("lsp.syncDocument", uri=uri, languageId="python", text=SOURCE)
        await session.wait_for(lambda e: e["event"] == "diagnostics" and e["uri"] == uri)
        state, last = await _settled_diagnostics(session)
        document = _documents(state)[uri]
        assert document["diagnostics"] == last[uri]
        assert EXPECTED[server] <= _errors(server, document)
        assert document["diagnosticCount"] == len(last[uri])
        # Without the flag: the count, not the list.
        plain = _documents(await session.snapshot())[uri]
        assert "diagnostics" not in plain
        assert plain["diagnosticCount"] == len(last[uri])
        # An edit that clears them: the snapshot gives the newest, not the first.
        await session.call("lsp.syncDocument", uri=uri, languageId="python", text=FIXED)
        await session.wait_for(
            lambda e: e["event"] == "diagnostics" and e["uri"] == uri and e.get("version") == 2
        )
        # A second document, with one error of its own.
        await session.call("lsp.syncDocument", uri=other_uri, languageId="python", text=broken)
        await session.wait_for(lambda e: e["event"] == "diagnostics" and e["uri"] == other_uri)
        state, last = await _settled_diagnostics(session)
        documents = _documents(state)
        assert set(documents) == {uri, other_uri}
        assert documents[uri]["diagnostics"] == last[uri]
        assert _errors(server, documents[uri]) == set()
        assert documents[other_uri]["diagnostics"] == last[other_uri]
        assert _errors(server, documents[other_uri]) == {UNDEFINED[server]}
        # A closed document is no longer open: nothing of it is replayed.
        await session.call("lsp.closeDocument", uri=uri)
        documents = _documents(await session.call("lsp.snapshot", includeDiagnostics=True))
        assert set(documents) == {other_uri}
        assert _errors(server, documents[other_uri]) == {UNDEFINED[server]}
        result = await session.stop()
        assert result["state"] == "stopped"
