"""``supervisor exec`` without an event loop (``_process/_direct.py``, issue 26.2): for every
run, the answer is the Core's ``process.run`` answer, byte for byte but the duration; what
needs the stop ladder is handed over to it; what the direct path does not check itself is
the Core's to answer, and nothing starts for it.

Real processes, in this process: ``_exec_direct`` is exec's direct path, ``_exec_main`` its
path through the Core (what ``exec`` ran before, and still runs when the direct one declines).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
import trio

import supervisor._process._direct
from protocol import MAX_MILLISECONDS, MAX_OUTPUT_BYTES
from supervisor._cli._main import _exec_direct, _exec_main
from supervisor._process import _oneshot
from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject

PY = sys.executable


@pytest.fixture
def handovers(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The runs the direct path handed over to Trio's stop ladder."""
    seen: list[object] = []
    finish = _oneshot.finish_direct

    async def spy(run: Any) -> Any:
        seen.append(run)
        return await finish(run)

    monkeypatch.setattr(_oneshot, "finish_direct", spy)
    return seen


def _both(payload: JSONObject) -> tuple[JSONObject, JSONObject]:
    """The direct path's answer and the Core's, durations taken out."""
    direct = _exec_direct(payload)
    assert direct is not None, "the direct path declined"
    core = trio.run(_exec_main, payload)
    answers = []
    for response, signum in (direct, core):
        assert signum is None
        data = response.get("data")
        if isinstance(data, dict):
            assert isinstance(data.pop("durationMs"), int)
        answers.append(response)
    return answers[0], answers[1]


#: Runs the direct path finishes by itself: (name, payload).
FINISHED = [
    ("exit code, both streams", {"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]}),
    ("killed by a signal", {"argv": ["sh", "-c", "kill -TERM $$"]}),
    ("text on stdin", {"argv": ["cat"], "stdin": "héllo\nwörld \u2603\n"}),
    ("empty stdin", {"argv": ["cat"], "stdin": ""}),
    ("env set", {"argv": ["sh", "-c", 'printf %s "$SV_T"'], "env": {"SV_T": "x y"}}),
    ("env removed", {"argv": ["sh", "-c", 'printf %s "${HOME-unset}"'], "env": {"HOME": None}}),
    ("cwd", {"argv": ["pwd"], "cwd": "/"}),
    ("output past the cap", {"argv": [PY, "-c", "print('x' * 5000)"], "maxOutputBytes": 100}),
    ("bytes that are not UTF-8", {"argv": ["printf", "a\\377\\376b"]}),
    ("no deadline", {"argv": ["true"], "timeoutMilliseconds": 0}),
    ("a flood", {"argv": [PY, "-c", "import os\nfor _ in range(512): os.write(1, b'y' * 8192)"]}),
]


@pytest.mark.parametrize(("name", "payload"), FINISHED, ids=[n for n, _ in FINISHED])
def test_the_direct_answer_is_the_cores(
    name: str, payload: JSONObject, handovers: list[object]
) -> None:
    direct, core = _both(payload)
    assert direct == core
    assert direct["ok"] is True
    assert handovers == []


def test_a_deadline_is_handed_over_and_ends_the_tree(handovers: list[object]) -> None:
    payload: JSONObject = {"argv": [PY, "-c", "import time; time.sleep(30)"]}
    payload["timeoutMilliseconds"] = 300
    direct, core = _both(payload)
    assert direct == core
    assert _data(direct)["timedOut"] is True
    assert _data(direct)["signal"] == 15
    assert len(handovers) == 1


def test_what_the_command_left_running_is_ended(tmp_path: Path, handovers: list[object]) -> None:
    """Left running in the background with its own output: the exit is the command's, the
    leftover ends by the stop ladder (handed over), nothing outlives exec."""
    pid_file = tmp_path / "bg.pid"
    script = f"sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {pid_file}; echo done"
    response = _exec_direct({"argv": ["sh", "-c", script]})
    assert response is not None
    data = _data(response[0])
    assert (data["exitCode"], data["stdout"], data["timedOut"]) == (0, "done\n", False)
    assert len(handovers) == 1
    assert runs_no_more(int(pid_file.read_text()))


def test_a_pipe_held_open_after_the_exit_is_drained_within_its_bound(
    tmp_path: Path, handovers: list[object]
) -> None:
    """A grandchild holding stdout: the answer comes after the drain bound, not its end."""
    pid_file = tmp_path / "bg.pid"
    script = f"sleep 60 & echo $! > {pid_file}; echo held"
    started = time.monotonic()
    direct, core = _both({"argv": ["sh", "-c", script]})
    assert time.monotonic() - started < 20  # generous: two runs, each bounded by the drain
    assert direct == core
    assert _data(direct)["stdout"] == "held\n"
    assert len(handovers) == 1
    assert runs_no_more(int(pid_file.read_text()))


@pytest.mark.parametrize(
    "payload",
    [
        {"argv": [""]},
        {"argv": ["/no/such/program"]},
        {"argv": ["/"]},
        {"argv": ["true"], "cwd": "/no/such/dir"},
        {"argv": ["tr\0ue"]},
        {"argv": ["true"], "env": {"A=B": "c"}},
        {"argv": ["true"], "maxOutputBytes": 0},
        {"argv": ["true"], "maxOutputBytes": MAX_OUTPUT_BYTES + 1},
        {"argv": ["true"], "timeoutMilliseconds": MAX_MILLISECONDS + 1},
        {"argv": ["true"], "timeoutMilliseconds": -1},
    ],
    ids=repr,
)
def test_what_the_direct_path_does_not_check_is_the_cores_to_answer(payload: JSONObject) -> None:
    before = _children()
    assert _exec_direct(payload) is None  # nothing started: exec asks the Core
    assert _children() <= before
    response, _ = trio.run(_exec_main, payload)
    assert response["ok"] is False
    error = response["error"]
    assert isinstance(error, dict)
    assert error["code"] in ("invalid_request", "launch_failed")


def _data(response: JSONObject) -> dict[str, Any]:
    data = response["data"]
    assert isinstance(data, dict)
    return data


def _children() -> set[int]:
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                found |= {int(pid) for pid in f.read().split()}
        except FileNotFoundError:  # a thread (a Trio worker) that ended after the listing
            continue
    return found


def test_the_answer_is_json_that_exec_prints(tmp_path: Path) -> None:
    """Through the console script: the direct path's answer, and its exit status."""
    import subprocess

    done = subprocess.run(
        [PY, "-m", "supervisor", "exec", "--", "sh", "-c", "echo hi; exit 4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4, done.stderr
    assert json.loads(done.stdout)["data"]["stdout"] == "hi\n"


#: ``exec --stream`` runs, by the status ``timeout`` gives: (argv, timeout in ms).
STREAMED = [
    (["sh", "-c", "exit 3"], None),
    (["sh", "-c", "kill -TERM $$"], None),
    (["sleep", "5"], 200),
    (["sh", "-c", "sleep 30 </dev/null >/dev/null 2>&1 & exit 0"], None),
    (["/no/such/program"], None),
    (["/"], None),
]


@pytest.mark.parametrize(("argv", "timeout_ms"), STREAMED, ids=repr)
def test_exec_stream_gives_the_same_status_either_way(
    argv: list[str], timeout_ms: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``exec --stream``: the direct path's status is the Trio path's, run for run."""
    from supervisor._cli._stream import exec_stream

    def run() -> int:
        return exec_stream(argv, timeout_ms=timeout_ms, cwd=None, env=None, stdin=False)

    direct = run()
    before = _children()
    monkeypatch.setattr(supervisor._process._direct, "direct_available", lambda: False)
    assert run() == direct
    assert _children() <= before
