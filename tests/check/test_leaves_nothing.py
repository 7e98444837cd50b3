"""The conformance kit leaves nothing behind (issue 27): ``supervisor check`` run against every
testbed program, each command under a harness that is a child subreaper. Whatever the command
leaves -- a helper still running (one whose main thread exited included) -- is re-parented to
the harness once the command has exited, and the harness lists it (then ends and collects it).
A helper that escaped its parent is the harness's child from then on: once the kit has ended
it, the harness collects its zombie. The kit must never leave what it started: that is the promise
it checks in others.
"""

from __future__ import annotations

import json
import sys

import pytest
import trio

from supervisor.testbed import SCENARIOS, program_argv

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs a Linux child subreaper and procfs"
)

PY = sys.executable
#: Small sizes keep the floods and the storm quick; the program is the same.
SIZES = {
    "flood-stdout": {"size_bytes": 3000},
    "flood-stderr": {"size_bytes": 3000},
    "oversized-notification": {"size_bytes": 3000},
    "request-storm": {"count": 20},
    "zombie-maker": {"count": 3},
}
#: Bounds a fifth of the defaults (initialize 2 s): a program that never answers costs
#: little, and nothing here judges a verdict, only what is left after the command.
TIME_SCALE = "0.2"

HARNESS = r"""
import ctypes, json, os, signal, subprocess, sys, time

# A child subreaper: what the command leaves behind is re-parented here.
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
command = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, capture_output=True, timeout=300)


def children():
    found = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            found += [int(pid) for pid in f.read().split()]
    return found


def describe(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    # Threads (field 20): a main thread that exited reads Z while the process runs on.
    return f"pid {pid} state {fields[0].decode()} threads {int(fields[17])}"


def collect_ended():
    # A helper that escaped its parent (double-forked, setsid) is re-parented here as soon as
    # that parent exits, long before the kit ends it: once ended it is this harness's zombie
    # to collect, not a leftover. A Z with more than one thread still runs.
    for pid in children():
        description = describe(pid)
        if description is not None and description.endswith("state Z threads 1"):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    collect_ended()
    if not children():
        break
    time.sleep(0.05)
left = [d for d in map(describe, children()) if d is not None]
for pid in children():
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
for pid in children():
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
print(json.dumps({
    "status": command.returncode,
    "left": left,
    "stdout": command.stdout.decode(errors="replace")[-3000:],
    "stderr": command.stderr.decode(errors="replace")[-2000:],
}))
"""


def _program(name: str, protocol: str) -> list[str]:
    scenario = SCENARIOS[name]
    return program_argv(
        name,
        protocol=protocol if protocol in scenario.protocols else None,
        # Plain programs leave their processes behind and exit: the kit must end them.
        exit_after_setup="--exit" in scenario.options and protocol not in scenario.protocols,
        **SIZES.get(name, {}),  # type: ignore[arg-type]
    )


def _cases() -> list[tuple[str, str]]:
    cases = [(name, "lsp") for name in sorted(SCENARIOS)]
    # The DAP battery too, for the programs that leave something: helpers and zombies.
    cases += [("main-thread-exits", "dap"), ("zombie-maker", "dap")]
    return cases


@pytest.mark.parametrize(("name", "protocol"), _cases(), ids=lambda v: v)
async def test_the_kit_leaves_nothing_behind(name: str, protocol: str) -> None:
    command = [
        PY, "-m", "supervisor", "check", protocol, "--json", "--time-scale", TIME_SCALE,
        "--", *_program(name, protocol),
    ]  # fmt: skip
    done = await trio.run_process(
        [PY, "-c", HARNESS, *command], capture_stdout=True, capture_stderr=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    report = json.loads(done.stdout)
    assert report["left"] == [], report
    # The kit ran to its verdict (0: all passed, 1: a check failed), not a crash.
    assert report["status"] in (0, 1), report
    assert "Traceback" not in report["stderr"], report


def test_every_scenario_is_covered() -> None:
    assert {name for name, _protocol in _cases()} == set(SCENARIOS)
    assert set(SIZES) <= set(SCENARIOS)
