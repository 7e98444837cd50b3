"""A small fake debug adapter for what real adapters rarely do (issue 4).

Usage: ``python dap_fake.py MODE [ARG]``. It speaks DAP on stdio (framing by hand, standard
library only), except ``tcp-announced``, which listens on 127.0.0.1:0, prints
``ARG<port>`` as its first stdout line and speaks DAP on the accepted socket.

Modes:
- ``normal``: answers initialize (with supportsCancelRequest and supportsTerminateRequest),
  launch/attach (sends ``initialized`` first), configurationDone, disconnect; exits on EOF.
- ``crash-initialize``: writes a line to stderr and exits 3 when initialize arrives.
- ``refuse-initialize``: answers initialize with ``success: false``; then as normal.
- ``no-disconnect``: like normal, but never answers disconnect and ignores stdin EOF
  (it sleeps until it is terminated).
- ``late-response``: holds the answer to ``evaluate`` until ``cancel`` for it arrives, then
  answers both (the evaluate answer is late).
- ``run-in-terminal``: on launch, sends a ``runInTerminal`` reverse request (carrying a stray
  ``request_seq``) to run ``ARG`` (a Python file; with more arguments, ``ARG ARGS...`` is the
  whole argv) and answers launch with the process id it got in an ``output`` event.
- ``tcp-announced``: as normal, over TCP.
- ``tcp-announced-stderr``: the same, announcing on stderr.
- ``stop-reading``: answers launch, then never reads its stdin again (and never exits by
  itself), so the supervisor's writes to it block once the pipe is full.
- ``broken-header``: on launch, writes a header whose Content-Length is not a number.
- ``stray-text``: on launch, writes a line of stray text (as an adapter's stray ``print``
  does) before each frame it sends from then on; otherwise as normal.
- ``oversized``: on launch, writes a header announcing a body one byte over 64 MiB.
- ``stray-flood``: on launch, writes 75 000 bytes of text lines and no frame (past the 64 KiB
  of stray text a language server may write between frames), then answers launch.
- ``exit-leaving-child``: on initialize, starts a child that keeps its stdout open (so
  the end of the adapter's output comes only with the child's end) and exits 3.
- ``stderr``: as normal, and writes a line to stderr at start-up.
- ``threads``: advertises data breakpoints and single-thread execution; after
  ``configurationDone`` threads 1 and 2 are stopped (``stopped`` for thread 1, all threads);
  ``dataBreakpointInfo`` answers ``dataId`` ``<variablesReference>/<name>``; ``continue``
  with ``singleThread`` answers ``allThreadsContinued: false``; ``evaluate`` of
  ``received`` answers the ``setDataBreakpoints`` requests so far as JSON text.
- ``record``: advertises function breakpoints; keeps every request it receives (command
  and arguments); after ``configurationDone`` thread 1 is stopped; ``evaluate`` of
  ``received`` answers the requests so far as JSON text; ``evaluate`` of ``events`` first
  sends ``continued``, ``breakpoint``, ``thread`` and ``exited`` events.
- ``record-plain``: the same, but without function breakpoints, ``configurationDone``
  (so nothing stops by itself) or exception filters.
- ``record-early [GATE]``: as ``record``, but sends ``initialized`` *before* its
  ``initialize`` response (as netcoredbg and hxcpp-debugger do) -- with GATE, once that file
  exists (so a test can have a launch wait at the client first) -- and answers
  ``launch``/``attach`` only after ``configurationDone`` (as debugpy does).
- ``record-twice``: as ``record``, but sends ``initialized`` twice when launched.
- ``record-child``: as ``record``; once configured after a ``launch`` it also asks for a
  child session (``startDebugging``, ``request: "attach"``); the child's adapter (the same
  program, attached) does not.
- ``say-and-exit``: on launch, answers it, writes an ``output`` event ("last words") and a
  stderr line ("last stderr line"), and exits 0 at once: nothing it wrote may be lost.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any, BinaryIO


class Peer:
    def __init__(self, reader: BinaryIO, writer: BinaryIO) -> None:
        self.reader = reader
        self.writer = writer
        self.seq = 0
        #: ``stray-text``: a stray line goes out before every frame.
        self.stray = False

    def read(self) -> dict[str, Any] | None:
        length = None
        while True:
            line = self.reader.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                break
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        assert length is not None
        body = self.reader.read(length)
        message: dict[str, Any] = json.loads(body)
        return message

    def write(self, message: dict[str, Any]) -> None:
        self.seq += 1
        message["seq"] = self.seq
        body = json.dumps(message).encode()
        if self.stray:
            self.writer.write(b"a stray print, not a frame\n")
        self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.writer.flush()

    def respond(self, request: dict[str, Any], body: Any = None, success: bool = True) -> None:
        message: dict[str, Any] = {
            "type": "response",
            "request_seq": request["seq"],
            "success": success,
            "command": request["command"],
        }
        if body is not None:
            message["body"] = body
        self.write(message)

    def event(self, name: str, body: Any = None) -> None:
        message: dict[str, Any] = {"type": "event", "event": name}
        if body is not None:
            message["body"] = body
        self.write(message)


CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsCancelRequest": True,
    "supportsTerminateRequest": True,
    "supportsFunctionBreakpoints": False,
    "exceptionBreakpointFilters": [
        {"filter": "uncaught", "label": "Uncaught", "default": True},
        {"filter": "raised", "label": "Raised"},
    ],
}


THREAD_CAPABILITIES = {
    **CAPABILITIES,
    "supportsDataBreakpoints": True,
    "supportsSingleThreadExecutionRequests": True,
    "supportsConditionalBreakpoints": True,
}


RECORD_CAPABILITIES = {**CAPABILITIES, "supportsFunctionBreakpoints": True}
RECORD_PLAIN_CAPABILITIES = {
    "supportsConfigurationDoneRequest": False,
    "supportsFunctionBreakpoints": False,
}
RECORDED_EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("continued", {"threadId": 1, "allThreadsContinued": True}),
    ("breakpoint", {"reason": "changed", "breakpoint": {"id": 5, "verified": True, "line": 3}}),
    ("thread", {"reason": "started", "threadId": 3}),
    ("exited", {"exitCode": 7}),
]


def serve_recorded(
    peer: Peer, message: dict[str, Any], recorded: list[Any], held: dict[str, Any]
) -> bool:
    """The ``record`` modes' own answers; False for a request answered as in ``normal``.

    ``held`` keeps what a mode holds between requests: ``start`` (a launch or attach not
    answered yet), ``configured``, ``launched``.
    """
    mode = sys.argv[1]
    command = message["command"]
    expression = (message.get("arguments") or {}).get("expression")
    if command == "initialize":
        plain = mode == "record-plain"
        if mode == "record-early":
            gate = sys.argv[2] if len(sys.argv) > 2 else None
            deadline = time.monotonic() + 60
            while gate is not None and not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
            peer.event("initialized")
        peer.respond(message, RECORD_PLAIN_CAPABILITIES if plain else RECORD_CAPABILITIES)
    elif command in ("launch", "attach") and mode == "record-early":
        if held.get("configured"):
            peer.respond(message)
        else:
            held["start"] = message
    elif command in ("launch", "attach") and mode in ("record-twice", "record-child"):
        held["launched"] = command == "launch"
        peer.event("initialized")
        if mode == "record-twice":
            peer.event("initialized")
        peer.respond(message)
    elif command == "configurationDone":
        held["configured"] = True
        peer.respond(message)
        if held.get("start") is not None:
            peer.respond(held.pop("start"))
        peer.event("stopped", {"reason": "pause", "threadId": 1, "allThreadsStopped": True})
        if mode == "record-child" and held.get("launched"):
            arguments = {"request": "attach", "configuration": {"name": "child"}}
            peer.write({"type": "request", "command": "startDebugging", "arguments": arguments})
    elif command == "variables":
        peer.respond(message, {"variables": []})
    elif command == "evaluate" and expression == "received":
        peer.respond(message, {"result": json.dumps(recorded), "variablesReference": 0})
    elif command == "evaluate" and expression == "events":
        for name, body in RECORDED_EVENTS:
            peer.event(name, body)
        peer.respond(message, {"result": "sent", "variablesReference": 0})
    else:
        return False
    return True


def serve(peer: Peer, mode: str, arg: str) -> None:
    held_evaluate: dict[str, Any] | None = None
    received: list[dict[str, Any]] = []
    recorded: list[Any] = []
    held: dict[str, Any] = {}
    while True:
        message = peer.read()
        if message is None:
            if mode == "no-disconnect":
                while True:
                    time.sleep(1)
            return
        if message["type"] != "request":
            continue
        command = message["command"]
        if mode.startswith("record"):
            recorded.append({"command": command, "arguments": message.get("arguments")})
            if serve_recorded(peer, message, recorded, held):
                continue
        if command == "initialize":
            if mode == "crash-initialize":
                sys.stderr.write("fake adapter: crashing during initialize\n")
                sys.stderr.flush()
                os._exit(3)
            if mode == "exit-leaving-child":
                subprocess.Popen(["sleep", "60"])  # inherits stdout and stderr
                os._exit(3)
            if mode == "refuse-initialize":
                peer.respond(message, {"error": {"id": 1, "format": "no"}}, success=False)
                continue
            peer.respond(message, THREAD_CAPABILITIES if mode == "threads" else CAPABILITIES)
        elif mode == "threads" and command == "configurationDone":
            peer.respond(message)
            peer.event("stopped", {"reason": "pause", "threadId": 1, "allThreadsStopped": True})
        elif mode == "threads" and command == "dataBreakpointInfo":
            arguments = message.get("arguments") or {}
            name = arguments.get("name")
            data_id = f"{arguments.get('variablesReference')}/{name}"
            body = {"dataId": data_id, "description": name, "accessTypes": ["write", "readWrite"]}
            peer.respond(message, body)
        elif mode == "threads" and command == "setDataBreakpoints":
            received.append(message)
            count = len((message.get("arguments") or {}).get("breakpoints", []))
            peer.respond(message, {"breakpoints": [{"verified": True}] * count})
        elif mode == "threads" and command == "continue":
            single = (message.get("arguments") or {}).get("singleThread") is True
            peer.respond(message, {"allThreadsContinued": not single})
        elif mode == "threads" and command == "evaluate":
            peer.respond(message, {"result": json.dumps(received), "variablesReference": 0})
        elif command in ("launch", "attach"):
            if mode == "oversized":
                peer.writer.write(b"Content-Length: %d\r\n\r\n{" % (64 * 1024 * 1024 + 1))
                peer.writer.flush()
                while True:
                    time.sleep(1)
            if mode == "stray-text":
                peer.stray = True
            if mode == "stray-flood":
                peer.writer.write(b"not a frame, just output\n" * 3000)
                peer.writer.flush()
                peer.respond(message)
                while True:
                    time.sleep(1)
            if mode == "broken-header":
                peer.writer.write(b"Content-Length: many\r\n\r\n{}")
                peer.writer.flush()
                while True:
                    time.sleep(1)
            if mode == "say-and-exit":
                peer.respond(message)
                peer.event("output", {"category": "stdout", "output": "last words\n"})
                sys.stderr.write("last stderr line\n")
                sys.stderr.flush()
                os._exit(0)
            peer.event("initialized")
            if mode == "stop-reading":
                peer.respond(message)
                while True:
                    time.sleep(1)
            if mode == "run-in-terminal":
                peer.write(
                    {
                        "type": "request",
                        "command": "runInTerminal",
                        "request_seq": 999,  # stray: it is still a request
                        "arguments": {
                            "kind": "integrated",
                            "title": "fake",
                            "cwd": os.getcwd(),
                            "args": sys.argv[2:] if len(sys.argv) > 3 else [sys.executable, arg],
                            "env": {"FAKE_B": "2", "FAKE_A": "1"},
                        },
                    }
                )
                reply = peer.read()
                while reply is not None and reply["type"] != "response":
                    if reply["type"] == "request":
                        peer.respond(reply)  # configuration requests meanwhile
                    reply = peer.read()
                assert reply is not None
                peer.event(
                    "output",
                    {
                        "category": "console",
                        "output": json.dumps(
                            {"terminalReply": reply.get("body"), "success": reply["success"]}
                        ),
                    },
                )
            peer.respond(message)
        elif command == "evaluate" and mode == "late-response":
            held_evaluate = message
        elif command == "cancel":
            peer.respond(message)
            # Tells a test that DAP `cancel` reached the adapter.
            arguments = message.get("arguments") or {}
            peer.event(
                "output",
                {"category": "console", "output": f"cancel {arguments.get('requestId')}"},
            )
            if held_evaluate is not None:
                peer.respond(held_evaluate, {"result": "late", "variablesReference": -5})
                held_evaluate = None
        elif command == "evaluate":
            peer.respond(
                message,
                {"result": "42", "variablesReference": 0, "namedVariables": -3},
            )
        elif command == "disconnect":
            if mode == "no-disconnect":
                continue
            peer.respond(message)
        else:
            peer.respond(message)


def main() -> None:
    mode = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else ""
    if mode == "no-disconnect":
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if mode == "stderr":
        sys.stderr.write("fake adapter: started\n")
        sys.stderr.flush()
    if mode in ("tcp-announced", "tcp-announced-stderr"):
        server = socket.create_server(("127.0.0.1", 0))
        out = sys.stderr if mode == "tcp-announced-stderr" else sys.stdout
        print(f"{arg}{server.getsockname()[1]}", file=out, flush=True)
        conn, _ = server.accept()
        server.close()
        stream = conn.makefile("rwb")
        serve(Peer(stream, stream), mode, arg)  # type: ignore[arg-type]
        return
    serve(Peer(sys.stdin.buffer, sys.stdout.buffer), mode, arg)


if __name__ == "__main__":
    main()
