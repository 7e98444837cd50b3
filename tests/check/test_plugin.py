"""The pytest plugin for server authors (issue 18): the conformance fixtures in a project that
also uses pytest-lsp (no Trio mode), the leak guard that sees unmarked descendants, and a
plugin that loads without importing the supervisor.

Each case runs pytest in a subprocess on a small project in ``tmp_path``, as an author's
suite would run: the plugin is loaded from its ``pytest11`` entry point.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING

import pytest

from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

pytest_lsp = pytest.importorskip("pytest_lsp")


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def counts(output: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|error)", output)}


AUTHOR_SUITE = """
import sys

import pytest
import pytest_lsp
from lsprotocol.types import ClientCapabilities, InitializeParams
from pytest_lsp import ClientServerConfig, LanguageClient

from supervisor.testbed import program_argv

SERVER = program_argv("well-behaved")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(InitializeParams(capabilities=ClientCapabilities()))
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio
async def test_pytest_lsp_drives_the_server(client: LanguageClient):
    assert client is not None


def test_conformance_in_a_plain_test(lsp_server_under_test):
    report = lsp_server_under_test(SERVER, client="neovim", only=["shutdown-exit"])
    assert report.ok


@pytest.mark.trio
async def test_conformance_in_a_trio_test(lsp_server_under_test):
    report = await lsp_server_under_test.check(SERVER, client="helix", only=["cancel"])
    assert report.ok


@pytest.mark.asyncio
async def test_conformance_in_an_asyncio_test(lsp_server_under_test):
    report = lsp_server_under_test(SERVER, only=["requests"])
    assert report.ok


@pytest.mark.asyncio
async def test_conformance_awaited_in_an_asyncio_test(lsp_server_under_test):
    report = await lsp_server_under_test.check(SERVER, only=["cancel"])
    assert report.ok


def test_awaiting_outside_a_loop_says_what_to_do(lsp_server_under_test):
    with pytest.raises(RuntimeError, match=r"call the fixture itself: lsp_server_under_test"):
        lsp_server_under_test.check(SERVER)


def test_dap_conformance(dap_adapter_under_test):
    adapter = program_argv("well-behaved", protocol="dap")
    report = dap_adapter_under_test(adapter, only=["disconnect"])
    assert report.ok


def test_a_failing_server_fails_with_the_table(lsp_server_under_test):
    lsp_server_under_test(program_argv("crash-on-initialize"), only=["initialize"])
"""


def test_fixtures_work_beside_pytest_lsp_without_trio_mode(tmp_path: Path) -> None:
    (tmp_path / "test_author.py").write_text(AUTHOR_SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = run_pytest(tmp_path, "-W", "ignore::DeprecationWarning")
    output = done.stdout + done.stderr
    assert counts(output) == {"passed": 7, "failed": 1}, output
    assert "test_a_failing_server_fails_with_the_table" in output
    assert re.search(r"initialize +fail +exited 70 without answering", output), output


LEAKY_SUITE = """
import subprocess
import sys

import pytest

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_an_unmarked_leak_is_caught(no_leaked_processes):
    subprocess.Popen(SLEEPER, start_new_session=True)


@pytest.mark.supervisor_leak_scope("marked")
def test_the_marker_only_guard_misses_it(no_leaked_processes, tmp_path_factory):
    child = subprocess.Popen(SLEEPER, start_new_session=True)
    with open({pid_file!r}, "w") as f:
        f.write(str(child.pid))
"""


def test_no_leaked_processes_sees_unmarked_descendants(tmp_path: Path) -> None:
    pid_file = tmp_path / "missed.pid"
    (tmp_path / "test_leaky.py").write_text(LEAKY_SUITE.format(pid_file=str(pid_file)))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    try:
        done = run_pytest(tmp_path)
        output = done.stdout + done.stderr
        # The leaking test passes, then its teardown (the guard) errors.
        assert counts(output) == {"passed": 2, "error": 1}, output
        assert "processes outlived the test" in output
        assert "time.sleep(60)" in output
    finally:
        # The marker-only guard let this one go: end it here.
        if pid_file.exists():
            pid = int(pid_file.read_text())
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # adopted by us when we are a child subreaper
            deadline = time.monotonic() + 5
            while not runs_no_more(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert runs_no_more(pid)


def test_loading_the_plugin_imports_neither_trio_nor_the_supervisor() -> None:
    probe = textwrap.dedent(
        """
        import sys
        import pytest
        before = set(sys.modules)
        import supervisor.pytest_plugin
        new = sorted(set(sys.modules) - before)
        heavy = [m for m in new if m.split(".")[0] in ("trio", "psutil", "msgspec", "pyte")]
        heavy += [m for m in new if m.startswith("supervisor._")]
        print(heavy)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
