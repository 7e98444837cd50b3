"""``supervisor check`` under a newcomer's hostile use (issue 18 follow-up): interrupted,
fed JSON it can't send, asked for help after the protocol, pointed at programs that are no
server at all. Every case runs the real CLI or the real battery on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._procfs import runs_no_more

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

PYLSP = str(Path(sys.executable).with_name("pylsp"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "check", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _wait_for(predicate: object, timeout_s: float) -> bool:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())


@pytest.mark.parametrize(
    ("server", "signum"),
    [
        # A real server mid-battery, and one that never answers initialize (the check waits).
        ([PYLSP], signal.SIGINT),
        (["sleep", "60"], signal.SIGINT),
        (["sleep", "60"], signal.SIGTERM),
    ],
    ids=["pylsp-SIGINT", "silent-SIGINT", "silent-SIGTERM"],
)
def test_an_interrupt_ends_every_program_quietly_with_128_plus_the_signal(
    tmp_path: Path, server: list[str], signum: signal.Signals
) -> None:
    pids = tmp_path / "pids"
    # Each instance the battery starts writes its pid first, then becomes the server.
    wrapped = ["sh", "-c", f'echo $$ >> "{pids}"; exec "$@"', "sh", *server]
    check = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "check", "lsp", "--", *wrapped],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_for(lambda: pids.exists() and pids.read_text().strip(), 60)
        time.sleep(0.3)  # into the battery's wait for an answer
        check.send_signal(signum)
        out, err = check.communicate(timeout=30)
    finally:
        if check.poll() is None:
            check.kill()
            check.wait()
    assert check.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert "Error" not in err
    assert err.strip() == (
        f"supervisor check: interrupted by {signum.name}; every program under check was ended"
    )
    assert out == ""
    started = [int(line) for line in pids.read_text().split()]
    assert started
    assert all(runs_no_more(pid) for pid in started), started


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        ('{"program": "t.py", "x": "\\ud800"}', "--launch.x must be valid Unicode text"),
        ('{"a": [1, {"b": "\\udfff"}]}', "--launch.a[1].b must be valid Unicode text"),
        ('{"a": 1e400}', "--launch.a must be a finite number"),
        ('{"a": -1e999}', "--launch.a must be a finite number"),
        ('{"a": NaN}', "--launch is not JSON: NaN is not valid JSON"),
        ('{"a": Infinity}', "--launch is not JSON: Infinity is not valid JSON"),
        ("[" * 600 + "]" * 600, "--launch is not JSON"),
        ('{"a": ' * 600 + "1" + "}" * 600, "nests deeper than 512 levels"),
        ("[]", "--launch must be a JSON object"),
    ],
    ids=[
        "lone-surrogate",
        "nested-surrogate",
        "1e400",
        "-1e999",
        "NaN",
        "Infinity",
        "deep-array",
        "deep-object",
        "not-object",
    ],
)
def test_launch_json_follows_the_shared_rules(launch: str, message: str) -> None:
    done = _cli("dap", "--launch", launch, "--", "/nonexistent/adapter")
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


async def test_the_battery_refuses_a_launch_json_cannot_carry() -> None:
    from supervisor._check._dap import check_debug_adapter

    with pytest.raises(ValueError, match=r"launch\.x must be a finite number"):
        await check_debug_adapter(["/nonexistent/adapter"], launch={"x": float("inf")})


@pytest.mark.parametrize("scale", ["inf", "nan", "-1", "1e9"])
def test_time_scale_must_be_finite_and_bounded(scale: str) -> None:
    done = _cli("lsp", "--time-scale", scale, "--", "/nonexistent/server")
    assert done.returncode == 2
    assert "--time-scale must be a number above 0 and at most 1000" in done.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("protocol", ["lsp", "dap"])
def test_help_after_the_protocol_is_help(protocol: str, flag: str) -> None:
    done = _cli(protocol, flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: supervisor check {protocol} [OPTIONS] -- CMD")
    assert "--launch JSON" in done.stdout
    assert "exit status:" in done.stdout
    assert done.stderr == ""


def test_options_without_the_separator_still_reach_the_program() -> None:
    # Without "--" the first non-option word is the program; what follows is its own.
    done = _cli("lsp", "--only", "initialize", "/nonexistent/server", "--help")
    assert done.returncode == 2
    assert "cannot start '/nonexistent/server'" in done.stderr


# -- programs that are no server: the evidence says what really happened ----------------------

#: Answers the first request with ``{"id": 1, "result": RESULT}`` (RESULT from argv), then
#: sleeps: a server whose initialize result is the wrong JSON type.
ANSWER_WITH = """
import json, sys, time
head = b""
while not head.endswith(b"\\r\\n\\r\\n"):
    head += sys.stdin.buffer.read(1)
size = int(head.split(b":")[1].split(b"\\r")[0])
sys.stdin.buffer.read(size)
body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": json.loads(sys.argv[1])}).encode()
sys.stdout.buffer.write(b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
sys.stdout.flush()
time.sleep(60)
"""
JUNK_FRAME = (
    "import sys, time\n"
    "sys.stdout.write('Content-Length: 5\\r\\n\\r\\nhello')\n"
    "sys.stdout.flush()\n"
    "time.sleep(60)\n"
)


def _evidence(report: object, check: str) -> str:
    from supervisor._check._report import ConformanceReport

    assert isinstance(report, ConformanceReport)
    return next(r.evidence for r in report.results if r.check == check)


async def test_a_program_writing_no_frames_is_not_said_to_have_closed_its_stdout() -> None:
    from supervisor._check._common import Bounds
    from supervisor._check._lsp import check_language_server
    from supervisor._check._report import Outcome

    report = await check_language_server(
        ["yes"], bounds=Bounds(initialize=3.0), only=["initialize"]
    )
    evidence = _evidence(report, "initialize")
    assert report.outcome_of("initialize") is Outcome.FAIL
    assert evidence.startswith("wrote bytes that are not a Content-Length frame"), evidence
    assert "its stdout began 'y\\ny\\ny\\n" in evidence
    assert evidence.endswith("(still running)")
    assert "closed its stdout" not in evidence
    # The stray text is where its stdout began, quoted once: not again as the first stray text.
    frames = _evidence(report, "stdout-frames")
    assert "its stdout began 'y\\ny\\ny\\n" in frames
    assert "first:" not in frames
    assert "the stray text began" not in frames


async def test_a_frame_that_is_not_json_is_quoted() -> None:
    from supervisor._check._common import Bounds
    from supervisor._check._lsp import check_language_server

    report = await check_language_server(
        [sys.executable, "-c", JUNK_FRAME], bounds=Bounds(initialize=1.0), only=["initialize"]
    )
    evidence = _evidence(report, "initialize")
    assert evidence == "no answer in 1000 ms; it wrote a frame whose body is not JSON: 'hello'"
    assert "a frame body that is not JSON" not in _evidence(report, "stdout-frames")
    assert "it wrote a frame whose body is not JSON: 'hello'" in _evidence(report, "stdout-frames")


@pytest.mark.parametrize("program", ["true", "false"])
async def test_a_program_that_exits_at_once_has_its_leftovers_judged(program: str) -> None:
    from supervisor._check._lsp import check_language_server
    from supervisor._check._report import Outcome

    report = await check_language_server([program], only=["no-leftovers"])
    status = 0 if program == "true" else 1
    assert _evidence(report, "initialize") == f"exited {status} without answering"
    assert report.outcome_of("no-leftovers") is Outcome.PASS, report.table()
    assert "never exited on its own" not in _evidence(report, "no-leftovers")


@pytest.mark.parametrize("protocol", ["lsp", "dap"])
async def test_an_echo_of_our_own_messages_is_reported_as_an_echo(protocol: str) -> None:
    from supervisor._check._common import Bounds
    from supervisor._check._dap import check_debug_adapter
    from supervisor._check._lsp import check_language_server
    from supervisor._check._report import Outcome

    bounds = Bounds(initialize=2.0)
    check = check_language_server if protocol == "lsp" else check_debug_adapter
    report = await check(["cat"], bounds=bounds, only=["initialize"])
    assert report.outcome_of("initialize") is Outcome.FAIL
    assert _evidence(report, "initialize").startswith(
        "echoed our request back instead of answering"
    ), report.table()


@pytest.mark.parametrize(
    ("result", "evidence"),
    [
        ("null", "answered with null, not an InitializeResult object"),
        ("5", "answered with a number (5), not an InitializeResult object"),
        ('"x"', 'answered with a string ("x"), not an InitializeResult object'),
        ("[" + ",".join(["1"] * 200) + "]", "answered with an array ([1,1,1,"),
    ],
    ids=["null", "number", "string", "long-array"],
)
async def test_a_result_of_the_wrong_type_is_named(result: str, evidence: str) -> None:
    from supervisor._check._common import Bounds
    from supervisor._check._lsp import check_language_server

    report = await check_language_server(
        [sys.executable, "-c", ANSWER_WITH, result],
        bounds=Bounds(initialize=5.0),
        only=["initialize"],
    )
    found = _evidence(report, "initialize")
    assert found.startswith(evidence), found
    assert len(found) < 200


async def test_the_vanishing_client_does_not_take_an_echo_for_an_answer() -> None:
    from supervisor._check._common import Bounds
    from supervisor._check._lsp import check_language_server
    from supervisor._check._report import Outcome

    report = await check_language_server(
        ["cat"], bounds=Bounds(initialize=1.0), only=["client-vanishes"]
    )
    assert report.outcome_of("client-vanishes") is Outcome.SKIP, report.table()
    assert _evidence(report, "client-vanishes") == "initialize failed under the helper"
