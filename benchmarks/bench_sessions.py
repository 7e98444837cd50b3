"""Memory of 1 000 ready sessions of mixed kinds held by one Core: RSS per session.

A third each of language-server sessions (``tests/peers/lsp_light.sh``, a bash fake that
answers ``initialize``: the servers' own memory is theirs, so the lightest peer lets a
thousand run on a small machine), PTY terminals (``cat``, waiting for input) and running
jobs (``sleep``, each on a lane of its own, as jobs on one root queue; the terminals are
owned by backends, eight each, the most one owner may hold), all through
``Core.call`` in one fresh interpreter (``--probe``), so that memory an earlier phase freed
can't hide the growth. One session of each kind is started and stopped first (the Core's
first-use allocations, imports and caches, are not a session's). The figure is the growth of
the process's RSS from before the first session to when all are ready, divided by their
number; the note gives each kind's share (the RSS growth while that third started). Goal:
at most 1 MiB per session, the bound the README gives a ready language-server session.

``python -m benchmarks.bench_sessions [N]`` prints the row (N sessions, default 1 000).
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
from typing import Any

import trio

from benchmarks._common import row
from supervisor import open_core

__all__ = ("measure",)

SESSIONS = 1000
GOAL_KIB = 1024
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIGHT_SERVER = os.path.join(ROOT, "tests", "peers", "lsp_light.sh")
KINDS = ("lsp", "terminal", "job")
#: Descriptors each session may hold (pipes, a PTY master, pidfds), with room to spare.
_FDS_PER_SESSION = 8


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _wait_event(core: Any, method: str, key: str, value: str, match: Any) -> None:
    while True:
        batch = await core.call(method, {key: value, "timeoutMilliseconds": 30000})
        if any(match(e) for e in batch["events"]):
            return


async def _start_lsp(core: Any, workdir: str) -> str:
    reply = await core.call(
        "lsp.startServer",
        {
            "serverId": "light",
            "executable": "/bin/bash",
            "arguments": [LIGHT_SERVER],
            "workingDirectory": workdir,
            "rootUri": "file://" + workdir,
        },
    )
    sid = str(reply["sessionId"])
    await _wait_event(core, "lsp.waitEvents", "sessionId", sid, lambda e: e.get("state") == "ready")
    return sid


async def _start_terminal(core: Any, index: int) -> str:
    # One owner holds at most 8 terminals (MAX_HANDLES_PER_OWNER): as many backends would.
    reply = await core.call(
        "terminal.create",
        {"executable": "cat", "arguments": [], "owner": f"bench-backend-{index // 8}"},
    )
    return str(reply["terminalID"])


async def _start_job(core: Any, root: str) -> str:
    reply = await core.call(
        "job.start", {"kind": "command", "root": root, "argv": ["sleep", "1000"]}
    )
    return str(reply["jobId"])


async def _wait_jobs_running(core: Any, count: int) -> None:
    while True:
        jobs = await core.call("job.list", {})
        if sum(1 for j in jobs if j["state"] == "running") >= count:
            return
        await trio.sleep(0.05)


async def _probe(total: int) -> dict[str, float]:
    per_kind = {kind: total // 3 + (1 if i < total % 3 else 0) for i, kind in enumerate(KINDS)}
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as base:
        roots = []
        for i in range(per_kind["job"] + 1):
            roots.append(os.path.join(base, f"r{i:04d}"))
            os.mkdir(roots[-1])
        async with open_core() as core:
            # Warm-up: one of each, stopped (first-use allocations are not a session's).
            sid = await _start_lsp(core, base)
            await core.call("lsp.stopServer", {"sessionId": sid})
            tid = await _start_terminal(core, -8)
            await core.call("terminal.dispose", {"terminalID": tid})
            jid = await _start_job(core, roots[-1])
            await _wait_jobs_running(core, 1)
            await core.call("job.cancel", {"jobId": jid})
            gc.collect()
            before = _rss_kib()
            growth: dict[str, float] = {}
            mark = before
            for _ in range(per_kind["lsp"]):
                await _start_lsp(core, base)
            gc.collect()
            growth["lsp"], mark = _rss_kib() - mark, _rss_kib()
            for i in range(per_kind["terminal"]):
                await _start_terminal(core, i)
            gc.collect()
            growth["terminal"], mark = _rss_kib() - mark, _rss_kib()
            for i in range(per_kind["job"]):
                await _start_job(core, roots[i])
            await _wait_jobs_running(core, per_kind["job"])
            gc.collect()
            growth["job"] = _rss_kib() - mark
            after = _rss_kib()
            # The Core's close ends every session at once (one TERM grace for all).
    figures = {"perSessionKiB": (after - before) / total, "sessions": float(total)}
    for kind in KINDS:
        figures[f"{kind}KiB"] = growth[kind] / per_kind[kind]
    return figures


def _run_probe(total: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_sessions", "--probe", str(total)],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def measure(*, rounds: int = 200) -> list[dict[str, object]]:
    """The memory row (see the module docstring); ``rounds`` is not used: one probe.

    Returns:
        One row: KiB of RSS per ready session (lower is better) against the bound.
    """
    figures = _run_probe(SESSIONS)
    per = figures["perSessionKiB"]
    return [
        row(
            f"supervisor memory per ready session, {SESSIONS} of mixed kinds"
            " (language servers, terminals, jobs; RSS growth)",
            ours=per,
            peer=GOAL_KIB,
            unit="KiB",
            peer_name=f"bound: {GOAL_KIB} KiB",
            ratio=per / GOAL_KIB,
            goal=f"<= {GOAL_KIB} KiB",
            met=0 < per <= GOAL_KIB,
            note=(
                f"language server {figures['lspKiB']:.1f} KiB, terminal"
                f" {figures['terminalKiB']:.1f} KiB, job {figures['jobKiB']:.1f} KiB"
            ),
        )
    ]


def _raise_fd_limit(total: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = total * _FDS_PER_SESSION + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        limit = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        count = int(sys.argv[2])
        _raise_fd_limit(count)
        print(json.dumps(trio.run(_probe, count)))
    else:
        if len(sys.argv) > 1:
            SESSIONS = int(sys.argv[1])
        for result in measure():
            print(result)
