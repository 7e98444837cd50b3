"""The session-client fixtures as a server author uses them (issue 28).

Each case runs pytest in a subprocess on a small project, as an author's suite would run
(the plugin loads from its ``pytest11`` entry point): ``lsp_client`` / ``dap_client`` in
plain, asyncio and Trio tests, beside pytest-lsp and pytest-asyncio in ``strict`` and
``auto`` mode; a missing program is one line; a failing test's report carries the server's
stderr tail, its log messages and the conformance findings.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from tests.check.test_plugin import run_pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

pytest.importorskip("pytest_lsp")

FAKE = Path(__file__).resolve().parent.parent / "peers" / "lsp_fake.py"

SUITE = textwrap.dedent(
    """
    import sys

    import pytest
    import pytest_lsp
    from lsprotocol import types as lsp
    from pytest_lsp import ClientServerConfig, LanguageClient

    from supervisor.testbed import program_argv

    PYLSP = [sys.executable, "-m", "pylsp"]
    FAKE = [sys.executable, {fake!r}]


    def hover(server, tmp_path):
        uri = (tmp_path / "a.py").as_uri()
        server.open_document(uri, "python", "import os\\nos.getcwd()\\n")
        return server.hover(uri, 1, 4)


    def test_in_a_plain_test(lsp_client, tmp_path):
        server = lsp_client(PYLSP, root_uri=tmp_path.as_uri())
        assert isinstance(hover(server, tmp_path), lsp.Hover)


    @pytest.mark.asyncio
    async def test_in_an_asyncio_test(lsp_client, tmp_path):
        server = lsp_client(PYLSP, root_uri=tmp_path.as_uri())
        assert isinstance(hover(server, tmp_path), lsp.Hover)


    @pytest.mark.trio
    async def test_in_a_trio_test(supervisor_core, tmp_path):
        uri = (tmp_path / "a.py").as_uri()
        async with supervisor_core.language_server(PYLSP, root_uri=tmp_path.as_uri()) as server:
            await server.open_document(uri, "python", "import os\\nos.getcwd()\\n")
            assert isinstance(await server.hover(uri, 1, 4), lsp.Hover)


    async def test_core_in_an_unmarked_async_test(supervisor_core):
        pass


    def test_a_debug_adapter(dap_client):
        debug = dap_client(program_argv("well-behaved", protocol="dap"))
        assert debug.state == "ready"


    @pytest_lsp.fixture(config=ClientServerConfig(server_command=program_argv("well-behaved")))
    async def client(lsp_client: LanguageClient):
        await lsp_client.initialize_session(
            lsp.InitializeParams(capabilities=lsp.ClientCapabilities())
        )
        yield
        await lsp_client.shutdown_session()


    @pytest.mark.asyncio
    async def test_pytest_lsp_beside(client: LanguageClient):
        assert client.capabilities is not None


    def test_a_missing_program(lsp_client):
        lsp_client(["no-such-server-xyz"])


    def test_a_missing_program_checked(lsp_server_under_test):
        lsp_server_under_test(["no-such-server-xyz"])


    def test_a_failing_test_reports_what_the_server_said(lsp_client, lsp_server_under_test):
        server = lsp_client(FAKE)
        server.notify("custom/echo", {{"text": "said-for-the-report"}})
        server.wait_for_notification("window/logMessage", timeout_ms=30_000)
        server.request("test/floodStderr", {{"lines": 3}})
        lsp_server_under_test(program_argv("well-behaved"), only=["initialize"])
        assert False, "failing on purpose"
    """
).format(fake=str(FAKE))


def _project(tmp_path: Path, mode: str) -> Path:
    (tmp_path / "test_author.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text(
        f"[pytest]\nasyncio_mode = {mode}\nasyncio_default_fixture_loop_scope = function\n"
    )
    return tmp_path


def _outcome(output: str, test: str) -> str:
    found = re.search(rf"(PASSED|FAILED|ERROR) test_author.py::{test}\b", output)
    assert found is not None, output
    return found.group(1)


def _common(output: str) -> None:
    for test in (
        "test_in_a_plain_test",
        "test_in_an_asyncio_test",
        "test_a_debug_adapter",
        "test_pytest_lsp_beside",
    ):
        assert _outcome(output, test) == "PASSED", output
    # A missing program: one line, no traceback of the supervisor's.
    assert _outcome(output, "test_a_missing_program") == "FAILED", output
    assert (
        "lsp_client: no-such-server-xyz could not be started: executable not found on PATH"
        in output
    )
    assert "supervisor/_" not in output.split("test_a_missing_program")[1].split("____")[0]
    assert _outcome(output, "test_a_missing_program_checked") == "FAILED", output
    assert (
        "lsp_server_under_test: cannot start 'no-such-server-xyz': executable not found" in output
    )
    assert "CoreError" not in output
    # The failing test's report: stderr tail, log messages, conformance findings.
    assert _outcome(output, "test_a_failing_test_reports_what_the_server_said") == "FAILED"
    assert "stderr tail" in output
    assert "noise line 2" in output
    assert "said-for-the-report" in output
    assert "supervisor: conformance of lsp_server_under_test" in output
    assert re.search(r"initialize +pass", output), output


def test_beside_pytest_asyncio_in_strict_mode(tmp_path: Path) -> None:
    done = run_pytest(_project(tmp_path, "strict"), "-rA", "-W", "ignore::DeprecationWarning")
    output = done.stdout + done.stderr
    _common(output)
    assert _outcome(output, "test_in_a_trio_test") == "PASSED", output
    assert _outcome(output, "test_core_in_an_unmarked_async_test") in ("ERROR", "FAILED")
    assert "supervisor_core is a Trio fixture: mark the test @pytest.mark.trio" in output


def test_beside_pytest_asyncio_in_auto_mode(tmp_path: Path) -> None:
    """Issue 28: ``supervisor_core`` failed with ``AttributeError: 'RunContext' object has
    no attribute 'runner'`` under auto mode; now its conflict is one line saying what to
    set, and the blocking fixtures work in every test."""
    done = run_pytest(_project(tmp_path, "auto"), "-rA", "-W", "ignore::DeprecationWarning")
    output = done.stdout + done.stderr
    _common(output)
    assert "RunContext" not in output
    assert _outcome(output, "test_in_a_trio_test") == "ERROR", output
    assert "asyncio_mode = auto also claims this Trio test; set asyncio_mode = strict" in output
    assert _outcome(output, "test_core_in_an_unmarked_async_test") == "ERROR", output
    assert "supervisor_core is a Trio fixture: mark the test @pytest.mark.trio" in output
