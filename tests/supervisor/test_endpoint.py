"""Tests for the Trio JSON-RPC endpoint (issue 2 §4; DESIGN.md invariants 4, 6, 9).

Two shapes, as h11's ConnectionPair: two endpoints wired back to back over
``trio.testing.memory_stream_pair``, and one endpoint facing a hand-driven ``RawPeer`` that
writes frames byte for byte (late replies, duplicates, unknown ids, garbage) and decodes what
the endpoint writes. One test runs a real subprocess peer (tests/peers/echo_server.py).
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from protocol import (
    NEED_DATA,
    ErrorObject,
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
from supervisor._endpoint import (
    EndpointClosed,
    JSONRPCEndpoint,
    JSONRPCError,
    ReplyWithoutResult,
    method_not_found,
    open_jsonrpc_endpoint,
)
from supervisor._flow import current_answer_room

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from protocol import JSONObject, JSONValue, Params
    from supervisor._endpoint import NotificationHandler, RequestHandler

PEERS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "peers")
ECHO_SERVER = os.path.join(PEERS, "echo_server.py")
ASKING_SERVER = os.path.join(PEERS, "asking_server.py")

Message = Request | Notification | Response | ErrorResponse


async def echo_handler(method: str, params: JSONValue | None) -> JSONValue:
    if method == "echo":
        return params
    raise method_not_found(method)


def frame(message: Message) -> bytes:
    return encode_frame(encode_message(message))


class RawPeer:
    """The far end of an endpoint, driven by hand: raw bytes out, decoded messages in."""

    def __init__(self, stream: trio.abc.HalfCloseableStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send_message(self, message: Message) -> None:
        await self.send(frame(message))

    async def receive(self) -> Message:
        while True:
            event = self.decoder.next_event()
            if isinstance(event, Frame):
                decoded = decode_message(event.body)
                assert not isinstance(decoded, list)
                assert isinstance(decoded, (Request, Notification, Response, ErrorResponse))
                return decoded
            assert event is NEED_DATA, event
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.decoder.receive_data(data)

    async def receive_nothing_more(self) -> None:
        """Assert that the endpoint writes nothing more, once everything is idle."""
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(0):
            got = await self.receive()
            pytest.fail(f"unexpected message {got!r}")


@asynccontextmanager
async def raw_pair(
    *,
    request_handler: RequestHandler = echo_handler,
    notification_handler: NotificationHandler | None = None,
    max_inbound_concurrency: int = 128,
    max_body_bytes: int = 1 << 20,
) -> AsyncIterator[tuple[JSONRPCEndpoint, RawPeer]]:
    ours, theirs = trio.testing.memory_stream_pair()
    async with open_jsonrpc_endpoint(
        ours.send_stream,
        ours.receive_stream,
        request_handler=request_handler,
        notification_handler=notification_handler,
        max_inbound_concurrency=max_inbound_concurrency,
        max_body_bytes=max_body_bytes,
    ) as endpoint:
        yield endpoint, RawPeer(theirs)


# -- requests between two endpoints ------------------------------------------------------------


async def test_request_round_trip_between_two_endpoints() -> None:
    a_side, b_side = trio.testing.memory_stream_pair()
    async with (
        open_jsonrpc_endpoint(
            a_side.send_stream, a_side.receive_stream, request_handler=echo_handler, name="a"
        ) as a,
        open_jsonrpc_endpoint(
            b_side.send_stream, b_side.receive_stream, request_handler=echo_handler, name="b"
        ) as b,
    ):
        assert await a.request("echo", {"x": [1, "two", None]}) == {"x": [1, "two", None]}
        assert await b.request("echo", [3]) == [3]
        assert await a.request("echo") is None
        with pytest.raises(JSONRPCError) as info:
            await b.request("nope")
        assert info.value.code == -32601
        assert "nope" in info.value.message
        assert a.statistics().pending_requests == 0
        assert b.statistics().running_handlers == 0


async def test_concurrent_inbound_requests_each_run_in_their_own_task() -> None:
    started = 0
    release = trio.Event()

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        nonlocal started
        started += 1
        await release.wait()
        return params

    a_side, b_side = trio.testing.memory_stream_pair()
    results: list[JSONValue] = []
    async with (
        open_jsonrpc_endpoint(a_side.send_stream, a_side.receive_stream, request_handler=handler),
        open_jsonrpc_endpoint(
            b_side.send_stream, b_side.receive_stream, request_handler=echo_handler
        ) as b,
        trio.open_nursery() as nursery,
    ):

        async def call(n: int) -> None:
            results.append(await b.request("slow", [n]))

        for n in range(5):
            nursery.start_soon(call, n)
        await trio.testing.wait_all_tasks_blocked()
        assert started == 5
        assert b.statistics().pending_requests == 5
        release.set()
    assert sorted(results, key=str) == [[0], [1], [2], [3], [4]]


async def test_handler_jsonrpc_error_becomes_error_response() -> None:
    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        raise JSONRPCError(-32001, "custom failure", {"code": "busy"})

    async with raw_pair(request_handler=handler) as (endpoint, peer):
        await peer.send_message(Request(id=5, method="x", params=None))
        reply = await peer.receive()
        assert isinstance(reply, ErrorResponse)
        assert (reply.id, reply.error.code, reply.error.message, reply.error.data) == (
            5,
            -32001,
            "custom failure",
            {"code": "busy"},
        )
        assert not endpoint.closed


async def test_method_not_found_helper() -> None:
    error = method_not_found("foo/bar")
    assert error.code == -32601
    assert "foo/bar" in error.message
    async with raw_pair() as (_, peer):
        await peer.send_message(Request(id="q", method="unknown/method", params=[1]))
        reply = await peer.receive()
        assert isinstance(reply, ErrorResponse)
        assert (reply.id, reply.error.code) == ("q", -32601)


async def test_handler_bug_answers_internal_and_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A request is a supervision boundary: a handler's bug is answered -32603 once, with
    ``data.code`` ``internal`` and a bounded message (no traceback), logged with its
    traceback, and the endpoint goes on serving the next request."""

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        if method == "boom":
            raise ZeroDivisionError("oops " + "x" * 5000)
        return await echo_handler(method, params)

    async with raw_pair(request_handler=handler) as (endpoint, peer):
        await peer.send_message(Request(id=9, method="boom", params=None))
        reply = await peer.receive()
        assert isinstance(reply, ErrorResponse)
        assert (reply.id, reply.error.code) == (9, -32603)
        data = reply.error.data
        assert isinstance(data, dict)
        assert data["code"] == "internal"
        message = data["message"]
        assert isinstance(message, str)
        assert message.startswith("ZeroDivisionError: oops")
        assert len(message.encode()) <= 1024
        assert "Traceback" not in reply.error.message
        await peer.send_message(Request(id=10, method="echo", params=[1]))
        assert await peer.receive() == Response(id=10, result=[1])
        await peer.receive_nothing_more()
        assert not endpoint.closed
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "ZeroDivisionError" in errors[0].getMessage()


async def test_unencodable_result_is_answered_internal() -> None:
    """A result JSON can not carry (a NaN a handler passed on) ends that request only."""

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        return math.nan if method == "nan" else params

    async with raw_pair(request_handler=handler) as (endpoint, peer):
        await peer.send_message(Request(id=1, method="nan", params=None))
        reply = await peer.receive()
        assert isinstance(reply, ErrorResponse)
        assert (reply.id, reply.error.code) == (1, -32603)
        await peer.send_message(Request(id=2, method="echo", params=[2]))
        assert await peer.receive() == Response(id=2, result=[2])
        assert not endpoint.closed


async def test_failure_grouped_with_an_exit_is_answered_then_the_exit_propagates() -> None:
    """A failure that arrives together with SystemExit is answered; SystemExit goes on up."""

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        raise BaseExceptionGroup("both", [KeyError("bug"), SystemExit(3)])

    peers: list[RawPeer] = []

    async def run() -> None:
        async with raw_pair(request_handler=handler) as (_, peer):
            peers.append(peer)
            await peer.send_message(Request(id=3, method="group", params=None))
            await trio.sleep_forever()

    with pytest.raises(BaseException) as info:  # noqa: PT011 -- checked below
        await run()
    assert not isinstance(info.value, Exception)
    exits, others = BaseExceptionGroup("", [info.value]).split(SystemExit)
    assert exits is not None
    assert others is None
    reply = await peers[0].receive()
    assert isinstance(reply, ErrorResponse)
    assert (reply.id, reply.error.code) == (3, -32603)


async def test_notification_handler_bug_is_logged_and_dispatch_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    async def on_note(method: str, params: JSONValue | None) -> None:
        if method == "bad":
            raise KeyError(method)
        seen.append(method)

    async with raw_pair(notification_handler=on_note) as (endpoint, peer):
        await peer.send_message(Notification(method="bad", params=None))
        await peer.send_message(Notification(method="good", params=None))
        await peer.send_message(Request(id=1, method="echo", params=[1]))
        assert await peer.receive() == Response(id=1, result=[1])
        await trio.testing.wait_all_tasks_blocked()
        assert seen == ["good"]
        assert not endpoint.closed
    assert any(r.levelno == logging.ERROR and "KeyError" in r.getMessage() for r in caplog.records)


# -- outbound requests complete exactly once ------------------------------------------------


async def test_instant_reply_is_never_lost() -> None:
    """The reply is delivered while the writer is still inside send_all."""
    send = trio.testing.MemorySendStream()
    receive = trio.testing.MemoryReceiveStream()
    decoder = FrameDecoder()

    async def reply_at_once() -> None:
        decoder.receive_data(send.get_data_nowait())
        while isinstance(event := decoder.next_event(), Frame):
            message = decode_message(event.body)
            assert isinstance(message, Request)
            receive.put_data(frame(Response(id=message.id, result="fast")))

    send.send_all_hook = reply_at_once
    async with open_jsonrpc_endpoint(send, receive, request_handler=echo_handler) as endpoint:
        assert await endpoint.request("echo") == "fast"
        assert await endpoint.request("echo") == "fast"


async def test_ids_are_increasing_ints_never_reused() -> None:
    async with raw_pair() as (endpoint, peer):
        seen: list[int] = []
        for _ in range(3):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(endpoint.request, "hold")
                request = await peer.receive()
                assert isinstance(request, Request)
                assert type(request.id) is int
                seen.append(request.id)
                nursery.cancel_scope.cancel()
            cancel = await peer.receive()
            assert isinstance(cancel, Notification)
            assert cancel.params == {"id": request.id}
        assert seen == sorted(seen)
        assert len(set(seen)) == 3


async def test_reply_id_matches_by_json_type() -> None:
    async with raw_pair() as (endpoint, peer), trio.open_nursery() as nursery:
        result: list[JSONValue] = []

        async def call() -> None:
            result.append(await endpoint.request("ask"))

        nursery.start_soon(call)
        request = await peer.receive()
        assert isinstance(request, Request)
        assert type(request.id) is int
        await peer.send_message(Response(id=str(request.id), result="wrong"))
        await trio.testing.wait_all_tasks_blocked()
        assert result == []
        assert endpoint.statistics().ignored_replies == 1
        assert endpoint.statistics().pending_requests == 1
        await peer.send_message(Response(id=request.id, result="right"))
    assert result == ["right"]


async def test_error_response_raises_jsonrpc_error() -> None:
    async with raw_pair() as (endpoint, peer), trio.open_nursery() as nursery:
        caught: list[JSONRPCError] = []

        async def call() -> None:
            with pytest.raises(JSONRPCError) as info:
                await endpoint.request("ask")
            caught.append(info.value)

        nursery.start_soon(call)
        request = await peer.receive()
        assert isinstance(request, Request)
        await peer.send_message(
            ErrorResponse(id=request.id, error=ErrorObject(-32803, "failed", [1]))
        )
    assert (caught[0].code, caught[0].message, caught[0].data) == (-32803, "failed", [1])


async def _ask(
    endpoint: JSONRPCEndpoint, peer: RawPeer, nursery: trio.Nursery, outcomes: list[object]
) -> int:
    """Send request ``ask`` from ``endpoint`` in ``nursery``; its result, or the JSONRPCError
    it raised, goes to ``outcomes``. Returns the request's id as ``peer`` received it."""

    async def call() -> None:
        try:
            outcomes.append(await endpoint.request("ask"))
        except JSONRPCError as exc:
            outcomes.append(exc)

    nursery.start_soon(call)
    request = await peer.receive()
    assert isinstance(request, Request)
    assert isinstance(request.id, int)
    return request.id


async def test_reply_without_result_is_not_a_null_result() -> None:
    """Issue 6: a reply with neither result nor error ends its request with
    ReplyWithoutResult (a JSONRPCError); ``"result": null`` stays a result."""
    async with raw_pair() as (endpoint, peer), trio.open_nursery() as nursery:
        outcomes: list[object] = []
        request_id = await _ask(endpoint, peer, nursery, outcomes)
        await peer.send(encode_frame(b'{"jsonrpc":"2.0","id":%d}' % request_id))
        await trio.testing.wait_all_tasks_blocked()
        assert len(outcomes) == 1
        assert isinstance(outcomes[0], ReplyWithoutResult)
        assert outcomes[0].code == -32600
        request_id = await _ask(endpoint, peer, nursery, outcomes)
        await peer.send_message(Response(id=request_id, result=None))
        await trio.testing.wait_all_tasks_blocked()
        assert outcomes[1:] == [None]
        # Nothing was answered to the replies, and the endpoint goes on.
        await peer.receive_nothing_more()
        assert not endpoint.closed


async def test_a_broken_reply_ends_its_request_and_draws_no_frame() -> None:
    """A reply with both result and error is invalid: the request it names ends with an
    error, and nothing is written back (an error frame with that id would look like a reply
    to a request the peer never sent)."""
    async with raw_pair() as (endpoint, peer), trio.open_nursery() as nursery:
        outcomes: list[object] = []
        request_id = await _ask(endpoint, peer, nursery, outcomes)
        await peer.send(
            encode_frame(
                b'{"jsonrpc":"2.0","id":%d,"result":1,"error":{"code":1,"message":"x"}}'
                % request_id
            )
        )
        await trio.testing.wait_all_tasks_blocked()
        assert len(outcomes) == 1
        assert isinstance(outcomes[0], JSONRPCError)
        assert "invalid reply" in outcomes[0].message
        await peer.receive_nothing_more()
        assert not endpoint.closed
        assert endpoint.statistics().pending_requests == 0


async def test_cancel_at_sends_cancel_request_and_keeps_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 6 (the relay's deadline): ``cancel_at`` cancels at the peer, the caller still
    gets the peer's answer, and a later cancellation sends no second $/cancelRequest."""
    async with raw_pair() as (endpoint, peer), trio.open_nursery() as nursery:
        caught: list[JSONRPCError] = []
        start = trio.current_time()

        async def call() -> None:
            with pytest.raises(JSONRPCError) as info:
                await endpoint.request("slow", cancel_at=start + 1.5)
            caught.append(info.value)

        nursery.start_soon(call)
        request = await peer.receive()
        cancel = await peer.receive()
        assert isinstance(request, Request)
        assert isinstance(cancel, Notification)
        assert (cancel.method, cancel.params) == ("$/cancelRequest", {"id": request.id})
        assert trio.current_time() - start == pytest.approx(1.5)
        assert endpoint.statistics().pending_requests == 1
        await trio.sleep(5)
        assert caught == []
        await peer.send_message(
            ErrorResponse(id=request.id, error=ErrorObject(-32800, "cancelled"))
        )
        await trio.testing.wait_all_tasks_blocked()
        assert caught[0].code == -32800
        # Cancelled by its caller after cancel_at: no second $/cancelRequest.
        caller = trio.CancelScope()

        async def abandoned() -> None:
            with caller:
                await endpoint.request("slow", cancel_at=trio.current_time() + 1)

        nursery.start_soon(abandoned)
        request = await peer.receive()
        cancel = await peer.receive()
        assert isinstance(request, Request)
        assert isinstance(cancel, Notification)
        caller.cancel()
        await peer.receive_nothing_more()
        assert endpoint.statistics().pending_requests == 0


async def test_cancelled_caller_sends_cancel_request_and_late_reply_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="supervisor.endpoint")
    caller = trio.CancelScope()

    async def call(endpoint: JSONRPCEndpoint) -> None:
        with caller:
            await endpoint.request("slow")

    async with raw_pair() as (endpoint, peer), trio.open_nursery() as nursery:
        nursery.start_soon(call, endpoint)
        request = await peer.receive()
        assert isinstance(request, Request)
        caller.cancel()
        cancel = await peer.receive()
        assert isinstance(cancel, Notification)
        assert cancel.method == "$/cancelRequest"
        assert cancel.params == {"id": request.id}
        assert endpoint.statistics().pending_requests == 0
        # The late reply, then a duplicate, then a reply to an id never sent.
        await peer.send_message(Response(id=request.id, result="late"))
        await peer.send_message(
            ErrorResponse(id=request.id, error=ErrorObject(-32800, "cancelled"))
        )
        await peer.send_message(Response(id=12345, result="never asked"))
        await peer.receive_nothing_more()
        assert endpoint.statistics().ignored_replies == 3
        assert not endpoint.closed
        # Still serving afterwards.
        await peer.send_message(Request(id=1, method="echo", params=["ok"]))
        reply = await peer.receive()
        assert isinstance(reply, Response)
        assert reply.result == ["ok"]
    ignored = [r for r in caplog.records if "ignored a reply" in r.getMessage()]
    assert len(ignored) == 3
    assert all(r.levelno == logging.DEBUG for r in ignored)


async def test_duplicate_reply_is_ignored() -> None:
    async with raw_pair() as (endpoint, peer), trio.open_nursery() as nursery:
        results: list[JSONValue] = []

        async def call() -> None:
            results.append(await endpoint.request("ask"))

        nursery.start_soon(call)
        request = await peer.receive()
        assert isinstance(request, Request)
        await peer.send(
            frame(Response(id=request.id, result="first"))
            + frame(Response(id=request.id, result="second"))
        )
        await trio.testing.wait_all_tasks_blocked()
        assert results == ["first"]
        assert endpoint.statistics().ignored_replies == 1
        await peer.receive_nothing_more()


async def test_timeout_ms_raises_too_slow_and_cancels_at_peer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with raw_pair() as (endpoint, peer):
        start = trio.current_time()
        with pytest.raises(trio.TooSlowError):
            await endpoint.request("slow", timeout_ms=1500)
        assert trio.current_time() - start == pytest.approx(1.5)
        request = await peer.receive()
        cancel = await peer.receive()
        assert isinstance(request, Request)
        assert isinstance(cancel, Notification)
        assert (cancel.method, cancel.params) == ("$/cancelRequest", {"id": request.id})
        assert endpoint.statistics().pending_requests == 0


async def test_request_cancelled_while_queue_full_sends_no_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ours, theirs = trio.testing.lockstep_stream_pair()
    async with (
        open_jsonrpc_endpoint(
            ours.send_stream,
            ours.receive_stream,
            request_handler=echo_handler,
            max_pending_writes=1,
        ) as endpoint,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(endpoint.notify, "first")  # taken by the writer, which blocks
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(endpoint.notify, "second")  # fills the queue
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(0.01):
            await endpoint.request("never-queued")
        assert endpoint.statistics().queued_writes == 1
        assert endpoint.statistics().pending_requests == 0
        peer = RawPeer(theirs)
        first, second = await peer.receive(), await peer.receive()
        assert isinstance(first, Notification)
        assert isinstance(second, Notification)
        assert (first.method, second.method) == ("first", "second")
        await peer.receive_nothing_more()


# -- inbound requests -------------------------------------------------------------------------


async def test_peer_cancel_answers_request_cancelled_once() -> None:
    cancelled = trio.Event()

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    async with raw_pair(request_handler=handler) as (endpoint, peer):
        await peer.send_message(Request(id="abc", method="slow", params=None))
        await trio.testing.wait_all_tasks_blocked()
        assert endpoint.statistics().running_handlers == 1
        await peer.send_message(Notification(method="$/cancelRequest", params={"id": "abc"}))
        reply = await peer.receive()
        assert isinstance(reply, ErrorResponse)
        assert (reply.id, reply.error.code) == ("abc", -32800)
        assert cancelled.is_set()
        # A second cancel for the finished request changes nothing.
        await peer.send_message(Notification(method="$/cancelRequest", params={"id": "abc"}))
        await peer.receive_nothing_more()
        assert endpoint.statistics().running_handlers == 0


async def test_cancel_for_other_json_type_id_does_not_cancel() -> None:
    release = trio.Event()

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        await release.wait()
        return params

    async with raw_pair(request_handler=handler) as (_, peer):
        await peer.send_message(Request(id=1, method="slow", params=["int"]))
        await peer.send_message(Request(id="1", method="slow", params=["str"]))
        await peer.send_message(Notification(method="$/cancelRequest", params={"id": "1"}))
        cancelled = await peer.receive()
        assert isinstance(cancelled, ErrorResponse)
        assert cancelled.id == "1"
        assert type(cancelled.id) is str
        release.set()
        done = await peer.receive()
        assert isinstance(done, Response)
        assert done.id == 1
        assert type(done.id) is int
        assert done.result == ["int"]


async def test_cancel_racing_a_finished_handler_keeps_the_result() -> None:
    """A handler that finished before noticing the cancel answers its result, only that."""

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        return "done"  # no checkpoint: the cancel can not interrupt it

    async with raw_pair(request_handler=handler) as (_, peer):
        # Both frames in one chunk: the cancel is routed before the handler task even runs.
        await peer.send(
            frame(Request(id=3, method="quick", params=None))
            + frame(Notification(method="$/cancelRequest", params={"id": 3}))
        )
        reply = await peer.receive()
        assert isinstance(reply, Response)
        assert (reply.id, reply.result) == (3, "done")
        await peer.receive_nothing_more()


async def test_inbound_concurrency_is_bounded() -> None:
    release = trio.Event()

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        await release.wait()
        return params

    async with raw_pair(request_handler=handler, max_inbound_concurrency=2) as (_, peer):
        for i in range(3):
            await peer.send_message(Request(id=i, method="slow", params=[i]))
        refused = await peer.receive()
        assert isinstance(refused, ErrorResponse)
        assert (refused.id, refused.error.code, refused.error.data) == (2, -32803, {"code": "busy"})
        release.set()
        answered = {(await peer.receive()).id for _ in range(2)}  # type: ignore[union-attr]
        assert answered == {0, 1}


async def test_string_ids_stay_strings_and_duplicate_running_id_is_refused() -> None:
    release = trio.Event()

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        await release.wait()
        return params

    async with raw_pair(request_handler=handler) as (_, peer):
        await peer.send_message(Request(id="7", method="slow", params=["first"]))
        await peer.send_message(Request(id="7", method="slow", params=["again"]))
        refused = await peer.receive()
        assert isinstance(refused, ErrorResponse)
        assert (refused.id, refused.error.code) == ("7", -32600)
        release.set()
        reply = await peer.receive()
        assert isinstance(reply, Response)
        assert (reply.id, reply.result) == ("7", ["first"])


@pytest.mark.parametrize(
    ("body", "expected_id", "code"),
    [
        (b"{not json", None, -32700),
        (b'{"jsonrpc":"2.0","id":null,"method":"x"}', None, -32600),
        (b'{"jsonrpc":"2.0","id":7,"method":5}', 7, -32600),
        (b'{"jsonrpc":"2.0","id":"s","method":"x","params":3}', "s", -32600),
        (b"[]", None, -32600),
    ],
)
async def test_bad_bodies_are_answered_and_endpoint_goes_on(
    body: bytes, expected_id: object, code: int
) -> None:
    async with raw_pair() as (endpoint, peer):
        await peer.send(encode_frame(body))
        reply = await peer.receive()
        assert isinstance(reply, ErrorResponse)
        assert reply.id == expected_id
        assert type(reply.id) is type(expected_id)
        assert reply.error.code == code
        await peer.send_message(Request(id=1, method="echo", params={"still": "here"}))
        ok = await peer.receive()
        assert isinstance(ok, Response)
        assert ok.result == {"still": "here"}
        assert not endpoint.closed


async def test_batches_are_refused_with_one_invalid_request() -> None:
    async with raw_pair() as (endpoint, peer):
        await peer.send(
            encode_frame(
                b'[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","method":"note"}]'
            )
        )
        reply = await peer.receive()
        assert isinstance(reply, ErrorResponse)
        assert (reply.id, reply.error.code) == (None, -32600)
        assert "batch" in reply.error.message
        await peer.receive_nothing_more()
        assert not endpoint.closed


async def test_notifications_reach_the_handler_in_order() -> None:
    got: list[JSONValue] = []

    async def on_note(method: str, params: JSONValue | None) -> None:
        await trio.lowlevel.checkpoint()
        got.append(params)

    async with raw_pair(notification_handler=on_note) as (_, peer):
        await peer.send(b"".join(frame(Notification(method="n", params=[i])) for i in range(20)))
        await trio.testing.wait_all_tasks_blocked()
    assert got == [[i] for i in range(20)]


# -- the writer ---------------------------------------------------------------------------------


async def test_writer_coalesces_queued_frames_and_never_interleaves() -> None:
    async with raw_pair() as (endpoint, peer):
        async with trio.open_nursery() as nursery:
            for i in range(50):
                params: Params = {"i": i, "pad": "x" * 1000}
                nursery.start_soon(endpoint.notify, "n", params)
        received = [await peer.receive() for _ in range(50)]
        stats = endpoint.statistics()
        assert stats.frames_written == 50
        assert stats.writes < 50
    numbers = [
        m.params["i"]
        for m in received
        if isinstance(m, Notification) and isinstance(m.params, dict)
    ]
    assert sorted(n for n in numbers if isinstance(n, int)) == list(range(50))


async def test_full_write_queue_blocks_only_its_senders() -> None:
    """A peer that stops reading: senders wait at max_pending_writes, memory stays bounded."""
    ours, theirs = trio.testing.lockstep_stream_pair()
    sent = 0

    async def send_one() -> None:
        nonlocal sent
        await endpoint.notify("n", None)
        sent += 1

    async with (
        open_jsonrpc_endpoint(
            ours.send_stream,
            ours.receive_stream,
            request_handler=echo_handler,
            max_pending_writes=4,
        ) as endpoint,
        raw_pair() as (other, other_peer),
        trio.open_nursery() as nursery,
    ):
        for _ in range(10):
            nursery.start_soon(send_one)
        await trio.testing.wait_all_tasks_blocked()
        assert endpoint.statistics().queued_writes == 4
        assert sent < 10
        # Another endpoint is not affected.
        await other_peer.send_message(Request(id=1, method="echo", params=None))
        assert isinstance(await other_peer.receive(), Response)
        assert other.statistics().queued_writes == 0
        peer = RawPeer(theirs)
        for _ in range(10):
            assert isinstance(await peer.receive(), Notification)
    assert sent == 10


async def test_write_timeout_closes_and_fails_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ours, _theirs = trio.testing.lockstep_stream_pair()  # nobody ever reads _theirs
    async with open_jsonrpc_endpoint(
        ours.send_stream,
        ours.receive_stream,
        request_handler=echo_handler,
        write_timeout_ms=2000,
    ) as endpoint:
        start = trio.current_time()
        with pytest.raises(EndpointClosed) as info:
            await endpoint.request("x")
        assert info.value.reason == "write timeout"
        assert trio.current_time() - start == pytest.approx(2.0)
        assert endpoint.close_reason == "write timeout"
        await endpoint.wait_closed()
        with pytest.raises(EndpointClosed):
            await endpoint.notify("after")


async def test_a_peer_that_reads_nothing_for_two_minutes_is_waited_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 25: no write timeout by default. The queue holds at most its byte bound (plus a
    lone larger frame), the sender waits, and once the peer reads everything arrives."""
    ours, theirs = trio.testing.lockstep_stream_pair()
    peer = RawPeer(theirs)
    sent = 0
    async with (
        open_jsonrpc_endpoint(
            ours.send_stream,
            ours.receive_stream,
            request_handler=echo_handler,
            max_write_bytes=256 * 1024,
        ) as endpoint,
        trio.open_nursery() as nursery,
    ):

        async def chatter() -> None:
            nonlocal sent
            for n in range(200):
                await endpoint.notify("note", {"n": n, "pad": "p" * 10_000})
                sent += 1

        nursery.start_soon(chatter)
        peak = 0
        for _ in range(120):
            await trio.sleep(1)
            peak = max(peak, endpoint.statistics().outbound_bytes)
        assert not endpoint.closed
        assert 0 < sent < 200  # the sender waits for room
        assert peak <= 256 * 1024 + 11_000
        with trio.fail_after(60):
            for n in range(200):
                note = await peer.receive()
                assert isinstance(note, Notification)
                assert isinstance(note.params, dict)
                assert note.params["n"] == n
        assert not endpoint.closed


async def test_no_frame_over_the_limit_is_ever_written() -> None:
    """A request or notification of ours whose body would be over the frame-body limit is
    refused with an error naming the limit, and nothing is written (issue 25)."""
    async with raw_pair(max_body_bytes=1000) as (endpoint, peer):
        with pytest.raises(ValueError, match="over the frame-body limit of 1000 bytes"):
            await endpoint.notify("big", {"pad": "x" * 2000})
        with pytest.raises(ValueError, match="over the frame-body limit of 1000 bytes"):
            await endpoint.request("big", {"pad": "x" * 2000})
        assert endpoint.statistics().pending_requests == 0
        await endpoint.notify("small", {"pad": "x" * 100})
        note = await peer.receive()
        assert isinstance(note, Notification)
        assert note.method == "small"
        await peer.receive_nothing_more()


async def test_a_drain_in_a_handler_takes_only_the_room_left(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The room a handler's drain may take (supervisor._flow.current_answer_room) is what the
    write queue has left: all it asks for when nothing is on its way, nothing (it waits)
    while the queue is full and the peer does not read (issue 25)."""
    grants: list[int] = []

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        room = current_answer_room.get()
        assert room is not None
        if method == "now":
            grants.append(room.take_nowait(1 << 20))
        else:
            await trio.sleep(2)
            grants.append(await room.take(1 << 20))
        return None

    ours, theirs = trio.testing.lockstep_stream_pair()
    peer = RawPeer(theirs)
    async with (
        open_jsonrpc_endpoint(
            ours.send_stream, ours.receive_stream, request_handler=handler, max_write_bytes=100_000
        ) as endpoint,
        trio.open_nursery() as nursery,
    ):
        await peer.send_message(Request(id=1, method="now", params=None))
        assert isinstance(await peer.receive(), Response)
        assert grants == [1 << 20]  # nothing else on its way: a lone large answer goes
        await peer.send_message(Request(id=2, method="wait", params=None))
        await trio.testing.wait_all_tasks_blocked()
        fill_params: JSONObject = {"pad": "f" * 100_000}
        nursery.start_soon(endpoint.notify, "fill", fill_params)
        await trio.sleep(10)
        assert grants == [1 << 20]  # waits: nothing is free until the peer reads
        assert not endpoint.closed
        fill = await peer.receive()
        assert isinstance(fill, Notification)
        answer = await peer.receive()
        assert isinstance(answer, Response)
        assert answer.id == 2
        assert len(grants) == 2
        assert grants[1] > 0


# -- the end of the transport ----------------------------------------------------------------


async def test_eof_fails_pending_and_cancels_handlers() -> None:
    handler_cancelled = trio.Event()

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        try:
            await trio.sleep_forever()
        finally:
            handler_cancelled.set()

    async with raw_pair(request_handler=handler) as (endpoint, peer):
        outcome: list[BaseException] = []

        async def call() -> None:
            try:
                await endpoint.request("pending")
            except EndpointClosed as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await peer.send_message(Request(id=1, method="slow", params=None))
            await peer.receive()
            await trio.testing.wait_all_tasks_blocked()
            await peer.stream.send_eof()
            await endpoint.wait_closed()
        assert endpoint.close_reason == "eof"
        assert isinstance(outcome[0], EndpointClosed)
        assert outcome[0].reason == "eof"
        assert handler_cancelled.is_set()
        assert endpoint.statistics().pending_requests == 0


@pytest.mark.parametrize(
    "garbage",
    [
        b"Content-Length: abc\r\n\r\n",
        b"Content-Length: -5\r\n\r\n",
        b"Content-Type: text/plain\r\n\r\n",
        b"Content-Length: 999999\r\n\r\n",
    ],
)
async def test_broken_header_closes_with_protocol_error(garbage: bytes) -> None:
    async with raw_pair(max_body_bytes=1000) as (endpoint, peer), trio.open_nursery() as nursery:
        failures: list[EndpointClosed] = []

        async def call() -> None:
            with pytest.raises(EndpointClosed) as info:
                await endpoint.request("pending")
            failures.append(info.value)

        nursery.start_soon(call)
        await peer.receive()
        await peer.send(garbage)
        await endpoint.wait_closed()
    assert endpoint.close_reason is not None
    assert endpoint.close_reason.startswith("protocol error: ")
    assert failures[0].reason == endpoint.close_reason


@pytest.mark.parametrize("end", [b"", b"X-Foo: bar\r\n\r\n"], ids=["eof", "broken header"])
async def test_input_end_without_closing_lets_the_owner_answer(end: bytes) -> None:
    """``close_on_input_end=False``: the end of input only stops reading.

    Handlers go on and are answered, notifications read before the end are dispatched
    before :meth:`wait_input_ended` returns, outbound requests fail (no reply can come),
    and notifications can still be sent (serve mode answers everything it received).
    """
    release = trio.Event()
    seen: list[str] = []

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        await release.wait()
        return method

    async def on_notification(method: str, params: JSONValue | None) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(method)

    ours, theirs = trio.testing.memory_stream_pair()
    peer = RawPeer(theirs)
    async with (
        open_jsonrpc_endpoint(
            ours.send_stream,
            ours.receive_stream,
            request_handler=handler,
            notification_handler=on_notification,
            close_on_input_end=False,
        ) as endpoint,
        trio.open_nursery() as nursery,
    ):
        failures: list[EndpointClosed] = []

        async def call() -> None:
            with pytest.raises(EndpointClosed) as info:
                await endpoint.request("pending")
            failures.append(info.value)

        nursery.start_soon(call)
        assert isinstance(await peer.receive(), Request)
        data = frame(Request(id=1, method="slow", params=None))
        data += frame(Notification(method="last", params=None))
        await peer.send(data + end)
        if not end:
            await peer.stream.send_eof()
        await endpoint.wait_input_ended()
        assert seen == ["last"]
        assert not endpoint.closed
        reason = endpoint.input_end_reason
        assert reason is not None
        assert reason == "eof" if not end else reason.startswith("protocol error: ")
        await trio.testing.wait_all_tasks_blocked()
        assert failures[0].reason == reason
        with pytest.raises(EndpointClosed):
            await endpoint.request("after")
        release.set()
        reply = await peer.receive()
        assert isinstance(reply, Response)
        assert reply.result == "slow"
        await endpoint.notify("still", None)
        await endpoint.flush()
        # The request, the reply and the notification; flush()'s marker is not a frame.
        assert endpoint.statistics().frames_written == 3
        note = await peer.receive()
        assert isinstance(note, Notification)
        assert note.method == "still"


async def test_flush_waits_for_the_writer_and_fails_when_it_dies(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ours, _theirs = trio.testing.lockstep_stream_pair()  # nobody ever reads _theirs
    async with open_jsonrpc_endpoint(
        ours.send_stream, ours.receive_stream, request_handler=echo_handler, write_timeout_ms=2000
    ) as endpoint:
        await endpoint.notify("unread", None)
        start = trio.current_time()
        with pytest.raises(EndpointClosed) as info:
            await endpoint.flush()
        assert info.value.reason == "write timeout"
        assert trio.current_time() - start == pytest.approx(2.0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on a pipe's write end")
async def test_wait_read_by_peer_waits_until_the_pipe_is_read() -> None:
    peer_reads, we_write = os.pipe()
    we_read, peer_writes = os.pipe()
    send = trio.lowlevel.FdStream(we_write)
    receive = trio.lowlevel.FdStream(we_read)
    try:
        async with open_jsonrpc_endpoint(send, receive, request_handler=echo_handler) as endpoint:
            await endpoint.notify("unread", None)
            # Written (flush returns), but the peer has not read it: still waiting.
            await endpoint.flush()
            with trio.move_on_after(0.3) as waited:
                await endpoint.wait_read_by_peer()
            assert waited.cancelled_caught
            data = os.read(peer_reads, 65536)
            assert b'"unread"' in data
            with trio.fail_after(10):
                await endpoint.wait_read_by_peer()
    finally:
        os.close(peer_reads)
        os.close(peer_writes)


@pytest.mark.parametrize(("callers", "writes"), [(16, 1), (80, 3)])
async def test_callers_woken_by_one_read_send_their_next_requests_in_few_writes(
    callers: int, writes: int
) -> None:
    """The replies of one read wake several callers: the requests they make next go out in one
    system call, in the order they were made, and each caller gets its own answer once. A
    larger burst goes out every 32 requests as it is made (the peer starts on them while the
    rest are made): 80 in three writes, 32 + 32 by callers and the last 16 by the writer."""
    peer_reads, we_write = os.pipe()
    we_read, peer_writes = os.pipe()
    send = trio.lowlevel.FdStream(we_write)
    receive = trio.lowlevel.FdStream(we_read)
    got: list[tuple[int, JSONValue]] = []

    async def answer_all(expected: int) -> list[int]:
        """Read until ``expected`` requests came, answer them all in one write."""
        decoder = FrameDecoder()
        seen: list[Request] = []
        while len(seen) < expected:
            await trio.lowlevel.wait_readable(peer_reads)
            decoder.receive_data(os.read(peer_reads, 65536))
            while isinstance(event := decoder.next_event(), Frame):
                message = decode_message(event.body)
                assert isinstance(message, Request)
                seen.append(message)
        assert decoder.next_event() is NEED_DATA  # nothing more than expected
        os.write(
            peer_writes,
            b"".join(frame(Response(id=m.id, result=m.params)) for m in seen),
        )
        return [m.id for m in seen if isinstance(m.id, int)]

    async def caller(index: int) -> None:
        for round_ in range(2):
            result = await endpoint.request("echo", [index, round_])
            got.append((index, result))

    try:
        async with open_jsonrpc_endpoint(send, receive, request_handler=echo_handler) as endpoint:
            transport = endpoint._transport
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    for index in range(callers):
                        nursery.start_soon(caller, index)
                    first_ids = await answer_all(callers)
                    first_writes = transport.writes
                    second_ids = await answer_all(callers)
            # The second round's callers all woke from one read: their requests left in one
            # write (or one per 32), in the order they were made (ids are numbered as frames
            # are queued).
            assert transport.writes == first_writes + writes
            assert second_ids == sorted(second_ids)
            assert min(second_ids) > max(first_ids)
            assert endpoint._woken == 0
    finally:
        os.close(peer_reads)
        os.close(peer_writes)
    assert sorted(got) == sorted((i, [i, r]) for i in range(callers) for r in range(2))


async def test_stray_text_is_logged_with_its_byte_count_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with raw_pair() as (_, peer):
        await peer.send(b"password=hunter2\n" + frame(Request(id=1, method="echo", params=[])))
        reply = await peer.receive()
        assert isinstance(reply, Response)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "17 bytes" in warnings[0].getMessage()
    assert "hunter2" not in caplog.text


async def test_leaving_the_block_closes_fails_pending_and_closes_streams() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = RawPeer(theirs)
    outcome: list[EndpointClosed] = []
    leave = trio.Event()
    handler_cancelled = trio.Event()

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        try:
            await trio.sleep_forever()
        finally:
            handler_cancelled.set()

    async def run_endpoint(task_status: trio.TaskStatus[JSONRPCEndpoint]) -> None:
        async with open_jsonrpc_endpoint(
            ours.send_stream, ours.receive_stream, request_handler=handler
        ) as endpoint:
            task_status.started(endpoint)
            await leave.wait()

    async def call(endpoint: JSONRPCEndpoint) -> None:
        with pytest.raises(EndpointClosed) as info:
            await endpoint.request("pending")
        outcome.append(info.value)

    async with trio.open_nursery() as nursery:
        endpoint = await nursery.start(run_endpoint)
        nursery.start_soon(call, endpoint)
        await peer.send_message(Request(id=1, method="slow", params=None))
        assert isinstance(await peer.receive(), Request)
        await trio.testing.wait_all_tasks_blocked()
        leave.set()
    assert endpoint.close_reason == "closed"
    assert outcome[0].reason == "closed"
    assert handler_cancelled.is_set()
    with pytest.raises(EOFError):
        await peer.receive()  # our send stream was closed: the peer sees EOF, no answer


async def test_graceful_exit_flushes_what_is_queued() -> None:
    async with raw_pair() as (endpoint, peer):
        for i in range(5):
            await endpoint.notify("bye", [i])
    got = [await peer.receive() for _ in range(5)]
    assert [m.params for m in got if isinstance(m, Notification)] == [[0], [1], [2], [3], [4]]


async def test_cancelled_exit_never_hangs(autojump_clock: trio.testing.MockClock) -> None:
    ours, _theirs = trio.testing.lockstep_stream_pair()
    start = trio.current_time()
    with trio.move_on_after(1):
        async with open_jsonrpc_endpoint(
            ours.send_stream, ours.receive_stream, request_handler=echo_handler
        ) as endpoint:
            for _ in range(3):
                await endpoint.notify("stuck")
            await trio.sleep_forever()
    assert trio.current_time() - start == pytest.approx(1.0)
    assert endpoint.close_reason == "closed"


async def test_body_exception_propagates_unwrapped() -> None:
    class Oops(Exception):
        pass

    cause = ValueError("cause")
    with pytest.raises(Oops) as info:
        async with raw_pair():
            raise Oops from cause
    assert info.value.__cause__ is cause


async def test_closed_endpoint_refuses_new_work() -> None:
    async with raw_pair() as (endpoint, _):
        pass
    with pytest.raises(EndpointClosed):
        await endpoint.request("x")
    with pytest.raises(EndpointClosed):
        await endpoint.notify("x")


def test_no_public_constructor_and_bad_bounds() -> None:
    with pytest.raises(TypeError):
        JSONRPCEndpoint()  # type: ignore[call-arg]


async def test_bounds_are_validated() -> None:
    ours, _ = trio.testing.memory_stream_pair()
    for bad in ({"max_pending_writes": 0}, {"write_timeout_ms": math.nan}, {"write_timeout_ms": 0}):
        with pytest.raises(ValueError, match="positive"):
            async with open_jsonrpc_endpoint(
                ours.send_stream,
                ours.receive_stream,
                request_handler=echo_handler,
                **bad,
            ):
                pass  # pragma: no cover


# -- a real subprocess peer ------------------------------------------------------------------


async def test_against_a_real_echo_server_subprocess(caplog: pytest.LogCaptureFixture) -> None:
    env = dict(os.environ, SUPERVISOR_SCOPE="test/endpoint")
    process = await trio.lowlevel.open_process(
        [sys.executable, ECHO_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    notes: list[tuple[str, JSONValue | None]] = []

    async def on_note(method: str, params: JSONValue | None) -> None:
        notes.append((method, params))

    try:
        assert process.stdin is not None
        assert process.stdout is not None
        async with open_jsonrpc_endpoint(
            process.stdin,
            process.stdout,
            request_handler=echo_handler,
            notification_handler=on_note,
            name="echo",
        ) as endpoint:
            assert await endpoint.request("echo", {"text": "héllo"}) == {"text": "héllo"}
            with pytest.raises(JSONRPCError) as info:
                await endpoint.request("error", {"code": -32001, "message": "nope"})
            assert info.value.code == -32001
            # A held request times out; the peer gets $/cancelRequest and answers -32800,
            # which arrives late and is ignored.
            with pytest.raises(trio.TooSlowError):
                await endpoint.request("hold", timeout_ms=50)
            await endpoint.request("notify", {"method": "hello", "params": [1]})
            await endpoint.request("stray", {"text": "oops\n"})
            assert await endpoint.request("release") == 0
            results: list[JSONValue] = []
            async with trio.open_nursery() as nursery:

                async def call(n: int) -> None:
                    results.append(await endpoint.request("echo", [n]))

                for n in range(100):
                    nursery.start_soon(call, n)
            assert sorted(results, key=str) == sorted(([n] for n in range(100)), key=str)
            assert notes == [("hello", [1])]
            assert endpoint.statistics().ignored_replies == 1
            await endpoint.notify("exit")
            await endpoint.wait_closed()
            assert endpoint.close_reason == "eof"
        assert await process.wait() == 0
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
    assert any("5 bytes" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("requests", "pad_bytes"), [(2000, 100), (600, 60_000)])
async def test_a_blocking_peer_that_asks_while_we_pipeline_is_not_a_mutual_block(
    requests: int, pad_bytes: int
) -> None:
    """A peer that asks us something before each answer, and stops reading while its own
    writes block, against a caller that pipelines many requests: the reader must keep reading
    while our own requests wait for room. Before, the reader waited behind them (to admit the
    peer's request, or to queue its answer or refusal), the peer blocked writing to us and read
    nothing more, and both sides waited for ever (2000 small requests: 128 answered; 600 of
    60 KB: none)."""
    process = await trio.lowlevel.open_process(
        [sys.executable, ASKING_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    asked: list[str] = []

    async def answer_the_peer(method: str, params: JSONValue | None) -> JSONValue:
        asked.append(method)
        return [{}]

    try:
        assert process.stdin is not None
        assert process.stdout is not None
        async with open_jsonrpc_endpoint(
            process.stdin, process.stdout, request_handler=answer_the_peer, name="asking"
        ) as endpoint:
            answers: list[int] = []

            async def call(n: int) -> None:
                answer = await endpoint.request("work", {"n": n, "pad": "x" * pad_bytes})
                assert isinstance(answer, dict)
                assert isinstance(answer["n"], int)
                answers.append(answer["n"])

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    for n in range(requests):
                        nursery.start_soon(call, n)
            assert sorted(answers) == list(range(1, requests + 1))
            # Each ask was answered (a burst past the in-flight bound is refused busy, also
            # an answer); the handler ran for those admitted.
            assert 0 < len(asked) <= requests
            assert not endpoint.closed
        assert await process.wait() == 0
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


async def test_handlers_see_the_request_id() -> None:
    """`current_request_id` is the id of the request whose handler runs, with its JSON type."""
    from supervisor import current_request_id

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        return current_request_id.get()

    async def refuse(method: str, params: JSONValue | None) -> JSONValue:
        raise method_not_found(method)

    left, right = trio.testing.memory_stream_pair()
    async with (
        open_jsonrpc_endpoint(left, left, request_handler=handler) as server,
        open_jsonrpc_endpoint(right, right, request_handler=refuse) as client,
    ):
        assert await client.request("who") == 1
        assert await client.request("who") == 2
        assert not server.closed


async def test_a_peer_sending_requests_while_reading_nothing_is_held_back_not_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 25: a peer that floods us with requests and reads none of our answers for two
    minutes. The answers fill the write queue, the reader then admits nothing more (it stops
    reading: backpressure on the peer) and nothing times out: the endpoint stays open. Once
    the peer reads, every request is answered exactly once."""
    ours, theirs = trio.testing.lockstep_stream_pair()
    peer = RawPeer(theirs)
    sent = 199
    async with (
        open_jsonrpc_endpoint(
            ours.send_stream,
            ours.receive_stream,
            request_handler=echo_handler,
            max_pending_writes=4,
            max_write_bytes=4096,
            max_inbound_concurrency=2,
        ) as endpoint,
        trio.open_nursery() as nursery,
    ):
        flooded = 0

        async def flood() -> None:
            nonlocal flooded
            for request_id in range(1, sent + 1):
                await peer.send_message(Request(id=request_id, method="echo", params=None))
                flooded += 1

        nursery.start_soon(flood)
        await trio.sleep(120)
        assert not endpoint.closed
        assert flooded < sent  # held back: the reader stopped reading
        assert endpoint.statistics().queued_writes <= 4
        answered: dict[object, int] = {}
        with trio.fail_after(60):
            while len(answered) < sent:
                message = await peer.receive()
                assert isinstance(message, (Response, ErrorResponse))
                answered[message.id] = answered.get(message.id, 0) + 1
        assert answered == dict.fromkeys(range(1, sent + 1), 1)
        assert not endpoint.closed
        await trio.testing.wait_all_tasks_blocked()
        stats = endpoint.statistics()
        assert (stats.running_handlers, stats.outbound_bytes) == (0, 0)
        nursery.cancel_scope.cancel()
