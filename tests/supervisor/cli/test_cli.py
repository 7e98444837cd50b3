"""``supervisor exec`` and ``supervisor reap`` as a user runs them: real subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from pathlib import Path

PY = sys.executable
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))
ESCAPE = os.path.join(REPO, "examples", "scripts", "escape.py")


def _supervisor(
    *args: str, timeout: float = 60, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "supervisor", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def _wait_for_file(path: Path, process: subprocess.Popen[str]) -> str:
    """Poll until ``path`` exists (bounded: 30 s, or the process ending)."""
    deadline = time.monotonic() + 30
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text()


def test_exec_prints_the_result_and_returns_the_exit_code() -> None:
    done = _supervisor("exec", "--", PY, "-c", "import sys; print('hello'); sys.exit(7)")
    assert done.returncode == 7
    response = json.loads(done.stdout)
    assert response["ok"] is True
    assert response["data"]["stdout"] == "hello\n"
    assert response["data"]["exitCode"] == 7


def test_exec_timeout_and_output_cap() -> None:
    script = "import time; print('x' * 100, flush=True); time.sleep(30)"
    done = _supervisor(
        "exec", "--timeout-ms", "1000", "--max-output-bytes", "10", "--", PY, "-c", script
    )
    assert done.returncode == 124
    data = json.loads(done.stdout)["data"]
    assert data["timedOut"] is True
    assert data["truncated"] is True
    assert data["stdout"] == "x" * 10


def test_exec_of_a_flood_keeps_the_start_of_each_stream_as_asked() -> None:
    """A script bounds the answer with --max-output-bytes (the default, 16 MiB per stream,
    is process.run's, from the reference): the start is kept, NULs escaped, truncated."""
    done = _supervisor(
        "exec", "--max-output-bytes", "1048576", "--", "head", "-c", "3000000", "/dev/zero"
    )
    assert done.returncode == 0
    data = json.loads(done.stdout)["data"]
    assert data["truncated"] is True
    assert data["stdout"] == "\0" * 1048576
    # Six characters a NUL on the wire, and nothing of the dropped 1.9 MB.
    assert len(done.stdout) < 6 * 1048576 + 4096


def test_exec_refuses_bad_input_with_a_code() -> None:
    # A missing program is 127, as `env` and `timeout` say it (issue 29).
    done = _supervisor("exec", "--", "/no/such/program")
    assert done.returncode == 127
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "launch_failed"
    assert error["details"] == {"executable": "/no/such/program", "reason": "notFound"}
    directory = _supervisor("exec", "--", "/")
    assert directory.returncode == 126
    assert json.loads(directory.stdout)["error"]["details"]["reason"] == "notExecutable"
    no_cwd = _supervisor("exec", "--cwd", "/no/such/dir", "--", "/bin/true")
    assert no_cwd.returncode == 2
    empty = _supervisor("exec", "--")
    assert empty.returncode == 2
    assert json.loads(empty.stdout)["error"]["code"] == "invalid_request"


def test_exec_refuses_values_past_their_bounds() -> None:
    """A timeout or output cap past its documented maximum is refused, never a traceback."""
    for option, value in (("--timeout-ms", "1" + "0" * 30), ("--max-output-bytes", "1" + "0" * 12)):
        done = _supervisor("exec", option, value, "--", "/bin/true")
        assert done.returncode == 2
        assert "Traceback" not in done.stderr
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "invalid_request"


def test_exec_refuses_a_bad_env_or_stdin_with_its_json_envelope(tmp_path: Path) -> None:
    """Every refusal of ``exec`` (without --stream) is the JSON envelope a script parses,
    not only those the Core makes: ``--env NAME`` without ``=`` and stdin that is not UTF-8
    text are ``invalid_request`` with the field, exit 2, and nothing runs."""
    marker = tmp_path / "ran"
    touch = ("--", PY, "-c", f"open({str(marker)!r}, 'w')")
    done = _supervisor("exec", "--env", "FOO", *touch)
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error == {
        "code": "invalid_request",
        "message": "exec: --env 'FOO': expected NAME=VALUE",
        "details": {"field": "env.FOO"},
    }
    # An empty name has its '=': the Core's own check refuses it, as for every client.
    empty_name = _supervisor("exec", "--env", "=x", *touch)
    assert empty_name.returncode == 2
    assert json.loads(empty_name.stdout)["error"]["details"] == {"field": "env."}
    binary = subprocess.run(
        [PY, "-m", "supervisor", "exec", *touch],
        input=b"\xff\xfe",
        capture_output=True,
        timeout=60,
    )
    assert binary.returncode == 2
    error = json.loads(binary.stdout)["error"]
    assert (error["code"], error["details"]) == ("invalid_request", {"field": "stdin"})
    assert "UTF-8" in error["message"]
    assert not marker.exists()


def test_exec_negative_timeout_says_0_is_allowed() -> None:
    done = _supervisor("exec", "--timeout-ms", "-1", "--", "/bin/true")
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["message"] == "process.run: timeoutMilliseconds must be 0 or more"


def test_closed_stdout_is_an_error_and_nothing_runs(tmp_path: Path) -> None:
    """`exec ... >&-` ran the command and printed nothing; now: a message, 120, nothing run."""
    marker = tmp_path / "ran"
    for args in (
        ["exec", "--", PY, "-c", f"open({str(marker)!r}, 'w')"],
        ["run", "--json", str(_lanes_file(tmp_path, marker))],
    ):
        done = subprocess.run(
            ["bash", "-c", 'exec "$@" >&-', "bash", PY, "-m", "supervisor", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 120, done.stderr
        assert done.stderr == (
            f"supervisor {args[0]}: stdout is closed: nowhere to write the result;"
            " nothing was started\n"
        )
        assert not marker.exists()


def test_a_closed_stderr_or_stdin_is_given_dev_null() -> None:
    """Started with stderr (or stdin) closed, the command line opens /dev/null on it: no file
    of ours takes the number, and ``sys.stderr`` exists for the libraries that need it (Ray's
    ``init`` refused ``--ray`` with "sys.stderr is None", exit 2). Stdout stays as it was."""
    code = (
        "import os, sys\n"
        "from supervisor._cli._main import main\n"
        "status = main(['exec', '--no-stdin', '--', '/bin/true'])\n"
        "print(status, sys.stdin is not None, sys.stderr is not None,"
        " os.readlink('/proc/self/fd/0'), os.readlink('/proc/self/fd/2'))\n"
    )
    done = subprocess.run(
        ["bash", "-c", 'exec "$@" 2>&- <&-', "bash", PY, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[-1] == "0 True True /dev/null /dev/null"


def _lanes_file(tmp_path: Path, marker: Path) -> Path:
    path = tmp_path / "lanes.toml"
    code = f"open({str(marker)!r}, 'w')"
    argv = json.dumps([PY, "-c", code])
    path.write_text(f'[[job]]\nproject = "."\nkind = "command"\nargv = {argv}\n')
    return path


def test_exec_result_to_a_full_disk_exits_120() -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [PY, "-m", "supervisor", "exec", "--", "/bin/true"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 120
    assert done.stderr == "supervisor exec: cannot write the result: No space left on device\n"


def test_run_without_a_file_names_only_the_file_as_required() -> None:
    done = _supervisor("run")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "supervisor run: error: the following arguments are required: file"
    )


def test_reap_reports_json() -> None:
    done = _supervisor("reap", "--json")
    assert done.returncode == 0
    assert isinstance(json.loads(done.stdout)["reaped"], list)


def test_serve_client_example_runs() -> None:
    """examples/serve_client.py drives a real `supervisor serve` session end to end."""
    example = os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "examples", "serve_client.py"
    )
    done = subprocess.run(
        [PY, example], capture_output=True, text=True, timeout=120, cwd=os.path.dirname(example)
    )
    assert done.returncode == 0, done.stderr
    assert "<- job.finished" in done.stdout
    assert "error -32800" in done.stdout
    assert "supervisor serve exited with 0" in done.stdout


def test_exec_relative_executable_with_relative_cwd(tmp_path: Path) -> None:
    """Newcomer report: `supervisor exec --cwd examples -- ./rel.sh` failed with
    launch_failed (the relative cwd was applied twice); subprocess would run it."""
    (tmp_path / "examples").mkdir()
    script = tmp_path / "examples" / "rel.sh"
    script.write_text('#!/bin/sh\necho "$PWD"\n')
    script.chmod(0o755)
    done = _supervisor("exec", "--cwd", "examples", "--", "./rel.sh", cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["data"]["stdout"] == f"{tmp_path / 'examples'}\n"


@pytest.mark.parametrize(
    ("signum", "code", "sigint_ignored"),
    [(signal.SIGINT, 130, False), (signal.SIGINT, 130, True), (signal.SIGTERM, 143, False)],
)
def test_exec_interrupted_cancels_the_command_and_exits_128_plus_n(
    tmp_path: Path, signum: signal.Signals, code: int, sigint_ignored: bool
) -> None:
    """Newcomer report: Ctrl-C printed a KeyboardInterrupt traceback and exited 1, and an
    exec started with `&` by a script (SIGINT inherited as ignored) ignored SIGINT. Now
    the command is cancelled, every process of it ends (a grandchild that left the session
    and ignores SIGTERM too), the cancelled response is printed, and the exit is 128+N."""
    grandchild_file = tmp_path / "grandchild.pid"
    ready = tmp_path / "ready"
    script = (
        "import os, subprocess, sys, time\n"
        f"subprocess.run([sys.executable, {ESCAPE!r}, {str(grandchild_file)!r}], check=True)\n"
        f"open({str(ready) + '.partial'!r}, 'w').write(str(os.getpid()))\n"
        f"os.replace({str(ready) + '.partial'!r}, {str(ready)!r})\n"
        "time.sleep(60)\n"
    )
    argv = [PY, "-m", "supervisor", "exec", "--", PY, "-c", script]
    if sigint_ignored:
        # What a non-interactive shell does to a command it starts with `&`.
        argv = ["/bin/sh", "-c", 'trap "" INT; exec "$0" "$@"', *argv]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        main_pid = int(_wait_for_file(ready, process))
        grandchild = int(grandchild_file.read_text())
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr
    assert f"{signum.name}: the command was cancelled" in stderr
    assert json.loads(stdout)["error"]["code"] == "cancelled"
    assert runs_no_more(main_pid)
    assert runs_no_more(grandchild)


# --- exec --stream: a tool for scripts, with timeout(1)'s statuses (issue 29) --------------


def _stream(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "supervisor", "exec", "--stream", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        check=False,
    )


def test_exec_stream_passes_output_through_and_exits_with_the_commands_status() -> None:
    script = (
        "import sys; print(sys.stdin.read().upper()); print('err', file=sys.stderr); sys.exit(7)"
    )
    done = _stream("--", PY, "-c", script, stdin="piped")
    assert (done.returncode, done.stdout, done.stderr) == (7, "PIPED\n", "err\n")
    killed = _stream("--", PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert killed.returncode == 128 + signal.SIGKILL
    assert (
        _stream(
            "--no-stdin", "--", PY, "-c", "import sys; sys.exit(len(sys.stdin.read()))"
        ).returncode
        == 0
    )


@pytest.mark.parametrize(
    ("args", "status", "said"),
    [
        (("--timeout-ms", "300", "--", PY, "-c", "import time; time.sleep(30)"), 124, "deadline"),
        (("--", "/no/such/program"), 127, "executable not found: /no/such/program"),
        (("--", "no-such-program-on-path"), 127, "executable not found on PATH"),
        (("--", "/"), 126, "executable is a directory"),
        (("--cwd", "/no/such/dir", "--", "/bin/true"), 125, "working directory does not exist"),
        (("--env", "NOEQUALS", "--", "/bin/true"), 125, "expected NAME=VALUE"),
        (("--max-output-bytes", "10", "--", "/bin/true"), 125, "--stream keeps no output"),
        (("--",), 125, "no command"),
    ],
)
def test_exec_stream_statuses_are_those_of_timeout(
    args: tuple[str, ...], status: int, said: str
) -> None:
    done = _stream(*args)
    assert done.returncode == status, done.stderr
    assert said in done.stderr
    assert done.stdout == ""


def test_coreutils_timeout_and_env_give_the_same_statuses() -> None:
    """The statuses `exec --stream` copies, checked against the tools themselves."""
    for tool in ("timeout", "env"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    assert subprocess.run(["timeout", "0.2", "sleep", "5"], check=False).returncode == 124
    assert (
        subprocess.run(
            ["env", "no-such-program-on-path"], check=False, capture_output=True
        ).returncode
        == 127
    )
    assert subprocess.run(["env", "/"], check=False, capture_output=True).returncode == 126


def test_exec_stream_ends_what_the_command_left_running(tmp_path: Path) -> None:
    """The tree cleanup stays: a daemon the command started in its own session is gone."""
    pid_file = tmp_path / "pid"
    script = (
        "import subprocess, sys; p = subprocess.Popen(['sleep', '300'], start_new_session=True);"
        f" open({str(pid_file)!r}, 'w').write(str(p.pid)); print('started')"
    )
    done = _stream("--", PY, "-c", script)
    assert (done.returncode, done.stdout) == (0, "started\n")
    assert runs_no_more(int(pid_file.read_text()))


def test_exec_stream_sigterm_ends_the_tree_first(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    )
    process = subprocess.Popen(
        [PY, "-m", "supervisor", "exec", "--stream", "--", PY, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    child = int(_wait_for_file(pid_file, process) or "0")
    process.send_signal(signal.SIGTERM)
    _stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert "SIGTERM: the command was ended" in stderr
    assert runs_no_more(child)
