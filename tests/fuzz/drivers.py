"""Drive fuzzed requests through the Core (``CoreThread``) and through ``supervisor serve``.

Both drivers send JSON *text* (so hostile tokens reach the edge as a client sends them) and
return one :class:`Answer` per request; what every answer must satisfy is in
:func:`check_answer`, and :func:`run_fuzz` runs Hypothesis examples of 1-4 requests each,
pinging after every request and ending what an example started afterwards.

Properties checked (issue 13 "Done when"): every request gets exactly one answer, within a
bound (a request still running after :data:`CANCEL_AFTER_S` is cancelled and must still be
answered); no answer is ``internal`` (a failure the command did not foresee); every code is
in the catalog and every message within 1024 UTF-8 bytes; ``core.ping`` answers after each
request (nothing but that request ended); memory stays bounded; and, checked by the callers,
no process outlives the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from protocol import (
    EOF,
    ERROR_CATALOG,
    MAX_MESSAGE_BYTES,
    NEED_DATA,
    ErrorCode,
    Frame,
    FrameDecoder,
)
from tests._procfs import serving_pid

from .strategies import Context, Request, requests, strict_json, to_json_text

if TYPE_CHECKING:
    from collections.abc import Iterator

    from supervisor import CoreThread

__all__ = (
    "Answer",
    "CoreDriver",
    "FuzzStats",
    "ServeDriver",
    "check_answer",
    "run_fuzz",
    "serve_leftovers",
    "workdir",
)

#: A request still unanswered after this long is cancelled (it must then be answered).
CANCEL_AFTER_S = 3.0
#: After the cancel, how long the answer may take (the tree end's grace and kill wait).
ANSWER_AFTER_CANCEL_S = 20.0
#: The envelope deadline the Core driver gives every request (the Core ends it timed_out).
ENVELOPE_DEADLINE_MS = 3000
_CODES = frozenset(entry.name for entry in ERROR_CATALOG)
_JSONRPC_NUMBERS = frozenset(int(code) for code in ErrorCode)


class FuzzFailure(AssertionError):
    """A property of the edge did not hold."""


@dataclass
class Answer:
    """One answer, the same shape from either driver.

    Attributes:
        ok: Whether it carries a result.
        data: The result (``ok``) or None.
        code: The Core code of an error (serve: ``error.data.code``, else the JSON-RPC
            number as text), None when ``ok``.
        message: The error message ("" when ``ok``).
        request_id: The id the answer names (None: the request could not be read).
    """

    ok: bool
    data: Any
    code: str | None
    message: str
    request_id: object


@dataclass
class FuzzStats:
    """Counts of a fuzz run.

    Attributes:
        examples: Hypothesis examples run.
        requests: Fuzzed requests sent (pings and clean-up calls not included).
        answers: Answers to them (always equal to ``requests`` when the run passed).
        ok: Answers that carried a result.
        errors: Error answers by code.
        started: Requests answered with a result, by command.
        cancelled_by_driver: Requests the driver cancelled after :data:`CANCEL_AFTER_S`.
        pings: ``core.ping`` calls after a request, all answered.
        session_deaths: Times the Core or serve stopped answering (0 when the run passed).
        peak_rss_bytes: The peak resident size of the process under test (``VmHWM``).
    """

    examples: int = 0
    requests: int = 0
    answers: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)
    cancelled_by_driver: int = 0
    pings: int = 0
    session_deaths: int = 0
    peak_rss_bytes: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "examples": self.examples,
            "requests": self.requests,
            "answers": self.answers,
            "ok": self.ok,
            "errors": dict(sorted(self.errors.items())),
            "started": dict(sorted(self.started.items())),
            "cancelledByDriver": self.cancelled_by_driver,
            "pings": self.pings,
            "sessionDeaths": self.session_deaths,
            "peakRssMiB": round(self.peak_rss_bytes / 2**20, 1),
        }


def peak_rss_bytes(pid: int | None = None) -> int:
    """``VmHWM`` of a process (this one by default), in bytes; 0 when unreadable."""
    try:
        with open(f"/proc/{pid or 'self'}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def check_answer(answer: Answer, request_id: int, request_text: str) -> None:
    """Raise :class:`FuzzFailure` when ``answer`` breaks a property of the edge."""
    if answer.request_id != request_id and not (
        answer.request_id is None and not strict_json(request_text)
    ):
        raise FuzzFailure(f"the answer names id {answer.request_id!r}, not {request_id}")
    if answer.ok:
        return
    code = answer.code
    if code is None or (code not in _CODES and not _is_jsonrpc_number(code)):
        raise FuzzFailure(f"an error code outside the catalog: {code!r}")
    if code in ("internal", str(int(ErrorCode.INTERNAL_ERROR))):
        raise FuzzFailure(f"answered internal (a failure not foreseen): {answer.message}")
    if len(answer.message.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
        raise FuzzFailure(f"a message of {len(answer.message.encode())} bytes")


def _is_jsonrpc_number(code: str) -> bool:
    try:
        return int(code) in _JSONRPC_NUMBERS
    except ValueError:
        return False


# -- the Core, through CoreThread ---------------------------------------------------------


class CoreDriver:
    """Requests as envelope JSON text through :meth:`CoreThread.execute_json`."""

    def __init__(self, core: CoreThread) -> None:
        self.core = core
        self._next_id = 0

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def envelope(self, request_id: int, command: str, payload_text: str) -> str:
        return (
            f'{{"id": {request_id}, "command": {to_json_text(command)},'
            f' "timeoutMilliseconds": {ENVELOPE_DEADLINE_MS}, "payload": {payload_text}}}'
        )

    def send(self, command: str, payload_text: str, stats: FuzzStats | None = None) -> Answer:
        request_id = self.next_id()
        text = self.envelope(request_id, command, payload_text)
        box: list[str] = []
        worker = threading.Thread(target=lambda: box.append(self.core.execute_json(text)))
        worker.start()
        worker.join(CANCEL_AFTER_S + ANSWER_AFTER_CANCEL_S + ENVELOPE_DEADLINE_MS / 1000)
        if not box:
            raise FuzzFailure(f"no answer to {command!r} within the bound")
        response = json.loads(box[0])
        error = response.get("error") or {}
        answer = Answer(
            ok=response.get("ok") is True,
            data=response.get("data"),
            code=None if response.get("ok") else error.get("code"),
            message=error.get("message", ""),
            request_id=response.get("id"),
        )
        check_answer(answer, request_id, text)
        return answer

    def peak_rss(self) -> int:
        return peak_rss_bytes()


# -- supervisor serve, a real subprocess over stdio ------------------------------------------


class ServeDriver:
    """Requests as JSON-RPC frames to ``python -m supervisor serve``; one reader thread."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        #: Answers seen per id: more than one for an id is a failure.
        self.seen: dict[object, int] = {}
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        initialized = self.call("initialize", '{"capabilities": {}}')
        if not initialized.ok:
            raise FuzzFailure(f"initialize failed: {initialized.message}")

    def _read(self) -> None:
        decoder = FrameDecoder(max_body_bytes=256 * 1024 * 1024)
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            event = decoder.next_event()
            if isinstance(event, Frame):
                message = json.loads(event.body)
                if "id" in message and "method" not in message:
                    key = json.dumps(message["id"])
                    self.seen[key] = self.seen.get(key, 0) + 1
                    self._answers.put(message)
            elif event is EOF:
                return
            elif event is NEED_DATA:
                data = stdout.read1(1 << 16)  # type: ignore[attr-defined]
                if data:
                    decoder.receive_data(data)
                else:
                    decoder.receive_eof()

    def _write(self, text: str) -> None:
        body = text.encode("utf-8")
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        stdin.flush()

    def _wait_for(self, request_id: int, text: str, until: float) -> dict[str, Any] | None:
        accept_null = not strict_json(text)
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return None
            try:
                message = self._answers.get(timeout=left)
            except queue.Empty:
                return None
            if message.get("id") == request_id or (accept_null and message.get("id") is None):
                return message
            # An answer to an earlier request that was cancelled and answered late.

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def call(self, method: str, params_text: str, stats: FuzzStats | None = None) -> Answer:
        request_id = self.next_id()
        text = (
            f'{{"jsonrpc": "2.0", "id": {request_id}, "method": {to_json_text(method)},'
            f' "params": {params_text}}}'
        )
        self._write(text)
        message = self._wait_for(request_id, text, time.monotonic() + CANCEL_AFTER_S)
        if message is None:
            if stats is not None:
                stats.cancelled_by_driver += 1
            self._write(
                json.dumps(
                    {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": request_id}}
                )
            )
            message = self._wait_for(request_id, text, time.monotonic() + ANSWER_AFTER_CANCEL_S)
        if message is None:
            raise FuzzFailure(f"no answer to {method!r} (id {request_id}), even after a cancel")
        if self.process.poll() is not None:
            raise FuzzFailure(f"serve exited with {self.process.returncode}")
        error = message.get("error")
        if error is None:
            answer = Answer(True, message.get("result"), None, "", message.get("id"))
        else:
            data = error.get("data")
            code = data.get("code") if isinstance(data, dict) and "code" in data else None
            answer = Answer(
                False,
                None,
                str(code) if code is not None else str(error.get("code")),
                str(error.get("message", "")),
                message.get("id"),
            )
        check_answer(answer, request_id, text)
        return answer

    send = call

    def duplicates(self) -> list[object]:
        """Ids answered more than once (null excepted: every unreadable request has it)."""
        return [key for key, count in self.seen.items() if count > 1 and key != "null"]

    def peak_rss(self) -> int:
        return peak_rss_bytes(serving_pid(self.process.pid))  # the worker, not its guardian

    def close(self) -> int:
        """``shutdown`` then ``exit``; return serve's exit status (0 expected)."""
        with contextlib.suppress(FuzzFailure, OSError):
            self.call("shutdown", "null")
            self._write('{"jsonrpc": "2.0", "method": "exit"}')
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return -9
        finally:
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


Driver = CoreDriver | ServeDriver


# -- examples ---------------------------------------------------------------------------


def _learn(ctx: Context, command: str, answer: Answer) -> None:
    if not answer.ok or not isinstance(answer.data, dict):
        return
    for kind, key in (
        ("job", "jobId"),
        ("lsp" if command.startswith("lsp.") else "debug", "sessionId"),
        ("terminal", "terminalID"),
        ("subscription", "subscriptionID"),
    ):
        if key in answer.data:
            ctx.remember(kind, answer.data[key])


def _ping(driver: Driver, stats: FuzzStats) -> None:
    answer = driver.send("core.ping", "{}")
    if not answer.ok:
        stats.session_deaths += 1
        raise FuzzFailure(f"core.ping failed after a request: {answer.code} {answer.message}")
    stats.pings += 1


def _quiet(driver: Driver, command: str, payload: dict[str, object]) -> Answer | None:
    with contextlib.suppress(FuzzFailure):
        return driver.send(command, json.dumps(payload))
    return None


def _listed(driver: Driver, command: str, key: str) -> list[object]:
    answer = _quiet(driver, command, {})
    items = answer.data if answer is not None and isinstance(answer.data, list) else []
    return [item.get(key) for item in items if isinstance(item, dict)]


def reset(driver: Driver, ctx: Context) -> None:
    """End what an example started: terminals, sessions, jobs; forget their ids.

    Raises:
        FuzzFailure: A terminal or debug session is still listed afterwards.
    """
    for terminal_id in _listed(driver, "terminal.list", "terminalID"):
        # A terminal whose program just exited runs its bounded cleanup, and a dispose
        # meanwhile is refused busy (plugin-contract.md): ask again until it is done.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            answer = _quiet(driver, "terminal.dispose", {"terminalID": terminal_id})
            if answer is None or answer.code != "busy":
                break
            time.sleep(0.02)
    for session_id in {
        *_listed(driver, "debug.listSessions", "sessionId"),
        *ctx.ids.get("debug", []),
    }:
        _quiet(driver, "debug.disconnect", {"sessionId": session_id})
        _quiet(driver, "debug.destroySession", {"sessionId": session_id})
    for session_id in ctx.ids.get("lsp", []):
        _quiet(driver, "lsp.stopServer", {"sessionId": session_id})
        _quiet(driver, "lsp.destroyServer", {"sessionId": session_id})
    for job_id in _listed(driver, "job.list", "id"):
        _quiet(driver, "job.cancel", {"jobId": job_id})  # a finished job: cancelled false
    _quiet(driver, "job.pollEvents", {})
    ctx.ids.clear()
    left = _listed(driver, "terminal.list", "terminalID") + _listed(
        driver, "debug.listSessions", "sessionId"
    )
    if left:
        raise FuzzFailure(f"still listed after their disposal: {left}")


def run_one(driver: Driver, ctx: Context, request: Request, stats: FuzzStats) -> Answer:
    """Send one fuzzed request, check its answer, then check that ``core.ping`` answers."""
    payload_text = to_json_text(request.payload)
    stats.requests += 1
    answer = driver.send(request.command, payload_text, stats)
    stats.answers += 1
    if answer.ok:
        stats.ok += 1
        stats.started[request.command] = stats.started.get(request.command, 0) + 1
    else:
        stats.errors[str(answer.code)] = stats.errors.get(str(answer.code), 0) + 1
    _learn(ctx, request.command, answer)
    _ping(driver, stats)
    return answer


def run_fuzz(
    driver: Driver,
    ctx: Context,
    *,
    max_examples: int,
    derandomize: bool = True,
    seed: int | None = None,
    max_rss_bytes: int = 1536 * 1024 * 1024,
) -> FuzzStats:
    """Run ``max_examples`` Hypothesis examples (1-4 requests each) against ``driver``.

    Raises:
        FuzzFailure (through Hypothesis, with the failing example): a property broke.
    """
    stats = FuzzStats()

    @settings(
        max_examples=max_examples,
        derandomize=derandomize and seed is None,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
        print_blob=False,
    )
    @given(st.data())
    def example(data: st.DataObject) -> None:
        stats.examples += 1
        try:
            for _ in range(data.draw(st.integers(1, 4), label="requests")):
                request = data.draw(requests(ctx), label="request")
                run_one(driver, ctx, request, stats)
        finally:
            reset(driver, ctx)
        rss = driver.peak_rss()
        stats.peak_rss_bytes = max(stats.peak_rss_bytes, rss)
        if rss > max_rss_bytes:
            raise FuzzFailure(f"peak RSS {rss >> 20} MiB over the bound {max_rss_bytes >> 20} MiB")

    if seed is not None:
        example = _seeded(example, seed)
    example()
    return stats


def _seeded(test: Any, seed: int) -> Any:
    from hypothesis import seed as hypothesis_seed

    return hypothesis_seed(seed)(test)


def serve_leftovers(serve_pid: int) -> list[int]:
    """Live processes started by the serve process ``serve_pid`` (by their scope marker)."""
    from supervisor import SCOPE_ENV
    from supervisor._process._procfs import all_pids, read_env_var, read_stat

    found: list[int] = []
    for pid in all_pids():
        marker = read_env_var(pid, SCOPE_ENV)
        if marker is not None and marker.split("/", 1)[0].split(".", 1)[0] == str(serve_pid):
            stat = read_stat(pid)
            if stat is not None and not stat.dead:
                found.append(pid)
    return found


@contextlib.contextmanager
def workdir(base: str) -> Iterator[Context]:
    """A :class:`Context` whose directory holds one plain file (a path that is no dir)."""
    with open(os.path.join(base, "a-file"), "w") as f:
        f.write("x")
    yield Context(workdir=base)
