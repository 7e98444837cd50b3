"""The client that vanishes: a helper process that starts the program, initializes it, and
waits to be SIGKILLed by the checker.

Run as ``python -m supervisor._check._vanish lsp|dap PARAMS_JSON INITIALIZE_S -- PROGRAM
ARGS...`` (``INITIALIZE_S``: how long to wait for the ``initialize`` answer, seconds). It
starts the program through the project's spawn path (``_spawn.spawn``: a new session, a
clean signal state) but not as a supervised tree, so no watchdog of ours ends the program
when this helper dies: whatever happens next is the program's own doing. It prints one JSON
line, ``{"pid": N, "initialized": true|false}``, once ``initialize`` was answered (or
failed), then sleeps.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import trio

from protocol import EOF, NEED_DATA, Frame, FrameDecoder, RemoteProtocolError, encode_frame

from .._process._spawn import DEVNULL, PIPE, spawn

__all__ = ("main",)


async def _run(dap: bool, params: object, initialize_s: float, argv: list[str]) -> None:
    executable = shutil.which(argv[0]) or argv[0]
    process = spawn(executable, argv, dict(os.environ), stdin=PIPE, stdout=PIPE, stderr=DEVNULL)
    assert process.stdin is not None
    assert process.stdout is not None
    if dap:
        message: dict[str, object] = {
            "seq": 1,
            "type": "request",
            "command": "initialize",
            "arguments": params,
        }
    else:
        message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    await process.stdin.send_all(encode_frame(json.dumps(message).encode()))
    decoder = FrameDecoder()
    initialized = False
    with trio.move_on_after(initialize_s):
        try:
            while not initialized:
                event = decoder.next_event()
                if event is NEED_DATA:
                    data = await process.stdout.receive_some(65536)
                    if not data:
                        decoder.receive_eof()
                    else:
                        decoder.receive_data(data)
                    continue
                if event is EOF:
                    break
                if isinstance(event, Frame):
                    answer = json.loads(event.body)
                    # A response, not our request echoed back (``cat``).
                    if isinstance(answer, dict) and (
                        answer.get("type") == "response" and answer.get("request_seq") == 1
                        if dap
                        else answer.get("id") == 1 and "method" not in answer
                    ):
                        initialized = True
        except (RemoteProtocolError, ValueError, trio.BrokenResourceError):
            pass
    if initialized and not dap:
        await process.stdin.send_all(
            encode_frame(
                json.dumps({"jsonrpc": "2.0", "method": "initialized", "params": {}}).encode()
            )
        )
    print(json.dumps({"pid": process.pid, "initialized": initialized}), flush=True)
    # Keep reading (as a live client does) until the checker kills us.
    with trio.move_on_after(3600):
        while await process.stdout.receive_some(65536):
            pass
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
