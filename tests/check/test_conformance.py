"""The conformance kit (``supervisor check``) against the testbed, test servers with one flaw
each, and the real peers (issue 18): each misbehaviour fails exactly the check built for it,
and the well-behaved programs pass."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor._check._common import Bounds
from supervisor._check._dap import check_debug_adapter
from supervisor._check._lsp import LSP_CHECKS, check_language_server
from supervisor._check._report import Outcome
from supervisor._check._watch import MAIN_THREAD_EXITED, describe_running, shorten_command
from supervisor.testbed import program_argv

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

FAKES = str(Path(__file__).resolve().parents[1] / "peers" / "check_fakes.py")
#: Tight bounds: the testbed answers in milliseconds (the machine may be busy: not tighter).
FAST = Bounds(
    initialize=4.0, request=2.0, shutdown=1.5, exit=1.5, eof_exit=1.5, vanish_exit=2.0, stall=0.5
)


def fake(flaw: str, protocol: str = "lsp") -> list[str]:
    return [sys.executable, FAKES, flaw, "--protocol", protocol]


async def test_well_behaved_server_passes_every_lsp_check() -> None:
    report = await check_language_server(program_argv("well-behaved"), bounds=FAST)
    assert [r.check for r in report.results] == list(LSP_CHECKS)
    assert report.ok, report.table()
    assert report.failed == []


@pytest.mark.parametrize(
    ("argv", "check"),
    [
        (program_argv("crash-on-initialize"), "initialize"),
        (program_argv("char-content-length"), "initialize"),
        (program_argv("stdin-stall"), "requests"),
        (program_argv("exit-with-pending"), "requests"),
        (program_argv("answer-after-cancel"), "requests"),
        (program_argv("double-answer"), "answers-once"),
        (program_argv("unknown-id"), "answers-once"),
        (fake("drop-cancelled"), "cancel"),
        (fake("quit-when-blocked"), "client-stops-reading"),
        (program_argv("no-shutdown-reply"), "shutdown-exit"),
        (program_argv("ignore-sigterm", protocol="lsp"), "exit-on-eof"),
        (program_argv("ignore-sigterm", protocol="lsp"), "client-vanishes"),
        (fake("orphan-helper"), "client-vanishes"),
        (fake("orphan-helper"), "restart"),
        (fake("orphan-helper"), "no-leftovers"),
        (program_argv("malformed-header"), "stdout-frames"),
        (fake("stdout-log"), "stdout-frames"),
        (program_argv("requests-before-initialize"), "requests-before-initialize"),
        (program_argv("zombie-maker", protocol="lsp", count=3), "reaps-children"),
        (program_argv("main-thread-exits", protocol="lsp"), "no-leftovers"),
        (program_argv("main-thread-exits", protocol="lsp"), "client-vanishes"),
        (program_argv("main-thread-exits", protocol="lsp"), "restart"),
    ],
    ids=lambda value: value if isinstance(value, str) else Path(value[2]).name + ":" + value[2],
)
async def test_each_lsp_misbehaviour_fails_its_check(argv: list[str], check: str) -> None:
    report = await check_language_server(argv, bounds=FAST, only=[check])
    assert report.outcome_of(check) is Outcome.FAIL, report.table()
    assert not report.ok
    row = next(r for r in report.results if r.check == check)
    assert row.evidence
    assert row.rule


def _stdout_evidence(report: Any) -> str:
    assert report.outcome_of("stdout-frames") is Outcome.FAIL, report.table()
    return str(next(r.evidence for r in report.results if r.check == "stdout-frames"))


async def test_stdout_frames_quotes_the_first_stray_line() -> None:
    # The developer sees which print leaked, not only how many bytes it wrote.
    report = await check_language_server(fake("stdout-log"), bounds=FAST, only=["stdout-frames"])
    evidence = _stdout_evidence(report)
    assert re.fullmatch(
        r"\d+ bytes on stdout outside frames, first: 'handling initialize\\n'", evidence
    ), evidence


async def test_stdout_frames_quotes_the_stray_text_that_broke_the_stream() -> None:
    # 74 375 bytes of log lines after frames: the stream breaks at 64 KiB; its stdout began
    # with a frame, so the evidence also quotes where the stray text began.
    report = await check_language_server(fake("stdout-flood"), bounds=FAST, only=["shutdown-exit"])
    evidence = _stdout_evidence(report)
    assert evidence.startswith("stdout stopped being a frame stream: it wrote bytes that are not")
    assert "its stdout began 'Content-Length: " in evidence
    # One read or several: "the stray text began ..." or "first: ..." (reported before).
    assert re.search(
        r"(the stray text began|bytes outside frames, first:) 'flood line 00000\\n", evidence
    ), evidence


@pytest.mark.parametrize("protocol", ["lsp", "dap"])
async def test_stdout_frames_quotes_stray_bytes_escaped_and_bounded(protocol: str) -> None:
    # A banner with terminal escapes and UTF-8, longer than the sample: the evidence quotes its
    # first 64 bytes escaped (nothing raw reaches a terminal), then "...".
    if protocol == "dap":
        report = await check_debug_adapter(
            fake("stdout-banner", "dap"), bounds=FAST.scaled(1.0), only=["exit-on-eof"]
        )
    else:
        report = await check_language_server(
            fake("stdout-banner"), bounds=FAST, only=["stdout-frames"]
        )
    evidence = _stdout_evidence(report)
    sample = r"'\x1b[1;32mmy-server 1.0\x1b[0m ready \xe2\x9c\x93 " + "=" * 29 + "'..."
    count, _, rest = evidence.partition(" bytes on stdout outside frames, first: ")
    assert rest == sample, evidence
    assert int(count) % 96 == 0, evidence
    assert "\x1b" not in evidence
    assert evidence.isascii()


@pytest.mark.parametrize(
    ("argv", "check"),
    [
        (program_argv("crash-on-initialize", protocol="dap"), "initialize"),
        (program_argv("no-shutdown-reply", protocol="dap"), "disconnect"),
        (program_argv("ignore-sigterm", protocol="dap"), "exit-after-disconnect"),
        (program_argv("ignore-sigterm", protocol="dap"), "exit-on-eof"),
        (fake("orphan-helper", "dap"), "no-leftovers"),
        (program_argv("requests-before-initialize", protocol="dap"), "requests-before-initialize"),
        (program_argv("zombie-maker", protocol="dap", count=3), "reaps-children"),
        (program_argv("main-thread-exits", protocol="dap"), "no-leftovers"),
    ],
    ids=lambda value: value if isinstance(value, str) else value[2],
)
async def test_each_dap_misbehaviour_fails_its_check(argv: list[str], check: str) -> None:
    report = await check_debug_adapter(argv, bounds=FAST.scaled(1.0), only=[check])
    assert report.outcome_of(check) is Outcome.FAIL, report.table()


@pytest.mark.parametrize("client", ["vscode", "neovim", "helix"])
async def test_well_behaved_adapter_passes_and_skips_the_debuggee_checks(client: str) -> None:
    report = await check_debug_adapter(program_argv("well-behaved", protocol="dap"), client=client)
    assert report.ok, report.table()
    skipped = {r.check for r in report.results if r.outcome is Outcome.SKIP}
    assert skipped == {"launch", "debuggee-terminated", "debuggee-kept"}


@pytest.mark.parametrize("client", ["vscode", "neovim", "helix"])
async def test_ruff_server_passes_with_every_client_profile(client: str) -> None:
    ruff = Path(sys.executable).with_name("ruff")
    report = await check_language_server(
        [str(ruff), "server"], client=client, only=["requests", "cancel", "shutdown-exit"]
    )
    assert report.ok, report.table()


@pytest.mark.parametrize(
    ("argv", "check", "evidence"),
    [
        (
            program_argv("requests-before-initialize"),
            "requests-before-initialize",
            "sent workspace/configuration (a request) before its initialize answer, in 5 of 5"
            " instances",
        ),
        (
            program_argv("requests-before-initialize", protocol="dap"),
            "requests-before-initialize",
            "sent the initialized event before its initialize answer, in 3 of 3 instances",
        ),
        (
            program_argv("zombie-maker", protocol="lsp", count=3),
            "reaps-children",
            # Three per instance; a zombie keeps only its name ([python]).
            "15 children stayed a zombie (exited, not collected) over 1000 ms, on 5 of 5"
            " instances; the longest: pid",
        ),
        (
            program_argv("main-thread-exits", protocol="lsp"),
            "no-leftovers",
            # The count first, one command line for the three helpers (long paths shortened
            # to their last part, so the program's name shows wherever the checkout lives),
            # its note kept whole.
            (
                "3 left: pid ",
                "main-thread-exits",
                " (its main thread exited; it runs on in another))",
            ),
        ),
    ],
    ids=["lsp-early-request", "dap-early-event", "zombies", "main-thread-exits"],
)
async def test_the_new_findings_name_what_happened(
    argv: list[str], check: str, evidence: str | tuple[str, ...]
) -> None:
    protocol_dap = "dap" in argv
    if protocol_dap:
        report = await check_debug_adapter(argv, bounds=FAST.scaled(1.0))
    else:
        report = await check_language_server(argv, bounds=FAST)
    assert report.outcome_of(check) is Outcome.FAIL, report.table()
    row = next(r for r in report.results if r.check == check)
    for part in (evidence,) if isinstance(evidence, str) else evidence:
        assert part in row.evidence, row.evidence
    # Nothing else fails: the program misbehaves in exactly that one way (and what follows
    # from it: helpers left behind fail the checks that look for them).
    follows = {"client-vanishes", "restart"} if check == "no-leftovers" else set()
    assert set(report.failed) == {check, *follows}, report.table()


async def test_the_vanishing_client_sends_its_own_pid_and_is_collected() -> None:
    # A server that exits only once the client it was told about is gone: with the checker's
    # pid (which lives on) it would never end; with the helper's, it ends once the helper dies
    # and is collected (a zombie still answers kill(pid, 0)).
    report = await check_language_server(fake("watch-process-id"), only=["client-vanishes"])
    assert report.outcome_of("client-vanishes") is Outcome.PASS, report.table()


async def test_run_in_terminal_is_served_as_an_editor_serves_it(tmp_path: Path) -> None:
    target = tmp_path / "target.py"
    target.write_text("import time\ntime.sleep(60)\n")
    report = await check_debug_adapter(
        fake("run-in-terminal", "dap"),
        launch={"program": str(target)},
        only=["launch", "debuggee-terminated"],
    )
    assert report.outcome_of("launch") is Outcome.PASS, report.table()
    assert report.outcome_of("debuggee-terminated") is Outcome.PASS, report.table()


BASH_LS = Path(__file__).resolve().parents[2] / ".peers" / "node" / "node_modules" / ".bin"


@pytest.mark.skipif(
    not (BASH_LS / "bash-language-server").exists(),
    reason="bash-language-server is not installed (scripts/install-peers)",
)
async def test_bash_language_server_ends_when_its_client_vanishes() -> None:
    # Issue 27: with the checker's own pid as processId this was a false finding.
    report = await check_language_server(
        [str(BASH_LS / "bash-language-server"), "start"],
        bounds=Bounds().scaled(2.0),
        only=["client-vanishes"],
    )
    assert report.outcome_of("client-vanishes") is Outcome.PASS, report.table()


async def test_pylsp_passes_every_lsp_check() -> None:
    pylsp = Path(sys.executable).with_name("pylsp")
    report = await check_language_server([str(pylsp)], bounds=Bounds().scaled(2.0))
    assert report.ok, report.table()


async def test_debugpy_kills_its_debuggee_but_waits_for_stdin_eof_after_disconnect(
    tmp_path: Path,
) -> None:
    # The real finding the README reports: debugpy's adapter answers disconnect and ends
    # the debuggee at once, but exits only when its stdin closes.
    target = tmp_path / "target.py"
    target.write_text("import time\nfor _ in range(300):\n    time.sleep(0.1)\n")
    report = await check_debug_adapter(
        [sys.executable, "-m", "debugpy.adapter"],
        launch={"program": str(target), "console": "internalConsole"},
        bounds=Bounds.for_dap().scaled(2.0),
        only=[
            "launch",
            "disconnect",
            "debuggee-terminated",
            "exit-after-disconnect",
            "exit-on-eof",
        ],
    )
    outcomes = {r.check: r.outcome for r in report.results}
    # Its launcher exits on disconnect and stays uncollected while the adapter waits for its
    # stdin to close (the exit-after-disconnect finding, seen from the other side).
    assert outcomes["reaps-children"] is Outcome.FAIL, report.table()
    assert "debugpy/launcher" in next(
        r.evidence for r in report.results if r.check == "reaps-children"
    )
    assert outcomes["launch"] is Outcome.PASS, report.table()
    assert outcomes["disconnect"] is Outcome.PASS, report.table()
    assert outcomes["debuggee-terminated"] is Outcome.PASS, report.table()
    assert outcomes["exit-on-eof"] is Outcome.PASS, report.table()
    assert outcomes["exit-after-disconnect"] is Outcome.FAIL, report.table()
    assert "only once its stdin was closed" in next(
        r.evidence for r in report.results if r.check == "exit-after-disconnect"
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "check", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_prints_json_and_exits_0_when_every_check_passes() -> None:
    done = _cli("lsp", "--json", "--only", "shutdown-exit", "--", *program_argv("well-behaved"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    # initialize always runs, and the checks judged over every instance always report.
    assert [r["check"] for r in report["results"]] == [
        "initialize",
        "requests-before-initialize",
        "shutdown-exit",
        "reaps-children",
        "no-leftovers",
        "stdout-frames",
    ]
    assert {r["result"] for r in report["results"]} == {"pass"}


def test_cli_exits_1_with_a_table_when_a_check_fails() -> None:
    done = _cli("lsp", "--only", "initialize", "--", *program_argv("crash-on-initialize"))
    assert done.returncode == 1
    assert re.search(r"^initialize +fail +exited 70 without answering", done.stdout, re.M)
    assert "rules:" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["lsp"], "no program given"),
        (["lsp", "--", "/nonexistent/server"], "cannot start"),
        (["lsp", "--launch", "{}", "--", "x"], "--launch is for dap"),
        (["dap", "--launch", "[", "--", "x"], "--launch is not JSON"),
        (["lsp", "--only", "nope", "--", sys.executable], "unknown check"),
        (["lsp", "--time-scale", "0", "--", sys.executable], "--time-scale"),
    ],
)
def test_cli_refuses_bad_usage_with_status_2_and_starts_nothing(
    args: list[str], message: str
) -> None:
    done = _cli(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == ""


def test_the_cli_spells_out_the_profiles_and_status_it_does_not_import() -> None:
    from supervisor._check import _cli, _profiles, _report

    assert _cli._CLIENTS == _profiles.CLIENTS
    assert _cli.EXIT_BAD_USAGE == _report.EXIT_BAD_USAGE


async def test_the_ordinary_request_is_one_an_editor_sends_at_start() -> None:
    # A server that works through requests in turn and takes 60 s over an empty
    # workspace/symbol (as jedi-language-server indexing a large environment): the checker's
    # ordinary request is documentSymbol on the document it opened, so nothing queues behind.
    report = await check_language_server(
        fake("serial-workspace-symbol"),
        bounds=FAST,
        only=["requests", "cancel", "client-stops-reading", "shutdown-exit"],
    )
    assert report.ok, report.table()
    row = next(r for r in report.results if r.check == "requests")
    assert row.evidence.startswith("textDocument/documentSymbol: a result"), row.evidence


async def test_a_check_behind_an_unanswered_request_names_it() -> None:
    # stdin-stall reads nothing after initialize: cancel and shutdown fail behind the first
    # request of `requests`, and their evidence says so rather than blaming their own step.
    report = await check_language_server(
        program_argv("stdin-stall"), bounds=FAST, only=["requests", "cancel", "shutdown-exit"]
    )
    evidence = {r.check: r.evidence for r in report.results}
    assert "behind" not in evidence["requests"].split(";")[0]
    assert "the instance had not answered textDocument/documentSymbol sent" in evidence["cancel"]
    assert (
        "no shutdown answer in 1500 ms; the instance had not answered"
        " textDocument/documentSymbol sent" in evidence["shutdown-exit"]
    ), evidence["shutdown-exit"]
    assert (
        "conformance/unknownMethod: no answer in 2000 ms; the instance had not answered"
        in evidence["requests"]
    )


def test_a_finding_counts_what_was_left_and_cuts_command_lines_at_words() -> None:
    long = "python /opt/app/helper.py --serve --no-color " + "--flag-number-x " * 10
    note = MAIN_THREAD_EXITED
    shown = describe_running({13: long + note, 11: long + note, 12: "sleep 60"})
    assert shown.startswith("3 left: pid 11, 13 (python /opt/app/helper.py --serve --no-color ")
    assert shown.count("python") == 1  # one command line for the pids that share it
    assert " ... (its main thread exited; it runs on in another)); pid 12 (sleep 60)" in shown
    for cut in (shorten_command(long), shorten_command(long, 40)):
        assert cut.endswith(" ...")
        assert long.startswith(cut[: -len(" ...")] + " ")  # whole words only
    assert len(shorten_command(long, 40)) <= 44
    assert shorten_command("x" * 300, 50) == "x" * 50 + " ..."  # one long word: cut inside
    assert shorten_command("sleep 60" + note) == "sleep 60" + note
    # Where a checkout lives never pushes the program's own arguments out of the cut.
    deep = "/" + "/".join(["some-rather-long-directory"] * 8)
    venv = f"{deep}/.venv/bin/python {deep}/supervisor/testbed/_programs.py"
    shown = shorten_command(f"{venv} main-thread-exits --protocol lsp --count 3")
    assert shown == ".../python .../_programs.py main-thread-exits --protocol lsp --count 3"
    assert shorten_command("/usr/bin/sleep 60") == "/usr/bin/sleep 60"  # short: kept whole
