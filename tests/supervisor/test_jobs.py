"""ProcessJobRunner: lanes jobs as real supervised process trees."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest
import trio

from lanes import Job, JobRequest, open_lanes
from protocol import CoreError
from supervisor._jobs import ProcessJobRunner

if TYPE_CHECKING:
    from protocol import JSONObject

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


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return True
    return data[data.rfind(b")") + 2 :][:1] in (b"Z", b"X")


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
    assert gone(read_pid(pidfile))


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
    assert gone(pid)
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
    assert "CoreError" in str(finished.get("error"))


async def test_launch_failure_raises_core_error_directly(tmp_path: os.PathLike[str]) -> None:
    job = Job("job-1", JobRequest(kind="command", root=str(tmp_path), argv=("/no/such/program",)))  # type: ignore[arg-type]
    with pytest.raises(CoreError) as info:
        await ProcessJobRunner()(job, lambda stream, text: None)
    assert info.value.code == "launch_failed"


def test_negative_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="drain_ms"):
        ProcessJobRunner(drain_ms=-1)
