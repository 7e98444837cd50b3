"""The order rule (issue 24; docs/architecture.md "The order rule"; DESIGN invariant 19).

Operations on one target take effect in the order they arrived on one connection, one thread
of ``CoreThread`` or one task of ``open_core``, even when the client sends them all without
waiting for a single answer (as editors do). Each test pipelines its operations through all
three paths: ``supervisor serve`` (every frame written at once, then the answers read),
``CoreThread.submit_json`` from one thread, and ``Core.submit`` from one task. The programs
on the other side are real: a program on a PTY that records the lines it reads (the chaos
runner's order probe program), a language server (the scriptable fake), the recording debug
adapter, a plugin backend, job lanes.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest
import trio

from protocol import CoreError
from supervisor import CoreThread, open_core
from supervisor.testbed._order_probe import RECORDER
from tests.supervisor.cli.test_serve import Client, serve_process

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from protocol import JSONObject, JSONValue
    from supervisor import Core

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux PTYs")

PY = sys.executable
PEERS = Path(__file__).resolve().parent.parent / "peers"
LSP_FAKE = str(PEERS / "lsp_fake.py")
DAP_FAKE = str(PEERS / "dap_fake.py")
#: Generous: a shared, loaded machine; a hang guard, never a timing assertion.
WAIT_S = 120
#: Operations per pipeline (issue 24: at least 1 000).
N = 1000

Outcome = tuple[bool, "JSONValue"]  # (ok, data or the error's Core code)


class Driver(Protocol):
    """One of the three paths a client can pipeline through."""

    name: str

    async def call(self, command: str, payload: JSONObject) -> JSONValue:
        """One command, waited for; raises CoreError."""
        ...

    async def pipeline(self, requests: list[tuple[str, JSONObject]]) -> list[Outcome]:
        """Every command sent before any answer is read; the outcomes in request order."""
        ...


class CoreDriver:
    name = "open_core"

    def __init__(self, core: Core) -> None:
        self.core = core

    async def call(self, command: str, payload: JSONObject) -> JSONValue:
        return await self.core.call(command, payload)

    async def pipeline(self, requests: list[tuple[str, JSONObject]]) -> list[Outcome]:
        # One task submits them all, synchronously, without awaiting anything.
        submitted = [self.core.submit(command, payload) for command, payload in requests]
        outcomes: list[Outcome] = []
        with trio.fail_after(WAIT_S):
            for op in submitted:
                try:
                    outcomes.append((True, await op.result()))
                except CoreError as exc:
                    outcomes.append((False, exc.code))
        return outcomes


class StartDriver(CoreDriver):
    """``await nursery.start(core.call, ...)`` per command, from one task."""

    name = "nursery.start"

    async def pipeline(self, requests: list[tuple[str, JSONObject]]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(requests)

        async def one(
            index: int,
            command: str,
            payload: JSONObject,
            *,
            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
        ) -> None:
            try:
                data = await self.core.call(command, payload, task_status=task_status)
            except CoreError as exc:
                outcomes[index] = (False, exc.code)
            else:
                outcomes[index] = (True, data)

        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                for index, (command, payload) in enumerate(requests):
                    await nursery.start(one, index, command, payload)
        assert all(outcome is not None for outcome in outcomes)
        return [outcome for outcome in outcomes if outcome is not None]


class ThreadDriver:
    name = "CoreThread"

    def __init__(self, thread: CoreThread) -> None:
        self.thread = thread
        self._ids = itertools.count(1)

    def _envelope(self, command: str, payload: JSONObject) -> str:
        return json.dumps({"id": next(self._ids), "command": command, "payload": payload})

    async def call(self, command: str, payload: JSONObject) -> JSONValue:
        text = await trio.to_thread.run_sync(
            self.thread.execute_json, self._envelope(command, payload)
        )
        response = json.loads(text)
        if not response["ok"]:
            error = response["error"]
            raise CoreError(error["code"], error["message"], error.get("details"))
        return response["data"]  # type: ignore[no-any-return]

    async def pipeline(self, requests: list[tuple[str, JSONObject]]) -> list[Outcome]:
        envelopes = [self._envelope(command, payload) for command, payload in requests]

        def in_one_thread() -> list[str]:
            futures = [self.thread.submit_json(envelope) for envelope in envelopes]
            return [future.result(timeout=WAIT_S) for future in futures]

        outcomes: list[Outcome] = []
        for text in await trio.to_thread.run_sync(in_one_thread):
            response = json.loads(text)
            outcomes.append(
                (True, response["data"]) if response["ok"] else (False, response["error"]["code"])
            )
        return outcomes


class ServeDriver:
    """``supervisor serve``: one task reads every frame, so pipelines may overlap."""

    name = "serve"

    def __init__(self, client: Client) -> None:
        self.client = client
        self._ids = itertools.count(1000)
        self._replies: dict[str, JSONObject] = {}
        self._arrived = trio.Event()
        #: One writer at a time: overlapping pipelines share the client's stdin.
        self._sending = trio.Lock()

    async def read_all(self) -> None:
        while (message := await self.client.read_message()) is not None:
            if "id" in message and "method" not in message:
                self._replies[json.dumps(message["id"])] = message
                self._arrived.set()
                self._arrived = trio.Event()

    async def reply(self, request_id: JSONValue) -> JSONObject:
        key = json.dumps(request_id)
        with trio.fail_after(WAIT_S):
            while key not in self._replies:
                await self._arrived.wait()
        return self._replies.pop(key)

    async def send(self, request_id: JSONValue, method: str, params: JSONValue) -> None:
        async with self._sending:
            await self.client.send(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            )

    @staticmethod
    def outcome(reply: JSONObject) -> Outcome:
        if "error" in reply:
            error = _obj(reply["error"])
            if error["code"] == -32800 and "data" not in error:
                return (False, "cancelled")  # $/cancelRequest's answer (the endpoint's)
            return (False, _obj(error["data"])["code"])
        return (True, reply["result"])

    async def call(self, command: str, payload: JSONObject) -> JSONValue:
        request_id = next(self._ids)
        await self.send(request_id, command, payload)
        ok, data = self.outcome(await self.reply(request_id))
        if not ok:
            raise CoreError(str(data), f"{command} failed", None)
        return data

    async def pipeline(self, requests: list[tuple[str, JSONObject]]) -> list[Outcome]:
        ids = [next(self._ids) for _ in requests]
        frames = []
        for request_id, (command, payload) in zip(ids, requests, strict=True):
            body = json.dumps(
                {"jsonrpc": "2.0", "id": request_id, "method": command, "params": payload}
            ).encode()
            frames.append(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        # Written in one go: the client never waits for an answer before the next request.
        async with self._sending:
            await self.client.send_raw(b"".join(frames))
        return [self.outcome(await self.reply(request_id)) for request_id in ids]

    async def shut_down(self) -> None:
        request_id = next(self._ids)
        await self.send(request_id, "shutdown", None)
        assert (await self.reply(request_id))["result"] is None
        async with self._sending:
            await self.client.notify("exit")


DRIVERS = ["open_core", "nursery.start", "CoreThread", "serve"]


@asynccontextmanager
async def open_driver(name: str) -> AsyncIterator[Driver]:
    if name in ("open_core", "nursery.start"):
        async with open_core() as core:
            yield CoreDriver(core) if name == "open_core" else StartDriver(core)
    elif name == "CoreThread":
        thread = CoreThread()
        await trio.to_thread.run_sync(thread.__enter__)
        try:
            yield ThreadDriver(thread)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(thread.close)
    else:
        async with serve_process() as client, trio.open_nursery() as nursery:
            await client.initialize()
            driver = ServeDriver(client)
            nursery.start_soon(driver.read_all)
            try:
                yield driver
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(WAIT_S):
                    await driver.shut_down()
                    assert await client.process.wait() == 0


def _obj(value: JSONValue) -> JSONObject:
    assert isinstance(value, dict), value
    return value


async def _wait_file(path: Path, done: Callable[[list[str]], bool]) -> list[str]:
    with trio.fail_after(WAIT_S):
        while True:
            record = trio.Path(path)
            lines = (await record.read_text()).splitlines() if await record.exists() else []
            if done(lines):
                return lines
            await trio.sleep(0.05)


async def _terminal(driver: Driver, record: Path, rows: int = 24, cols: int = 80) -> str:
    created = _obj(
        await driver.call(
            "terminal.create",
            {
                "executable": PY,
                "arguments": ["-c", RECORDER, str(record)],
                "rows": rows,
                "cols": cols,
            },
        )
    )
    terminal_id = created["terminalID"]
    assert isinstance(terminal_id, str)
    return terminal_id


# -- terminals: keystrokes and resizes ---------------------------------------------------


@pytest.mark.parametrize("driver_name", DRIVERS)
async def test_pipelined_keystrokes_reach_the_program_in_order(
    driver_name: str, tmp_path: Path
) -> None:
    """Issue 24: 60 keystrokes written back to back reached the program as 59, 58, ..."""
    record = tmp_path / "record"
    async with open_driver(driver_name) as driver:
        terminal_id = await _terminal(driver, record)
        writes: list[tuple[str, JSONObject]] = [
            ("terminal.write", {"terminalID": terminal_id, "data": f"k{i}\n"}) for i in range(N)
        ]
        outcomes = await driver.pipeline(writes)
        assert all(ok for ok, _ in outcomes), [o for o in outcomes if not o[0]][:3]
        await driver.call("terminal.write", {"terminalID": terminal_id, "data": "quit\n"})
        lines = await _wait_file(record, lambda lines: "quit" in lines)
        assert lines == [f"k{i}" for i in range(N)] + ["quit"]
        await driver.call("terminal.dispose", {"terminalID": terminal_id})


@pytest.mark.parametrize("driver_name", DRIVERS)
async def test_pipelined_resizes_and_keystrokes_keep_their_order(
    driver_name: str, tmp_path: Path
) -> None:
    """Issue 24: after 20 resizes sent in order, the terminal stayed at an early size."""
    record = tmp_path / "record"
    async with open_driver(driver_name) as driver:
        terminal_id = await _terminal(driver, record, rows=10, cols=20)
        requests: list[tuple[str, JSONObject]] = []
        for i in range(1, 201):
            rows, cols = 10 + i, 20 + 2 * i
            requests.append(
                ("terminal.resize", {"terminalID": terminal_id, "rows": rows, "cols": cols})
            )
            requests.append(("terminal.write", {"terminalID": terminal_id, "data": "size\n"}))
        outcomes = await driver.pipeline(requests)
        assert all(ok for ok, _ in outcomes)
        await driver.call("terminal.write", {"terminalID": terminal_id, "data": "size\nquit\n"})
        lines = await _wait_file(record, lambda lines: "quit" in lines)
        sizes = [
            tuple(int(n) for n in line.split()[1:]) for line in lines if line.startswith("size")
        ]
        assert len(sizes) == 201
        # Each `size` line was written after the resize before it took effect, so the program
        # saw at least that size; and no resize overtook another (sizes only grow).
        for i, (rows, cols) in enumerate(sizes[:200], start=1):
            assert rows >= 10 + i
            assert cols >= 20 + 2 * i
        assert sizes == sorted(sizes)
        assert sizes[-1] == (210, 420)
        listed = await driver.call("terminal.list", {})
        assert isinstance(listed, list)
        (info,) = [_obj(t) for t in listed if _obj(t)["terminalID"] == terminal_id]
        assert (info["rows"], info["cols"]) == (210, 420)
        await driver.call("terminal.dispose", {"terminalID": terminal_id})


# -- language servers: document changes, requests and notifications ----------------------


async def _lsp_session(driver: Driver, cwd: Path, *argv: str) -> str:
    started = _obj(
        await driver.call(
            "lsp.startServer",
            {
                "serverId": "order",
                "executable": argv[0],
                "arguments": list(argv[1:]),
                "workingDirectory": str(cwd),
                "rootUri": cwd.as_uri(),
            },
        )
    )
    session_id = started["sessionId"]
    assert isinstance(session_id, str)
    return session_id


async def _lsp_result(driver: Driver, session_id: str, method: str) -> JSONValue:
    """A request's result, waited for through the session's events."""
    reply = _obj(
        await driver.call("lsp.request", {"sessionId": session_id, "method": method, "params": {}})
    )
    operation_id = reply["operationId"]
    with trio.fail_after(WAIT_S):
        while True:
            batch = _obj(
                await driver.call(
                    "lsp.waitEvents", {"sessionId": session_id, "timeoutMilliseconds": 2000}
                )
            )
            events = batch["events"]
            assert isinstance(events, list)
            for event in map(_obj, events):
                if event["event"] == "requestCompleted" and event["operationId"] == operation_id:
                    assert "result" in event, event
                    return event["result"]


@pytest.mark.parametrize("driver_name", DRIVERS)
async def test_pipelined_document_changes_and_requests_reach_the_server_in_order(
    driver_name: str, tmp_path: Path
) -> None:
    """Issue 24: 20 document changes sent in order reached the server as v20 ... v1.

    Document changes (notifications) and requests interleave: the server records both in
    arrival order, so one overtaking the other shows.
    """
    uri = (tmp_path / "doc.py").as_uri()
    async with open_driver(driver_name) as driver:
        session_id = await _lsp_session(driver, tmp_path, PY, LSP_FAKE, "--full-sync")
        # Ready first: before readiness at most 128 requests may wait (the 129th is busy,
        # plugin-contract.md); the start itself is the next test's.
        await _lsp_result(driver, session_id, "test/documents")
        requests: list[tuple[str, JSONObject]] = []
        for i in range(N // 2):
            requests.append(
                (
                    "lsp.syncDocument",
                    {
                        "sessionId": session_id,
                        "uri": uri,
                        "languageId": "python",
                        "text": f"v = {i}\n",
                    },
                )
            )
            requests.append(
                (
                    "lsp.request",
                    {"sessionId": session_id, "method": "test/tick", "params": {"n": i}},
                )
            )
        outcomes = await driver.pipeline(requests)
        assert all(ok for ok, _ in outcomes), [o for o in outcomes if not o[0]][:3]
        received = await _lsp_result(driver, session_id, "test/documents")
        assert isinstance(received, list)
        seen: list[str] = []
        for message in map(_obj, received):
            params = _obj(message["params"])
            if message["method"] == "test/tick":
                seen.append(f"tick {params['n']}")
            elif message["method"] == "textDocument/didOpen":
                seen.append(f"text {_obj(params['textDocument'])['text']!r}")
            elif message["method"] == "textDocument/didChange":
                changes = params["contentChanges"]
                assert isinstance(changes, list)
                (change,) = changes
                seen.append(f"text {_obj(change)['text']!r}")
        expected = [f"text {f'v = {i}' + chr(10)!r}\ttick {i}" for i in range(N // 2)]
        assert seen == "\t".join(expected).split("\t")
        await driver.call("lsp.stopServer", {"sessionId": session_id})
        await driver.call("lsp.destroyServer", {"sessionId": session_id})


@pytest.mark.parametrize("driver_name", DRIVERS)
async def test_changes_sent_with_the_start_wait_for_the_handshake_in_order(
    driver_name: str, tmp_path: Path
) -> None:
    """Requests and document changes pipelined right behind ``lsp.startServer``: the
    requests wait for the server's readiness, and what comes after a waiting request waits
    for it -- nothing overtakes."""
    uri = (tmp_path / "doc.py").as_uri()
    async with open_driver(driver_name) as driver:
        session_id = await _lsp_session(
            driver, tmp_path, PY, LSP_FAKE, "--full-sync", "--ready-after=300"
        )
        requests: list[tuple[str, JSONObject]] = []
        for i in range(60):
            tick: JSONObject = {"sessionId": session_id, "method": "test/tick", "params": {"n": i}}
            requests.append(("lsp.request", tick))
            requests.append(
                (
                    "lsp.syncDocument",
                    {"sessionId": session_id, "uri": uri, "languageId": "python", "text": f"{i}"},
                )
            )
        outcomes = await driver.pipeline(requests)
        assert all(ok for ok, _ in outcomes), [o for o in outcomes if not o[0]][:3]
        received = await _lsp_result(driver, session_id, "test/documents")
        assert isinstance(received, list)
        seen = []
        for message in map(_obj, received):
            params = _obj(message["params"])
            if message["method"] == "test/tick":
                seen.append(f"tick {params['n']}")
            elif message["method"] == "textDocument/didOpen":
                seen.append(f"text {_obj(params['textDocument'])['text']}")
            elif message["method"] == "textDocument/didChange":
                changes = params["contentChanges"]
                assert isinstance(changes, list)
                (change,) = changes
                seen.append(f"text {_obj(change)['text']}")
        assert seen == [line for i in range(60) for line in (f"tick {i}", f"text {i}")]
        await driver.call("lsp.stopServer", {"sessionId": session_id})
        await driver.call("lsp.destroyServer", {"sessionId": session_id})


# -- debug adapters ----------------------------------------------------------------------


@pytest.mark.parametrize("driver_name", DRIVERS)
async def test_pipelined_debug_requests_reach_the_adapter_in_order(
    driver_name: str, tmp_path: Path
) -> None:
    """Breakpoint changes and evaluations pipelined to one adapter arrive in order (the
    recording fake adapter answers with the requests it received)."""
    async with open_driver(driver_name) as driver:
        created = _obj(
            await driver.call(
                "debug.createSession",
                {
                    "adapterId": "order",
                    "rootPath": str(tmp_path),
                    "adapter": {"executable": PY, "arguments": [DAP_FAKE, "record-plain"]},
                },
            )
        )
        sid: JSONObject = {"sessionId": created["sessionId"]}
        await driver.call("debug.attach", {**sid, "configuration": {"name": "order"}})
        requests: list[tuple[str, JSONObject]] = []
        for i in range(N // 2):
            requests.append(
                (
                    "debug.setBreakpoints",
                    {**sid, "path": "/order/a.py", "breakpoints": [{"line": i + 1}]},
                )
            )
            requests.append(("debug.inspect", {**sid, "kind": "evaluate", "expression": f"e{i}"}))
        outcomes = await driver.pipeline(requests)
        assert all(ok for ok, _ in outcomes), [o for o in outcomes if not o[0]][:3]
        answer = _obj(
            _obj(
                await driver.call(
                    "debug.inspect", {**sid, "kind": "evaluate", "expression": "received"}
                )
            )["result"]
        )
        result = answer["result"]
        assert isinstance(result, str)
        received = json.loads(result)
        seen = []
        for request in received:
            if (
                request["command"] == "setBreakpoints"
                and request["arguments"]["source"]["path"] == "/order/a.py"
            ):
                seen.append(f"line {request['arguments']['breakpoints'][0]['line']}")
            elif request["command"] == "evaluate" and request["arguments"]["expression"] != (
                "received"
            ):
                seen.append(str(request["arguments"]["expression"]))
        assert seen == [s for i in range(N // 2) for s in (f"line {i + 1}", f"e{i}")]
        await driver.call("debug.disconnect", sid)


# -- job lanes ---------------------------------------------------------------------------


@pytest.mark.parametrize("driver_name", DRIVERS)
async def test_pipelined_job_starts_queue_in_order(driver_name: str, tmp_path: Path) -> None:
    """Jobs started back to back on one lane are queued, and so run, in arrival order."""
    out = tmp_path / "out"
    async with open_driver(driver_name) as driver:
        script = f"import sys; open({str(out)!r}, 'a').write(sys.argv[1] + '\\n')"
        requests: list[tuple[str, JSONObject]] = [
            (
                "job.start",
                {"kind": "command", "root": str(tmp_path), "argv": [PY, "-c", script, str(i)]},
            )
            for i in range(40)
        ]
        outcomes = await driver.pipeline(requests)
        assert all(ok for ok, _ in outcomes), [o for o in outcomes if not o[0]][:3]
        job_ids = [_obj(data)["jobId"] for _, data in outcomes]
        lines = await _wait_file(out, lambda lines: len(lines) >= 40)
        assert lines == [str(i) for i in range(40)]
        listed = await driver.call("job.list", {})
        assert isinstance(listed, list)
        assert [_obj(j)["id"] for j in listed if _obj(j)["id"] in job_ids] == job_ids


# -- a target that can not take more holds back only itself ------------------------------


async def _pid_of(driver: Driver, terminal_id: str) -> int:
    listed = await driver.call("terminal.list", {})
    assert isinstance(listed, list)
    (info,) = [_obj(t) for t in listed if _obj(t)["terminalID"] == terminal_id]
    pid = info["pid"]
    assert isinstance(pid, int)
    return pid


@pytest.mark.parametrize("driver_name", ["open_core", "serve"])
async def test_a_stuck_terminal_holds_back_only_its_own_later_operations(
    driver_name: str, tmp_path: Path
) -> None:
    """A program that reads nothing (stopped): writes to its terminal block once the PTY is
    full, and the writes behind them wait; another terminal's writes go on meanwhile, and a
    write cancelled while it waits ends ``cancelled`` and never reaches the program."""
    import signal

    stuck_record, free_record = tmp_path / "stuck", tmp_path / "free"
    async with open_driver(driver_name) as driver:
        stuck = await _terminal(driver, stuck_record)
        free = await _terminal(driver, free_record)
        await _wait_file(stuck_record, lambda lines: True)  # echo is off: it reads now
        pid = await _pid_of(driver, stuck)
        os.kill(pid, signal.SIGSTOP)
        try:
            pad = "p" * 99 + "\n"
            write = "terminal.write"
            ops: list[tuple[str, JSONObject]] = [
                (write, {"terminalID": stuck, "data": pad * 600}),  # 60 000 bytes
                (write, {"terminalID": stuck, "data": pad * 600}),
                (write, {"terminalID": stuck, "data": "first\n"}),
            ]
            async with trio.open_nursery() as nursery:
                results: list[Outcome] = []

                async def run_stuck() -> None:
                    results.extend(await driver.pipeline(ops))

                nursery.start_soon(run_stuck)
                # The other terminal is not held back by the stuck one.
                outcomes = await driver.pipeline(
                    [(write, {"terminalID": free, "data": f"f{i}\n"}) for i in range(100)]
                )
                assert all(ok for ok, _ in outcomes)
                lines = await _wait_file(free_record, lambda lines: len(lines) >= 100)
                assert lines == [f"f{i}" for i in range(100)]
                assert results == []  # the stuck terminal's writes still wait
                # A write cancelled while it waits for its turn has no effect.
                cancelled = await _cancel_while_waiting(
                    driver, {"terminalID": stuck, "data": "never\n"}
                )
                assert cancelled == "cancelled"
                os.kill(pid, signal.SIGCONT)
            assert [ok for ok, _ in results] == [True, True, True]
            await driver.call(write, {"terminalID": stuck, "data": "last\nquit\n"})
            lines = await _wait_file(stuck_record, lambda lines: "quit" in lines)
            assert lines == ["p" * 99] * 1200 + ["first", "last", "quit"]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await driver.call("terminal.dispose", {"terminalID": stuck})
        await driver.call("terminal.dispose", {"terminalID": free})


async def _cancel_while_waiting(driver: Driver, payload: JSONObject) -> str:
    """Start a ``terminal.write`` that waits for its turn, cancel it; its error code."""
    if isinstance(driver, CoreDriver):
        op = driver.core.submit("terminal.write", payload, operation_id="waiting-write")
        await trio.sleep(0.2)
        assert not op.done
        assert driver.core.cancel("waiting-write")
        try:
            await op.result()
        except CoreError as exc:
            return exc.code
        return "ok"
    assert isinstance(driver, ServeDriver)
    await driver.send("waiting-write", "terminal.write", payload)
    await trio.sleep(0.2)
    async with driver._sending:
        await driver.client.notify("$/cancelRequest", {"id": "waiting-write"})
    ok, code = driver.outcome(await driver.reply("waiting-write"))
    assert not ok
    return str(code)


@pytest.mark.parametrize("driver_name", ["open_core", "serve"])
async def test_a_terminal_stuck_on_a_write_can_still_be_closed(
    driver_name: str, tmp_path: Path
) -> None:
    """An ending command waits for a stuck effect ahead of it only a bounded time
    (2 s): the close ends the program, and the writes still in line end with it."""
    import signal

    record = tmp_path / "record"
    async with open_driver(driver_name) as driver:
        stuck = await _terminal(driver, record)
        await _wait_file(record, lambda lines: True)
        os.kill(await _pid_of(driver, stuck), signal.SIGSTOP)
        pad = "p" * 99 + "\n"
        outcomes = await driver.pipeline(
            [
                ("terminal.write", {"terminalID": stuck, "data": pad * 600}),
                ("terminal.write", {"terminalID": stuck, "data": pad * 600}),
                ("terminal.write", {"terminalID": stuck, "data": "behind\n"}),
                ("terminal.close", {"terminalID": stuck}),
                ("terminal.write", {"terminalID": stuck, "data": "after\n"}),
            ]
        )
        # The close took effect; the blocked write (how much of the pad fits the PTY
        # depends on the kernel) and those behind it ended because the program ended; the
        # write after the close finds it closed.
        assert [ok for ok, _ in outcomes][2:] == [False, True, False]
        assert not all(ok for ok, _ in outcomes[:2])
        assert {code for ok, code in outcomes if not ok} == {"plugin.host.preconditionFailed"}
        await driver.call("terminal.dispose", {"terminalID": stuck})


# -- plugin backends ---------------------------------------------------------------------


async def test_pipelined_calls_and_notifications_reach_a_plugin_backend_in_order(
    tmp_path: Path,
) -> None:
    """Function calls and host notifications to one backend, submitted from one task
    without waiting: the backend receives them in that order (its session's outbox)."""
    from tests.supervisor.plugin.test_functions import PLUGIN, backend, call

    async with open_core() as core:
        session = await backend(core, str(tmp_path))
        await session.wait_state("ready")
        requests: list[tuple[str, JSONObject]] = []
        for i in range(200):
            requests.append(
                (
                    "lsp.functionRequest",
                    {
                        "sessionId": session.id,
                        "function": {"pluginID": PLUGIN, "functionID": "echo.value"},
                        "params": {"n": i, "value": i},
                    },
                )
            )
            note: JSONObject = {
                "sessionId": session.id,
                "method": "lithe/host/commands/didRun",
                "params": {"commandID": f"c{i}"},
            }
            requests.append(("lsp.hostNotify", note))
        outcomes = await CoreDriver(core).pipeline(requests)
        assert all(ok for ok, _ in outcomes), [o for o in outcomes if not o[0]][:3]
        seen = _obj(_obj((await call(session, "seen.get"))["result"])["value"])
        arrivals = seen["arrivals"]
        assert isinstance(arrivals, list)
        ours = [
            a
            for a in arrivals
            if isinstance(a, str) and a.startswith(("invoke echo.value", "lithe/host/commands"))
        ]
        assert ours == [
            line
            for i in range(200)
            for line in (f"invoke echo.value {i}", f"lithe/host/commands/didRun c{i}")
        ]
        await session.stop()


# -- a real language server --------------------------------------------------------------


@pytest.mark.parametrize("driver_name", ["serve", "CoreThread"])
async def test_pylsp_ends_with_the_editors_last_version(driver_name: str, tmp_path: Path) -> None:
    """Issue 24 with a real server: 200 full-text changes pipelined to pylsp, each defining
    one function; afterwards pylsp's document symbols are those of the last version (a
    change that overtook a later one would leave pylsp with an older text)."""
    pylsp = os.path.join(os.path.dirname(PY), "pylsp")
    if not await trio.Path(pylsp).exists():
        pytest.skip("pylsp is not installed (the test extra brings it)")
    path = tmp_path / "doc.py"
    uri = path.as_uri()
    async with open_driver(driver_name) as driver:
        session_id = await _lsp_session(driver, tmp_path, pylsp)
        requests: list[tuple[str, JSONObject]] = [
            (
                "lsp.syncDocument",
                {
                    "sessionId": session_id,
                    "uri": uri,
                    "languageId": "python",
                    "text": f"def version_{i}():\n    return {i}\n",
                },
            )
            for i in range(200)
        ]
        outcomes = await driver.pipeline(requests)
        assert all(ok for ok, _ in outcomes), [o for o in outcomes if not o[0]][:3]
        assert [_obj(data)["documentVersion"] for _, data in outcomes] == list(range(1, 201))
        reply = _obj(
            await driver.call(
                "lsp.request",
                {
                    "sessionId": session_id,
                    "method": "textDocument/documentSymbol",
                    "params": {"textDocument": {"uri": uri}},
                },
            )
        )
        operation_id = reply["operationId"]
        symbols: JSONValue = None
        with trio.fail_after(WAIT_S):
            while symbols is None:
                batch = _obj(
                    await driver.call(
                        "lsp.waitEvents", {"sessionId": session_id, "timeoutMilliseconds": 2000}
                    )
                )
                events = batch["events"]
                assert isinstance(events, list)
                for event in map(_obj, events):
                    if event["event"] == "requestCompleted" and event["operationId"] == (
                        operation_id
                    ):
                        symbols = event["result"]
        assert isinstance(symbols, list)
        assert [_obj(symbol)["name"] for symbol in symbols] == ["version_199"]
        await driver.call("lsp.stopServer", {"sessionId": session_id})
