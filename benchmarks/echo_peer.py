"""The JSON-RPC echo peer of ``bench_jsonrpc``: as little work per request as a Python peer can do.

Run it as ``sys.executable benchmarks/echo_peer.py``; it serves stdin/stdout (LSP base-protocol
framing) until end of input or an ``exit`` notification. Every request is answered with its
params as its result (``echo``) or -32601 (any other method); other notifications are ignored.

Why not ``tests/peers/echo_server.py``: that peer is the tests' (hold, release, stray text, ...)
and builds each reply as a message object encoded by the standard library, several
microseconds per request. A row comparing two clients measured that peer instead of the clients
(both at its rate, 1.00x). This one cuts each read's frames with :class:`protocol.FrameDecoder`
(a window of small frames is one split), reads each body with msgspec into the three members
it needs, the params left as raw JSON, and writes every reply of a read with one ``write``,
copying the params' bytes into the reply. Both clients of a run talk to this same program; the
row's note gives its ceiling (a client with no per-request cost).
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):
    # Run as a script: make the repository's packages importable from any cwd.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import msgspec

from protocol import EOF, NEED_DATA, Frame, FrameDecoder, encode_frame


class _Call(msgspec.Struct, gc=False):
    id: int | str | None = None
    method: str = ""
    params: msgspec.Raw = msgspec.Raw(b"null")


_decode = msgspec.json.Decoder(_Call).decode
_encode = msgspec.json.Encoder().encode
_NOT_FOUND = b'{"code":-32601,"message":"Method not found"}'


def _reply(body: bytes) -> bytes | None:
    """The framed reply to one body, None for a notification; raises SystemExit on ``exit``."""
    call = _decode(body)
    if call.id is None:
        if call.method == "exit":
            raise SystemExit(0)
        return None
    request_id = b"%d" % call.id if type(call.id) is int else _encode(call.id)
    if call.method == "echo":
        reply = b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (request_id, call.params)
    else:
        reply = b'{"jsonrpc":"2.0","id":%s,"error":%s}' % (request_id, _NOT_FOUND)
    return encode_frame(reply)


def _write_all(out: list[bytes]) -> None:
    data = b"".join(out)
    out.clear()
    while data:
        data = data[os.write(1, data) :]


def main() -> int:
    """Serve until end of input or ``exit``; return the exit status."""
    decoder = FrameDecoder()
    out: list[bytes] = []
    try:
        while True:
            event = decoder.next_event()
            if type(event) is Frame:
                reply = _reply(event.body)
                if reply is not None:
                    out.append(reply)
            elif event is NEED_DATA:
                if out:
                    _write_all(out)
                chunk = os.read(0, 1 << 20)
                if chunk:
                    decoder.receive_data(chunk)
                else:
                    decoder.receive_eof()
            elif event is EOF:
                return 0
    finally:
        if out:
            _write_all(out)


if __name__ == "__main__":
    sys.exit(main())
