"""Every request is a supervision boundary, and no value in any field escapes its request.

Hostile values (lone surrogates, NUL, huge and negative integers, ``1e400`` inside
pass-through JSON, wrong types, megabyte names) go into the fields of every command, through a
Core and through a real ``supervisor serve``: each request ends with exactly one answer whose
message is at most 1024 UTF-8 bytes, never ``internal``, and the Core goes on answering. An
injected fault at ``request.dispatch`` ends only its request, as ``internal``. The suite's
leak guard (``no_leaked_processes``, autouse) proves that no process outlives any of them.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings, strategies as st

from protocol import CoreError, lookup_error
from supervisor import open_core, serve
from supervisor._boundary import FaultPlan
from tests._faults import armed

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Mapping

    from hypothesis.strategies import SearchStrategy

    from protocol import JSONObject, JSONValue
    from supervisor._core._core import Core
    from supervisor._core._service import CommandHandler, ServiceContext

PY = sys.executable
#: Each call gets this deadline, so a hostile value that makes a call wait (a long
#: ``*.waitEvents``) still ends it, as ``timed_out``: one answer either way.
CALL_TIMEOUT_MS = 300
MEGABYTE = "n" * (1 << 20)
INF = math.inf


@functools.cache
def _fields() -> dict[str, tuple[str, ...]]:
    """Each command's fields, read from its own answer to an unknown field (once, on first
    use rather than at import: collecting the suite must not open a Core)."""

    async def main() -> dict[str, tuple[str, ...]]:
        fields: dict[str, tuple[str, ...]] = {}
        async with open_core() as core:
            for command in core.commands:
                with pytest.raises(CoreError) as info:
                    await core.call(command, {"\0probe": 1})
                match = re.search(r"\(known: ([^)]*)\)", info.value.message)
                assert match is not None, (command, info.value.message)
                known = match.group(1)
                fields[command] = () if known == "none" else tuple(known.split(", "))
        return fields

    return trio.run(main)


@functools.cache
def _all_fields() -> list[str]:
    return sorted({name for names in _fields().values() for name in names})


TEXT: SearchStrategy[JSONValue] = st.sampled_from(
    ["\ud800", "a\0b", "", MEGABYTE, "/bin/true", "é\udfff", "-1", "x"]
)
NUMBERS: SearchStrategy[JSONValue] = (
    st.sampled_from([-1, 0, 1, 2**31, 2**63, 10**30, 10**300, INF, -INF, 1.5, True, False])
    | st.integers()
)
SCALARS: SearchStrategy[JSONValue] = TEXT | NUMBERS | st.none()
KEYS: SearchStrategy[str] = st.sampled_from(["A", "", "A=B", "\ud800", "a\0", MEGABYTE, "x"])
VALUES: SearchStrategy[JSONValue] = (
    SCALARS
    | st.lists(SCALARS, max_size=3)
    | st.dictionaries(KEYS, SCALARS | st.lists(SCALARS, max_size=2), max_size=3)
    | st.sampled_from([["/bin/true", "\ud800"], ["/bin/true", "a\0"], {"a": [INF]}])
)


#: Near-valid payloads for the commands that start something: a hostile value in one of
#: their fields then meets the code past the first checks.
BASES: dict[str, JSONObject] = {
    "process.run": {"argv": ["/bin/true"]},
    "job.start": {"kind": "build", "root": "/", "argv": ["/bin/true"]},
    "terminal.create": {"executable": "/bin/true"},
    "lsp.startServer": {
        "serverId": "s",
        "executable": "/bin/true",
        "workingDirectory": "/",
        "rootUri": "file:///",
    },
    "debug.createSession": {
        "adapterId": "a",
        "rootPath": "/",
        "adapter": {"transport": "stdio", "executable": "/bin/true"},
    },
}


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, JSONObject]:
    command = draw(st.sampled_from(sorted(_fields())))
    names = _fields()[command]
    payload: JSONObject = dict(BASES.get(command, {}))
    if names:
        payload.update(draw(st.dictionaries(st.sampled_from(names), VALUES, max_size=3)))
    if not names or draw(st.integers(0, 9)) == 0:
        # Now and then a field the command does not define, or a name nobody should echo.
        foreign = draw(st.sampled_from([*_all_fields(), MEGABYTE, "\ud800"]))
        payload[foreign] = draw(VALUES)
    return command, payload


#: One value of each hostile kind, for the sweep over every field of every command.
HOSTILE: tuple[JSONValue, ...] = (
    "\ud800",
    "a\0b",
    "",
    MEGABYTE,
    -1,
    0,
    2**31,
    10**30,
    INF,
    -INF,
    1.5,
    True,
    None,
    [],
    ["/bin/true", "\ud800"],
    ["/bin/true", "a\0"],
    {"A": "\ud800"},
    {"a\0": "x"},
    {"a": [INF]},
    {MEGABYTE: 1},
)


def _check_error(error: CoreError) -> None:
    assert lookup_error(error.code).name == error.code  # a catalogue code
    assert error.code != "internal", error
    # On a character boundary and free of lone surrogates: it encodes strictly.
    assert len(error.message.encode("utf-8")) <= 1024, error.code
    json.dumps(error.to_json(), allow_nan=False).encode("utf-8")


async def _ping(core: Core) -> None:
    pong = await core.call("core.ping", {})
    assert isinstance(pong, dict)
    assert pong["protocolVersion"] == 1


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batch=st.lists(calls(), min_size=1, max_size=6))
def test_hostile_values_end_only_their_request(batch: list[tuple[str, JSONObject]]) -> None:
    async def main() -> None:
        async with open_core() as core:
            for command, payload in batch:
                answers: list[object] = []
                try:
                    answers.append(await core.call(command, payload, timeout_ms=CALL_TIMEOUT_MS))
                except CoreError as exc:
                    _check_error(exc)
                    answers.append(exc)
                assert len(answers) == 1
                await _ping(core)

    trio.run(main)


def test_every_field_of_every_command_refuses_each_hostile_kind() -> None:
    """The sweep: each hostile kind in each field of each command (on a near-valid payload
    where the command starts something), one fresh Core per command."""

    fields = _fields()

    async def main() -> None:
        for command, names in sorted(fields.items()):
            async with open_core() as core:
                for name in names:
                    for value in HOSTILE:
                        payload: JSONObject = {**BASES.get(command, {}), name: value}
                        try:
                            await core.call(command, payload, timeout_ms=CALL_TIMEOUT_MS)
                        except CoreError as exc:
                            _check_error(exc)
                await _ping(core)

    trio.run(main)


# -- the same through a real `supervisor serve` -----------------------------------------------


def _frame(message: JSONObject, *, raw: dict[str, str] | None = None) -> bytes:
    """A frame; ``raw`` replaces placeholder strings by JSON text json.dumps can't write."""
    body = json.dumps(message)
    for placeholder, text in (raw or {}).items():
        body = body.replace(json.dumps(placeholder), text)
    data = body.encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def _field(message: JSONObject, *path: str) -> JSONValue:
    value: JSONValue = message
    for key in path:
        assert isinstance(value, dict), (key, message)
        value = value[key]
    return value


class _Frames:
    """Reads the frames ``supervisor serve`` writes (strictly: any stray byte fails)."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> JSONObject | None:
        while b"\r\n\r\n" not in self._buffer:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                assert not self._buffer
                return None
            self._buffer += chunk
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        assert head.startswith(b"Content-Length: "), head
        length = int(head.split(b":", 1)[1])
        while len(rest) < length:
            chunk = await self._stream.receive_some(65536)
            assert chunk
            rest += chunk
        self._buffer = rest[length:]
        message = json.loads(rest[:length])
        assert isinstance(message, dict)
        return message

    async def replies(self, count: int) -> Iterator[JSONObject]:
        found: list[JSONObject] = []
        with trio.fail_after(30):
            while len(found) < count:
                message = await self.next()
                assert message is not None, "serve closed its output"
                if "method" not in message:
                    found.append(message)
        return iter(found)


BAD_SERVE_REQUESTS: list[tuple[str, JSONObject, dict[str, str]]] = [
    ("process.run", {"argv": ["/bin/echo", "\ud800"]}, {}),
    ("process.run", {"argv": ["/bin/true"], "env": {"A": "\ud800"}}, {}),
    (
        "process.run",
        {"argv": ["/bin/true"], "timeoutMilliseconds": "@HUGE"},
        {"@HUGE": "1" + "0" * 30},
    ),
    (
        "job.start",
        {"kind": "build", "root": "/", "argv": ["/bin/true"], "timeoutMilliseconds": "@HUGE"},
        {"@HUGE": "1" + "0" * 30},
    ),
    (
        "lsp.startServer",
        {
            "serverId": "s",
            "executable": "/bin/true",
            "workingDirectory": "/",
            "rootUri": "file:///",
            "initializationOptions": {"a": "@INF"},
        },
        {"@INF": "1e400"},
    ),
    ("job.waitEvents", {"timeoutMilliseconds": "@INF"}, {"@INF": "1e400"}),
    ("x" * 100_000, {}, {}),
    ("terminal.write", {"terminalID": "t" * 100_000, "data": "x"}, {}),
]


async def test_serve_answers_bad_requests_once_and_goes_on() -> None:
    process = await trio.lowlevel.open_process(
        [PY, "-m", "supervisor", "serve"], stdin=-1, stdout=-1, stderr=-3
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        frames = _Frames(process.stdout)
        send = process.stdin.send_all
        # A non-finite number in initializationOptions is refused; initialize may be retried.
        bad_init: JSONObject = {"initializationOptions": {"x": "@INF"}}
        await send(
            _frame(
                {"jsonrpc": "2.0", "id": -1, "method": "initialize", "params": bad_init},
                raw={"@INF": "1e400"},
            )
        )
        (refused,) = await frames.replies(1)
        assert _field(refused, "error", "data", "code") == "invalid_request"
        await send(_frame({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}))
        (init,) = await frames.replies(1)
        assert "result" in init
        for number, (method, params, raw) in enumerate(BAD_SERVE_REQUESTS, start=1):
            await send(
                _frame(
                    {"jsonrpc": "2.0", "id": number, "method": method, "params": params}, raw=raw
                )
            )
        answers = list(await frames.replies(len(BAD_SERVE_REQUESTS)))
        assert sorted(a["id"] for a in answers) == list(range(1, len(BAD_SERVE_REQUESTS) + 1))  # type: ignore[type-var]
        for answer in answers:
            error = answer["error"]
            assert isinstance(error, dict)
            data = error["data"]
            assert isinstance(data, dict)
            assert data["code"] in ("invalid_request", "not_supported", "not_found"), answer
            assert isinstance(error["message"], str)
            assert len(error["message"].encode()) <= 1024
        await send(_frame({"jsonrpc": "2.0", "id": 100, "method": "core.ping", "params": {}}))
        (ping,) = await frames.replies(1)
        assert ping["id"] == 100
        assert "result" in ping
        await send(_frame({"jsonrpc": "2.0", "id": 101, "method": "shutdown"}))
        (down,) = await frames.replies(1)
        assert down == {"jsonrpc": "2.0", "id": 101, "result": None}
        await send(_frame({"jsonrpc": "2.0", "method": "exit"}))
        with trio.fail_after(30):
            assert await process.wait() == 0
    finally:
        process.kill()
        await process.wait()


# -- a command's own bug ---------------------------------------------------------------------


class _BuggyService:
    """Commands with the bugs a boundary must contain."""

    def commands(self) -> Mapping[str, CommandHandler]:
        return {"bug.raise": self._raise, "bug.group": self._group}

    async def aclose(self) -> None:
        """Nothing to close."""

    async def _raise(self, payload: JSONObject) -> JSONValue:
        return {"ratio": 1 / len(payload)}

    async def _group(self, payload: JSONObject) -> JSONValue:
        async def refuse() -> None:
            raise CoreError("not_found", "no such thing")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(refuse)
        return None  # pragma: no cover


@asynccontextmanager
async def _open_buggy_service(context: ServiceContext) -> AsyncIterator[_BuggyService]:
    yield _BuggyService()


async def test_a_command_bug_is_internal_and_the_core_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_core(services=(_open_buggy_service,)) as core:
        with pytest.raises(CoreError) as info:
            await core.call("bug.raise", {})
        assert (info.value.code, info.value.message) == (
            "internal",
            "ZeroDivisionError: division by zero",
        )
        assert "Traceback" in caplog.text  # logged, never on the wire
        assert await core.call("bug.raise", {"a": 1}) == {"ratio": 1.0}
        # A CoreError raised in a nursery of the command is still its own answer.
        with pytest.raises(CoreError) as grouped:
            await core.call("bug.group", {})
        assert grouped.value.code == "not_found"
        response = await core.execute({"id": 1, "command": "bug.raise"})
        assert response["error"] == {
            "code": "internal",
            "message": "ZeroDivisionError: division by zero",
        }


# -- an injected fault inside a request ---------------------------------------------------------


@pytest.fixture
def fault_at_request() -> Iterator[FaultPlan]:
    plan = FaultPlan(sites=("request.",))
    with armed(plan):
        yield plan


async def test_injected_fault_ends_only_its_request(fault_at_request: FaultPlan) -> None:
    async with open_core() as core:
        with pytest.raises(CoreError) as info:
            await core.call("process.run", {"argv": ["/bin/true"]})
        assert info.value.code == "internal"
        assert info.value.message == "InjectedFault: injected fault at request.dispatch"
        assert fault_at_request.fired == ["request.dispatch"]
        result = await core.call("process.run", {"argv": ["/bin/true"]})
        assert isinstance(result, dict)
        assert result["exitCode"] == 0
        response = await core.execute({"id": 7, "command": "core.ping"})
        assert response["ok"] is True


async def test_injected_fault_through_serve_is_answered_internal(
    fault_at_request: FaultPlan,
) -> None:
    """In-process ``serve``: the faulty request is answered with ``data.code`` ``internal``,
    the next one with its result, and the session ends normally."""
    client, server = trio.testing.memory_stream_pair()
    frames = _Frames(client)
    codes: list[int] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            codes.append(await serve(server, server))

        nursery.start_soon(run)
        await client.send_all(_frame({"jsonrpc": "2.0", "id": 0, "method": "initialize"}))
        (init,) = await frames.replies(1)
        assert "result" in init
        await client.send_all(_frame({"jsonrpc": "2.0", "id": 1, "method": "core.ping"}))
        (faulty,) = await frames.replies(1)
        error = faulty["error"]
        assert isinstance(error, dict)
        assert error["data"] == {
            "code": "internal",
            "message": "InjectedFault: injected fault at request.dispatch",
        }
        await client.send_all(_frame({"jsonrpc": "2.0", "id": 2, "method": "core.ping"}))
        (ping,) = await frames.replies(1)
        assert "result" in ping
        await client.send_all(_frame({"jsonrpc": "2.0", "id": 3, "method": "shutdown"}))
        await frames.replies(1)
        await client.send_all(_frame({"jsonrpc": "2.0", "method": "exit"}))
    assert codes == [0]


@pytest.mark.parametrize(
    ("command", "payload", "field"),
    [
        (
            "lsp.startServer",
            {
                "serverId": "s",
                "executable": "/bin/true",
                "arguments": "not-a-list",
                "workingDirectory": "/tmp",
                "rootUri": "file:///tmp",
            },
            "arguments",
        ),
        (
            "lsp.startServer",
            {
                "serverId": "s",
                "executable": "/bin/true",
                "workingDirectory": "relative/dir",
                "rootUri": "file:///tmp",
            },
            "workingDirectory",
        ),
        ("debug.createSession", {"adapterId": "a", "adapter": "not-an-object"}, "adapter"),
        (
            "debug.createSession",
            {"adapterId": "a", "adapter": {"executable": "/bin/true", "arguments": 5}},
            "adapter.arguments",
        ),
    ],
)
async def test_a_refused_field_is_named_in_details(
    command: str, payload: JSONObject, field: str
) -> None:
    """Each refusal says which field was wrong (``details.field``), for every command."""
    async with open_core() as core:
        with pytest.raises(CoreError) as info:
            await core.call(command, payload)
    assert info.value.code == "invalid_request"
    assert info.value.details is not None
    assert info.value.details.get("field") == field, info.value
