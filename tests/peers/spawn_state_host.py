"""Peer: a supervisor (``open_core``) that starts one child of every kind, each a probe.

Usage: ``spawn_state_host.py REPORT_DIR WORKDIR``. Run by
``tests/supervisor/process/test_signal_state.py`` under a launcher that blocks and ignores
signals, so this process -- the supervisor -- starts with them blocked and ignored. Every kind
of child (``process.run``, ``job.start``, ``lsp.startServer``, a plugin backend, a debug
adapter, DAP ``runInTerminal``, ``terminal.create``; with and without a working directory)
is started as the ``spawn_probe.pl`` probe, which writes ``REPORT_DIR/<kind>`` and then
becomes the real peer; so are two through the fork fallback, forced (pipes with a cwd, a
PTY). Then it ends children of ours the polite way and records how they ended:

- ``process.run`` of ``sleep 600`` past its deadline (the result's ``signal``);
- ``process.run`` cancelled, and ``job.cancel``, of a shell that traps SIGTERM (what it saw,
  see :data:`TRAP`; the job's final status);
- a program on a PTY whose master is closed (the hang-up; the tree's exit status).

Prints one JSON object: ``{host: {sigBlk, sigIgn}, kinds: [names], behaviour: {...}}``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import trio

from protocol import CoreError
from supervisor import open_core
from supervisor._process import _spawn
from supervisor._process._tree import open_process_tree

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from protocol import JSONObject
    from supervisor._core._core import Core

PY = sys.executable
PEERS = Path(__file__).resolve().parent
PROBE = PEERS / "spawn_probe.pl"
LSP_FAKE = PEERS / "lsp_fake.py"
DAP_FAKE = PEERS / "dap_fake.py"
TOOL_RUNNER = PEERS.parents[1] / "examples" / "backends" / "tool_runner.py"
#: A bound on waits for what should take milliseconds (a guard, never a measure).
WAIT_S = 30


def probe(report: Path, *then: str) -> list[str]:
    """The argv of a probe that reports to ``report``, then runs ``then`` (if any)."""
    return ["perl", str(PROBE), str(report), *then]


def _status(name: str) -> str:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    raise LookupError(name)


async def _call(core: Core, command: str, payload: dict[str, Any], **options: Any) -> Any:
    """``core.call`` with an untyped payload and reply (this peer reads what it expects)."""
    return await core.call(command, cast("JSONObject", payload), **options)


def _exists(path: Path) -> bool:
    return path.exists()


def _read(path: Path) -> str:
    """The file's text, stripped; empty when there is no such file."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


async def _wait_file(path: Path) -> None:
    with trio.fail_after(WAIT_S):
        while not _exists(path):  # noqa: ASYNC110 - polling a file another process writes
            await trio.sleep(0.02)


def _kinds(core: Core, reports: Path, workdir: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    sub = os.path.join(workdir, "sub")
    os.makedirs(sub, exist_ok=True)

    def r(name: str) -> Path:
        return reports / name

    def lsp(name: str, argv: list[str], **extra: Any) -> Callable[[], Awaitable[Any]]:
        payload = {
            "serverId": name,
            "executable": argv[0],
            "arguments": argv[1:],
            "workingDirectory": workdir,
            "rootUri": "file://" + workdir,
            "shutdownTimeoutMilliseconds": 500,
            **extra,
        }
        return lambda: _call(core, "lsp.startServer", payload)

    def adapter(argv: list[str], **extra: Any) -> dict[str, Any]:
        return {"executable": argv[0], "arguments": argv[1:], **extra}

    async def run_in_terminal() -> None:
        argv = [PY, str(DAP_FAKE), "run-in-terminal", *probe(r("runInTerminal"), "sleep", "600")]
        reply = await _call(
            core,
            "debug.createSession",
            {
                "adapterId": "probe",
                "rootPath": workdir,
                "adapter": adapter(argv),
                "supportsRunInTerminalRequest": True,
            },
        )
        await _call(core, "debug.launch", {"sessionId": reply["sessionId"]})

    def debug(name: str, **extra: Any) -> Callable[[], Awaitable[Any]]:
        argv = probe(r(name), PY, str(DAP_FAKE), "normal")
        payload = {"adapterId": "probe", "rootPath": workdir, "adapter": adapter(argv, **extra)}
        return lambda: _call(core, "debug.createSession", payload)

    def call(command: str, payload: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
        return lambda: _call(core, command, payload)

    return {
        "process.run": call("process.run", {"argv": probe(r("process.run"))}),
        "process.run+cwd": call("process.run", {"argv": probe(r("process.run+cwd")), "cwd": sub}),
        "process.run+stdin": call(
            "process.run", {"argv": probe(r("process.run+stdin")), "stdin": "input"}
        ),
        "job.start": call(
            "job.start", {"kind": "build", "root": workdir, "argv": probe(r("job.start"))}
        ),
        "job.start+cwd": call(
            "job.start",
            {"kind": "test", "root": workdir, "cwd": "sub", "argv": probe(r("job.start+cwd"))},
        ),
        "lsp.startServer": lsp("lsp", probe(r("lsp.startServer"), PY, str(LSP_FAKE))),
        "plugin backend": lsp(
            "plugin",
            probe(r("plugin backend"), PY, str(TOOL_RUNNER)),
            pluginId="dev.example.tools",
            hostServices=["credentials"],
        ),
        "debug adapter": debug("debug adapter"),
        "debug adapter+cwd": debug("debug adapter+cwd", workingDirectory=sub),
        "runInTerminal": run_in_terminal,
        "terminal.create": call(
            "terminal.create",
            {
                "executable": "perl",
                "arguments": [str(PROBE), str(r("terminal.create")), "sleep", "600"],
            },
        ),
        "terminal.create+cwd": call(
            "terminal.create",
            {
                "executable": "perl",
                "arguments": [str(PROBE), str(r("terminal.create+cwd")), "sleep", "600"],
                "cwd": sub,
            },
        ),
    }


#: ``sh -c TRAP FILE``: writes ``TERM`` to FILE when SIGTERM arrives, then exits 0; says it
#: is ready in ``FILE.ready``. A shell started with SIGTERM ignored can not trap it (POSIX),
#: one started with it blocked never gets it: either way FILE stays empty and the program
#: lasts until SIGKILL, after the TERM grace.
TRAP = 'trap \'echo TERM > "$0"; exit 0\' TERM; : > "$0.ready"; sleep 600 & wait'


async def _cancelled_process_run(core: Core, workdir: str) -> str:
    """``process.run`` of the TRAP program, cancelled once it runs; what it saw."""
    seen = os.path.join(workdir, "process-run-term")

    async def run() -> None:
        try:
            await _call(
                core, "process.run", {"argv": ["/bin/sh", "-c", TRAP, seen]}, operation_id="op"
            )
        except CoreError as exc:
            if exc.code != "cancelled":
                raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await _wait_file(Path(seen + ".ready"))
        assert core.cancel("op")
    return _read(Path(seen))


async def _cancelled_job(core: Core, workdir: str) -> dict[str, Any]:
    """``job.cancel`` of the TRAP program once it runs; its status and what it saw."""
    seen = os.path.join(workdir, "job-term")
    argv = ["/bin/sh", "-c", TRAP, seen]
    started = await _call(core, "job.start", {"kind": "build", "root": workdir, "argv": argv})
    job_id = started["jobId"]
    await _wait_file(Path(seen + ".ready"))
    assert await _call(core, "job.cancel", {"jobId": job_id}) == {"cancelled": True}
    with trio.fail_after(WAIT_S):
        while True:
            batch = await _call(core, "job.waitEvents", {"timeoutMilliseconds": 1000})
            for event in batch["events"]:
                if event["event"] == "job.finished" and event["jobId"] == job_id:
                    return {"status": event["status"], "saw": _read(Path(seen))}


async def _hangup_status() -> int | None:
    """The exit status of ``sleep 600`` on a PTY whose master is closed; None when it was
    still running after :data:`WAIT_S` (SIGHUP ignored: the tree's end kills it then)."""
    master, slave = os.openpty()
    try:
        tree = await open_process_tree(["sleep", "600"], pty_slave_fd=slave)
    finally:
        os.close(slave)
    async with tree:
        os.close(master)  # the hang-up: SIGHUP to the session's controlling process
        with trio.move_on_after(WAIT_S):
            return await tree.wait()
    return None


async def _fork_fallback(reports: Path, workdir: str) -> list[str]:
    """The fork fallback (``spawn_forks``: no usable ``posix_spawn``), forced: a probe on
    pipes with a cwd and one on a PTY. Returns the names of their reports."""
    real = _spawn._forks
    setattr(_spawn, "_forks", lambda cwd, *, no_tty_path: True)  # noqa: B010 - a test seam
    try:
        piped = reports / "fork fallback+cwd"
        tree = await open_process_tree(probe(piped), cwd=os.path.join(workdir, "sub"))
        async with tree:
            await tree.wait()
        on_pty = reports / "fork fallback+pty"
        master, slave = os.openpty()
        try:
            tree = await open_process_tree(probe(on_pty), pty_slave_fd=slave)
        finally:
            os.close(slave)
        try:
            async with tree:
                await tree.wait()
        finally:
            os.close(master)
    finally:
        setattr(_spawn, "_forks", real)  # noqa: B010
    return [piped.name, on_pty.name]


async def main(reports: Path, workdir: str) -> None:
    out: dict[str, Any] = {"host": {"sigBlk": _status("SigBlk"), "sigIgn": _status("SigIgn")}}
    async with open_core() as core:
        kinds = _kinds(core, reports, workdir)
        out["kinds"] = sorted(kinds)
        async with trio.open_nursery() as nursery:
            for start in kinds.values():
                nursery.start_soon(start)
            for name in kinds:
                await _wait_file(reports / name)
            # Everything reported: sessions and terminals end with the Core below.
            nursery.cancel_scope.cancel()
        out["kinds"] += await _fork_fallback(reports, workdir)
        timed_out = await _call(
            core, "process.run", {"argv": ["sleep", "600"], "timeoutMilliseconds": 300}
        )
        out["behaviour"] = {
            "process.run timeout": timed_out,
            "process.run cancel": await _cancelled_process_run(core, workdir),
            "job.cancel": await _cancelled_job(core, workdir),
            "pty hang-up status": await _hangup_status(),
        }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # launched as the test means
    trio.run(main, Path(sys.argv[1]), sys.argv[2])
