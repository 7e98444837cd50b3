"""The DAP configuration sequence against adapters that do it differently (issue 24),
asserted on the requests the recording fake adapter received (tests/peers/dap_fake.py).

DAP ("initialized" event): the client configures once the ``initialize`` response *and* the
``initialized`` event came, in either order; the exception filters, function breakpoints
and sources (core-api.md's order) and ``configurationDone`` go once per session; a
``launch`` accepted before the ``initialize`` response is held until it; a set made before
the configuration is sent as part of it, one made after goes directly.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from trio.testing import wait_all_tasks_blocked

from tests._procfs import runs_no_more
from tests.supervisor.dap.test_recorded_requests import (
    commands,
    disconnect,
    keep_breakpoints,
    received,
)
from tests.supervisor.dap.test_sessions import FAKE, Events, create, result_of

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from protocol import JSONObject
    from supervisor._core._core import Core

PY = sys.executable

#: What the recording fake gets once configured with keep_breakpoints' sets.
CONFIGURATION = [
    "setExceptionBreakpoints",
    "setFunctionBreakpoints",
    "setBreakpoints",
    "setBreakpoints",
    "configurationDone",
]


async def session_of(core: Core, session_id: str) -> JSONObject:
    listed = await core.call("debug.listSessions", {})
    assert isinstance(listed, list)
    return next(s for s in listed if isinstance(s, dict) and s["sessionId"] == session_id)


def assert_configured_once(requests: list[Any], filters: list[str]) -> None:
    """The configuration came once, right after ``initialize`` and ``launch``/``attach``,
    with the given exception filters, the function breakpoint and both sources in path
    order."""
    assert commands(requests)[2:7] == CONFIGURATION
    assert requests[2]["arguments"] == {"filters": filters}
    assert requests[3]["arguments"] == {"breakpoints": [{"name": "main"}]}
    paths = [r["arguments"]["source"]["path"] for r in requests[4:6]]
    assert paths == ["/a/first.py", "/z/last.py"]
    for command in CONFIGURATION:
        assert commands(requests).count(command) == CONFIGURATION.count(command), command


async def test_adapter_sending_initialized_before_its_response_is_configured_once(
    core: Core, tmp_path: Path
) -> None:
    """netcoredbg and hxcpp-debugger send ``initialized`` before the ``initialize``
    response; this fake also answers ``launch`` only after ``configurationDone`` (as
    debugpy does). The launch, accepted before the response, is held until it and goes
    first; then the configuration, from the capabilities, once."""
    gate = tmp_path / "answer-initialize"
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "record-early", str(gate)]}
    )
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await keep_breakpoints(core, sid)
    chosen = await core.call(
        "debug.setExceptionBreakpoints", {**sid, "filters": [{"filterId": "raised"}]}
    )
    assert result_of(chosen)["sent"] is False
    launch = core.submit("debug.launch", {**sid, "configuration": {"name": "Early"}})
    await wait_all_tasks_blocked()
    # The launch waits for the initialize response.
    held = await session_of(core, session_id)
    assert (held["state"], held["requestKind"]) == ("initializing", "launch")
    gate.touch()
    assert result_of(await launch.result()) == {"requestKind": "launch"}
    await events.next("stopped")  # the fake stops thread 1 on configurationDone
    requests = await received(core, sid)
    assert commands(requests)[:2] == ["initialize", "launch"]
    assert_configured_once(requests, ["raised"])
    assert len(requests) == 7
    # The adapter's event reached the client before its capabilities did.
    names = [e["event"] for e in events.seen]
    assert names.index("initialized") < names.index("capabilities")
    # After the configuration a set goes directly, once.
    moved = result_of(
        await core.call(
            "debug.setBreakpoints", {**sid, "path": "/a/first.py", "breakpoints": [{"line": 7}]}
        )
    )
    assert moved["sent"] is True
    after = await received(core, sid)
    assert commands(after) == [*commands(requests), "setBreakpoints"]
    assert after[-1]["arguments"]["breakpoints"] == [{"line": 7}]
    await disconnect(core, sid, adapter_pid)


async def test_a_set_pipelined_behind_a_held_launch_follows_the_configuration(
    core: Core, tmp_path: Path
) -> None:
    """``debug.launch`` then ``debug.setBreakpoints``, sent without waiting: the launch is
    held for the ``initialize`` response, the configuration begins as soon as it is sent,
    and the set, arriving while the configuration is sent, goes once right after it."""
    gate = tmp_path / "answer-initialize"
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "record-early", str(gate)]}
    )
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await keep_breakpoints(core, sid)
    launch = core.submit("debug.launch", {**sid, "configuration": {"name": "Early"}})
    change = core.submit(
        "debug.setBreakpoints", {**sid, "path": "/z/last.py", "breakpoints": [{"line": 9}]}
    )
    await wait_all_tasks_blocked()  # the launch is held, the set waits behind it
    gate.touch()
    await launch.result()
    assert result_of(await change.result())["sent"] is True
    await events.next("stopped")
    requests = await received(core, sid)
    assert commands(requests) == ["initialize", "launch", *CONFIGURATION, "setBreakpoints"]
    # The configuration had the set as it was when the configuration began.
    assert requests[5]["arguments"]["breakpoints"] == [{"line": 4}]
    assert requests[7]["arguments"]["source"]["path"] == "/z/last.py"
    assert requests[7]["arguments"]["breakpoints"] == [{"line": 9}]
    await disconnect(core, sid, adapter_pid)


async def test_a_second_initialized_event_configures_nothing_again(core: Core) -> None:
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "record-twice"]}
    )
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await keep_breakpoints(core, sid)
    await core.call("debug.launch", {**sid, "configuration": {}})
    await events.next("stopped")
    requests = await received(core, sid)
    assert commands(requests) == ["initialize", "launch", *CONFIGURATION]
    assert_configured_once(requests, ["uncaught"])
    assert len(events.names("initialized")) == 2  # both reached the client
    await disconnect(core, sid, adapter_pid)


async def test_a_child_session_is_configured_once_and_its_parent_not_again(core: Core) -> None:
    """DAP ``startDebugging``: the child session (its own adapter connection) gets its own
    configuration, once, with its parent's breakpoints; the parent's is not repeated."""
    session_id, adapter_pid = await create(
        core, {"executable": PY, "arguments": [FAKE, "record-child"]}
    )
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await keep_breakpoints(core, sid)
    await core.call("debug.launch", {**sid, "configuration": {"name": "Parent"}})
    started = await events.next("childSessionStarted")
    child: JSONObject = {"sessionId": started["childSessionId"]}
    assert started["request"] == "attach"
    child_events = Events(core, str(started["childSessionId"]))
    await child_events.next("stopped")  # the child's adapter stops on configurationDone
    await child_events.next("operationCompleted")  # its attach
    child_requests = await received(core, child)
    assert commands(child_requests) == ["initialize", "attach", *CONFIGURATION]
    assert child_requests[1]["arguments"] == {"name": "child"}
    assert_configured_once(child_requests, ["uncaught"])
    parent_requests = await received(core, sid)
    assert commands(parent_requests) == ["initialize", "launch", *CONFIGURATION]
    assert_configured_once(parent_requests, ["uncaught"])
    child_pid = (await session_of(core, str(child["sessionId"])))["adapterPid"]
    assert isinstance(child_pid, int)
    # One stop ends both, the child's adapter too.
    await disconnect(core, sid, adapter_pid)
    assert runs_no_more(child_pid)
