"""Language-server sessions against the fake server (issue 3): what real servers rarely do.

Every test ends with nothing left running (the leak guard in conftest.py checks it).
"""

from __future__ import annotations

import json
import os
import signal
from typing import TYPE_CHECKING

import pytest
import trio

from protocol import CoreError
from supervisor import open_core
from tests.supervisor.lsp._support import PY, WAIT_S, Session, as_obj, fake, start, steps

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core

FAST_STOP: dict[str, JSONValue] = {"shutdownTimeoutMilliseconds": 500}


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


async def test_requests_complete_exactly_once_with_each_outcome(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path), requestTimeoutMilliseconds=60_000)
    await session.wait_state("ready")
    ok = await session.roundtrip("test/sleep", {"ms": 10})
    assert ok["result"] == "slept"
    timed = await session.roundtrip("test/hang", {}, timeoutMilliseconds=300)
    assert as_obj(timed["error"])["code"] == "requestTimeout"
    failed = await session.roundtrip("test/fail", {"code": -32099, "message": "nope"})
    error = as_obj(failed["error"])
    assert error["code"] == "languageServerError"
    assert error["details"] == {"code": -32099, "message": "nope"}
    assert error["stage"] == "request"
    assert error["method"] == "test/fail"
    # core-api.md: a structured runtime error names its provider and session.
    assert (error["provider"], error["sessionId"]) == (os.path.basename(PY), session.id)
    # A cancel ends the request at once; the reply the server sends later is ignored.
    late = await session.request("test/late", {}, operationId="mine")
    assert late == "mine"
    assert (await session.call("lsp.cancelOperation", operationId="mine"))["cancelled"] is True
    assert (await session.call("lsp.cancelOperation", operationId="mine"))["cancelled"] is False
    cancelled = await session.completed("mine")
    assert as_obj(cancelled["error"])["code"] == "requestCancelled"
    marker = await session.roundtrip("test/sleep", {"ms": 600})
    assert marker["result"] == "slept"
    completions = [
        e for e in session.seen if e["event"] == "requestCompleted" and e["operationId"] == "mine"
    ]
    assert len(completions) == 1
    await session.request("test/hang", {}, operationId="dup")
    with pytest.raises(CoreError) as duplicate:
        await session.request("test/hang", {}, operationId="dup")
    assert duplicate.value.code == "invalid_request"
    result = await session.stop()
    assert result["state"] == "stopped"
    dup = await session.completed("dup")
    assert as_obj(dup["error"])["code"] == "languageServerUnavailable"
    seqs = [int(str(e["seq"])) for e in session.seen]
    assert seqs == sorted(seqs)


async def test_crash_during_initialize_fails_with_exit_detail_and_stderr(
    core: Core, tmp_path: str
) -> None:
    session = await start(core, fake("--crash-in-initialize"), str(tmp_path))
    failed = await session.wait_state("failed")
    error = as_obj(failed["error"])
    assert error["code"] == "exitedEarly"
    assert error["exitCode"] == 3
    assert error["stage"] == "initialize"
    fact = await session.wait_for(lambda e: e["event"] == "fact")
    assert fact["code"] == "host.exitedEarly"
    assert "message" not in fact  # facts carry categories only
    snapshot = await session.snapshot()
    assert snapshot["state"] == "failed"
    assert snapshot["pid"] is None
    assert "fatal: cannot initialize" in str(snapshot["stderrTail"])
    assert as_obj(snapshot["lastExit"])["exitCode"] == 3
    # Stopping a failed session changes nothing; destroying removes it.
    assert (await session.stop())["state"] == "failed"
    assert (await session.call("lsp.destroyServer"))["destroyed"] is True
    with pytest.raises(CoreError) as gone:
        await session.snapshot()
    assert gone.value.code == "not_found"


async def test_initialize_error_and_timeout(core: Core, tmp_path: str) -> None:
    errored = await start(core, fake("--initialize-error"), str(tmp_path))
    error = as_obj((await errored.wait_state("failed"))["error"])
    assert error["code"] == "initializeFailed"
    silent = await start(
        core, fake("--no-initialize-answer"), str(tmp_path), initializeTimeoutMilliseconds=300
    )
    error = as_obj((await silent.wait_state("failed"))["error"])
    assert error["code"] == "initializeTimeout"
    assert (await silent.wait_for(lambda e: e["event"] == "fact"))["code"] == "host.timedOut"


async def test_server_that_never_answers_shutdown_is_terminated(core: Core, tmp_path: str) -> None:
    session = await start(core, fake("--no-shutdown-answer"), str(tmp_path), **FAST_STOP)
    await session.wait_state("ready")
    result = await session.stop()
    assert result["state"] == "stopped"
    assert steps(result)[:4] == ["stopRequested", "shutdownSent", "shutdownTimedOut", "exitSent"]
    assert "terminated" in steps(result)
    assert "killed" not in steps(result)
    assert as_obj(result["lastExit"])["signal"] == signal.SIGTERM
    assert as_obj(result["lastExit"])["signalName"] == "SIGTERM"


async def test_server_that_ignores_sigterm_is_killed(core: Core, tmp_path: str) -> None:
    session = await start(core, fake("--ignore-term"), str(tmp_path), **FAST_STOP)
    await session.wait_state("ready")
    result = await session.stop()
    assert result["state"] == "stopped"
    assert "shutdownAnswered" in steps(result)
    assert "killed" in steps(result)
    assert as_obj(result["lastExit"])["signal"] == signal.SIGKILL
    assert as_obj(result["lastExit"])["signalName"] == "SIGKILL"


async def test_slow_but_polite_server_gets_no_signal_and_second_stop_joins(
    core: Core, tmp_path: str
) -> None:
    session = await start(core, fake("--slow-shutdown=1000"), str(tmp_path))
    await session.wait_state("ready")
    results = []

    async def stop() -> None:
        results.append(await session.stop())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(stop)
    first, second = results
    assert first == second  # same result, same timeline
    assert steps(first) == [
        "stopRequested",
        "shutdownSent",
        "shutdownAnswered",
        "exitSent",
        "exited",
    ]
    assert as_obj(first["lastExit"])["exitCode"] == 0
    states = [e["state"] for e in await session.drain() if e["event"] == "stateChanged"]
    assert "failed" not in states
    assert (await session.stop()) == first


async def test_stop_while_initializing_cancels_initialize_once(core: Core, tmp_path: str) -> None:
    session = await start(core, fake("--no-initialize-answer"), str(tmp_path))
    await session.wait_state("initializing")
    result = await session.stop()
    assert result["state"] == "stopped"
    assert "initializeCancelled" in steps(result)
    assert "shutdownSent" not in steps(result)
    assert "exitSent" in steps(result)
    await session.drain()
    states = [e["state"] for e in session.seen if e["event"] == "stateChanged"]
    # The first event is the initial state (issue 3 "States", "Events: stateChanged").
    assert states == ["starting", "initializing", "stopping", "stopped"], session.seen
    first = session.seen[0]
    assert (first["event"], first["previousState"], first["generation"]) == (
        "stateChanged",
        None,
        1,
    )
    assert isinstance(first["pid"], int)
    # A stop is a user cancellation: the start records no fact.
    assert not [e for e in session.seen if e["event"] == "fact"]


async def test_server_requests_are_answered_once_with_their_id_type(
    core: Core, tmp_path: str
) -> None:
    config: JSONValue = {"fake": {"level": 3, "nested": {"on": True}}}
    session = await start(core, fake(), str(tmp_path), workspaceConfiguration=config)
    await session.wait_state("ready")
    unknown = await session.roundtrip("test/ask", {"method": "custom/unknown", "params": {}})
    assert as_obj(unknown["result"])["code"] == -32601
    configuration = await session.roundtrip(
        "test/ask",
        {
            "method": "workspace/configuration",
            "params": {"items": [{"section": "fake.nested"}, {"section": "absent"}, {}]},
        },
    )
    assert as_obj(configuration["result"])["result"] == [{"on": True}, None, config]
    for method in ("window/workDoneProgress/create", "client/registerCapability"):
        accepted = await session.roundtrip("test/ask", {"method": method, "params": {}})
        assert accepted["result"] == {"result": None}
    # The configuration update is sent, and answers later configuration requests.
    update: JSONValue = {"fake": {"level": 4}}
    delivered = await session.call(
        "lsp.updateWorkspaceConfiguration", workspaceConfiguration=update
    )
    assert delivered["delivered"] is True
    again = await session.roundtrip(
        "test/ask",
        {"method": "workspace/configuration", "params": {"items": [{"section": "fake.level"}]}},
    )
    assert as_obj(again["result"])["result"] == [4]
    received = await session.roundtrip("test/documents")
    sent = [as_obj(m)["method"] for m in received["result"]]  # type: ignore[union-attr]
    assert sent == ["workspace/didChangeConfiguration", "workspace/didChangeConfiguration"]
    await session.stop()


async def test_documents_versions_and_diagnostics_filtering(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path))
    await session.wait_state("ready")
    uri = "file:///doc.py"
    opened = await session.call("lsp.syncDocument", uri=uri, languageId="python", text="a\n")
    assert opened == {"documentVersion": 1, "changed": True}
    same = await session.call("lsp.syncDocument", uri=uri, languageId="python", text="a\n")
    assert same == {"documentVersion": 1, "changed": False}
    change: JSONValue = {
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}},
        "text": "b",
    }
    ranged = await session.call(
        "lsp.syncDocument", uri=uri, languageId="python", contentChanges=[change]
    )
    assert ranged == {"documentVersion": 2, "changed": True}
    published: list[JSONValue] = [
        {"uri": "file:///not-open.py", "diagnostics": [{"message": "x"}]},
        {"uri": uri, "version": 1, "diagnostics": [{"message": "old"}]},
        {"uri": uri, "version": 2, "diagnostics": [{"message": "current"}]},
    ]
    for params in published:
        await session.roundtrip(
            "test/notify", {"method": "textDocument/publishDiagnostics", "params": params}
        )
    diagnostics = [e for e in session.seen + await session.drain() if e["event"] == "diagnostics"]
    assert [(e["uri"], e["version"]) for e in diagnostics] == [(uri, 2)]
    snapshot = await session.snapshot()
    assert snapshot["documents"] == [
        {"uri": uri, "languageId": "python", "version": 2, "diagnosticCount": 1}
    ]
    await session.call(
        "lsp.workspaceFilesChanged", changes=[{"uri": "file:///x.py", "kind": "created"}]
    )
    assert (await session.call("lsp.closeDocument", uri=uri))["closed"] is True
    cleared = await session.wait_for(
        lambda e: e["event"] == "diagnostics" and e["diagnostics"] == []
    )
    assert cleared["uri"] == uri
    received = await session.roundtrip("test/documents")
    methods = [as_obj(m)["method"] for m in received["result"]]  # type: ignore[union-attr]
    assert methods == [
        "textDocument/didOpen",
        "textDocument/didChange",
        "workspace/didChangeWatchedFiles",
        "textDocument/didClose",
    ]
    did_change = as_obj(as_obj(received["result"][1])["params"])  # type: ignore[index]
    assert did_change["contentChanges"] == [change]
    await session.stop()


async def test_full_sync_server_gets_full_text_for_ranged_changes(
    core: Core, tmp_path: str
) -> None:
    session = await start(core, fake("--full-sync"), str(tmp_path))
    await session.wait_state("ready")
    uri = "file:///doc.py"
    await session.call("lsp.syncDocument", uri=uri, languageId="python", text="hello\n")
    change: JSONValue = {
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 5}},
        "text": "bye",
    }
    await session.call("lsp.syncDocument", uri=uri, languageId="python", contentChanges=[change])
    received = await session.roundtrip("test/documents")
    did_change = as_obj(as_obj(received["result"][1])["params"])  # type: ignore[index]
    assert did_change["contentChanges"] == [{"text": "bye\n"}]
    await session.stop()


async def test_crash_ends_pending_requests_at_once(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path))
    await session.wait_state("ready")
    pending = await session.request("test/hang", {}, timeoutMilliseconds=300_000)
    await session.request("test/exit", {"code": 7})
    with trio.fail_after(WAIT_S):  # far below the request's own deadline
        ended = await session.completed(pending)
    assert as_obj(ended["error"])["code"] == "languageServerUnavailable"
    failed = await session.wait_state("failed")
    error = as_obj(failed["error"])
    assert (error["code"], error["exitCode"], error["stage"]) == ("crashed", 7, "running")
    assert "crashing on purpose" in str(error["stderrTail"])
    started = await session.wait_for(lambda e: e["event"] == "fact")
    assert (started["kind"], started["operation"]) == ("operationFinished", "languageServer/start")
    assert "code" not in started
    fact = await session.wait_for(lambda e: e["event"] == "fact" and e["kind"] == "operationFailed")
    assert (fact["code"], fact["operation"]) == ("host.crashed", "languageServer/run")
    # Categories only: no exit detail, stderr or message in a fact.
    assert set(fact) == {
        "seq",
        "event",
        "sessionId",
        "generation",
        "catalogEvent",
        "kind",
        "operation",
        "code",
        "durationMs",
    }
    assert as_obj((await session.snapshot())["facts"]) == {"admitted": 2, "dropped": 0}
    # A request to the failed session is refused at once, with the reason (issue 28).
    with pytest.raises(CoreError) as refused:
        await session.request("test/sleep", {"ms": 1})
    assert refused.value.code == "invalid_request"
    assert "failed (crashed)" in refused.value.message
    details = as_obj(refused.value.details)
    assert details["state"] == "failed"
    assert (as_obj(details["lastExit"])["code"], as_obj(details["lastExit"])["exitCode"]) == (
        "crashed",
        7,
    )
    assert "crashing on purpose" in str(details["stderrTail"])


async def test_restart_makes_new_generations_until_the_budget_is_spent(
    core: Core, tmp_path: str
) -> None:
    restart: JSONValue = {"maxCrashes": 2, "initialBackoffMilliseconds": 50}
    session = await start(core, fake(), str(tmp_path), restart=restart)
    await session.wait_state("ready")
    uri = "file:///kept.py"
    await session.call("lsp.syncDocument", uri=uri, languageId="python", text="x\n")
    await session.request("test/exit", {"code": 9})
    await session.wait_for(lambda e: e.get("state") == "ready" and e["generation"] == 2)
    # The new process got the open document again; the old one's events stay generation 1.
    received = await session.roundtrip("test/documents")
    reopened = as_obj(as_obj(received["result"][0])["params"])  # type: ignore[index]
    assert as_obj(reopened["textDocument"])["uri"] == uri
    assert (await session.snapshot())["generation"] == 2
    await session.request("test/exit", {"code": 9})
    await session.wait_for(lambda e: e.get("state") == "failed" and e["generation"] == 2)
    await session.wait_for(lambda e: e["event"] == "log" and "budget" in str(e["message"]))
    await trio.sleep(0.2)
    snapshot = await session.snapshot()
    assert (snapshot["state"], snapshot["generation"]) == ("failed", 2)


async def test_explicit_restart_and_stop_during_backoff(core: Core, tmp_path: str) -> None:
    session = await start(
        core, fake(), str(tmp_path), restart={"initialBackoffMilliseconds": 60_000}
    )
    await session.wait_state("ready")
    assert (await session.call("lsp.restartServer"))["generation"] == 2
    await session.wait_for(lambda e: e.get("state") == "ready" and e["generation"] == 2)
    await session.request("test/exit", {"code": 1})
    await session.wait_for(lambda e: e.get("state") == "failed" and e["generation"] == 2)
    with trio.fail_after(WAIT_S):  # the 60 s backoff does not delay the stop
        result = await session.stop()
    assert result["state"] == "stopped"


async def test_gates_hold_requests_until_ready(core: Core, tmp_path: str) -> None:
    gates: JSONValue = [
        {"id": "ready", "until": "notification", "method": "custom/ready", "match": {"ok": True}}
    ]
    session = await start(core, fake("--ready-after=300"), str(tmp_path), gates=gates)
    await session.wait_state("initializing")
    operation = await session.request("test/sleep", {"ms": 1})
    assert (await session.snapshot())["closedGates"] == ["ready"]
    await session.wait_state("ready")
    assert (await session.completed(operation))["result"] == "slept"
    events = [e["event"] for e in session.seen]
    assert events.index("progress") < events.index("requestCompleted")
    await session.stop()


async def test_gate_that_never_opens_fails_at_the_idle_deadline(core: Core, tmp_path: str) -> None:
    gates: JSONValue = [
        {"id": "never", "until": "notification", "method": "custom/never", "match": {}}
    ]
    session = await start(
        core,
        fake(),
        str(tmp_path),
        gates=gates,
        serviceReadyIdleTimeoutMilliseconds=300,
    )
    failed = await session.wait_state("failed")
    error = as_obj(failed["error"])
    assert (error["code"], error["stage"]) == ("serviceReadyTimeout", "serviceReady")
    # Issue 16: who failed, and the server's own last word (here: none yet).
    assert (error["provider"], error["sessionId"]) == (os.path.basename(PY), session.id)
    assert "underlyingMessage" not in error


async def test_readiness_failure_keeps_the_servers_last_message(core: Core, tmp_path: str) -> None:
    gates: JSONValue = [
        {"id": "never", "until": "notification", "method": "custom/never", "match": {}}
    ]
    session = await start(
        core,
        fake("--ready-after=10"),
        str(tmp_path),
        gates=gates,
        serviceReadyIdleTimeoutMilliseconds=300,
    )
    failed = await session.wait_state("failed")
    error = as_obj(failed["error"])
    assert error["code"] == "serviceReadyTimeout"
    assert error["underlyingMessage"] == "Importing 3 projects"


async def test_waiting_requests_are_bounded(core: Core, tmp_path: str) -> None:
    gates: JSONValue = [
        {"id": "never", "until": "notification", "method": "custom/never", "match": {}}
    ]
    session = await start(core, fake(), str(tmp_path), gates=gates)
    for _ in range(128):
        await session.request("test/sleep", {"ms": 1})
    with pytest.raises(CoreError) as busy:
        await session.request("test/sleep", {"ms": 1})
    assert busy.value.code == "busy"
    result = await session.stop()
    assert result["state"] == "stopped"
    ended = [e for e in await session.drain() if e["event"] == "requestCompleted"]
    assert len(ended) == 128
    assert {as_obj(e["error"])["code"] for e in ended} == {"languageServerUnavailable"}


async def test_server_that_stops_reading_stalls_only_itself(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path), **FAST_STOP)
    other = await start(core, fake(), str(tmp_path))
    await session.wait_state("ready")
    await session.roundtrip("test/stopReading")
    big = "x" * (4 * 1024 * 1024)
    await session.call("lsp.syncDocument", uri="file:///big.py", languageId="python", text=big)
    timed = await session.roundtrip("test/sleep", {"ms": 1}, timeoutMilliseconds=500)
    assert as_obj(timed["error"])["code"] == "requestTimeout"
    # Reading goes on: its log notifications keep arriving; the other session is unaffected.
    await session.wait_for(lambda e: e["event"] == "log" and "still here" in str(e["message"]))
    await other.wait_state("ready")
    assert (await other.roundtrip("test/sleep", {"ms": 1}))["result"] == "slept"
    result = await session.stop()
    assert result["state"] == "stopped"
    assert "terminated" in steps(result)
    await other.stop()


async def test_plugin_requests_follow_the_session_policy(core: Core, tmp_path: str) -> None:
    policy: JSONValue = {
        "requestMethods": ["test/sleep", "test/hang", "workspace/executeCommand"],
        "commands": ["build", "once"],
        "serializedCommands": ["once"],
        "forwardNotifications": ["custom/event"],
    }
    session = await start(core, fake(), str(tmp_path), sessionPolicy=policy, pluginId="p1")
    await session.wait_state("ready")

    async def plugin(method: str, params: JSONValue = None, **extra: JSONValue) -> JSONValue:
        payload: JSONObject = {"sessionId": session.id, "pluginId": "p1", "method": method}
        payload.update(extra)
        if params is not None:
            payload["params"] = params
        return await core.call("lsp.pluginServerRequest", payload)

    assert await plugin("test/sleep", {"ms": 1}) == {"value": "slept"}
    undeclared_calls: list[tuple[str, JSONValue]] = [
        ("test/fail", {}),
        ("workspace/executeCommand", {"command": "rm"}),
    ]
    for method, params in undeclared_calls:
        with pytest.raises(CoreError) as undeclared:
            await plugin(method, params)
        assert undeclared.value.code == "plugin.host.methodNotDeclared"
    with pytest.raises(CoreError) as timeout:
        await plugin("test/hang", {}, timeoutMilliseconds=200)
    assert timeout.value.code == "plugin.host.timeout"
    with pytest.raises(CoreError) as foreign:
        await core.call(
            "lsp.pluginServerRequest",
            {"sessionId": session.id, "pluginId": "p2", "method": "test/sleep"},
        )
    assert foreign.value.code == "plugin.host.foreignContribution"
    # A serialized command: the second request joins the first and gets its answer.
    answers: list[JSONValue] = []

    async def once() -> None:
        answers.append(
            await plugin("workspace/executeCommand", {"command": "once", "arguments": [300]})
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(once)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(once)
    assert answers[0] == answers[1]
    assert as_obj(as_obj(answers[0])["value"])["count"] == 1
    # Cancelling the first request ends the joined one with it.
    async with trio.open_nursery() as nursery:
        first = trio.CancelScope()

        async def cancelled_first() -> None:
            with first:
                await plugin("workspace/executeCommand", {"command": "once", "arguments": [5000]})

        async def joined() -> None:
            with pytest.raises(CoreError) as ended:
                await plugin("workspace/executeCommand", {"command": "once", "arguments": [5000]})
            assert ended.value.code == "plugin.host.cancelled"

        nursery.start_soon(cancelled_first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(joined)
        await trio.testing.wait_all_tasks_blocked()
        first.cancel()
    notified = await core.call(
        "lsp.pluginServerNotify",
        {
            "sessionId": session.id,
            "pluginId": "p1",
            "method": "workspace/didChangeConfiguration",
            "params": {"settings": {"a": 1}},
        },
    )
    assert notified == {"delivered": True}
    await session.roundtrip("test/notify", {"method": "custom/event", "params": {"n": 1}})
    forwarded = await session.wait_for(lambda e: e["event"] == "serverNotification")
    assert forwarded["params"] == {"n": 1}
    await session.stop()
    with pytest.raises(CoreError) as unavailable:
        await plugin("test/sleep", {"ms": 1})
    assert unavailable.value.code == "plugin.host.languageServerUnavailable"


async def test_bad_input_starts_nothing(core: Core, tmp_path: str) -> None:
    base = {"serverId": "x", "workingDirectory": str(tmp_path), "rootUri": "file:///x"}
    for payload, code in (
        ({**base}, "invalid_request"),
        ({**base, "executable": PY, "bogus": 1}, "invalid_request"),
        ({**base, "executable": PY, "workingDirectory": "relative"}, "invalid_request"),
        (
            {**base, "executable": PY, "gates": [{"id": "g", "until": "x", "method": "m"}]},
            "invalid_request",
        ),
        ({**base, "executable": "/no/such/server"}, "launch_failed"),
    ):
        with pytest.raises(CoreError) as refused:
            await core.call("lsp.startServer", payload)  # type: ignore[arg-type]
        assert refused.value.code == code
    with pytest.raises(CoreError) as missing:
        await core.call("lsp.snapshot", {"sessionId": "lsp-404"})
    assert missing.value.code == "not_found"
    session = await start(core, fake(), str(tmp_path))
    await session.wait_state("ready")
    with pytest.raises(CoreError) as running:
        await session.call("lsp.destroyServer")
    assert running.value.code == "invalid_request"
    await session.stop()
    assert (await session.call("lsp.destroyServer"))["destroyed"] is True


async def test_closing_the_core_stops_every_session(tmp_path: str) -> None:
    pid_file = os.path.join(tmp_path, "pid")
    async with open_core() as opened:
        session = await start(opened, fake(f"--pid-file={pid_file}"), str(tmp_path))
        await session.wait_state("ready")
    pid = int(await trio.Path(pid_file).read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)  # gone, not a zombie of ours either


async def test_broken_frame_is_a_crash_with_a_protocol_error(core: Core, tmp_path: str) -> None:
    session = await start(core, fake(), str(tmp_path))
    await session.wait_state("ready")
    pending = await session.request("test/hang", {})
    await session.request("test/garbage", {})
    failed = await session.wait_state("failed")
    assert as_obj(failed["error"])["code"] == "protocolError"
    ended = await session.completed(pending)
    assert as_obj(ended["error"])["code"] == "languageServerUnavailable"


async def test_bounded_event_queue_reports_the_gap_and_clear_diagnostics(tmp_path: str) -> None:
    async with open_core(max_events=4) as small:
        session = await start(small, fake(), str(tmp_path))
        await session.wait_state("ready")
        uri = "file:///d.py"
        await session.call("lsp.syncDocument", uri=uri, languageId="python", text="x")
        published: JSONValue = {"uri": uri, "diagnostics": [{"message": "m"}]}
        await session.roundtrip(
            "test/notify", {"method": "textDocument/publishDiagnostics", "params": published}
        )
        for _ in range(6):
            await session.request("test/sleep", {"ms": 1})
        await trio.sleep(0.5)  # let them complete: more events than the queue keeps
        await session.drain()
        assert session.gaps == 1
        assert (await session.call("lsp.clearDiagnostics"))["cleared"] == 1
        cleared = await session.wait_for(
            lambda e: e["event"] == "diagnostics" and e["diagnostics"] == []
        )
        assert cleared["uri"] == uri
        events = as_obj((await session.snapshot())["events"])
        assert isinstance(events["dropped"], int)
        assert events["dropped"] >= 1
        await session.stop()


async def test_server_request_while_stopping_gets_an_error_reply(core: Core, tmp_path: str) -> None:
    """Issue 3: "requests that arrive while the session stops get an error reply"."""
    reply_file = os.path.join(tmp_path, "reply.json")
    session = await start(
        core, fake(f"--ask-on-shutdown={reply_file}"), str(tmp_path), workspaceConfiguration={}
    )
    await session.wait_state("ready")
    result = await session.stop()
    # The server got its answer (so it answered shutdown in time and exited on exit).
    assert steps(result) == [
        "stopRequested",
        "shutdownSent",
        "shutdownAnswered",
        "exitSent",
        "exited",
    ]
    reply = as_obj(json.loads(await trio.Path(reply_file).read_text()))
    assert reply["code"] == -32803  # RequestFailed (LSP 3.17)
    assert "stopping" in str(reply["message"])


async def test_plugin_notify_before_initialize(core: Core, tmp_path: str) -> None:
    """Issue 3 / plugin-contract.md "notify": ``delivered: false`` only for configuration
    sent before the server is initialized; the value is then sent with ``initialized``."""
    policy: JSONValue = {"requestMethods": ["custom/ping"]}
    go = os.path.join(tmp_path, "initialize-now")
    session = await start(
        core,
        fake(f"--hold-initialize={go}"),
        str(tmp_path),
        sessionPolicy=policy,
        pluginId="p1",
        workspaceConfiguration={"fake": {"level": 1}},
    )
    await session.wait_state("initializing")
    base: JSONObject = {"sessionId": session.id, "pluginId": "p1"}
    settings: JSONValue = {"fake": {"level": 2}}
    notified = await core.call(
        "lsp.pluginServerNotify",
        {
            **base,
            "method": "workspace/didChangeConfiguration",
            "params": {"settings": settings},
        },
    )
    assert notified == {"delivered": False}
    with pytest.raises(CoreError) as early:
        await core.call("lsp.pluginServerNotify", {**base, "method": "custom/ping"})
    assert early.value.code == "plugin.host.languageServerUnavailable"
    with pytest.raises(CoreError) as undeclared:
        await core.call("lsp.pluginServerNotify", {**base, "method": "custom/other"})
    assert undeclared.value.code == "plugin.host.methodNotDeclared"
    await trio.Path(go).write_text("")
    await session.wait_state("ready")
    received = await session.roundtrip("test/documents")
    assert received["result"] == [
        {"method": "workspace/didChangeConfiguration", "params": {"settings": settings}}
    ]
    asked = await session.roundtrip(
        "test/ask",
        {"method": "workspace/configuration", "params": {"items": [{"section": "fake.level"}]}},
    )
    assert as_obj(asked["result"])["result"] == [2]
    assert (await session.stop())["state"] == "stopped"


async def test_stderr_flood_cannot_evict_diagnostics_or_completions(tmp_path: str) -> None:
    """Issue 3: stderr lines are debug ``log`` events, bounded so they never evict others."""
    async with open_core(max_events=64) as small:
        session = await start(small, fake(), str(tmp_path))
        await session.wait_state("ready")
        await session.drain()
        uri = "file:///d.py"
        await session.call("lsp.syncDocument", uri=uri, languageId="python", text="x")
        published: JSONValue = {"uri": uri, "version": 1, "diagnostics": [{"message": "m"}]}
        await session.call(
            "lsp.request",
            method="test/notify",
            params={"method": "textDocument/publishDiagnostics", "params": published},
            operationId="diag",
        )
        await session.call(
            "lsp.request", method="test/floodStderr", params={"lines": 5000}, operationId="flood"
        )
        # The ring always gets every line: wait until the last one is read.
        with trio.fail_after(WAIT_S):
            # A real pipe read by another task: there is no event to wait on, so look.
            while "noise line 4999" not in str(  # noqa: ASYNC110
                (await session.snapshot())["stderrTail"]
            ):
                await trio.sleep(0.05)
        await session.call(
            "lsp.request", method="test/sleep", params={"ms": 1}, operationId="after"
        )
        await session.completed("after")
        batch = session.seen
        assert session.gaps == 0
        kinds = [e["event"] for e in batch]
        assert "diagnostics" in kinds
        completed = {e["operationId"] for e in batch if e["event"] == "requestCompleted"}
        assert {"diag", "flood", "after"} <= completed
        noise = [e for e in batch if e["event"] == "log" and e["source"] == "stderr"]
        assert 1 <= len(noise) <= 64 // 4
        assert {e["level"] for e in noise} == {"debug"}
        stderr = as_obj(as_obj(await session.snapshot())["stderr"])
        assert stderr["lines"] == 5000
        assert stderr["notQueued"] == 5000 - len(noise)
        # Draining makes room again; the next queued stderr event says what was left out.
        await session.roundtrip("test/floodStderr", {"lines": 1})
        reported = await session.wait_for(
            lambda e: e["event"] == "log" and e.get("droppedLines") is not None
        )
        assert reported["droppedLines"] == stderr["notQueued"]
        assert (await session.stop())["state"] == "stopped"


async def test_cancel_and_deadline_send_cancel_request_to_the_server(
    core: Core, tmp_path: str
) -> None:
    """Issue 3: ``lsp.cancelOperation`` sends ``$/cancelRequest``; a deadline does the same."""
    session = await start(core, fake(), str(tmp_path))
    await session.wait_state("ready")
    timed = await session.roundtrip("test/hang", {}, timeoutMilliseconds=200)
    assert as_obj(timed["error"])["code"] == "requestTimeout"
    await session.request("test/sleep", {"ms": 600_000}, operationId="c")
    assert (await session.call("lsp.cancelOperation", operationId="c"))["cancelled"] is True
    assert as_obj((await session.completed("c"))["error"])["code"] == "requestCancelled"
    with trio.fail_after(WAIT_S):
        # The notes are written by the cancelled requests' tasks: ask until both arrived.
        while (await session.roundtrip("test/cancelled"))["result"] != ["test/hang", "test/sleep"]:
            pass
    await session.stop()


async def test_what_a_server_writes_just_before_it_exits_is_drained(
    core: Core, tmp_path: str
) -> None:
    """Its reply, a log message and a stderr line written right before the exit are not lost.

    Four servers at once, so that an exit noticed before the last output was read (what
    the drain is for) is likely, not only possible.
    """
    sessions = [await start(core, fake(), str(tmp_path)) for _ in range(4)]

    async def last_words(session: Session) -> None:
        await session.wait_state("ready")
        done = await session.roundtrip("test/lastWords", {"message": "goodbye"})
        assert done.get("result") == "last", done
        log = await session.wait_for(
            lambda e: e["event"] == "log" and e["source"] == "window/logMessage"
        )
        assert log["message"] == "goodbye"
        failed = await session.wait_state("failed")
        error = as_obj(failed["error"])
        assert error["exitCode"] == 5
        assert "last words on stderr" in str(error["stderrTail"])
        snapshot = await session.snapshot()
        assert "last words on stderr" in str(snapshot["stderrTail"])
        assert snapshot["pid"] is None

    async with trio.open_nursery() as nursery:
        for session in sessions:
            nursery.start_soon(last_words, session)
