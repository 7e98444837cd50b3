"""A testbed program as a DAP adapter through ``debug.*`` (issue 7; DESIGN.md stop bounds).

``ignore-sigterm --protocol dap`` answers ``disconnect`` but never exits: not after it, not at
the end of its input, not on SIGTERM. A correct supervisor ends it anyway: stdin EOF, then
SIGTERM, then SIGKILL after the grace, and the session reports the signal that ended it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from supervisor import open_core
from supervisor.testbed import program_argv
from tests._procfs import runs_no_more
from tests.supervisor.dap.test_sessions import Events, create

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")


async def test_adapter_ignoring_sigterm_is_killed_after_disconnect(tmp_path: Path) -> None:
    pid_file = tmp_path / "adapter.pids"
    argv = program_argv("ignore-sigterm", protocol="dap", pid_file=pid_file)
    async with open_core() as core:
        session_id, adapter_pid = await create(
            core, {"executable": argv[0], "arguments": list(argv[1:])}
        )
        assert adapter_pid is not None
        events = Events(core, session_id)
        await core.call("debug.launch", {"sessionId": session_id})
        await events.next("initialized")
        result = await core.call("debug.disconnect", {"sessionId": session_id})
        assert isinstance(result, dict)
        detail = result["terminated"]
        assert isinstance(detail, dict)
        assert detail["reason"] == "disconnected"
        # It answered disconnect, ignored stdin EOF and SIGTERM: only SIGKILL ended it.
        assert detail["signal"] == 9
        assert runs_no_more(adapter_pid)
    recorded = [int(line) for line in pid_file.read_text().split()]
    assert adapter_pid in recorded
    assert all(runs_no_more(pid) for pid in recorded)
