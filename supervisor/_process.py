"""``process.run``: run one command as a process tree and collect its output.

Contract (issue 2 section 3, DESIGN.md invariants 2 and 10):

- stdout and stderr are read concurrently and always to the end; each keeps at most
  ``max_output_bytes`` and discards the rest (``truncated``), so a chatty program is
  never blocked or killed by the cap.
- The main process's exit and the end of its pipes are separate events: after the
  exit (or the kill) output is drained for at most :data:`DRAIN_MS`, so a
  grandchild holding a pipe open never stretches the call.
- When the main process exits, the tree's leftovers are ended too; on timeout the
  whole tree is ended and the output read so far is kept; on cancellation the tree
  is ended (shielded, bounded) and ``trio.Cancelled`` propagates.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from protocol import CoreError, JSONObject

from ._reaper import reap_orphans as reap_orphans
from ._tree import DEFAULT_TERM_GRACE_MS, DEVNULL, PIPE, ProcessTree, open_process_tree

if TYPE_CHECKING:
    import os

#: Default per-stream output cap of a one-shot command, in bytes (16 MiB).
DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024
#: How long output is drained after the main process exits or is killed (ms).
DRAIN_MS = 500

_READ_CHUNK = 65536

OutputCallback = Callable[[str, bytes], None]


@dataclass(frozen=True)
class ProcessResult:
    """The outcome of :func:`run_process` (the ``process.run`` result).

    Attributes:
        exit_code: The main process's exit status, or None when a signal ended it.
        signal: The number of the signal that ended it, or None.
        stdout: Kept stdout (at most ``max_output_bytes`` bytes), UTF-8 with
            replacement characters.
        stderr: Kept stderr, likewise.
        timed_out: True when the deadline passed and the tree was ended.
        truncated: True when either stream wrote more than ``max_output_bytes``.
        duration_ms: From spawn to the end of the call, in milliseconds.
    """

    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration_ms: int

    def to_wire(self) -> JSONObject:
        """The wire form: ``{exitCode, signal, stdout, stderr, timedOut, truncated,
        durationMs}``."""
        return {
            "exitCode": self.exit_code,
            "signal": self.signal,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timedOut": self.timed_out,
            "truncated": self.truncated,
            "durationMs": self.duration_ms,
        }


class _Capture:
    """One stream's kept bytes, capped; past the cap bytes are counted, not kept."""

    def __init__(self, name: str, cap: int, on_output: OutputCallback | None) -> None:
        self.name = name
        self.cap = cap
        self.kept = bytearray()
        self.total = 0
        self.on_output = on_output

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        if self.on_output is not None:
            self.on_output(self.name, chunk)

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            while True:
                chunk = await stream.receive_some(_READ_CHUNK)
                if not chunk:
                    return
                self.feed(bytes(chunk) if isinstance(chunk, bytearray) else chunk)

    def text(self) -> str:
        return self.kept.decode("utf-8", "replace")


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CoreError("invalid_request", f"{name} must be a positive integer")
    return value


def _non_negative_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CoreError("invalid_request", f"{name} must be a non-negative integer")
    return value


async def _feed_stdin(stream: trio.abc.SendStream, data: bytes) -> None:
    # A child that exits without reading its input is not an error of the call.
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        if data:
            await stream.send_all(data)
        await stream.aclose()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str | None] | None = None,
    stdin: bytes | None = None,
    timeout_ms: int | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    on_output: OutputCallback | None = None,
    term_grace_ms: int = DEFAULT_TERM_GRACE_MS,
) -> ProcessResult:
    """Run ``argv`` as a process tree, collect its output, and end the tree.

    Implements the ``process.run`` command of issue 2 section 3.

    Args:
        argv: Program and arguments (no shell).
        cwd: Working directory; default: ours.
        env: Changes to our environment (None values remove a variable); the scope
            marker is always set.
        stdin: Bytes written to the child's stdin, which is then closed; None
            means ``/dev/null``.
        timeout_ms: Deadline in milliseconds from the spawn; when it passes the
            tree is ended and ``timed_out`` is set. None: no deadline.
        max_output_bytes: Bytes kept per stream (default 16 MiB).
        on_output: Called synchronously as ``on_output(stream, chunk)`` with
            ``stream`` ``"stdout"`` or ``"stderr"`` for every chunk read, also past
            the cap. It must not block.
        term_grace_ms: Time between SIGTERM and SIGKILL when ending the tree, in
            milliseconds.

    Returns:
        A :class:`ProcessResult`.

    Raises:
        CoreError: ``invalid_request`` for bad argv, env, cwd, ``timeout_ms`` or
            ``max_output_bytes`` values; ``launch_failed`` when the executable or
            cwd is missing. Nothing is started in either case.

    **Cancellation:** the tree is ended (shielded, bounded by ``term_grace_ms``
    plus the kill wait) and ``trio.Cancelled`` propagates; no process is left.
    """
    cap = _positive_int("maxOutputBytes", max_output_bytes)
    if timeout_ms is not None:
        _positive_int("timeoutMilliseconds", timeout_ms)
    _non_negative_int("term_grace_ms", term_grace_ms)
    if stdin is not None and not isinstance(stdin, (bytes, bytearray, memoryview)):
        raise CoreError("invalid_request", "stdin must be bytes or None")

    started = trio.current_time()
    tree = await open_process_tree(argv, cwd=cwd, env=env, stdin=DEVNULL if stdin is None else PIPE)
    try:
        out = _Capture("stdout", cap, on_output)
        err = _Capture("stderr", cap, on_output)
        timed_out = await _supervise(tree, out, err, stdin, timeout_ms, term_grace_ms)
    finally:
        await tree.aclose(term_grace_ms=term_grace_ms)
    rc = tree.returncode
    return ProcessResult(
        exit_code=rc if rc is not None and rc >= 0 else None,
        signal=-rc if rc is not None and rc < 0 else None,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
        duration_ms=math.ceil((trio.current_time() - started) * 1000),
    )


async def _supervise(
    tree: ProcessTree,
    out: _Capture,
    err: _Capture,
    stdin: bytes | None,
    timeout_ms: int | None,
    term_grace_ms: int,
) -> bool:
    """Pump output while waiting for the exit or the deadline; end the tree."""
    drain = trio.CancelScope()
    feeding = trio.CancelScope()

    async def pump_all() -> None:
        with drain:
            async with trio.open_nursery() as pumps:
                if tree.stdout is not None:
                    pumps.start_soon(out.pump, tree.stdout)
                if tree.stderr is not None:
                    pumps.start_soon(err.pump, tree.stderr)

    async def feed() -> None:
        assert tree.stdin is not None
        with feeding:
            await _feed_stdin(tree.stdin, bytes(stdin or b""))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump_all)
        if stdin is not None:
            nursery.start_soon(feed)
        timeout_s = math.inf if timeout_ms is None else timeout_ms / 1000
        with trio.move_on_after(timeout_s) as deadline:
            await tree.wait()
        if tree.exit_time is not None:
            # Invariant 10: the pipes get a bounded drain from the exit on.
            drain.deadline = tree.exit_time + DRAIN_MS / 1000
        # Ends leftovers after a normal exit, or the whole tree on timeout.
        await tree._end(term_grace_ms=term_grace_ms)
        feeding.cancel()
        exit_time = tree.exit_time if tree.exit_time is not None else trio.current_time()
        drain.deadline = min(drain.deadline, exit_time + DRAIN_MS / 1000)
    return deadline.cancelled_caught
