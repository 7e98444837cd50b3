"""``supervisor run`` as CI users and terminal users meet it (issue 15): real subprocesses.

A lanes file means what it says, failure output is shown, ``needs`` and job selection,
``--log-dir``, one id space per run, a quiet end when the reader of stdout goes away, and
the live view checked on a real pseudo-terminal whose screen pyte renders.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
from typing import TYPE_CHECKING, Any

import pyte
import pytest

from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from pathlib import Path

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))


def supervisor(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def job(name: str, code: str, *, kind: str = "test", extra: str = "") -> str:
    return (
        f'[[job]]\nname = "{name}"\nproject = "."\nkind = "{kind}"\n'
        f'argv = ["{{python}}", "-c", {json.dumps(code)}]\n{extra}\n'
    )


# --- a lanes file means what it says -----------------------------------------------------


def test_every_listed_test_job_runs_and_a_failing_one_fails_the_run(tmp_path: Path) -> None:
    """Three `test` jobs on one lane: the lane policy would replace the waiting second by the
    third (superseded, which counted as success). Every one runs; the failure is reported."""
    path = write(
        tmp_path / "lanes.toml",
        job("unit", "import time; time.sleep(0.3)")
        + job("integration", "import sys; print('2 failed'); sys.exit(3)")
        + job("docs", "pass"),
    )
    result = supervisor("run", path, "--json")
    assert result.returncode == 1, result.stderr
    finished = {e["name"]: e for e in events_of(result.stdout) if e["event"] == "job.finished"}
    assert {n: e["status"] for n, e in finished.items()} == {
        "unit": "ok",
        "integration": "failed",
        "docs": "ok",
    }
    assert f"integration ({path}:7): expected ok, got failed" in result.stderr
    assert "did not run" not in result.stderr


def test_replacing_a_waiting_job_only_when_declared_and_superseded_only_when_expected(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "lanes.toml",
        job("first", "import time; time.sleep(0.3)")
        + job("replaced", "pass")
        + job("newer", "pass", extra="replace_waiting = true"),
    )
    result = supervisor("run", path)
    # "replaced" ended superseded without saying it may: not as expected.
    assert result.returncode == 1, result.stderr
    assert "1 job did not run:" in result.stderr
    assert (
        f"replaced ({path}:7): superseded: replaced while waiting by a newer request of its kind"
        "  [not expected]" in result.stderr
    )
    assert f"replaced ({path}:7): expected ok, got superseded (never started)" in result.stderr
    declared = write(
        tmp_path / "declared.toml",
        job("first", "import time; time.sleep(0.3)")
        + job("replaced", "pass", extra='expect = "superseded"')
        + job("newer", "pass", extra="replace_waiting = true"),
    )
    result = supervisor("run", declared)
    assert result.returncode == 0, result.stderr
    assert f"replaced ({declared}:7): superseded: replaced while waiting" in result.stderr


# --- failure output, --log-dir -----------------------------------------------------------

NOISY = (
    "import sys\nfor i in range(1000): print(f'line {i:04} ' + 'x' * 40)\n"
    "print('boom', file=sys.stderr)\nsys.exit(2)"
)


def test_the_tail_of_a_failed_job_is_in_the_summary(tmp_path: Path) -> None:
    path = write(tmp_path / "lanes.toml", job("noisy", NOISY, kind="command"))
    result = supervisor("run", path)
    assert result.returncode == 1
    summary = result.stderr[result.stderr.index("--- noisy") :]
    assert summary.startswith(f"--- noisy ({path}:1) failed in "), summary
    assert "  | line 0999 " in summary
    assert "  ! boom\n" in summary
    # Bounded by bytes (8 KiB of the lines as shown), not by a count of lines.
    shown = [line for line in summary_of(result.stderr, "noisy")[1:] if line.startswith("  ")]
    assert 100 < len(shown) < 200
    assert f"the last {len(shown)} lines of its output ---" in summary
    assert sum(len(line) - 3 for line in shown) <= 8 * 1024
    assert "line 0500 " not in summary
    # In the order they came, across the two streams.
    assert summary_of(result.stderr, "noisy")[-2:] == ["  | line 0999 " + "x" * 40, "  ! boom"]
    assert summary.rstrip().endswith("expected ok, got " + summary.split("got ")[-1].strip())


#: A linter's report as ruff's full format prints it: two errors of 13 lines each (the
#: message, the place, the source around it), then a summary.
LINTER = """
import sys
for code, line in (("F401", 1), ("E402", 28)):
    print(f"{code} a problem here")
    print(f"  --> bad.py:{line}:1")
    print("   |")
    for n in range(line - 3, line + 4):
        print(f"{n:2} | source line {n}")
    print("   |")
    print("   = help: how to fix it")
    print()
print("Found 2 errors.")
sys.exit(1)
"""


def test_the_summary_shows_every_error_of_a_linter(tmp_path: Path) -> None:
    """Issue 29: a ruff run with two errors showed only the second in the summary (20
    lines were kept, the report is 27); a byte bound keeps both."""
    path = write(tmp_path / "lanes.toml", job("lint", LINTER, kind="command"))
    result = supervisor("run", path)
    assert result.returncode == 1, result.stderr
    tail = summary_of(result.stderr, "lint")
    assert "the last 27 lines of its output ---" in tail[0]
    assert "  | F401 a problem here" in tail
    assert "  | E402 a problem here" in tail
    assert tail[-1] == "  | Found 2 errors."


def summary_of(stderr: str, name: str) -> list[str]:
    """The lines of the failure-tail block of job ``name``, its head first."""
    block = stderr[stderr.index(f"--- {name} (") :]
    return block[: block.index("no process left behind")].splitlines()


def test_past_the_forwarding_cap_the_tail_is_the_real_end_stream_by_stream(
    tmp_path: Path,
) -> None:
    """A newcomer's big.toml: past the 1 MiB the lanes forward, the block headed "the last 16
    lines" began with the job's first lines and put stderr before stdout's real end."""
    code = (
        "import os, sys\nos.write(1, b'first\\n')\n"
        "for i in range(30): os.write(1, (b'%d ' % i) + b'A' * 200000 + b'\\n')\n"
        "os.write(1, b'LAST STDOUT LINE\\n'); os.write(2, b'err line\\n'); sys.exit(1)"
    )
    path = write(tmp_path / "lanes.toml", job("big", code, kind="command"))
    result = supervisor("run", path)
    assert result.returncode == 1, result.stderr
    block = summary_of(result.stderr, "big")
    assert block[0].endswith("(exit 1): the end of its output, stream by stream ---"), block
    (stdout_head,) = [line for line in block if line.startswith("  stdout, its last ")]
    assert "bytes before them were not forwarded:" in stdout_head
    stdout_lines = block[block.index(stdout_head) + 1 : block.index("  stderr, its last 1 line:")]
    assert stdout_lines[-1] == "  | LAST STDOUT LINE"
    # The last bytes start inside line 29: shown as a continuation, never as a whole line.
    assert stdout_lines[0].startswith("  | …AAAA"), stdout_lines
    assert len(stdout_lines) == 2
    assert block[-1] == "  ! err line"
    assert not [line for line in block if "first" in line or " 0 AAA" in line]


def test_an_unterminated_last_line_is_in_the_tail_in_its_place(tmp_path: Path) -> None:
    """The newcomer's hostile.toml: 5 MB of stdout without a final newline, then stderr."""
    code = (
        "import os, sys\nos.write(1, b'head\\n' + b'A' * 5_000_000)\n"
        "os.write(2, b'err one\\nerr two\\n'); sys.exit(1)"
    )
    path = write(tmp_path / "lanes.toml", job("junk", code, kind="command"))
    for options in ([], ["--log-dir", str(tmp_path / "logs")]):
        result = supervisor("run", path, *options)
        assert result.returncode == 1, result.stderr
        block = summary_of(result.stderr, "junk")
        if options:  # everything forwarded: both streams in the order they came
            assert block[0].endswith("the last 4 lines of its output ---"), block
            assert block[1:] == ["  | head", "  | " + "A" * 199 + "…", "  ! err one", "  ! err two"]
        else:  # past the cap: stream by stream, the unterminated line last of stdout
            assert block[-4:] == [
                "  | …" + "A" * 198 + "…",
                "  stderr, its last 2 lines:",
                "  ! err one",
                "  ! err two",
            ], block


def test_log_dir_keeps_every_byte_of_each_job(tmp_path: Path) -> None:
    """Past the 1 MiB the lanes forward by default: the log file still has everything."""
    big = "import sys\nfor i in range(200_000): print(f'{i:09d}')\nprint('err', file=sys.stderr)"
    path = write(
        tmp_path / "lanes.toml",
        job("big one", big, kind="command")
        + job("noisy", NOISY, kind="command")
        + job("quiet", "pass", kind="command")
        + job("never", "pass", kind="command", extra='needs = ["noisy"]'),
    )
    logs = tmp_path / "logs"
    result = supervisor("run", path, "--log-dir", str(logs))
    assert result.returncode == 1, result.stderr
    # Every job that ran has its file, empty when it printed nothing; a skipped one none.
    assert sorted(os.listdir(logs)) == ["01-big_one.log", "02-noisy.log", "03-quiet.log"]
    assert (logs / "03-quiet.log").read_text() == ""
    text = (logs / "01-big_one.log").read_text()
    lines = text.splitlines()
    assert len(lines) == 200_001
    assert [line for line in lines if line != "err"] == [f"{i:09d}" for i in range(200_000)]
    noisy = (logs / "02-noisy.log").read_text()
    assert noisy.count("\n") == 1001
    assert "boom\n" in noisy
    assert f"the output of each job is in {logs}" in result.stderr


def test_log_dir_that_can_not_be_made_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path / "lanes.toml", job("a", "pass", kind="command"))
    (tmp_path / "file").write_text("")
    result = supervisor("run", path, "--log-dir", str(tmp_path / "file" / "logs"))
    assert result.returncode == 2
    assert "--log-dir" in result.stderr


# --- needs and job selection -------------------------------------------------------------


def test_a_failed_need_skips_its_dependents(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = write(
        tmp_path / "lanes.toml",
        job("build", "import sys; sys.exit(1)", kind="build")
        + job(
            "test",
            f"open({str(marker)!r}, 'w')",
            extra='needs = ["build"]',
        )
        + job("deploy", "pass", kind="command", extra='needs = ["test"]'),
    )
    result = supervisor("run", path, "--json")
    assert result.returncode == 1
    assert not marker.exists()
    finished = {e["name"]: e for e in events_of(result.stdout) if e["event"] == "job.finished"}
    assert finished["test"]["status"] == "skipped"
    assert finished["test"]["jobId"] is None
    assert finished["test"]["error"] == "needs 'build', which ended failed"
    assert finished["deploy"]["error"] == "needs 'test', which ended skipped"
    assert not any(
        e["event"] == "job.started" and e["name"] != "build" for e in events_of(result.stdout)
    )
    assert "2 jobs did not run:" in result.stderr
    assert f"test ({path}:7): skipped: needs 'build', which ended failed" in result.stderr


def test_needs_orders_jobs_across_lanes(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    artifact = tmp_path / "artifact"
    produce = f"open({str(artifact)!r}, 'w').write('made')"
    path = write(
        tmp_path / "lanes.toml",
        f"""\
        [[job]]
        name = "consume"
        project = "other"
        kind = "command"
        argv = ["{{python}}", "-c", "print(open({str(artifact)!r}).read())"]
        needs = ["produce"]

        [[job]]
        name = "produce"
        project = "."
        kind = "build"
        argv = ["{{python}}", "-c", "import time; time.sleep(0.2); {produce}"]
        """,
    )
    result = supervisor("run", path)
    assert result.returncode == 0, result.stderr
    assert "[other] consume | made" in result.stderr


def test_run_some_jobs_by_name_with_what_they_need(tmp_path: Path) -> None:
    path = write(
        tmp_path / "lanes.toml",
        job("build", "print('built')", kind="build")
        + job("test", "print('tested')", extra='needs = ["build"]')
        + job("lint", "print('linted')", kind="command"),
    )
    result = supervisor("run", path, "test", "--json")
    assert result.returncode == 0, result.stderr
    started = [e["name"] for e in events_of(result.stdout) if e["event"] == "job.started"]
    assert started == ["build", "test"]
    assert "running 2 jobs" in result.stderr
    typo = supervisor("run", path, "tset")
    assert typo.returncode == 2
    assert typo.stderr.strip() == (
        f"{path}: no job is named 'tset' (did you mean 'test'?); the jobs are: build, test, lint"
    )


# --- ids, broken pipe ----------------------------------------------------------------------


def test_every_job_of_a_run_has_its_own_id(tmp_path: Path) -> None:
    path = write(
        tmp_path / "lanes.toml",
        job("trusted", "pass", kind="command")
        + job("untrusted", "pass", kind="build", extra='trusted = false\nexpect = "denied"')
        + job("third", "pass", kind="command"),
    )
    result = supervisor("run", path, "--json")
    assert result.returncode == 0, result.stderr
    ids = [e["jobId"] for e in events_of(result.stdout) if e["event"] == "job.finished"]
    assert len(ids) == 3
    assert len(set(ids)) == 3


def test_json_into_head_ends_quietly(tmp_path: Path) -> None:
    """`supervisor run FILE --json | head -n 1`: no traceback, every process ends, 141."""
    pidfile = tmp_path / "pid"
    code = (
        f"import os, sys, time; open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "for i in range(600): print(i, flush=True); print(i, file=sys.stderr, flush=True)\n"
        "time.sleep(30)"
    )
    path = write(tmp_path / "lanes.toml", job("chatty", code, kind="command"))
    result = subprocess.run(
        [
            "bash",
            "-c",
            f'{sys.executable} -m supervisor run "$1" --json | head -n 1; '
            'echo "status ${PIPESTATUS[0]}" >&2',
            "bash",
            path,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert json.loads(result.stdout)["event"] == "job.started"
    assert "Traceback" not in result.stderr
    assert "status 141" in result.stderr, result.stderr
    # One line says it, then quiet: no progress, no summary.
    after = result.stderr.split("the reader of our output went away: cancelling every job\n")
    assert len(after) == 2, result.stderr
    assert after[1] == "status 141\n", result.stderr
    assert runs_no_more(int(pidfile.read_text()))


# --- the rest of the command line --------------------------------------------------------


def test_version_is_the_one_core_ping_answers() -> None:
    from supervisor._core._core import _version

    result = supervisor("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"supervisor {_version()}"


@pytest.mark.parametrize(
    "command", ["run", "exec", "serve", "reap", "testbed", "chaos", "completion"]
)
def test_every_subcommand_help_has_exit_codes_and_an_example(command: str) -> None:
    result = supervisor(command, "--help")
    assert result.returncode == 0
    assert "exit status:" in result.stdout
    assert "example" in result.stdout
    assert "--log-level" in result.stdout


def test_global_options_after_the_subcommand(tmp_path: Path) -> None:
    path = write(tmp_path / "lanes.toml", job("a", "pass", kind="command"))
    assert supervisor("run", path, "--log-level", "DEBUG").returncode == 0
    assert supervisor("--log-level", "ERROR", "reap").returncode == 0
    # The level reaches logging: serve logs the end of its input at INFO.
    served = supervisor("serve", "--log-level", "INFO", stdin="")
    assert " INFO supervisor.serve: the client went away: eof" in served.stderr
    assert "went away" not in supervisor("serve", stdin="").stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_script_parses_and_knows_the_subcommands() -> None:
    result = supervisor("completion", "bash")
    assert result.returncode == 0
    for name in ("run", "exec", "serve", "--log-dir", "--json"):
        assert name in result.stdout
    check = subprocess.run(
        ["bash", "-n"], input=result.stdout, text=True, capture_output=True, check=False
    )
    assert check.returncode == 0, check.stderr
    # What bash offers for `supervisor r<TAB>` and `supervisor run --lo<TAB>`.
    script = result.stdout + textwrap.dedent(
        """
        COMP_WORDS=(supervisor r); COMP_CWORD=1
        _shtab_supervisor supervisor r supervisor; echo "${COMPREPLY[@]}"
        COMP_WORDS=(supervisor run --lo); COMP_CWORD=2
        _shtab_supervisor supervisor --lo run; echo "${COMPREPLY[@]}"
        """
    )
    offered = subprocess.run(
        ["bash", "-c", script], text=True, capture_output=True, check=False
    ).stdout.splitlines()
    assert offered[-2:] == ["run reap", "--log-level --log-dir"]


def test_exec_env_and_stdin_pass_through() -> None:
    code = "import os, sys; print(os.environ['GREETING'], sys.stdin.read().upper(), end='')"
    result = supervisor(
        "exec", "--env", "GREETING=hi", "--", sys.executable, "-c", code, stdin="piped\n"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["data"]["stdout"] == "hi PIPED\n"
    bad = supervisor("exec", "--env", "NOEQUALS", "--", "true")
    assert bad.returncode == 2
    assert "expected NAME=VALUE" in json.loads(bad.stdout)["error"]["message"]


def test_timeout_0_means_none_in_exec_and_in_lanes_files(tmp_path: Path) -> None:
    done = supervisor("exec", "--timeout-ms", "0", "--", sys.executable, "-c", "pass")
    assert done.returncode == 0
    assert json.loads(done.stdout)["data"]["timedOut"] is False
    path = write(
        tmp_path / "lanes.toml",
        job("a", "import time; time.sleep(0.05)", kind="command", extra="timeout_ms = 0"),
    )
    result = supervisor("run", path)
    assert result.returncode == 0, result.stderr


# --- the README's CI example ---------------------------------------------------------------


def _readme_ci_example() -> tuple[str, str]:
    """The lanes file and the shell step of the README's CI example, as written."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme[readme.index("<!-- ci-example -->") :]
    toml = section[section.index("```toml\n") + 8 :]
    toml = toml[: toml.index("```")]
    step = section[section.index("run: |\n") + 7 :]
    step = step[: step.index("```")]
    return toml, textwrap.dedent(step)


def test_the_readme_ci_example_runs_as_written(tmp_path: Path) -> None:
    toml, step = _readme_ci_example()
    (tmp_path / "ci.toml").write_text(toml)
    project = tmp_path / "."
    (project / "tests").mkdir()
    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "-e", "-c", step],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "events.jsonl").exists()
    last = json.loads((tmp_path / "events.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "run.finished"
    assert last["exitCode"] == 0
    # Every job has its log, the quiet build an empty one.
    assert sorted(os.listdir(tmp_path / "logs")) == ["01-lint.log", "02-build.log", "03-test.log"]
    assert (tmp_path / "logs" / "02-build.log").read_text() == ""
    assert (
        '<testsuite name="ci.toml" tests="3" failures="0"' in (tmp_path / "report.xml").read_text()
    )
    # The same step fails the build when a test fails.
    (project / "tests" / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    failed = subprocess.run(
        ["bash", "-e", "-c", step],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr


# --- the live view, on a real terminal -----------------------------------------------------

COLUMNS, ROWS = 60, 40


class Terminal:
    """A pseudo-terminal of COLUMNS x ROWS whose screen pyte renders from what it receives."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        # A real terminal turns "\n" into "\r\n": a pty with default modes does it too.
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=slave,
            env=env,
        )
        os.close(slave)
        self.master = master

    def pump(self, until: Any, timeout: float = 30) -> None:
        """Feed the screen until ``until(screen)`` holds or the output ends."""
        deadline = time.monotonic() + timeout
        while not until(self.screen):
            remaining = deadline - time.monotonic()
            assert remaining > 0, "\n".join(self.screen.display)
            ready, _, _ = select.select([self.master], [], [], remaining)
            if not ready:
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the other side closed
                data = b""
            if not data:
                return
            self.stream.feed(data)

    def finish(self) -> int:
        self.pump(lambda _screen: False)
        os.close(self.master)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


def shown(screen: pyte.Screen) -> list[str]:
    return [line.rstrip() for line in screen.display]


def column_of(line: str, word: str) -> int:
    """The screen column where ``word`` starts in ``line`` (a wide character takes two)."""
    from wcwidth import wcswidth

    return int(wcswidth(line[: line.index(f"finished {word}") + len("finished ")]))


def terminal_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(TERM="xterm-256color", **extra)
    return env


def live_file(tmp_path: Path) -> tuple[str, Path]:
    release = tmp_path / "release"
    wide = "漢" * 100
    code = (
        "import os, sys, time\n"
        # Escape sequences a job could use on the user's terminal: retitle it, clear it.
        "print('\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H' + 'after the escapes', flush=True)\n"
        f"print({wide!r}, flush=True)\n"
        "for i in range(1, 4): print(f'tail-marker-{i}', flush=True)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.02)\n"
        "print('boom', file=sys.stderr); sys.exit(3)"
    )
    path = write(
        tmp_path / "lanes.toml",
        job("漢字 job \x1b[31m", code, kind="command").replace("\x1b", "\\u001b"),
    )
    return path, release


def test_live_view_on_a_terminal(tmp_path: Path) -> None:
    path, release = live_file(tmp_path)
    term = Terminal([sys.executable, "-m", "supervisor", "run", path], terminal_env())
    try:
        # While the job runs: its lane's line and the tail of its output, each on one line.
        term.pump(lambda s: any("tail-marker-3" in line for line in s.display))
        during = shown(term.screen)
        # The escape sequence in the job's name is gone.
        (head,) = [line for line in during if "running 漢字 job  (" in line]
        assert head.startswith("  " + os.path.basename(str(tmp_path))[:10])
        tails = [line for line in during if line.startswith("      | ")]
        assert [t.split("| ")[1] for t in tails] == [
            "tail-marker-1",
            "tail-marker-2",
            "tail-marker-3",
        ]
        # The first line is still there: the job's "clear screen" never reached us.
        assert during[0].startswith("running 1 job from")
        assert term.screen.title == ""
        release.write_text("")
        assert term.finish() == 1
    finally:
        term.kill()
    after = shown(term.screen)
    text = "\n".join(after)
    # No live line is left behind.
    assert not [line for line in after if "running 漢字" in line], text
    assert not [line for line in after if line.startswith("      | ")], text
    # The failed job's output after the live view: the escapes shown, not obeyed.
    assert "  | ^[]0;pwned^G^[[2J^[[Hafter the escapes" not in text  # removed, not shown
    assert "  | after the escapes" in text
    assert "  ! boom" in text
    assert "  | tail-marker-3" in text
    assert after[0].startswith("running 1 job from")
    # Colours by status: the word "failed" of the finished line is red.
    (row,) = [y for y, line in enumerate(after) if "finished failed" in line]
    assert term.screen.buffer[row][column_of(after[row], "failed")].fg == "red"


def test_wide_text_is_cut_by_display_cells_in_the_live_view(tmp_path: Path) -> None:
    from wcwidth import wcswidth

    release = tmp_path / "release"
    code = (
        "import os, time\n"
        "print('漢' * 100, flush=True)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.02)"
    )
    path = write(tmp_path / "lanes.toml", job("wide", code, kind="command"))
    term = Terminal([sys.executable, "-m", "supervisor", "run", path], terminal_env())
    try:
        term.pump(lambda s: any(line.startswith("      | 漢") for line in s.display))
        lines = [line for line in term.screen.display if line.startswith("      | 漢")]
        # One line, cut with an ellipsis inside the width: nothing wrapped onto the next.
        assert len(lines) == 1, "\n".join(term.screen.display)
        assert lines[0].rstrip().endswith("…")
        release.write_text("")
        term.finish()
    finally:
        term.kill()
    assert wcswidth(lines[0].rstrip()) <= COLUMNS


def test_no_color_and_non_terminals_get_no_colours(tmp_path: Path) -> None:
    path, release = live_file(tmp_path)
    release.write_text("")
    term = Terminal([sys.executable, "-m", "supervisor", "run", path], terminal_env(NO_COLOR="1"))
    try:
        assert term.finish() == 1
    finally:
        term.kill()
    after = shown(term.screen)
    (row,) = [y for y, line in enumerate(after) if "finished failed" in line]
    assert term.screen.buffer[row][column_of(after[row], "failed")].fg == "default"
    piped = supervisor("run", path)
    assert "\x1b" not in piped.stderr
    assert "[lane] 漢字 job  finished failed" not in piped.stderr
    assert "漢字 job  finished failed in " in piped.stderr


class ReflowScreen(pyte.Screen):
    """A screen that rewraps its lines when made narrower, as most terminals do (VTE, kitty,
    iTerm2, tmux); pyte's own screen cuts them. Rows pushed past the bottom by the rewrap
    scroll the top ones away, and the cursor stays with its line."""

    def resize(self, lines: int | None = None, columns: int | None = None) -> None:
        columns = columns or self.columns
        if columns < self.columns:
            rows: list[list[Any]] = []
            cursor_row = 0
            for y in range(self.lines):
                line = self.buffer[y]
                chars = [line[x] for x in range(self.columns)]
                while chars and chars[-1].data == " ":
                    chars.pop()
                if y == self.cursor.y:
                    cursor_row = len(rows) + self.cursor.x // columns
                rows.extend([chars[i : i + columns] for i in range(0, len(chars), columns)] or [[]])
            drop = max(cursor_row - (self.lines - 1), 0)
            self.buffer.clear()
            for y, chars in enumerate(rows[drop : drop + self.lines]):
                for x, char in enumerate(chars):
                    self.buffer[y][x] = char
            self.cursor.y = cursor_row - drop
            self.cursor.x = min(self.cursor.x, columns - 1)
            self.columns = columns
        super().resize(lines, columns)


def test_live_view_survives_a_narrower_terminal(tmp_path: Path) -> None:
    """Shrunk during the live view, a rewrapping terminal kept the top of the old block
    above the new one (a newcomer's report): clearing now counts the rows each line takes."""
    release = tmp_path / "release"
    (tmp_path / "p").mkdir()
    code = (
        "import os, time\n"
        "for i in range(1, 4): print(f'long-{i}-' + 'x' * 80, flush=True)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.02)"
    )
    path = write(
        tmp_path / "lanes.toml",
        job("a job with a rather long name", code, kind="command").replace(
            'project = "."', 'project = "p"'
        ),
    )
    term = Terminal([sys.executable, "-m", "supervisor", "run", path], terminal_env())
    term.screen = ReflowScreen(COLUMNS, ROWS)
    term.stream = pyte.ByteStream(term.screen)
    narrow = 25
    new_tail = re.compile(r"^      \| long-\d-x*…$")
    try:
        term.pump(lambda s: any(line.startswith("      | long-3-") for line in s.display))
        # What was written before the resize shows as the terminal had it then.
        while select.select([term.master], [], [], 0)[0]:
            term.stream.feed(os.read(term.master, 65536))
        fcntl.ioctl(term.master, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, narrow, 0, 0))
        term.screen.resize(ROWS, narrow)
        assert sum(1 for line in shown(term.screen) if line.startswith("x")) >= 3
        # The next redraw (its clock ticks every 250 ms) is at the new width.
        term.pump(lambda s: sum(1 for line in shown(s) if new_tail.match(line)) == 3)
        during = [line for line in shown(term.screen) if line]
        release.write_text("")
        assert term.finish() == 0
    finally:
        term.kill()
    # Above the block only the first line of the run, rewrapped: no fragment of the old block.
    assert len(during) > 4, during
    first = f"running 1 job from {path} on lane: p"
    above = "".join(during[:-4])
    assert above.startswith(first + "[p] a job with a rather long name started: {python} -c ")
    assert above.endswith("time.sleep(0.02)'"), during
    assert "running a job w" in during[-4], during
    assert all(new_tail.match(line) for line in during[-3:]), during
    after = [line for line in shown(term.screen) if line]
    assert not [line for line in after if line.startswith("x")], after
