"""Helpers that start a scenario's program under the supervisor, for tests and the chaos runner.

:func:`open_scenario` starts the program as a supervised process tree (``open_process_tree``,
so it carries the scope marker and its end is bounded); :func:`open_scenario_session` also
connects a JSON-RPC endpoint to its stdin/stdout, as a language-server session does, and
drains its stderr into a bounded ring so a chatty program never blocks.
"""

from __future__ import annotations

from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import trio

from .._endpoint import open_jsonrpc_endpoint
from .._process._tree import PIPE, open_process_tree
from ._scenarios import program_argv

if TYPE_CHECKING:
    import os
    from collections.abc import AsyncIterator

    from protocol import JSONValue

    from .._endpoint import JSONRPCEndpoint, RequestHandler
    from .._process._tree import ProcessTree

__all__ = ("ScenarioSession", "open_scenario", "open_scenario_session")

#: stderr lines kept by :class:`ScenarioSession` (the last ones, for crash reports).
STDERR_RING_LINES: Final = 64


@asynccontextmanager
async def open_scenario(
    scenario: str,
    *,
    stdin: int = PIPE,
    term_grace_ms: int = 2000,
    protocol: str | None = None,
    pid_file: str | os.PathLike[str] | None = None,
    size_bytes: int | None = None,
    count: int | None = None,
    signal: int | None = None,
    exit_after_setup: bool = False,
) -> AsyncIterator[ProcessTree]:
    """Run a scenario's program as a supervised process tree for the block's duration.

    Args:
        scenario: A name from :data:`supervisor.testbed.SCENARIOS`.
        stdin: ``PIPE`` (default) or ``DEVNULL``.
        term_grace_ms: TERM grace when the tree is ended at the end of the block, in ms.
        protocol: ``"lsp"`` (default) or ``"dap"`` for protocol programs.
        pid_file: Where the program appends every pid it starts.
        size_bytes: ``--bytes`` (flood and oversized-notification sizes), in bytes.
        count: ``--count`` (zombie-maker children, request-storm requests).
        signal: ``--signal`` (exit-signal's signal number).
        exit_after_setup: ``--exit``: leave the processes behind and exit 0.

    Yields:
        The running :class:`supervisor.ProcessTree`.

    **Cancellation:** leaving the block in any way ends the whole tree (shielded, bounded by
    ``term_grace_ms`` plus the kill wait).
    """
    argv = program_argv(
        scenario,
        protocol=protocol,
        pid_file=pid_file,
        size_bytes=size_bytes,
        count=count,
        signal=signal,
        exit_after_setup=exit_after_setup,
    )
    tree = await open_process_tree(argv, stdin=stdin)
    try:
        yield tree
    finally:
        await tree.aclose(term_grace_ms=term_grace_ms)


class ScenarioSession:
    """A scenario program with a JSON-RPC endpoint on its stdio (see :func:`open_scenario_session`).

    Attributes:
        tree: The program's process tree.
        endpoint: The endpoint talking to it.
        stderr_tail: The last :data:`STDERR_RING_LINES` lines of its stderr.
        server_requests: Methods of the requests the program sent us, in order (bounded to
            the last 1024).
    """

    def __init__(self, tree: ProcessTree, endpoint: JSONRPCEndpoint) -> None:
        self.tree = tree
        self.endpoint = endpoint
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_RING_LINES)
        self.server_requests: deque[str] = deque(maxlen=1024)


async def _default_handler(method: str, params: JSONValue | None) -> JSONValue:
    # The client side of `workspace/configuration` and friends: a plain null answer.
    return None


@asynccontextmanager
async def open_scenario_session(
    scenario: str,
    *,
    request_handler: RequestHandler | None = None,
    max_body_bytes: int = 64 * 1024 * 1024,
    write_timeout_ms: float | None = None,
    max_inbound_concurrency: int = 128,
    term_grace_ms: int = 2000,
    pid_file: str | os.PathLike[str] | None = None,
    size_bytes: int | None = None,
    count: int | None = None,
) -> AsyncIterator[ScenarioSession]:
    """Run an LSP scenario program and talk JSON-RPC to it for the block's duration.

    Args:
        scenario: An LSP-speaking scenario name.
        request_handler: Answers the program's requests (default: null for every one).
        max_body_bytes: The endpoint's frame-body limit, in bytes.
        write_timeout_ms: None (the default): a program that stops reading is waited for
            (flow control, as the supervisor's own sessions do). A number of milliseconds:
            a write that makes no progress that long closes the endpoint (``"write
            timeout"``), for a test that wants to see that happen.
        max_inbound_concurrency: Program requests handled at once (past it: ``busy``).
        term_grace_ms: TERM grace when the tree is ended at the end of the block, in ms.
        pid_file: As for :func:`open_scenario`.
        size_bytes: As for :func:`open_scenario`.
        count: As for :func:`open_scenario`.

    Yields:
        A :class:`ScenarioSession`.

    **Cancellation:** leaving the block closes the endpoint and ends the tree (shielded,
    bounded).
    """
    handler = request_handler or _default_handler
    async with open_scenario(
        scenario,
        term_grace_ms=term_grace_ms,
        pid_file=pid_file,
        size_bytes=size_bytes,
        count=count,
    ) as tree:
        # open_scenario pipes all three streams (its stdin default is PIPE).
        assert tree.stdin is not None
        assert tree.stdout is not None
        assert tree.stderr is not None
        stderr = tree.stderr
        session: ScenarioSession | None = None

        async def recording_handler(method: str, params: JSONValue | None) -> JSONValue:
            if session is not None:
                session.server_requests.append(method)
            return await handler(method, params)

        async with trio.open_nursery() as nursery:
            ring: deque[str] = deque(maxlen=STDERR_RING_LINES)
            nursery.start_soon(_drain_stderr, stderr, ring)
            try:
                async with open_jsonrpc_endpoint(
                    tree.stdin,
                    tree.stdout,
                    request_handler=recording_handler,
                    name=scenario,
                    max_body_bytes=max_body_bytes,
                    write_timeout_ms=write_timeout_ms,
                    max_inbound_concurrency=max_inbound_concurrency,
                ) as endpoint:
                    session = ScenarioSession(tree, endpoint)
                    session.stderr_tail = ring
                    yield session
            finally:
                nursery.cancel_scope.cancel()


async def _drain_stderr(stream: trio.abc.ReceiveStream, ring: deque[str]) -> None:
    partial = b""
    try:
        while chunk := await stream.receive_some(65536):
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()[-4096:]
            ring.extend(line.decode("utf-8", "replace")[:1024] for line in lines)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass
