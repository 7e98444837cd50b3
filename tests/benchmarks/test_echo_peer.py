"""bench_jsonrpc's echo peer (``benchmarks/echo_peer.py``) answers like a JSON-RPC peer: each
request once, in order, with its params (any JSON, ids of both kinds) or -32601."""

from __future__ import annotations

import subprocess
import sys

from benchmarks.bench_jsonrpc import ECHO_PEER
from protocol import (
    EOF,
    ErrorResponse,
    Frame,
    FrameDecoder,
    Message,
    Notification,
    Params,
    Request,
    Response,
    decode_message,
    encode_frame,
    encode_message,
)


def test_the_echo_peer_answers_each_request_once_in_order() -> None:
    params: list[Params | None] = [{"a": [1, 2.5, None], "t": "é\n"}, [], ["x"], None]
    messages: list[Message] = [Request(id=i, method="echo", params=p) for i, p in enumerate(params)]
    messages += [
        Notification(method="ignored", params=[1]),
        Request(id="s", method="echo", params=[True]),
        Request(id=9, method="nope", params=None),
        Notification(method="exit"),
        Request(id=10, method="echo", params=[10]),  # after exit: never answered
    ]
    stream = b"".join(encode_frame(encode_message(m)) for m in messages)
    done = subprocess.run(
        [sys.executable, ECHO_PEER], input=stream, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    decoder = FrameDecoder()
    decoder.receive_data(done.stdout)
    decoder.receive_eof()
    replies = []
    while (event := decoder.next_event()) is not EOF:
        assert isinstance(event, Frame)
        replies.append(decode_message(event.body))
    expected: list[object] = [Response(id=i, result=p) for i, p in enumerate(params)]
    assert replies[:-1] == [*expected, Response(id="s", result=[True])]
    last = replies[-1]
    assert isinstance(last, ErrorResponse)
    assert (last.id, last.error.code) == (9, -32601)
