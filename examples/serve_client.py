"""A small client of ``supervisor serve``: the session an editor backend would drive.

It starts ``supervisor serve`` as a child, and over its stdin/stdout (JSON-RPC 2.0 with LSP
framing) it initializes, runs one command, starts a build job on a lane and prints the job
notifications as they arrive, cancels a long command with ``$/cancelRequest``, then shuts
down and exits. Run it from the repository root::

    .venv/bin/python examples/serve_client.py

The framing and message model come from this project's sans-I/O ``protocol`` package; the
Trio side is a plain read loop, to show what a client needs and nothing more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import trio

from protocol import (
    EOF,
    NEED_DATA,
    Batch,
    ErrorResponse,
    Frame,
    FrameDecoder,
    Notification,
    Request,
    Response,
    decode_message,
    encode_frame,
    encode_message,
)

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue, Message

HERE = os.path.dirname(os.path.abspath(__file__))


class ServeClient:
    """Sends requests, matches replies by id, prints notifications as they arrive."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._decoder = FrameDecoder()
        self._next_id = 0

    async def _send(self, message: Message) -> None:
        await self._stdin.send_all(encode_frame(encode_message(message)))

    async def _next_message(self) -> Message | None:
        while True:
            event = self._decoder.next_event()
            if isinstance(event, Frame):
                decoded = decode_message(event.body)
                assert not isinstance(decoded, Batch), "the server never sends batches"
                return decoded
            if event is EOF:
                return None
            if event is NEED_DATA:
                data = await self._stdout.receive_some(65536)
                if data:
                    self._decoder.receive_data(data)
                else:
                    self._decoder.receive_eof()

    async def notify(self, method: str, params: JSONObject | None = None) -> None:
        await self._send(Notification(method, params))

    async def send_request(self, method: str, params: JSONObject | None = None) -> int:
        self._next_id += 1
        await self._send(Request(self._next_id, method, params))
        return self._next_id

    async def _next_printed(self) -> Message:
        """The next message; a notification is printed as it arrives."""
        message = await self._next_message()
        if message is None:
            raise RuntimeError("the server closed its output")
        if isinstance(message, Notification):
            print(f"  <- {message.method} {json.dumps(message.params)}")
        return message

    async def reply(self, request_id: int) -> Response | ErrorResponse:
        """Read until the reply to ``request_id``; print notifications on the way."""
        while True:
            message = await self._next_printed()
            if isinstance(message, Response | ErrorResponse) and message.id == request_id:
                return message

    async def wait_notification(self, method: str) -> Notification:
        """Read until a notification ``method`` arrives; print every notification on the way."""
        while True:
            message = await self._next_printed()
            if isinstance(message, Notification) and message.method == method:
                return message

    async def call(self, method: str, params: JSONObject | None = None) -> JSONValue:
        """Send a request and return its result, or ``{"error": {code, message, data}}``."""
        reply = await self.reply(await self.send_request(method, params))
        if isinstance(reply, ErrorResponse):
            error = reply.error
            return {"error": {"code": error.code, "message": error.message, "data": error.data}}
        return reply.result


async def main() -> int:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "supervisor", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    client = ServeClient(process)
    try:
        result = await client.call("initialize", {"processId": os.getpid(), "capabilities": {}})
        print(f"initialize -> {json.dumps(result)[:120]}...")
        await client.notify("initialized", {})

        ran = await client.call(
            "process.run", {"argv": [sys.executable, "-c", "print('hello from a child')"]}
        )
        print(f"process.run -> {json.dumps(ran)}")

        project = os.path.join(HERE, "project")
        job = await client.call(
            "job.start",
            {
                "kind": "test",
                "root": project,
                "argv": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                "cwd": project,
                "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
            },
        )
        print(f"job.start -> {json.dumps(job)}; notifications follow")
        await client.wait_notification("job.finished")

        long_id = await client.send_request(
            "process.run", {"argv": [sys.executable, "-c", "import time; time.sleep(60)"]}
        )
        await trio.sleep(0.5)
        await client.notify("$/cancelRequest", {"id": long_id})
        cancelled = await client.reply(long_id)
        assert isinstance(cancelled, ErrorResponse)
        print(f"cancelled process.run -> error {cancelled.error.code} {cancelled.error.message}")

        # shutdown waits for requests in flight, then ends every lane and process (a job
        # still running would end cancelled, its job.finished arriving before the reply).
        print(f"shutdown -> {await client.call('shutdown')}")
        await client.notify("exit")
        with trio.fail_after(10):
            status = await process.wait()
        print(f"supervisor serve exited with {status}")
        return 0 if status == 0 else 1
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()


if __name__ == "__main__":
    raise SystemExit(trio.run(main))
