"""``process.*``: one-shot processes."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from protocol._payload import DEFAULT_RUN_TIMEOUT_MS

from ._base import Argv, Env, Path, Payload, Result, StreamText

__all__ = (
    "COMMANDS",
    "DEFAULT_PROCESS_RUN_TIMEOUT_MS",
    "MAX_OUTPUT_BYTES_LIMIT",
    "ProcessResult",
    "ProcessRun",
)

#: The most output ``process.run`` keeps per stream: 64 MiB, the frame-body limit.
MAX_OUTPUT_BYTES_LIMIT: Final = 64 * 1024 * 1024
#: ``process.run`` without ``timeoutMilliseconds`` ends after a day, the deadline
#: the IDE backend protocol gives ``*/exec`` without ``timeoutMs``.
DEFAULT_PROCESS_RUN_TIMEOUT_MS: Final = DEFAULT_RUN_TIMEOUT_MS


class ProcessRun(Payload, kw_only=True):
    """``process.run``: run one command as a process tree and collect its output.

    Attributes:
        argv: The program and its arguments (no shell).
        cwd: The working directory (default: the supervisor's).
        env: Changes to the supervisor's environment (null removes a variable).
        stdin: Text written to stdin, then closed (default: empty stdin).
        timeout_milliseconds: Ends the whole tree after this many milliseconds
            (``timedOut``); absent: 86 400 000 (a day, the IDE backend protocol's ``*/exec``
            default); 0 or null: no deadline.
        max_output_bytes: Bytes kept per stream (default 16 MiB, at most 64 MiB); the rest
            is read and dropped (``truncated``). Both streams together are also cut to fit
            one answer frame (64 MiB less 64 KiB, as JSON).
    """

    argv: Argv
    cwd: Path | None = None
    env: Env | None = None
    stdin: StreamText | None = None
    timeout_milliseconds: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = (
        DEFAULT_PROCESS_RUN_TIMEOUT_MS
    )
    max_output_bytes: Annotated[int, msgspec.Meta(ge=1, le=MAX_OUTPUT_BYTES_LIMIT)] | None = None


class ProcessResult(Result, kw_only=True):
    """``process.run``'s result.

    Attributes:
        exit_code: The main process's exit status; null when a signal ended it.
        signal: The number of the signal that ended the main process, or null.
        stdout: Kept stdout (UTF-8, invalid bytes replaced).
        stderr: Kept stderr (UTF-8, invalid bytes replaced).
        timed_out: True when the deadline passed and the whole tree was ended.
        truncated: True when output was dropped: a stream wrote more than
            ``maxOutputBytes``, or both together did not fit one answer.
        duration_ms: From the spawn to the end of the call (the tree gone), in
            milliseconds.
    """

    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    duration_ms: int


COMMANDS = {"process.run": (ProcessRun, ProcessResult)}
