"""The pytest plugin as a user runs it, and the ``testbed``/``chaos`` commands (issue 7)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from importlib import metadata
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor._process._reaper import reap_adopted_children
from supervisor.testbed import SCENARIOS
from tests._procfs import stat_fields

from ._poll import BOUND_S, gone

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

PY = sys.executable

USER_TESTS = """
import trio
from supervisor import DEVNULL, open_process_tree
from supervisor.testbed import program_argv


async def test_stop_is_bounded(supervisor_scenario_session, no_leaked_processes):
    async with supervisor_scenario_session("no-shutdown-reply") as session:
        await session.endpoint.request("initialize", {"capabilities": {}})
        with trio.move_on_after(1):
            await session.endpoint.request("shutdown")
        report = await session.tree.aclose(term_grace_ms=500)
        assert session.tree.pid in report.terminated


async def test_core_fixture(supervisor_core, no_leaked_processes):
    result = await supervisor_core.call("process.run", {"argv": program_argv("exit-signal")})
    assert result["signal"] == 9


async def test_scenario_fixture(supervisor_scenario, no_leaked_processes):
    async with supervisor_scenario("hang") as tree:
        assert tree.stdout is not None
        assert await tree.stdout.receive_some(6) == b"ready\\n"


async def test_leak_is_reported(no_leaked_processes):
    argv = program_argv("hang")
    tree = await open_process_tree(argv, stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL)
    assert tree.pid > 0  # never closed: the guard must fail this test
"""


def _plugin_args() -> list[str]:
    installed = any(
        entry.value in ("supervisor.pytest_plugin", "_trio_process_supervisor._pytest_plugin")
        for entry in metadata.entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "supervisor.pytest_plugin"]


def test_plugin_in_a_user_project(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_plugin_args(), "test_user.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # The leaked program was SIGKILLed by the guard; once the inner run exited, its zombie
    # may have been re-parented to us (a child subreaper). It leads a session of its own, as a
    # host's own child may, so the Core's reaper leaves it to us, the host: collect it.
    reap_adopted_children()
    for pid in re.findall(r"pid (\d+) still running", done.stdout):
        _collect_if_ours(int(pid))
    out = done.stdout
    assert "4 passed, 1 error" in out, out + done.stderr
    assert "processes outlived the test" in out
    assert "_programs.py hang" in out  # listed with its command line


def _collect_if_ours(pid: int) -> None:
    """Wait (bounded) for ``pid`` to die and collect it if it became our child."""
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        fields = stat_fields(pid)
        if fields is None or int(fields[1]) != os.getpid():
            return  # gone, or not ours to collect
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.01)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "supervisor", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_testbed_list() -> None:
    done = _cli("testbed", "list", "--json")
    assert done.returncode == 0
    listed = json.loads(done.stdout)
    assert [item["name"] for item in listed] == list(SCENARIOS)
    assert all(item["handling"] for item in listed)
    text = _cli("testbed", "list").stdout
    assert "double-answer [lsp, dap]" in text


def test_testbed_run() -> None:
    done = _cli("testbed", "run", "flood-stderr", "--bytes", "3000")
    assert done.returncode == 0
    assert len(done.stderr) == 3000  # relayed whole; nothing was left to end, nothing said
    refused = _cli("testbed", "run", "no-such")
    assert refused.returncode == 2
    assert refused.stderr.startswith("usage: supervisor testbed run ")
    assert "supervisor testbed run: error: argument scenario" in refused.stderr
    mismatch = _cli("testbed", "run", "hang", "--protocol", "dap")
    assert mismatch.returncode == 2
    assert "does not speak 'dap'" in mismatch.stderr


def test_help_texts_name_no_issue_numbers() -> None:
    for args in (["--help"], ["testbed", "--help"], ["testbed", "run", "--help"]):
        done = _cli(*args)
        assert done.returncode == 0
        assert "issue" not in done.stdout.lower(), done.stdout
    program_help = _cli("testbed", "run", "hang", "--help").stdout
    assert program_help.startswith("usage: supervisor testbed run ")
    assert "--no-supervise" in program_help


async def test_testbed_run_ends_the_whole_tree_on_ctrl_c(tmp_path: Path) -> None:
    """The daemon ignores SIGTERM and left its session: Ctrl-C still ends it, and the main."""
    pid_file = tmp_path / "pids"
    command = [PY, "-m", "supervisor", "testbed", "run", "daemon", "--pid-file", str(pid_file)]
    cli = await trio.lowlevel.open_process(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert cli.stdout is not None
    assert cli.stderr is not None
    try:
        seen = b""
        with trio.fail_after(BOUND_S):
            while not seen.endswith(b"ready\n"):  # relayed: the daemon is set up
                chunk = await cli.stdout.receive_some()
                assert chunk, seen
                seen += chunk
        pids = [int(line) for line in pid_file.read_text().split()]
        assert len(pids) == 2  # the program and its daemon
        cli.send_signal(signal.SIGINT)
        with trio.fail_after(BOUND_S):
            said = b""
            async for chunk in cli.stderr:
                said += chunk
            assert await cli.wait() == 128 + signal.SIGINT
    finally:
        if cli.returncode is None:
            cli.kill()
            await cli.wait()
        await cli.stdout.aclose()
        await cli.stderr.aclose()
    assert all(gone(pid) for pid in pids), [pid for pid in pids if not gone(pid)]
    text = said.decode()
    assert text.startswith("supervisor testbed run: SIGINT: ended"), text
    assert f"{pids[1]} (SIGKILL after the TERM grace, outside the program's group)" in text


def test_testbed_run_ends_what_the_program_left_running(tmp_path: Path) -> None:
    """A program that exits leaving a daemon: the daemon is ended, the status is the program's."""
    pid_file = tmp_path / "pids"
    done = _cli("testbed", "run", "daemon", "--exit", "--pid-file", str(pid_file))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ready\n"
    pids = [int(line) for line in pid_file.read_text().split()]
    assert all(gone(pid) for pid in pids)
    assert "the program exited (status 0); ended what it left running" in done.stderr
    assert str(pids[1]) in done.stderr


def test_testbed_run_no_supervise_runs_the_program_itself() -> None:
    done = _cli("testbed", "run", "exit-signal", "--signal", "15", "--no-supervise")
    assert done.returncode == -signal.SIGTERM  # the program killed this very process
    assert done.stdout == "ready\n"
    supervised = _cli("testbed", "run", "exit-signal", "--signal", "15")
    assert supervised.returncode == 128 + signal.SIGTERM
    assert supervised.stdout == "ready\n"


async def test_a_bare_protocol_flag_is_lsp_and_the_readme_check_command_works() -> None:
    # `testbed list` writes "With --protocol it serves LSP": the bare flag means lsp. The
    # README's command line for pointing `supervisor check` at a testbed program.
    from supervisor._check._lsp import check_language_server
    from supervisor.testbed._programs import parser

    assert parser().parse_args(["zombie-maker", "--protocol"]).protocol == "lsp"
    assert parser().parse_args(["zombie-maker"]).protocol is None
    assert parser().parse_args(["zombie-maker", "--protocol", "dap"]).protocol == "dap"
    argv = [PY, "-m", "supervisor", "testbed", "run", "zombie-maker", "--protocol"]
    report = await check_language_server(
        [*argv, "--count", "2", "--no-supervise"], only=["requests", "reaps-children"]
    )
    assert report.outcome_of("initialize").value == "pass", report.table()
    assert report.outcome_of("requests").value == "pass", report.table()
    assert report.outcome_of("reaps-children").value == "fail", report.table()


def test_chaos_command_json() -> None:
    done = _cli("chaos", "--iterations", "1", "--seed", "3", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["iterations"] == 1
    assert report["violations"] == []


def test_chaos_command_reports_a_violation_with_seed_and_steps() -> None:
    # A negative memory bound makes round 1 fail whatever happens: the reporting path.
    done = _cli(
        "chaos", "--iterations", "2", "--seed", "4", "--max-rss-growth-bytes=-1099511627776"
    )
    assert done.returncode == 1
    assert "FAILED: seed 4, round 1" in done.stdout
    assert "shortest failing step list:" in done.stdout


def test_chaos_command_via_names_every_kind() -> None:
    from supervisor.testbed._chaos import ALL_VIAS

    done = _cli("chaos", "--iterations", "1", "--seed", "3", "--via", "terminal", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert set(report["stepsByVia"]) == {"terminal"}
    # Each terminal is a tree, whether or not its program got far enough to write a pid file.
    assert report["processTreesStarted"] >= report["scenariosRun"] > 0
    refused = _cli("chaos", "--via", "nope")
    assert refused.returncode == 2
    assert all(via in refused.stderr for via in ALL_VIAS)  # the choices are the runner's vias
