"""The LSP scenario programs as language servers through ``lsp.*`` (issue 7).

``test_scenarios.py`` drives the protocol scenarios through a bare JSON-RPC endpoint; here the
same programs run as real language-server sessions of the Core (``lsp.startServer``), and each
test checks the handling its scenario documents (``supervisor/testbed/_scenarios.py``) as the
session shows it: its states and failure, the stop timeline, and every request ending in
exactly one ``requestCompleted`` with the right code. Every program writes its pids to a pid
file and every test ends with all of them gone (and the suite's leak guard on top).
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor import open_core
from supervisor.testbed import SCENARIOS, program_argv
from supervisor.testbed._backend import CHAOS_PLUGIN_ID, backend_argv
from tests.testbed._poll import gone, wait_until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor import Core

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

BOUND_S = 30  # generous: the machine is shared; never a timing assertion


def obj(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict), value
    return value


class Server:
    """One ``lsp.*`` session running a scenario program, with every event it queued."""

    def __init__(self, core: Core, session_id: str, pid_file: Path) -> None:
        self.core = core
        self.id = session_id
        self.pid_file = pid_file
        self.events: list[JSONObject] = []

    async def call(self, command: str, **payload: JSONValue) -> JSONObject:
        return obj(await self.core.call(command, {"sessionId": self.id, **payload}))

    async def request(self, method: str, **payload: JSONValue) -> str:
        """``lsp.request``; returns its operation id."""
        reply = await self.call("lsp.request", method=method, params={"n": 1}, **payload)
        operation_id = reply["operationId"]
        assert isinstance(operation_id, str)
        return operation_id

    async def wait_for(self, predicate: Callable[[JSONObject], bool]) -> JSONObject:
        """The first event (seen or to come) for which ``predicate`` holds."""
        with trio.fail_after(BOUND_S):
            seen = 0
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                batch = await self.call("lsp.waitEvents", timeoutMilliseconds=1000)
                events = batch["events"]
                assert isinstance(events, list)
                assert batch["gap"] is False
                self.events.extend(obj(e) for e in events)

    async def wait_state(self, state: str) -> JSONObject:
        return await self.wait_for(lambda e: e["event"] == "stateChanged" and e["state"] == state)

    async def completion(self, operation_id: str) -> JSONObject:
        """The request's ``requestCompleted`` (waiting for it)."""
        return await self.wait_for(
            lambda e: e["event"] == "requestCompleted" and e["operationId"] == operation_id
        )

    async def drain(self) -> None:
        batch = await self.call("lsp.pollEvents")
        events = batch["events"]
        assert isinstance(events, list)
        self.events.extend(obj(e) for e in events)

    def completions(self, operation_id: str) -> list[JSONObject]:
        return [
            e
            for e in self.events
            if e["event"] == "requestCompleted" and e["operationId"] == operation_id
        ]

    async def stop(self) -> JSONObject:
        """``lsp.stopServer``, then the remaining events; checks the pids are all gone."""
        with trio.fail_after(BOUND_S):
            result = await self.call("lsp.stopServer")
        await self.drain()
        await self.wait_gone()
        return result

    async def wait_gone(self) -> None:
        pids = [int(line) for line in self.pid_file.read_text().split()]
        assert pids
        await wait_until(lambda: all(gone(pid) for pid in pids))


def steps(stop_result: JSONObject) -> list[Any]:
    timeline = stop_result["timeline"]
    assert isinstance(timeline, list)
    return [obj(entry)["step"] for entry in timeline]


def error_code(completion: JSONObject) -> JSONValue:
    return obj(completion["error"])["code"]


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


@pytest.fixture
def start(core: Core, tmp_path: Path) -> Callable[..., Any]:
    async def start(scenario: str, *, count: int | None = None, **payload: JSONValue) -> Server:
        pid_file = tmp_path / f"{scenario}.pids"
        argv = program_argv(
            scenario,
            # A program that is also a plain one speaks LSP when asked to.
            protocol="lsp" if {"job", "lsp"} <= set(SCENARIOS[scenario].protocols) else None,
            pid_file=pid_file,
            count=count,
        )
        arguments: list[JSONValue] = list(argv[1:])
        started = await core.call(
            "lsp.startServer",
            {
                "serverId": scenario,
                "executable": argv[0],
                "arguments": arguments,
                "workingDirectory": str(tmp_path),
                "rootUri": tmp_path.as_uri(),
                **payload,
            },
        )
        session_id = obj(started)["sessionId"]
        assert isinstance(session_id, str)
        return Server(core, session_id, pid_file)

    return start


def test_every_lsp_scenario_has_a_test_here() -> None:
    tested = {
        name.removeprefix("test_").split("__")[0].replace("_", "-")
        for name in globals()
        if name.startswith("test_") and "__" in name
    }
    lsp = {name for name, s in SCENARIOS.items() if "lsp" in s.protocols}
    assert lsp - {"stdin-stall"} <= tested, lsp - tested  # stdin-stall: test_scenarios.py


async def test_well_behaved__starts_answers_and_stops_politely(start: Any) -> None:
    server = await start("well-behaved")
    await server.wait_state("ready")
    op = await server.request("work")
    assert (await server.completion(op))["result"] == {"method": "work", "params": {"n": 1}}
    result = await server.stop()
    assert result["state"] == "stopped"
    assert steps(result) == [
        "stopRequested",
        "shutdownSent",
        "shutdownAnswered",
        "exitSent",
        "exited",
    ]
    assert obj(result["lastExit"])["exitCode"] == 0


async def test_crash_on_initialize__fails_once_with_status_and_stderr(start: Any) -> None:
    server = await start("crash-on-initialize")
    op = await server.request("work")  # waits for readiness, which never comes
    failed = await server.wait_state("failed")
    error = obj(failed["error"])
    assert (error["code"], error["stage"], error["exitCode"]) == ("exitedEarly", "initialize", 70)
    assert any("testbed crash" in str(line) for line in error["stderrTail"])  # type: ignore[union-attr]
    assert error_code(await server.completion(op)) == "languageServerUnavailable"
    await server.wait_gone()
    await server.drain()
    assert len(server.completions(op)) == 1
    assert obj((await server.call("lsp.snapshot"))["lastExit"])["reason"] == "failed"


async def test_no_shutdown_reply__stop_is_bounded_then_terminated(start: Any) -> None:
    server = await start("no-shutdown-reply", shutdownTimeoutMilliseconds=300)
    await server.wait_state("ready")
    result = await server.stop()
    assert result["state"] == "stopped"
    assert steps(result)[:4] == ["stopRequested", "shutdownSent", "shutdownTimedOut", "exitSent"]
    assert "terminated" in steps(result)
    assert "killed" not in steps(result)  # it ignores exit, not SIGTERM
    assert obj(result["lastExit"])["signal"] == signal.SIGTERM
    assert obj(result["lastExit"])["signalName"] == "SIGTERM"


async def test_ignore_sigterm__stop_ends_with_sigkill_after_the_grace(start: Any) -> None:
    server = await start("ignore-sigterm")
    await server.wait_state("ready")
    result = await server.stop()
    # Polite first (answered, but it never exits), then TERM (ignored), then KILL.
    assert steps(result) == [
        "stopRequested",
        "shutdownSent",
        "shutdownAnswered",
        "exitSent",
        "terminated",
        "killed",
        "exited",
    ]
    assert obj(result["lastExit"])["signal"] == signal.SIGKILL
    assert obj(result["lastExit"])["signalName"] == "SIGKILL"
    assert result["state"] == "stopped"  # an end during a stop is not a crash


async def test_zombie_maker__its_zombies_are_reaped_when_it_ends(start: Any) -> None:
    server = await start("zombie-maker", count=5)
    await server.wait_state("ready")
    pids = [int(line) for line in server.pid_file.read_text().split()]
    assert len(pids) == 6  # the server and its five children, zombies while it runs
    result = await server.stop()  # wait_gone: every zombie was collected
    assert steps(result)[-1] == "exited"
    assert obj(result["lastExit"])["exitCode"] == 0


async def test_main_thread_exits__its_helpers_end_with_the_session(start: Any) -> None:
    server = await start("main-thread-exits")
    await server.wait_state("ready")
    pids = [int(line) for line in server.pid_file.read_text().split()]
    assert len(pids) == 4  # the server and three helpers
    # Each helper runs on in a second thread although its state reads Z.
    assert all(not gone(pid) for pid in pids)
    result = await server.stop()  # wait_gone: the helpers, which ignore SIGTERM, were killed
    assert obj(result["lastExit"])["exitCode"] == 0  # the server itself exits politely


async def test_requests_before_initialize__the_early_request_is_answered(start: Any) -> None:
    server = await start("requests-before-initialize")
    await server.wait_state("ready")
    op = await server.request("work")
    assert (await server.completion(op))["result"] == {"method": "work", "params": {"n": 1}}
    result = await server.stop()
    assert obj(result["lastExit"])["exitCode"] == 0


async def test_answer_after_cancel__late_answers_are_ignored(start: Any) -> None:
    server = await start("answer-after-cancel")
    await server.wait_state("ready")
    cancelled = await server.request("held")
    timed_out = await server.request("held", timeoutMilliseconds=200)
    assert (await server.call("lsp.cancelOperation", operationId=cancelled))["cancelled"] is True
    assert error_code(await server.completion(cancelled)) == "requestCancelled"
    assert error_code(await server.completion(timed_out)) == "requestTimeout"
    # The program answers both once their $/cancelRequest arrives; the session goes on and
    # still stops politely.
    result = await server.stop()
    assert "shutdownAnswered" in steps(result)
    assert obj(result["lastExit"])["exitCode"] == 0
    assert len(server.completions(cancelled)) == len(server.completions(timed_out)) == 1


async def test_double_answer__the_first_answer_completes_the_request(start: Any) -> None:
    server = await start("double-answer")
    first = await server.request("work")
    second = await server.request("work")
    for op in (first, second):
        assert (await server.completion(op))["result"] == {"method": "work", "params": {"n": 1}}
    result = await server.stop()
    assert "shutdownAnswered" in steps(result)
    assert len(server.completions(first)) == len(server.completions(second)) == 1


async def test_unknown_id__the_stray_answer_is_ignored(start: Any) -> None:
    server = await start("unknown-id")
    ops = [await server.request("work") for _ in range(3)]
    for op in ops:
        assert "result" in await server.completion(op)
    snapshot = await server.call("lsp.snapshot")
    assert snapshot["state"] == "ready"
    result = await server.stop()
    assert "shutdownAnswered" in steps(result)
    assert all(len(server.completions(op)) == 1 for op in ops)


async def test_request_storm__each_server_request_answered_once(start: Any) -> None:
    count = 300
    server = await start("request-storm", count=count)
    await server.wait_state("ready")
    with trio.fail_after(BOUND_S):
        while True:
            # The program counts the answers it got; ask until all of them are in.
            op = await server.request("testbed/stormStatus")
            counts = obj((await server.completion(op))["result"])
            # An answer the program could not match would leave it short for good.
            assert counts["duplicates"] == counts["unknown"] == 0, counts
            if counts["answered"] == count:
                break
            await trio.sleep(0.05)
    assert counts == {"answered": count, "duplicates": 0, "unknown": 0}
    result = await server.stop()
    assert "shutdownAnswered" in steps(result)


async def test_oversized_notification__refused_from_its_header(start: Any) -> None:
    # The default size is 64 MiB + 1 KiB: over the session's 64 MiB frame-body limit.
    server = await start("oversized-notification")
    op = await server.request("work")
    failed = await server.wait_state("failed")
    error = obj(failed["error"])
    assert error["code"] == "protocolError"
    assert "body limit" in str(error["message"])
    assert error_code(await server.completion(op)) == "languageServerUnavailable"
    await server.wait_gone()
    await server.drain()
    assert len(server.completions(op)) == 1


async def test_hang__initialize_times_out_and_the_tree_ends(start: Any) -> None:
    server = await start("hang", initializeTimeoutMilliseconds=300)
    op = await server.request("work")
    failed = await server.wait_state("failed")
    assert obj(failed["error"])["code"] == "initializeTimeout"
    assert error_code(await server.completion(op)) == "languageServerUnavailable"
    await server.wait_gone()


async def test_exit_with_pending__the_request_ends_once_and_it_is_a_crash(start: Any) -> None:
    server = await start("exit-with-pending")
    await server.wait_state("ready")
    op = await server.request("work")
    completion = await server.completion(op)
    assert error_code(completion) == "languageServerUnavailable"
    failed = await server.wait_state("failed")
    error = obj(failed["error"])
    assert (error["code"], error["exitCode"]) == ("crashed", 0)  # an exit is not a clean stop
    await server.wait_gone()
    await server.drain()
    assert len(server.completions(op)) == 1


async def test_malformed_header__the_broken_stream_fails_the_session(start: Any) -> None:
    server = await start("malformed-header")
    op = await server.request("work")
    failed = await server.wait_state("failed")
    error = obj(failed["error"])
    assert error["code"] == "protocolError"
    assert "Content-Length" in str(error["message"])
    assert error_code(await server.completion(op)) == "languageServerUnavailable"
    await server.wait_gone()
    await server.drain()
    assert len(server.completions(op)) == 1


async def test_char_content_length__never_a_wrong_message(start: Any) -> None:
    # Its answer to initialize is cut short (counted in characters): a parse error, then
    # stray text. So initialize never gets an answer, and nothing from the cut frame shows.
    server = await start("char-content-length", initializeTimeoutMilliseconds=500)
    op = await server.request("work")
    failed = await server.wait_state("failed")
    assert obj(failed["error"])["code"] == "initializeTimeout"
    assert error_code(await server.completion(op)) == "languageServerUnavailable"
    assert not [e for e in server.events if e["event"] in ("featuresChanged", "serverInfoChanged")]
    await server.wait_gone()


async def test_a_stop_right_after_the_handshake_events_wins(core: Core, tmp_path: Path) -> None:
    """Regression (found by the chaos runner, issue 7): a stop that lands while the handshake
    ends -- after the plugin backend's ``functionsChanged``, before ``ready`` -- used to crash
    the session task with "no transition from stopping on HANDSHAKE_DONE"."""
    for attempt in range(8):
        pid_file = tmp_path / f"backend-{attempt}.pids"
        argv = backend_argv(pid_file=pid_file)
        arguments: list[JSONValue] = list(argv[1:])
        started = obj(
            await core.call(
                "lsp.startServer",
                {
                    "serverId": "chaos-backend",
                    "executable": argv[0],
                    "arguments": arguments,
                    "workingDirectory": str(tmp_path),
                    "rootUri": tmp_path.as_uri(),
                    "pluginId": CHAOS_PLUGIN_ID,
                },
            )
        )
        session_id = started["sessionId"]
        assert isinstance(session_id, str)
        server = Server(core, session_id, pid_file)
        await server.wait_for(lambda e: e["event"] == "functionsChanged")
        result = await server.stop()
        assert result["state"] == "stopped"
        await core.call("lsp.destroyServer", {"sessionId": session_id})
