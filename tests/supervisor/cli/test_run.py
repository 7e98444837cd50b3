"""``supervisor run FILE.toml`` end to end, as a real subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any, Final

import pytest
import trio

from protocol import ERROR_CATALOG
from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from pathlib import Path

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))
DEMO = os.path.join(REPO, "examples", "demo.toml")


def supervisor_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "run", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_demo_exits_0_and_shows_every_status() -> None:
    result = supervisor_run(DEMO, "--json")
    assert result.returncode == 0, result.stderr
    events: list[dict[str, Any]] = [json.loads(line) for line in result.stdout.splitlines()]
    finished = {e["name"]: e for e in events if e["event"] == "job.finished"}
    assert {e["status"] for e in finished.values()} == {
        "ok",
        "failed",
        "cancelled",
        "denied",
        "superseded",
    }
    assert finished["deadline"]["status"] == "failed"
    assert finished["deadline"]["timedOut"] is True
    assert finished["build (replaced while waiting)"]["status"] == "superseded"
    assert finished["long test"]["status"] == "superseded"
    assert finished["test"]["status"] == "ok"
    assert finished["grandchild gone"]["status"] == "ok"
    # Every job gets a name and a lane, and exactly one job.finished.
    assert len([e for e in events if e["event"] == "job.finished"]) == len(finished) == 11
    summary = events[-1]
    assert summary["event"] == "run.finished"
    assert summary["exitCode"] == 0
    assert summary["leftovers"] == []
    assert all(job["asExpected"] for job in summary["jobs"])
    # The real pytest suite ran and passed.
    test_output = "".join(
        e["text"] for e in events if e["event"] == "job.output" and e["name"] == "test"
    )
    assert "12 passed" in test_output
    # The human account on stderr.
    assert "[scripts] deadline finished failed in" in result.stderr
    assert "11 jobs, all as expected" in result.stderr
    assert "no process left behind" in result.stderr


def test_bad_file_exits_2_with_its_line_and_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    path = write(
        tmp_path / "bad.toml",
        f"""\
        [[job]]
        project = "."
        kind = "command"
        argv = ["{sys.executable}", "-c", "open({str(marker)!r}, 'w')"]

        [[job]]
        project = "."
        kind = "command"
        argv = ["true"]
        timeout_ms = "soon"
        """,
    )
    result = supervisor_run(path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"{path}:10: 'timeout_ms' must be an integer (milliseconds), not a string"
    )
    assert result.stdout == ""
    assert not marker.exists()


def test_syntax_error_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.toml", '[[job]]\nproject = "."\nargv = ["a",\n')
    result = supervisor_run(path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"{path}:3: invalid TOML")


def test_toml_only_tomlkit_accepts_exits_2_at_its_line(tmp_path: Path) -> None:
    """Issue 2 fix: a multi-line inline table (tomlkit accepts it, TOML 1.0 does not) threw
    the line numbers off; strict TOML 1.0 refuses it first, at its line, exit 2."""
    path = write(
        tmp_path / "bad.toml",
        '[[job]]\nproject = "."\nkind = "command"\nargv = ["true"]\nenv = {\n  A = "1"\n}\n',
    )
    result = supervisor_run(path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"{path}:5: invalid TOML: "), result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a = " + "[" * 500 + "]" * 500 + "\n", 1),
        (
            '[[job]]\nproject = "."\nkind = "command"\nargv = ["true"]\n'
            "x = " + "[" * 3000 + "]" * 3000 + "\n",
            5,
        ),
        ("a = " + "{x = " * 500 + "1" + "}" * 500 + "\n", 1),
        ("a." * 3000 + "b = 1\n", 1),
    ],
)
def test_deeply_nested_file_exits_2_at_its_line(tmp_path: Path, text: str, line: int) -> None:
    """A newcomer's hostile file: 500 nested arrays crashed with a RecursionError traceback."""
    path = write(tmp_path / "deep.toml", text)
    result = supervisor_run(path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith(f"{path}:{line}: invalid TOML: "), result.stderr[-2000:]
    assert "nested more than 100 levels deep" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_launch_failure_says_why(tmp_path: Path) -> None:
    """Issue 2 fix: the human "finished failed" line did not say why a job failed to launch;
    it now carries job.finished's error, and names the placeholders when argv holds an
    unknown {word} (which is passed as is: braces are legitimate in argv)."""
    path = write(
        tmp_path / "lanes.toml",
        """\
        [[job]]
        name = "missing"
        project = "."
        kind = "command"
        argv = ["/nonexistent"]
        expect = "failed"

        [[job]]
        name = "far from a placeholder"
        project = "."
        kind = "command"
        argv = ["{interpreter}", "-c", "pass"]
        expect = "failed"

        [[job]]
        name = "braces"
        project = "."
        kind = "command"
        argv = ["{python}", "-c", "import sys; print(sys.argv[1:])", "{}", "{x}"]
        """,
    )
    result = supervisor_run(path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    (missing,) = [line for line in lines if "missing finished" in line]
    assert missing.endswith(" ms: executable not found: /nonexistent"), missing
    (typo,) = [line for line in lines if "far from a placeholder finished" in line]
    assert "executable not found on PATH: {interpreter} (argv holds {interpreter}: " in typo
    assert "the placeholders are {python}, {here}, {tmpdir}" in typo
    (braces,) = [line for line in lines if "braces finished" in line]
    assert braces.endswith(" ms (exit 0)"), braces
    assert "placeholders" not in braces
    assert "] braces | ['{}', '{x}']" in result.stderr


def test_output_far_past_the_cap_still_shows_its_end(tmp_path: Path) -> None:
    """Issue 2 fix: past the 1 MiB output cap the end of the output (a test summary) was lost;
    the last output is kept and sent after the dropped-bytes notice, before job.finished."""
    path = write(
        tmp_path / "lanes.toml",
        """\
        [[job]]
        project = "."
        kind = "command"
        argv = ["{python}", "-c", "print('x' * 3_000_000); print('END')"]
        """,
    )
    result = supervisor_run(path, "--json")
    assert result.returncode == 0, result.stderr
    events: list[dict[str, Any]] = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.index("job.finished") > max(i for i, k in enumerate(kinds) if k == "job.output")
    outputs = [e for e in events if e["event"] == "job.output"]
    (notice,) = [e for e in outputs if "droppedBytes" in e]
    assert outputs[-1]["text"].endswith("x\nEND\n")
    assert outputs.index(notice) < len(outputs) - 1
    kept = sum(len(e["text"]) for e in outputs if "droppedBytes" not in e)
    assert kept + notice["droppedBytes"] == 3_000_000 + 5
    assert "] command#1 | END\n" in result.stderr


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = supervisor_run(str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert "cannot read the file" in result.stderr


REFUSALS: Final[dict[str, tuple[str, tuple[str, ...], str, dict[str, Any]]]] = {
    # name: (the file's text after a job that would leave the marker, extra arguments,
    #        error code, details)
    "bad TOML": ('argv = ["a",\n', (), "invalid_request", {"line": 7}),
    "unknown key": ("bogus = 1\n", (), "invalid_request", {"line": 7}),
    "missing project": ('project = "nowhere"\n', (), "invalid_request", {"line": 7}),
    "unknown JOB": ("", ("nojob",), "not_found", {"line": None, "job": "nojob"}),
    "-j 0": ("", ("-j", "0"), "invalid_request", {"option": "-j"}),
    "--ray with -j": ("", ("--ray", "auto", "-j", "2"), "invalid_request", {"option": "--ray"}),
    "--junit": ("", ("--junit", "/nonexistent/r.xml"), "invalid_request", {"option": "--junit"}),
    "--log-dir": ("", ("--log-dir", "/proc/no/logs"), "invalid_request", {"option": "--log-dir"}),
    "--dry-run -j 0": ("", ("--dry-run", "-j", "0"), "invalid_request", {"option": "-j"}),
}
if importlib.util.find_spec("ray") is None:
    REFUSALS["--ray without Ray"] = ("", ("--ray", "auto"), "not_supported", {"option": "--ray"})


@pytest.mark.parametrize("kind", REFUSALS)
def test_every_refusal_with_json_is_one_object_on_stdout(tmp_path: Path, kind: str) -> None:
    tail, extra, code, details = REFUSALS[kind]
    marker = tmp_path / "started"
    path = write(
        tmp_path / "run.toml",
        f"""\
        [[job]]
        name = "marker"
        argv = ["{sys.executable}", "-c", "open({str(marker)!r}, 'w')"]

        [[job]]
        argv = ["true"]
        """,
    )
    with open(path, "a") as file:
        file.write(tail)
    plain = supervisor_run(path, *extra)
    result = supervisor_run(path, *extra, "--json")
    assert plain.returncode == result.returncode == 2
    # The human line is the same with --json or without; only --json prints the object.
    assert plain.stdout == ""
    assert result.stderr == plain.stderr != ""
    [line] = result.stdout.splitlines()
    refused = json.loads(line)
    assert refused["event"] == "run.refused"
    assert refused["exitCode"] == 2
    assert refused["error"]["code"] == code
    assert refused["error"]["message"] in plain.stderr
    assert refused["error"]["details"] == (
        details if "option" in details else {"file": path, **details}
    )
    assert code in {entry.name for entry in ERROR_CATALOG}
    assert not marker.exists()


ARGPARSE_REFUSALS: Final = {
    # name: (arguments, the option details name)
    "bad -j value": (("-j", "abc"), "-j"),
    "unknown option": (("--bogus",), "--bogus"),
    "unknown option with a value": (("--bogus=1", "x"), "--bogus"),
    "bad choice": (("--color", "sometimes"), "--color"),
    "option without its value": (("--ray",), "--ray"),
}


@pytest.mark.parametrize("kind", ARGPARSE_REFUSALS)
def test_a_bad_option_with_json_is_one_run_refused_object(tmp_path: Path, kind: str) -> None:
    """argparse refuses before ``--json`` is read: with ``--json`` among the arguments its
    error is a ``run.refused`` object too, its stderr (usage and error line) unchanged."""
    extra, option = ARGPARSE_REFUSALS[kind]
    marker = tmp_path / "started"
    path = write(
        tmp_path / "run.toml",
        f"""\
        [[job]]
        argv = ["{sys.executable}", "-c", "open({str(marker)!r}, 'w')"]
        """,
    )
    plain = supervisor_run(path, *extra)
    result = supervisor_run(path, "--json", *extra)
    assert plain.returncode == result.returncode == 2
    assert plain.stdout == ""
    assert plain.stderr.startswith("usage: supervisor")
    assert result.stderr == plain.stderr
    [line] = result.stdout.splitlines()
    refused = json.loads(line)
    assert refused == {
        "event": "run.refused",
        "exitCode": 2,
        "error": {
            "code": "invalid_request",
            "message": plain.stderr.splitlines()[-1],
            "details": {"option": option},
        },
    }
    assert not marker.exists()


@pytest.mark.parametrize(
    ("argv", "run_json"),
    [
        (["run", "f.toml", "--json"], True),
        (["--log-level", "DEBUG", "run", "f.toml", "--js"], True),
        (["--log-level=DEBUG", "run", "--json", "f.toml"], True),
        (["run", "f.toml", "--", "--json"], False),  # a JOB named --json
        (["run", "f.toml", "--j"], False),  # ambiguous: not --json
        (["exec", "--json"], False),
        (["--log-level", "run", "x", "--json"], False),  # run is the level there
        ([], False),
    ],
)
def test_which_command_lines_refuse_in_json(argv: list[str], run_json: bool) -> None:
    from supervisor._cli._main import _asks_run_json

    assert _asks_run_json(argv) is run_json


def test_unexpected_outcome_exits_1_and_names_the_job(tmp_path: Path) -> None:
    path = write(
        tmp_path / "lanes.toml",
        """\
        [[job]]
        name = "fine"
        project = "."
        kind = "command"
        argv = ["{python}", "-c", "pass"]

        [[job]]
        name = "should fail"
        project = "."
        kind = "command"
        argv = ["{python}", "-c", "pass"]
        expect = "failed"

        [[job]]
        name = "breaks"
        project = "."
        kind = "command"
        argv = ["{python}", "-c", "import sys; print('boom', file=sys.stderr); sys.exit(4)"]
        """,
    )
    result = supervisor_run(path)
    assert result.returncode == 1, result.stderr
    assert "2 of 3 jobs did not end as expected" in result.stderr
    assert f"should fail ({path}:7): expected failed, got ok" in result.stderr
    assert f"breaks ({path}:14): expected ok, got failed" in result.stderr
    assert "(exit 4)" in result.stderr
    assert "[.] breaks ! boom" not in result.stderr  # the lane is named after its directory
    assert "breaks ! boom" in result.stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_signal_cancels_everything_and_cleans_every_tree(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    """A job whose child left a SIGTERM-ignoring grandchild in a new session is running
    when the supervisor gets the signal: every process is gone and the exit code says why."""
    pidfile = tmp_path / "grandchild.pid"
    escape = os.path.join(REPO, "examples", "scripts", "escape.py")
    script = (
        "import subprocess, sys, time; "
        f"subprocess.run([sys.executable, {escape!r}, {str(pidfile)!r}], check=True); "
        "print('waiting', flush=True); time.sleep(60)"
    )
    path = write(
        tmp_path / "lanes.toml",
        f"""\
        [[job]]
        name = "escapes then waits"
        project = "."
        kind = "command"
        argv = ["{{python}}", "-c", {json.dumps(script)}]

        [[job]]
        name = "queued"
        project = "."
        kind = "command"
        argv = ["{{python}}", "-c", "pass"]
        """,
    )
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "supervisor", "run", path, "--json"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        buffer = b""
        with trio.fail_after(30):
            # The argv in job.started holds the word too: wait for the job's own output
            # line (JSON-escaped newline, end of the text), possibly coalesced with others.
            while b'waiting\\n"' not in buffer:
                data = await process.stdout.receive_some()
                assert data, buffer
                buffer += data
            process.send_signal(signum)
            async with trio.open_nursery() as nursery:
                rest: list[bytes] = []

                async def drain(stream: trio.abc.ReceiveStream, into: list[bytes]) -> None:
                    into.extend([bytes(chunk) async for chunk in stream])

                errors: list[bytes] = []
                nursery.start_soon(drain, process.stdout, rest)
                nursery.start_soon(drain, process.stderr, errors)
                returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    assert returncode == code, b"".join(errors).decode()
    events = [json.loads(line) for line in (buffer + b"".join(rest)).decode().splitlines()]
    finished = {e["name"]: e for e in events if e["event"] == "job.finished"}
    assert finished["escapes then waits"]["status"] == "cancelled"
    assert finished["queued"]["status"] == "cancelled"
    assert events[-1]["event"] == "run.finished"
    assert events[-1]["interrupted"] == signum.name
    assert events[-1]["leftovers"] == []
    assert runs_no_more(int(pidfile.read_text()))
    assert f"received {signum.name}" in b"".join(errors).decode()


def test_one_job_is_counted_in_the_singular(tmp_path: Path) -> None:
    """Newcomer report: "running 1 jobs"."""
    path = write(
        tmp_path / "lanes.toml",
        """\
        [[job]]
        project = "."
        kind = "command"
        argv = ["{python}", "-c", "pass"]
        """,
    )
    result = supervisor_run(path)
    assert result.returncode == 0, result.stderr
    assert f"running 1 job from {path} on lane: " in result.stderr
    assert "1 job, as expected (ok 1) in " in result.stderr
    assert " jobs" not in result.stderr


@pytest.mark.parametrize(
    ("params", "text"),
    [
        (
            {"status": "cancelled", "exitCode": 0, "signal": None, "durationMs": 40},
            "cancelled in 40 ms (cancel accepted; its process exited 0)",
        ),
        (
            {"status": "superseded", "exitCode": 0, "signal": None, "durationMs": 40},
            "superseded in 40 ms (cancel accepted; its process exited 0)",
        ),
        (
            {"status": "cancelled", "exitCode": None, "signal": 15, "durationMs": 40},
            "cancelled in 40 ms (SIGTERM)",
        ),
        (
            {"status": "cancelled", "exitCode": 3, "signal": None, "durationMs": 40},
            "cancelled in 40 ms (exit 3)",
        ),
        (
            {"status": "ok", "exitCode": 0, "signal": None, "durationMs": 40},
            "ok in 40 ms (exit 0)",
        ),
        (
            {
                "status": "failed",
                "exitCode": None,
                "signal": None,
                "durationMs": 1,
                "errorCode": "launch_failed",
                "error": "executable not found: /x",
            },
            "failed in 1 ms: executable not found: /x",
        ),
    ],
)
def test_outcome_text_never_contradicts_the_status(params: dict[str, Any], text: str) -> None:
    """Newcomer report: a job whose process exited 0 just as its cancel landed read
    "cancelled ... (exit 0)". The status stays cancelled (the cancel was accepted)."""
    from supervisor._cli._run import _describe_outcome

    assert _describe_outcome(params, started=True) == text
