"""A scriptable fake language server (LSP base protocol on stdio) for what real servers rarely do.

Run it as ``sys.executable tests/peers/lsp_fake.py [FLAGS]``. Flags:

    --crash-in-initialize     write a stderr line and exit 3 when ``initialize`` arrives
    --initialize-error        answer ``initialize`` with -32603
    --no-initialize-answer    never answer ``initialize``
    --no-shutdown-answer      never answer ``shutdown`` (and ignore ``exit``)
    --ignore-term             ignore SIGTERM, and ignore ``exit``
    --slow-shutdown=MS        answer ``shutdown`` after MS milliseconds; ``exit`` exits 0
    --hold-initialize=PATH    answer ``initialize`` only once PATH exists
    --full-sync               advertise full text sync (default: incremental)
    --pid-file=PATH           write the pid to PATH at start
    --ready-after=MS          MS after ``initialized``: ``$/progress`` then ``custom/ready {ok}``
    --ask-on-shutdown=PATH    on ``shutdown``, first send ``workspace/configuration`` to the
                              client, write its reply (JSON) to PATH, then answer ``shutdown``
    --ready-when=PATH         after ``initialized``, send ``custom/ready {ok}`` once PATH exists

Requests (answered concurrently where they wait):
    ``test/sleep {ms}``: answered ``"slept"`` after ``ms``; ``$/cancelRequest`` answers -32800.
    ``test/hang``: never answered, except -32800 on cancel.
    ``test/late``: ignores ``$/cancelRequest``; answered ``"late"`` 300 ms after the cancel.
    ``test/fail``: answered with the error ``{code: params.code, message: params.message}``
        (and ``data: params.data`` when given).
    ``test/ask {method, params}``: sends that request to the client, answers with its reply.
    ``test/notify {method, params}``: sends that notification, then answers null.
    ``test/exit {code}``: exits at once with ``code`` (a crash).
    ``test/lastWords {message}``: answers ``"last"``, sends ``window/logMessage {message}``,
        writes ``last words on stderr`` to stderr and exits 5 at once (nothing waits between).
    ``test/rawReply {text}``: answers with ``text`` as the result's JSON text, unchecked.
    ``test/rawNotify {text}``: sends ``window/logMessage`` with ``text`` as its params' JSON
    text, unchecked, then answers null.
    ``test/garbage``: writes a frame header whose Content-Length is not a number.
    ``test/cancelled``: the methods of the requests ``$/cancelRequest`` named so far, in order.
    ``test/floodStderr {lines}``: writes that many stderr lines at once, then answers null.
    ``test/documents``: the didOpen/didChange/didClose/didChangeConfiguration/
        didChangeWatchedFiles params received so far, in order, with the ``test/tick``
        requests among them (``{method: "test/tick", params}``).
    ``test/tick {n}``: answered null; kept in arrival order with the documents' messages.
    ``test/stopReading``: answers null, then never reads stdin again while it writes a
        ``window/logMessage`` every 20 ms.
    ``test/logFlood {perSecond, bytes}``: answers null, then (on a thread of its own, while it
        goes on serving) logs without end: ``perSecond`` ``window/logMessage`` of about
        ``bytes`` bytes each, and a stderr line per message.
    ``workspace/executeCommand {command, arguments: [ms]}``: answered after ``ms`` with
        ``{command, count}``, ``count`` being how many executeCommand requests arrived;
        command ``test.startDebugServer`` starts ``dap_fake.py tcp-announced`` (a debug
        adapter living in this server, as the Java Debug Server lives in JDT LS) and answers
        its port as a numeric string.
    ``test/initializeParams``: the params ``initialize`` arrived with.
    ``shutdown``: null (see flags). Anything else: -32601.
Notification ``exit``: exits 0 after ``shutdown``, 1 otherwise (see flags).
Notification ``custom/echo {text}``: sends ``window/logMessage {type: 3, message: "echo TEXT"}``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_lock = threading.Lock()
_cancelled: dict[object, threading.Event] = {}
_late: set[object] = set()
_client_replies: dict[object, object] = {}
_client_events: dict[object, threading.Event] = {}
_received: list[object] = []
_methods: dict[object, object] = {}
_cancelled_methods: list[object] = []


def _write(message: dict[str, object]) -> None:
    body = json.dumps(message).encode()
    data = b"Content-Length: %d\r\n\r\n" % len(body) + body
    with _lock:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]


def _write_raw(text: str) -> None:
    body = text.encode()
    with _lock:
        os.write(1, b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _answer(request_id: object, result: object) -> None:
    _write({"jsonrpc": "2.0", "id": request_id, "result": result})


def _error(request_id: object, code: int, message: str) -> None:
    _write({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def _read_messages() -> Iterator[object]:
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            chunk = os.read(0, 65536)
            if not chunk:
                return
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(buffer) < length:
            chunk = os.read(0, 65536)
            if not chunk:
                return
            buffer += chunk
        body, buffer = buffer[:length], buffer[length:]
        yield json.loads(body)


def _later(fn: Callable[..., object], *args: object) -> None:
    threading.Thread(target=fn, args=args, daemon=True).start()


def _sleep_then_answer(request_id: object, ms: int) -> None:
    event = _cancelled.setdefault(request_id, threading.Event())
    if event.wait(ms / 1000):
        _error(request_id, -32800, "cancelled")
    else:
        _answer(request_id, "slept")


def _answer_after(request_id: object, ms: int) -> None:
    time.sleep(ms / 1000)
    _answer(request_id, None)


def _ready_later(ms: int) -> None:
    time.sleep(ms / 1000)
    value = {"kind": "report", "percentage": 50, "message": "Importing 3 projects"}
    progress = {"token": "load", "value": value}
    _write({"jsonrpc": "2.0", "method": "$/progress", "params": progress})
    _write({"jsonrpc": "2.0", "method": "custom/ready", "params": {"ok": True, "extra": 1}})


def _execute(request_id: object, command: object, ms: int, count: int) -> None:
    time.sleep(ms / 1000)
    _answer(request_id, {"command": command, "count": count})


def _hang(request_id: object) -> None:
    _cancelled.setdefault(request_id, threading.Event()).wait()
    _error(request_id, -32800, "cancelled")


def _late_answer(request_id: object) -> None:
    _cancelled.setdefault(request_id, threading.Event()).wait()
    time.sleep(0.3)
    _answer(request_id, "late")


def _ask(request_id: object, method: str, params: object) -> None:
    ask_id = f"ask-{request_id}"
    event = _client_events.setdefault(ask_id, threading.Event())
    _write({"jsonrpc": "2.0", "id": ask_id, "method": method, "params": params})
    event.wait()
    _answer(request_id, _client_replies.pop(ask_id))


def _ask_then_shut_down(request_id: object, path: str) -> None:
    ask_id = "ask-on-shutdown"
    event = _client_events.setdefault(ask_id, threading.Event())
    params = {"items": [{"section": "fake"}]}
    _write({"jsonrpc": "2.0", "id": ask_id, "method": "workspace/configuration", "params": params})
    event.wait()
    with open(path, "w") as f:
        json.dump(_client_replies.pop(ask_id), f)
    _answer(request_id, None)


def _ready_when_exists(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)
    _write({"jsonrpc": "2.0", "method": "custom/ready", "params": {"ok": True}})


def _answer_when_exists(request_id: object, path: str, result: object) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)
    _answer(request_id, result)


def _log_flood(per_second: int, size: int) -> None:
    n = 0
    pad = "x" * size
    while True:
        n += 1
        _write(
            {
                "jsonrpc": "2.0",
                "method": "window/logMessage",
                "params": {"type": 4, "message": f"flood {n} {pad}"},
            }
        )
        os.write(2, b"stderr flood %d\n" % n)
        time.sleep(1 / per_second)


def _keep_writing() -> None:
    n = 0
    while True:
        n += 1
        _write(
            {
                "jsonrpc": "2.0",
                "method": "window/logMessage",
                "params": {"type": 4, "message": f"still here {n}"},
            }
        )
        time.sleep(0.02)


def main() -> int:
    flags = sys.argv[1:]
    opts = {f.split("=", 1)[0]: (f.split("=", 1)[1] if "=" in f else "") for f in flags}
    if "--ignore-term" in opts:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "--pid-file" in opts:
        with open(opts["--pid-file"], "w") as f:
            f.write(str(os.getpid()))
    shutdown = False
    executed = 0
    initialize_params: object = None
    for message in _read_messages():
        if not isinstance(message, dict):
            continue
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params")
        p = params if isinstance(params, dict) else {}
        if method is None:
            # A reply to one of our requests.
            _client_replies[request_id] = message.get("error") or {"result": message.get("result")}
            _client_events.setdefault(request_id, threading.Event()).set()
            continue
        if "id" not in message:
            if method == "exit":
                if "--no-shutdown-answer" in opts or "--ignore-term" in opts:
                    continue
                if "--slow-shutdown" in opts:
                    time.sleep(0.2)  # flushing files before exiting
                return 0 if shutdown else 1
            if method == "$/cancelRequest":
                target = p.get("id")
                _cancelled_methods.append(_methods.get(json.dumps(target), "unknown"))
                _cancelled.setdefault(target, threading.Event()).set()
                continue
            if method == "initialized" and "--ready-after" in opts:
                _later(_ready_later, int(opts["--ready-after"]))
            if method == "initialized" and "--ready-when" in opts:
                _later(_ready_when_exists, opts["--ready-when"])
            if method == "custom/echo":
                echo = {"type": 3, "message": f"echo {p.get('text')}"}
                _write({"jsonrpc": "2.0", "method": "window/logMessage", "params": echo})
            if method.startswith(("textDocument/did", "workspace/didChange")):
                _received.append({"method": method, "params": params})
            continue
        _methods[json.dumps(request_id)] = method
        if method == "initialize":
            initialize_params = params
            if "--crash-in-initialize" in opts:
                os.write(2, b"fatal: cannot initialize\n")
                return 3
            if "--initialize-error" in opts:
                _error(request_id, -32603, "initialize exploded")
                continue
            if "--no-initialize-answer" in opts:
                continue
            change = 1 if "--full-sync" in opts else 2
            result = {
                "capabilities": {"textDocumentSync": {"openClose": True, "change": change}},
                "serverInfo": {"name": "lsp-fake", "version": "1"},
            }
            if "--hold-initialize" in opts:
                _later(_answer_when_exists, request_id, opts["--hold-initialize"], result)
                continue
            _answer(request_id, result)
        elif method == "shutdown":
            shutdown = True
            if "--ask-on-shutdown" in opts:
                _later(_ask_then_shut_down, request_id, opts["--ask-on-shutdown"])
                continue
            if "--no-shutdown-answer" in opts:
                continue
            if "--slow-shutdown" in opts:
                _later(_answer_after, request_id, int(opts["--slow-shutdown"]))
                continue
            _answer(request_id, None)
        elif method == "test/initializeParams":
            _answer(request_id, initialize_params)
        elif method == "test/sleep":
            _later(_sleep_then_answer, request_id, int(p.get("ms", 0)))
        elif method == "test/hang":
            _later(_hang, request_id)
        elif method == "test/late":
            _later(_late_answer, request_id)
        elif method == "test/fail":
            error = {"code": int(p.get("code", -32603)), "message": str(p.get("message", "failed"))}
            if "data" in p:
                error["data"] = p["data"]
            _write({"jsonrpc": "2.0", "id": request_id, "error": error})
        elif method == "test/ask":
            _later(_ask, request_id, p.get("method"), p.get("params"))
        elif method == "test/notify":
            _write({"jsonrpc": "2.0", "method": p.get("method"), "params": p.get("params")})
            _answer(request_id, None)
        elif method == "test/exit":
            os.write(2, b"crashing on purpose\n")
            os._exit(int(p.get("code", 7)))
        elif method == "workspace/executeCommand" and p.get("command") == "test.startDebugServer":
            adapter = subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(os.path.dirname(__file__), "dap_fake.py"),
                    "tcp-announced",
                    "PORT=",
                ],
                stdout=subprocess.PIPE,
            )
            assert adapter.stdout is not None
            _answer(request_id, adapter.stdout.readline().decode().strip().removeprefix("PORT="))
        elif method == "workspace/executeCommand":
            executed += 1
            arguments = p.get("arguments")
            ms = arguments[0] if isinstance(arguments, list) and arguments else 0
            _later(_execute, request_id, p.get("command"), int(ms), executed)
        elif method == "test/lastWords":
            _answer(request_id, "last")
            log = {"type": 3, "message": str(p.get("message", "last words"))}
            _write({"jsonrpc": "2.0", "method": "window/logMessage", "params": log})
            os.write(2, b"last words on stderr\n")
            os._exit(5)
        elif method == "test/rawReply":
            # The reply's ``result`` is the given JSON text as is (``1e400``, deep nesting).
            head = '{"jsonrpc":"2.0","id":' + json.dumps(request_id)
            _write_raw(head + ',"result":' + str(p["text"]) + "}")
        elif method == "test/rawNotify":
            head = '{"jsonrpc":"2.0","method":"window/logMessage"'
            _write_raw(head + ',"params":' + str(p["text"]) + "}")
            _answer(request_id, None)
        elif method == "test/garbage":
            with _lock:
                os.write(1, b"Content-Length: many\r\n\r\n{}")
        elif method == "test/floodStderr":
            lines = b"".join(b"noise line %d\n" % n for n in range(int(p.get("lines", 0))))
            view = memoryview(lines)
            while view:
                view = view[os.write(2, view) :]
            _answer(request_id, None)
        elif method == "test/cancelled":
            _answer(request_id, _cancelled_methods)
        elif method == "test/tick":
            _received.append({"method": method, "params": params})
            _answer(request_id, None)
        elif method == "test/documents":
            _answer(request_id, _received)
        elif method == "test/stopReading":
            _answer(request_id, None)
            _keep_writing()
        elif method == "test/logFlood":
            _answer(request_id, None)
            args = (int(p.get("perSecond", 100)), int(p.get("bytes", 100)))
            threading.Thread(target=_log_flood, args=args, daemon=True).start()
        else:
            _error(request_id, -32601, f"Method not found: {method}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
