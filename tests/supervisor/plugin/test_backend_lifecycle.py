"""plugin-contract.md "Plugin backend" and "Structured plugin diagnostics", host side: one
backend per plugin, and the host's facts about a plugin's server starts on its channel
``plugins/<id>/host`` (``languageServer/start`` with one ``host.*`` code per failure)."""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING

import pytest
import trio

from protocol import CoreError
from supervisor import open_core
from tests.supervisor.lsp._support import PY, as_obj, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core

PEERS = os.path.join(os.path.dirname(__file__), "..", "..", "peers")
BACKEND = os.path.join(PEERS, "plugin_backend.py")
FAKE = os.path.join(PEERS, "lsp_fake.py")
PLUGIN = "com.example.tool"
ANSWER = json.dumps({"version": 0, "functions": [{"id": "echo.value"}]})


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


def facts(caplog: pytest.LogCaptureFixture) -> list[JSONObject]:
    return [r.plugin_fact for r in caplog.records if hasattr(r, "plugin_fact")]


def start_payload(cwd: str, argv: list[str], **extra: JSONValue) -> JSONObject:
    return {
        "serverId": "backend",
        "executable": argv[0],
        "arguments": list(argv[1:]),
        "workingDirectory": cwd,
        "rootUri": "file://" + cwd,
        "pluginId": PLUGIN,
        "shutdownTimeoutMilliseconds": 2000,
        **extra,
    }


async def test_at_most_one_backend_per_plugin(core: Core, tmp_path: str) -> None:
    first = await start(core, [PY, BACKEND, ANSWER], str(tmp_path), pluginId=PLUGIN)
    await first.wait_state("ready")
    mark = os.path.join(tmp_path, "second-ran")
    with pytest.raises(CoreError) as refused:
        await core.call(
            "lsp.startServer",
            start_payload(str(tmp_path), [PY, "-c", f"open({mark!r}, 'w').close()"]),
        )
    assert refused.value.code == "busy"
    assert refused.value.details == {"field": "pluginId", "sessionId": first.id}
    # Another plugin, and a session owned by no plugin, are not held back.
    other = await start(core, [PY, BACKEND, ANSWER], str(tmp_path), pluginId="com.example.other")
    await other.wait_state("ready")
    await other.stop()
    # Once the backend stopped, the plugin may start a new one.
    await first.stop()
    again = await start(core, [PY, BACKEND, ANSWER], str(tmp_path), pluginId=PLUGIN)
    await again.wait_state("ready")
    await again.stop()
    assert not await trio.Path(mark).exists()


async def test_concurrent_starts_of_one_plugin_make_one_backend(core: Core, tmp_path: str) -> None:
    outcomes: list[str] = []

    async def one() -> None:
        try:
            reply = as_obj(
                await core.call("lsp.startServer", start_payload(str(tmp_path), [PY, BACKEND]))
            )
            outcomes.append(str(reply["sessionId"]))
        except CoreError as exc:
            outcomes.append(exc.code)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(one)
    assert sorted(outcomes).count("busy") == 2
    (session_id,) = [o for o in outcomes if o != "busy"]
    await core.call("lsp.stopServer", {"sessionId": session_id})


async def test_host_facts_of_a_start_go_to_the_plugins_channel(
    core: Core, tmp_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="supervisor.plugins")
    session = await start(core, [PY, BACKEND, ANSWER], str(tmp_path), pluginId=PLUGIN)
    await session.wait_state("ready")
    event = await session.wait_for(lambda e: e["event"] == "fact")
    (logged,) = facts(caplog)
    assert logged["channel"] == event["channel"] == f"plugins/{PLUGIN}/host"
    assert logged["pluginId"] == PLUGIN
    assert logged["operation"] == "languageServer/start"
    assert logged["kind"] == "operationFinished"
    await session.stop()


@pytest.mark.parametrize(
    ("executable", "code"),
    [
        ("/no/such/backend", "host.executableUnavailable"),
        # Resolved (a file with the execute bit) yet not startable: ENOEXEC.
        ("not-a-program", "host.launchFailed"),
    ],
)
async def test_a_first_start_that_makes_no_process_records_one_failed_fact(
    core: Core,
    tmp_path: str,
    caplog: pytest.LogCaptureFixture,
    executable: str,
    code: str,
) -> None:
    if executable == "not-a-program":
        executable = os.path.join(tmp_path, executable)
        await trio.Path(executable).write_text("neither ELF nor #!\n")
        await trio.Path(executable).chmod(0o755)
    caplog.set_level(logging.INFO, logger="supervisor.plugins")
    with pytest.raises(CoreError) as refused:
        await core.call("lsp.startServer", start_payload(str(tmp_path), [executable]))
    assert refused.value.code == "launch_failed"
    (fact,) = facts(caplog)
    assert fact["code"] == code
    assert fact["kind"] == "operationFailed"
    assert fact["operation"] == "languageServer/start"
    assert fact["channel"] == f"plugins/{PLUGIN}/host"
    assert [r.levelno for r in caplog.records if hasattr(r, "plugin_fact")] == [logging.ERROR]
    # No path or message of the failure in the fact.
    assert executable not in json.dumps(fact)


async def test_a_failed_initialize_is_host_initialize_failed(core: Core, tmp_path: str) -> None:
    session = await start(core, [PY, FAKE, "--initialize-error"], str(tmp_path), pluginId=PLUGIN)
    failed = await session.wait_state("failed")
    assert as_obj(failed["error"])["code"] == "initializeFailed"
    fact = await session.wait_for(lambda e: e["event"] == "fact")
    assert fact["code"] == "host.initializeFailed"
    assert fact["operation"] == "languageServer/start"


SDK_BACKEND = os.path.join(PEERS, "sdk_backend.py")


async def test_a_backends_fact_names_the_call_it_belongs_to(
    core: Core, tmp_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """plugin-contract.md "Structured plugin diagnostics": a fact's operationId names an
    active wire request, which Core resolves to the host's operation; the SDK sends the
    fact before the answer, so it still is active. A fact naming an ended call is kept
    without the correlation."""
    caplog.set_level(logging.INFO, logger="supervisor.plugins")
    session = await start(core, [PY, SDK_BACKEND], str(tmp_path), pluginId="dev.test.sdk")
    await session.wait_state("ready")
    for operation_id in ("mine-1", "mine-2"):
        await session.call(
            "lsp.functionRequest",
            function={"pluginID": "dev.test.sdk", "functionID": "loud.poll"},
            operationId=operation_id,
        )
        done = await session.completed(operation_id)
        assert done["result"] == {"value": "polled"}

        def of_the_call(event: JSONObject, op: str = operation_id) -> bool:
            return event["event"] == "fact" and event.get("operationId") == op

        fact = await session.wait_for(of_the_call)
        assert (fact["operation"], fact["kind"]) == ("loud.poll", "operationFinished")
    logged = [f for f in facts(caplog) if f["operation"] == "loud.poll"]
    assert [f["operationId"] for f in logged] == ["mine-1", "mine-2"]
    await session.stop()


async def test_a_fact_of_an_ended_call_is_not_correlated(core: Core, tmp_path: str) -> None:
    answer = json.dumps({"version": 0, "functions": [{"id": "log.send"}, {"id": "echo.value"}]})
    session = await start(
        core, [PY, BACKEND, answer, json.dumps({"version": 0})], str(tmp_path), pluginId=PLUGIN
    )
    await session.wait_state("ready")
    await session.call(
        "lsp.functionRequest",
        function={"pluginID": PLUGIN, "functionID": "echo.value"},
        operationId="first",
    )
    await session.completed("first")
    # The first call's wire operationID was fn-1; it has ended.
    stale: JSONObject = {
        "kind": "operationFinished",
        "operation": "echo.value",
        "durationMs": 1,
        "operationId": "fn-1",
    }
    await session.call(
        "lsp.functionRequest",
        function={"pluginID": PLUGIN, "functionID": "log.send"},
        params={"facts": [stale]},
        operationId="second",
    )
    await session.completed("second")
    fact = await session.wait_for(
        lambda e: e["event"] == "fact" and e.get("operation") == "echo.value"
    )
    assert "operationId" not in fact
    await session.stop()


async def test_a_fact_before_initialize_succeeded_is_rejected(core: Core, tmp_path: str) -> None:
    fact: JSONObject = {"kind": "operationFinished", "operation": "echo.value", "durationMs": 1}
    argv = [PY, BACKEND, ANSWER, json.dumps({"version": 0}), "0", json.dumps(fact)]
    session = await start(core, argv, str(tmp_path), pluginId=PLUGIN)
    await session.wait_state("ready")
    rejected = await session.wait_for(
        lambda e: e["event"] == "fact" and e["catalogEvent"] == "plugins.diagnostics.rejected"
    )
    assert rejected["category"] == "unnegotiated"
    plugin = as_obj((await session.snapshot())["plugin"])
    assert plugin["factsRejected"] == 1
    assert plugin["loggingNegotiated"] is True
    assert not [
        e for e in session.seen if e["event"] == "fact" and e.get("operation") == "echo.value"
    ]
    await session.stop()
