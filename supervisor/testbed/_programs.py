"""The misbehaving programs of the testbed, one function per scenario.

Run as ``python -m supervisor.testbed.run SCENARIO [options]`` or, faster (no import of the
supervisor package and Trio), as ``python path/to/_programs.py SCENARIO [options]``: this
file imports only the standard library and the sans-I/O :mod:`protocol` package (its framing
is the one the supervisor reads), so :func:`supervisor.testbed.program_argv` uses that form.

Each program misbehaves in exactly one way and is otherwise plain. Protocol programs speak
the LSP base protocol with JSON-RPC 2.0 (``--protocol lsp``, the default) or DAP
(``--protocol dap``: the same framing, ``seq``/``type`` messages, ``disconnect`` instead of
``shutdown``/``exit``) on stdin/stdout and log to stderr. What a correct supervisor does with
each one is documented in :mod:`supervisor.testbed._scenarios`.

Common options:
    ``--pid-file PATH``: append this program's pid and the pid of every process it starts,
    one per line, as soon as each exists (tests check that all of them are gone).
    ``--protocol lsp|dap``, ``--bytes N``, ``--count N``, ``--signal N``, ``--exit``: see the
    scenario table in :mod:`supervisor.testbed._scenarios`.

Plain programs print ``ready`` on stdout once their misbehaviour is in place.

The ``os.fork`` calls below are the misbehaviour (daemons, escapees, zombies) of a program the
supervisor runs, not a way the supervisor starts children: the program itself is started by
``_spawn.spawn``, like every child of the supervisor.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from protocol import EOF, NEED_DATA, Frame, FrameDecoder, encode_frame

__all__ = (
    "ESCAPE_TRICKS",
    "NON_ASCII",
    "PROGRAMS",
    "READY",
    "UNKNOWN_ID",
    "Peer",
    "main",
    "parser",
)

#: The line a plain program prints on stdout once it is set up.
READY: Final = b"ready\n"
#: The id of a response the ``unknown-id`` program sends (no client ever used it).
UNKNOWN_ID: Final = 987654321
#: Text whose UTF-8 form is longer than its character count (``char-content-length``).
NON_ASCII: Final = "t\u00ebstb\u00e9d \u00fcn\u00efc\u00f8d\u00e9 \u2713 \U0001f680"

Options = argparse.Namespace
Program = Callable[[Options], int]


def _record_pid(options: Options, pid: int | None = None) -> None:
    if options.pid_file:
        with open(options.pid_file, "a") as f:
            f.write(f"{os.getpid() if pid is None else pid}\n")


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


def _ready() -> None:
    os.write(1, READY)


def _ready_then_hang(options: Options) -> int:
    """Say ``ready``; then exit 0 at once with ``--exit`` (leaving the rest behind), else hang."""
    _ready()
    if options.exit:
        os._exit(0)
    _sleep_forever()
    return 0  # pragma: no cover


# -- plain programs -----------------------------------------------------------------------


def hang(options: Options) -> int:
    """Never answer, never exit."""
    _ready()
    _sleep_forever()
    return 0  # pragma: no cover


def ignore_sigterm(options: Options) -> int:
    """Ignore SIGTERM (and SIGINT, SIGHUP), then hang.

    With ``--protocol``, serve that protocol instead (``shutdown``/``disconnect`` answered),
    but never exit: not on ``exit``, not after ``disconnect``, not at the end of input.
    """
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    if options.protocol is None:
        _ready()
        _sleep_forever()

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == peer.shutdown_method:
            peer.reply(request_id, method, None)
            return True
        return False

    def on_notification(peer: Peer, message: dict[str, Any]) -> None:
        if message.get("method") == "exit":
            _sleep_forever()

    _serve(options, hook, on_notification)
    _sleep_forever()
    return 0  # pragma: no cover


def exit_signal(options: Options) -> int:
    """End by a signal (``--signal``, default SIGKILL: no core file)."""
    _ready()
    signum = options.signal
    # A handler or SIG_IGN inherited from the parent must not save us.
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(5)
    return 1  # the signal was blocked: still fail loudly


def grandchild_setsid(options: Options) -> int:
    """Start a grandchild in a new session that ignores SIGTERM and keeps our stdout open."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _record_pid(options)
        os.write(wr, b"x")
        os.close(wr)
        _sleep_forever()
    os.close(wr)
    os.read(rd, 1)  # the grandchild ignores SIGTERM from now on
    os.close(rd)
    return _ready_then_hang(options)


def daemon(options: Options) -> int:
    """Double-fork a daemon (fork, setsid, fork) that ignores SIGTERM and closes its stdio."""
    rd, wr = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(rd)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _record_pid(options)
        os.write(wr, b"x")
        os.close(wr)
        _sleep_forever()
    os.close(wr)
    os.waitpid(first, 0)
    os.read(rd, 1)
    os.close(rd)
    return _ready_then_hang(options)


#: The escape tricks of ``escape-artist`` (``--trick``).
ESCAPE_TRICKS: Final = ("setsid", "pgrp", "env-i", "double-fork", "window", "all")
#: The most escapees ``escape-artist`` keeps alive at once.
_MAX_ESCAPEES: Final = 16


def escape_artist(options: Options) -> int:
    """Keep leaving processes behind with one escape trick (``--trick``) until ended.

    Every 20-80 ms it starts an *escapee*, a process that ignores SIGTERM, SIGHUP and SIGINT
    and sleeps: ``setsid`` leads a new session, ``pgrp`` a new process group, ``env-i``
    execs ``sleep`` with an empty environment (no scope marker), ``double-fork`` is started
    through an intermediate process; ``all`` draws a mix of them for each escapee, and
    ``window`` does so every 3-15 ms, so that some escapee is always younger than any
    snapshot a watcher may have taken. With ``--orphan`` the escapee's parent (an
    intermediate) exits right after the fork, so the escapee is re-parented (to the
    supervisor, a child subreaper); without, its parent stays alive. The ``--count`` newest
    escapees live (at most 16): past that, it kills its oldest itself. Every escapee's pid goes
    to ``--pid-file``, and its command line names the pid file (``escapee PATH``), so a
    test can find one that was killed before it wrote its pid. With ``--exit`` it stops
    after ``--count`` escapees and exits 0, leaving them behind.
    """
    import random

    rng = random.Random()
    trick = options.trick or "all"
    keep = max(1, min(options.count, _MAX_ESCAPEES))
    tag = f"escapee {options.pid_file or 'escape-artist'}"
    live: list[tuple[int, int]] = []  # (pid, start time), oldest first
    made = 0
    _ready()
    while True:
        if trick in ("window", "all"):
            tricks = {t for t in ("setsid", "env-i", "double-fork") if rng.random() < 0.5}
            if "setsid" not in tricks and rng.random() < 0.5:
                tricks.add("pgrp")
        else:
            tricks = {trick}
        live.extend(_escapee(options, tricks, tag))
        made += 1
        if options.exit and made >= keep:
            os._exit(0)
        while len(live) > keep:
            _kill_if_same(*live.pop(0))
        low, high = (0.003, 0.015) if trick == "window" else (0.02, 0.08)
        time.sleep(rng.uniform(low, high))


def _escapee(options: Options, tricks: set[str], tag: str) -> list[tuple[int, int]]:
    """Start one escapee with ``tricks``; its pid and start time (and its live parent's)."""
    through = options.orphan or "double-fork" in tricks
    rd, wr = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(rd)
        if through:
            child = os.fork()
            if child != 0:
                os.write(wr, b"%d\n" % child)
                if options.orphan:
                    os._exit(0)  # the escapee is re-parented
                _become_escapee(options, set(), tag, None)  # its parent: stays, sleeps
        _become_escapee(options, tricks, tag, None if through else wr)
    os.close(wr)
    with os.fdopen(rd, "rb") as pipe:
        line = pipe.readline()
    if through and options.orphan:
        os.waitpid(first, 0)
    pids = [int(line)] if line.strip().isdigit() else []
    if through and not options.orphan:
        pids.append(first)
    return [(pid, _start_time(pid)) for pid in pids]


def _become_escapee(options: Options, tricks: set[str], tag: str, wr: int | None) -> None:
    """The escapee's side of the fork: never returns."""
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)  # kept across the exec below
    if "setsid" in tricks:
        os.setsid()
    elif "pgrp" in tricks:
        os.setpgid(0, 0)
    _record_pid(options)
    if wr is not None:
        os.write(wr, b"%d\n" % os.getpid())
        os.close(wr)
    if "env-i" in tricks:
        import shutil

        sleep = shutil.which("sleep") or "/bin/sleep"
        with contextlib.suppress(OSError):
            os.execve(sleep, [tag, "1000000"], {})
    _sleep_forever()


def _start_time(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return -1


def _kill_if_same(pid: int, start: int) -> None:
    """SIGKILL ``pid`` if it is still the process that started at ``start`` (an orphan is not
    our child: its pid could be another process's by now); reap it if it is our child."""
    if start < 0 or _start_time(pid) != start:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def zombie_maker(options: Options) -> int:
    """Start ``--count`` children that exit at once, never reap them, then hang.

    With ``--protocol``, serve that protocol instead: the zombies stay for as long as the
    server runs.
    """
    children = []
    for _ in range(options.count):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        _record_pid(options, pid)
        children.append(pid)
    # In place once every child has exited (each is then a zombie).
    deadline = time.monotonic() + 10
    while not all(_is_zombie(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.001)
    if options.protocol is not None:
        return _serve(options)
    return _ready_then_hang(options)


def _is_zombie(pid: int) -> bool:
    """``pid`` has exited and waits to be collected (or has no ``/proc`` to say otherwise)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True
    return data[data.rfind(b")") + 2 :].split()[0] in (b"Z", b"X")


def _thread_leader_exited() -> bool:
    """This process's main thread has exited (``/proc/self/stat`` shows it a zombie)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True  # no procfs: nothing to wait for
    return data[data.rfind(b")") + 2 :].split()[0] in (b"Z", b"X")


def _headless_helper(options: Options, done: int, *, setsid: bool, double_fork: bool) -> None:
    """In a forked child: become a helper that ignores SIGTERM and SIGHUP, has no stdio, and
    whose main thread exits while a second thread runs on (a Go or Java helper does this).

    ``/proc/<pid>/environ`` of such a process reads empty (the memory map went with the main
    thread), so its scope marker is unreadable there, and its state reads ``Z`` although it
    runs. Writes one byte to ``done`` once its main thread has exited. Never returns.
    """
    import ctypes

    if setsid:
        os.setsid()
    if double_fork and os.fork() != 0:
        os._exit(0)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _record_pid(options)

    def worker() -> None:
        # Generous: on a loaded machine the main thread's exit can take seconds, and a
        # helper that tells before it happened is not yet the helper this program promises.
        deadline = time.monotonic() + 60
        while not _thread_leader_exited() and time.monotonic() < deadline:
            time.sleep(0.001)
        os.write(done, b"x")
        os.close(done)
        _sleep_forever()

    threading.Thread(target=worker).start()
    # The main thread ends; the process lives on in the worker.
    ctypes.CDLL(None).pthread_exit(None)
    _sleep_forever()  # pragma: no cover - pthread_exit does not return


def main_thread_exits(options: Options) -> int:
    """Start three helpers whose main thread exits while another thread runs, each ignoring
    SIGTERM and SIGHUP: one in our session, one in a session of its own (``setsid``), one
    double-forked (fork, setsid, fork). Then hang (``--exit``: exit 0 at once); with
    ``--protocol``, serve that protocol instead, leaving the helpers when it exits."""
    rd, wr = os.pipe()
    kinds = ((False, False), (True, False), (True, True))
    for setsid, double_fork in kinds:
        pid = os.fork()
        if pid == 0:
            os.close(rd)
            _headless_helper(options, wr, setsid=setsid, double_fork=double_fork)
        if double_fork:
            os.waitpid(pid, 0)  # the middle process exits at once: reap it
    os.close(wr)
    got = b""
    while len(got) < len(kinds):
        chunk = os.read(rd, len(kinds))
        if not chunk:
            break
        got += chunk
    os.close(rd)
    if options.protocol is not None:
        return _serve(options)
    return _ready_then_hang(options)


def _flood(fd: int, total: int) -> int:
    line = b"x" * 1023 + b"\n"
    chunk = line * 64  # 64 KiB
    left = total
    try:
        while left > 0:
            piece = chunk if left >= len(chunk) else chunk[:left]
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view) :]
            left -= len(piece)
    except BrokenPipeError:
        return 1
    return 0


def flood_stdout(options: Options) -> int:
    """Write ``--bytes`` (default 64 MiB) to stdout as fast as possible, then exit 0."""
    return _flood(1, options.bytes)


def flood_stderr(options: Options) -> int:
    """Write ``--bytes`` (default 64 MiB) to stderr as fast as possible, then exit 0."""
    return _flood(2, options.bytes)


def terminal_ignore_hangup(options: Options) -> int:
    """A stubborn terminal program: ignores SIGHUP/SIGTERM/SIGINT, echoes lines, survives EOF."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    tty = os.isatty(0)
    os.write(1, b"stubborn$ " if tty else READY)
    buffer = b""
    while True:
        try:
            data = os.read(0, 4096)
        except OSError:  # EIO: the terminal is gone
            break
        if not data:
            break
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            os.write(1, b"echo: " + line.rstrip(b"\r") + b"\n" + (b"stubborn$ " if tty else b""))
    _sleep_forever()  # like a shell with a foreground job: the end of input is not the end
    return 0  # pragma: no cover


# -- protocol programs ---------------------------------------------------------------------


class Peer:
    """The server side of an LSP (JSON-RPC) or DAP session over stdin/stdout, blocking.

    Writes are serialized by a lock so a program may write from a second thread.
    """

    def __init__(self, protocol: str) -> None:
        self.dap = protocol == "dap"
        self._decoder = FrameDecoder()
        self._lock = threading.Lock()
        self._seq = 0
        self._server_ids = 0

    # messages -------------------------------------------------------------------------

    def read(self) -> dict[str, Any] | None:
        """The next message, or None at the end of input."""
        while True:
            event = self._decoder.next_event()
            if isinstance(event, Frame):
                message = json.loads(event.body)
                if isinstance(message, dict):
                    return message
                continue
            if event is EOF:
                return None
            if event is NEED_DATA:
                data = os.read(0, 65536)
                if data:
                    self._decoder.receive_data(data)
                else:
                    self._decoder.receive_eof()

    def write_raw(self, data: bytes) -> None:
        with self._lock:
            self._write_locked(data)

    def _write_locked(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]

    def write(self, message: dict[str, Any]) -> None:
        if not self.dap:
            message = {"jsonrpc": "2.0", **message}
            self.write_raw(encode_frame(json.dumps(message, ensure_ascii=False).encode()))
            return
        # A DAP ``seq`` is numbered under the write lock: a second thread (``request-storm``)
        # writes too, and two messages must never share a number or go out of order.
        with self._lock:
            self._seq += 1
            message = {"seq": self._seq, **message}
            self._write_locked(encode_frame(json.dumps(message, ensure_ascii=False).encode()))

    # shapes ---------------------------------------------------------------------------

    def request_of(self, message: dict[str, Any]) -> tuple[Any, str] | None:
        """``(id, method)`` when ``message`` is a request from the client."""
        if self.dap:
            if message.get("type") == "request":
                return message.get("seq"), str(message.get("command"))
            return None
        if "method" in message and "id" in message:
            return message["id"], str(message["method"])
        return None

    def method_of(self, message: dict[str, Any]) -> str | None:
        if self.dap:
            command = message.get("command") if message.get("type") == "request" else None
            return str(command) if command is not None else None
        method = message.get("method")
        return str(method) if method is not None else None

    def reply(self, request_id: Any, method: str, result: Any) -> None:
        if self.dap:
            self.write(
                {
                    "type": "response",
                    "request_seq": request_id,
                    "success": True,
                    "command": method,
                    "body": result,
                }
            )
        else:
            self.write({"id": request_id, "result": result})

    def response_frame(self, request_id: Any, method: str, result: Any) -> bytes:
        if self.dap:
            message = {
                "seq": 0,
                "type": "response",
                "request_seq": request_id,
                "success": True,
                "command": method,
                "body": result,
            }
        else:
            message = {"jsonrpc": "2.0", "id": request_id, "result": result}
        return json.dumps(message, ensure_ascii=False).encode()

    def notify(self, method: str, params: Any) -> None:
        if self.dap:
            self.write({"type": "event", "event": method, "body": params})
        else:
            self.write({"method": method, "params": params})

    def send_request(
        self, method: str, params: Any, on_id: Callable[[Any], None] | None = None
    ) -> Any:
        """Send a request to the client and return its id.

        ``on_id`` is called with the id before the request is written: the client's answer
        may be read (by the main thread) before this call returns, so a program that tracks
        the ids it sent must record each one first, or it would count its answer as unknown.
        """
        request_id: Any
        with self._lock:
            if self.dap:
                self._seq += 1
                request_id = self._seq
                message = {
                    "seq": request_id,
                    "type": "request",
                    "command": method,
                    "arguments": params,
                }
            else:
                self._server_ids += 1
                request_id = f"s{self._server_ids}"
                message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            if on_id is not None:
                on_id(request_id)
            self._write_locked(encode_frame(json.dumps(message, ensure_ascii=False).encode()))
        return request_id

    def response_id(self, message: dict[str, Any]) -> Any:
        """The id a client's response answers, or None when it is not a response."""
        if self.dap:
            return message.get("request_seq") if message.get("type") == "response" else None
        if "method" not in message and "id" in message:
            return message["id"]
        return None

    @property
    def shutdown_method(self) -> str:
        return "disconnect" if self.dap else "shutdown"


def _capabilities(peer: Peer) -> dict[str, Any]:
    if peer.dap:
        return {"supportsCancelRequest": True}
    return {"capabilities": {}, "serverInfo": {"name": "testbed"}}


def _answer(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> None:
    """The well-behaved answer to an ordinary request: echo what was asked."""
    params = message.get("arguments") if peer.dap else message.get("params")
    if method == "testbed/sleep" and isinstance(params, dict):
        time.sleep(float(params.get("ms", 0)) / 1000)
    peer.reply(request_id, method, {"method": method, "params": params})


Hook = Callable[[Peer, Any, str, dict[str, Any]], bool]
NotificationHook = Callable[[Peer, dict[str, Any]], None]


def _serve(
    options: Options,
    on_request: Hook | None = None,
    on_notification: NotificationHook | None = None,
) -> int:
    """The well-behaved server loop; ``on_request`` may take over a request (returns True).

    ``on_notification`` sees every message from the client that is not a request (LSP
    notifications, responses to our requests) before the loop handles ``exit``.

    LSP: ``initialize`` is answered with capabilities, ``shutdown`` with null, ``exit`` ends
    the program with 0 after ``shutdown`` and 1 otherwise. DAP: ``initialize`` is answered,
    then an ``initialized`` event; ``disconnect`` is answered and the program exits 0.
    The end of input ends the program with 1 (LSP) or 0 (DAP).
    """
    peer = Peer(options.protocol)
    shut_down = False
    while True:
        message = peer.read()
        if message is None:
            return 0 if peer.dap else 1
        request = peer.request_of(message)
        if request is None:
            if on_notification is not None:
                on_notification(peer, message)
            if not peer.dap and message.get("method") == "exit":
                return 0 if shut_down else 1
            continue
        request_id, method = request
        if on_request is not None and on_request(peer, request_id, method, message):
            continue
        if method == "initialize":
            peer.reply(request_id, method, _capabilities(peer))
            if peer.dap:
                peer.notify("initialized", {})
        elif method == peer.shutdown_method:
            peer.reply(request_id, method, None)
            shut_down = True
            if peer.dap:
                return 0
        else:
            _answer(peer, request_id, method, message)


def _serve_then_hang(
    options: Options, trigger: str | None, act: Callable[[Peer, Any], None]
) -> int:
    """The well-behaved server until the request ``trigger`` arrives (None: the shutdown
    request, ``shutdown`` or DAP ``disconnect``); then ``act(peer, request_id)``, and hang."""

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == (trigger or peer.shutdown_method):
            act(peer, request_id)
            _sleep_forever()
        return False

    return _serve(options, hook)


def _serve_ordinary(
    options: Options, take: Callable[[Peer, Any, str, dict[str, Any]], None]
) -> int:
    """The well-behaved server with ``take(peer, request_id, method, message)`` answering
    every ordinary request (all but ``initialize`` and the shutdown request)."""

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method in ("initialize", peer.shutdown_method):
            return False
        take(peer, request_id, method, message)
        return True

    return _serve(options, hook)


def well_behaved(options: Options) -> int:
    """A correct server: the control case."""
    return _serve(options)


def crash_on_initialize(options: Options) -> int:
    """Crash (exit 70 with a traceback-like message on stderr) when ``initialize`` arrives."""

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == "initialize":
            os.write(2, b"Traceback (most recent call last):\nRuntimeError: testbed crash\n")
            os._exit(70)
        return False

    return _serve(options, hook)


def no_shutdown_reply(options: Options) -> int:
    """Never answer ``shutdown`` (DAP: ``disconnect``); ignore ``exit`` too; keep running."""
    return _serve_then_hang(options, None, lambda peer, request_id: None)


def stdin_stall(options: Options) -> int:
    """Answer ``initialize``, then never read stdin again (the client's writes back up)."""

    def answer(peer: Peer, request_id: Any) -> None:
        peer.reply(request_id, "initialize", _capabilities(peer))

    return _serve_then_hang(options, "initialize", answer)


def malformed_header(options: Options) -> int:
    """Answer ``initialize`` with a header whose Content-Length is not a number, then hang."""

    def answer(peer: Peer, request_id: Any) -> None:
        peer.write_raw(b"Content-Length: twelve\r\n\r\n{}")

    return _serve_then_hang(options, "initialize", answer)


def char_content_length(options: Options) -> int:
    """Count Content-Length in characters: every answer carries non-ASCII text."""

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == peer.shutdown_method:
            return False
        text = peer.response_frame(request_id, method, {"text": NON_ASCII}).decode()
        peer.write_raw(f"Content-Length: {len(text)}\r\n\r\n{text}".encode())
        return True

    return _serve(options, hook)


def answer_after_cancel(options: Options) -> int:
    """Hold every ordinary request until the client cancels it, then answer it anyway.

    Everything else (``shutdown``, other requests) is served meanwhile, as a real server
    does: only the held request's answer comes late.
    """
    held: dict[Any, tuple[str, dict[str, Any]]] = {}

    def answer_late(peer: Peer, request_id: Any) -> None:
        entry = held.pop(request_id, None)
        if entry is not None:
            _answer(peer, request_id, *entry)

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method in ("initialize", peer.shutdown_method):
            return False
        if peer.dap and method == "cancel":
            peer.reply(request_id, method, None)
            answer_late(peer, (message.get("arguments") or {}).get("requestId"))
            return True
        held[request_id] = (method, message)
        return True

    def on_notification(peer: Peer, message: dict[str, Any]) -> None:
        if message.get("method") == "$/cancelRequest":
            answer_late(peer, (message.get("params") or {}).get("id"))

    return _serve(options, hook, on_notification)


def double_answer(options: Options) -> int:
    """Answer every ordinary request twice with the same id."""

    def take(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> None:
        _answer(peer, request_id, method, message)
        peer.reply(request_id, method, {"duplicate": True})

    return _serve_ordinary(options, take)


def unknown_id(options: Options) -> int:
    """Before each ordinary answer, answer an id the client never sent."""

    def take(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> None:
        peer.reply(UNKNOWN_ID, method, {"stray": True})
        _answer(peer, request_id, method, message)

    return _serve_ordinary(options, take)


def request_storm(options: Options) -> int:
    """After ``initialize``, send ``--count`` requests to the client at once.

    When every one has been answered (result or error), send the notification
    ``testbed/stormDone {answered, duplicates, unknown}``; a client request
    ``testbed/stormStatus`` is answered with the same counts at any time.
    """
    outstanding: set[Any] = set()
    counts = {"answered": 0, "duplicates": 0, "unknown": 0}
    answered: set[Any] = set()

    def storm(peer: Peer) -> None:
        for index in range(options.count):
            peer.send_request("workspace/configuration", {"items": [index]}, outstanding.add)

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method == "initialize":
            peer.reply(request_id, method, _capabilities(peer))
            threading.Thread(target=storm, args=(peer,), daemon=True).start()
            return True
        if method == "testbed/stormStatus":
            peer.reply(request_id, method, dict(counts))
            return True
        return False

    peer = Peer(options.protocol)
    shut_down = False
    while True:
        message = peer.read()
        if message is None:
            return 1
        response_id = peer.response_id(message)
        if response_id is not None:
            if response_id in answered:
                counts["duplicates"] += 1
            elif response_id in outstanding:
                answered.add(response_id)
                counts["answered"] += 1
                if counts["answered"] == options.count:
                    peer.notify("testbed/stormDone", dict(counts))
            else:
                counts["unknown"] += 1
            continue
        request = peer.request_of(message)
        if request is None:
            if message.get("method") == "exit":
                return 0 if shut_down else 1
            continue
        request_id, method = request
        if hook(peer, request_id, method, message):
            continue
        if method == peer.shutdown_method:
            peer.reply(request_id, method, None)
            shut_down = True
            if peer.dap:
                return 0
        else:
            _answer(peer, request_id, method, message)


def oversized_notification(options: Options) -> int:
    """After ``initialize``, send a notification whose body is ``--bytes`` long, then hang."""

    def answer(peer: Peer, request_id: Any) -> None:
        peer.reply(request_id, "initialize", _capabilities(peer))
        head = (
            b'{"jsonrpc":"2.0","method":"testbed/huge","params":{"data":"'
            if not peer.dap
            else b'{"seq":1,"type":"event","event":"testbed/huge","body":{"data":"'
        )
        tail = b'"}}'
        size = max(options.bytes, len(head) + len(tail))
        with contextlib.suppress(BrokenPipeError):
            peer.write_raw(b"Content-Length: %d\r\n\r\n" % size + head)
            filler = b"x" * 65536
            left = size - len(head) - len(tail)
            while left > 0:
                peer.write_raw(filler[:left])
                left -= min(left, len(filler))
            peer.write_raw(tail)

    return _serve_then_hang(options, "initialize", answer)


def requests_before_initialize(options: Options) -> int:
    """Talk before answering ``initialize``: LSP sends ``window/logMessage`` (allowed) and then
    a ``workspace/configuration`` request (not allowed before the answer); DAP sends the
    ``initialized`` event before the ``initialize`` response (and not again after it)."""

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method != "initialize":
            return False
        if peer.dap:
            peer.notify("initialized", {})
            peer.reply(request_id, method, _capabilities(peer))
            return True
        peer.notify("window/logMessage", {"type": 3, "message": "starting"})
        peer.send_request("workspace/configuration", {"items": [{"section": "testbed"}]})
        peer.reply(request_id, method, _capabilities(peer))
        return True

    return _serve(options, hook)


def exit_with_pending(options: Options) -> int:
    """Exit with status 0 as soon as an ordinary request arrives, without answering it."""

    def hook(peer: Peer, request_id: Any, method: str, message: dict[str, Any]) -> bool:
        if method not in ("initialize", peer.shutdown_method):
            os._exit(0)
        return False

    return _serve(options, hook)


#: Every program, by scenario name (kept equal to the registry in ``_scenarios``).
PROGRAMS: Final[dict[str, Program]] = {
    "well-behaved": well_behaved,
    "crash-on-initialize": crash_on_initialize,
    "exit-signal": exit_signal,
    "no-shutdown-reply": no_shutdown_reply,
    "ignore-sigterm": ignore_sigterm,
    "grandchild-setsid": grandchild_setsid,
    "daemon": daemon,
    "escape-artist": escape_artist,
    "zombie-maker": zombie_maker,
    "flood-stdout": flood_stdout,
    "flood-stderr": flood_stderr,
    "stdin-stall": stdin_stall,
    "malformed-header": malformed_header,
    "char-content-length": char_content_length,
    "answer-after-cancel": answer_after_cancel,
    "double-answer": double_answer,
    "unknown-id": unknown_id,
    "request-storm": request_storm,
    "oversized-notification": oversized_notification,
    "hang": hang,
    "exit-with-pending": exit_with_pending,
    "requests-before-initialize": requests_before_initialize,
    "main-thread-exits": main_thread_exits,
    "terminal-ignore-hangup": terminal_ignore_hangup,
}


def parser() -> argparse.ArgumentParser:
    """The command line of every program."""
    p = argparse.ArgumentParser(
        prog="python -m supervisor.testbed.run",
        description="Run one misbehaving testbed program (see `supervisor testbed list`).",
    )
    p.add_argument("scenario", choices=sorted(PROGRAMS))
    # A bare --protocol is LSP, as `testbed list` writes it ("With --protocol it serves LSP").
    p.add_argument(
        "--protocol",
        nargs="?",
        const="lsp",
        choices=("lsp", "dap"),
        default=None,
        help="lsp (a bare --protocol) or dap; without it a program that only speaks a"
        " protocol speaks lsp, and one that can also run as a job runs as a job",
    )
    p.add_argument("--pid-file", default=None, help="append every pid started here")
    p.add_argument("--bytes", type=int, default=64 * 1024 * 1024 + 1024, help="flood size")
    p.add_argument("--count", type=int, default=1000, help="children or requests")
    p.add_argument("--signal", type=int, default=int(signal.SIGKILL), help="exit-signal's")
    p.add_argument("--exit", action="store_true", help="exit after leaving processes behind")
    p.add_argument("--trick", choices=ESCAPE_TRICKS, default=None, help="escape-artist's (all)")
    p.add_argument("--orphan", action="store_true", help="escape-artist: orphan each escapee")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the program of one scenario; returns its exit status."""
    options = parser().parse_args(argv)
    _record_pid(options)
    return PROGRAMS[options.scenario](options)


if __name__ == "__main__":
    sys.exit(main())
