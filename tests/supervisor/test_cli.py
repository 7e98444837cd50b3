"""``supervisor exec`` and ``supervisor reap`` as a user runs them: real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PY = sys.executable


def _supervisor(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "supervisor", *args], capture_output=True, text=True, timeout=timeout
    )


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


def test_exec_refuses_bad_input_with_a_code() -> None:
    done = _supervisor("exec", "--", "/no/such/program")
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "launch_failed"
    empty = _supervisor("exec", "--")
    assert empty.returncode == 2
    assert json.loads(empty.stdout)["error"]["code"] == "invalid_request"


def test_reap_reports_json() -> None:
    done = _supervisor("reap", "--json")
    assert done.returncode == 0
    assert isinstance(json.loads(done.stdout)["reaped"], list)


def test_serve_client_example_runs() -> None:
    """examples/serve_client.py drives a real `supervisor serve` session end to end."""
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "serve_client.py")
    done = subprocess.run(
        [PY, example], capture_output=True, text=True, timeout=120, cwd=os.path.dirname(example)
    )
    assert done.returncode == 0, done.stderr
    assert "<- job.finished" in done.stdout
    assert "error -32800" in done.stdout
    assert "supervisor serve exited with 0" in done.stdout
