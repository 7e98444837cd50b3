"""JSON-RPC over pipes to the echo peer: our Trio endpoint against plain clients (goal 4 of
the README's table).

Figures, each measured interleaved with its peer in the same run, after a warm-up, as medians:

- ``64 in flight``: requests/s with 64 concurrent callers, ours against a plain asyncio client
  (``asyncio.create_subprocess_exec``, a reader task matching replies to futures, writes
  through the transport's own buffer). Goal: at least 1.1x. A third contestant, not judged,
  runs interleaved too and is printed as the row's note: the echo peer's own ceiling, a
  client with no per-request cost at all (64 requests kept open, each read's replies
  followed by as many new requests in one write), which no client keeping 64 requests open
  can beat.
- ``sequential round trip``: microseconds per request with one caller, ours against a bare
  Trio loop (``send_all`` one frame, ``receive_some`` until its reply). Goal: at most 1.1x.

Every client talks to the same server, ``benchmarks/echo_peer.py``, started with
``sys.executable`` once per sample (outside the timed part). Until 2026-12-05 it was the
tests' ``tests/peers/echo_server.py``, whose few microseconds per request made both clients
its own speed (1.00x): the row measured the peer, not the clients. Run ``python -m
benchmarks.bench_jsonrpc`` to print the rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import trio

from benchmarks._common import paired_ratios, paired_row
from protocol import NEED_DATA, Frame, FrameDecoder, encode_frame
from supervisor._endpoint import method_not_found, open_jsonrpc_endpoint

if TYPE_CHECKING:
    from protocol import JSONValue

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ECHO_PEER = os.path.join(ROOT, "benchmarks", "echo_peer.py")
IN_FLIGHT = 64
SAMPLES = 7
_ARGV = [sys.executable, ECHO_PEER]


async def _refuse(method: str, params: JSONValue | None) -> JSONValue:
    raise method_not_found(method)


# -- ours ----------------------------------------------------------------------------------------


async def _ours(total: int, in_flight: int) -> float:
    """Seconds for ``total`` echo requests through our endpoint with ``in_flight`` callers."""
    process = await trio.lowlevel.open_process(_ARGV, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        async with open_jsonrpc_endpoint(
            process.stdin, process.stdout, request_handler=_refuse, name="echo"
        ) as endpoint:
            await endpoint.request("echo", [0])
            remaining = total

            async def caller() -> None:
                nonlocal remaining
                while remaining > 0:
                    remaining -= 1
                    await endpoint.request("echo", [remaining])

            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(in_flight):
                    nursery.start_soon(caller)
            elapsed = time.perf_counter() - start
            await endpoint.notify("exit")
        return elapsed
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


# -- a bare Trio loop (sequential peer) ----------------------------------------------------


async def _bare_trio(total: int) -> float:
    """Seconds for ``total`` sequential echo requests with no endpoint: write, read, repeat."""
    process = await trio.lowlevel.open_process(_ARGV, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    decoder = FrameDecoder()
    try:
        start = time.perf_counter()
        for i in range(total):
            body = json.dumps(
                {"jsonrpc": "2.0", "id": i, "method": "echo", "params": [i]},
                separators=(",", ":"),
            ).encode()
            await process.stdin.send_all(encode_frame(body))
            while True:
                event = decoder.next_event()
                if isinstance(event, Frame):
                    json.loads(event.body)
                    break
                if event is NEED_DATA:
                    decoder.receive_data(await process.stdout.receive_some(65536))
        elapsed = time.perf_counter() - start
        await process.stdin.aclose()
        return elapsed
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


def _pipelined(total: int, in_flight: int) -> float:
    """Seconds for ``total`` echo requests kept ``in_flight`` at a time by a client with no
    per-request cost: one write of ``in_flight`` requests, then after each read as many new
    requests (in one write) as it brought replies. No task, no future, no scheduler: nearly
    all of the time is the echo peer's, so this is the ceiling of any client that keeps
    ``in_flight`` requests open against it."""
    process = subprocess.Popen(_ARGV, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    write_fd, read_fd = process.stdin.fileno(), process.stdout.fileno()
    decoder = FrameDecoder()
    body = b'{"jsonrpc":"2.0","id":%d,"method":"echo","params":[%d]}'

    def send(first: int, count: int) -> None:
        data = b"".join(encode_frame(body % (i, i)) for i in range(first, first + count))
        while data:
            data = data[os.write(write_fd, data) :]

    try:
        start = time.perf_counter()
        sent = min(in_flight, total)
        send(0, sent)
        answered = 0
        while answered < total:
            decoder.receive_data(os.read(read_fd, 65536))
            replies = 0
            while (event := decoder.next_event()) is not NEED_DATA:
                if isinstance(event, Frame):
                    json.loads(event.body)
                    replies += 1
            answered += replies
            more = min(replies, total - sent)
            if more:
                send(sent, more)
                sent += more
        return time.perf_counter() - start
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
        process.stdout.close()


# -- a plain asyncio client (concurrent peer) ----------------------------------------------


async def _asyncio_client(total: int, in_flight: int) -> float:
    """Seconds for ``total`` echo requests from a plain asyncio client, ``in_flight`` callers."""
    process = await asyncio.create_subprocess_exec(
        *_ARGV, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    pending: dict[int, asyncio.Future[object]] = {}
    next_id = 0

    async def read_replies() -> None:
        while True:
            header = await stdout.readuntil(b"\r\n\r\n")
            length = 0
            for line in header.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            reply = json.loads(await stdout.readexactly(length))
            future = pending.pop(reply["id"], None)
            if future is not None:
                future.set_result(reply.get("result"))

    async def request(params: object) -> object:
        nonlocal next_id
        next_id += 1
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        pending[next_id] = future
        body = json.dumps(
            {"jsonrpc": "2.0", "id": next_id, "method": "echo", "params": params},
            separators=(",", ":"),
        ).encode()
        stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await stdin.drain()
        return await future

    reader = asyncio.create_task(read_replies())
    try:
        await request([0])
        remaining = total

        async def caller() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await request([remaining])

        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(in_flight)))
        elapsed = time.perf_counter() - start
    finally:
        reader.cancel()
        stdin.close()
        await process.wait()
    return elapsed


# -- the figures ------------------------------------------------------------------------------


def _interleaved(
    ours: list[float],
    peer: list[float],
    run_ours: object,
    run_peer: object,
    floor: tuple[list[float], object] | None = None,
) -> None:
    for sample in range(SAMPLES + 1):
        runs = [(ours, run_ours), (peer, run_peer)]
        if floor is not None:
            runs.append(floor)
        # Each contestant goes first, second (and third) equally often.
        for sink, run in runs[sample % len(runs) :] + runs[: sample % len(runs)]:
            assert callable(run)
            value = run()
            if sample:  # the first round is the warm-up
                sink.append(value)


def measure(*, rounds: int = 200) -> list[dict[str, object]]:
    """Measure both figures; ``rounds`` scales the work (requests per sample, see below).

    Args:
        rounds: 64 in flight sends ``rounds * 64`` requests per sample; the sequential
            figure sends ``rounds * 10``.

    Returns:
        One dict per figure (the benchmarks convention: figure, ours, peer, unit, peer_name,
        ratio, goal, met).
    """
    concurrent_total = rounds * IN_FLIGHT
    sequential_total = rounds * 10

    ours_rps: list[float] = []
    asyncio_rps: list[float] = []
    ceiling_rps: list[float] = []
    _interleaved(
        ours_rps,
        asyncio_rps,
        lambda: concurrent_total / trio.run(_ours, concurrent_total, IN_FLIGHT),
        lambda: concurrent_total / asyncio.run(_asyncio_client(concurrent_total, IN_FLIGHT)),
        (ceiling_rps, lambda: concurrent_total / _pipelined(concurrent_total, IN_FLIGHT)),
    )
    ceiling = statistics.median(paired_ratios(ceiling_rps, asyncio_rps))
    ours_us: list[float] = []
    bare_us: list[float] = []
    _interleaved(
        ours_us,
        bare_us,
        lambda: trio.run(_ours, sequential_total, 1) / sequential_total * 1e6,
        lambda: trio.run(_bare_trio, sequential_total) / sequential_total * 1e6,
    )
    # Each sample pair ran back to back: the median of the per-pair ratios is far less
    # disturbed by the other users of a shared machine than a ratio of two medians.
    return [
        paired_row(
            "JSON-RPC echo over pipes, 64 in flight (req/s; ratio >1 = we are faster)",
            ours_rps,
            asyncio_rps,
            unit="req/s",
            peer_name="asyncio client",
            at_least=1.1,
            note=(
                f"the echo peer's ceiling (64 kept open, no task per request)"
                f" {statistics.median(ceiling_rps):.4g} req/s, {ceiling:.2f}x"
            ),
        ),
        paired_row(
            "JSON-RPC echo over pipes, sequential round trip (us; ratio >1 = slower)",
            ours_us,
            bare_us,
            unit="us",
            peer_name="bare Trio loop",
            at_most=1.1,
        ),
    ]


if __name__ == "__main__":
    for result in measure():
        print(result)
