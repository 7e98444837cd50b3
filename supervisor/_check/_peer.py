"""The checker's side of the wire: a framed LSP or DAP client on a program under check.

Built on the project's own pieces: the program starts through :func:`open_process_tree`
(the one spawn path: a new session, the scope marker, a clean signal state), and its stdout
is cut by :class:`protocol.FrameDecoder`, which reports text outside frames as
:class:`protocol.StrayText` rather than skipping it silently. Unlike the supervisor's
endpoint, this client keeps every oddity as evidence -- an answer to an id never sent, a
second answer, bytes outside frames -- and can stop reading on purpose.

Writes go through one writer task, so a program that stops reading blocks only that task and
the checker's own timing goes on.
"""

from __future__ import annotations

import json
import math
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import trio

from protocol import (
    EOF,
    NEED_DATA,
    STRAY_SAMPLE_BYTES,
    CoreError,
    Frame,
    FrameDecoder,
    RemoteProtocolError,
    encode_frame,
)

from .._process._tree import DEVNULL, PIPE, open_process_tree
from ._profiles import early_message_problem, lsp_client_answer
from ._watch import Descendants

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from .._process._tree import ProcessTree

__all__ = ("Program", "open_program")

#: How often the program's descendants are sampled while it runs, in seconds.
SAMPLE_EVERY_S: Final = 0.02
#: stderr lines kept for evidence.
_STDERR_LINES: Final = 20
#: Frames whose body is at most this large are kept for evidence (``messages``).
_KEEP_MESSAGES: Final = 256
#: Bytes of odd output quoted as evidence (escaped, then ``...`` when cut).
_QUOTE_BYTES: Final = 32
#: Messages we sent that are remembered to recognise an echo of them (the newest ones).
_REMEMBER_SENT: Final = 4096


def quote(data: bytes, limit: int = _QUOTE_BYTES, *, cut: bool = False) -> str:
    """The first ``limit`` bytes of ``data`` as an escaped literal (``'y\\ny\\n...'``).

    ``...`` follows when ``data`` was longer, or when ``cut`` says it is itself the start of
    something longer. Every byte that is not printable ASCII is escaped (``\\x1b``), so
    nothing a program wrote reaches the terminal raw.
    """
    return repr(data[:limit])[1:] + ("..." if cut or len(data) > limit else "")


class Program:
    """One running instance of the program under check, with a client on its stdio.

    Attributes:
        tree: Its process tree (``open_process_tree``).
        dap: DAP framing and message shapes instead of JSON-RPC 2.0.
        descendants: Every process it started (ancestry, marker, adoption).
        stray_bytes: Bytes it wrote on stdout outside frames.
        stray_first: The start of the first of them, quoted (escaped, at most
            :data:`~protocol.STRAY_SAMPLE_BYTES` bytes, ``...`` when that text went on), or
            None.
        stray_began_stdout: That first stray text is where its stdout began (``yes``), which
            ``protocol_error`` quotes already.
        protocol_error: What it wrote that is no frame stream (a verb phrase quoting the
            bytes: ``wrote bytes that are not a Content-Length frame: ...``), or None.
        echoed: Messages of ours it wrote back verbatim (their method, or
            ``response``), the first 16: an echo is neither an answer nor a request.
        duplicate_answers: Ids answered more than once.
        unknown_answers: Ids answered that we never sent.
        eof: Its stdout ended, or we stopped reading it (``protocol_error`` says why).
        stderr_tail: The last lines of its stderr.
        reverse_requests: Methods (commands) of the requests it sent us.
        events: DAP events (or LSP notification methods) it sent, the last 256.
        early: What it sent before its ``initialize`` answer that the protocol does not
            allow there (``workspace/configuration (a request)``), the first 16.
        early_allowed: Methods it sent before that answer that the rule allows, the first 16.
        terminals: Process trees started for its DAP ``runInTerminal`` requests (ended
            with the program).
    """

    def __init__(self, tree: ProcessTree, *, dap: bool) -> None:
        self.tree = tree
        self.dap = dap
        self.descendants = Descendants(tree.pid, tree.marker)
        self.stray_bytes = 0
        self.stray_first: str | None = None
        self.stray_began_stdout = False
        self.protocol_error: str | None = None
        self.echoed: list[str] = []
        self._sent_bodies: dict[bytes, str] = {}
        self._head = b""
        self.duplicate_answers: list[object] = []
        self.unknown_answers: list[object] = []
        self.eof = False
        self.stderr_tail: deque[str] = deque(maxlen=_STDERR_LINES)
        self.reverse_requests: list[str] = []
        self.events: deque[dict[str, Any]] = deque(maxlen=_KEEP_MESSAGES)
        self._next_id = 0
        self._waiting: dict[object, trio.Event] = {}
        self._answers: dict[object, dict[str, Any]] = {}
        self._answered: set[object] = set()
        self._sent: set[object] = set()
        #: Each request's method and when it was queued (``trio.current_time``), by id.
        self._sent_at: dict[object, tuple[str, float]] = {}
        self._reading = True
        self._resume = trio.Event()
        self._send, self._to_write = trio.open_memory_channel[bytes | None](math.inf)
        self._written = 0
        #: Bytes read from its stdout so far.
        self.bytes_read = 0
        self._queued = 0
        self._stdin_closed = trio.Event()
        self._eof_event = trio.Event()
        self._initialize_id: object = None
        self._progress_token: object = None
        #: The ``workspaceFolders`` sent in ``initialize`` (``workspace/workspaceFolders``).
        self._folders: list[Any] = []
        self.early: list[str] = []
        self.early_allowed: list[str] = []
        self.terminals: list[ProcessTree] = []
        self._terminal_requests: trio.MemorySendChannel[dict[str, Any]]
        self._terminal_requests, self._to_start = trio.open_memory_channel[dict[str, Any]](math.inf)

    # -- sending -------------------------------------------------------------------------

    def _queue(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, ensure_ascii=False).encode()
        if len(self._sent_bodies) >= _REMEMBER_SENT:
            del self._sent_bodies[next(iter(self._sent_bodies))]
        self._sent_bodies[body] = str(message.get("method") or message.get("command") or "response")
        data = encode_frame(body)
        self._queued += len(data)
        self._send.send_nowait(data)

    def send_request(self, method: str, params: Any = None) -> object:
        """Queue a request; returns its id (DAP: its ``seq``)."""
        self._next_id += 1
        rid = self._next_id
        self._sent.add(rid)
        self._sent_at[rid] = (method, trio.current_time())
        self._waiting[rid] = trio.Event()
        if method == "initialize" and self._initialize_id is None:
            self._initialize_id = rid
            if isinstance(params, dict):
                self._progress_token = params.get("workDoneToken")
                folders = params.get("workspaceFolders")
                self._folders = folders if isinstance(folders, list) else []
        if self.dap:
            message: dict[str, Any] = {"seq": rid, "type": "request", "command": method}
            if params is not None:
                message["arguments"] = params
        else:
            message = {"jsonrpc": "2.0", "id": rid, "method": method}
            if params is not None:
                message["params"] = params
        self._queue(message)
        return rid

    def notify(self, method: str, params: Any = None) -> None:
        """Queue an LSP notification."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._queue(message)

    async def wait_answer(self, rid: object, timeout_s: float) -> dict[str, Any] | None:
        """The answer to ``rid``, or None if none came within ``timeout_s`` seconds.

        Returns early, with None, once its stdout has ended: no answer can come any more.
        """
        if rid not in self._answers and not self.eof:
            with trio.move_on_after(timeout_s):
                async with trio.open_nursery() as nursery:

                    async def first(event: trio.Event) -> None:
                        await event.wait()
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(first, self._waiting[rid])
                    nursery.start_soon(first, self._eof_event)
        return self._answers.get(rid)

    def unanswered_before(self, rid: object) -> tuple[str, float] | None:
        """The oldest request sent before ``rid`` that is still unanswered: its method and
        how long before ``rid`` it was sent (seconds), or None."""
        _method, at = self._sent_at[rid]
        for earlier, (name, sent) in self._sent_at.items():
            if earlier == rid:
                return None
            if earlier not in self._answered:
                return name, at - sent
        return None

    async def request(
        self, method: str, params: Any = None, *, timeout_s: float
    ) -> tuple[dict[str, Any] | None, float]:
        """Send a request and wait for its answer: ``(answer or None, seconds waited)``."""
        start = trio.current_time()
        rid = self.send_request(method, params)
        answer = await self.wait_answer(rid, timeout_s)
        return answer, trio.current_time() - start

    async def close_stdin(self, timeout_s: float = 1.0) -> None:
        """Close the program's stdin after what is queued (at most ``timeout_s`` to flush)."""
        self._send.send_nowait(None)
        with trio.move_on_after(timeout_s):
            await self._stdin_closed.wait()
        if not self._stdin_closed.is_set() and self.tree.stdin is not None:
            # It does not read: stop writing and close anyway.
            await self.tree.stdin.aclose()
            self._stdin_closed.set()

    # -- reading -------------------------------------------------------------------------

    def pause_reading(self) -> None:
        """Stop reading its stdout (the pipe fills, its writes block)."""
        self._reading = False
        self._resume = trio.Event()

    def resume_reading(self) -> None:
        self._reading = True
        self._resume.set()

    async def wait_exit(self, timeout_s: float) -> int | None:
        """Its exit status (negative: the signal), or None if it still ran after ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            return await self.tree.wait()
        return None

    async def wait_stdout_eof(self, timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            await self._eof_event.wait()
        return self._eof_event.is_set()

    @property
    def initialize_answered(self) -> bool:
        """Its answer to our ``initialize`` has been read."""
        return self._initialize_id in self._answered

    def _note_early(self, message: dict[str, Any]) -> None:
        """Judge a message read before the ``initialize`` answer (the stream is ordered: read
        before it is sent before it)."""
        if self._initialize_id is None or self._initialize_id in self._answered:
            return
        problem = early_message_problem(message, dap=self.dap, progress_token=self._progress_token)
        if problem is not None:
            if len(self.early) < 16:
                self.early.append(problem)
        elif len(self.early_allowed) < 16 and "method" in message:
            self.early_allowed.append(str(message["method"]))

    def _take(self, message: dict[str, Any]) -> None:
        self._note_early(message)
        if self.dap:
            kind = message.get("type")
            if kind == "response":
                self._answer(message.get("request_seq"), message)
            elif kind == "request":
                command = str(message.get("command"))
                self.reverse_requests.append(command)
                if command == "runInTerminal" and isinstance(message.get("arguments"), dict):
                    # Answered once the process runs (``_run_in_terminals``).
                    self._terminal_requests.send_nowait(message)
                    return
                self._queue(
                    {
                        "seq": 0,
                        "type": "response",
                        "request_seq": message.get("seq"),
                        "command": command,
                        "success": False,
                        "message": f"{command} is not supported by the conformance checker",
                    }
                )
            elif kind == "event":
                self.events.append(message)
            return
        if "method" in message:
            method = str(message["method"])
            if "id" in message:
                self.reverse_requests.append(method)
                how, value = lsp_client_answer(method, message.get("params"), self._folders)
                self._queue({"jsonrpc": "2.0", "id": message["id"], how: value})
            else:
                self.events.append({"method": method})
            return
        if "id" in message:
            self._answer(message["id"], message)

    async def _run_in_terminals(self, cwd: str | None) -> None:
        """Serve DAP ``runInTerminal`` as an editor does: start the command (without a
        terminal: its output is not read) and answer with its ``processId``; a command that
        cannot start is answered ``success: false`` with why."""
        async for message in self._to_start:
            args: dict[str, Any] = message["arguments"]
            argv = args.get("args")
            env = args.get("env")
            where = args.get("cwd") or cwd
            response: dict[str, Any] = {
                "seq": 0,
                "type": "response",
                "request_seq": message.get("seq"),
                "command": "runInTerminal",
            }
            try:
                if not isinstance(argv, list) or not argv:
                    raise ValueError("runInTerminal needs a non-empty 'args' list")
                if args.get("argsCanBeInterpretedByShell"):
                    argv = ["/bin/sh", "-c", " ".join(str(a) for a in argv)]
                tree = await open_process_tree(
                    [str(a) for a in argv],
                    cwd=where,
                    env=env if isinstance(env, dict) else None,
                    stdin=DEVNULL,
                    stdout=DEVNULL,
                    stderr=DEVNULL,
                )
            except (ValueError, CoreError) as exc:
                response.update(success=False, message=f"could not start: {exc}")
            else:
                self.terminals.append(tree)
                response.update(success=True, body={"processId": tree.pid})
            self._queue(response)

    def _answer(self, rid: object, message: dict[str, Any]) -> None:
        if rid not in self._sent:
            self.unknown_answers.append(rid)
        elif rid in self._answered:
            self.duplicate_answers.append(rid)
        else:
            self._answered.add(rid)
            self._answers[rid] = message
            self._waiting[rid].set()

    async def _read_stdout(self) -> None:
        stream = self.tree.stdout
        assert stream is not None
        decoder = FrameDecoder()
        try:
            while True:
                if not self._reading:
                    await self._resume.wait()
                    continue
                data = await stream.receive_some(65536)
                self.bytes_read += len(data)
                if len(self._head) <= _QUOTE_BYTES:
                    self._head += data[: _QUOTE_BYTES + 1]
                if data:
                    decoder.receive_data(data)
                else:
                    decoder.receive_eof()
                while True:
                    event = decoder.next_event()
                    if event is NEED_DATA:
                        break
                    if event is EOF:
                        self.eof = True
                        self._eof_event.set()
                        return
                    if isinstance(event, Frame):
                        echo = self._sent_bodies.get(bytes(event.body))
                        if echo is not None:
                            if len(self.echoed) < 16:
                                self.echoed.append(echo)
                            continue
                        try:
                            message = json.loads(event.body)
                        except ValueError:
                            self.protocol_error = self.protocol_error or (
                                f"wrote a frame whose body is not JSON: {quote(event.body)}"
                            )
                            continue
                        if isinstance(message, dict):
                            self._take(message)
                    else:  # StrayText
                        self.stray_bytes += event.byte_count
                        if self.stray_first is None and event.sample:
                            self.stray_began_stdout = self._begins_stdout(event.sample)
                            self.stray_first = quote(
                                event.sample,
                                STRAY_SAMPLE_BYTES,
                                cut=event.byte_count > len(event.sample),
                            )
        except RemoteProtocolError as exc:
            # Its stdout may still be open (``yes``): we stop reading it, it did not close it.
            self.protocol_error = (
                f"wrote bytes that are not a Content-Length frame ({exc}); its stdout began"
                f" {quote(self._head)}{self._stray_before_error(decoder.pending_stray_sample)}"
            )
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        self.eof = True
        self._eof_event.set()

    def _stray_before_error(self, sample: bytes) -> str:
        """Where the stray text that broke the stream began (``sample``, the decoder's
        unreported stray text), when no stray text was reported before it (else the verdict
        quotes that first) and it is not stdout's start (``yes``), quoted already."""
        if not sample or self.stray_first is not None or self._begins_stdout(sample):
            return ""
        return f"; the stray text began {quote(sample, STRAY_SAMPLE_BYTES, cut=True)}"

    def _begins_stdout(self, sample: bytes) -> bool:
        """Whether stray text starting with ``sample`` is what stdout began with (as far as
        the evidence quotes it)."""
        same = min(len(sample), len(self._head), _QUOTE_BYTES)
        return sample[:same] == self._head[:same]

    async def _write_stdin(self) -> None:
        stream = self.tree.stdin
        assert stream is not None
        try:
            async for data in self._to_write:
                if data is None:
                    break
                await stream.send_all(data)
                self._written += len(data)
            await stream.aclose()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        finally:
            self._stdin_closed.set()

    async def _drain_stderr(self) -> None:
        stream = self.tree.stderr
        assert stream is not None
        partial = b""
        try:
            while chunk := await stream.receive_some(65536):
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()[-4096:]
                self.stderr_tail.extend(
                    line.decode("utf-8", "replace")[:300] for line in lines if line.strip()
                )
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def _sample(self) -> None:
        while True:
            self.descendants.sample()
            await trio.sleep(SAMPLE_EVERY_S)

    @property
    def requests_sent(self) -> int:
        return self._next_id

    def unread_bytes(self) -> int:
        """Bytes queued for its stdin that it has not taken yet."""
        return self._queued - self._written

    def stderr_evidence(self) -> str:
        return " | ".join(list(self.stderr_tail)[-3:])


@asynccontextmanager
async def open_program(
    argv: list[str],
    *,
    dap: bool,
    cwd: str | None = None,
    env: Mapping[str, str | None] | None = None,
) -> AsyncIterator[Program]:
    """Start one instance of the program and a client on its stdio for the block.

    Raises:
        CoreError: ``invalid_request`` / ``launch_failed`` from :func:`open_process_tree`.

    **Cancellation:** leaving the block ends the whole tree (shielded, bounded: 500 ms of
    TERM grace, then SIGKILL).
    """
    tree = await open_process_tree(argv, cwd=cwd, env=env, stdin=PIPE, stdout=PIPE, stderr=PIPE)
    program: Program | None = None
    try:
        program = Program(tree, dap=dap)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(program._read_stdout)
            nursery.start_soon(program._write_stdin)
            nursery.start_soon(program._drain_stderr)
            nursery.start_soon(program._sample)
            nursery.start_soon(program._run_in_terminals, cwd)
            try:
                yield program
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if program is not None:
                # What ancestry saw: its marker may be unreadable by now (see note_members).
                program.descendants.sample()
                tree.note_members(program.descendants.members())
            await tree.aclose(term_grace_ms=500)
            if program is not None:
                for terminal in program.terminals:
                    await terminal.aclose(term_grace_ms=500)
