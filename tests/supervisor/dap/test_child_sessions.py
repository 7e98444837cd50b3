"""DAP ``startDebugging`` (issue 16): debugpy debugging a program that starts a Python child.

debugpy's default ``subProcess: true`` reports each Python subprocess to the client; with
``supportsStartDebuggingRequest`` it asks for a child session through the reverse request.
The child session is listed, has its own events and breakpoints, and ends with its parent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests._procfs import runs_no_more
from tests.supervisor.dap.test_sessions import Events, create, debugpy_adapter, result_of

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject
    from supervisor._core._core import Core

PARENT = """\
import os
import subprocess
import sys

with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
subprocess.run([sys.executable, sys.argv[2], sys.argv[3]])
"""
CHILD = """\
import os
import sys
import time

pid = os.getpid()
with open(sys.argv[1], "w") as f:
    f.write(str(pid))
while True:
    time.sleep(0.05)  # line 9: the child's breakpoint
"""
CHILD_BREAK_LINE = 9


async def sessions_by_id(core: Core) -> dict[str, JSONObject]:
    listed = await core.call("debug.listSessions", {})
    assert isinstance(listed, list)
    return {str(s["sessionId"]): s for s in listed if isinstance(s, dict)}


def read_pid(path: Path) -> int:
    # Both programs write their pid before the child reaches its breakpoint.
    return int(path.read_text())


async def test_debugpy_subprocess_gets_a_child_session_ended_with_its_parent(
    core: Core, tmp_path: Path
) -> None:
    parent_script = tmp_path / "parent.py"
    parent_script.write_text(PARENT)
    child_script = tmp_path / "child.py"
    child_script.write_text(CHILD)
    parent_pid_file, child_pid_file = tmp_path / "parent.pid", tmp_path / "child.pid"
    session_id, adapter_pid = await create(core, debugpy_adapter())
    assert adapter_pid is not None
    events = Events(core, session_id)
    # Set on the parent only: the child session starts with its parent's breakpoints.
    await core.call(
        "debug.setBreakpoints",
        {
            "sessionId": session_id,
            "path": str(child_script),
            "breakpoints": [{"line": CHILD_BREAK_LINE}],
        },
    )
    await core.call(
        "debug.launch",
        {
            "sessionId": session_id,
            "configuration": {
                "program": str(parent_script),
                "args": [str(parent_pid_file), str(child_script), str(child_pid_file)],
                "console": "internalConsole",
                "cwd": str(tmp_path),
            },
        },
    )
    started = await events.next("childSessionStarted")
    child_id = started["childSessionId"]
    assert isinstance(child_id, str)
    assert started["request"] == "attach"
    child_events = Events(core, child_id)
    stopped = await child_events.next("stopped")
    assert stopped["reason"] == "breakpoint"
    thread_id = stopped["threadId"]
    stack = result_of(
        await core.call(
            "debug.inspect", {"sessionId": child_id, "kind": "stackTrace", "threadId": thread_id}
        )
    )
    frames = stack["stackFrames"]
    assert isinstance(frames, list)
    assert isinstance(frames[0], dict)
    assert frames[0]["line"] == CHILD_BREAK_LINE
    parent_pid = read_pid(parent_pid_file)
    child_pid = read_pid(child_pid_file)

    by_id = await sessions_by_id(core)
    assert set(by_id) == {session_id, child_id}
    assert by_id[child_id]["parentSessionId"] == session_id
    assert by_id[session_id]["childSessionIds"] == [child_id]
    assert by_id[child_id]["state"] == "paused"

    # One stop ends both sessions and every process of both.
    result = await core.call("debug.disconnect", {"sessionId": session_id})
    assert isinstance(result, dict)
    assert result["state"] == "terminated"
    child_terminated = await child_events.next("terminated")
    assert child_terminated["reason"] == "parentStopped"
    await events.next("terminated")
    for pid in (adapter_pid, parent_pid, child_pid):
        assert runs_no_more(pid), pid
    assert {s["state"] for s in (await sessions_by_id(core)).values()} == {"terminated"}
    # Events the contract does not name arrive as adapterEvent instead of being dropped.
    assert "process" in {e["name"] for e in child_events.names("adapterEvent")}


SHORT_CHILD = """\
import sys

print("child done", file=sys.stderr)
"""
WAITING_PARENT = """\
import subprocess
import sys

subprocess.run([sys.executable, sys.argv[1]])
print("parent done")
"""


async def test_a_child_that_ends_first_ends_its_session_alone(core: Core, tmp_path: Path) -> None:
    parent_script = tmp_path / "parent.py"
    parent_script.write_text(WAITING_PARENT)
    child_script = tmp_path / "child.py"
    child_script.write_text(SHORT_CHILD)
    session_id, adapter_pid = await create(core, debugpy_adapter())
    assert adapter_pid is not None
    events = Events(core, session_id)
    await core.call(
        "debug.launch",
        {
            "sessionId": session_id,
            "configuration": {
                "program": str(parent_script),
                "args": [str(child_script)],
                "console": "internalConsole",
            },
        },
    )
    child_id = (await events.next("childSessionStarted"))["childSessionId"]
    assert isinstance(child_id, str)
    child_terminated = await Events(core, child_id).next("terminated")
    assert child_terminated["reason"] == "debuggeeTerminated"
    # The parent runs on to its own end.
    terminated = await events.next("terminated")
    assert terminated["reason"] == "debuggeeTerminated"
    # What the parent printed, should it not end 0 (it did not once in a loaded full run).
    said = [e for e in events.seen if e["event"] in ("output", "exited")]
    assert terminated["exitCode"] == 0, said
    assert runs_no_more(adapter_pid)
    for sid in (child_id, session_id):
        await core.call("debug.destroySession", {"sessionId": sid})
    assert await sessions_by_id(core) == {}
