"""Memory bounds that hold whatever a caller sends or a process writes (issue 13).

- ``maxOutputBytes`` (and every Python API that keeps output) is at most 64 MiB;
- an answer's body never exceeds the frame-body limit: ``process.run`` output is cut by its
  size as JSON (a NUL byte takes six bytes there), event drains are split into batches, and
  the endpoint answers -32603 rather than write an oversized frame;
- the frame-body bytes held by requests in flight have a budget, past which a new request
  is refused ``busy``.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

import supervisor._core._builtins as builtins
from lanes import Lanes
from protocol import MAX_OUTPUT_BYTES, CoreError, ErrorResponse, Request, Response
from protocol._json import cut_text_to_size, dumps, encoded_size, fit_texts, text_size
from supervisor import EventQueue, ProcessJobRunner, open_core, run_process
from supervisor._endpoint import JSONRPCEndpoint, open_jsonrpc_endpoint
from tests.supervisor.test_endpoint import RawPeer

if TYPE_CHECKING:
    from protocol import JSONValue
    from supervisor._endpoint import RequestHandler

PY = sys.executable


# -- maxOutputBytes ----------------------------------------------------------------------


async def test_max_output_bytes_is_bounded_on_every_path() -> None:
    async with open_core() as core:
        with pytest.raises(CoreError) as info:
            await core.call(
                "process.run", {"argv": [PY, "-c", "pass"], "maxOutputBytes": MAX_OUTPUT_BYTES + 1}
            )
        assert (info.value.code, info.value.details) == (
            "invalid_request",
            {"field": "maxOutputBytes"},
        )
    with pytest.raises(CoreError, match="at most"):
        await run_process([PY, "-c", "pass"], max_output_bytes=MAX_OUTPUT_BYTES + 1)
    with pytest.raises(ValueError, match="at most"):
        Lanes(ProcessJobRunner(), on_event=lambda *_: None, max_output_tail_bytes=2**40)


# -- the size of an answer as JSON -----------------------------------------------------------


def test_text_size_is_the_size_dumps_writes() -> None:
    for text in ["", "plain", "\0" * 70_000 + "é", '"\\\n\x7f\u2028😀' * 30_000, "\udc80x"]:
        assert text_size(text) == len(dumps(text))
    assert encoded_size({"a": ["\0", 1.5, None]}) == len(dumps({"a": ["\0", 1.5, None]}))


def test_cutting_keeps_the_longest_head_that_fits() -> None:
    text = "ab\0" * 50_000
    for limit in (2, 3, 10, 1000, 100_001):
        cut = cut_text_to_size(text, limit)
        assert text.startswith(cut)
        assert text_size(cut) <= limit
        assert len(cut) == len(text) or text_size(text[: len(cut) + 1]) > limit
    texts, cut_any = fit_texts(["small", "\0" * 10_000], 1000)
    assert cut_any
    assert texts[0] == "small"
    assert sum(map(text_size, texts)) <= 1000
    assert fit_texts(["a", "b"], 1000) == (["a", "b"], False)


async def test_process_run_output_is_cut_by_its_size_as_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bound is the frame limit less some room; a smaller one shows the same rule quickly.
    monkeypatch.setattr(builtins, "MAX_OUTPUT_ANSWER_BYTES", 600_000)
    writer = "import os; os.write(1, b'\\0' * 400_000); os.write(2, b'\\x01' * 50 + b'\\xff' * 50)"
    async with open_core() as core:
        result = await core.call("process.run", {"argv": [PY, "-c", writer]})
    assert isinstance(result, dict)
    stdout, stderr = result["stdout"], result["stderr"]
    assert isinstance(stdout, str)
    assert isinstance(stderr, str)
    assert result["truncated"] is True
    assert result["exitCode"] == 0
    assert stderr == "\x01" * 50 + "\ufffd" * 50  # the small stream is kept whole
    assert set(stdout) == {"\0"}
    assert 0 < len(stdout) < 400_000
    assert text_size(stdout) + text_size(stderr) <= 600_000


# -- event drains ---------------------------------------------------------------------------


async def test_an_event_drain_is_split_into_batches_within_the_bound() -> None:
    queue = EventQueue(max_events=100, max_batch_bytes=2000)
    for i in range(20):
        queue.put("job.output", {"jobId": "j", "stream": "stdout", "text": "\0" * 30 + str(i)})
    queue.put("job.finished", {"jobId": "j", "text": "\0" * 5000})  # larger than a batch
    seen: list[JSONValue] = []
    batches = 0
    while True:
        batch = await queue.wait(1000)  # returns at once while events remain
        events = batch["events"]
        assert isinstance(events, list)
        if not events:
            break
        batches += 1
        assert len(events) == 1 or len(dumps(events)) <= 2000
        seen.extend(events)
        if queue.statistics().queued == 0:
            break
    assert batches >= 4
    assert [e["seq"] for e in seen if isinstance(e, dict)] == list(range(1, 22))


# -- the endpoint -------------------------------------------------------------------------


async def _raw_endpoint(
    handler: RequestHandler,
    nursery: trio.Nursery,
    *,
    max_body_bytes: int = 1 << 20,
    max_inflight_bytes: int = 1 << 30,
) -> tuple[JSONRPCEndpoint, RawPeer]:
    ours, theirs = trio.testing.memory_stream_pair()

    async def run(task_status: trio.TaskStatus[JSONRPCEndpoint]) -> None:
        async with open_jsonrpc_endpoint(
            ours.send_stream,
            ours.receive_stream,
            request_handler=handler,
            max_body_bytes=max_body_bytes,
            max_inflight_bytes=max_inflight_bytes,
        ) as endpoint:
            task_status.started(endpoint)
            await trio.sleep_forever()

    endpoint: JSONRPCEndpoint = await nursery.start(run)
    return endpoint, RawPeer(theirs)


async def test_an_answer_over_the_frame_limit_is_refused_not_written() -> None:
    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        return "\0" * 20_000 if method == "big" else "small"

    async with trio.open_nursery() as nursery:
        _, peer = await _raw_endpoint(handler, nursery, max_body_bytes=100_000)
        await peer.send_message(Request(id=1, method="big", params=None))
        refused = await peer.receive()
        assert isinstance(refused, ErrorResponse)
        assert (refused.id, refused.error.code) == (1, -32603)
        assert "frame-body limit" in refused.error.message
        # Only that request ended.
        await peer.send_message(Request(id=2, method="other", params=None))
        answer = await peer.receive()
        assert isinstance(answer, Response)
        assert answer.result == "small"
        nursery.cancel_scope.cancel()


async def test_request_bytes_in_flight_have_a_budget() -> None:
    release = trio.Event()

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        await release.wait()
        return len(json.dumps(params))

    async with trio.open_nursery() as nursery:
        _, peer = await _raw_endpoint(handler, nursery, max_inflight_bytes=50_000)
        big: list[JSONValue] = ["x" * 20_000]
        for i in range(3):
            await peer.send_message(Request(id=i, method="hold", params=big))
        refused = await peer.receive()
        assert isinstance(refused, ErrorResponse)
        assert (refused.id, refused.error.code, refused.error.data) == (2, -32803, {"code": "busy"})
        release.set()
        assert {(await peer.receive()).id for _ in range(2)} == {0, 1}  # type: ignore[union-attr]
        # The budget is free again once they were answered.
        await peer.send_message(Request(id=3, method="hold", params=big))
        answer = await peer.receive()
        assert isinstance(answer, Response)
        assert answer.id == 3
        nursery.cancel_scope.cancel()


# -- found by the fuzzer ------------------------------------------------------------------


async def test_a_request_nesting_too_deep_is_refused_under_its_own_id() -> None:
    """Regression (tests/fuzz): a request nesting past 512 levels was answered with id null,
    so the client could not tell which request it refused."""
    deep = "[" * 600 + "]" * 600
    async with open_core() as core:
        response = await core.execute(
            f'{{"id": 7, "command": "process.run", "payload": {{"argv": {deep}}}}}'
        )
    assert response["id"] == 7
    error = response["error"]
    assert isinstance(error, dict)
    assert error["code"] == "invalid_request"
    assert "nests deeper than 512" in str(error["message"])


async def test_a_frame_nesting_too_deep_is_refused_under_its_own_id() -> None:
    """Regression (tests/fuzz), at the endpoint: the refusal names the request's id."""

    async def handler(method: str, params: JSONValue | None) -> JSONValue:
        return "unreachable"  # pragma: no cover

    async with trio.open_nursery() as nursery:
        _, peer = await _raw_endpoint(handler, nursery)
        deep = "[" * 600 + "]" * 600
        body = f'{{"jsonrpc": "2.0", "id": 5, "method": "m", "params": {deep}}}'.encode()
        await peer.send(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        refused = await peer.receive()
        assert isinstance(refused, ErrorResponse)
        assert (refused.id, refused.error.code) == (5, -32600)
        nursery.cancel_scope.cancel()
