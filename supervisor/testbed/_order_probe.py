"""The chaos runner's order probe: pipelined keystrokes and resizes on one terminal, checked.

Every chaos round runs one probe beside its steps (docs/architecture.md "The order rule"): a
program on a PTY that records the lines it reads gets a random mix of
``terminal.write`` and ``terminal.resize`` commands, all submitted from one task without
waiting for an answer (:meth:`Core.submit`), while the round's steps load the supervisor. The
probe then checks what the program read:

- the plain lines, in exactly the order they were submitted;
- at each ``size`` line, a window at least as large as the one the resize before it set
  (sizes only grow in a probe, so a resize that overtook another, or a write that overtook
  its resize, shows);
- at the end, the size of the last resize.

Cost: one short-lived Python program per round and at most a few hundred small commands.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError

if TYPE_CHECKING:
    from protocol import JSONObject

    from .._core._core import Core, SubmittedOperation

__all__ = ("RECORDER", "order_probe")

#: The program on the probe's PTY: ``python -c RECORDER RECORD_PATH``. Echo off; each line
#: read is appended to RECORD_PATH; ``size`` appends ``size ROWS COLS`` (the window when the
#: line was read); ``quit`` appends ``quit`` and exits 0. Standard library only.
RECORDER: Final = """\
import fcntl, struct, sys, termios
attributes = termios.tcgetattr(0)
attributes[3] &= ~termios.ECHO
termios.tcsetattr(0, termios.TCSANOW, attributes)
with open(sys.argv[1], "w") as record:
    for raw in sys.stdin:
        line = raw.rstrip("\\n")
        if line == "size":
            size = fcntl.ioctl(0, termios.TIOCGWINSZ, b"\\0" * 8)
            rows, cols = struct.unpack("hhhh", size)[:2]
            record.write(f"size {rows} {cols}\\n")
        else:
            record.write(line + "\\n")
        record.flush()
        if line == "quit":
            break
"""
#: How long the probe waits for its program (start, reading everything): a hang guard.
_WAIT_S: Final = 60.0


async def _lines(path: str) -> list[str]:
    record = trio.Path(path)
    return (await record.read_text()).splitlines() if await record.exists() else []


async def _wait_exit(core: Core, terminal_id: str) -> None:
    """Until the program's exit outcome (its ``onExit`` subscription), at most ``_WAIT_S``."""
    with trio.move_on_after(_WAIT_S):
        while True:
            batch = await core.call(
                "terminal.waitEvents", {"terminalID": terminal_id, "timeoutMilliseconds": 5000}
            )
            events = batch.get("events") if isinstance(batch, dict) else None
            if isinstance(events, list) and any(
                isinstance(e, dict) and e.get("event") == "exit" for e in events
            ):
                return


async def order_probe(core: Core, workdir: str, label: str) -> tuple[list[str], int]:
    """Run one order probe; returns its violations and the number of commands it pipelined.

    A probe that could not run (the Core refused to create its terminal, as while it closes)
    reports nothing.
    """
    rng = random.Random(f"order/{label}")
    record = os.path.join(workdir, f"{label}-order.record")
    rows, cols = rng.randint(5, 30), rng.randint(20, 80)
    try:
        created = await core.call(
            "terminal.create",
            {
                "executable": sys.executable,
                "arguments": ["-c", RECORDER, record],
                "title": f"order {label}",
                "rows": rows,
                "cols": cols,
            },
        )
    except CoreError:
        return [], 0
    assert isinstance(created, dict)
    terminal_id = created["terminalID"]
    assert isinstance(terminal_id, str)
    violations: list[str] = []
    try:
        # Lines typed before the program turned echo off are echoed as well: harmless, the
        # record is made of what it read.
        await core.call("terminal.onExit", {"terminalID": terminal_id})
        words: list[str] = []
        sizes: list[tuple[int, int]] = []  # the size set before each `size` line
        submitted: list[SubmittedOperation] = []
        for n in range(rng.randint(20, 200)):
            payload: JSONObject
            draw = rng.random()
            if draw < 0.3 and rows < 300 and cols < 500:
                rows = min(300, rows + rng.randint(1, 3))
                cols = min(500, cols + rng.randint(1, 5))
                command, payload = "terminal.resize", {"rows": rows, "cols": cols}
            elif draw < 0.5:
                sizes.append((rows, cols))
                command, payload = "terminal.write", {"data": "size\n"}
            else:
                words.append(f"w{n}")
                command, payload = "terminal.write", {"data": f"w{n}\n"}
            submitted.append(core.submit(command, {"terminalID": terminal_id, **payload}))
        sizes.append((rows, cols))
        submitted.append(
            core.submit("terminal.write", {"terminalID": terminal_id, "data": "size\nquit\n"})
        )
        for op in submitted:
            try:
                await op.result()
            except CoreError as exc:
                violations.append(
                    f"order probe: a pipelined command failed: {exc.code}: {exc.message}"
                )
        await _wait_exit(core, terminal_id)
        lines = await _lines(record)
        if "quit" not in lines:
            violations.append("order probe: the program did not read every line")
            return violations, len(submitted)
        read_words = [line for line in lines if line.startswith("w")]
        if read_words != words:
            violations.append(
                f"order probe: lines out of order: sent {words[:8]}..., read {read_words[:8]}..."
            )
        seen = [(int(ln.split()[1]), int(ln.split()[2])) for ln in lines if ln[:4] == "size"]
        if len(seen) != len(sizes):
            violations.append(f"order probe: {len(seen)} size lines read, {len(sizes)} sent")
        elif any(
            got[0] < want[0] or got[1] < want[1] for got, want in zip(seen, sizes, strict=True)
        ) or any(b[0] < a[0] or b[1] < a[1] for a, b in itertools.pairwise(seen)):
            violations.append(f"order probe: a resize overtook: set {sizes}, seen {seen}")
        elif seen[-1] != sizes[-1]:
            violations.append(f"order probe: ended at {seen[-1]}, the last resize was {sizes[-1]}")
        return violations, len(submitted)
    finally:
        with trio.CancelScope(shield=True):
            try:
                await core.call("terminal.dispose", {"terminalID": terminal_id})
            except CoreError as exc:
                if exc.code not in ("not_found", "cancelled"):
                    violations.append(f"order probe: dispose failed: {exc.code}: {exc.message}")
