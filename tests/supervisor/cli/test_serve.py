"""``supervisor serve`` driven by a plain framed client over a real subprocess's stdio.

The client below frames by hand (it does not use our protocol package), so these tests also
prove that stdout carries nothing but well-formed frames: any stray byte breaks its parser.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import CoreThread, open_core
from supervisor._cli._serve import SERVE_MAX_REQUESTS_IN_FLIGHT
from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue

PY = sys.executable
REPLY_TIMEOUT_S = 30


def _read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return int(text) if text else None


async def _wait_for_pid(path: str) -> int:
    """Wait until a child wrote its pid to ``path`` (a file: no event to wait on)."""
    with trio.fail_after(REPLY_TIMEOUT_S):
        while True:
            pid = _read_pid(path)
            if pid is not None:
                return pid
            await trio.sleep(0.02)


def _field(message: JSONObject, *path: str) -> JSONValue:
    """``message[path[0]][path[1]]...``, failing clearly when a level is not an object."""
    value: JSONValue = message
    for key in path:
        assert isinstance(value, dict), f"{key!r} of a non-object in {message}"
        value = value[key]
    return value


class Client:
    """A minimal LSP-framed JSON-RPC client: strict framing, no leniency."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._buffer = bytearray()
        self.notifications: list[JSONObject] = []
        self._replies: dict[str, JSONObject] = {}
        self._next_id = 0

    async def send_raw(self, data: bytes) -> None:
        await self._stdin.send_all(data)

    async def send(self, message: JSONObject) -> None:
        body = json.dumps(message).encode()
        await self.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def close_stdin(self) -> None:
        await self._stdin.aclose()

    async def read_message(self) -> JSONObject | None:
        """The next message, or None at end of output; fails on anything but a frame."""
        while b"\r\n\r\n" not in self._buffer:
            chunk = await self._stdout.receive_some(65536)
            if not chunk:
                assert not self._buffer, f"stdout ended inside a header: {bytes(self._buffer)!r}"
                return None
            self._buffer += chunk
        head, _, rest = bytes(self._buffer).partition(b"\r\n\r\n")
        assert head.startswith(b"Content-Length: "), f"not a frame header: {head!r}"
        length = int(head.split(b":", 1)[1])
        while len(rest) < length:
            chunk = await self._stdout.receive_some(65536)
            assert chunk, "stdout ended inside a body"
            rest += chunk
        self._buffer = bytearray(rest[length:])
        message = json.loads(rest[:length])
        assert isinstance(message, dict)
        assert message.get("jsonrpc") == "2.0"
        return message

    async def reply_to(self, request_id: JSONValue) -> JSONObject:
        key = json.dumps(request_id)
        with trio.fail_after(REPLY_TIMEOUT_S):
            while key not in self._replies:
                message = await self.read_message()
                assert message is not None, "server closed before replying"
                if "id" in message and "method" not in message:
                    self._replies[json.dumps(message["id"])] = message
                else:
                    self.notifications.append(message)
        return self._replies.pop(key)

    async def request(
        self, method: str, params: JSONValue | None = None, *, request_id: JSONValue = None
    ) -> JSONObject:
        if request_id is None:
            self._next_id += 1
            request_id = self._next_id
        message: JSONObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.reply_to(request_id)

    async def notify(self, method: str, params: JSONValue | None = None) -> None:
        message: JSONObject = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def wait_notification(self, method: str, **match: JSONValue) -> JSONObject:
        with trio.fail_after(REPLY_TIMEOUT_S):
            while True:
                for note in self.notifications:
                    params = note.get("params")
                    if (
                        note["method"] == method
                        and isinstance(params, dict)
                        and all(params.get(k) == v for k, v in match.items())
                    ):
                        self.notifications.remove(note)
                        return note
                message = await self.read_message()
                assert message is not None, "server closed"
                if "method" in message and "id" not in message:
                    self.notifications.append(message)
                else:
                    self._replies[json.dumps(message.get("id"))] = message

    async def initialize(self, **options: JSONValue) -> JSONObject:
        params: JSONObject = {"processId": os.getpid(), "capabilities": {}}
        if options:
            params["initializationOptions"] = dict(options)
        reply = await self.request("initialize", params)
        result = reply["result"]
        assert isinstance(result, dict)
        await self.notify("initialized", {})
        return result

    async def shut_down(self) -> None:
        """The orderly end: ``shutdown`` (answered with null), then ``exit``; the server
        exits 0."""
        assert (await self.request("shutdown"))["result"] is None
        await self.notify("exit")
        assert await self.wait_exit() == 0

    async def wait_exit(self) -> int:
        with trio.fail_after(REPLY_TIMEOUT_S):
            while await self.read_message() is not None:
                pass
            return await self.process.wait()

    async def read_to_exit(self) -> tuple[list[JSONObject], int]:
        """Every message left (replies kept unread included) until stdout ends; exit status."""
        messages = list(self._replies.values()) + self.notifications
        self._replies.clear()
        self.notifications = []
        with trio.fail_after(REPLY_TIMEOUT_S):
            while (message := await self.read_message()) is not None:
                messages.append(message)
            return messages, await self.process.wait()


def _frame(message: JSONObject) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _request(request_id: int, method: str, params: JSONValue = None) -> bytes:
    message: JSONObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return _frame(message)


_EXIT = _frame({"jsonrpc": "2.0", "method": "exit"})
_INITIALIZE = _request(1, "initialize", {"capabilities": {}})


def _replies(messages: list[JSONObject]) -> dict[str, list[JSONObject]]:
    """The replies among ``messages``, by JSON-encoded id (a list: each must be alone)."""
    replies: dict[str, list[JSONObject]] = {}
    for message in messages:
        if "method" not in message:
            replies.setdefault(json.dumps(message.get("id")), []).append(message)
    return replies


def _one_reply(replies: dict[str, list[JSONObject]], request_id: JSONValue) -> JSONObject:
    answers = replies.get(json.dumps(request_id), [])
    assert len(answers) == 1, f"request {request_id!r} answered {len(answers)} times: {answers}"
    return answers[0]


def _assert_cancelled_or_result(reply: JSONObject) -> None:
    """A request the end of the session cut short: its result, or -32800 with ``cancelled``."""
    if "result" in reply:
        return
    assert _field(reply, "error", "code") == -32800, reply
    assert _field(reply, "error", "data", "code") == "cancelled", reply


def _notifications(messages: list[JSONObject], method: str) -> list[JSONObject]:
    return [m for m in messages if m.get("method") == method and "id" not in m]


def _job_finished(messages: list[JSONObject], job_id: object) -> list[JSONObject]:
    """The ``job.finished`` notifications of one job."""
    return [
        n
        for n in _notifications(messages, "job.finished")
        if _field(n, "params", "jobId") == job_id
    ]


@asynccontextmanager
async def serve_process(grace_s: float = 10) -> AsyncIterator[Client]:
    """``supervisor serve`` as a child, with a client on its stdio.

    On the way out a server still running gets its stdin closed and ``grace_s`` seconds to
    end on its own, then is killed; either way it is reaped.
    """
    process = await trio.lowlevel.open_process(
        [PY, "-m", "supervisor", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        yield Client(process)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                with trio.move_on_after(grace_s):
                    if process.stdin is not None:
                        await process.stdin.aclose()
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    async with serve_process() as serve_client:
        yield serve_client


async def test_handshake_and_requests_before_initialize(client: Client) -> None:
    early = await client.request("core.ping", {})
    assert _field(early, "error", "code") == -32002
    # The message says what to do, for a client that pipelined it behind initialize.
    assert _field(early, "error", "message") == (
        "core.ping: the server is not initialized yet: send initialize and wait for its"
        " response before sending other requests"
    )
    await client.notify("job.cancel", {"jobId": "x"})  # dropped before initialize
    result = await client.initialize()
    assert result["protocol"] == 1
    server_info = result["serverInfo"]
    assert isinstance(server_info, dict)
    assert server_info["name"] == "trio-process-supervisor"
    assert isinstance(server_info["version"], str)
    commands = result["commands"]
    assert isinstance(commands, list)
    assert {"core.ping", "process.run", "job.start", "job.cancel", "job.list"} <= set(commands)
    again = await client.request("initialize", {"capabilities": {}})
    assert _field(again, "error", "code") == -32600
    # Said why (LSP 3.17: initialize may only be sent once), not only refused.
    assert _field(again, "error", "message") == (
        "initialize was already received: it may only be sent once per session"
    )
    ping = await client.request("core.ping", {}, request_id="string-id")
    assert ping["id"] == "string-id"
    assert _field(ping, "result", "protocolVersion") == 1
    await client.shut_down()


async def test_command_errors_carry_the_core_code(client: Client) -> None:
    await client.initialize()
    unknown = await client.request("no.such.method", {})
    assert _field(unknown, "error", "code") == -32601
    assert _field(unknown, "error", "data", "code") == "not_supported"
    bad = await client.request("process.run", {"argv": []})
    assert _field(bad, "error", "data", "code") == "invalid_request"
    missing = await client.request("process.run", {"argv": ["/no/such/program"]})
    error = missing["error"]
    assert isinstance(error, dict)
    assert _field(error, "data", "code") == "launch_failed"
    assert "/no/such/program" in str(error["message"])
    ran = await client.request("process.run", {"argv": [PY, "-c", "print('hi')"]})
    assert _field(ran, "result", "stdout") == "hi\n"
    await client.shut_down()


async def test_garbage_body_gets_parse_error_and_server_goes_on(client: Client) -> None:
    await client.initialize()
    await client.send_raw(b"Content-Length: 9\r\n\r\nnot json!")
    parse_error = await client.reply_to(None)
    assert _field(parse_error, "error", "code") == -32700
    pong = await client.request("core.ping", {})
    assert "result" in pong
    await client.shut_down()


#: Payloads no request can be read with, and the JSON-RPC code serve refuses them with.
_UNREADABLE = [
    ("NaN", -32700),
    ('{"a": ' + "[" * 600 + "]" * 600 + "}", -32600),
    ('{"n": ' + "7" * 5000 + "}", -32600),
    ("{not json", -32700),
]


async def test_an_unreadable_request_is_refused_alike_by_serve_and_execute_json(
    client: Client,
) -> None:
    """CoreThread.execute_json answered every request it could not parse with a vague
    "Invalid JSON request", where serve names the cause: both name it in the same words,
    with the same JSON-RPC code (in the envelope: ``details.jsonrpcCode``) and, where serve
    could read it, the same id."""
    envelopes = [f'{{"id": 5, "command": "core.ping", "payload": {p}}}' for p, _ in _UNREADABLE]
    answers = await trio.to_thread.run_sync(_execute_json, envelopes)
    await client.initialize()
    for (payload, code), answer in zip(_UNREADABLE, answers, strict=True):
        body = f'{{"jsonrpc": "2.0", "id": 5, "method": "core.ping", "params": {payload}}}'
        await client.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body.encode())
        served = await client.reply_to(5 if code == -32600 else None)
        assert _field(served, "error", "code") == code
        assert answer["id"] == served["id"]
        assert answer["ok"] is False
        assert answer["error"] == {
            "code": "invalid_request",
            "message": _field(served, "error", "message"),
            "details": {"jsonrpcCode": code},
        }
    await client.shut_down()


def _execute_json(requests: list[str]) -> list[JSONObject]:
    """Each request's answer from ``CoreThread.execute_json`` (a blocking call: run it in a
    worker thread, not in the Trio thread)."""
    with CoreThread() as core:
        return [json.loads(core.execute_json(request)) for request in requests]


async def test_a_body_that_is_not_utf8_is_refused_alike_by_serve_and_the_core(
    client: Client,
) -> None:
    """The same for bytes that are not UTF-8 (``Core.execute`` takes bytes; execute_json
    takes text, which is never undecodable)."""
    await client.initialize()
    await client.send_raw(b"Content-Length: 3\r\n\r\n\xff\xfe{")
    served = await client.reply_to(None)
    assert _field(served, "error", "code") == -32700
    async with open_core() as core:
        answer = await core.execute(b"\xff\xfe{")
    assert answer == {
        "id": None,
        "ok": False,
        "error": {
            "code": "invalid_request",
            "message": _field(served, "error", "message"),
            "details": {"jsonrpcCode": -32700},
        },
    }
    await client.shut_down()


async def test_cancel_request_answers_32800_and_ends_the_process(
    client: Client, tmp_path: os.PathLike[str]
) -> None:
    await client.initialize()
    pid_file = os.path.join(tmp_path, "pid")
    script = f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    await client.send(
        {
            "jsonrpc": "2.0",
            "id": 77,
            "method": "process.run",
            "params": {"argv": [PY, "-c", script]},
        }
    )
    await _wait_for_pid(pid_file)
    await client.notify("$/cancelRequest", {"id": 77})
    reply = await client.reply_to(77)
    assert _field(reply, "error", "code") == -32800
    pid = _read_pid(pid_file)
    assert pid is not None
    with trio.fail_after(10):
        while True:
            if runs_no_more(pid):
                break
            await trio.sleep(0.02)
    await client.shut_down()


async def test_jobs_push_notifications_and_shutdown_waits(
    client: Client, tmp_path: os.PathLike[str]
) -> None:
    await client.initialize()
    job = await client.request(
        "job.start",
        {"kind": "build", "root": str(tmp_path), "argv": [PY, "-c", "print('compiled')"]},
    )
    job_id = _field(job, "result", "jobId")
    started = await client.wait_notification("job.started", jobId=job_id)
    assert _field(started, "params", "kind") == "build"
    finished = await client.wait_notification("job.finished", jobId=job_id)
    assert _field(finished, "params", "status") == "ok"
    # A request in flight when shutdown arrives is answered before shutdown is.
    await client.send(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "process.run",
            "params": {"argv": [PY, "-c", "import time; time.sleep(0.5); print('late')"]},
        }
    )
    await client.send({"jsonrpc": "2.0", "id": 6, "method": "shutdown"})
    order: list[JSONValue] = []
    with trio.fail_after(REPLY_TIMEOUT_S):
        while len(order) < 2:
            message = await client.read_message()
            assert message is not None
            if "id" in message:
                order.append(message["id"])
                if message["id"] == 5:
                    assert _field(message, "result", "stdout") == "late\n"
    assert order == [5, 6]
    after = await client.request("core.ping", {})
    assert _field(after, "error", "code") == -32600
    assert _field(after, "error", "message") == (
        "core.ping: shutdown was already received: only the exit notification is accepted now"
    )
    await client.notify("exit")
    assert await client.wait_exit() == 0


async def test_untrusted_workspace_denies_build(client: Client, tmp_path: os.PathLike[str]) -> None:
    await client.initialize(trusted=False)
    job = await client.request(
        "job.start", {"kind": "build", "root": str(tmp_path), "argv": [PY, "-c", "pass"]}
    )
    job_id = _field(job, "result", "jobId")
    finished = await client.wait_notification("job.finished", jobId=job_id)
    assert _field(finished, "params", "status") == "denied"
    await client.shut_down()


async def test_exit_without_shutdown_is_1(client: Client) -> None:
    await client.initialize()
    await client.notify("exit")
    assert await client.wait_exit() == 1


async def test_end_of_input_cleans_up_and_exits_1(
    client: Client, tmp_path: os.PathLike[str]
) -> None:
    await client.initialize()
    pid_file = os.path.join(tmp_path, "pid")
    script = f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    job = await client.request(
        "job.start", {"kind": "test", "root": str(tmp_path), "argv": [PY, "-c", script]}
    )
    job_id = _field(job, "result", "jobId")
    await _wait_for_pid(pid_file)
    await client.send_raw(
        _request(7, "process.run", {"argv": [PY, "-c", "import time; time.sleep(60)"]})
    )
    await client.close_stdin()
    messages, exit_status = await client.read_to_exit()
    assert exit_status == 1
    # What was received before the end of input is answered, and the job's end is reported.
    reply = _one_reply(_replies(messages), 7)
    assert _field(reply, "error", "data", "code") == "cancelled"
    finished = _notifications(messages, "job.finished")
    assert [_field(n, "params", "jobId") for n in finished] == [job_id]
    pid = _read_pid(pid_file)
    assert pid is not None
    assert runs_no_more(pid)


async def test_broken_header_ends_the_session(client: Client) -> None:
    await client.initialize()
    await client.send_raw(b"Content-Length: banana\r\n\r\n{}")
    assert await client.wait_exit() == 1


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_signal_answers_requests_ends_jobs_and_exits_128_plus_n(
    client: Client, tmp_path: os.PathLike[str], signum: int, status: int
) -> None:
    """SIGTERM/SIGINT: every request received is answered, running jobs end with job.finished.

    Regression (fix_serve c): a signal used to cancel the whole session, so requests in
    flight got no reply and running jobs no ``job.finished``.
    """
    await client.initialize()
    job_pid_file = os.path.join(tmp_path, "job-pid")
    run_pid_file = os.path.join(tmp_path, "run-pid")
    script = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    job = await client.request(
        "job.start",
        {"kind": "test", "root": str(tmp_path), "argv": [PY, "-c", script, job_pid_file]},
    )
    job_id = _field(job, "result", "jobId")
    await client.send_raw(_request(3, "process.run", {"argv": [PY, "-c", script, run_pid_file]}))
    pids = [await _wait_for_pid(job_pid_file), await _wait_for_pid(run_pid_file)]
    client.process.send_signal(signum)
    messages, exit_status = await client.read_to_exit()
    assert exit_status == status
    reply = _one_reply(_replies(messages), 3)
    assert _field(reply, "error", "code") == -32800
    assert _field(reply, "error", "data", "code") == "cancelled"
    finished = _job_finished(messages, job_id)
    assert len(finished) == 1
    assert _field(finished[0], "params", "status") == "cancelled"
    assert all(runs_no_more(pid) for pid in pids)


async def test_exit_right_after_shutdown_still_answers_shutdown(
    tmp_path: os.PathLike[str],
) -> None:
    """``shutdown`` then at once ``exit``: the shutdown reply is written before serve ends.

    Regression (fix_serve a): ``exit`` closed the output while ``shutdown`` still waited for
    the work in flight, so its reply was lost in most runs and serve still exited 0. Looped
    to catch the race; every other run also closes its input right after ``exit``.
    """
    for iteration in range(10):
        async with serve_process() as serve_client:
            await serve_client.initialize()
            job = _request(
                2, "job.start", {"kind": "build", "root": str(tmp_path), "argv": [PY, "-c", "pass"]}
            )
            run = _request(3, "process.run", {"argv": [PY, "-c", "print('ran')"]})
            await serve_client.send_raw(job + run + _request(4, "shutdown") + _EXIT)
            if iteration % 2:
                await serve_client.close_stdin()
            messages, exit_status = await serve_client.read_to_exit()
            replies = _replies(messages)
            job_id = _field(_one_reply(replies, 2), "result", "jobId")
            assert _field(_one_reply(replies, 3), "result", "stdout") == "ran\n"
            assert _one_reply(replies, 4)["result"] is None
            assert exit_status == 0
            # Shutdown ended the job before answering, and its job.finished went first.
            finished = _job_finished(messages, job_id)
            assert len(finished) == 1
            assert messages.index(finished[0]) < messages.index(_one_reply(replies, 4))


async def test_exit_without_shutdown_answers_requests_in_flight(
    client: Client, tmp_path: os.PathLike[str]
) -> None:
    """``exit`` without ``shutdown`` still exits 1, after answering what was in flight."""
    await client.initialize()
    pid_file = os.path.join(tmp_path, "pid")
    script = f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    await client.send_raw(_request(5, "process.run", {"argv": [PY, "-c", script]}))
    pid = await _wait_for_pid(pid_file)
    await client.send_raw(_EXIT + _request(6, "core.ping", {}))
    messages, exit_status = await client.read_to_exit()
    assert exit_status == 1
    replies = _replies(messages)
    reply = _one_reply(replies, 5)
    assert _field(reply, "error", "code") == -32800
    assert _field(reply, "error", "data", "code") == "cancelled"
    # A request sent after exit is answered once too: refused (-32600) when exit was handled
    # first, else served or cancelled (notifications are handled apart from the reader).
    _one_reply(replies, 6)
    assert runs_no_more(pid)


async def test_broken_frame_answers_everything_received(tmp_path: os.PathLike[str]) -> None:
    """A header section without Content-Length: reading stops, and every request read before it
    is answered once (result, or cancelled), running jobs end with job.finished, exit 1.

    Regression (fix_serve b): the broken frame closed the session at once, dropping replies to
    requests already received, even the ``initialize`` reply. The first run sends everything,
    ``initialize`` included, in one write.
    """
    broken = b"X-Foo: bar\r\n\r\n"
    ping = _request(3, "core.ping", {})
    sleeper = _request(4, "process.run", {"argv": [PY, "-c", "import time; time.sleep(60)"]})
    for iteration in range(3):
        async with serve_process() as serve_client:
            if iteration == 0:
                await serve_client.send_raw(_INITIALIZE + ping + sleeper + broken)
                messages, exit_status = await serve_client.read_to_exit()
                assert exit_status == 1
                replies = _replies(messages)
                _assert_cancelled_or_result(_one_reply(replies, 1))
                for request_id in (3, 4):
                    # Before initialize is answered they are refused; either way, once.
                    _one_reply(replies, request_id)
                continue
            await serve_client.initialize()
            job = await serve_client.request(
                "job.start",
                {
                    "kind": "test",
                    "root": str(tmp_path),
                    "argv": [PY, "-c", "import time; time.sleep(60)"],
                },
            )
            job_id = _field(job, "result", "jobId")
            await serve_client.wait_notification("job.started", jobId=job_id)
            await serve_client.send_raw(ping + sleeper + broken)
            messages, exit_status = await serve_client.read_to_exit()
            assert exit_status == 1
            replies = _replies(messages)
            assert "result" in _one_reply(replies, 3)
            reply = _one_reply(replies, 4)
            assert _field(reply, "error", "code") == -32800
            assert _field(reply, "error", "data", "code") == "cancelled"
            finished = _job_finished(messages, job_id)
            assert len(finished) == 1


async def test_a_client_that_stops_reading_does_not_hold_the_exit() -> None:
    """Frames the client never reads are dropped after a bound, and serve still exits.

    ``shutdown`` waits for eight replies of 256 KiB each, far more than a pipe holds; the
    client reads none of them, so the final flush blocks until serve's bound gives up on it.
    """
    async with serve_process() as serve_client:
        await serve_client.initialize()
        chatty: list[JSONValue] = [PY, "-c", "import sys; sys.stdout.write('x' * 262144)"]
        frames = b"".join(_request(10 + i, "process.run", {"argv": chatty}) for i in range(8))
        await serve_client.send_raw(frames + _request(20, "shutdown") + _EXIT)
        with trio.fail_after(REPLY_TIMEOUT_S):
            assert await serve_client.process.wait() == 0


async def test_cancel_request_with_an_invalid_id_is_ignored(client: Client) -> None:
    """A $/cancelRequest whose id is an object, array, bool or null names no request."""
    await client.initialize()
    bad_ids: list[JSONValue] = [{"x": 1}, [1], True, None, 1.5]
    for bad in bad_ids:
        await client.notify("$/cancelRequest", {"id": bad})
    await client.notify("$/cancelRequest", [1])
    pong = await client.request("core.ping", {})
    assert "result" in pong
    await client.shut_down()


async def test_requests_pipelined_before_shutdown_are_served(client: Client) -> None:
    """Requests that arrive before shutdown, in the same write, are served and waited for.

    Handler tasks start in no particular order, so the lifecycle is decided in arrival order
    (the endpoint's admission), never by whichever task runs first.
    """
    await client.initialize()
    frames = b""
    for request_id in range(10, 16):
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "process.run",
                "params": {"argv": [PY, "-c", f"print({request_id})"]},
            }
        ).encode()
        frames += b"Content-Length: %d\r\n\r\n" % len(body) + body
    body = json.dumps({"jsonrpc": "2.0", "id": 99, "method": "shutdown"}).encode()
    frames += b"Content-Length: %d\r\n\r\n" % len(body) + body
    await client.send_raw(frames)
    for request_id in range(10, 16):
        reply = await client.reply_to(request_id)
        assert _field(reply, "result", "stdout") == f"{request_id}\n"
    assert (await client.reply_to(99))["result"] is None
    await client.notify("exit")
    assert await client.wait_exit() == 0


async def test_a_server_reply_nobody_can_re_encode_ends_only_its_request(
    client: Client, tmp_path: os.PathLike[str]
) -> None:
    """A language server's reply nested 980 deep used to end serve with a RecursionError
    when the answer was encoded, and a ``1e400`` in a reply or a notification (read as
    infinity) made ``lsp.waitEvents`` fail ``internal`` and lose the whole batch. Both are
    refused where they are read, so the request ends once, no event is lost, serve goes on."""
    await client.initialize()
    fake = os.path.join(os.path.dirname(__file__), "..", "..", "peers", "lsp_fake.py")
    started = await client.request(
        "lsp.startServer",
        {
            "serverId": "fake",
            "executable": PY,
            "arguments": [fake],
            "workingDirectory": str(tmp_path),
            "rootUri": f"file://{tmp_path}",
        },
    )
    session_id = _field(started, "result", "sessionId")
    sid: JSONObject = {"sessionId": session_id}
    texts = {"deep": "[" * 980 + "]" * 980, "huge": "[1e400]", "fine": '{"ok": [1.5]}'}
    operations: dict[str, JSONValue] = {}
    for name, text in texts.items():
        sent = await client.request(
            "lsp.request",
            {
                **sid,
                "method": "test/rawReply",
                "params": {"text": text},
                "timeoutMilliseconds": 3000,
            },
        )
        operations[name] = _field(sent, "result", "operationId")
    sent = await client.request(
        "lsp.request", {**sid, "method": "test/rawNotify", "params": {"text": '{"x": 1e400}'}}
    )
    operations["notify"] = _field(sent, "result", "operationId")
    completed: dict[JSONValue, JSONObject] = {}
    with trio.fail_after(REPLY_TIMEOUT_S):
        while len(completed) < len(operations):
            batch = await client.request("lsp.waitEvents", {**sid, "timeoutMilliseconds": 5000})
            # The batch itself is an answer, never `internal`.
            events = _field(batch, "result", "events")
            assert isinstance(events, list)
            for event in events:
                assert isinstance(event, dict)
                if event["event"] == "requestCompleted":
                    assert event["operationId"] not in completed, "completed twice"
                    completed[event["operationId"]] = event
    assert completed[operations["fine"]].get("result") == {"ok": [1.5]}
    assert completed[operations["notify"]].get("result") is None
    for name in ("deep", "huge"):
        outcome = completed[operations[name]]
        assert "result" not in outcome, (name, outcome)
    assert _field(await client.request("core.ping", {}), "result", "protocolVersion") == 1
    await client.request("lsp.stopServer", sid)
    assert (await client.request("shutdown"))["result"] is None
    await client.notify("exit")
    assert await client.wait_exit() == 0


async def test_a_poll_of_job_events_does_not_stop_the_pushed_notifications(
    client: Client, tmp_path: os.PathLike[str]
) -> None:
    # A client's own job.pollEvents used to leave the notification forwarder asleep for
    # the rest of the session.
    await client.initialize()
    polled = await client.request("job.pollEvents", {})
    assert _field(polled, "result", "events") == []
    job = await client.request(
        "job.start", {"kind": "build", "root": str(tmp_path), "argv": [PY, "-c", "print(1)"]}
    )
    job_id = _field(job, "result", "jobId")
    finished = await client.wait_notification("job.finished", jobId=job_id)
    assert _field(finished, "params", "status") == "ok"
    await client.shut_down()


async def test_shutdown_answers_a_long_poll_with_an_empty_batch(client: Client) -> None:
    # A long poll in flight would otherwise hold shutdown for its whole timeout (24 days).
    await client.initialize()
    await client.send(
        {
            "jsonrpc": "2.0",
            "id": 40,
            "method": "job.waitEvents",
            "params": {"timeoutMilliseconds": 2**31 - 1},
        }
    )
    await client.send({"jsonrpc": "2.0", "id": 41, "method": "shutdown"})
    poll = await client.reply_to(40)
    assert poll.get("result") == {"events": [], "gap": False}
    assert (await client.reply_to(41))["result"] is None
    await client.notify("exit")
    assert await client.wait_exit() == 0


async def test_shutdown_is_never_refused_busy(client: Client) -> None:
    # Requests in flight fill serve's limit (long polls, cheap to hold): another request is
    # refused busy, but shutdown is admitted, ends the polls, and the session ends 0.
    await client.initialize()
    frames = b"".join(
        _request(request_id, "job.waitEvents", {"timeoutMilliseconds": 600_000})
        for request_id in range(10_000, 10_000 + SERVE_MAX_REQUESTS_IN_FLIGHT)
    )
    await client.send_raw(frames)
    await client.send({"jsonrpc": "2.0", "id": 1200, "method": "core.ping", "params": {}})
    await client.send({"jsonrpc": "2.0", "id": 1201, "method": "shutdown"})
    busy = await client.reply_to(1200)
    assert _field(busy, "error", "data", "code") == "busy"
    assert (await client.reply_to(1201))["result"] is None
    for request_id in range(10_000, 10_000 + SERVE_MAX_REQUESTS_IN_FLIGHT):
        assert _field(await client.reply_to(request_id), "result", "events") == []
    await client.notify("exit")
    assert await client.wait_exit() == 0
