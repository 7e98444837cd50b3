"""``supervisor status [--json]``: the running backends and what each keeps alive.

Every socket in :func:`~._listen.socket_directory` is asked, as an *observer* (it does not
count as an attached client for the idle grace), for ``core.sessions``. A socket nobody
answers on is a backend that died: it is listed as ``stale``.
"""

from __future__ import annotations

import json
import os
import socket
from typing import TYPE_CHECKING, Final

from ._listen import socket_directory

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = ("backend_status", "status_main")

#: How long one backend may take to answer (seconds).
_TIMEOUT_S: Final = 5.0


class _Framed:
    """A blocking LSP-framed JSON-RPC client: enough for three requests."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""
        self._next_id = 0

    def _send(self, message: JSONObject) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self._sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def _read(self) -> JSONObject:
        while b"\r\n\r\n" not in self._buffer:
            self._fill()
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        self._buffer = rest
        while len(self._buffer) < length:
            self._fill()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        message = json.loads(body)
        if not isinstance(message, dict):
            raise OSError("not a JSON-RPC message")
        return message

    def _fill(self) -> None:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise OSError("the backend closed the connection")
        self._buffer += chunk

    def request(self, method: str, params: JSONObject) -> JSONValue:
        self._next_id += 1
        self._send({"id": self._next_id, "method": method, "params": params})
        while True:
            message = self._read()
            if message.get("id") == self._next_id and "method" not in message:
                if "error" in message:
                    raise OSError(f"{method}: {message['error']}")
                return message.get("result")

    def notify(self, method: str) -> None:
        self._send({"method": method})


def backend_status(path: str) -> JSONObject:
    """``{socket, pid, uptimeMs, languageServers, ...}`` of the backend on ``path`` (the
    ``core.sessions`` result), or ``{socket, stale: true, error}`` when nobody answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(_TIMEOUT_S)
            sock.connect(path)
            client = _Framed(sock)
            options: JSONObject = {"observer": True}
            client.request("initialize", {"capabilities": {}, "initializationOptions": options})
            sessions = client.request("core.sessions", {})
            client.request("shutdown", {})
            client.notify("exit")
    except (OSError, ValueError, StopIteration) as exc:
        return {"socket": path, "stale": True, "error": str(exc) or type(exc).__name__}
    if not isinstance(sessions, dict):
        return {"socket": path, "stale": True, "error": "core.sessions answered no object"}
    return {"socket": path, **sessions}


def _duration(ms: JSONValue) -> str:
    if not isinstance(ms, int):
        return "-"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def _rows(backend: JSONObject) -> list[tuple[str, str, str, str, str]]:
    """(kind, id, state, pid, uptime) of each thing the backend keeps alive."""
    rows: list[tuple[str, str, str, str, str]] = []
    kinds = (
        ("languageServers", "lsp", "sessionId", "state", "pid"),
        ("debugSessions", "debug", "sessionId", "state", "adapterPid"),
        ("terminals", "terminal", "terminalID", "state", "pid"),
        ("jobs", "job", "id", "state", "pid"),
        ("runs", "run", "runId", "state", "pid"),
    )
    for key, kind, id_field, state_field, pid_field in kinds:
        items = backend.get(key)
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                pid = item.get(pid_field)
                rows.append(
                    (
                        kind,
                        str(item.get(id_field, "?")),
                        str(item.get(state_field, "?")),
                        str(pid) if pid is not None else "-",
                        _duration(item.get("uptimeMs")),
                    )
                )
    return rows


def status_main(*, as_json: bool) -> int:
    """Print the backends of this user; 0 always (none running is not an error)."""
    directory = socket_directory()
    paths = sorted(
        os.path.join(directory, name) for name in os.listdir(directory) if name.endswith(".sock")
    )
    backends = [backend_status(path) for path in paths]
    if as_json:
        print(json.dumps({"backends": backends}, indent=2))
        return 0
    if not backends:
        print(f"no backend is running (sockets in {directory})")
        return 0
    for backend in backends:
        name = os.path.basename(str(backend["socket"]))
        if backend.get("stale"):
            print(f"{name}: stale ({backend.get('error')})")
            continue
        print(f"{name}: pid {backend.get('pid')}, up {_duration(backend.get('uptimeMs'))}")
        rows = _rows(backend)
        if not rows:
            print("  (nothing running)")
        for kind, ident, state, pid, uptime in rows:
            print(f"  {kind:<9} {ident:<24} {state:<12} pid {pid:<8} up {uptime}")
    return 0
