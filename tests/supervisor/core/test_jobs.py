"""ProcessJobRunner: lanes jobs as real supervised process trees."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from typing import TYPE_CHECKING, Any, cast

import pytest
import trio

from lanes import Job, JobRequest, open_lanes
from protocol import CoreError
from supervisor import open_core
from supervisor._boundary import FaultPlan
from supervisor._core._jobs import ProcessJobRunner
from supervisor._flow import Watermarks
from supervisor._process._mux import _GROWN_PIPE_BYTES
from supervisor._session._events import EventQueue
from tests._faults import armed
from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject
    from supervisor import Core
    from supervisor._flow import FlowListener

PY = sys.executable


def request(code: str, *, root: str, timeout_ms: int | None = None, **kw: object) -> JobRequest:
    return JobRequest(
        kind="command",  # type: ignore[arg-type]
        root=root,
        argv=(PY, "-c", textwrap.dedent(code)),
        timeout_ms=timeout_ms,
        **kw,  # type: ignore[arg-type]
    )


class Recorder:
    def __init__(self, wake_on: str = "\0") -> None:
        self.events: list[tuple[str, JSONObject]] = []
        self.wake_on = wake_on
        #: Set once some output contains ``wake_on``.
        self.woken = trio.Event()

    def __call__(self, method: str, params: JSONObject) -> None:
        self.events.append((method, params))
        if method == "job.output" and self.wake_on in str(params["text"]):
            self.woken.set()

    def finished(self, job_id: str) -> JSONObject:
        (params,) = [p for m, p in self.events if m == "job.finished" and p["jobId"] == job_id]
        return params

    def output(self, job_id: str, stream: str) -> str:
        return "".join(
            str(p["text"])
            for m, p in self.events
            if m == "job.output" and p["jobId"] == job_id and p["stream"] == stream
        )


def read_pid(path: str) -> int:
    with open(path) as f:
        return int(f.read())


async def test_ok_job_reports_both_streams_and_exit_code(tmp_path: os.PathLike[str]) -> None:
    events = Recorder()
    async with open_lanes(ProcessJobRunner(), on_event=events) as lanes:
        job_id = lanes.start_job(
            request(
                """
                import os, sys
                print("out", os.getcwd())
                print("err", os.environ["GREETING"], file=sys.stderr)
                """,
                root=str(tmp_path),
                env={"GREETING": "hi"},
            )
        )
        await lanes.wait_idle()
    finished = events.finished(job_id)
    assert finished["status"] == "ok"
    assert finished["exitCode"] == 0
    assert finished["signal"] is None
    # cwd defaults to the project root.
    assert events.output(job_id, "stdout") == f"out {os.fspath(tmp_path)}\n"
    assert events.output(job_id, "stderr") == "err hi\n"


async def test_nonzero_exit_fails(tmp_path: os.PathLike[str]) -> None:
    events = Recorder()
    async with open_lanes(ProcessJobRunner(), on_event=events) as lanes:
        job_id = lanes.start_job(request("raise SystemExit(3)", root=str(tmp_path)))
        await lanes.wait_idle()
    assert events.finished(job_id)["status"] == "failed"
    assert events.finished(job_id)["exitCode"] == 3


async def test_utf8_character_split_across_writes_is_never_split(
    tmp_path: os.PathLike[str],
) -> None:
    """The child writes the two bytes of 'é' in separate writes, 50 ms apart."""
    job = Job(
        "job-1",
        request(
            """
            import sys, time
            out = sys.stdout.buffer
            out.write(b"caf\\xc3"); out.flush()
            time.sleep(0.05)
            out.write(b"\\xa9 \\xff!"); out.flush()
            """,
            root=str(tmp_path),
        ),
    )
    chunks: list[tuple[str, str]] = []
    await ProcessJobRunner()(job, lambda stream, text: chunks.append((stream, text)))
    assert job.exit_code == 0
    texts = [text for stream, text in chunks if stream == "stdout"]
    # Invalid bytes become U+FFFD, but the split character arrives whole.
    assert "".join(texts) == "café \ufffd!"
    assert all(text.count("\ufffd") <= 1 and "\xc3" not in text for text in texts)


async def test_deadline_ends_the_tree(
    tmp_path: os.PathLike[str], autojump_clock: trio.abc.Clock
) -> None:
    events = Recorder()
    async with open_lanes(ProcessJobRunner(), on_event=events) as lanes:
        job_id = lanes.start_job(
            request(
                "import time; print('up', flush=True); time.sleep(60)",
                root=str(tmp_path),
                timeout_ms=1000,
            )
        )
        await lanes.wait_idle()
    finished = events.finished(job_id)
    assert finished["status"] == "failed"
    assert finished["timedOut"] is True
    assert finished["exitCode"] is None
    assert finished["signal"] in (signal.SIGTERM, signal.SIGKILL)


async def test_cancel_running_job_kills_its_children(tmp_path: os.PathLike[str]) -> None:
    events = Recorder(wake_on="ready")
    pidfile = os.path.join(os.fspath(tmp_path), "child.pid")
    async with open_lanes(ProcessJobRunner(), on_event=events) as lanes:
        job_id = lanes.start_job(
            request(
                f"""
                import subprocess, sys, time
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                open({pidfile!r}, "w").write(str(child.pid))
                print("ready", flush=True)
                time.sleep(60)
                """,
                root=str(tmp_path),
            )
        )
        await events.woken.wait()
        assert lanes.cancel_job(job_id)
        await lanes.wait_idle()
    assert events.finished(job_id)["status"] == "cancelled"
    assert runs_no_more(read_pid(pidfile))


async def test_escaped_grandchild_holding_stdout_is_drained_and_killed(
    tmp_path: os.PathLike[str],
) -> None:
    """The main process exits 0 and leaves a grandchild in a new session that ignores
    SIGTERM and keeps stdout open: the job still ends, and the grandchild with it."""
    events = Recorder()
    runner = ProcessJobRunner(term_grace_ms=200, drain_ms=300)
    code = """
        import os, signal, subprocess, sys
        grandchild = subprocess.Popen(
            [sys.executable, "-c",
             "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
             "print('grandchild ready', flush=True); time.sleep(60)"],
            start_new_session=True,
        )
        print("grandchild", grandchild.pid, flush=True)
        """
    async with open_lanes(runner, on_event=events) as lanes:
        job_id = lanes.start_job(request(code, root=str(tmp_path)))
        await lanes.wait_idle()
    finished = events.finished(job_id)
    assert finished["status"] == "ok"
    assert finished["exitCode"] == 0
    out = events.output(job_id, "stdout")
    pid = int(out.split("grandchild ", 1)[1].split()[0])
    assert runs_no_more(pid)
    assert f"ended: {pid}" in events.output(job_id, "stderr")
    # Drain (300 ms) + grace (200 ms) + kill, not the grandchild's 60 s.
    assert isinstance(finished["durationMs"], int)
    assert finished["durationMs"] < 5000


async def test_runner_cancelled_directly_ends_tree_and_propagates(
    tmp_path: os.PathLike[str],
) -> None:
    job = Job(
        "job-1", request("import time; print('x', flush=True); time.sleep(60)", root=str(tmp_path))
    )
    seen = trio.Event()

    def emit(stream: str, text: str) -> None:
        seen.set()

    scope = trio.CancelScope()

    async def run() -> None:
        with scope:
            await ProcessJobRunner()(job, emit)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await seen.wait()
        scope.cancel()
    # Cancelled propagated out of the runner (only its own scope caught it).
    assert scope.cancelled_caught
    assert job.signal == signal.SIGTERM
    assert job.exit_code is None


async def test_launch_failure_fails_the_job_and_starts_nothing(tmp_path: os.PathLike[str]) -> None:
    events = Recorder()
    async with open_lanes(ProcessJobRunner(), on_event=events) as lanes:
        job_id = lanes.start_job(
            JobRequest(kind="command", root=str(tmp_path), argv=("/no/such/program",))  # type: ignore[arg-type]
        )
        await lanes.wait_idle()
    finished = events.finished(job_id)
    assert finished["status"] == "failed"
    assert finished["exitCode"] is None
    # A catalog code and a sentence, not a Python exception repr (newcomer report).
    assert finished["errorCode"] == "launch_failed"
    assert finished["error"] == "executable not found: /no/such/program"


async def test_launch_failure_raises_core_error_directly(tmp_path: os.PathLike[str]) -> None:
    job = Job("job-1", JobRequest(kind="command", root=str(tmp_path), argv=("/no/such/program",)))  # type: ignore[arg-type]
    with pytest.raises(CoreError) as info:
        await ProcessJobRunner()(job, lambda stream, text: None)
    assert info.value.code == "launch_failed"


def test_negative_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="drain_ms"):
        ProcessJobRunner(drain_ms=-1)


async def test_relative_cwd_of_a_python_request_is_resolved_against_the_root(
    tmp_path: os.PathLike[str],
) -> None:
    """Not against the supervisor's own directory (which is the repository here)."""
    os.mkdir(os.path.join(tmp_path, "d"))
    job = Job("job-1", request("import os; print(os.getcwd())", root=str(tmp_path), cwd="d"))
    chunks: list[str] = []
    await ProcessJobRunner()(job, lambda stream, text: chunks.append(text))
    assert job.exit_code == 0
    assert "".join(chunks) == os.path.join(os.fspath(tmp_path), "d") + "\n"


# --- job.start through the Core: refused up front, or admitted and run ---------------------


async def _execute(core: Core, command: str, payload: JSONObject) -> dict[str, Any]:
    return cast(
        "dict[str, Any]", await core.execute({"id": 1, "command": command, "payload": payload})
    )


async def _job_start(core: Core, payload: dict[str, Any]) -> dict[str, Any]:
    return await _execute(core, "job.start", {"kind": "build", **payload})


async def _events_until_finished(core: Core, job_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with trio.fail_after(30):
        while not any(e["event"] == "job.finished" and e["jobId"] == job_id for e in events):
            response = await _execute(core, "job.waitEvents", {"timeoutMilliseconds": 5000})
            events.extend(response["data"]["events"])
    return events


@pytest.mark.parametrize(
    ("payload", "field", "fragment"),
    [
        ({"root": "{tmp}/missing", "argv": ["true"]}, "root", "project root does not exist"),
        ({"root": "{tmp}/file", "argv": ["true"]}, "root", "project root is not a directory"),
        (
            {"root": "{tmp}", "argv": ["true"], "cwd": "/nonexistent"},
            "cwd",
            "working directory does not exist: /nonexistent",
        ),
        (
            {"root": "{tmp}", "argv": ["true"], "cwd": "nowhere"},
            "cwd",
            "working directory does not exist: {tmp}/nowhere (cwd is relative to the root)",
        ),
        (
            {"root": "{tmp}", "argv": ["true"], "cwd": "file"},
            "cwd",
            "working directory is not a directory: {tmp}/file",
        ),
        (
            {"root": "{tmp}", "argv": ["nonexistentcmd123"]},
            "argv",
            "executable not found on PATH: nonexistentcmd123",
        ),
        # The job's own PATH is searched, as at the spawn.
        (
            {"root": "{tmp}", "argv": ["true"], "env": {"PATH": "{tmp}"}},
            "argv",
            "executable not found on PATH: true",
        ),
        ({"root": "{tmp}", "argv": ["./nope.sh"]}, "argv", "executable not found: ./nope.sh"),
    ],
)
async def test_job_start_refuses_what_it_can_not_run(
    tmp_path: os.PathLike[str], payload: dict[str, Any], field: str, fragment: str
) -> None:
    """Newcomer report: job.start returned a job id, sent job.started, then job.finished
    failed with "CoreError: working directory does not exist". Like process.run, it now
    refuses such a request with launch_failed, and no job exists."""
    tmp = os.fspath(tmp_path)
    await trio.Path(tmp, "file").write_text("")
    wire = json.loads(json.dumps(payload).replace("{tmp}", tmp))
    async with open_core() as core:
        response = await _job_start(core, wire)
        assert response["ok"] is False, response
        error = response["error"]
        assert error["code"] == "launch_failed"
        assert error["message"].startswith("job.start: ")
        assert fragment.replace("{tmp}", tmp) in error["message"]
        assert error["details"]["field"] == field
        assert (await _execute(core, "job.pollEvents", {}))["data"]["events"] == []
        assert (await _execute(core, "job.list", {}))["data"] == []


async def test_job_start_resolves_a_relative_cwd_against_the_root(
    tmp_path: os.PathLike[str],
) -> None:
    """A relative cwd names a directory of the project (as in a lanes file), and a relative
    executable is found from that directory."""
    tmp = os.fspath(tmp_path)
    os.mkdir(os.path.join(tmp, "d"))
    script = os.path.join(tmp, "d", "where.sh")
    await trio.Path(script).write_text('#!/bin/sh\necho "$PWD"\n')
    await trio.Path(script).chmod(0o755)
    assert os.getcwd() != tmp
    async with open_core() as core:
        response = await _job_start(core, {"root": tmp, "cwd": "d", "argv": ["./where.sh"]})
        assert response["ok"] is True, response
        job_id = response["data"]["jobId"]
        events = await _events_until_finished(core, job_id)
    finished = events[-1]
    assert (finished["status"], finished["exitCode"]) == ("ok", 0)
    output = "".join(str(e["text"]) for e in events if e["event"] == "job.output")
    assert output == os.path.join(tmp, "d") + "\n"


async def test_a_launch_that_fails_after_admission_reports_a_catalog_code(
    tmp_path: os.PathLike[str],
) -> None:
    """The working directory exists when the job is admitted and is gone when its turn
    comes (the lane's running job removes it): job.finished carries errorCode."""
    tmp = os.fspath(tmp_path)
    os.mkdir(os.path.join(tmp, "sub"))
    go = os.path.join(tmp, "go")
    remover = textwrap.dedent(
        f"""
        import os, shutil, time
        while not os.path.exists({go!r}):
            time.sleep(0.01)
        shutil.rmtree("sub")
        """
    )
    async with open_core() as core:
        first = await _job_start(core, {"root": tmp, "argv": [PY, "-c", remover]})
        second = await _job_start(core, {"root": tmp, "cwd": "sub", "argv": [PY, "-c", "pass"]})
        assert first["ok"] is True, first
        assert second["ok"] is True, second
        await trio.Path(go).write_text("")
        events = await _events_until_finished(core, second["data"]["jobId"])
    (finished,) = [
        e for e in events if e["event"] == "job.finished" and e["jobId"] == second["data"]["jobId"]
    ]
    assert finished["status"] == "failed"
    assert finished["errorCode"] == "launch_failed"
    assert finished["error"] == f"working directory does not exist: {tmp}/sub"


@pytest.mark.parametrize("site", ["job.spawn", "job.output", "job.exit"])
async def test_a_failure_while_a_job_runs_ends_that_job_and_the_lane_goes_on(
    tmp_path: os.PathLike[str], site: str
) -> None:
    """An exception inside one job (a fault injected in the runner) finishes that job
    ``failed`` with ``errorCode: "internal"`` and the message; its processes (a background
    child too) are ended by the stop ladder; the next job of the lane runs; the Core answers."""
    tmp = os.fspath(tmp_path)
    pids = os.path.join(tmp, "pids")
    # The pid file is written before any output, so an output fault sees it; the main
    # process exits at once, leaving its child (the exit fault's case).
    script = f'sleep 60 & echo "$$ $!" > {pids}; echo hello'
    plan = FaultPlan(sites=(site,))
    async with open_core() as core:
        with armed(plan):
            first = await _job_start(core, {"root": tmp, "argv": ["sh", "-c", script]})
            second = await _job_start(core, {"root": tmp, "argv": ["sh", "-c", "echo next"]})
            events = await _events_until_finished(core, second["data"]["jobId"])
        assert plan.fired == [site]
        assert (await _execute(core, "core.ping", {}))["ok"] is True
    finished = {e["jobId"]: e for e in events if e["event"] == "job.finished"}
    failed = finished[first["data"]["jobId"]]
    assert (failed["status"], failed["errorCode"]) == ("failed", "internal")
    assert failed["error"] == f"InjectedFault: injected fault at {site}"
    ok = finished[second["data"]["jobId"]]
    assert (ok["status"], ok["exitCode"]) == ("ok", 0)
    pid_file = trio.Path(pids)
    if await pid_file.exists():  # a spawn fault may end the job before the script ran
        for pid in (await pid_file.read_text()).split():
            assert runs_no_more(int(pid))
    elif site != "job.spawn":
        raise AssertionError("the job's script did not run")


async def test_output_written_just_before_the_exit_is_in_the_job_output(
    tmp_path: os.PathLike[str],
) -> None:
    """A job that writes 300 000 bytes to stdout and a line to stderr and exits at once
    (``os._exit``, no clean-up) loses none of it: job.output has everything before
    job.finished."""
    events = Recorder()
    code = """
        import os
        os.write(1, b"x" * 300_000 + b"\\nlast stdout line\\n")
        os.write(2, b"last stderr line\\n")
        os._exit(0)
        """
    async with open_lanes(ProcessJobRunner(), on_event=events) as lanes:
        job_id = lanes.start_job(request(code, root=os.fspath(tmp_path)))
        await lanes.wait_idle()
    assert events.finished(job_id)["status"] == "ok"
    out = events.output(job_id, "stdout")
    assert out.count("x") == 300_000
    assert out.endswith("\nlast stdout line\n")
    assert events.output(job_id, "stderr") == "last stderr line\n"
    methods = [m for m, p in events.events if p["jobId"] == job_id]
    assert methods[-1] == "job.finished"


async def test_a_job_whose_output_is_not_taken_is_paused_not_killed(
    tmp_path: os.PathLike[str],
) -> None:
    """Issue 25: past the high watermark of events nobody took, the job's pipes are not
    read (the kernel holds its next write); taking them resumes it. Nothing is dropped, the
    job is never killed for it, and it ends ``ok`` with every byte delivered."""
    queue = EventQueue()
    marks = Watermarks(high_bytes=64 * 1024, low_bytes=16 * 1024)
    gates: list[FlowListener] = []
    paused = trio.Event()

    class Seen:
        """The runner's listener, and word of its first pause."""

        def __init__(self, gate: FlowListener) -> None:
            self.gate = gate

        def pause(self) -> None:
            self.gate.pause()
            paused.set()

        def resume(self) -> None:
            self.gate.resume()

    def watch(job_id: str, listener: FlowListener) -> Callable[[], None]:
        gates.append(listener)
        return queue.watch(job_id, Seen(listener), marks)

    size = 8 * 1024 * 1024  # more than is read past the pause plus a grown pipe
    code = f"import os\nfor _ in range({size // 4096}):\n    os.write(1, b'x' * 4096)\n"
    queue.poll()  # a consumer exists
    async with open_lanes(
        ProcessJobRunner(watch_output=watch),
        on_event=queue.put,
        max_output_bytes=size,
    ) as lanes:
        job_id = lanes.start_job(request(code, root=str(tmp_path)))
        with trio.fail_after(30):
            await paused.wait()
        await trio.sleep(1)  # nobody takes anything for a while: it stays paused
        (job,) = [j for j in lanes.list_jobs() if j["id"] == job_id]
        assert job["state"] == "running"
        queued = queue.statistics().queued_bytes
        # The high watermark plus the one read that crossed it (up to a grown pipe's size):
        # output at the event bound reaches the queue, and the pause, from the read itself.
        assert queued <= marks.high_bytes + _GROWN_PIPE_BYTES + 64 * 1024
        taken: list[JSONObject] = []
        with trio.fail_after(60):
            while not any(e["event"] == "job.finished" for e in taken):
                batch = await queue.wait(1000)
                taken += [e for e in batch["events"] if isinstance(e, dict)]  # type: ignore[union-attr]
    assert sum(getattr(g, "pauses", 0) for g in gates) >= 2
    text = "".join(str(e["text"]) for e in taken if e["event"] == "job.output")
    assert text == "x" * size
    assert not any("dropped" in e for e in taken)
    assert taken[-1]["status"] == "ok"
