"""``supervisor serve --listen`` / ``--attach``: a backend that clients attach to and detach from.

Real backends (``python -m supervisor serve --listen``) and real clients over the Unix
socket, framed by hand as in test_serve.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor._cli._listen import default_socket_path, parse_idle_grace, socket_directory
from tests._procfs import runs_no_more, serving_pid
from tests.supervisor.cli.test_serve import REPLY_TIMEOUT_S, Client, _field, _frame, _wait_for_pid

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from protocol import JSONObject, JSONValue

PY = sys.executable


class SocketClient(Client):
    """The framed client of test_serve.py over a connection to the backend's socket."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._stdin = stream
        self._stdout = stream
        self._buffer = bytearray()
        self.notifications: list[JSONObject] = []
        self._replies: dict[str, JSONObject] = {}
        self._next_id = 0

    async def close_stdin(self) -> None:
        await self.stream.send_eof()

    async def wait_closed(self) -> None:
        with trio.fail_after(REPLY_TIMEOUT_S):
            while await self.read_message() is not None:
                pass
        await self.stream.aclose()

    async def detach(self) -> None:
        """The orderly detach: ``shutdown``, ``exit``; the backend closes the connection."""
        assert (await self.request("shutdown"))["result"] is None
        await self.notify("exit")
        await self.wait_closed()


@pytest.fixture
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # Short: a Unix socket's path has at most 107 bytes, and tmp_path is long.
    path = tempfile.mkdtemp(prefix="sv-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _connect(path: str) -> SocketClient:
    with trio.fail_after(REPLY_TIMEOUT_S):
        while True:
            try:
                return SocketClient(await trio.open_unix_socket(path))
            except OSError:
                await trio.sleep(0.02)


@asynccontextmanager
async def backend(path: str, *args: str) -> AsyncIterator[trio.Process]:
    """``supervisor serve --listen PATH ARGS`` as a child; killed and reaped on the way out."""
    process = await trio.lowlevel.open_process(
        [PY, "-m", "supervisor", "serve", "--listen", path, *args],
        stdin=subprocess.DEVNULL,
    )
    try:
        client = await _connect(path)
        await client.stream.aclose()
        yield process
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                with trio.move_on_after(REPLY_TIMEOUT_S):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _read_terminal(client: Client, terminal_id: JSONValue, until: str) -> str:
    """The terminal's output until ``until`` appears in it."""
    seen = ""
    with trio.fail_after(REPLY_TIMEOUT_S):
        while until not in seen:
            reply = await client.request(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
            )
            events = _field(reply, "result", "events")
            assert isinstance(events, list)
            for event in events:
                assert isinstance(event, dict)
                if event["event"] == "output":
                    seen += str(event["data"])
    return seen


async def _until_gone(pid: int) -> None:
    """Wait until ``pid`` runs no more (another process's: nothing to wait on but /proc)."""
    while not runs_no_more(pid):  # noqa: ASYNC110
        await trio.sleep(0.05)


def _exists(path: str) -> bool:
    return os.path.exists(path)


async def _debug_event(client: Client, session: JSONObject, name: str) -> JSONObject:
    """Drain the debug session's events until one named ``name``."""
    with trio.fail_after(60):
        while True:
            reply = await client.request(
                "debug.waitEvents", {**session, "timeoutMilliseconds": 5000}
            )
            events = _field(reply, "result", "events")
            assert isinstance(events, list)
            for event in events:
                if isinstance(event, dict) and event.get("event") == name:
                    return event


def _socket_path(runtime_dir: str) -> str:
    return default_socket_path(os.path.join(runtime_dir, ".."))


async def test_sessions_outlive_a_client_and_job_output_waits_for_the_next(
    runtime_dir: str, tmp_path: os.PathLike[str]
) -> None:
    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "never") as process:
        first = await _connect(path)
        init = await first.initialize()
        assert _field(init, "backend", "pid") == serving_pid(process.pid)
        terminal = await first.request(
            "terminal.create",
            {
                "executable": "bash",
                "arguments": ["--norc", "--noprofile", "-i"],
                "environment": {"PS1": "$ "},
            },
        )
        terminal_id = _field(terminal, "result", "terminalID")
        # A command still running when the editor goes away: its output waits for the next.
        await first.request(
            "terminal.write",
            {"terminalID": terminal_id, "data": "sleep 0.5; echo after-$((2+2))\n"},
        )
        pid_file = os.path.join(tmp_path, "pid")
        script = (
            f"import os, sys, time; open({pid_file!r}, 'w').write(str(os.getpid()))\n"
            "for i in range(20):\n"
            "    print('line', i, flush=True); time.sleep(0.05)\n"
        )
        job = await first.request(
            "job.start", {"kind": "test", "root": str(tmp_path), "argv": [PY, "-c", script]}
        )
        job_id = _field(job, "result", "jobId")
        await _wait_for_pid(pid_file)
        # The editor goes away without a word (a reload): the client detaches.
        await first.stream.aclose()

        second = await _connect(path)
        await second.initialize()
        # The job's output, including what it wrote while nobody was attached, is complete.
        finished = await second.wait_notification("job.finished", jobId=job_id)
        assert _field(finished, "params", "status") == "ok"
        text = "".join(
            str(_field(n, "params", "text"))
            for n in second.notifications
            if n.get("method") == "job.output" and _field(n, "params", "jobId") == job_id
        )
        assert text == "".join(f"line {i}\n" for i in range(20))
        # The terminal is the same, and takes input.
        listed = await second.request("terminal.list", {})
        result = listed["result"]
        assert isinstance(result, list)
        assert [_field(t, "terminalID") for t in result if isinstance(t, dict)] == [terminal_id]
        assert isinstance(result[0], dict)
        assert result[0]["state"] == "running"
        assert "after-4" in await _read_terminal(second, terminal_id, "after-4")
        await second.request(
            "terminal.write", {"terminalID": terminal_id, "data": "echo $((6*7))\n"}
        )
        await _read_terminal(second, terminal_id, "42")
        # shutdown {"scope": "backend"} ends everything, then is answered.
        reply = await second.request("shutdown", {"scope": "backend"})
        assert reply["result"] is None
        await second.notify("exit")
        await second.wait_closed()
        with trio.fail_after(REPLY_TIMEOUT_S):
            assert await process.wait() == 0
        assert not _exists(path)


async def test_a_client_that_vanishes_has_its_requests_cancelled(
    runtime_dir: str, tmp_path: os.PathLike[str]
) -> None:
    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "never") as process:
        first = await _connect(path)
        await first.initialize()
        pid_file = os.path.join(tmp_path, "pid")
        script = f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"
        run: JSONObject = {"argv": [PY, "-c", script]}
        await first.send({"jsonrpc": "2.0", "id": 9, "method": "process.run", "params": run})
        pid = await _wait_for_pid(pid_file)
        await first.stream.aclose()
        # The one-shot process.run ends with its client; the backend stays.
        with trio.fail_after(REPLY_TIMEOUT_S):
            await _until_gone(pid)
        second = await _connect(path)
        pong = await second.request("initialize", {"capabilities": {}})
        assert "result" in pong
        assert process.returncode is None
        await second.detach()
        assert process.returncode is None


async def test_two_clients_at_once_each_get_their_answers_and_job_events(
    runtime_dir: str, tmp_path: os.PathLike[str]
) -> None:
    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "never"):
        first, second = await _connect(path), await _connect(path)
        await first.initialize()
        await second.initialize()
        job = await first.request(
            "job.start",
            {"kind": "build", "root": str(tmp_path), "argv": [PY, "-c", "print('both')"]},
        )
        job_id = _field(job, "result", "jobId")
        for client in (first, second):
            finished = await client.wait_notification("job.finished", jobId=job_id)
            assert _field(finished, "params", "status") == "ok"
        # A client's shutdown detaches it only.
        await first.detach()
        assert "result" in await second.request("core.ping", {})
        await second.detach()


async def test_idle_grace_ends_everything_then_the_backend(
    runtime_dir: str, tmp_path: os.PathLike[str]
) -> None:
    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "500ms") as process:
        client = await _connect(path)
        await client.initialize()
        pid_file = os.path.join(tmp_path, "pid")
        script = f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"
        await client.request(
            "job.start", {"kind": "test", "root": str(tmp_path), "argv": [PY, "-c", script]}
        )
        pid = await _wait_for_pid(pid_file)
        await client.detach()
        with trio.fail_after(REPLY_TIMEOUT_S):
            assert await process.wait() == 0
        assert runs_no_more(pid)
        assert not _exists(path)


async def test_socket_and_directory_are_private(runtime_dir: str) -> None:
    path = _socket_path(runtime_dir)
    assert os.path.dirname(path) == socket_directory()
    async with backend(path, "--idle-grace", "never"):
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
async def test_another_users_connection_is_refused(runtime_dir: str) -> None:
    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "never") as process:
        # The directory is 0700: the other user could not even reach the socket. Open both
        # for the test, to prove the peer credential check refuses it on its own.
        os.chmod(os.path.dirname(path), 0o755)
        os.chmod(path, 0o666)
        os.chmod(runtime_dir, 0o755)
        code = (
            "import json, os, pwd, socket, sys\n"
            "nobody = pwd.getpwnam('nobody')\n"
            "os.setgid(nobody.pw_gid); os.setuid(nobody.pw_uid)\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "body = json.dumps({'jsonrpc': '2.0', 'id': 1, 'method': 'initialize',"
            " 'params': {'capabilities': {}}}).encode()\n"
            "try:\n"
            "    s.sendall(b'Content-Length: %d\\r\\n\\r\\n' % len(body) + body)\n"
            "    data = s.recv(65536)\n"
            "except (BrokenPipeError, ConnectionResetError):\n"
            "    data = b''  # refused before or while it wrote\n"
            "print(repr(data))\n"
        )
        result = await trio.run_process(
            [PY, "-c", code, path], capture_stdout=True, capture_stderr=True, check=False
        )
        assert result.returncode == 0, result.stderr
        # Refused: closed without a single byte.
        assert result.stdout.strip() == b"b''"
        assert process.returncode is None
        client = await _connect(path)
        await client.initialize()
        await client.detach()


async def test_attach_starts_one_backend_for_racing_bridges(runtime_dir: str) -> None:
    path = _socket_path(runtime_dir)
    bridges = [
        await trio.lowlevel.open_process(
            [PY, "-m", "supervisor", "serve", "--attach", path, "--idle-grace", "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    clients = [Client(bridge) for bridge in bridges]
    pids = set()
    for client in clients:
        result = await client.initialize()
        pids.add(_field(result, "backend", "pid"))
    assert len(pids) == 1, "two racing bridges made two backends"
    (backend_pid,) = pids
    assert isinstance(backend_pid, int)
    for client in clients:
        assert (await client.request("shutdown"))["result"] is None
        await client.notify("exit")
        assert await client.wait_exit() == 0
    # Grace 0: the last client's detach ends the backend.
    with trio.fail_after(REPLY_TIMEOUT_S):
        await _until_gone(backend_pid)
    assert not _exists(path)


def test_idle_grace_values() -> None:
    assert parse_idle_grace("never") is None
    assert parse_idle_grace("0") == 0
    assert parse_idle_grace("500ms") == 500
    assert parse_idle_grace("30s") == 30_000
    assert parse_idle_grace("10m") == 600_000
    assert parse_idle_grace("1h") == 3_600_000
    with pytest.raises(ValueError, match="idle-grace"):
        parse_idle_grace("-1")


def test_default_socket_is_named_by_the_workspace(runtime_dir: str, tmp_path: str) -> None:
    one = default_socket_path(os.path.join(tmp_path, "run"))
    assert one == default_socket_path(os.path.join(tmp_path, "run", "..", "run"))
    assert one != default_socket_path(str(tmp_path))
    assert os.path.basename(one).startswith("run-")
    assert json.dumps(one)


async def test_editor_reload_keeps_sessions_warm(runtime_dir: str, tmp_path: str) -> None:
    """The editor reload of issue 30: a client starts pylsp with a document open, a bash
    terminal with a command running, a debugpy session stopped at a breakpoint and a long
    job, then vanishes; the next client finds them alive (``core.sessions``), the same
    server answers a hover at once with the document still open, the terminal gives the
    output it made meanwhile and takes input, the debug session is still stopped there (its
    stack asked again) and continues to the end, the job's output is complete; then the
    idle grace ends everything."""
    from tests.supervisor.dap.test_sessions import BREAK_LINE, TARGET, debugpy_adapter
    from tests.supervisor.lsp._support import PYLSP, as_obj
    from tests.supervisor.lsp.test_real_servers import SOURCE, _project, _serve_call, _serve_wait

    _, uri = _project(str(tmp_path))
    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "1s") as process:
        first = await _connect(path)
        await first.initialize()
        started = await _serve_call(
            first,
            "lsp.startServer",
            {
                "serverId": "pylsp",
                "executable": PYLSP,
                "workingDirectory": str(tmp_path),
                "rootUri": "file://" + str(tmp_path),
            },
        )
        assert isinstance(started, dict)
        sid = str(started["sessionId"])
        seen: list[JSONObject] = []
        await _serve_wait(first, sid, seen, lambda e: e.get("state") == "ready")
        document: JSONObject = {
            "sessionId": sid,
            "uri": uri,
            "languageId": "python",
            "text": SOURCE,
        }
        await _serve_call(first, "lsp.syncDocument", document)
        await _serve_wait(first, sid, seen, lambda e: e["event"] == "diagnostics")
        server_pid = as_obj(await _serve_call(first, "lsp.snapshot", {"sessionId": sid}))["pid"]
        terminal = await _serve_call(
            first,
            "terminal.create",
            {
                "executable": "bash",
                "arguments": ["--norc", "--noprofile", "-i"],
                "environment": {"PS1": "$ "},
            },
        )
        assert isinstance(terminal, dict)
        terminal_id = terminal["terminalID"]
        # What the first client reads is gone from the queue; the screen still shows it.
        await _serve_call(
            first, "terminal.write", {"terminalID": terminal_id, "data": "echo seen-$((1+1))\n"}
        )
        await _read_terminal(first, terminal_id, "seen-2")
        await _serve_call(
            first,
            "terminal.write",
            {"terminalID": terminal_id, "data": "sleep 1; echo built-$((40+2))\n"},
        )
        # A debugpy session stopped at a breakpoint.
        target = os.path.join(tmp_path, "target.py")
        with open(target, "w") as f:  # noqa: ASYNC230 - a few bytes
            f.write(TARGET)
        debug = as_obj(
            await _serve_call(
                first,
                "debug.createSession",
                {"adapterId": "debugpy", "rootPath": str(tmp_path), "adapter": debugpy_adapter()},
            )
        )
        debug_id: JSONObject = {"sessionId": debug["sessionId"]}
        await _serve_call(
            first,
            "debug.setBreakpoints",
            {**debug_id, "path": target, "breakpoints": [{"line": BREAK_LINE}]},
        )
        await _serve_call(
            first,
            "debug.launch",
            {**debug_id, "configuration": {"program": target, "console": "internalConsole"}},
        )
        await _debug_event(first, debug_id, "stopped")
        script = (
            "import time\nfor i in range(30):\n    print('step', i, flush=True); time.sleep(0.05)\n"
        )
        job = await _serve_call(
            first, "job.start", {"kind": "test", "root": str(tmp_path), "argv": [PY, "-c", script]}
        )
        assert isinstance(job, dict)
        job_id = job["jobId"]
        # The window reloads: the client vanishes without shutdown.
        await first.stream.aclose()

        second = await _connect(path)
        await second.initialize()
        alive = await _serve_call(second, "core.sessions", {})
        assert isinstance(alive, dict)
        assert alive["pid"] == serving_pid(process.pid)
        servers = alive["languageServers"]
        assert isinstance(servers, list)
        assert len(servers) == 1
        server = servers[0]
        assert isinstance(server, dict)
        assert server["pid"] == server_pid
        assert server["state"] == "ready"
        assert isinstance(server["uptimeMs"], int)
        documents = server["documents"]
        assert isinstance(documents, list)
        assert [as_obj(d)["uri"] for d in documents] == [uri]
        terminals = alive["terminals"]
        assert isinstance(terminals, list)
        assert [as_obj(t)["terminalID"] for t in terminals] == [terminal_id]
        # The same server, the document still open: a hover answers at once.
        hover = await _serve_call(
            second,
            "lsp.request",
            {
                "sessionId": sid,
                "method": "textDocument/hover",
                "params": {"textDocument": {"uri": uri}, "position": {"line": 3, "character": 5}},
            },
        )
        assert isinstance(hover, dict)
        operation = hover["operationId"]
        later: list[JSONObject] = []
        done = await _serve_wait(
            second,
            sid,
            later,
            lambda e: e["event"] == "requestCompleted" and e["operationId"] == operation,
        )
        assert "greet" in str(done["result"])
        # Its diagnostics, published while the first client was attached, come with its state.
        with trio.fail_after(REPLY_TIMEOUT_S):
            while True:
                state = as_obj(
                    await _serve_call(
                        second, "lsp.snapshot", {"sessionId": sid, "includeDiagnostics": True}
                    )
                )
                docs = state["documents"]
                assert isinstance(docs, list)
                assert len(docs) == 1
                doc = as_obj(docs[0])
                diagnostics = doc["diagnostics"]
                assert isinstance(diagnostics, list)
                if "nam" in str(diagnostics):
                    break
                await trio.sleep(0.1)
        assert doc["diagnosticCount"] == len(diagnostics)
        # The terminal: its screen -- with what the first client had already read -- then
        # what the command wrote while nobody was attached, then live input.
        screen = as_obj(await _serve_call(second, "terminal.screen", {"terminalID": terminal_id}))
        assert "seen-2" in str(screen["text"])
        assert isinstance(screen["seq"], int)
        await _read_terminal(second, terminal_id, "built-42")
        await _serve_call(
            second, "terminal.write", {"terminalID": terminal_id, "data": "echo $$\n"}
        )
        terminal_pid = as_obj(terminals[0])["pid"]
        await _read_terminal(second, terminal_id, str(terminal_pid))
        # The debug session: still stopped at the breakpoint; its stack is asked again, and it
        # continues to the end.
        debugs = alive["debugSessions"]
        assert isinstance(debugs, list)
        assert [as_obj(d)["sessionId"] for d in debugs] == [debug_id["sessionId"]]
        adapter_pid = as_obj(debugs[0])["adapterPid"]
        stop = as_obj(as_obj(debugs[0])["stop"])
        assert stop["reason"] == "breakpoint"
        assert isinstance(adapter_pid, int)
        threads = as_obj(
            await _serve_call(second, "debug.inspect", {**debug_id, "kind": "threads"})
        )
        thread_list = as_obj(threads["result"])["threads"]
        assert isinstance(thread_list, list)
        thread_id = as_obj(thread_list[0])["id"]
        stack = as_obj(
            await _serve_call(
                second, "debug.inspect", {**debug_id, "kind": "stackTrace", "threadId": thread_id}
            )
        )
        frames = as_obj(stack["result"])["stackFrames"]
        assert isinstance(frames, list)
        assert as_obj(frames[0])["line"] == BREAK_LINE
        await _serve_call(
            second, "debug.execute", {**debug_id, "command": "continue", "threadId": thread_id}
        )
        await _debug_event(second, debug_id, "terminated")
        # The job's output is complete.
        await second.wait_notification("job.finished", jobId=job_id)
        text = "".join(
            str(_field(n, "params", "text"))
            for n in second.notifications
            if n.get("method") == "job.output" and _field(n, "params", "jobId") == job_id
        )
        assert text == "".join(f"step {i}\n" for i in range(30))
        # The editor closes for good: after the idle grace everything ends, then the backend.
        await second.detach()
        with trio.fail_after(REPLY_TIMEOUT_S):
            assert await process.wait() == 0
        assert isinstance(server_pid, int)
        assert isinstance(terminal_pid, int)
        assert runs_no_more(server_pid)
        assert runs_no_more(terminal_pid)
        assert runs_no_more(adapter_pid)


async def test_status_lists_backends_without_attaching(runtime_dir: str, tmp_path: str) -> None:
    path = _socket_path(runtime_dir)
    stale = os.path.join(os.path.dirname(path), "dead-0000000000000000.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(stale)  # a socket nobody listens on: a backend that died
    async with backend(path, "--idle-grace", "never") as process:
        client = await _connect(path)
        await client.initialize()
        await client.request(
            "terminal.create", {"executable": "bash", "arguments": ["--norc", "--noprofile"]}
        )
        result = await trio.run_process(
            [PY, "-m", "supervisor", "status", "--json"], capture_stdout=True
        )
        listed = json.loads(result.stdout)
        by_socket = {b["socket"]: b for b in listed["backends"]}
        assert by_socket[stale]["stale"] is True
        mine = by_socket[path]
        assert mine["pid"] == serving_pid(process.pid)
        assert [t["state"] for t in mine["terminals"]] == ["running"]
        text = await trio.run_process([PY, "-m", "supervisor", "status"], capture_stdout=True)
        assert b"terminal" in text.stdout
        assert b"stale" in text.stdout
        await client.detach()


async def test_an_observer_does_not_restart_the_idle_grace(runtime_dir: str) -> None:
    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "2s") as process:
        # `supervisor status` every 0.5 s does not keep the backend alive.
        with trio.fail_after(REPLY_TIMEOUT_S):
            while process.returncode is None:
                await trio.run_process(
                    [PY, "-m", "supervisor", "status", "--json"], capture_stdout=True
                )
                with trio.move_on_after(0.5):
                    await process.wait()
        assert process.returncode == 0


async def test_two_clients_writing_to_one_terminal_are_ordered_per_connection(
    runtime_dir: str,
) -> None:
    """Each connection's writes take effect in its own order (one sequencer per backend),
    however the two connections interleave."""
    path = _socket_path(runtime_dir)
    count = 40
    async with backend(path, "--idle-grace", "never"):
        first, second = await _connect(path), await _connect(path)
        await first.initialize()
        await second.initialize()
        created = await first.request(
            "terminal.create",
            {"executable": "sh", "arguments": ["-c", "stty -echo; echo ready; exec cat"]},
        )
        terminal_id = _field(created, "result", "terminalID")
        await _read_terminal(first, terminal_id, "ready")

        async def pipeline(client: SocketClient, tag: str) -> None:
            for i in range(count):
                params: JSONObject = {"terminalID": terminal_id, "data": f"{tag}{i}.\n"}
                await client.send(
                    {"jsonrpc": "2.0", "id": 1000 + i, "method": "terminal.write", "params": params}
                )
            for i in range(count):
                assert "result" in await client.reply_to(1000 + i)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pipeline, first, "A")
            nursery.start_soon(pipeline, second, "B")
        seen = await _read_terminal(first, terminal_id, f"B{count - 1}.")
        if f"A{count - 1}." not in seen:
            seen += await _read_terminal(first, terminal_id, f"A{count - 1}.")
        for tag in "AB":
            numbers = [int(n) for n in re.findall(rf"{tag}(\d+)\.", seen)]
            assert numbers == list(range(count)), f"{tag}: {numbers}"
        await first.detach()
        await second.detach()


async def test_a_sigkill_of_the_backend_ends_every_process(runtime_dir: str, tmp_path: str) -> None:
    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "never") as process:
        client = await _connect(path)
        await client.initialize()
        created = await client.request(
            "terminal.create", {"executable": "bash", "arguments": ["--norc", "--noprofile"]}
        )
        terminal_id = _field(created, "result", "terminalID")
        listed = await client.request("terminal.list", {})
        terminals = listed["result"]
        assert isinstance(terminals, list)
        (terminal,) = [t for t in terminals if isinstance(t, dict)]
        assert terminal["terminalID"] == terminal_id
        terminal_pid = terminal["pid"]
        assert isinstance(terminal_pid, int)
        pid_file = os.path.join(tmp_path, "pid")
        script = f"import os, time; open({pid_file!r}, 'w').write(str(os.getpid())); time.sleep(60)"
        await client.request(
            "job.start", {"kind": "test", "root": str(tmp_path), "argv": [PY, "-c", script]}
        )
        job_pid = await _wait_for_pid(pid_file)
        os.kill(serving_pid(process.pid), signal.SIGKILL)
        # The guarantee is 2 s; the bound is generous for a loaded machine.
        with trio.fail_after(REPLY_TIMEOUT_S):
            await _until_gone(terminal_pid)
            await _until_gone(job_pid)
        await client.wait_closed()


async def test_attach_chaos_rounds_pass() -> None:
    """A few rounds of ``supervisor chaos --attach`` (CI runs 30 with the commit's seed)."""
    from supervisor._cli._chaos_attach import run_attach_chaos

    report = await run_attach_chaos(4, 20261205)
    assert report.ok, report.violations
    assert report.rounds == 4
    assert report.detaches["vanish"] + report.detaches["shutdown"] == report.clients


async def test_a_flood_from_one_client_never_costs_another_its_answers(
    runtime_dir: str,
) -> None:
    """Each connection has its own endpoint and its own in-flight bounds: a client past its
    limit is refused ``busy``, another is served as usual."""
    from supervisor._cli._serve import SERVE_MAX_REQUESTS_IN_FLIGHT

    path = _socket_path(runtime_dir)
    async with backend(path, "--idle-grace", "never"):
        flood, calm = await _connect(path), await _connect(path)
        await flood.initialize()
        await calm.initialize()
        created = await flood.request(
            "terminal.create", {"executable": "sh", "arguments": ["-c", "exec sleep 60"]}
        )
        terminal_id = _field(created, "result", "terminalID")
        # Long polls hold their places in flight; past the limit the flood is refused busy.
        count = SERVE_MAX_REQUESTS_IN_FLIGHT + 50
        poll: JSONObject = {"terminalID": terminal_id, "timeoutMilliseconds": 60_000}
        frames = b"".join(
            _frame(
                {
                    "jsonrpc": "2.0",
                    "id": 10_000 + i,
                    "method": "terminal.waitEvents",
                    "params": poll,
                }
            )
            for i in range(count)
        )
        await flood.send_raw(frames)
        busy = await flood.reply_to(10_000 + count - 1)
        assert _field(busy, "error", "data", "code") == "busy"
        for _ in range(20):
            assert "result" in await calm.request("core.ping", {})
        # The flood's client vanishes: its polls are cancelled, the backend goes on.
        await flood.stream.aclose()
        listed = await calm.request("terminal.list", {})
        assert isinstance(listed["result"], list)
        await calm.detach()
