"""Servers built to fail one conformance check each (``supervisor check``), for what the
testbed's programs do not cover. Each is the testbed's well-behaved server with one flaw.

Run as ``sys.executable tests/peers/check_fakes.py FLAW [--protocol lsp|dap]``:

    drop-cancelled     hold each ordinary request 300 ms; one cancelled meanwhile is dropped
                       (never answered): fails ``cancel``
    orphan-helper      at initialize, start a helper in a new session that ignores SIGHUP and
                       SIGTERM and is never ended: fails ``no-leftovers`` (and ``restart``)
    quit-when-blocked  stdout non-blocking; exit 1 as soon as a write would block: fails
                       ``client-stops-reading``
    stdout-log         print a log line on stdout before each answer: fails ``stdout-frames``
    stdout-banner      print a coloured banner line (terminal escapes, 96 bytes) on stdout
                       before the initialize answer: fails ``stdout-frames``
    stdout-flood       print 74 375 bytes of log lines on stdout (past the 64 KiB of stray
                       text tolerated between frames) before the shutdown answer: fails
                       ``stdout-frames``, its stdout no frame stream
    serial-workspace-symbol
                       work through requests one at a time, and take 60 s over
                       ``workspace/symbol`` (as a server that indexes the whole environment
                       for it): passes only when the checker never sends it
    watch-process-id   ignore the end of stdin; exit 1 once the ``processId`` of ``initialize``
                       is gone (polled every 100 ms with kill(pid, 0)): passes
                       ``client-vanishes`` only when the client that dies sent its own pid
    run-in-terminal    (DAP) launch the debuggee (``launch`` argument ``program``, run by this
                       Python) through the ``runInTerminal`` reverse request; the ``process``
                       event names the pid the client answered; ``disconnect`` kills it: passes
                       ``launch`` only when the client serves runInTerminal
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import signal
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from supervisor.testbed import _programs as tb


def drop_cancelled(options: argparse.Namespace) -> int:
    cancelled: set[Any] = set()
    lock = threading.Lock()

    def later(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> None:
        time.sleep(0.3)
        with lock:
            if request_id in cancelled:
                return  # the flaw: a cancelled request gets no response at all
        tb._answer(peer, request_id, method, message)

    def hook(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method in ("initialize", peer.shutdown_method):
            return False
        threading.Thread(target=later, args=(peer, request_id, method, message)).start()
        return True

    def on_notification(peer: tb.Peer, message: dict[str, Any]) -> None:
        if message.get("method") == "$/cancelRequest":
            with lock:
                cancelled.add((message.get("params") or {}).get("id"))

    return tb._serve(options, hook, on_notification)


def orphan_helper(options: argparse.Namespace) -> int:
    def hook(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == "initialize" and os.fork() == 0:
            os.setsid()
            for signum in (signal.SIGHUP, signal.SIGTERM):
                signal.signal(signum, signal.SIG_IGN)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            while True:
                time.sleep(3600)
        return False

    return tb._serve(options, hook)


def quit_when_blocked(options: argparse.Namespace) -> int:
    flags = fcntl.fcntl(1, fcntl.F_GETFL)
    fcntl.fcntl(1, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    try:
        return tb._serve(options)
    except BlockingIOError:
        os.write(2, b"stdout would block: giving up\n")
        return 1


def stdout_log(options: argparse.Namespace) -> int:
    def hook(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        peer.write_raw(f"handling {method}\n".encode())
        return False

    return tb._serve(options, hook)


#: What ``stdout-banner`` prints: escapes a terminal would act on, and longer than the sample.
BANNER = b"\x1b[1;32mmy-server 1.0\x1b[0m ready \xe2\x9c\x93 " + b"=" * 60 + b"\n"


def stdout_banner(options: argparse.Namespace) -> int:
    def hook(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == "initialize":
            peer.write_raw(BANNER)
        return False

    return tb._serve(options, hook)


def stdout_flood(options: argparse.Namespace) -> int:
    def hook(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == peer.shutdown_method:
            peer.write_raw(b"".join(b"flood line %05d\n" % i for i in range(4375)))
        return False

    return tb._serve(options, hook)


def serial_workspace_symbol(options: argparse.Namespace) -> int:
    def hook(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == "workspace/symbol":
            time.sleep(60)  # in the one loop: every later request waits behind it
            peer.reply(request_id, method, [])
            return True
        return False

    return tb._serve(options, hook)


def watch_process_id(options: argparse.Namespace) -> int:
    def watch(client: int) -> None:
        while True:
            try:
                os.kill(client, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass
            time.sleep(0.1)

    def hook(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        client = (message.get("params") or {}).get("processId")
        if method == "initialize" and isinstance(client, int):
            threading.Thread(target=watch, args=(client,), daemon=True).start()
        return False

    tb._serve(options, hook)
    while True:  # the end of stdin is not the end: only the client's death is
        time.sleep(3600)


def run_in_terminal(options: argparse.Namespace) -> int:
    debuggee: list[int] = []
    launch: dict[str, Any] = {}

    def hook(peer: tb.Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == "launch":
            launch["id"] = request_id
            program = (message.get("arguments") or {}).get("program")
            peer.send_request(
                "runInTerminal",
                {"kind": "integrated", "cwd": os.getcwd(), "args": [sys.executable, program]},
            )
            return True
        if method == "configurationDone":
            peer.reply(request_id, method, None)
            return True
        if method == "disconnect":
            for pid in debuggee:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            peer.reply(request_id, method, None)
            os._exit(0)
        return False

    def on_message(peer: tb.Peer, message: dict[str, Any]) -> None:
        if message.get("type") != "response" or message.get("command") != "runInTerminal":
            return
        body = message.get("body") or {}
        if message.get("success") and isinstance(body.get("processId"), int):
            debuggee.append(body["processId"])
            peer.reply(launch["id"], "launch", None)
            peer.notify("process", {"name": "debuggee", "systemProcessId": body["processId"]})
        else:
            peer.write(
                {
                    "type": "response",
                    "request_seq": launch["id"],
                    "success": False,
                    "command": "launch",
                    "message": f"runInTerminal failed: {message.get('message')}",
                }
            )

    return tb._serve(options, hook, on_message)


FLAWS = {
    "drop-cancelled": drop_cancelled,
    "orphan-helper": orphan_helper,
    "quit-when-blocked": quit_when_blocked,
    "stdout-log": stdout_log,
    "stdout-banner": stdout_banner,
    "stdout-flood": stdout_flood,
    "serial-workspace-symbol": serial_workspace_symbol,
    "watch-process-id": watch_process_id,
    "run-in-terminal": run_in_terminal,
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("flaw", choices=sorted(FLAWS))
    parser.add_argument("--protocol", choices=("lsp", "dap"), default=None)
    options = parser.parse_args()
    return FLAWS[options.flaw](options)


if __name__ == "__main__":
    sys.exit(main())
