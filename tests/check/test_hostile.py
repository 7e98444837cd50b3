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
