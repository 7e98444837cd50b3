"""A single-threaded, blocking JSON-RPC peer that asks before it answers (LSP framing).

Run it as ``sys.executable tests/peers/asking_server.py``. For every request it reads it
first sends a request of its own (``workspace/configuration``, as language servers do while
they work), then the answer (``{"n": <requests read so far>}``). Each message is written
with a blocking ``write`` and ``flush`` and nothing is read meanwhile, as many servers do
(pygls, for one): when we stop reading its output, it stops reading our input. The answers
to its own requests are read and not waited for. End of stdin ends it with status 0.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    read = sys.stdin.buffer
    write = sys.stdout.buffer
    count = 0
    while True:
        line = read.readline()
        if not line:
            return
        length = 0
        while line not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            line = read.readline()
        message = json.loads(read.read(length))
        if "method" not in message or "id" not in message:
            continue  # an answer to one of ours, or a notification
        count += 1
        for out in (
            {
                "jsonrpc": "2.0",
                "id": f"ask-{count}",
                "method": "workspace/configuration",
                "params": {"items": [{"section": "asking"}]},
            },
            {"jsonrpc": "2.0", "id": message["id"], "result": {"n": count}},
        ):
            body = json.dumps(out).encode()
            write.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            write.flush()


if __name__ == "__main__":
    main()
