"""Ending a process tree (goal 2 of the README's table).

Two figures, each on a real three-process tree (``/bin/sh`` with two ``sleep`` children,
all in one new session), built afresh for every sample and fully formed (both children
running) before the clock starts:

- ``SIGKILL``: ``ProcessTree.aclose(term_grace_ms=0)`` until every member is reaped,
  against the raw pidfd loop: ``pidfd_open`` each of the three pids, ``killpg(SIGKILL)``,
  wait until every pidfd is readable, reap. Goal: at most 1.5x. Ours also has to *find* the
  members (a ``/proc`` walk before and after the kill) and reap adopted orphans, which the
  raw loop is handed for free.
- ``TERM ignored``: the same tree with SIGTERM ignored by all three (``trap '' TERM`` is
  inherited through exec), ended with ``aclose(term_grace_ms=100)``: SIGTERM, 100 ms of
  grace, SIGKILL. Goal: at most grace + 2 ms (the "peer" column is that bound).

Samples alternate ours / raw; figures are medians, ratios the median of per-round ratios.
Run ``python -m benchmarks.bench_tree`` to print the rows.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import statistics
import time

import trio

from benchmarks._common import paired_row, row
from supervisor._process import _reaper
from supervisor._process._tree import DEVNULL, open_process_tree

__all__ = ("measure",)

TREE = ["/bin/sh", "-c", "sleep 1000 & sleep 1000 & wait"]
TREE_IGNORING_TERM = ["/bin/sh", "-c", "trap '' TERM; sleep 1000 & sleep 1000 & wait"]
GRACE_MS = 100
SLACK_MS = 2
WARMUP = 3


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


async def _formed(pid: int) -> list[int]:
    """Wait until ``pid`` has its two children; return all three pids."""
    # Polling /proc is the point here: nothing signals "the shell has forked twice".
    while len(children := _children(pid)) < 2:  # noqa: ASYNC110
        await trio.sleep(0.001)
    return [pid, *children]


async def _ours_ms(argv: list[str], grace_ms: int) -> float:
    tree = await open_process_tree(argv, stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL)
    await _formed(tree.pid)
    started = time.perf_counter()
    report = await tree.aclose(term_grace_ms=grace_ms)
    elapsed = (time.perf_counter() - started) * 1000
    if report.unkillable or report.returncode is None:
        raise RuntimeError(f"tree not ended: {report}")
    return elapsed


async def _raw_ms() -> float:
    _reaper.ensure_subreaper()  # as ours: the two orphans are reparented to us
    # The peer is the raw system calls, blocking ones included, on purpose.
    pid = os.posix_spawn("/bin/sh", TREE, os.environ, setsid=True)  # noqa: ASYNC221
    pids = await _formed(pid)
    started = time.perf_counter()
    pidfds = [os.pidfd_open(p) for p in pids]
    os.killpg(pid, signal.SIGKILL)
    epoll = select.epoll()
    for fd in pidfds:
        epoll.register(fd, select.EPOLLIN)
    remaining = len(pidfds)
    while remaining:
        events = epoll.poll(0)
        for fd, _ in events:
            epoll.unregister(fd)
            remaining -= 1
        if remaining:
            await trio.lowlevel.wait_readable(epoll.fileno())
    os.waitpid(pid, 0)  # noqa: ASYNC222  # its pidfd is readable: returns at once
    for orphan in pids[1:]:
        with contextlib.suppress(ChildProcessError):  # reaped by sh before it died
            os.waitpid(orphan, os.WNOHANG)  # noqa: ASYNC222
    elapsed = (time.perf_counter() - started) * 1000
    trio.lowlevel.notify_closing(epoll.fileno())
    epoll.close()
    for fd in pidfds:
        os.close(fd)
    return elapsed


async def _measure(rounds: int, term_rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"ours": [], "raw": [], "term": []}
    for i in range(WARMUP + rounds):
        pair = [("ours", _ours_ms(TREE, 0)), ("raw", _raw_ms())]
        if i % 2:
            pair.reverse()
        for name, coro in pair:
            value = await coro
            if i >= WARMUP:
                samples[name].append(value)
    for _ in range(term_rounds):
        samples["term"].append(await _ours_ms(TREE_IGNORING_TERM, GRACE_MS))
    return samples


def measure(*, rounds: int = 60) -> list[dict[str, object]]:
    """Measure both figures.

    Args:
        rounds: SIGKILL samples per side; the TERM-ignoring figure takes a third as many
            (at least 5; each costs the 100 ms grace).

    Returns:
        Rows in the ``benchmarks._common.row`` format, times in milliseconds.
    """
    samples = trio.run(_measure, rounds, max(5, rounds // 3))
    term = statistics.median(samples["term"])
    bound = GRACE_MS + SLACK_MS
    return [
        paired_row(
            "tree end: SIGKILL a 3-process tree until all reaped (time)",
            samples["ours"],
            samples["raw"],
            unit="ms",
            peer_name="raw pidfd loop",
            at_most=1.5,
        ),
        row(
            f"tree end: TERM-ignoring 3-process tree, {GRACE_MS} ms grace (time)",
            ours=term,
            peer=bound,
            unit="ms",
            peer_name=f"grace + {SLACK_MS} ms",
            ratio=term / bound,
            goal="<= 1.0x",
            met=term <= bound,
            note=(
                f"{term - GRACE_MS:.2f} ms past the grace"
                f" (max {max(samples['term']) - GRACE_MS:.2f})"
            ),
        ),
    ]


if __name__ == "__main__":
    for r in measure():
        print(r)
