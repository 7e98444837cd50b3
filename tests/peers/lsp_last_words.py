"""A fake language server that talks while it stops (issue 24: drain on every stop path).

Usage: ``python lsp_last_words.py [--logs=N] [--stderr=M] [--on-term]``.

It speaks the LSP base protocol on stdio, single-threaded (so its signal handler can write
without a lock), and answers ``initialize`` and ``shutdown``. Its last words are ``N``
``window/logMessage`` notifications (``last log I/N``) and ``M`` stderr lines
(``last stderr I/M``), written without pause:

- by default, the logs right after its ``shutdown`` reply, and the stderr lines when ``exit``
  arrives, just before it exits 0;
- with ``--on-term``, it never answers ``shutdown`` and ignores ``exit``: it says all of them
  from its SIGTERM handler, then exits 0;
- on the request ``test/crash``, it answers ``"crashing"``, says all of them and exits 7 at
  once (a crash).

Defaults: ``N`` 301, ``M`` 50 (under the session's stderr log rate, so each line is an event).
Everything is written with blocking writes before the exit, so whatever is missing was lost
by the reader.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

logs = 301
stderr_lines = 50
on_term = False
for flag in sys.argv[1:]:
    name, _, value = flag.partition("=")
    if name == "--logs":
        logs = int(value)
    elif name == "--stderr":
        stderr_lines = int(value)
    elif name == "--on-term":
        on_term = True
    else:
        sys.exit(f"unknown flag {flag}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _send(message: dict[str, object]) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    _write_all(1, b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _say_logs() -> None:
    for i in range(1, logs + 1):
        _send(
            {
                "method": "window/logMessage",
                "params": {"type": 3, "message": f"last log {i}/{logs}"},
            }
        )


def _say_stderr() -> None:
    for i in range(1, stderr_lines + 1):
        _write_all(2, f"last stderr {i}/{stderr_lines}\n".encode())


def _on_term(signum: int, frame: object) -> None:
    _say_logs()
    _say_stderr()
    os._exit(0)


def _read_messages() -> Iterator[object]:
    stdin = sys.stdin.buffer
    while True:
        length = None
        while True:
            line = stdin.readline()
            if not line:
                return
            line = line.strip()
            if not line:
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        assert length is not None
        yield json.loads(stdin.read(length))


def main() -> int:
    if on_term:
        signal.signal(signal.SIGTERM, _on_term)
    for message in _read_messages():
        assert isinstance(message, dict)
        method = message.get("method")
        request_id = message.get("id")
        if method == "initialize":
            _send({"id": request_id, "result": {"capabilities": {"textDocumentSync": 2}}})
        elif method == "shutdown":
            if on_term:
                continue
            _send({"id": request_id, "result": None})
            _say_logs()
        elif method == "exit":
            if on_term:
                continue
            _say_stderr()
            return 0
        elif method == "test/crash":
            _send({"id": request_id, "result": "crashing"})
            _say_logs()
            _say_stderr()
            os._exit(7)
        elif request_id is not None:
            _send({"id": request_id, "error": {"code": -32601, "message": f"no {method}"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
