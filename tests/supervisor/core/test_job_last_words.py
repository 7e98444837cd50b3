"""A job's last words reach ``job.output`` on every path that ends it (issue 24).

The job (tests/peers/last_words.py) writes a run of numbered lines to stdout and stderr from
its SIGTERM handler, then exits. Whatever ends the job -- a cancel, its deadline, a job that
supersedes it, the lanes or the Core closing, or its own exit -- every one of those lines is
in ``job.output``, in order, before ``job.finished``. The runner used to stop reading its
pipes before it sent SIGTERM, so they were lost on every path but the natural exit.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from lanes import JobRequest, open_lanes
from supervisor import open_core
from supervisor._core._jobs import ProcessJobRunner
from supervisor._process import _oneshot

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

PY = sys.executable
PEER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "peers")
LAST_WORDS = os.path.join(PEER, "last_words.py")
LINES = 200
#: Generous: the machine is shared; a hang guard, never a timing assertion.
WAIT_S = 60
#: The deadline of the deadline path: the job must be up (its handler installed) before it.
DEADLINE_MS = 4000


def _request(root: str, *, kind: str = "command", **kw: object) -> JobRequest:
    return JobRequest(
        kind=kind,  # type: ignore[arg-type]
        root=root,
        argv=(PY, LAST_WORDS, f"--lines={LINES}"),
        **kw,  # type: ignore[arg-type]
    )


def _check_last_words(events: list[tuple[str, JSONObject]], job_id: str) -> JSONObject:
    """Every last line, in order, on both streams, all of it before ``job.finished``."""
    mine = [(method, params) for method, params in events if params.get("jobId") == job_id]
    methods = [method for method, _ in mine]
    assert methods.count("job.finished") == 1
    assert methods[-1] == "job.finished", methods[-5:]
    text = {"stdout": "", "stderr": ""}
    for method, params in mine:
        if method == "job.output":
            text[str(params["stream"])] += str(params["text"])
    expected_out = "".join(f"last out {i}/{LINES}\n" for i in range(1, LINES + 1))
    expected_err = "".join(f"last err {i}/{LINES}\n" for i in range(1, LINES + 1))
    assert text["stdout"] == "ready\n" + expected_out + "last words done\n", text["stdout"][-300:]
    assert text["stderr"] == expected_err, text["stderr"][-300:]
    return mine[-1][1]


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, JSONObject]] = []
        self.ready: dict[str, trio.Event] = {}

    def __call__(self, method: str, params: JSONObject) -> None:
        self.events.append((method, params))
        if method == "job.output" and "ready" in str(params["text"]):
            self.ready.setdefault(str(params["jobId"]), trio.Event()).set()

    async def wait_ready(self, job_id: str) -> None:
        with trio.fail_after(WAIT_S):
            await self.ready.setdefault(job_id, trio.Event()).wait()


@pytest.fixture(params=["multiplexer", "tasks"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a runner reads a job: one task over epoll, or a task per pipe (where epoll
    or pidfds are missing; forced here by hiding epoll)."""
    if request.param == "tasks":
        monkeypatch.setattr(_oneshot, "_HAVE_EPOLL", False)
    return str(request.param)


@pytest.mark.parametrize("path", ["cancel", "deadline", "supersede", "lanes closing"])
async def test_sigterm_handler_lines_reach_job_output(
    tmp_path: str, path: str, reading: str
) -> None:
    recorder = _Recorder()
    root = os.fspath(tmp_path)
    async with open_lanes(ProcessJobRunner(), on_event=recorder) as lanes:
        if path == "deadline":
            job_id = lanes.start_job(_request(root, timeout_ms=DEADLINE_MS))
        elif path == "supersede":
            job_id = lanes.start_job(_request(root, kind="test"))
        else:
            job_id = lanes.start_job(_request(root))
        await recorder.wait_ready(job_id)
        if path == "cancel":
            assert lanes.cancel_job(job_id)
        elif path == "supersede":
            lanes.start_job(
                JobRequest(
                    kind="test",  # type: ignore[arg-type]
                    root=root,
                    argv=(PY, "-c", "pass"),
                    supersede=True,
                )
            )
        if path != "lanes closing":
            with trio.fail_after(WAIT_S):
                await lanes.wait_idle()
    finished = _check_last_words(recorder.events, job_id)
    expected_status = {
        "cancel": "cancelled",
        "deadline": "failed",
        "supersede": "superseded",
        "lanes closing": "cancelled",
    }[path]
    assert finished["status"] == expected_status
    # The handler exits 0: the job's own status says so, the signal is not the end.
    assert finished["exitCode"] == 0
    assert finished["timedOut"] is (path == "deadline")


async def test_natural_exit_keeps_every_last_line(tmp_path: str, reading: str) -> None:
    recorder = _Recorder()
    request = JobRequest(
        kind="command",  # type: ignore[arg-type]
        root=os.fspath(tmp_path),
        argv=(PY, LAST_WORDS, f"--lines={LINES}", "--exit-after=0"),
    )
    async with open_lanes(ProcessJobRunner(), on_event=recorder) as lanes:
        job_id = lanes.start_job(request)
        with trio.fail_after(WAIT_S):
            await lanes.wait_idle()
    finished = _check_last_words(recorder.events, job_id)
    assert finished["status"] == "ok"


async def test_core_close_keeps_a_running_jobs_last_words(tmp_path: str) -> None:
    """The Core (serve's shutdown, a host closing) cancels the job; its last words are in the
    Core's job events, before its ``job.finished``."""
    async with open_core() as core:
        started = await core.call(
            "job.start",
            {
                "kind": "command",
                "root": os.fspath(tmp_path),
                "argv": [PY, LAST_WORDS, f"--lines={LINES}"],
            },
        )
        assert isinstance(started, dict)
        job_id = str(started["jobId"])
        events: list[tuple[str, JSONObject]] = []
        with trio.fail_after(WAIT_S):
            while not any(
                method == "job.output" and "ready" in str(params["text"])
                for method, params in events
            ):
                batch = await core.call("job.waitEvents", {"timeoutMilliseconds": 5000})
                assert isinstance(batch, dict)
                events.extend(_as_events(batch["events"]))
        job_events = core.job_events
    events.extend(_as_events(job_events.poll()["events"]))
    finished = _check_last_words(events, job_id)
    assert finished["status"] == "cancelled"


def _as_events(value: JSONValue) -> list[tuple[str, JSONObject]]:
    assert isinstance(value, list)
    out: list[tuple[str, JSONObject]] = []
    for event in value:
        assert isinstance(event, dict)
        out.append((str(event["event"]), event))
    return out
