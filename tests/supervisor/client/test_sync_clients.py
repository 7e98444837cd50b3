"""The blocking facades over CoreThread (issue 28): typed calls for sync and asyncio hosts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from lsprotocol import types as lsp

from supervisor import CoreThread, LanguageServerError, SessionFailed, StartFailed
from supervisor._api._debug import DebugStopped
from tests.supervisor.lsp._support import PY, fake

FAKE_DAP = str(Path(__file__).parent.parent.parent / "peers" / "dap_fake.py")


def test_hover_on_pylsp_in_five_lines(tmp_path: Path) -> None:
    """The README's sync example, as it is written there."""
    pylsp, root, uri = (
        [sys.executable, "-m", "pylsp"],
        tmp_path.as_uri(),
        (tmp_path / "a.py").as_uri(),
    )
    with CoreThread() as core, core.language_server(pylsp, root_uri=root) as server:
        server.open_document(uri, "python", "import os\nos.getcwd()\n")
        hover = server.hover(uri, 1, 4)
    assert isinstance(hover, lsp.Hover)
    assert isinstance(hover.contents, lsp.MarkupContent)
    assert "getcwd" in hover.contents.value


def test_the_facade_blocks_raises_and_reads_as_the_trio_client(tmp_path: Path) -> None:
    with CoreThread() as core:
        with core.language_server(fake(), root_uri=tmp_path.as_uri()) as server:
            assert server.state == "ready"
            assert server.request("test/sleep", {"ms": 1}) == "slept"
            with pytest.raises(LanguageServerError) as failed:
                server.request("test/fail", {"code": -32001, "message": "no"})
            assert failed.value.error_code == -32001
            server.notify("custom/echo", {"text": "sync"})
            note = server.wait_for_notification("window/logMessage", timeout_ms=30_000)
            assert note == {"type": 3, "message": "echo sync"}
            assert [m.message for m in server.log_messages] == ["echo sync"]
            with pytest.raises(TimeoutError):
                server.wait_for_notification("custom/never", timeout_ms=100)
            document = server.open_document("file:///s.py", "python", "x = 1\n")
            assert document.version == 1
            assert list(server.documents) == ["file:///s.py"]
            stopped = server.stop()
            assert stopped.state == "stopped"
            with pytest.raises(SessionFailed):
                server.request("test/sleep", {"ms": 1})
        with pytest.raises(StartFailed) as crashed:
            core.language_server(fake("--crash-in-initialize"), root_uri=tmp_path.as_uri())
        assert (crashed.value.reason, crashed.value.exit_code) == ("exitedEarly", 3)
        assert crashed.value.stderr_tail == ["fatal: cannot initialize"]


def test_callable_from_a_trio_thread_and_an_asyncio_task(tmp_path: Path) -> None:
    """``trio.from_thread`` refuses a thread that runs a Trio loop; the facade works there."""
    with CoreThread() as core, core.language_server(fake(), root_uri=tmp_path.as_uri()) as server:

        async def from_trio() -> object:
            return server.request("test/sleep", {"ms": 1})

        assert trio.run(from_trio) == "slept"

        async def from_asyncio() -> object:
            return await asyncio.to_thread(server.request, "test/sleep", {"ms": 1})

        assert asyncio.run(from_asyncio()) == "slept"


def test_closing_the_core_thread_stops_open_clients(tmp_path: Path) -> None:
    core = CoreThread()
    with core:
        server = core.language_server(fake(), root_uri=tmp_path.as_uri())
        debug = core.debug_adapter([PY, FAKE_DAP, "normal"])
        assert debug.state == "ready"
    # The CoreThread ended both; the facades say so instead of hanging.
    with pytest.raises(RuntimeError, match="not running"):
        server.request("test/sleep", {"ms": 1})
    server.close()
    debug.close()


def test_the_debug_facade(tmp_path: Path) -> None:
    with CoreThread() as core, core.debug_adapter([PY, FAKE_DAP, "threads"]) as debug:
        debug.request("launch", {})
        stopped = debug.wait_stopped(timeout_ms=30_000)
        assert isinstance(stopped, DebugStopped)
        assert stopped.thread_id == 1
        threads = debug.request("threads")
        assert isinstance(threads, dict)
        assert isinstance(threads["threads"], list)
        stopped_result = debug.stop()
        assert stopped_result.state == "terminated"
        assert debug.terminated is not None


def test_the_core_does_not_load_lsprotocol_until_a_client_is_used() -> None:
    """The typed results cost an import of about a second: only a client pays it."""
    probe = (
        "import sys, json\n"
        "from supervisor import CoreThread\n"
        "with CoreThread() as core:\n"
        "    core.execute_json(json.dumps({'id': 1, 'command': 'core.ping', 'payload': {}}))\n"
        "print('lsprotocol' in sys.modules)\n"
    )
    done = subprocess.run([PY, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
