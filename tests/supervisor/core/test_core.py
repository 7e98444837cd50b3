"""The Core through its envelope API and the CoreThread facade, with real processes."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from supervisor import CoreThread, open_core
from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core

PY = sys.executable


def _data(response: JSONObject) -> dict[str, JSONValue]:
    assert response["ok"] is True, response
    data = response["data"]
    assert isinstance(data, dict)
    return data


def _error(response: JSONObject) -> dict[str, JSONValue]:
    assert response["ok"] is False, response
    error = response["error"]
    assert isinstance(error, dict)
    return error


def _pid_in(path: str) -> int:
    with open(path) as f:
        return int(f.read())


async def test_ping_and_envelope_defaults() -> None:
    async with open_core() as core:
        response = await core.execute('{"id": "r1", "command": "core.ping", "payload": {}}')
        assert response["id"] == "r1"
        data = _data(response)
        assert data["protocolVersion"] == 1
        assert isinstance(data["version"], str)


async def test_invalid_json_and_unknown_command() -> None:
    async with open_core() as core:
        error = _error(await core.execute("{not json"))
        assert error == {
            "code": "invalid_request",
            "message": "message body is not valid JSON",
            "details": {"jsonrpcCode": -32700},
        }
        error = _error(await core.execute("[]"))
        assert error == {"code": "invalid_request", "message": "Invalid JSON request"}
        response = await core.execute({"id": "x", "command": "no.such", "payload": {}})
        assert response["id"] == "x"
        assert _error(response)["code"] == "not_supported"


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"argv": []}, "invalid_request"),
        ({"argv": "echo hi"}, "invalid_request"),
        ({"argv": ["echo", 3]}, "invalid_request"),
        ({"argv": ["echo", "a\0b"]}, "invalid_request"),
        ({"argv": ["echo"], "maxOutputBytes": 0}, "invalid_request"),
        ({"argv": ["echo"], "timeoutMilliseconds": -5}, "invalid_request"),
        ({"argv": ["echo"], "timeoutMilliseconds": True}, "invalid_request"),
        ({"argv": ["echo"], "bogus": 1}, "invalid_request"),
        ({"argv": ["/definitely/not/a/program"]}, "launch_failed"),
        ({"argv": ["no-such-program-on-path-xyz"]}, "launch_failed"),
        ({"argv": ["echo"], "cwd": "/definitely/not/a/dir"}, "launch_failed"),
    ],
)
async def test_process_run_bad_input_starts_nothing(payload: JSONObject, code: str) -> None:
    async with open_core() as core:
        error = _error(await core.execute({"id": 1, "command": "process.run", "payload": payload}))
        assert error["code"] == code
        assert isinstance(error["message"], str)
        assert error["message"]
        # The Core keeps serving after bad input.
        _data(await core.execute({"id": 2, "command": "core.ping", "payload": {}}))


async def _process_run(core: Core, payload: JSONObject) -> JSONObject:
    """``process.run`` with ``payload`` through the envelope (``Core.execute``): its data."""
    return _data(await core.execute({"id": "p", "command": "process.run", "payload": payload}))


async def test_process_run_result_shape(tmp_path: os.PathLike[str]) -> None:
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    async with open_core() as core:
        data = await _process_run(core, {"argv": [PY, "-c", script], "cwd": str(tmp_path)})
    assert data["exitCode"] == 3
    assert data["signal"] is None
    assert data["stdout"] == "out\n"
    assert data["stderr"] == "err\n"
    assert data["timedOut"] is False
    assert data["truncated"] is False
    assert isinstance(data["durationMs"], int)


async def test_process_run_stdin_env_and_cap() -> None:
    script = (
        "import os, sys; data = sys.stdin.read();"
        "sys.stdout.write(data + os.environ['GREETING'] + 'x' * 100000)"
    )
    async with open_core() as core:
        data = await _process_run(
            core,
            {
                "argv": [PY, "-c", script],
                "stdin": "piped:",
                "env": {"GREETING": "hello"},
                "maxOutputBytes": 20,
            },
        )
    assert data["exitCode"] == 0
    assert data["stdout"] == "piped:hello" + "x" * 9
    assert data["truncated"] is True


async def test_process_run_timeout_zero_means_none() -> None:
    async with open_core() as core:
        data = await _process_run(core, {"argv": [PY, "-c", "print(1)"], "timeoutMilliseconds": 0})
    assert data["timedOut"] is False
    assert data["stdout"] == "1\n"


async def test_job_start_timeout_zero_means_none_as_process_run(
    tmp_path: os.PathLike[str], autojump_clock: trio.testing.MockClock
) -> None:
    # 0 was refused by job.start while process.run and lanes files read it as no deadline.
    async with open_core() as core:
        started = await core.call(
            "job.start",
            {
                "kind": "build",
                "root": str(tmp_path),
                "argv": [PY, "-c", "print(1)"],
                "timeoutMilliseconds": 0,
            },
        )
        assert isinstance(started, dict)
        while True:
            batch = await core.call("job.waitEvents", {"timeoutMilliseconds": 60_000})
            assert isinstance(batch, dict)
            events = batch["events"]
            assert isinstance(events, list)
            finished = [e for e in events if isinstance(e, dict) and e["event"] == "job.finished"]
            if finished:
                break
    assert finished[0]["status"] == "ok"
    assert finished[0]["timedOut"] is False


async def test_process_timeout_keeps_output() -> None:
    script = "import time; print('before', flush=True); time.sleep(30)"
    async with open_core() as core:
        data = await _process_run(core, {"argv": [PY, "-c", script], "timeoutMilliseconds": 1500})
    assert data["timedOut"] is True
    assert data["stdout"] == "before\n"


async def test_envelope_deadline_is_timed_out_and_kills_the_tree(
    tmp_path: os.PathLike[str],
) -> None:
    pid_file = os.path.join(tmp_path, "pid")
    script = (
        f"import os, time; open({pid_file!r} + '.tmp', 'w').write(str(os.getpid())); "
        f"os.rename({pid_file!r} + '.tmp', {pid_file!r}); time.sleep(60)"
    )
    async with open_core() as core:
        response = await core.execute(
            {
                "id": "slow",
                "timeoutMilliseconds": 1500,
                "command": "process.run",
                "payload": {"argv": [PY, "-c", script]},
            }
        )
        error = _error(response)
        assert error["code"] == "timed_out"
        assert runs_no_more(_pid_in(pid_file))


async def test_cancel_operation_by_id() -> None:
    async with open_core() as core:
        results: list[JSONObject] = []

        async def run() -> None:
            results.append(
                await core.execute(
                    {
                        "id": "req",
                        "operationId": "op-1",
                        "command": "process.run",
                        "payload": {"argv": [PY, "-c", "import time; time.sleep(60)"]},
                    }
                )
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            assert "op-1" in core.active_operations()
            # A duplicate operation id is refused while the first runs.
            dup = await core.execute(
                {"id": "dup", "operationId": "op-1", "command": "core.ping", "payload": {}}
            )
            assert _error(dup)["code"] == "invalid_request"
            await trio.sleep(0.3)
            assert core.cancel("op-1") is True
        assert core.cancel("op-1") is False
        assert core.cancel("never") is False
        assert results[0]["id"] == "req"
        assert _error(results[0])["code"] == "cancelled"


async def test_operation_id_defaults_to_id() -> None:
    async with open_core() as core, trio.open_nursery() as nursery:
        request: JSONObject = {
            "id": "same",
            "command": "process.run",
            "payload": {"argv": [PY, "-c", "import time; time.sleep(60)"]},
        }
        nursery.start_soon(core.execute, request)
        await trio.testing.wait_all_tasks_blocked()
        assert "same" in core.active_operations()
        assert core.cancel("same") is True


async def test_job_events_through_the_envelope(tmp_path: os.PathLike[str]) -> None:
    async with open_core() as core:
        started = _data(
            await core.execute(
                {
                    "id": 1,
                    "command": "job.start",
                    "payload": {
                        "kind": "build",
                        "root": str(tmp_path),
                        "argv": [PY, "-c", "print('built')"],
                    },
                }
            )
        )
        job_id = started["jobId"]
        events: list[JSONValue] = []
        deadline = trio.current_time() + 30
        while not any(isinstance(e, dict) and e.get("event") == "job.finished" for e in events):
            assert trio.current_time() < deadline
            drained = _data(
                await core.execute(
                    {"id": 2, "command": "job.waitEvents", "payload": {"timeoutMilliseconds": 5000}}
                )
            )
            assert isinstance(drained["events"], list)
            events.extend(drained["events"])
        names = [e["event"] for e in events if isinstance(e, dict)]
        assert names[0] == "job.started"
        assert names[-1] == "job.finished"
        finished = events[-1]
        assert isinstance(finished, dict)
        assert finished["jobId"] == job_id
        assert finished["status"] == "ok"
        assert finished["exitCode"] == 0
        output = "".join(
            str(e["text"]) for e in events if isinstance(e, dict) and e["event"] == "job.output"
        )
        assert "built" in output
        listed = await core.execute({"id": 3, "command": "job.list", "payload": {}})
        assert listed["ok"] is True
        assert listed["data"] == [
            {
                "id": job_id,
                "kind": "build",
                "root": str(tmp_path),
                "state": "finished",
                "status": "ok",
            }
        ]


def test_core_thread_is_thread_safe_and_cleans_up(tmp_path: os.PathLike[str]) -> None:
    pid_file = os.path.join(tmp_path, "pid")
    sleeper = (
        f"import os, time; open({pid_file!r} + '.tmp', 'w').write(str(os.getpid())); "
        f"os.rename({pid_file!r} + '.tmp', {pid_file!r}); time.sleep(60)"
    )
    responses: dict[str, JSONObject] = {}

    with CoreThread() as core:

        def call(name: str, request: JSONObject) -> None:
            responses[name] = json.loads(core.execute_json(json.dumps(request)))

        threads = [
            threading.Thread(
                target=call,
                args=(
                    f"echo{i}",
                    {
                        "id": f"echo{i}",
                        "command": "process.run",
                        "payload": {"argv": [PY, "-c", f"print({i})"]},
                    },
                ),
            )
            for i in range(4)
        ]
        threads.append(
            threading.Thread(
                target=call,
                args=(
                    "long",
                    {
                        "id": "long",
                        "operationId": "long-op",
                        "command": "process.run",
                        "payload": {"argv": [PY, "-c", sleeper]},
                    },
                ),
            )
        )
        for t in threads:
            t.start()
        for t in threads[:4]:
            t.join(30)
        deadline = time.monotonic() + 30
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert core.cancel_operation("no-such-op") == 0
        assert core.cancel_operation("long-op") == 1
        threads[4].join(30)
    for i in range(4):
        assert responses[f"echo{i}"]["ok"] is True
        data = responses[f"echo{i}"]["data"]
        assert isinstance(data, dict)
        assert data["stdout"] == f"{i}\n"
    error = responses["long"]["error"]
    assert isinstance(error, dict)
    assert error["code"] == "cancelled"
    assert runs_no_more(_pid_in(pid_file))


def test_leaving_core_thread_ends_running_work(tmp_path: os.PathLike[str]) -> None:
    pid_file = os.path.join(tmp_path, "pid")
    sleeper = (
        f"import os, time; open({pid_file!r} + '.tmp', 'w').write(str(os.getpid())); "
        f"os.rename({pid_file!r} + '.tmp', {pid_file!r}); time.sleep(60)"
    )
    responses: list[JSONObject] = []
    with CoreThread() as core:
        worker = threading.Thread(
            target=lambda: responses.append(
                json.loads(
                    core.execute_json(
                        json.dumps(
                            {
                                "id": 9,
                                "command": "process.run",
                                "payload": {"argv": [PY, "-c", sleeper]},
                            }
                        )
                    )
                )
            )
        )
        worker.start()
        deadline = time.monotonic() + 30
        while not os.path.exists(pid_file) and time.monotonic() < deadline:
            time.sleep(0.02)
    worker.join(30)
    assert len(responses) == 1
    assert responses[0]["ok"] is False
    assert runs_no_more(_pid_in(pid_file))
    with pytest.raises(RuntimeError):
        core.execute_json('{"id": 1, "command": "core.ping", "payload": {}}')


async def test_closing_ends_operations_and_jobs_at_once(tmp_path: os.PathLike[str]) -> None:
    """Closing costs one TERM grace, not one per kind of work (DESIGN.md invariant 2).

    A process.run and a job both ignore SIGTERM, so each needs the whole grace (2 000 ms)
    before SIGKILL; ended one after the other they would take over 4 s.
    """
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    started = trio.current_time()
    # The nursery encloses the Core: leaving the Core's block closes it while the
    # process.run call is still running (the other way round would wait for the call).
    async with trio.open_nursery() as nursery, open_core() as core:
        run: JSONObject = {
            "id": "run",
            "command": "process.run",
            "payload": {"argv": [PY, "-c", stubborn]},
        }
        nursery.start_soon(core.execute, run)
        _data(
            await core.execute(
                {
                    "id": "job",
                    "command": "job.start",
                    "payload": {
                        "kind": "test",
                        "root": str(tmp_path),
                        "argv": [PY, "-c", stubborn],
                    },
                }
            )
        )
        await trio.sleep(1)  # both programs have installed their SIGTERM handler
        started = trio.current_time()
    elapsed = trio.current_time() - started
    # Generous: one grace (2 s) plus the kill bound, far from the 4 s of two graces.
    assert elapsed < 3.6, f"closing took {elapsed:.2f} s"


async def test_handlers_see_the_operation_id() -> None:
    """A command reads its operation id (the envelope's operationId, else its id)."""
    from contextlib import asynccontextmanager

    from supervisor import DEFAULT_SERVICES, current_operation_id

    class WhoAmI:
        def commands(self) -> dict[str, object]:
            async def who(payload: JSONObject) -> JSONValue:
                return current_operation_id()

            return {"test.whoAmI": who}

        async def aclose(self) -> None:
            pass

    @asynccontextmanager
    async def open_who(context: object) -> AsyncIterator[WhoAmI]:
        yield WhoAmI()

    services = (*DEFAULT_SERVICES, open_who)
    async with open_core(services=services) as core:  # type: ignore[arg-type]
        named = await core.execute({"id": "r", "operationId": "op-7", "command": "test.whoAmI"})
        assert named["data"] == "op-7"
        by_id = await core.execute({"id": "r2", "command": "test.whoAmI"})
        assert by_id["data"] == "r2"
    assert current_operation_id() is None
