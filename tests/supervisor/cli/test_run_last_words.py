"""``supervisor run``: a job's last words are in ``job.output``, in its ``--log-dir`` file
and in the summary, whatever ended it (issue 24).

Each job is tests/peers/last_words.py, which writes numbered lines to stdout and stderr from
its SIGTERM handler. One lane per way of ending a job: its deadline, ``cancel_after_ms``, a
job that supersedes it, and (a separate test) SIGTERM to ``supervisor run`` itself. Every job
is declared ``expect = "ok"``, so that each one is in the summary of jobs that did not end as
expected, with the end of its output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from pathlib import Path

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))
LAST_WORDS = os.path.join(REPO, "tests", "peers", "last_words.py")
#: Few enough that the summary's tail (20 lines) holds every one of them.
LINES = 4
#: How long each job runs before it is ended: long enough to be up on a loaded machine.
AFTER_MS = 3000
WAIT_S = 120


def _last_words() -> list[str]:
    out = [f"last out {i}/{LINES}" for i in range(1, LINES + 1)]
    err = [f"last err {i}/{LINES}" for i in range(1, LINES + 1)]
    return [*out, *err, "last words done"]


def _lanes_file(tmp_path: Path) -> str:
    for lane in ("deadline", "cancel", "supersede"):
        (tmp_path / lane).mkdir()
    argv = json.dumps(["{python}", LAST_WORDS, f"--lines={LINES}"])
    text = f"""\
        [[job]]
        name = "deadline"
        project = "deadline"
        kind = "command"
        argv = {argv}
        timeout_ms = {AFTER_MS}
        expect = "ok"

        [[job]]
        name = "cancelled"
        project = "cancel"
        kind = "command"
        argv = {argv}
        cancel_after_ms = {AFTER_MS}
        expect = "ok"

        [[job]]
        name = "superseded"
        project = "supersede"
        kind = "test"
        argv = {argv}
        expect = "ok"

        [[job]]
        name = "superseder"
        project = "supersede"
        kind = "test"
        argv = ["{{python}}", "-c", "pass"]
        supersede = true
        start_after_ms = {AFTER_MS}
        expect = "ok"
        """
    path = tmp_path / "lanes.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def _outputs(events: list[dict[str, Any]]) -> dict[str, str]:
    """Each job's output (both streams, as they came), from its ``job.output`` events, checked
    to come before its ``job.finished``."""
    text: dict[str, str] = {}
    finished: set[str] = set()
    for event in events:
        name = str(event.get("name"))
        if event["event"] == "job.output":
            assert name not in finished, f"output of {name} after its job.finished"
            text[name] = text.get(name, "") + event["text"]
        elif event["event"] == "job.finished":
            finished.add(name)
    return text


def _check(name: str, output: str, log: str, summary: str) -> None:
    for line in _last_words():
        assert output.count(line + "\n") == 1, (name, line, output)
        assert log.count(line + "\n") == 1, (name, line, log)
    # The summary shows the end of the job's output, its last words among it.
    block = summary.split(f"--- {name} (", 1)[1].split("\n---", 1)[0]
    for line in _last_words():
        assert f" {line}\n" in block + "\n", (name, line, block)


def test_deadline_cancel_and_supersede_keep_the_last_words(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    lanes = _lanes_file(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "run", lanes, "--json", "--log-dir", str(logs)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    events: list[dict[str, Any]] = [json.loads(line) for line in result.stdout.splitlines()]
    statuses = {e["name"]: e["status"] for e in events if e["event"] == "job.finished"}
    assert statuses == {
        "deadline": "failed",
        "cancelled": "cancelled",
        "superseded": "superseded",
        "superseder": "ok",
    }
    outputs = _outputs(events)
    files = {path.name: path.read_text() for path in logs.iterdir()}
    for index, name in enumerate(("deadline", "cancelled", "superseded"), start=1):
        _check(name, outputs[name], files[f"{index:02d}-{name}.log"], result.stderr)


async def test_sigterm_to_the_run_keeps_the_last_words(tmp_path: Path) -> None:
    (tmp_path / "lane").mkdir()
    path = tmp_path / "lanes.toml"
    argv = json.dumps(["{python}", LAST_WORDS, f"--lines={LINES}"])
    path.write_text(
        textwrap.dedent(
            f"""\
            [[job]]
            name = "interrupted"
            project = "lane"
            kind = "command"
            argv = {argv}
            """
        )
    )
    logs = tmp_path / "logs"
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "supervisor", "run", str(path), "--json", "--log-dir", str(logs)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    errors: list[bytes] = []
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        buffer = b""
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:

                async def drain_errors(stream: trio.abc.ReceiveStream) -> None:
                    errors.extend([bytes(chunk) async for chunk in stream])

                nursery.start_soon(drain_errors, process.stderr)
                # The job's own "ready" line (JSON-escaped newline at the end of a text).
                while b'ready\\n"' not in buffer:
                    data = await process.stdout.receive_some()
                    assert data, buffer
                    buffer += data
                process.send_signal(signal.SIGTERM)
                buffer += b"".join([bytes(chunk) async for chunk in process.stdout])
                returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    stderr = b"".join(errors).decode()
    assert returncode == 143, stderr
    events = [json.loads(line) for line in buffer.decode().splitlines()]
    (finished,) = [e for e in events if e["event"] == "job.finished"]
    assert finished["status"] == "cancelled"
    assert events[-1]["event"] == "run.finished"
    _check(
        "interrupted",
        _outputs(events)["interrupted"],
        (logs / "01-interrupted.log").read_text(),
        stderr,
    )
