"""The debug-session client (issue 28): DAP requests with results, typed events, start = ready."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import DapClient, RequestFailed, SessionFailed, StartFailed, open_core

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from supervisor import Core

PY = sys.executable
FAKE = str(Path(__file__).parent.parent.parent / "peers" / "dap_fake.py")
WAIT_S = 60
DEBUGPY = [PY, "-m", "debugpy.adapter"]
TARGET = """\
def add(a, b):
    total = a + b
    return total


print("result", add(1, 41))
"""


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


async def test_debugpy_breakpoint_inspect_continue_to_the_end(core: Core, tmp_path: Path) -> None:
    target = tmp_path / "target.py"
    target.write_text(TARGET)
    with trio.fail_after(WAIT_S):
        async with core.debug_adapter(DEBUGPY, root_path=str(tmp_path)) as debug:
            assert debug.state == "ready"
            assert debug.capabilities["supportsConfigurationDoneRequest"] is True
            placed = await debug.request(
                "setBreakpoints", {"source": {"path": str(target)}, "breakpoints": [{"line": 2}]}
            )
            assert isinstance(placed, dict)
            await debug.request("launch", {"program": str(target), "console": "internalConsole"})
            stopped = await debug.wait_stopped()
            assert stopped.reason == "breakpoint"
            assert stopped.thread_id is not None
            stack = await debug.request("stackTrace", {"threadId": stopped.thread_id})
            assert isinstance(stack, dict)
            frames = stack["stackFrames"]
            assert isinstance(frames, list)
            top = frames[0]
            assert isinstance(top, dict)
            assert (top["name"], top["line"]) == ("add", 2)
            value = await debug.request(
                "evaluate", {"expression": "a + b", "frameId": top["id"], "context": "repl"}
            )
            assert isinstance(value, dict)
            assert value["result"] == "42"
            with pytest.raises(ValueError, match="not a DAP request"):
                await debug.request("loadedSources")
            await debug.request("continue", {"threadId": stopped.thread_id})
            await debug.wait_continued()
            terminated = await debug.wait_terminated()
            assert terminated.reason == "debuggeeTerminated"
            printed = "".join(e.output for e in debug.output)
            assert "result 42" in printed
            # The session ended: waits and requests say so at once.
            with pytest.raises(SessionFailed) as ended:
                await debug.wait_stopped()
            assert ended.value.reason == "debuggeeTerminated"
            with pytest.raises(SessionFailed):
                await debug.request("threads")


async def test_an_adapter_that_exits_at_start_raises_from_the_start(
    core: Core, tmp_path: Path
) -> None:
    with trio.fail_after(WAIT_S), pytest.raises(StartFailed) as failed:
        async with core.debug_adapter([PY, FAKE, "crash-initialize"], root_path=str(tmp_path)):
            raise AssertionError("not reached")
    assert (failed.value.reason, failed.value.exit_code) == ("adapterExited", 3)
    assert failed.value.stderr_tail
    with pytest.raises(StartFailed) as missing:
        async with core.debug_adapter(["no-such-adapter-xyz"]):
            raise AssertionError("not reached")
    assert missing.value.reason == "launchFailed"
    with pytest.raises(StartFailed) as refused:
        async with core.debug_adapter([PY, FAKE, "refuse-initialize"]):
            raise AssertionError("not reached")
    assert refused.value.reason == "initializeFailed"


async def test_an_operation_the_adapter_refuses_is_a_request_failure(core: Core) -> None:
    with trio.fail_after(WAIT_S):
        async with core.debug_adapter([PY, FAKE, "normal"]) as debug:
            with pytest.raises(RequestFailed) as refused:
                await debug.request("stackTrace", {"threadId": 1})
            assert refused.value.code == "refused"
            assert refused.value.method == "stackTrace"
            session_id = debug.session_id
        # Leaving the block disconnected and forgot the session.
        assert session_id not in str(await core.call("debug.listSessions", {}))
        with pytest.raises(TypeError, match="no public constructor"):
            DapClient()  # type: ignore[call-arg]
