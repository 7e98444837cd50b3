"""``supervisor serve --listen``: one backend that editors attach to and detach from.

The backend opens one Core at start and serves the ``supervisor serve`` protocol over a Unix
socket to any number of clients, one after another or at once. Each connection has its own
JSON-RPC lifecycle (``initialize`` first, ``shutdown``, ``exit``); the Core's sessions,
terminals, jobs and plugin backends belong to the backend, not to a connection:

- A client that goes away (``exit``, end of input, SIGKILL) *detaches*: its requests in
  flight are cancelled (ending what they started where they are one-shot, as
  ``process.run``), and everything else keeps running.
- ``shutdown`` detaches its client; ``shutdown {"scope": "backend"}`` ends the backend: the
  other clients' requests are cancelled, every process ends, then it is answered.
- Job notifications are pushed to every initialized client. While no client is attached the
  backend stops draining the Core's job events, so the next client to attach receives what
  queued meanwhile (within the job event queue's bounds; past them the batch says ``gap``).
- With no client attached for the idle grace (default 10 minutes; 0: at once; None: never)
  the backend ends everything and exits.

Security: the socket's directory is 0700 and the socket 0600; a connection whose
``SO_PEERCRED`` names another user is refused and logged. There is no TCP listener. Each
connection has its own endpoint, so the protocol's size and rate bounds apply per connection.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import socket
import struct
import tempfile
from typing import TYPE_CHECKING, Final

import trio

from protocol import CoreError, ErrorCode, JSONObject, LifecycleState
from protocol._json import encoded_size

from .._core._core import PROTOCOL_VERSION, _version, open_core
from .._core._policy import AllowAll
from .._endpoint import JSONRPCError, current_request_id, open_jsonrpc_endpoint
from ._serve import (
    _END_OF_EVENTS,
    _FLUSH_TIMEOUT_S,
    _FOREVER_MS,
    SERVE_MAX_REQUESTS_IN_FLIGHT,
    SERVER_NAME,
    _first_of,
    _Server,
    _trusted_option,
    jsonrpc_error_from,
    run_until_signalled,
)

if TYPE_CHECKING:
    from protocol import JSONValue

    from .._core._core import Core
    from .._session._order import Turn

__all__ = (
    "DEFAULT_IDLE_GRACE_MS",
    "default_socket_path",
    "peer_uid",
    "serve_listen",
    "serve_listen_main",
    "socket_directory",
)

logger = logging.getLogger("supervisor.serve")

#: How long a backend with no client attached keeps everything running (10 minutes).
DEFAULT_IDLE_GRACE_MS: Final = 10 * 60 * 1000
#: Job event batches queued for one client before it is dropped from them (``gap``):
#: a client that stops reading never holds the others' notifications.
_CLIENT_EVENT_BATCHES: Final = 4096
#: And the bytes (as JSON) of the batches queued for one client: the queue is bounded in
#: bytes as every queue of serve is (issue 25); past it the client's next batch says ``gap``.
_CLIENT_EVENT_BYTES: Final = 16 * 1024 * 1024
#: How long a backend waits for its first client at least, whatever the idle grace: the
#: bridge that started it connects only once it listens.
_FIRST_CLIENT_GRACE_MS: Final = 30_000
_SOCKET_DIR_NAME: Final = "trio-process-supervisor"


def socket_directory() -> str:
    """The directory backends' sockets live in, created 0700 if missing.

    ``$XDG_RUNTIME_DIR/trio-process-supervisor``, or ``trio-process-supervisor-UID`` in the
    temp dir when ``XDG_RUNTIME_DIR`` is unset.

    Raises:
        PermissionError: the directory exists but is not ours, or others may enter it.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        path = os.path.join(runtime, _SOCKET_DIR_NAME)
    else:
        path = os.path.join(tempfile.gettempdir(), f"{_SOCKET_DIR_NAME}-{os.getuid()}")
    return _private_directory(path)


def _private_directory(path: str) -> str:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    import stat

    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(errno.EPERM, "not a directory of ours", path)
    if info.st_mode & 0o077:
        # Ours, but others may enter it: make it private again rather than refuse.
        os.chmod(path, 0o700)
    return path


def default_socket_path(workspace: str | None = None) -> str:
    """The socket of the workspace's backend: ``DIR/<name>-<hash>.sock``.

    ``<hash>`` is the first 16 hex digits of the SHA-256 of the realpath of ``workspace``
    (default: the current directory), ``<name>`` its base name, so two checkouts never share
    a backend and ``supervisor status`` can say which is which.
    """
    root = os.path.realpath(workspace or os.getcwd())
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(root))
    return os.path.join(socket_directory(), f"{name[:32] or 'root'}-{digest}.sock")


def peer_uid(sock: socket.socket | trio.socket.SocketType) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    size = struct.calcsize("3i")
    data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size)
    pid, uid, _gid = struct.unpack("3i", data)
    return pid, uid


class _Connection(_Server):
    """One client of the backend: its lifecycle and requests; the Core is the backend's."""

    def __init__(self, nursery: trio.Nursery, backend: _Backend, number: int) -> None:
        super().__init__(nursery)
        self.backend = backend
        self.number = number
        self._core = backend.core
        #: Set when the backend ends for a reason this client did not give.
        self.interrupt = trio.Event()
        #: ``initializationOptions.observer: true`` (``supervisor status``): does not count
        #: as attached for the idle grace, and gets no job notifications.
        self.observer = False
        self.outbox, self._inbox = trio.open_memory_channel[tuple[JSONObject, int]](
            _CLIENT_EVENT_BATCHES
        )
        self.gap = False
        #: Bytes (as JSON) of the batches in :attr:`outbox` not yet written.
        self.queued_bytes = 0

    async def _dispatch(
        self, method: str, params: JSONValue | None, turn: Turn | None
    ) -> JSONValue:
        if method == "shutdown":
            return await self._shutdown_scoped(params)
        request_id = current_request_id.get()
        if request_id is not None:
            # Every client numbers its requests from 1, and serve makes the JSON-RPC id the
            # operation id, which must be unique in the one Core: qualify it with the
            # client. (This task's own copy of the context: nothing else sees it.)
            current_request_id.set(f"{self.number}/{request_id}")
        return await super()._dispatch(method, params, turn)

    async def _initialize(self, params: JSONValue | None) -> JSONValue:
        try:
            _trusted_option(params)
            options = params.get("initializationOptions") if isinstance(params, dict) else None
            options = options if isinstance(options, dict) else {}
            if options.get("trusted", self.backend.trusted) != self.backend.trusted or (
                options.get("hostRequests", "serve") != "serve"
            ):
                # One Core serves every client: its trust and host policy are the backend's.
                raise JSONRPCError(
                    int(ErrorCode.INVALID_PARAMS),
                    "this backend's trust and hostRequests are set when it starts"
                    " (supervisor serve --listen [--untrusted])",
                )
        except BaseException:
            if self.lifecycle.state is LifecycleState.INITIALIZING:
                self.lifecycle.initialize_failed()
            raise
        if self._ending is not None:
            self.lifecycle.initialize_failed()
            raise JSONRPCError(int(ErrorCode.REQUEST_FAILED), f"ending: {self._ending}")
        self.lifecycle.initialize_answered()
        self.observer = options.get("observer") is True
        if not self.observer:
            self.backend.subscribe(self)
            self._nursery.start_soon(self._forward_outbox)
        else:
            self.backend.changed()
        core = self.backend.core
        return {
            "serverInfo": {"name": SERVER_NAME, "version": _version()},
            "protocol": PROTOCOL_VERSION,
            "commands": list(core.commands),
            "capabilities": {},
            "backend": {"pid": os.getpid(), "client": self.number},
        }

    async def _shutdown_scoped(self, params: JSONValue | None) -> JSONValue:
        scope = params.get("scope", "client") if isinstance(params, dict) else "client"
        if scope not in ("client", "backend"):
            raise jsonrpc_error_from(
                CoreError(
                    "invalid_request", 'scope must be "client" or "backend"', {"field": "scope"}
                )
            )
        # This client's long polls answer now, as in `supervisor serve`.
        self._polls_ended = True
        for poll in self._long_polls:
            poll.cancel()
        await self._idle.wait()
        if scope == "backend":
            await self.backend.end("shutdown by a client", but=self)
        return None

    async def close_core(self) -> None:
        # The Core is the backend's: a client that goes away only detaches.
        return None

    async def _forward_outbox(self) -> None:
        async for batch, size in self._inbox:
            self.queued_bytes -= size
            if self.gap:
                self.gap = False
                logger.warning(
                    "client %d: job events were dropped: it did not keep up", self.number
                )
            if await self._send_events(batch):
                return


class _Backend:
    """The Core, the clients attached to it, the idle grace and the end."""

    def __init__(self, core: Core, *, trusted: bool, idle_grace_ms: int | None) -> None:
        self.core = core
        self.trusted = trusted
        self.idle_grace_ms = idle_grace_ms
        self.connections: set[_Connection] = set()
        self._subscribers: set[_Connection] = set()
        self._numbers = 0
        self._changed = trio.Event()
        #: When the last client (observers aside) detached, or the backend started.
        self._idle_since = trio.current_time()
        #: Whether a client (not an observer) ever attached.
        self._had_client = False
        self.ending: str | None = None
        self.ended = trio.Event()
        self._closed = trio.Event()

    def attach(self, nursery: trio.Nursery) -> _Connection:
        self._numbers += 1
        connection = _Connection(nursery, self, self._numbers)
        self.connections.add(connection)
        self._change()
        logger.info("client %d attached (%d attached)", connection.number, len(self.connections))
        return connection

    def attached(self) -> bool:
        """Whether a client is attached (observers such as ``supervisor status`` aside)."""
        return any(not connection.observer for connection in self.connections)

    def detach(self, connection: _Connection) -> None:
        self.connections.discard(connection)
        if not connection.observer:
            self._had_client = True
            if not self.attached():
                self._idle_since = trio.current_time()
        self._subscribers.discard(connection)
        connection.outbox.close()
        self._change()
        logger.info("client %d detached (%d attached)", connection.number, len(self.connections))

    def subscribe(self, connection: _Connection) -> None:
        if connection in self.connections:
            self._subscribers.add(connection)
            self._change()

    def changed(self) -> None:
        """Something the idle grace depends on changed (a client became an observer)."""
        self._change()

    def _change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def begin_end(self, reason: str, *, but: _Connection | None = None) -> None:
        """Start ending the backend: no new client, every other client interrupted."""
        if self.ending is None:
            self.ending = reason
            logger.info("the backend is ending: %s", reason)
            for connection in list(self.connections):
                if connection is not but:
                    connection.interrupt.set()
            self.ended.set()

    async def end(self, reason: str, *, but: _Connection | None = None) -> None:
        """End the backend and wait until every process ended; shielded."""
        with trio.CancelScope(shield=True):
            self.begin_end(reason, but=but)
            await self._closed.wait()

    async def run(self, listener: trio.SocketListener, closed: trio.Event) -> None:
        """Accept clients until the backend ends; ``closed`` is set once the Core closed."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._accept, listener, nursery)
            nursery.start_soon(self._idle_watch)
            nursery.start_soon(self._broadcast)
            await self.ended.wait()
            # No new client from now on; the ones attached end with the backend.
            await listener.aclose()
            await closed.wait()
            self._closed.set()
            # The clients get their last answers and events, each wait bounded.
            with trio.move_on_after(2 * _FLUSH_TIMEOUT_S):
                while self.connections:
                    await self._changed.wait()
            nursery.cancel_scope.cancel()

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while self.ending is None:
            try:
                stream = await listener.accept()
            except trio.ClosedResourceError:
                return
            nursery.start_soon(self._serve_connection, stream)

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        # A connection is a supervision boundary: whatever ends it unforeseen ends only it.
        try:
            await self._serve_connection_unguarded(stream)
        except Exception:
            logger.exception("a client's connection failed; it is detached")

    async def _serve_connection_unguarded(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                pid, uid = peer_uid(stream.socket)
            except OSError as exc:
                logger.warning("refused a connection whose peer is unknown: %s", exc)
                return
            if uid != os.getuid():
                logger.warning("refused a connection of uid %d (pid %d): not ours", uid, pid)
                return
            if self.ending is not None:
                return
            async with trio.open_nursery() as nursery:
                connection = self.attach(nursery)
                try:
                    async with open_jsonrpc_endpoint(
                        stream,
                        stream,
                        request_handler=connection.handle_request,
                        notification_handler=connection.handle_notification,
                        admit_request=connection.admit_request,
                        name=f"client {connection.number}",
                        close_on_input_end=False,
                        finite_only=False,
                        exempt_methods=frozenset({"shutdown"}),
                        max_inbound_concurrency=SERVE_MAX_REQUESTS_IN_FLIGHT,
                    ) as endpoint:
                        connection.endpoint = endpoint
                        await connection.run_session(endpoint, connection.interrupt)
                finally:
                    self.detach(connection)
                    nursery.cancel_scope.cancel()

    async def _idle_watch(self) -> None:
        grace = self.idle_grace_ms
        if grace is None:
            return
        while self.ending is None:
            changed = self._changed
            if self.attached():
                await changed.wait()
                continue
            wait_ms = grace if self._had_client else max(grace, _FIRST_CLIENT_GRACE_MS)
            with trio.move_on_at(self._idle_since + wait_ms / 1000):
                await changed.wait()
                continue
            if not self.attached():
                await self.end(f"no client attached for {grace} ms")
                return

    async def _broadcast(self) -> None:
        """Push each job event batch to every initialized client, in order.

        While no client is subscribed nothing is drained: events queue in the Core (within
        its bounds) for the next client, so a job's output is not lost to a reload.
        """
        while True:
            while not self._subscribers:
                await self._changed.wait()
            batch = await self.core.job_events.wait(_FOREVER_MS)
            size = encoded_size(batch)
            for connection in list(self._subscribers):
                if connection.queued_bytes + size > _CLIENT_EVENT_BYTES:
                    connection.gap = True
                    continue
                try:
                    connection.outbox.send_nowait((batch, size))
                except trio.WouldBlock:
                    connection.gap = True
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    pass
                else:
                    connection.queued_bytes += size
            events = batch.get("events")
            if isinstance(events, list) and any(
                isinstance(e, dict) and e.get("event") == _END_OF_EVENTS for e in events
            ):
                return


def _bind(path: str) -> trio.socket.SocketType:
    """A listening Unix socket at ``path``, 0600; a stale socket there is replaced.

    Raises:
        FileExistsError: a backend already listens there.
    """
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except FileNotFoundError:
        pass
    except (ConnectionRefusedError, OSError):
        # Nobody listens: a socket left by a backend that died.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    else:
        raise FileExistsError(errno.EADDRINUSE, "a backend already listens there", path)
    finally:
        probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # 0600 from its first moment (the directory is 0700 as well).
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return trio.socket.from_stdlib_socket(sock)


async def serve_listen(
    path: str,
    *,
    idle_grace_ms: int | None = DEFAULT_IDLE_GRACE_MS,
    trusted: bool = True,
    interrupt: trio.Event | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> int:
    """Serve clients on the Unix socket ``path`` until the backend ends; see the module doc.

    Args:
        path: The socket to create (its directory must exist and be private).
        idle_grace_ms: How long the backend runs with no client attached, in milliseconds;
            0: it ends when the last client detaches (or at once if none attaches); None:
            never.
        trusted: False declares the workspace untrusted (``build``/``test`` jobs end
            ``denied``) for every client.
        interrupt: Set it to end the backend (SIGINT/SIGTERM do in ``serve_listen_main``).

    Returns:
        0 when it ended by ``shutdown {"scope": "backend"}`` or the idle grace; 1 otherwise.

    Raises:
        FileExistsError: a backend already listens on ``path``.
    """
    sock = _bind(path)
    identity = os.stat(path)
    listener = trio.SocketListener(sock)
    closed = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            async with open_core(trusted=trusted, host_policy=AllowAll()) as core:
                backend = _Backend(core, trusted=trusted, idle_grace_ms=idle_grace_ms)
                nursery.start_soon(backend.run, listener, closed)
                logger.info("listening on %s", path)
                task_status.started()
                if interrupt is not None:

                    async def watch() -> None:
                        await _first_of(interrupt.wait, backend.ended.wait)
                        backend.begin_end("interrupted")

                    nursery.start_soon(watch)
                await backend.ended.wait()
                _unlink_if_ours(path, identity)
                # The Core closes here: every lane and process ends.
            core.job_events.put(_END_OF_EVENTS, {})
            closed.set()
    finally:
        _unlink_if_ours(path, identity)
    return 1 if backend.ending == "interrupted" else 0


def _unlink_if_ours(path: str, identity: os.stat_result) -> None:
    with contextlib.suppress(OSError):
        now = os.stat(path)
        if (now.st_dev, now.st_ino) == (identity.st_dev, identity.st_ino):
            os.unlink(path)


def serve_listen_main(path: str, *, idle_grace_ms: int | None, trusted: bool) -> int:
    """Run :func:`serve_listen` in this process; SIGINT/SIGTERM end the backend (130/143)."""

    async def main() -> int:
        return await run_until_signalled(
            lambda interrupt: serve_listen(
                path, idle_grace_ms=idle_grace_ms, trusted=trusted, interrupt=interrupt
            ),
            first="received signal %d: ending the backend",
        )

    try:
        return trio.run(main)
    except FileExistsError as exc:
        logger.error("%s: %s", exc.filename, exc.strerror)
        return 1


def parse_idle_grace(text: str) -> int | None:
    """``--idle-grace``: milliseconds, or ``N`` with a unit (ms, s, m, h); ``never``: None.

    Raises:
        ValueError: anything else, or a negative value.
    """
    value = text.strip().lower()
    if value == "never":
        return None
    for unit, factor in (("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)):
        if value.endswith(unit) and value[: -len(unit)].isdigit():
            return int(value[: -len(unit)]) * factor
    if value.isdigit():
        return int(value)
    raise ValueError(f"--idle-grace {text!r}: give N ms, 30s, 10m, 1h, 0 or never")
