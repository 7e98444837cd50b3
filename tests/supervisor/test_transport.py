"""The one byte loop of framed peers (``supervisor._transport.FramedTransport``, issue 24.2).

Every test of the reader runs twice, once with the JSON-RPC decoder a language server's
endpoint drives and once with the DAP decoder a debug session drives: the same bytes from
the peer get the same outcome from both, which is what "a debug adapter has a language
server's bounds" means. The writer's tests show the bounds every owner shares: strictly FIFO,
bounded in frames, a peer that does not read waited for (a write timeout only when asked),
a broken pipe reported once, and the pipe fast path.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from protocol import (
    DAPConnection,
    Frame,
    FrameDecoder,
    JSONRPCConnection,
    NotificationReceived,
    encode_frame,
)
from protocol._dap import DAPEvent
from supervisor._transport import (
    _OWED_OVERHEAD_BYTES,
    DEFAULT_MAX_BODY_BYTES,
    EndpointClosed,
    FramedTransport,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from supervisor._transport import FrameDecoder as Decoder

#: Generous: real pipes and a loaded machine, never a timed assertion.
WAIT_S = 30

KINDS = ("jsonrpc", "dap")


def new_decoder(kind: str) -> Decoder:
    return JSONRPCConnection() if kind == "jsonrpc" else DAPConnection()


def message(kind: str, n: int) -> bytes:
    """A framed notification (JSON-RPC) or event (DAP) carrying the number ``n``."""
    if kind == "jsonrpc":
        body: dict[str, object] = {"jsonrpc": "2.0", "method": "note", "params": {"n": n}}
    else:
        body = {"seq": n + 1, "type": "event", "event": "note", "body": {"n": n}}
    return encode_frame(json.dumps(body).encode())


def number(event: object) -> int:
    """The ``n`` a message of :func:`message` carried."""
    params: object
    if isinstance(event, NotificationReceived):
        params = event.notification.params
    else:
        assert isinstance(event, DAPEvent)
        params = event.body
    assert isinstance(params, dict)
    n = params["n"]
    assert isinstance(n, int)
    return n


async def read_all(
    kind: str, chunks: list[bytes], *, eof: bool = True
) -> tuple[str, list[int], FramedTransport]:
    """Feed ``chunks`` (then the end of input) to a transport's reader; return why the
    input ended and the numbers of the messages handed to the owner, in order."""
    ours, theirs = trio.testing.memory_stream_pair()
    transport = FramedTransport(ours, ours, name=f"{kind} peer")
    seen: list[int] = []

    def dispatch(event: object) -> None:
        seen.append(number(event))

    async def peer() -> None:
        for chunk in chunks:
            await theirs.send_all(chunk)
        if eof:
            await theirs.send_eof()

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer)
            reason = await transport.read_loop(new_decoder(kind), dispatch)
            nursery.cancel_scope.cancel()
    return reason, seen, transport


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("kind", KINDS)
async def test_messages_reach_the_owner_in_arrival_order_stray_text_skipped_unseen(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """200 messages with a stray line (an adapter's or a server's ``print``) before every
    tenth, in 7-byte chunks: all 200 reach the owner in order, the stray text is skipped
    and counted in warnings that never show it, and the input ends ``eof``."""
    stray = b"a secret printed by mistake\n"
    data = b"".join((stray if n % 10 == 0 else b"") + message(kind, n) for n in range(200))
    with caplog.at_level(logging.WARNING, logger="supervisor.endpoint"):
        reason, seen, transport = await read_all(kind, split(data, 7))
    assert reason == "eof"
    assert seen == list(range(200))
    assert transport.frames_read == 200
    warnings = [r.getMessage() for r in caplog.records if "stray text" in r.getMessage()]
    assert warnings
    assert all("secret" not in w for w in warnings)
    skipped = sum(int(w.split("skipped ")[1].split(" bytes")[0]) for w in warnings)
    assert skipped == 20 * len(stray)


@pytest.mark.parametrize("kind", KINDS)
async def test_stray_text_past_its_bound_ends_the_input_as_a_protocol_error(kind: str) -> None:
    """More than 64 KiB of text without a frame is a peer that does not speak the protocol:
    the input ends ``protocol error`` and a frame after it is never handed on."""
    flood = b"not a frame, just output\n" * 3000  # 75 000 bytes
    reason, seen, _ = await read_all(kind, [message(kind, 0), flood, message(kind, 1)])
    assert reason.startswith("protocol error: more than 65536 bytes of stray text")
    assert seen == [0]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_frame_over_the_body_limit_is_refused_from_its_header(kind: str) -> None:
    """A header announcing one byte over 64 MiB ends the input at once: the body is never
    waited for (the peer sends none and keeps its side open)."""
    header = b"Content-Length: %d\r\n\r\n" % (DEFAULT_MAX_BODY_BYTES + 1)
    reason, seen, _ = await read_all(kind, [message(kind, 0), header], eof=False)
    assert reason.startswith("protocol error")
    assert str(DEFAULT_MAX_BODY_BYTES) in reason
    assert seen == [0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("tail", "ends"),
    [
        pytest.param(b"", "eof", id="between-frames"),
        pytest.param(b"Content-Length: 40\r\n\r\n{", "protocol error", id="inside-a-frame"),
        pytest.param(b"Content-Length: many\r\n\r\n{}", "protocol error", id="broken-header"),
    ],
)
async def test_the_end_of_input_is_one_reason_for_both_kinds(
    kind: str, tail: bytes, ends: str
) -> None:
    """Between frames the input ends ``eof``; inside a frame, or at a header that is not
    one, ``protocol error``: what came before is handed on either way."""
    reason, seen, _ = await read_all(kind, [message(kind, 0), message(kind, 1), tail])
    assert reason.startswith(ends)
    assert seen == [0, 1]


@pytest.mark.parametrize("kind", KINDS)
async def test_an_owner_that_is_busy_holds_back_the_reader(kind: str) -> None:
    """``dispatch`` returning an awaitable stops the reader until it is done: backpressure
    on the peer, and the next message is not handed on before it."""
    ours, theirs = trio.testing.memory_stream_pair()
    transport = FramedTransport(ours, ours, name="peer")
    release = trio.Event()
    seen: list[int] = []

    def dispatch(event: object) -> Awaitable[None] | None:
        seen.append(number(event))
        return release.wait() if len(seen) == 1 else None

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await theirs.send_all(message(kind, 0) + message(kind, 1))
            nursery.start_soon(transport.read_loop, new_decoder(kind), dispatch)
            await trio.testing.wait_all_tasks_blocked()
            assert seen == [0]
            release.set()
            await theirs.send_eof()
    assert seen == [0, 1]


async def _write_loop(transport: FramedTransport, failures: list[str]) -> None:
    await transport.write_loop(failures.append)


async def test_frames_are_written_strictly_first_in_first_out_waiters_included() -> None:
    """Past the frame bound producers wait in a line, and the writer admits them in the
    order they came: the peer reads 0..19 in that order, whichever task runs first."""
    ours, theirs = trio.testing.lockstep_stream_pair()
    transport = FramedTransport(ours, ours, name="peer", max_pending_writes=2)
    failures: list[str] = []
    decoder = FrameDecoder()
    got: list[int] = []
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write_loop, transport, failures)
            for n in range(20):
                nursery.start_soon(transport.queue.put, message("jsonrpc", n))
                # Each producer is in the line (or the queue) before the next starts.
                await trio.testing.wait_all_tasks_blocked()
            assert len(transport.queue.waiting) > 10  # the peer reads nothing yet
            while len(got) < 20:
                decoder.receive_data(await theirs.receive_some(65536))
                while isinstance(frame := decoder.next_event(), Frame):
                    got.append(json.loads(frame.body)["params"]["n"])
            transport.queue.close("closed")
    assert got == list(range(20))
    assert failures == []


async def test_what_the_reader_owes_takes_its_turn_without_waiting_within_its_budget() -> None:
    """An answer owed to the peer (``put_owed``) joins the line behind our waiting frames
    without a task, in its turn; the reader's admission (``wait_owed_room``) waits on what is
    owed, not on our own frames; past the owed budget (``max_write_bytes``, each answer counted
    with its place in the line) it waits. The budget is in bytes only: many small answers
    behind many of our frames (a slow peer asking about each request) do not stop the reader."""
    ours, theirs = trio.testing.lockstep_stream_pair()
    budget = 16 * 1024
    transport = FramedTransport(
        ours, ours, name="peer", max_pending_writes=2, max_write_bytes=budget
    )
    queue = transport.queue
    failures: list[str] = []
    decoder = FrameDecoder()
    got: list[int] = []
    owed_count = 0
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write_loop, transport, failures)
            for n in range(5):  # ours: past the frame bound some wait in line
                nursery.start_soon(queue.put, message("jsonrpc", n))
                await trio.testing.wait_all_tasks_blocked()
            assert queue.waiting
            with trio.move_on_after(WAIT_S / 2) as admitted:
                await queue.wait_owed_room()  # our own frames waiting: the reader reads on
            assert not admitted.cancelled_caught
            while queue.put_owed(message("jsonrpc", 5 + owed_count)):
                owed_count += 1
            # Far more answers than the queue's 2 frames, bounded by their bytes.
            assert 16 < owed_count < budget // _OWED_OVERHEAD_BYTES
            assert budget - 2 * _OWED_OVERHEAD_BYTES < queue.owed_waiting <= budget
            # Answers being made (room reserved by a drain) count too: the budget is full.
            queue.reserved += budget - queue.owed_waiting
            with trio.move_on_after(0.05) as admitted:
                await queue.wait_owed_room()
            assert admitted.cancelled_caught  # the reader would wait
            queue.release(budget - queue.owed_waiting)
            while len(got) < 5 + owed_count:
                decoder.receive_data(await theirs.receive_some(65536))
                while isinstance(frame := decoder.next_event(), Frame):
                    got.append(json.loads(frame.body)["params"]["n"])
            await queue.wait_owed_room()  # moved: room again
            assert (queue.owed_frames, queue.owed_waiting) == (0, 0)
            queue.close("closed")
    assert got == list(range(5 + owed_count))  # strictly in the order handed over
    assert failures == []


async def test_a_peer_that_does_not_read_is_waited_for_and_a_timeout_is_opt_in(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Flow control, not a timeout: a peer that reads nothing for an hour still has its
    transport, and a producer past the bound waits (cancelling it leaves no frame behind).
    Only an owner that asks for a write timeout gets one."""
    ours, _theirs = trio.testing.lockstep_stream_pair()  # nobody ever reads _theirs
    transport = FramedTransport(ours, ours, name="peer", max_pending_writes=1)
    failures: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_write_loop, transport, failures)
        await transport.queue.put(message("dap", 0))  # taken by the writer, stuck in it
        await transport.queue.put(message("dap", 1))  # queued: the bound is reached
        with trio.move_on_after(3600) as waited:
            await transport.queue.put(message("dap", 2))
        assert waited.cancelled_caught
        assert not transport.queue.waiting  # the cancelled frame left the line
        assert not transport.writer_done.is_set()
        assert failures == []
        transport.writer_scope.cancel()
    ours, _theirs = trio.testing.lockstep_stream_pair()
    timed = FramedTransport(ours, ours, name="plugin backend", write_timeout_ms=5000)
    failures = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_write_loop, timed, failures)
        await timed.queue.put(message("jsonrpc", 0))
        started = trio.current_time()
        await timed.writer_done.wait()
    assert failures == ["write timeout"]
    assert trio.current_time() - started == pytest.approx(5.0)
    timed.queue.close("write timeout")
    with pytest.raises(EndpointClosed):
        await timed.queue.put(message("jsonrpc", 1))


async def test_pipes_take_the_fast_paths_and_a_broken_pipe_is_reported_once() -> None:
    """On a child's pipes the reader uses ``os.read`` and an idle writer is skipped
    (``write_now``: one system call, no hop to the writer task); a peer that closed its end
    makes the next write fail ``write failed`` once."""
    peer_reads, we_write = os.pipe()
    we_read, peer_writes = os.pipe()
    send = trio.lowlevel.FdStream(we_write)
    receive = trio.lowlevel.FdStream(we_read)
    transport = FramedTransport(send, receive, name="adapter")
    assert transport.send_fd == we_write
    assert transport.receive_fd == we_read
    failures: list[str] = []
    seen: list[int] = []
    try:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_write_loop, transport, failures)
                await trio.testing.wait_all_tasks_blocked()
                assert transport.write_now(message("dap", 7))
                assert (transport.frames_written, transport.writes) == (1, 1)
                assert os.read(peer_reads, 65536) == message("dap", 7)
                os.write(peer_writes, message("dap", 1) + message("dap", 2))
                os.close(peer_writes)
                reason = await transport.read_loop(
                    DAPConnection(), lambda event: seen.append(number(event))
                )
                assert reason == "eof"
                assert seen == [1, 2]
                os.close(peer_reads)
                await transport.queue.put(message("dap", 3))
                await transport.writer_done.wait()
    finally:
        await send.aclose()
        await receive.aclose()
    assert len(failures) == 1
    assert failures[0].startswith("write failed: BrokenPipeError"), failures


async def test_queued_frames_written_by_a_producer_keep_their_order_when_the_pipe_cuts() -> None:
    """``write_queued_now`` writes what a burst queued from the producer's task while the writer
    is parked: what the pipe does not take stays first in the queue, the writer sends it and
    then what came after, and the peer reads every frame once, in order."""
    peer_reads, we_write = os.pipe()
    send = trio.lowlevel.FdStream(we_write)
    transport = FramedTransport(send, send, name="server")
    failures: list[str] = []
    capacity = fcntl.fcntl(we_write, fcntl.F_GETPIPE_SZ)
    filler = b"x" * (capacity - 8192)  # the pipe takes only part of the burst
    # Over PIPE_BUF together, so the pipe may take part of the write (not all or nothing).
    frames = [encode_frame(b'{"n":%d,"pad":"%s"}' % (n, b"p" * 3000)) for n in range(8)]
    try:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_write_loop, transport, failures)
                await trio.testing.wait_all_tasks_blocked()
                os.write(we_write, filler)
                for frame in frames[:6]:
                    assert transport.queue.put_nowait(frame)
                transport.write_queued_now()
                assert transport.writes == 1
                assert transport.frames_written == 5  # the rest: one frame, once written
                left = transport.queue.bytes
                assert 0 < left < sum(map(len, frames[:6]))
                for frame in frames[6:]:
                    assert transport.queue.put_nowait(frame)
                got = b""
                while len(got) < len(filler) + sum(map(len, frames)):
                    await trio.lowlevel.wait_readable(peer_reads)
                    got += os.read(peer_reads, 1 << 20)
                transport.queue.close("done")
        assert got == filler + b"".join(frames)
        assert transport.frames_written == 8
        assert transport.queue.bytes == 0
    finally:
        await send.aclose()
        os.close(peer_reads)
    assert failures == []
