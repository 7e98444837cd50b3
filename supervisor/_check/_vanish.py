"""The client that vanishes: a helper process that starts the program, initializes it, and
waits to be SIGKILLed by the checker.

Run as ``python -m supervisor._check._vanish lsp|dap PARAMS_JSON INITIALIZE_S -- PROGRAM
ARGS...`` (``INITIALIZE_S``: how long to wait for the ``initialize`` answer, seconds). It
starts the program through the project's spawn path (``_spawn.spawn``: a new session, a
clean signal state) but not as a supervised tree, so no watchdog of ours ends the program
when this helper dies: whatever happens next is the program's own doing.

It is the client an editor is: the LSP ``processId`` it sends is its own pid (the process
that then dies, as an editor's does), not the checker's, and it answers the program's
requests as an editor does (``_profiles.lsp_client_answer``) for as long as it lives. It
prints one JSON line, ``{"pid": N, "initialized": true|false, "early": [...]}``, once
``initialize`` was answered (or was not within the bound): ``early`` lists what the program
sent before that answer that the protocol does not allow there. Then it keeps reading until
it is killed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

import trio

from protocol import EOF, NEED_DATA, Frame, FrameDecoder, RemoteProtocolError, encode_frame

from .._process._spawn import DEVNULL, PIPE, spawn
from ._profiles import early_message_problem, lsp_client_answer

__all__ = ("main",)


def _is_initialize_answer(message: dict[str, Any], dap: bool) -> bool:
    # A response, not our request echoed back (``cat``).
    if dap:
        return message.get("type") == "response" and message.get("request_seq") == 1
    return message.get("id") == 1 and "method" not in message


def _answer(message: dict[str, Any], dap: bool, folders: list[Any]) -> dict[str, Any] | None:
    """What an editor answers to the program's request ``message`` (None: not a request)."""
    if dap:
        if message.get("type") != "request":
            return None
        return {
            "seq": 0,
            "type": "response",
            "request_seq": message.get("seq"),
            "command": message.get("command"),
            "success": False,
            "message": f"{message.get('command')} is not supported by the conformance checker",
        }
    if "method" not in message or "id" not in message:
        return None
    how, value = lsp_client_answer(str(message["method"]), message.get("params"), folders)
    return {"jsonrpc": "2.0", "id": message["id"], how: value}


async def _run(dap: bool, params: dict[str, Any], initialize_s: float, argv: list[str]) -> None:
    executable = shutil.which(argv[0]) or argv[0]
    process = spawn(executable, argv, dict(os.environ), stdin=PIPE, stdout=PIPE, stderr=DEVNULL)
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None
    assert stdout is not None
    if dap:
        message: dict[str, object] = {
            "seq": 1,
            "type": "request",
            "command": "initialize",
            "arguments": params,
        }
    else:
        # The process that owns the server, and that is about to die: this one.
        params = {**params, "processId": os.getpid()}
        message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    folders = params.get("workspaceFolders")
    folders = folders if isinstance(folders, list) else []

    sent: set[bytes] = set()

    async def send(message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        if len(sent) < 4096:
            sent.add(body)
        await stdin.send_all(encode_frame(body))

    await send(message)
    decoder = FrameDecoder()
    initialized = False
    told = False
    early: list[str] = []

    def tell() -> None:
        nonlocal told
        if not told:
            told = True
            hello = {"pid": process.pid, "initialized": initialized, "early": early}
            print(json.dumps(hello), flush=True)

    waiting = trio.CancelScope()

    async def bound() -> None:
        with waiting:
            await trio.sleep(initialize_s)
            tell()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(bound)
        try:
            while True:
                event = decoder.next_event()
                if event is NEED_DATA:
                    data = await stdout.receive_some(65536)
                    if not data:
                        decoder.receive_eof()
                    else:
                        decoder.receive_data(data)
                    continue
                if event is EOF:
                    break
                if not isinstance(event, Frame) or bytes(event.body) in sent:
                    continue  # text outside frames, or our own message echoed back
                try:
                    received = json.loads(event.body)
                except ValueError:
                    continue
                if not isinstance(received, dict):
                    continue
                if not told and _is_initialize_answer(received, dap):
                    initialized = True
                    if not dap:
                        await send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
                    tell()
                    waiting.cancel()
                    continue
                if not told:
                    problem = early_message_problem(received, dap=dap)
                    if problem is not None and len(early) < 16:
                        early.append(problem)
                answer = _answer(received, dap, folders)
                if answer is not None:
                    await send(answer)
        except (RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        # Its stdout ended before the bound: nothing more will come.
        tell()
        waiting.cancel()
    # Its stdout ended or broke: stay alive (as the client) until the checker kills us.
    await trio.sleep_forever()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    protocol, params, initialize_s, sep, *program = args
    if sep != "--" or not program or protocol not in ("lsp", "dap"):
        print("usage: _vanish lsp|dap PARAMS_JSON INITIALIZE_S -- PROGRAM ARGS...", file=sys.stderr)
        return 2
    trio.run(_run, protocol == "dap", json.loads(params), float(initialize_s), program)
    return 0


if __name__ == "__main__":
    sys.exit(main())
