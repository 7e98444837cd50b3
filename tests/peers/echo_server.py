"""A JSON-RPC 2.0 echo peer over stdio (LSP base-protocol framing), for tests and benchmarks.

Run it as ``sys.executable tests/peers/echo_server.py``. It is a plain blocking loop: read
what stdin has, answer every complete frame, write all the answers with one ``write``. It
parses with our own :mod:`protocol` package, so it exercises the framer from the other side.

Requests:
    ``echo``: the result is the params (null when there are none).
    ``error``: an error response ``{code: params.code, message: params.message}``.
    ``hold``: no answer until a ``$/cancelRequest`` names it (then -32800) or ``release``
        is called (then each held request gets the result ``"released"``).
    ``release``: answers the held requests, then itself with their number.
    ``notify``: first sends the notification ``params.method`` with ``params.params``,
        then answers null.
    ``stray``: writes ``params.text`` to stdout outside any frame, then answers null.
    anything else: -32601.

Notifications: ``exit`` ends the process with status 0; others are ignored. End of stdin
ends the process with status 0. Nothing but frames (and what ``stray`` asks for) is ever
written to stdout.
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):
    # Run as a script: make the repository's packages importable from any cwd.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from protocol import (
    EOF,
    NEED_DATA,
    ErrorCode,
    ErrorObject,
    ErrorResponse,
    Frame,
    FrameDecoder,
    Notification,
    RemoteProtocolError,
    Request,
    Response,
    decode_message,
    encode_frame,
    encode_message,
)


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(1, view)
        view = view[written:]


def main() -> int:
    """Serve stdin/stdout until EOF or an ``exit`` notification; return the exit status."""
    decoder = FrameDecoder()
    held: dict[object, Request] = {}
    while True:
        out: list[bytes] = []
        while True:
            try:
                event = decoder.next_event()
            except RemoteProtocolError as exc:
                sys.stderr.write(f"echo_server: broken stream: {exc}\n")
                return 1
            if event is NEED_DATA:
                break
            if event is EOF:
                _write_all(b"".join(out))
                return 0
            if not isinstance(event, Frame):
                continue
            try:
                message = decode_message(event.body)
            except RemoteProtocolError as exc:
                out.append(
                    encode_frame(
                        encode_message(
                            ErrorResponse(exc.request_id, ErrorObject(exc.error_code, str(exc)))
                        )
                    )
                )
                continue
            if isinstance(message, Notification):
                if message.method == "exit":
                    _write_all(b"".join(out))
                    return 0
                if message.method == "$/cancelRequest" and isinstance(message.params, dict):
                    cancelled = held.pop(message.params.get("id"), None)
                    if cancelled is not None:
                        out.append(
                            encode_frame(
                                encode_message(
                                    ErrorResponse(
                                        cancelled.id,
                                        ErrorObject(
                                            ErrorCode.REQUEST_CANCELLED, "Request cancelled"
                                        ),
                                    )
                                )
                            )
                        )
                continue
            if not isinstance(message, Request):
                continue
            out.extend(_answer(message, held))
        _write_all(b"".join(out))
        data = os.read(0, 65536)
        if data:
            decoder.receive_data(data)
        else:
            decoder.receive_eof()


def _answer(request: Request, held: dict[object, Request]) -> list[bytes]:
    method, params = request.method, request.params
    reply: Response | ErrorResponse
    frames: list[bytes] = []
    if method == "echo":
        reply = Response(id=request.id, result=params)
    elif method == "error" and isinstance(params, dict):
        code, message = params.get("code"), params.get("message")
        reply = ErrorResponse(
            request.id,
            ErrorObject(
                code if isinstance(code, int) else ErrorCode.INTERNAL_ERROR,
                message if isinstance(message, str) else "error",
            ),
        )
    elif method == "hold":
        held[request.id] = request
        return []
    elif method == "release":
        frames.extend(
            encode_frame(encode_message(Response(id=waiting.id, result="released")))
            for waiting in held.values()
        )
        reply = Response(id=request.id, result=len(held))
        held.clear()
    elif method == "notify" and isinstance(params, dict) and isinstance(params.get("method"), str):
        note_method = params["method"]
        assert isinstance(note_method, str)
        note_params = params.get("params")
        note = Notification(
            method=note_method,
            params=note_params if isinstance(note_params, dict | list) else None,
        )
        frames.append(encode_frame(encode_message(note)))
        reply = Response(id=request.id, result=None)
    elif method == "stray" and isinstance(params, dict) and isinstance(params.get("text"), str):
        text = params["text"]
        assert isinstance(text, str)
        frames.append(text.encode())
        reply = Response(id=request.id, result=None)
    else:
        reply = ErrorResponse(
            request.id, ErrorObject(ErrorCode.METHOD_NOT_FOUND, f"Method not found: {method}")
        )
    frames.append(encode_frame(encode_message(reply)))
    return frames


if __name__ == "__main__":
    sys.exit(main())
