"""A debug adapter from another ecosystem (issue 16): lldb's DAP adapter on a C program.

``lldb-dap`` (LLVM 18 and later) or ``lldb-vscode`` (earlier, Debian's ``lldb`` package) and
gcc come from ``scripts/install-peers``; absent, the test is skipped with a message naming them.
The flow: a breakpoint, the stop, stack, scopes and variables, ``debug.setVariable`` changing
what the program prints, continue to the end, and nothing left running.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import pytest
import trio

from tests._procfs import runs_no_more
from tests.supervisor.dap.test_sessions import Events, create, result_of

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject
    from supervisor._core._core import Core

PROGRAM = """\
#include <stdio.h>
#include <unistd.h>

int twice(int x) {
    int result = x * 2;
    return result;
}

int main(void) {
    int value = 20;
    printf("pid %d twice %d\\n", (int)getpid(), twice(value));
    return 0;
}
"""
BREAK_LINE = 6  # `return result;`


def adapter() -> str | None:
    for name in ("lldb-dap", "lldb-vscode", "lldb-vscode-14", "lldb-vscode-15"):
        found = shutil.which(name)
        if found is not None:
            return found
    return None


async def test_lldb_adapter_breakpoint_variables_set_variable_and_exit(
    core: Core, tmp_path: Path
) -> None:
    executable = adapter()
    gcc = shutil.which("gcc")
    if executable is None or gcc is None:
        pytest.skip("lldb-dap/lldb-vscode or gcc is not installed (scripts/install-peers)")
    source = tmp_path / "twice.c"
    source.write_text(PROGRAM)
    program = tmp_path / "twice"
    await trio.run_process([gcc, "-g", "-O0", "-o", str(program), str(source)])
    session_id, adapter_pid = await create(core, {"executable": executable})
    assert adapter_pid is not None
    sid: JSONObject = {"sessionId": session_id}
    events = Events(core, session_id)
    await core.call(
        "debug.setBreakpoints", {**sid, "path": str(source), "breakpoints": [{"line": BREAK_LINE}]}
    )
    await core.call(
        "debug.launch",
        {**sid, "configuration": {"program": str(program), "cwd": str(tmp_path)}},
    )
    stopped = await events.next("stopped")
    assert stopped["reason"] == "breakpoint"
    thread_id = stopped["threadId"]
    stack: Any = result_of(
        await core.call("debug.inspect", {**sid, "kind": "stackTrace", "threadId": thread_id})
    )
    top = stack["stackFrames"][0]
    assert (top["name"].split("(")[0].strip(), top["line"]) == ("twice", BREAK_LINE)
    assert isinstance(top["isFiltered"], bool)
    scopes: Any = result_of(
        await core.call("debug.inspect", {**sid, "kind": "scopes", "frameId": top["id"]})
    )
    ref = next(
        s["variablesReference"] for s in scopes["scopes"] if s["name"].lower().startswith("local")
    )
    variables: Any = result_of(
        await core.call("debug.inspect", {**sid, "kind": "variables", "variablesReference": ref})
    )
    assert {v["name"]: v["value"] for v in variables["variables"]}["result"] == "40"
    replaced = result_of(
        await core.call(
            "debug.setVariable", {**sid, "variablesReference": ref, "name": "result", "value": "7"}
        )
    )
    assert replaced["value"] == "7"
    await core.call("debug.execute", {**sid, "command": "continue"})
    printed = ""
    while "twice 7" not in printed:
        printed += str((await events.next("output"))["output"])
    debuggee_pid = int(printed.split("pid ", 1)[1].split()[0])
    terminated = await events.next("terminated")
    assert terminated["reason"] in ("debuggeeTerminated", "adapterExited")
    assert runs_no_more(adapter_pid)
    assert runs_no_more(debuggee_pid)
