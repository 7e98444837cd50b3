"""A quiet library (issue 28): nothing on the host's stderr without logging set up, and log
lines that name our concepts when it is.

An initialize timeout used to print ``lsp x#1: input ended (read failed:
ClosedResourceError: ...)`` on the stderr of a host that had configured no logging.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PEERS = Path(__file__).resolve().parents[1] / "peers"

PROGRAM = textwrap.dedent(
    """
    import logging, sys
    import trio
    from supervisor import RequestFailed, StartFailed, open_core

    FAKE = [sys.executable, {fake!r}]
    if sys.argv[1:] == ["--log"]:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")

    async def main():
        async with open_core() as core:
            try:
                silent = [*FAKE, "--no-initialize-answer"]
                async with core.language_server(
                    silent, root_uri="file:///", initialize_timeout_ms=200
                ):
                    pass
            except StartFailed as exc:
                print("start:", exc.reason)
            async with core.language_server(FAKE, root_uri="file:///", server_id="fake") as server:
                try:
                    await server.request("test/garbage", {{}})
                except RequestFailed as exc:
                    print("request:", exc.message)

    trio.run(main)
    """
).format(fake=str(PEERS / "lsp_fake.py"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_nothing_reaches_stderr_without_logging_set_up() -> None:
    done = _run()
    assert done.stdout.splitlines() == [
        "start: initializeTimeout",
        "request: test/garbage on fake ended languageServerUnavailable: The connection to the"
        " language server broke (protocol error: Content-Length is not a decimal number)",
    ]
    assert done.stderr == ""


def test_log_lines_name_the_session_not_internal_exceptions() -> None:
    done = _run("--log")
    assert (
        "language server fake (session lsp-2, generation 1): input ended (protocol" in done.stderr
    )
    assert "ResourceError" not in done.stderr
    assert "#1" not in done.stderr
