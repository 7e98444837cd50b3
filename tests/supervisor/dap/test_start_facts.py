"""plugin-contract.md "Structured plugin diagnostics": each start of a debug adapter is one
``debugAdapter/start`` operation, from launch until ``initialize`` succeeds; it ends
``operationFinished`` or ``operationFailed`` with one ``host.*`` code, as a ``fact`` event of
the session. A stop before that records nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.supervisor.dap.test_sessions import FAKE, PY, Events, create

if TYPE_CHECKING:
    from protocol import JSONObject
    from supervisor._core._core import Core

SILENT: JSONObject = {
    "executable": PY,
    "arguments": ["-c", "import sys\nwhile sys.stdin.buffer.read(1): pass"],
    "initializeTimeoutMilliseconds": 300,
}


def fake(mode: str) -> JSONObject:
    return {"executable": PY, "arguments": [FAKE, mode]}


@pytest.mark.parametrize(
    ("adapter", "code"),
    [
        (fake("normal"), None),
        (fake("crash-initialize"), "host.exitedEarly"),
        (fake("refuse-initialize"), "host.initializeFailed"),
        (SILENT, "host.timedOut"),
    ],
)
async def test_one_start_fact_per_adapter_start(
    core: Core, adapter: JSONObject, code: str | None
) -> None:
    session_id, _pid = await create(core, adapter)
    events = Events(core, session_id)
    fact = await events.next("fact")
    assert fact["operation"] == "debugAdapter/start"
    assert isinstance(fact["durationMs"], int)
    if code is None:
        assert (fact["kind"], fact["catalogEvent"]) == (
            "operationFinished",
            "plugins.operation.finished",
        )
        assert "code" not in fact
    else:
        assert (fact["kind"], fact["code"]) == ("operationFailed", code)
    # Categories only: nothing of the adapter's output, paths or messages.
    assert set(fact) <= {"seq", "event", "sessionId", "catalogEvent", "kind", "operation",
                         "durationMs", "code"}  # fmt: skip
    await core.call("debug.disconnect", {"sessionId": session_id})
    await events.next("terminated")
    assert len(events.names("fact")) == 1


async def test_a_stop_before_initialize_records_nothing(core: Core) -> None:
    session_id, _pid = await create(core, {**SILENT, "initializeTimeoutMilliseconds": 60_000})
    events = Events(core, session_id)
    await core.call("debug.disconnect", {"sessionId": session_id})
    await events.next("terminated")
    assert events.names("fact") == []
