"""Debug a sample program with debugpy through ``supervisor serve`` and print where it stopped.

It starts ``supervisor serve`` as a child and speaks JSON-RPC 2.0 (LSP framing) to it over
stdin/stdout: ``debug.createSession`` over ``python -m debugpy.adapter`` (stdio), a breakpoint,
``debug.launch``, ``debug.waitEvents`` until ``stopped``, then the stack, the local variables
and an evaluation, and finally ``debug.disconnect``, which ends the adapter and the debuggee.
Run it from the repository root::

    .venv/bin/python examples/debug_serve.py

Plain blocking I/O and hand framing, on purpose: this is all a client needs.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from typing import IO, Any

SAMPLE = """\
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


print("fib(10) =", fib(10))
"""
BREAK_LINE = 5  # `return a`


class ServeClient:
    """Blocking JSON-RPC over a ``supervisor serve`` child; notifications are skipped."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.ids = itertools.count(1)

    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.stdin.flush()

    def _read(self) -> dict[str, Any]:
        length = 0
        while (line := self.stdout.readline().strip()) != b"":
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        message: dict[str, Any] = json.loads(self.stdout.read(length))
        return message

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        request_id = next(self.ids)
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        while True:
            message = self._read()
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result")

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})


def main() -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "fib.py")
        with open(program, "w") as f:
            f.write(SAMPLE)
        serve = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=root,
        )
        assert serve.stdin is not None
        assert serve.stdout is not None
        client = ServeClient(serve.stdin, serve.stdout)
        client.request("initialize", {"processId": os.getpid(), "capabilities": {}})
        client.notify("initialized")
        session = client.request(
            "debug.createSession",
            {
                "adapterId": "debugpy",
                "rootPath": tmp,
                "adapter": {"executable": sys.executable, "arguments": ["-m", "debugpy.adapter"]},
            },
        )
        sid = {"sessionId": session["sessionId"]}
        client.request(
            "debug.setBreakpoints",
            {**sid, "path": program, "breakpoints": [{"line": BREAK_LINE}]},
        )
        client.request(
            "debug.launch",
            {**sid, "configuration": {"program": program, "console": "internalConsole"}},
        )
        stopped = None
        while stopped is None:
            batch = client.request("debug.waitEvents", {**sid, "timeoutMilliseconds": 10_000})
            stopped = next((e for e in batch["events"] if e["event"] == "stopped"), None)
        stack = client.request(
            "debug.inspect", {**sid, "kind": "stackTrace", "threadId": stopped["threadId"]}
        )
        top = stack["result"]["stackFrames"][0]
        where = f"{top['source']['path']}:{top['line']}"
        print(f"stopped ({stopped['reason']}) in {top['name']} at {where}")
        scopes = client.request("debug.inspect", {**sid, "kind": "scopes", "frameId": top["id"]})
        local_ref = scopes["result"]["scopes"][0]["variablesReference"]
        variables = client.request(
            "debug.inspect", {**sid, "kind": "variables", "variablesReference": local_ref}
        )
        for variable in variables["result"]["variables"]:
            print(f"  {variable['name']} = {variable['value']}")
        value = client.request(
            "debug.inspect",
            {**sid, "kind": "evaluate", "expression": "a + b", "frameId": top["id"]},
        )
        print(f"  a + b -> {value['result']['result']}")
        ended = client.request("debug.disconnect", sid)
        print(f"session {ended['state']}: {ended['terminated']}")
        client.request("shutdown")
        client.notify("exit")
        return serve.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
