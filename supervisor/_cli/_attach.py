"""``supervisor serve --attach``: the stdio bridge an editor starts, to a backend that stays.

The bridge connects to the backend's Unix socket and copies bytes both ways; it parses
nothing, so the client speaks exactly the protocol of ``supervisor serve``. When nothing
listens there it starts ``supervisor serve --listen PATH`` itself, detached (its own session,
stdin/stdout on /dev/null, stderr appended to ``PATH.log``), under an exclusive
``fcntl.flock`` of ``PATH.lock``: two bridges racing to start make one backend, and the
second connects to it. The end of the editor's input is passed on as the end of the
connection's input, so the backend detaches that client and keeps everything else.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Final

import trio

from .._handles import take_over_stdio

__all__ = ("attach_stdio", "connect_or_start")

logger = logging.getLogger("supervisor.serve")

#: How long a backend we started may take to listen (seconds).
_START_TIMEOUT_S: Final = 30.0


def _try_connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def connect_or_start(path: str, backend_args: list[str]) -> socket.socket:
    """A connection to the backend on ``path``, starting it (with ``backend_args``) if needed.

    Raises:
        OSError: the backend could not be started, or did not listen within 30 s (its
            stderr is in ``PATH.log``).
    """
    sock = _try_connect(path)
    if sock is not None:
        return sock
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Another bridge may have started it while we waited for the lock.
        sock = _try_connect(path)
        if sock is not None:
            return sock
        _start_backend(path, backend_args)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            sock = _try_connect(path)
            if sock is not None:
                return sock
            time.sleep(0.02)
        raise OSError(f"the backend did not listen on {path} within {_START_TIMEOUT_S:.0f} s")
    finally:
        # Closing the descriptor releases the lock.
        os.close(lock)


def _start_backend(path: str, backend_args: list[str]) -> None:
    """Start the backend so that it is not our child: it must outlive this bridge.

    A short-lived intermediate starts it in a session of its own and exits at once; the
    backend is then adopted by init (or the nearest subreaper), never waited on by us.
    """
    argv = [sys.executable, "-m", "supervisor", "serve", "--listen", path, *backend_args]
    log = os.open(path + ".log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        starter = (
            "import subprocess, sys\n"
            "subprocess.Popen(sys.argv[1:], start_new_session=True,"
            " stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=2)\n"
        )
        subprocess.run(
            [sys.executable, "-c", starter, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            check=True,
        )
    finally:
        os.close(log)


async def _bridge(sock: socket.socket, protocol_in: int, protocol_out: int) -> None:
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
    editor_in = trio.lowlevel.FdStream(protocol_in)
    editor_out = trio.lowlevel.FdStream(protocol_out)
    async with stream, editor_in, editor_out, trio.open_nursery() as nursery:

        async def up() -> None:
            while chunk := await editor_in.receive_some(65536):
                await stream.send_all(chunk)
            # The editor closed its end: the backend detaches this client.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_eof()

        async def down() -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                while chunk := await stream.receive_some(65536):
                    await editor_out.send_all(chunk)
            nursery.cancel_scope.cancel()

        nursery.start_soon(up)
        nursery.start_soon(down)


def attach_stdio(path: str, *, idle_grace: str, untrusted: bool) -> int:
    """Bridge this process's stdin/stdout to the backend on ``path``; see the module doc.

    Returns:
        0 when the backend closed the connection (after the client's ``exit``, or when the
        backend ended); 1 when it could not be reached or started.
    """
    protocol_in, protocol_out = take_over_stdio()
    backend_args = ["--idle-grace", idle_grace, *(["--untrusted"] if untrusted else [])]
    try:
        sock = connect_or_start(path, backend_args)
    except (OSError, subprocess.CalledProcessError) as exc:
        logger.error("no backend on %s: %s", path, exc)
        return 1
    try:
        trio.run(_bridge, sock, protocol_in, protocol_out)
    except (trio.BrokenResourceError, OSError) as exc:
        logger.warning("the connection to the backend broke: %s", exc)
        return 1
    return 0
