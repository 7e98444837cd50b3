"""Every kind of child starts clean, even from a supervisor started with signals blocked and
ignored (``nohup``, a CI agent, a service manager): empty signal mask, nothing ignored, only
fds 0-2, its own session and group, the scope marker (``supervisor/_process/_spawn.py``).

The supervisor is ``tests/peers/spawn_state_host.py`` (``open_core``), exec'd by a launcher
that blocks and ignores signals first, as such a parent would. It starts one child of every
kind as the ``tests/peers/spawn_probe.pl`` probe, which reports the state it was given, and
ends a few children the polite way, which only works if they inherit neither the mask nor
the ignored signals: a ``process.run`` past its deadline, a cancelled ``process.run`` and a
cancelled job end by SIGTERM (not by SIGKILL after the TERM grace), a program on a PTY ends
on the hang-up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor._process._marker import SCOPE_ENV
from tests._procfs import runs_no_more

pytestmark = [
    pytest.mark.linux,
    pytest.mark.skipif(
        not sys.platform.startswith("linux")
        or not os.path.exists("/bin/sh")
        or shutil.which("perl") is None,
        reason="needs Linux (/proc), /bin/sh and perl",
    ),
]

PEERS = Path(__file__).resolve().parents[2] / "peers"
HOST = PEERS / "spawn_state_host.py"
#: Blocked in the supervisor (nothing of ours needs SIGCHLD: exits are watched on pidfds).
#: A realtime signal is included: they are reset too.
BLOCKED = (
    signal.SIGCHLD,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGRTMIN + 2,
)
#: Ignored in the supervisor. Not SIGCHLD: ignoring it makes the kernel reap our children.
IGNORED = (
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGPIPE,
    signal.SIGUSR2,
    signal.SIGXFSZ,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGRTMIN + 2,
)
LAUNCHER = f"""
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {[int(s) for s in BLOCKED]!r})
for sig in {[int(s) for s in IGNORED]!r}:
    signal.signal(sig, signal.SIG_IGN)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""
#: Every kind the host starts (it lists what it started; both must agree).
KINDS = sorted(
    [
        "process.run",
        "process.run+cwd",
        "process.run+stdin",
        "job.start",
        "job.start+cwd",
        "lsp.startServer",
        "plugin backend",
        "debug adapter",
        "debug adapter+cwd",
        "runInTerminal",
        "terminal.create",
        "terminal.create+cwd",
        "fork fallback+cwd",
        "fork fallback+pty",
    ]
)


def _mask(signals: tuple[int, ...]) -> int:
    return sum(1 << (sig - 1) for sig in set(signals))


def _parse(text: str) -> dict[str, Any]:
    """A ``spawn_probe.pl`` report: ``{pid, pgid, sid: int, SigBlk, SigIgn, SigCgt: int,
    scope, cwd: str, fds: {fd: target}}``."""
    report: dict[str, Any] = {"fds": {}}
    for line in text.splitlines():
        key, _, value = line.partition("\t")
        if key == "fd":
            fd, _, target = value.partition("\t")
            report["fds"][int(fd)] = target
        elif key.startswith("Sig"):
            report[key] = int(value, 16)
        elif key in ("pid", "pgid", "sid"):
            report[key] = int(value)
        else:
            report[key] = value
    return report


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the host under the launcher once; its output and every probe's report."""
    reports = tmp_path_factory.mktemp("reports")
    workdir = tmp_path_factory.mktemp("work")
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(HOST), str(reports), str(workdir)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    out: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    out["reports"] = {
        path.name: _parse(path.read_text())
        for path in reports.iterdir()
        if not path.name.endswith(".tmp")
    }
    out["workdir"] = str(workdir)
    return out


def test_the_supervisor_itself_was_started_with_them_blocked_and_ignored(
    launched: dict[str, Any],
) -> None:
    # Without this the test below would prove nothing.
    assert int(launched["host"]["sigBlk"], 16) & _mask(BLOCKED) == _mask(BLOCKED)
    assert int(launched["host"]["sigIgn"], 16) & _mask(IGNORED) == _mask(IGNORED)
    assert sorted(launched["kinds"]) == KINDS


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_child_starts_clean(launched: dict[str, Any], kind: str) -> None:
    report = launched["reports"][kind]
    assert report["SigBlk"] == 0, f"{kind}: blocked {report['SigBlk']:#x}"
    # perl, the probe, ignores SIGFPE itself before its first line runs; nothing else.
    ignored = report["SigIgn"] & ~_mask((signal.SIGFPE,))
    assert ignored == 0, f"{kind}: ignored {ignored:#x}"
    # Only 0-2, as the child saw them before it opened anything.
    assert sorted(report["fds"]) == [0, 1, 2], f"{kind}: {report['fds']}"
    assert report["pid"] == report["sid"] == report["pgid"]
    assert report.get("scope"), f"{kind}: no {SCOPE_ENV}"
    if kind.startswith("terminal.") or kind in ("runInTerminal", "fork fallback+pty"):
        assert report["fds"][0].startswith("/dev/pts/")  # the PTY, as its stdin
    elif kind == "process.run+stdin":
        assert report["fds"][0].startswith("pipe:")  # the input asked for
    elif kind.startswith(("process.run", "job.start")):
        assert report["fds"][0] == "/dev/null"  # no input asked for
    if kind.endswith("+cwd"):
        assert report["cwd"] == os.path.join(launched["workdir"], "sub")
    assert runs_no_more(report["pid"])  # the Core ended everything it started


def test_polite_ends_work_under_that_supervisor(launched: dict[str, Any]) -> None:
    behaviour = launched["behaviour"]
    timed_out = behaviour["process.run timeout"]
    assert timed_out["timedOut"] is True
    assert timed_out["signal"] == signal.SIGTERM  # not SIGKILL after the TERM grace
    # A cancelled process.run or job gets no exit status: the program says what it saw.
    assert behaviour["process.run cancel"] == "TERM"
    assert behaviour["job.cancel"] == {"status": "cancelled", "saw": "TERM"}
    assert behaviour["pty hang-up status"] == -signal.SIGHUP


def _frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _read_frame(stream: Any) -> dict[str, Any]:
    length = 0
    while line := stream.readline().strip():
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    message: dict[str, Any] = json.loads(stream.read(length))
    return message


def _proc_state(pid: int) -> dict[str, Any]:
    """The state of ``pid`` read from outside (which opens nothing in it)."""
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rfind(b")") + 2 :].split()
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read().split(b"\0")
    prefix = SCOPE_ENV.encode() + b"="
    return {
        "SigBlk": int(status["SigBlk"], 16),
        "SigIgn": int(status["SigIgn"], 16),
        "pgid": int(fields[2]),
        "sid": int(fields[3]),
        "fds": sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd")),
        "scope": any(entry.startswith(prefix) for entry in environ),
    }


def test_a_testbed_program_starts_clean(tmp_path: Path) -> None:
    """``supervisor testbed run`` is its own supervisor, launched the same way. Its program is
    fixed (a Python server), so it is read from outside once it has answered ``initialize``:
    Python ignores SIGPIPE and SIGXFSZ itself at start, nothing else may be ignored."""
    pid_file = tmp_path / "pid"
    argv = [sys.executable, "-c", LAUNCHER, "-m", "supervisor", "testbed", "run", "well-behaved"]
    cli = subprocess.Popen(
        [*argv, "--pid-file", str(pid_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert cli.stdin is not None
    assert cli.stdout is not None
    try:
        cli.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        cli.stdin.flush()
        assert _read_frame(cli.stdout)["id"] == 1  # relayed by the CLI: the program runs
        pid = int(pid_file.read_text().split()[0])
        state = _proc_state(pid)
    finally:
        cli.stdin.close()  # the end of input ends the program, then the CLI
        cli.stdout.close()
        cli.wait(timeout=60)
    assert state["SigBlk"] == 0, f"blocked {state['SigBlk']:#x}"
    assert state["SigIgn"] == _mask((signal.SIGPIPE, signal.SIGXFSZ)), f"{state['SigIgn']:#x}"
    assert state["fds"] == [0, 1, 2]
    assert pid == state["sid"] == state["pgid"]
    assert state["scope"]
    assert runs_no_more(pid)
