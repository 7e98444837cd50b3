"""The session registry: ids, lookup with a bounded ``not_found``, and waitEvents/pollEvents."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import trio

from protocol import MAX_ECHO_BYTES, CoreError
from supervisor._api import validate_payload
from supervisor._session._events import EventQueue
from supervisor._session._registry import SessionRegistry


@dataclass
class _Session:
    name: str
    events: EventQueue = field(default_factory=EventQueue)


def _registry() -> SessionRegistry[_Session]:
    return SessionRegistry("lsp", "language-server session", "sessionId", lambda s: s.events)


def test_ids_count_up_with_the_kind_prefix_and_skip_taken_ones() -> None:
    registry = _registry()
    first = registry.new_id()
    registry.add(first, _Session("a"))
    # A caller-chosen id that the counter would reach next is skipped.
    registry.add("lsp-2", _Session("chosen"))
    assert (first, registry.new_id()) == ("lsp-1", "lsp-3")


def test_add_refuses_a_taken_id_and_remove_forgets() -> None:
    registry = _registry()
    session = _Session("a")
    registry.add("x", session)
    with pytest.raises(ValueError, match="taken"):
        registry.add("x", _Session("b"))
    assert dict(registry) == {"x": session}
    assert len(registry) == 1
    assert registry.remove("x") is session
    assert registry.remove("x") is None
    assert list(registry.values()) == []


def test_find_finds_by_the_id() -> None:
    registry = _registry()
    session = _Session("a")
    registry.add("lsp-1", session)
    assert registry.find("lsp-1") is session


def test_find_of_an_unknown_id_is_not_found_with_the_id_cut() -> None:
    registry = _registry()
    huge = "x" * 100_000
    with pytest.raises(CoreError) as info:
        registry.find(huge)
    assert info.value.code == "not_found"
    assert info.value.message.startswith("no language-server session 'xxx")
    assert len(info.value.message.encode()) < 2 * MAX_ECHO_BYTES
    assert info.value.details is not None
    detail = info.value.details["sessionId"]
    assert isinstance(detail, str)
    assert len(detail.encode()) <= MAX_ECHO_BYTES + 3


@pytest.mark.parametrize("payload", [{}, {"sessionId": 7}, {"sessionId": ""}])
def test_a_missing_or_bad_id_is_refused_at_the_edge(payload: dict[str, object]) -> None:
    # The handlers take their declaration: the Core's decode refuses it first.
    with pytest.raises(CoreError) as info:
        validate_payload("lsp.pollEvents", payload)
    assert info.value.code == "invalid_request"


async def test_poll_and_wait_drain_the_named_session(autojump_clock: trio.abc.Clock) -> None:
    registry = _registry()
    session = _Session("a")
    registry.add("lsp-1", session)
    commands = registry.event_commands("lsp")
    assert set(commands) == {"lsp.waitEvents", "lsp.pollEvents"}
    session.events.put("log", {"line": "hi"})
    polled = await commands["lsp.pollEvents"](
        validate_payload("lsp.pollEvents", {"sessionId": "lsp-1"})
    )
    assert polled == {"events": [{"seq": 1, "event": "log", "line": "hi"}], "gap": False}

    async def later() -> None:
        await trio.sleep(1)
        session.events.put("log", {"line": "late"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        waited = await commands["lsp.waitEvents"](
            validate_payload("lsp.waitEvents", {"sessionId": "lsp-1", "timeoutMilliseconds": 5_000})
        )
    assert isinstance(waited, dict)
    events = waited["events"]
    assert isinstance(events, list)
    assert [e["seq"] for e in events if isinstance(e, dict)] == [2]
    timed_out = await commands["lsp.waitEvents"](
        validate_payload("lsp.waitEvents", {"sessionId": "lsp-1", "timeoutMilliseconds": 10})
    )
    assert timed_out == {"events": [], "gap": False}


async def test_event_commands_check_fields_ids_and_timeouts() -> None:
    # Fields and ranges are the declarations' (checked by the Core before the handler).
    with pytest.raises(CoreError) as extra:
        validate_payload("lsp.pollEvents", {"sessionId": "lsp-1", "timeoutMilliseconds": 1})
    assert extra.value.code == "invalid_request"
    commands = _registry().event_commands("lsp")
    with pytest.raises(CoreError) as missing:
        await commands["lsp.waitEvents"](validate_payload("lsp.waitEvents", {"sessionId": "lsp-9"}))
    assert missing.value.code == "not_found"
    with pytest.raises(CoreError) as bad:
        validate_payload("lsp.waitEvents", {"sessionId": "lsp-1", "timeoutMilliseconds": -1})
    assert bad.value.code == "invalid_request"
    assert bad.value.message.startswith("lsp.waitEvents: ")


class _ClosingQueue:
    def poll(self) -> dict[str, object]:
        return {"events": [], "gap": False}

    async def wait(self, timeout_ms: int) -> dict[str, object]:
        raise trio.ClosedResourceError


async def test_a_wait_ended_by_a_dispose_is_not_found() -> None:
    registry: SessionRegistry[_ClosingQueue] = SessionRegistry(
        "term",
        "terminal",
        "terminalID",
        lambda q: q,  # type: ignore[arg-type,return-value]
    )
    registry.add("term-1", _ClosingQueue())
    with pytest.raises(CoreError) as info:
        await registry.event_commands("terminal")["terminal.waitEvents"](
            validate_payload(
                "terminal.waitEvents", {"terminalID": "term-1", "timeoutMilliseconds": 1_000}
            )
        )
    assert (info.value.code, info.value.message) == ("not_found", "terminal term-1 was disposed")
    assert info.value.details == {"terminalID": "term-1"}
