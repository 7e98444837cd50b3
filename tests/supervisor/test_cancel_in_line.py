"""A cancel is never overtaken by the request it names (cancel40; DESIGN invariants 4, 19).

Editors pipeline: ``$/cancelRequest`` follows a completion request within milliseconds. The
request may then still wait for its turn in its session's line (the order rule) when the
cancel -- ordered with nothing, so it never waits behind what it cancels -- arrives. Such a
request ends exactly once, cancelled, the way a running one ends when cancelled, and never
reaches the server; the cancel answers true. A cancel naming another session's waiting
operation, an unknown or an ended one answers false and changes nothing.

The named request must surely wait when its cancel arrives. The language-server test holds
its session's line on purpose -- a server held in its ``initialize`` handshake holds an
``lsp.syncDocument`` queued behind a request (the change waits for the session's outbox) --
and a program started by the same pipeline (``process.run``, ordered with nothing) lets the
handshake go on a moment after the cancels arrived; it runs through every path a client can
pipeline through: ``supervisor serve``, ``CoreThread.submit_json``, ``Core.submit`` and
``nursery.start``. The other tests pipeline with ``Core.submit`` (no task starts before the
cancel has run) and, for debug sessions, through serve with many operations ahead.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from protocol import CoreError
from supervisor import open_core
from tests.supervisor.test_order_rule import (
    DAP_FAKE,
    DRIVERS,
    LSP_FAKE,
    PY,
    WAIT_S,
    CoreDriver,
    _lsp_session,
    _obj,
    open_driver,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from protocol import JSONObject, JSONValue
    from tests.supervisor.test_order_rule import Driver

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux")

#: Requests pipelined behind the held line.
N = 40


def _release_later(gate: Path) -> tuple[str, JSONObject]:
    """A ``process.run`` that creates ``gate`` 300 ms after it starts: the held handshake
    goes on only once the cancels pipelined before it have arrived."""
    code = f"import pathlib, time; time.sleep(0.3); pathlib.Path({str(gate)!r}).touch()"
    return ("process.run", {"argv": [PY, "-c", code]})


async def _events_until(
    driver: Driver, command: str, session_id: str, done: Callable[[list[JSONObject]], bool]
) -> list[JSONObject]:
    """The session's events drained until ``done(all so far)``."""
    seen: list[JSONObject] = []
    with trio.fail_after(WAIT_S):
        while not done(seen):
            batch = _obj(
                await driver.call(command, {"sessionId": session_id, "timeoutMilliseconds": 2000})
            )
            events = batch["events"]
            assert isinstance(events, list)
            seen.extend(map(_obj, events))
    return seen


def _completed(events: list[JSONObject], operation_ids: set[str]) -> bool:
    ended = {e["operationId"] for e in events if e["event"] == "requestCompleted"}
    return operation_ids <= ended


# -- language servers ----------------------------------------------------------------------


def _tick(session_id: str, n: int) -> tuple[str, JSONObject]:
    return (
        "lsp.request",
        {
            "sessionId": session_id,
            "operationId": f"{session_id}/{n}",
            "method": "test/tick",
            "params": {"n": n},
        },
    )


def _held(session_id: str, uri: str) -> list[tuple[str, JSONObject]]:
    """A slow request, then a document change that waits for it to go out: the session's
    line is held until the server answers ``initialize``."""
    slow: JSONObject = {
        "sessionId": session_id,
        "operationId": f"{session_id}/slow",
        "method": "test/sleep",
        "params": {"ms": 200},
    }
    change: JSONObject = {"sessionId": session_id, "uri": uri, "languageId": "python", "text": "x"}
    return [("lsp.request", slow), ("lsp.syncDocument", change)]


def _cancel(session_id: str, operation_id: str) -> tuple[str, JSONObject]:
    return ("lsp.cancelOperation", {"sessionId": session_id, "operationId": operation_id})


async def _ticks_received(driver: Driver, session_id: str) -> list[JSONValue]:
    """The ``n`` of every ``test/tick`` the server received, in order."""
    operation_id = f"{session_id}/documents"
    await driver.call(
        "lsp.request",
        {"sessionId": session_id, "operationId": operation_id, "method": "test/documents"},
    )
    events = await _events_until(
        driver, "lsp.waitEvents", session_id, lambda seen: _completed(seen, {operation_id})
    )
    (answer,) = [e for e in events if e.get("operationId") == operation_id]
    received = answer["result"]
    assert isinstance(received, list)
    return [_obj(_obj(m)["params"])["n"] for m in received if _obj(m)["method"] == "test/tick"]


@pytest.mark.parametrize("driver_name", DRIVERS)
async def test_a_cancel_behind_a_request_still_in_line_ends_it_unsent(
    driver_name: str, tmp_path: Path
) -> None:
    """cancel40 (1) and (2): N requests pipelined behind a held line, cancels right behind
    them. The named ones end once each, ``requestCancelled``, and the server never sees
    them (nor a ``$/cancelRequest``); the others reach it in order and complete. A cancel
    naming another session's waiting request, an unknown one or one already cancelled
    answers false, and that other request completes."""
    gate = tmp_path / "answer-initialize"
    uri = (tmp_path / "doc.py").as_uri()
    async with open_driver(driver_name) as driver:
        held = ("--full-sync", f"--hold-initialize={gate}")
        a = await _lsp_session(driver, tmp_path, PY, LSP_FAKE, *held)
        b = await _lsp_session(driver, tmp_path, PY, LSP_FAKE, *held)
        cancelled = {7, 23, N - 1}  # in this order below
        requests = [*_held(a, uri), *(_tick(a, n) for n in range(N))]
        requests += [*_held(b, uri), _tick(b, 0)]
        requests += [_cancel(a, f"{a}/{n}") for n in sorted(cancelled)]
        requests += [
            # Again: one of the two (unordered: their tasks run in no set order) ended it.
            _cancel(a, f"{a}/{N - 1}"),
            _cancel(a, f"{b}/0"),  # another session's, waiting on its own line
            _cancel(a, "nobody"),
            _release_later(gate),
        ]
        outcomes = await driver.pipeline(requests)
        assert all(ok for ok, _ in outcomes), [o for o in outcomes if not o[0]][:3]
        answers = [_obj(data) for _, data in outcomes]
        cancels = [a_["cancelled"] is True for a_ in answers if "cancelled" in a_]
        assert cancels[:2] == [True, True]
        assert sorted(cancels[2:4]) == [False, True]
        assert cancels[4:] == [False, False]
        # Every request was answered with its id, the cancelled ones too.
        expected = {f"{a}/slow", *(f"{a}/{n}" for n in range(N))}
        assert {a_["operationId"] for a_ in answers if "operationId" in a_} >= expected

        events = await _events_until(
            driver, "lsp.waitEvents", a, lambda seen: _completed(seen, expected)
        )
        ends = [e for e in events if e["event"] == "requestCompleted"]
        assert Counter(e["operationId"] for e in ends) == Counter(expected)  # once each
        by_id = {e["operationId"]: e for e in ends}
        for n in range(N):
            end = by_id[f"{a}/{n}"]
            if n in cancelled:
                error = _obj(end["error"])
                assert (error["code"], error["method"]) == ("requestCancelled", "test/tick")
            else:
                assert "error" not in end, end
                assert end["result"] is None
        assert by_id[f"{a}/slow"]["result"] == "slept"
        # The server saw the others in order, and neither the cancelled ones nor a cancel.
        assert await _ticks_received(driver, a) == [n for n in range(N) if n not in cancelled]
        never_cancelled = _obj(
            await driver.call(
                "lsp.request",
                {"sessionId": a, "operationId": "asked", "method": "test/cancelled"},
            )
        )
        assert never_cancelled["operationId"] == "asked"
        asked = await _events_until(
            driver, "lsp.waitEvents", a, lambda seen: _completed(seen, {"asked"})
        )
        assert [e["result"] for e in asked if e.get("operationId") == "asked"] == [[]]

        # The other session's request was not touched: it reached its server and completed.
        b_events = await _events_until(
            driver, "lsp.waitEvents", b, lambda seen: _completed(seen, {f"{b}/0"})
        )
        (b_end,) = [e for e in b_events if e.get("operationId") == f"{b}/0"]
        assert "error" not in b_end
        assert await _ticks_received(driver, b) == [0]
        for session_id in (a, b):
            await driver.call("lsp.stopServer", {"sessionId": session_id})
            await driver.call("lsp.destroyServer", {"sessionId": session_id})


async def test_the_core_operation_id_names_a_request_in_line(tmp_path: Path) -> None:
    """cancel40: without ``operationId`` in its payload a request is known by its Core
    operation's id (the envelope's, the JSON-RPC id in serve): a cancel naming that id
    finds it while it waits."""
    gate = tmp_path / "answer-initialize"
    uri = (tmp_path / "doc.py").as_uri()
    async with open_core() as core:
        started = _obj(
            await core.call(
                "lsp.startServer",
                {
                    "serverId": "named",
                    "executable": PY,
                    "arguments": [LSP_FAKE, "--full-sync", f"--hold-initialize={gate}"],
                    "workingDirectory": str(tmp_path),
                    "rootUri": tmp_path.as_uri(),
                },
            )
        )
        sid = started["sessionId"]
        assert isinstance(sid, str)
        submitted = [core.submit(command, payload) for command, payload in _held(sid, uri)]
        named = core.submit(
            "lsp.request",
            {"sessionId": sid, "method": "test/tick", "params": {"n": 1}},
            operation_id="core-op",
        )
        other = core.submit(
            "lsp.request",
            {"sessionId": sid, "method": "test/tick", "params": {"n": 2}},
            operation_id="core-op-2",
        )
        cancel: JSONObject = {"sessionId": sid, "operationId": "core-op"}
        assert await core.call("lsp.cancelOperation", cancel) == {"cancelled": True}
        await trio.Path(gate).touch()
        with trio.fail_after(WAIT_S):
            for op in submitted:
                await op.result()
            assert await named.result() == {"operationId": "core-op"}
            assert await other.result() == {"operationId": "core-op-2"}
        driver = CoreDriver(core)
        events = await _events_until(
            driver,
            "lsp.waitEvents",
            sid,
            lambda seen: _completed(seen, {"core-op", "core-op-2", f"{sid}/slow"}),
        )
        (end,) = [e for e in events if e.get("operationId") == "core-op"]
        assert _obj(end["error"])["code"] == "requestCancelled"
        assert await _ticks_received(driver, sid) == [2]
        await core.call("lsp.stopServer", {"sessionId": sid})


async def test_a_function_call_still_in_line_ends_cancelled_uninvoked(tmp_path: Path) -> None:
    """cancel40: the plugin function call path had the same hole. Calls pipelined from one
    task (``Core.submit`` starts no task before the cancels ran, so the named ones surely
    wait): each named call ends once, ``requestCancelled`` with its ``function``, and the
    backend never receives its invoke; the others reach it in order."""
    from tests.supervisor.plugin.test_functions import PLUGIN, backend, call

    async with open_core() as core:
        session = await backend(core, str(tmp_path))
        await session.wait_state("ready")

        def function_call(n: int) -> tuple[str, JSONObject]:
            return (
                "lsp.functionRequest",
                {
                    "sessionId": session.id,
                    "operationId": f"f{n}",
                    "function": {"pluginID": PLUGIN, "functionID": "echo.value"},
                    "params": {"n": n, "value": n},
                },
            )

        cancelled = {5, 15}
        requests = [function_call(n) for n in range(20)]
        requests += [_cancel(session.id, f"f{n}") for n in sorted(cancelled)]
        outcomes = await CoreDriver(core).pipeline(requests)
        assert all(ok for ok, _ in outcomes), outcomes
        assert [_obj(data) for _, data in outcomes[20:]] == [{"cancelled": True}] * 2
        for n in range(20):
            end = await session.completed(f"f{n}")
            if n in cancelled:
                assert _obj(end["error"])["code"] == "requestCancelled"
                assert end["function"] == {"pluginID": PLUGIN, "functionID": "echo.value"}
            else:
                assert "error" not in end, end
        ends = [e for e in session.seen if e["event"] == "requestCompleted"]
        assert Counter(e["operationId"] for e in ends) == Counter(f"f{n}" for n in range(20))
        seen = _obj(_obj((await call(session, "seen.get"))["result"])["value"])
        arrivals = seen["arrivals"]
        assert isinstance(arrivals, list)
        invoked = [a for a in arrivals if isinstance(a, str) and a.startswith("invoke echo.value")]
        assert invoked == [f"invoke echo.value {n}" for n in range(20) if n not in cancelled]
        await session.stop()


# -- debug adapters ------------------------------------------------------------------------


async def _debug_session(driver: Driver, tmp_path: Path) -> str:
    created = _obj(
        await driver.call(
            "debug.createSession",
            {
                "adapterId": "cancel",
                "rootPath": str(tmp_path),
                "adapter": {"executable": PY, "arguments": [DAP_FAKE, "record-plain"]},
            },
        )
    )
    session_id = created["sessionId"]
    assert isinstance(session_id, str)
    await driver.call("debug.attach", {"sessionId": session_id, "configuration": {"name": "c"}})
    return session_id


def _evaluate(session_id: str, name: str) -> tuple[str, JSONObject]:
    return (
        "debug.inspect",
        {"sessionId": session_id, "operationId": name, "kind": "evaluate", "expression": name},
    )


async def _evaluated(driver: Driver, session_id: str) -> list[str]:
    """The expressions the recording adapter was asked to evaluate, in order (and no DAP
    ``cancel`` among its requests)."""
    received = await driver.call(
        "debug.inspect", {"sessionId": session_id, "kind": "evaluate", "expression": "received"}
    )
    result = _obj(_obj(received)["result"])["result"]
    assert isinstance(result, str)
    requests = json.loads(result)
    assert "cancel" not in [r["command"] for r in requests]
    return [
        r["arguments"]["expression"]
        for r in requests
        if r["command"] == "evaluate" and r["arguments"]["expression"] != "received"
    ]


#: Debug operations pipelined ahead of the named ones.
AHEAD = 150


@pytest.mark.parametrize("driver_name", ["open_core", "serve"])
async def test_a_debug_cancel_behind_an_operation_still_in_line_fails_it_unsent(
    driver_name: str, tmp_path: Path
) -> None:
    """cancel40 (3): the same for ``debug.cancelOperation``. The named operations fail once
    each with the cancel's reason (``cancelled`` / ``timedOut``: the caller gets
    ``cancelled`` / ``timed_out``, one ``operationFailed`` each); the adapter never
    receives them, nor a DAP ``cancel``; the others reach it in order. Another session's
    waiting operation is not touched.

    Nothing holds a debug session's line here: the named operations wait because
    :data:`AHEAD` operations arrived before them (``Core.submit`` starts no task before the
    cancel has run; serve's reader admits every frame it read before any task runs, and a
    line moves one operation per scheduler pass), so only those two paths are used.
    """
    async with open_driver(driver_name) as driver:
        d1 = await _debug_session(driver, tmp_path)
        d2 = await _debug_session(driver, tmp_path)
        names = [f"e{n}" for n in range(AHEAD + 10)]
        named = {names[-7]: "cancelled", names[-2]: "timedOut"}
        requests = [_evaluate(d1, name) for name in names]
        requests += [_evaluate(d2, f"d2-{n}") for n in range(AHEAD)]
        requests += [
            (
                "debug.cancelOperation",
                {"sessionId": d1, "operationId": name, "reason": reason},
            )
            for name, reason in named.items()
        ]
        requests += [
            ("debug.cancelOperation", {"sessionId": d1, "operationId": f"d2-{AHEAD - 1}"}),
            ("debug.cancelOperation", {"sessionId": d1, "operationId": "nobody"}),
        ]
        outcomes = await driver.pipeline(requests)
        by_name = dict(zip(names, outcomes[: len(names)], strict=True))
        assert by_name.pop(names[-7]) == (False, "cancelled")
        assert by_name.pop(names[-2]) == (False, "timed_out")
        assert all(ok for ok, _ in by_name.values()), by_name
        others = outcomes[len(names) : len(names) + AHEAD]
        assert all(ok for ok, _ in others)  # d2's operations all completed
        cancels = [_obj(data)["cancelled"] for _, data in outcomes[-4:]]
        assert cancels == [True, True, False, False]

        events = await _events_until(
            driver,
            "debug.waitEvents",
            d1,
            lambda seen: (
                set(names)
                <= {e.get("operationId") for e in seen if str(e["event"]).startswith("operation")}
            ),
        )
        ends = [
            e
            for e in events
            if str(e["event"]).startswith("operation") and e["command"] == "debug.inspect"
        ]
        assert Counter(e["operationId"] for e in ends) == Counter(names)  # once each
        failed = [e for e in ends if e["event"] == "operationFailed"]
        assert sorted((e["operationId"], e["reason"], e["code"]) for e in failed) == sorted(
            [(names[-7], "cancelled", "cancelled"), (names[-2], "timedOut", "timed_out")]
        )
        assert await _evaluated(driver, d1) == [n for n in names if n not in named]
        assert (await _evaluated(driver, d2))[-1] == f"d2-{AHEAD - 1}"
        for session_id in (d1, d2):
            await driver.call("debug.disconnect", {"sessionId": session_id})


async def test_a_debug_cancel_finds_an_operation_held_back_for_room(tmp_path: Path) -> None:
    """cancel40: an operation held back because 128 are pending holds its session's turn
    but has no pending request yet: ``debug.cancelOperation`` finds it there too (it fails
    with the cancel's reason, once, unsent), and the one in line behind it as well."""
    from supervisor._dap._session import MAX_PENDING_OPERATIONS

    async with open_core() as core:
        driver = CoreDriver(core)
        created = _obj(
            await core.call(
                "debug.createSession",
                {
                    "adapterId": "room",
                    "rootPath": str(tmp_path),
                    "adapter": {"executable": PY, "arguments": [DAP_FAKE, "late-response"]},
                },
            )
        )
        sid = created["sessionId"]
        assert isinstance(sid, str)
        await core.call("debug.attach", {"sessionId": sid, "configuration": {"name": "c"}})
        # The adapter answers none of them: they stay pending.
        pending = [core.submit(*_evaluate(sid, f"h{n}")) for n in range(MAX_PENDING_OPERATIONS)]
        room, behind = core.submit(*_evaluate(sid, "room")), core.submit(*_evaluate(sid, "behind"))
        await trio.testing.wait_all_tasks_blocked(cushion=0.2)
        assert not room.done
        for name, reason in (("room", "cancelled"), ("behind", "timedOut")):
            cancel: JSONObject = {"sessionId": sid, "operationId": name, "reason": reason}
            assert await core.call("debug.cancelOperation", cancel) == {"cancelled": True}
        with trio.fail_after(WAIT_S):
            for op, code in ((room, "cancelled"), (behind, "timed_out")):
                with pytest.raises(CoreError) as ended:
                    await op.result()
                assert ended.value.code == code
        events = await _events_until(
            driver,
            "debug.waitEvents",
            sid,
            lambda seen: {"room", "behind"} <= {e.get("operationId") for e in seen},
        )
        failed = [e for e in events if e["event"] == "operationFailed"]
        assert sorted((e["operationId"], e["reason"]) for e in failed) == [
            ("behind", "timedOut"),
            ("room", "cancelled"),
        ]
        await core.call("debug.disconnect", {"sessionId": sid})
        with trio.fail_after(WAIT_S):
            for op in pending:
                with pytest.raises(CoreError):
                    await op.result()  # the session ended under them


async def test_a_cancel_for_an_unknown_session_is_not_found() -> None:
    """Unchanged: the session is looked up first (no line is searched for a session that
    does not exist)."""
    async with open_core() as core:
        for command in ("lsp.cancelOperation", "debug.cancelOperation"):
            with pytest.raises(CoreError) as refused:
                await core.call(command, {"sessionId": "nope", "operationId": "x"})
            assert refused.value.code == "not_found"
