"""A fake debug adapter that talks while it stops (issue 24: drain on every stop path).

Usage: ``python dap_last_words.py [--outputs=N] [--on-term]``.

It speaks DAP on stdio, single-threaded (so its signal handler can write without a lock):
``initialize`` (``initialized`` follows the answer), ``launch``, ``configurationDone``,
``disconnect``. Its last words are ``N`` ``output`` events (``last output I/N``) and a stderr
line (``last stderr line``), written without pause:

- by default, right after its ``disconnect`` answer; it exits 0 when its stdin ends;
- with ``--on-term``, it never answers ``disconnect`` and ignores the end of stdin: it says
  them from its SIGTERM handler, then exits 0;
- on ``evaluate`` of ``crash``, it answers, says them and exits 7 at once (a crash).

Default ``N``: 301. Everything is written with blocking writes before the exit, so whatever is
missing was lost by the reader.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

outputs = 301
on_term = False
for flag in sys.argv[1:]:
    name, _, value = flag.partition("=")
    if name == "--outputs":
        outputs = int(value)
    elif name == "--on-term":
        on_term = True
    else:
        sys.exit(f"unknown flag {flag}")

_seq = 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _send(message: dict[str, object]) -> None:
    global _seq
    _seq += 1
    body = json.dumps({"seq": _seq, **message}).encode()
    _write_all(1, b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _answer(request: dict[str, object], body: object = None) -> None:
    _send(
        {
            "type": "response",
            "request_seq": request["seq"],
            "success": True,
            "command": request["command"],
            "body": body,
        }
    )


def _last_words() -> None:
    for i in range(1, outputs + 1):
        _send(
            {
                "type": "event",
                "event": "output",
                "body": {"category": "console", "output": f"last output {i}/{outputs}\n"},
            }
        )
    _write_all(2, b"last stderr line\n")


def _on_term(signum: int, frame: object) -> None:
    _last_words()
    os._exit(0)


def _read_messages() -> Iterator[dict[str, object]]:
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
        command = message.get("command")
        if command == "initialize":
            _answer(message, {"supportsConfigurationDoneRequest": True})
            _send({"type": "event", "event": "initialized"})
        elif command == "disconnect":
            if on_term:
                continue
            _answer(message)
            _last_words()
        elif command == "evaluate":
            arguments = message.get("arguments")
            if isinstance(arguments, dict) and arguments.get("expression") == "crash":
                _answer(message, {"result": "crashing", "variablesReference": 0})
                _last_words()
                os._exit(7)
            _answer(message, {"result": "", "variablesReference": 0})
        else:
            _answer(message)
    while on_term:
        time.sleep(60)  # the end of stdin is ignored: only SIGTERM ends it
    return 0


if __name__ == "__main__":
    sys.exit(main())
