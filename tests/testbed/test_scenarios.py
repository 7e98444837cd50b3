"""Every testbed scenario, run for real, and the supervisor's correct handling of it (issue 7).

Protocol scenarios are driven through the JSON-RPC endpoint talking to the program directly
(``open_scenario_session``), as a language-server session does; plain ones through
``process.run``, job lanes and process trees. Each test names the rule it shows.
"""

from __future__ import annotations

import json
import os
import signal
from typing import TYPE_CHECKING, Any

import pytest
import trio

from protocol import EOF, NEED_DATA, CoreError, Frame, FrameDecoder, encode_frame
from supervisor import EndpointClosed, open_core
from supervisor.testbed import SCENARIOS, open_scenario, open_scenario_session, program_argv
from supervisor.testbed._programs import PROGRAMS
from tests.testbed._poll import gone, wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from supervisor import Core, ProcessTree

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

INIT: JSONObject = {"processId": None, "capabilities": {}}
BOUND_S = 30  # generous: the machine is shared; never a timing assertion


def argv_of(scenario: str, **options: Any) -> list[JSONValue]:
    """``program_argv`` typed as a JSON array, for command payloads."""
    return list(program_argv(scenario, **options))


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


async def wait_gone(pids: list[int]) -> None:
    await wait_until(lambda: all(gone(pid) for pid in pids))


async def read_line(tree: ProcessTree) -> bytes:
    assert tree.stdout is not None
    data = b""
    with trio.fail_after(BOUND_S):
        while not data.endswith(b"\n"):
            chunk = await tree.stdout.receive_some(1)
            assert chunk, f"stdout ended early: {data!r}"
            data += chunk
    return data


async def finished_job(core: Core, job_id: JSONValue) -> JSONObject:
    with trio.fail_after(BOUND_S):
        while True:
            batch = await core.job_events.wait(1000)
            events = batch["events"]
            assert isinstance(events, list)
            for event in events:
                assert isinstance(event, dict)
                if event["event"] == "job.finished" and event["jobId"] == job_id:
                    return event


def test_registry_and_programs_agree() -> None:
    assert set(SCENARIOS) == set(PROGRAMS)
    for scenario in SCENARIOS.values():
        assert scenario.summary
        assert scenario.handling
        assert set(scenario.protocols) <= {"lsp", "dap", "job", "pty"}
    with pytest.raises(KeyError, match="unknown scenario"):
        program_argv("no-such-scenario")
    with pytest.raises(ValueError, match="does not speak"):
        program_argv("hang", protocol="dap")


# -- protocol scenarios (LSP through the endpoint) ----------------------------------------


async def test_well_behaved_stops_politely() -> None:
    async with open_scenario_session("well-behaved") as session:
        await session.endpoint.request("initialize", INIT)
        assert await session.endpoint.request("echo", {"x": 1}) == {
            "method": "echo",
            "params": {"x": 1},
        }
        assert await session.endpoint.request("shutdown") is None
        await session.endpoint.notify("exit")
        with trio.fail_after(BOUND_S):
            assert await session.tree.wait() == 0


async def test_crash_on_initialize_ends_the_request_once_and_keeps_stderr() -> None:
    async with open_scenario_session("crash-on-initialize") as session:
        with pytest.raises(EndpointClosed):
            await session.endpoint.request("initialize", INIT)
        with trio.fail_after(BOUND_S):
            assert await session.tree.wait() == 70
        await wait_until(lambda: any("testbed crash" in line for line in session.stderr_tail))


async def test_no_shutdown_reply_is_bounded_then_terminated() -> None:
    async with open_scenario_session("no-shutdown-reply") as session:
        await session.endpoint.request("initialize", INIT)
        with pytest.raises(trio.TooSlowError):
            await session.endpoint.request("shutdown", timeout_ms=300)
        await session.endpoint.notify("exit")
        report = await session.tree.aclose(term_grace_ms=5000)
        assert session.tree.pid in report.terminated
        assert report.killed == ()
        assert report.returncode == -signal.SIGTERM


async def test_stdin_stall_blocks_only_its_own_writer() -> None:
    async with (
        open_scenario_session("stdin-stall", write_timeout_ms=500) as stalled,
        open_scenario_session("well-behaved") as healthy,
    ):
        await stalled.endpoint.request("initialize", INIT)
        await healthy.endpoint.request("initialize", INIT)
        big: JSONObject = {"text": "x" * 65536}

        async def write_until_closed() -> None:
            with trio.fail_after(BOUND_S):
                while True:  # fills the pipe; then the write times out
                    await stalled.endpoint.request("didChange", big)

        with pytest.raises(EndpointClosed):
            await write_until_closed()
        assert stalled.endpoint.close_reason == "write timeout"
        # The other session never noticed.
        assert await healthy.endpoint.request("echo", [1]) == {"method": "echo", "params": [1]}


async def test_malformed_header_breaks_the_session() -> None:
    async with open_scenario_session("malformed-header") as session:
        with pytest.raises(EndpointClosed, match="protocol error"):
            await session.endpoint.request("initialize", INIT)
        assert session.endpoint.close_reason is not None
        assert "Content-Length" in session.endpoint.close_reason
        report = await session.tree.aclose(term_grace_ms=2000)
        assert report.returncode == -signal.SIGTERM


async def test_char_content_length_is_never_a_wrong_message() -> None:
    async with open_scenario_session("char-content-length") as session:
        outcome: str
        try:
            result = await session.endpoint.request("initialize", INIT, timeout_ms=1000)
        except (EndpointClosed, trio.TooSlowError) as exc:
            outcome = type(exc).__name__
        else:
            pytest.fail(f"a body cut by a character count was accepted: {result!r}")
        assert outcome in ("EndpointClosed", "TooSlowError")


async def test_answer_after_cancel_is_ignored() -> None:
    async with open_scenario_session("answer-after-cancel") as session:
        await session.endpoint.request("initialize", INIT)
        with pytest.raises(trio.TooSlowError):
            await session.endpoint.request("held", {}, timeout_ms=200)
        await wait_until(lambda: session.endpoint.statistics().ignored_replies >= 1)
        assert session.endpoint.statistics().pending_requests == 0


async def test_double_answer_completes_once() -> None:
    async with open_scenario_session("double-answer") as session:
        await session.endpoint.request("initialize", INIT)
        first = await session.endpoint.request("one", [1])
        second = await session.endpoint.request("two", [2])
        assert first == {"method": "one", "params": [1]}
        assert second == {"method": "two", "params": [2]}  # never the duplicate of "one"
        await wait_until(lambda: session.endpoint.statistics().ignored_replies >= 2)


async def test_unknown_id_is_ignored_and_the_session_goes_on() -> None:
    async with open_scenario_session("unknown-id") as session:
        await session.endpoint.request("initialize", INIT)
        for n in range(3):
            assert await session.endpoint.request("ask", [n]) == {"method": "ask", "params": [n]}
        assert session.endpoint.statistics().ignored_replies == 3
        assert not session.endpoint.closed


async def test_request_storm_answers_each_exactly_once() -> None:
    count = 2000
    async with open_scenario_session(
        "request-storm", count=count, max_inbound_concurrency=16
    ) as session:
        await session.endpoint.request("initialize", INIT)
        with trio.fail_after(BOUND_S * 2):
            # Ask for the status only once every request of the storm has been read: the
            # program writes from two threads under one lock, so a status answer its reader
            # thread writes mid-storm waits behind the storm thread's write, which waits for
            # us to read, while we wait for it to read our answers (about 1 run in 25 hung).
            await wait_until(lambda: session.endpoint.statistics().frames_read >= count + 1)
            while True:
                status = await session.endpoint.request("testbed/stormStatus")
                assert isinstance(status, dict)
                # An answer the program could not match would leave it short for good.
                assert status["duplicates"] == status["unknown"] == 0, status
                if status["answered"] == count:
                    break
                await trio.sleep(0.05)
        assert status == {"answered": count, "duplicates": 0, "unknown": 0}
        stats = session.endpoint.statistics()
        assert stats.running_handlers <= 16
        assert await session.endpoint.request("echo", [7]) == {"method": "echo", "params": [7]}


async def test_oversized_notification_is_refused_from_its_header() -> None:
    async with open_scenario_session(
        "oversized-notification", size_bytes=8 * 1024 * 1024, max_body_bytes=1024 * 1024
    ) as session:
        await session.endpoint.request("initialize", INIT)
        with trio.fail_after(BOUND_S):
            await session.endpoint.wait_closed()
        assert session.endpoint.close_reason is not None
        assert session.endpoint.close_reason.startswith("protocol error")
        with pytest.raises(EndpointClosed):
            await session.endpoint.request("echo", [1])


async def test_exit_with_pending_ends_the_request_as_session_ended() -> None:
    async with open_scenario_session("exit-with-pending") as session:
        await session.endpoint.request("initialize", INIT)
        with pytest.raises(EndpointClosed):
            await session.endpoint.request("work", {})
        with trio.fail_after(BOUND_S):
            assert await session.tree.wait() == 0


# -- DAP: the same programs, DAP messages over the same framing -----------------------------


class DapClient:
    """A minimal DAP client over a tree's pipes (the DAP session service is not built yet)."""

    def __init__(self, tree: ProcessTree) -> None:
        assert tree.stdin is not None
        assert tree.stdout is not None
        self.send_stream = tree.stdin
        self.receive_stream = tree.stdout
        self.decoder = FrameDecoder()
        self.seq = 0

    async def send(self, command: str, arguments: JSONObject | None = None) -> int:
        self.seq += 1
        message = {"seq": self.seq, "type": "request", "command": command}
        message["arguments"] = arguments or {}
        await self.send_stream.send_all(encode_frame(json.dumps(message).encode()))
        return self.seq

    async def receive(self) -> JSONObject | None:
        while True:
            event = self.decoder.next_event()
            if isinstance(event, Frame):
                message = json.loads(event.body)
                assert isinstance(message, dict)
                return message
            if event is EOF:
                return None
            assert event is NEED_DATA
            data = await self.receive_stream.receive_some(65536)
            if data:
                self.decoder.receive_data(data)
            else:
                self.decoder.receive_eof()

    async def response(self, request_seq: int) -> JSONObject | None:
        with trio.fail_after(BOUND_S):
            while (message := await self.receive()) is not None:
                if message.get("type") == "response" and message["request_seq"] == request_seq:
                    return message
        return None


async def test_dap_well_behaved_disconnects() -> None:
    async with open_scenario("well-behaved", protocol="dap") as tree:
        client = DapClient(tree)
        reply = await client.response(await client.send("initialize", {"adapterID": "t"}))
        assert reply is not None
        assert reply["success"] is True
        assert await client.response(await client.send("disconnect")) is not None
        with trio.fail_after(BOUND_S):
            assert await tree.wait() == 0


@pytest.mark.parametrize("scenario", ["crash-on-initialize", "exit-with-pending"])
async def test_dap_session_ends_pending_requests(scenario: str) -> None:
    async with open_scenario(scenario, protocol="dap") as tree:
        client = DapClient(tree)
        if scenario == "exit-with-pending":
            assert await client.response(await client.send("initialize")) is not None
            assert await client.response(await client.send("launch")) is None
        else:
            assert await client.response(await client.send("initialize")) is None
        with trio.fail_after(BOUND_S):
            assert await tree.wait() == (70 if scenario == "crash-on-initialize" else 0)


async def test_dap_no_disconnect_reply_is_terminated() -> None:
    async with open_scenario("no-shutdown-reply", protocol="dap") as tree:
        client = DapClient(tree)
        assert await client.response(await client.send("initialize")) is not None
        await client.send("disconnect")
        with trio.move_on_after(0.3):
            await client.response(client.seq)
            pytest.fail("disconnect was answered")
        report = await tree.aclose(term_grace_ms=5000)
        assert report.returncode == -signal.SIGTERM


# -- plain scenarios (process.run, jobs, trees) ---------------------------------------------


async def test_exit_signal_is_reported_as_a_signal(tmp_path: Path) -> None:
    async with open_core() as core:
        result = await core.call(
            "process.run", {"argv": argv_of("exit-signal", signal=int(signal.SIGTERM))}
        )
        assert isinstance(result, dict)
        assert result["signal"] == signal.SIGTERM
        assert result["exitCode"] is None
        started = await core.call(
            "job.start",
            {"kind": "build", "root": str(tmp_path), "argv": argv_of("exit-signal")},
        )
        assert isinstance(started, dict)
        finished = await finished_job(core, started["jobId"])
        assert finished["status"] == "failed"


async def test_ignore_sigterm_is_killed_after_the_grace() -> None:
    async with open_scenario("ignore-sigterm") as tree:
        assert await read_line(tree) == b"ready\n"
        report = await tree.aclose(term_grace_ms=300)
        assert report.returncode == -signal.SIGKILL  # TERM was not enough
        assert report.unkillable == ()


async def test_grandchild_in_new_session_is_swept(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    async with open_core() as core:
        argv = argv_of("grandchild-setsid", pid_file=pid_file, exit_after_setup=True)
        result = await core.call("process.run", {"argv": argv})
        assert isinstance(result, dict)
        assert result["exitCode"] == 0
        assert result["stdout"] == "ready\n"
    pids = pids_in(pid_file)
    assert len(pids) == 2
    await wait_gone(pids)


async def test_daemon_is_adopted_and_ended(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    async with open_core() as core:
        argv = argv_of("daemon", pid_file=pid_file, exit_after_setup=True)
        started = await core.call(
            "job.start", {"kind": "test", "root": str(tmp_path), "argv": argv}
        )
        assert isinstance(started, dict)
        finished = await finished_job(core, started["jobId"])
        assert finished["status"] == "ok"
    pids = pids_in(pid_file)
    assert len(pids) == 2
    await wait_gone(pids)


async def test_zombie_maker_leaves_no_zombie(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    async with open_scenario("zombie-maker", count=5, pid_file=pid_file) as tree:
        assert await read_line(tree) == b"ready\n"
        zombies = pids_in(pid_file)[1:]
        assert len(zombies) == 5
    await wait_gone([tree.pid, *zombies])  # reaped, not merely dead


async def test_flood_stdout_is_capped_and_read_to_the_end() -> None:
    async with open_core() as core:
        result = await core.call(
            "process.run",
            {
                "argv": argv_of("flood-stdout", size_bytes=32 * 1024 * 1024),
                "maxOutputBytes": 1024 * 1024,
            },
        )
    assert isinstance(result, dict)
    assert result["exitCode"] == 0
    assert result["truncated"] is True
    stdout = result["stdout"]
    assert isinstance(stdout, str)
    assert len(stdout) == 1024 * 1024


async def test_flood_stderr_keeps_job_events_bounded(tmp_path: Path) -> None:
    async with open_core(max_events=64) as core:
        argv = argv_of("flood-stderr", size_bytes=8 * 1024 * 1024)
        started = await core.call(
            "job.start", {"kind": "build", "root": str(tmp_path), "argv": argv}
        )
        assert isinstance(started, dict)
        with trio.fail_after(BOUND_S):
            while any(job["state"] != "finished" for job in core.lanes.list_jobs()):
                assert core.job_events.statistics().queued <= 64
                await trio.sleep(0.05)
        batch = core.job_events.poll()
        events = batch["events"]
        assert isinstance(events, list)
        assert len(events) <= 64
        finished = [e for e in events if isinstance(e, dict) and e["event"] == "job.finished"]
        assert [e["status"] for e in finished] == ["ok"]


async def test_hang_ends_by_deadline_and_by_cancel(tmp_path: Path) -> None:
    async with open_core() as core:
        result = await core.call(
            "process.run", {"argv": argv_of("hang"), "timeoutMilliseconds": 300}
        )
        assert isinstance(result, dict)
        assert result["timedOut"] is True
        with pytest.raises(CoreError) as caught:
            await core.call("process.run", {"argv": argv_of("hang")}, timeout_ms=300)
        assert caught.value.code == "timed_out"

        async def cancel_soon() -> None:
            await wait_until(lambda: core.cancel("hang-op"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_soon)
            with pytest.raises(CoreError) as caught:
                await core.call("process.run", {"argv": argv_of("hang")}, operation_id="hang-op")
        assert caught.value.code == "cancelled"


async def test_terminal_program_ignoring_hangup_is_ended() -> None:
    async with open_scenario("terminal-ignore-hangup") as tree:
        assert await read_line(tree) == b"ready\n"
        assert tree.stdin is not None
        await tree.stdin.send_all(b"hello\n")
        assert await read_line(tree) == b"echo: hello\n"
        await tree.stdin.aclose()  # end of input: it keeps running
        report = await tree.aclose(term_grace_ms=300)
        assert report.returncode == -signal.SIGKILL


def test_run_module_runs_a_program() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "supervisor.testbed.run", "exit-signal", "--signal", "15"],
        capture_output=True,
        timeout=BOUND_S,
        check=False,
    )
    assert done.returncode == -signal.SIGTERM
    assert done.stdout == b"ready\n"
