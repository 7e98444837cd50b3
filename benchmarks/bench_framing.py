"""Framer throughput: ``protocol.FrameDecoder`` against a naive re-splitting parser.

The stream is fed in "realistic" chunks of 4-64 KiB (sizes drawn from a fixed seed, the
same for both parsers), as a pipe read loop would see it. Two workloads:

* small: 200-byte-ish JSON-RPC notifications (the bulk of LSP traffic);
* large: 1 MiB bodies (a big completion list or a file's diagnostics).

The peer is the parser many read loops write first (pygls's loop re-splits the same
way): keep a ``bytes`` buffer, append each chunk, and per message split the whole
buffer on ``b"\\r\\n\\r\\n"`` and slice off the rest. Each round times both parsers on
the same chunks, interleaved, after a warm-up; the figures are medians over rounds.

Goals (ours relative to the peer, throughput, so > 1 means we are faster):
``>= 1x`` for small messages (we pay for the stray-text and limit checks the naive
parser lacks) and ``>= 2x`` for large messages (where re-splitting is quadratic).

One more row on the small workload, framing + decoding: ``FrameDecoder`` +
``decode_message`` (every message fully decoded and validated) against python-lsp-jsonrpc's
``JsonRpcStreamReader`` reading the same bytes from memory (it parses with ujson when
installed, as here). Goal ``>= 2x``. It depends on msgspec being installed
(``protocol/_json.py``); the row says which parser ran.
"""

from __future__ import annotations

import io
import random
import statistics
import time
from typing import TYPE_CHECKING

from benchmarks._common import paired_ratios, row
from protocol import (
    NEED_DATA,
    Frame,
    FrameDecoder,
    _json as protocol_json,
    decode_message,
    encode_frame,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("measure",)

_SEED = 20261129
_SMALL_BYTES = 1024 * 1024
_LARGE_BODY = 1024 * 1024
_LARGE_COUNT = 4


def _small_body(index: int) -> bytes:
    return (
        b'{"jsonrpc":"2.0","method":"job.output","params":{"jobId":"j-%06d",'
        b'"stream":"stdout","text":"compiling module %06d of the project, step %d\\n"}}'
        % (index, index, index % 7)
    )


def _stream(kind: str) -> tuple[list[bytes], int, int]:
    """The chunks of one workload, its message count and its byte count."""
    if kind == "small":
        bodies: list[bytes] = []
        total = 0
        while total < _SMALL_BYTES:
            body = _small_body(len(bodies))
            bodies.append(body)
            total += len(body)
    else:
        bodies = [bytes([0x61 + i]) * _LARGE_BODY for i in range(_LARGE_COUNT)]
    data = b"".join(encode_frame(body) for body in bodies)
    rng = random.Random(_SEED)
    chunks = []
    offset = 0
    while offset < len(data):
        size = rng.randint(4 * 1024, 64 * 1024)
        chunks.append(data[offset : offset + size])
        offset += size
    return chunks, len(bodies), len(data)


def _ours(chunks: list[bytes]) -> int:
    decoder = FrameDecoder()
    count = 0
    for chunk in chunks:
        decoder.receive_data(chunk)
        while True:
            event = decoder.next_event()
            if event is NEED_DATA:
                break
            if isinstance(event, Frame):
                count += 1
    return count


def _naive(chunks: list[bytes]) -> int:
    buffer = b""
    count = 0
    for chunk in chunks:
        buffer += chunk
        while True:
            head, sep, rest = buffer.partition(b"\r\n\r\n")
            if not sep:
                break
            length = -1
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length < 0 or len(rest) < length:
                break
            _body = rest[:length]
            buffer = rest[length:]
            count += 1
    return count


def _decoding(chunks: list[bytes]) -> int:
    decoder = FrameDecoder()
    count = 0
    for chunk in chunks:
        decoder.receive_data(chunk)
        while True:
            event = decoder.next_event()
            if event is NEED_DATA:
                break
            if isinstance(event, Frame):
                decode_message(event.body)
                count += 1
    return count


def _pylsp_jsonrpc(chunks: list[bytes]) -> int:
    from pylsp_jsonrpc.streams import JsonRpcStreamReader  # type: ignore[import-untyped]

    received: list[object] = []
    JsonRpcStreamReader(io.BytesIO(b"".join(chunks))).listen(received.append)
    return len(received)


def _decoding_rows(rounds: int) -> list[dict[str, object]]:
    chunks, messages, _ = _stream("small")
    parser = "msgspec" if protocol_json._fast_decode is not None else "stdlib json"
    rows: list[dict[str, object]] = []
    try:
        import pylsp_jsonrpc  # type: ignore[import-untyped]  # noqa: F401  # benchmark extra
    except ImportError:
        pass
    else:
        ours: list[float] = []
        peer: list[float] = []
        for i in range(rounds + 1):
            pair = [(ours, _decoding), (peer, _pylsp_jsonrpc)]
            if i % 2:
                pair.reverse()
            for sink, fn in pair:
                elapsed = _time(fn, chunks, messages)
                if i:
                    sink.append(elapsed)
        ratios = [1 / r for r in paired_ratios(ours, peer)]
        ratio = statistics.median(ratios)
        rows.append(
            row(
                f"framing + decoding small messages, {parser} (msg/s)",
                ours=messages / statistics.median(ours),
                peer=messages / statistics.median(peer),
                unit="msg/s",
                peer_name="python-lsp-jsonrpc reader",
                ratio=ratio,
                goal=">= 2x",
                met=ratio >= 2.0,
                ratios=ratios,
            )
        )
    return rows


def _time(fn: Callable[[list[bytes]], int], chunks: list[bytes], expected: int) -> float:
    start = time.perf_counter()
    count = fn(chunks)
    elapsed = time.perf_counter() - start
    if count != expected:
        raise RuntimeError(f"{fn.__name__} decoded {count} messages, expected {expected}")
    return elapsed


def measure(*, rounds: int = 200) -> list[dict[str, object]]:
    """Measure both parsers on both workloads.

    Args:
        rounds: Timed rounds per workload (each times both parsers once); the large
            workload runs a tenth as many (at least 3), since each round moves 4 MiB
            through a quadratic peer.

    Returns:
        One row per figure: ``{figure, ours, peer, unit, peer_name, ratio, goal, met}``
        with throughputs in MB/s (medians; the framer rows give them in messages/s in their
        ``note``); ``ratio`` is ours / peer (> 1 means we are faster).
    """
    rows: list[dict[str, object]] = []
    for kind, goal in (("small", 1.0), ("large", 2.0)):
        chunks, messages, size = _stream(kind)
        kind_rounds = rounds if kind == "small" else max(3, rounds // 10)
        for fn in (_ours, _naive):  # warm-up
            _time(fn, chunks, messages)
        ours: list[float] = []
        peer: list[float] = []
        for _ in range(kind_rounds):
            ours.append(_time(_ours, chunks, messages))
            peer.append(_time(_naive, chunks, messages))
        ours_s = statistics.median(ours)
        peer_s = statistics.median(peer)
        label = f"{kind} messages ({size // messages} B each), 4-64 KiB chunks"
        ratio = peer_s / ours_s
        # One measurement, one goal, one row: the same figure in messages/s is its note
        # (two rows, one per unit, counted the goal twice and showed twice in an A/B table).
        rows.append(
            {
                "figure": f"framer throughput, {label} (ratio > 1: we are faster)",
                "ours": round(size / 1e6 / ours_s, 1),
                "peer": round(size / 1e6 / peer_s, 1),
                "unit": "MB/s",
                "peer_name": "naive re-splitting parser (pygls-style)",
                "ratio": round(ratio, 2),
                "goal": f">= {goal:g}x naive",
                "met": ratio >= goal,
                "note": f"{messages / ours_s:.4g} vs {messages / peer_s:.4g} messages/s",
            }
        )
    rows.extend(_decoding_rows(max(5, rounds // 10)))
    return rows


if __name__ == "__main__":
    for result in measure(rounds=20):
        print(result)
