"""Print a Python file's diagnostics from a language server run by ``supervisor serve``.

Usage::

    python examples/lsp_diagnostics.py PATH [--server pylsp|ruff]

It starts ``supervisor serve`` as a child, talks JSON-RPC to it over stdio (LSP base-protocol
framing, written by hand here to show the wire), and asks it for ``lsp.startServer`` (pylsp by
default, resolved next to this interpreter), ``lsp.syncDocument`` with the file's text, then
``lsp.waitEvents`` until the server's ``diagnostics`` for version 1 arrive. It prints one
``path:line:column: [code] message`` line per diagnostic, stops the server
(``lsp.stopServer``) and ends serve with ``shutdown`` + ``exit``. Exit status: 0 without
diagnostics, 1 with some, 2 on an error.

pylsp reports diagnostics only through its linter plugins (pyflakes, pycodestyle, ...); with
none installed its list is empty, while ``--server ruff`` always lints.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

import trio

BIN = os.path.dirname(sys.executable)
SERVERS = {"pylsp": [os.path.join(BIN, "pylsp")], "ruff": [os.path.join(BIN, "ruff"), "server"]}
TIMEOUT_S = 60
#: ``supervisor`` is importable from here when it is not installed.
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ServeClient:
    """JSON-RPC over a ``supervisor serve`` child's stdin/stdout."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._buffer = b""
        self._next_id = 0

    async def _read(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self._buffer:
            chunk = await self._stdout.receive_some(65536)
            if not chunk:
                raise RuntimeError("supervisor serve closed its output")
            self._buffer += chunk
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += await self._stdout.receive_some(65536)
        self._buffer = rest[length:]
        message: dict[str, Any] = json.loads(rest[:length])
        return message

    async def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        await self._stdin.send_all(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request and return its result; raise RuntimeError for an error reply."""
        self._next_id += 1
        await self.send({"id": self._next_id, "method": method, "params": params or {}})
        while True:
            message = await self._read()
            if message.get("id") != self._next_id or "method" in message:
                continue  # a notification (job.*), not our reply
            if "error" in message:
                error = message["error"]
                code = (error.get("data") or {}).get("code", error.get("code"))
                raise RuntimeError(f"{method}: {code}: {error.get('message')}")
            return message.get("result")


async def diagnostics_of(path: str, text: str, server: str) -> list[dict[str, Any]]:
    """Run serve + the language server, return the diagnostics of ``path`` (absolute)."""
    uri = "file://" + path
    root = os.path.dirname(path)
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "supervisor", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPOSITORY,
    )
    try:
        with trio.fail_after(TIMEOUT_S):
            client = ServeClient(process)
            await client.call("initialize", {"processId": os.getpid(), "capabilities": {}})
            await client.send({"method": "initialized", "params": {}})
            argv = SERVERS[server]
            started = await client.call(
                "lsp.startServer",
                {
                    "serverId": server,
                    "executable": argv[0],
                    "arguments": argv[1:],
                    "workingDirectory": root,
                    "rootUri": "file://" + root,
                },
            )
            sid = started["sessionId"]
            await client.call(
                "lsp.syncDocument",
                {"sessionId": sid, "uri": uri, "languageId": "python", "text": text},
            )
            found: list[dict[str, Any]] | None = None
            while found is None:
                batch = await client.call(
                    "lsp.waitEvents", {"sessionId": sid, "timeoutMilliseconds": 10_000}
                )
                for event in batch["events"]:
                    if event["event"] == "diagnostics" and event["uri"] == uri:
                        found = list(event["diagnostics"])
                    elif event["event"] == "stateChanged" and event["state"] == "failed":
                        raise RuntimeError(f"the language server failed: {event.get('error')}")
            await client.call("lsp.stopServer", {"sessionId": sid})
            await client.call("shutdown")
            await client.send({"method": "exit"})
            await process.wait()
            return found
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                # Closing serve's stdin makes it clean up everything it started.
                if process.stdin is not None:
                    await process.stdin.aclose()
                with trio.move_on_after(10):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def main(argv: list[str] | None = None) -> int:
    """Print the diagnostics of the file named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--server", choices=sorted(SERVERS), default="pylsp")
    args = parser.parse_args(argv)
    path = os.path.abspath(args.path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found = trio.run(diagnostics_of, path, text, args.server)
    except (OSError, RuntimeError, trio.TooSlowError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for diagnostic in found:
        start = diagnostic["range"]["start"]
        code = diagnostic.get("code")
        prefix = f"[{code}] " if code else ""
        print(
            f"{args.path}:{start['line'] + 1}:{start['character'] + 1}: "
            f"{prefix}{diagnostic['message']}"
        )
    if not found:
        print(f"{args.path}: no diagnostics ({args.server})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
