"""A scripted plugin backend for the host-side plugin-function tests (issue 6).

Usage: plugin_backend.py FUNCTIONS_ANSWER [LOGGING_ANSWER [INITIALIZE_DELAY_MS [EARLY_FACT]]]
  FUNCTIONS_ANSWER: the JSON of ``capabilities.experimental.litheFunctions`` it answers
  (``null`` answers none); LOGGING_ANSWER likewise for ``litheLogging``;
  INITIALIZE_DELAY_MS: how long it waits before answering ``initialize`` (default 0);
  EARLY_FACT: the JSON of a ``lithe/log`` fact it sends before that answer.

It does what real SDK backends rarely do on purpose (malformed negotiation, late progress,
results over the bound, host-request floods). Functions, by ID: ``echo.value``,
``slow.wait`` (never answers), ``progress.report`` (``reports`` before the reply, ``after``
after it), ``fail.now`` (error with ``data.code``), ``big.result``, ``host.call``
(``requests``: host requests sent at once; answers with their replies), ``host.cancel``
(one host request, then ``$/cancelRequest`` for it), ``reg.change`` (sends ``requests`` of
register/unregister), ``log.send`` (``facts``), ``seen.get`` (what the host sent: cancels
by wire operationID, notifications, the initialize capabilities), ``no.result`` (a reply with
neither result nor error; ``arrivals``: every invoke and notification in arrival order, as
``"invoke FUNCTION N"`` / ``"METHOD ID"``, N the params' ``n``, ID its ``commandID``),
``stop.reading`` (answers, then never reads its input again: the
host's writes to it block once the pipe is full), ``progress.stale`` (a progress report
``stale`` for every earlier call's wire operationID, one ``current`` for its own, then
answers), ``launch.resolve`` (a backend-resolved launch's answer, see its docstring),
``late.reply`` (blocks ``ms`` milliseconds, then reports progress and answers,
whatever the host did meanwhile; with ``announce`` it reports ``not reading`` first),
``last.words`` (answers ``"last"``, sends
``window/logMessage`` with ``message``, writes ``last words on stderr`` to stderr and exits 5
at once). Requests it serves outside any call, so that a session
that negotiated nothing can be driven too: ``test/send`` (``requests`` sent at once,
answered with their replies, as ``host.call``) and ``test/seen`` (as ``seen.get``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

#: A decoded JSON-RPC message: this peer reads arbitrary JSON, so its fields stay ``Any``.
Message = dict[str, Any]
Callback = Callable[[Message], None]

inp = sys.stdin.buffer
out = sys.stdout.buffer
functions_answer = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
logging_answer = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
initialize_delay_s = int(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0
#: A ``lithe/log`` fact sent before the ``initialize`` answer (too early: the host rejects it).
early_fact = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None

next_id = 1000
waiting: dict[int, Callback] = {}  # our request id -> callback(reply)
invokes: dict[object, str] = {}  # host request id -> wire operationID
cancels: list[str | None] = []  # wire operationIDs the host cancelled
notifications: list[Message] = []
arrivals: list[str] = []
seen: Message = {
    "cancels": cancels,
    "notifications": notifications,
    "initialize": None,
    "arrivals": arrivals,
}


def send(message: Message, *, flush: bool = True) -> None:
    body = json.dumps(message).encode()
    out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    if flush:
        out.flush()


def read() -> Message | None:
    length = None
    while True:
        line = inp.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    assert length is not None
    message = json.loads(inp.read(length))
    assert isinstance(message, dict)
    return message


def request(method: str, params: object, callback: Callback, *, flush: bool = True) -> int:
    global next_id
    next_id += 1
    waiting[next_id] = callback
    send({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}, flush=flush)
    return next_id


def reply(rid: object, result: object) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def gather(rid: object, requests: list[tuple[str, object]]) -> None:
    """Send every request now; answer ``rid`` with all replies once they are in."""
    replies: list[Message | None] = [None] * len(requests)
    left = [len(requests)]

    def make(i: int) -> Callback:
        def done(message: Message) -> None:
            replies[i] = {k: message[k] for k in ("result", "error") if k in message}
            left[0] -= 1
            if left[0] == 0:
                reply(rid, replies)

        return done

    for i, (method, params) in enumerate(requests):
        request(method, params, make(i))
    if not requests:
        reply(rid, [])


def progress(wire: str, message: str) -> Message:
    return {
        "jsonrpc": "2.0",
        "method": "lithe/function/progress",
        "params": {"operationID": wire, "message": message},
    }


def launch_resolve(rid: object, params: Message, args: Message) -> None:
    """A backend-resolved launch: ``settings.answer`` is the answer (``@fake`` is the fake
    language server's path, ``@state`` the state directory), with the params and context it
    got as ``initializationOptions``; ``settings.mode`` ``fail`` answers an error, ``hang``
    never answers."""
    settings = args.get("settings", {})
    if settings.get("mode") == "fail":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "no server"}})
        return
    if settings.get("mode") == "hang":
        return
    fake = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lsp_fake.py")
    text = json.dumps(settings.get("answer", {}))
    text = text.replace("@fake", fake).replace("@state", args.get("stateDirectory", ""))
    answer = json.loads(text)
    answer.setdefault(
        "initializationOptions", {"resolveParams": args, "context": params.get("context")}
    )
    reply(rid, answer)


def invoke(rid: object, params: Message) -> None:
    fid = params["functionID"]
    wire = params["operationID"]
    args = params.get("params", {})
    invokes[rid] = wire
    arrivals.append(f"invoke {fid} {args.get('n') if isinstance(args, dict) else None}")
    if fid == "echo.value":
        reply(rid, args.get("value"))
    elif fid == "launch.resolve":
        launch_resolve(rid, params, args)
    elif fid == "slow.wait":
        pass
    elif fid == "progress.report":
        for report in args.get("reports", []):
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "lithe/function/progress",
                    "params": {"operationID": wire, **report},
                }
            )
        reply(rid, "done")
        for report in args.get("after", []):
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "lithe/function/progress",
                    "params": {"operationID": wire, **report},
                }
            )
    elif fid == "fail.now":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "error": {
                    "code": -32000,
                    "message": args.get("message", "failed"),
                    "data": {"code": args.get("code")},
                },
            }
        )
    elif fid == "big.result":
        reply(rid, "x" * (1024 * 1024 + 10))
    elif fid == "no.result":
        send({"jsonrpc": "2.0", "id": rid})
    elif fid == "progress.stale":
        # By request id, not by wire id: were the wire ids derived from the host's ids,
        # an earlier call's would equal this one's.
        for earlier in [w for r, w in invokes.items() if r != rid]:
            send(progress(earlier, args.get("stale", "stale")))
        send(progress(wire, args.get("current", "current")))
        reply(rid, None)
    elif fid == "late.reply":
        if args.get("announce"):
            send(progress(wire, "not reading"))  # the caller knows the pause has begun
        time.sleep(args.get("ms", 0) / 1000)  # reads nothing meanwhile: the reply is late
        send(progress(wire, "late"))
        reply(rid, "late")
    elif fid == "last.words":
        reply(rid, "last")
        log = {"type": 3, "message": args.get("message", "last words")}
        send({"jsonrpc": "2.0", "method": "window/logMessage", "params": log})
        sys.stderr.buffer.write(b"last words on stderr\n")
        sys.stderr.buffer.flush()
        os._exit(5)
    elif fid == "stop.reading":
        reply(rid, None)
        time.sleep(3600)  # SIGTERM ends it
    elif fid in ("host.call", "reg.change"):
        gather(rid, [(r["method"], r.get("params")) for r in args.get("requests", [])])
    elif fid == "host.cancel":
        # The request and its cancel in one write: the host reads them together, so the
        # cancel always comes before the request could end (a loaded machine split them).
        hid = request(
            args["method"], args.get("params"), lambda m: reply(rid, m.get("error")), flush=False
        )
        send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": hid}})
    elif fid == "log.send":
        for fact in args.get("facts", []):
            send({"jsonrpc": "2.0", "method": "lithe/log", "params": fact})
        reply(rid, None)
    elif fid == "seen.get":
        reply(rid, seen)
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": fid}})


def main() -> None:
    while True:
        message = read()
        if message is None:
            return
        method = message.get("method")
        if method is None:
            reply_id = message.get("id")
            callback = waiting.pop(reply_id, None) if isinstance(reply_id, int) else None
            if callback is not None:
                callback(message)
            continue
        params: Any = message.get("params")
        if "id" not in message:
            if method == "$/cancelRequest":
                cancels.append(invokes.get(params["id"]))
            elif method == "exit":
                return
            else:
                notifications.append({"method": method, "params": params})
                command = params.get("commandID") if isinstance(params, dict) else None
                arrivals.append(f"{method} {command}")
            continue
        rid = message["id"]
        if method == "initialize":
            time.sleep(initialize_delay_s)
            if early_fact is not None:
                send({"jsonrpc": "2.0", "method": "lithe/log", "params": early_fact})
            seen["initialize"] = params["capabilities"].get("experimental")
            experimental: Message = {}
            if functions_answer is not None:
                experimental["litheFunctions"] = functions_answer
            if logging_answer is not None:
                experimental["litheLogging"] = logging_answer
            reply(rid, {"capabilities": {"experimental": experimental}})
        elif method == "shutdown":
            reply(rid, None)
        elif method == "lithe/function/invoke":
            invoke(rid, params)
        elif method == "test/send":
            gather(rid, [(r["method"], r.get("params")) for r in params.get("requests", [])])
        elif method == "test/seen":
            reply(rid, seen)
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})


main()
