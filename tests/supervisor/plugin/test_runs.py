"""The run table on real process trees (plugin-contract.md "Run and debug sessions").

A run's temporary files exist while it runs and are gone after; its output arrives as
events; its end is reported once (``exitCode`` or ``signal``); a stop ends the whole tree and
answers also for a run that already ended; closing the table ends every run.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor._plugin._run_state import RunStart
from supervisor._plugin._runs import RunTable
from supervisor._plugin._state import HostRefusal
from tests._procfs import runs_no_more

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject
    from supervisor._plugin._runs import Run


class Recorder:
    def __init__(self) -> None:
        self.exited: list[tuple[str, JSONObject | None]] = []
        self.seen: dict[str, list[JSONObject]] = {}

    async def on_exit(self, run: Run) -> None:
        self.exited.append((run.run_id, run.exit))

    def drain(self, run: Run) -> list[JSONObject]:
        events = run.events.poll()["events"]
        assert isinstance(events, list)
        self.seen.setdefault(run.run_id, []).extend(e for e in events if isinstance(e, dict))
        return self.seen[run.run_id]

    async def first_line(self, run: Run) -> str:
        while not self.output(run).strip():
            got = (await run.events.wait(1000))["events"]
            assert isinstance(got, list)
            self.seen.setdefault(run.run_id, []).extend(e for e in got if isinstance(e, dict))
        return self.output(run)

    def output(self, run: Run) -> str:
        return "".join(str(e["text"]) for e in self.drain(run) if e["event"] == "runOutput")


def plan(
    code: str,
    cwd: str,
    *,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    files: tuple[tuple[str, bytes], ...] = (),
) -> RunStart:
    return RunStart(
        context={"contextID": "w1", "generation": 1},
        label="test run",
        executable=sys.executable,
        arguments=("-c", code, *args),
        working_directory=cwd,
        environment=env or {},
        temporary_files=files,
        rerun=None,
    )


READ_FILES = """
import os, sys
print(open(sys.argv[1], encoding="utf-8").read(), end="|")
print(open(os.environ["RAW"], "rb").read().hex(), end="|")
print(os.path.dirname(sys.argv[1]), flush=True)
sys.exit(3)
"""


async def test_files_output_and_one_exit(tmp_path: Path) -> None:
    record = Recorder()
    async with trio.open_nursery() as nursery:
        table = RunTable(nursery, record.on_exit)
        run = await table.start(
            plan(
                READ_FILES,
                str(tmp_path),
                args=("${temporaryFile:args.txt}",),
                env={"RAW": "${temporaryFile:raw.bin}"},
                files=(("args.txt", "héllo".encode()), ("raw.bin", b"\xff\x00")),
            ),
            plugin_id="dev.example",
            session_id="lsp-1",
            generation=1,
        )
        assert run.run_id.startswith("run-")
        await run.ended.wait()
        text, hexed, directory = record.output(run).strip().split("|")
        assert (text, hexed) == ("héllo", "ff00")
        assert not await trio.Path(directory).exists()  # removed when the run ended
        assert record.exited == [(run.run_id, {"exitCode": 3})]
        names = [e["event"] for e in record.drain(run)]
        assert all(e["runId"] == run.run_id for e in record.drain(run))
        assert names[0] == "runStarted"
        assert names[-1] == "runExited"
        assert run.describe()["state"] == "ended"
        # Stopping an ended run answers at once and reports nothing again.
        await table.stop(run)
        assert len(record.exited) == 1


async def test_stop_ends_the_tree_and_close_ends_the_rest(tmp_path: Path) -> None:
    record = Recorder()
    sleeper = (
        "import subprocess, sys, time;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        "print(p.pid, flush=True); time.sleep(600)"
    )
    async with trio.open_nursery() as nursery:
        table = RunTable(nursery, record.on_exit)
        first = await table.start(
            plan(sleeper, str(tmp_path)), plugin_id="p", session_id="s", generation=1
        )
        second = await table.start(
            plan(sleeper, str(tmp_path)), plugin_id="p", session_id="s", generation=1
        )
        grandchild = int((await record.first_line(first)).split()[0])
        await table.stop(first)
        assert first.exit == {"signal": 15}
        assert runs_no_more(grandchild)
        assert [r for r, _ in record.exited] == [first.run_id]
        assert [r.run_id for r in table.live("p")] == [second.run_id]
        await table.aclose()
        assert second.ended.is_set()
        assert [r for r, _ in record.exited] == [first.run_id, second.run_id]


async def test_a_start_that_fails_leaves_nothing(tmp_path: Path) -> None:
    record = Recorder()
    before = set(os.listdir(os.environ.get("TMPDIR", "/tmp")))
    async with trio.open_nursery() as nursery:
        table = RunTable(nursery, record.on_exit)
        missing = RunStart(
            context={"contextID": "w1", "generation": 1},
            label="missing",
            executable=str(tmp_path / "no-such-program"),
            arguments=(),
            working_directory=str(tmp_path),
            environment={},
            temporary_files=(("a.txt", b"x"),),
            rerun=None,
        )
        with pytest.raises(HostRefusal) as caught:
            await table.start(missing, plugin_id="p", session_id="s", generation=1)
        assert (caught.value.number, caught.value.code) == (-32603, "plugin.host.failed")
        assert caught.value.details is not None
        assert caught.value.details["code"] == "launch_failed"
        assert table.describe() == []
        assert record.exited == []

    after = set(os.listdir(os.environ.get("TMPDIR", "/tmp")))
    assert not {name for name in after - before if name.startswith("supervisor-run-")}
