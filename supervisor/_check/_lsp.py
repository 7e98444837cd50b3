"""The LSP lifecycle battery: ``supervisor check lsp -- CMD ARGS...``.

Each group of checks runs against a fresh instance of the program, so one failure does not
hide the next: the main session (initialize, requests, cancel, the client that stops
reading, shutdown and exit), an instance whose stdin is closed, an instance whose client is
SIGKILLed, and a restart. What a program sends before its initialize answer, the zombies it
leaves, its leftovers and its stdout hygiene are judged over every instance
(:data:`PASSIVE_CHECKS`, reported whatever ``only`` says).

The checker is the client an editor is: it sends its own pid as ``processId`` (the vanishing
client sends its own), answers the program's requests as an editor does, and ends every
process it saw the program start (``ProcessTree.note_members``), whatever its marker says.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from protocol._payload import json_type

from .._process._procfs import read_stat
from .._process._tree import DEVNULL, PIPE, open_process_tree
from ._common import (
    REAPS_CHILDREN_RULE,
    Bounds,
    Leftovers,
    Zombies,
    behind,
    cut_json,
    describe_status,
    early_verdict,
    exit_on_eof,
    ms,
    no_answer,
    settle_zombies,
    stdout_verdict,
    workdir_of,
)
from ._peer import Program, open_program
from ._profiles import lsp_initialize_params
from ._report import ConformanceReport, Outcome
from ._watch import Descendants, describe_running

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ("LSP_CHECKS", "check_language_server")

_SPEC: Final = "LSP 3.17"
RULES: Final = {
    "initialize": f"{_SPEC} 'initialize': the first request is answered with an"
    " InitializeResult carrying 'capabilities'",
    "requests-before-initialize": f"{_SPEC} 'initialize': 'the server is not allowed to send"
    " any requests or notifications to the client until it has responded with an"
    " InitializeResult, with the exception that during the initialize request the server is"
    " allowed to send the notifications window/showMessage, window/logMessage and"
    " telemetry/event as well as the window/showMessageRequest request' ($/progress only with"
    " the client's workDoneToken; the checker sends none)",
    "requests": f"{_SPEC} base protocol / JSON-RPC 2.0 §4: every request gets a response"
    " (a result or an error; an unknown method: MethodNotFound -32601)",
    "answers-once": "JSON-RPC 2.0 §5: exactly one response per request, with that request's id",
    "cancel": f"{_SPEC} '$/cancelRequest': a cancelled request still needs a response"
    " (RequestCancelled -32800 or its result)",
    "client-stops-reading": f"{_SPEC} base protocol: a stdio server must wait for a slow"
    " client (blocking writes), never crash or drop answers",
    "shutdown-exit": f"{_SPEC} 'shutdown' answered with null, then 'exit': exit code 0"
    " (1 without shutdown); bounds 3 000 ms / 2 000 ms",
    "exit-on-eof": f"{_SPEC} 'initialize' processId: a server must not outlive its client;"
    " a stdio server sees its client go as the end of stdin",
    "client-vanishes": f"{_SPEC} 'initialize' processId: 'if the parent process is not"
    " alive then the server should exit'",
    "restart": "a client restarts a server by shutdown/exit and a new instance: the old"
    " one and its helpers are gone, the new one initializes",
    "reaps-children": REAPS_CHILDREN_RULE,
    "no-leftovers": "a server's helper processes end with it (every descendant, marked or not)",
    "stdout-frames": f"{_SPEC} base protocol: stdout carries only Content-Length frames"
    " (logs go to stderr or window/logMessage)",
}
#: Every check, in the order of the report.
LSP_CHECKS: Final = tuple(RULES)
#: Checks judged over every instance the battery ran: they run whatever ``only`` says.
PASSIVE_CHECKS: Final = (
    "requests-before-initialize",
    "reaps-children",
    "no-leftovers",
    "stdout-frames",
)

#: The document the checker opens after ``initialized`` (``didOpen``, never written to disk):
#: empty plain text, so no server has anything to analyse in it.
_DOCUMENT: Final = ".supervisor-check.txt"
#: The ordinary request: ``textDocument/documentSymbol`` on that document. An editor sends it
#: on every open (outline, breadcrumbs), and its cost is bounded by the one document, so every
#: server answers it at once (a server without it answers MethodNotFound: an answer too).
#: ``workspace/symbol`` with an empty query, the request used before, has a server index the
#: whole workspace and environment (jedi-language-server: 41 s on a cold cache), and an
#: editor never sends it at start; a server that works through requests in turn then failed
#: every later check behind it.
_ORDINARY_METHOD: Final = "textDocument/documentSymbol"
#: A method no server implements.
_UNKNOWN: Final = "conformance/unknownMethod"
#: Requests queued while the client does not read, and the padding of each (bytes).
#: Enough that even short error answers (about 90 bytes each) overfill a 64 KiB pipe.
_STALL_REQUESTS: Final = 1000
_STALL_PAD: Final = 256


class _Battery:
    def __init__(
        self,
        argv: list[str],
        client: str,
        cwd: str,
        bounds: Bounds,
        only: Collection[str] | None,
    ) -> None:
        self.argv = argv
        self.client = client
        self.cwd = cwd
        self.bounds = bounds
        self.only = only
        self.report = ConformanceReport("lsp", list(argv), client)
        self.leftovers = Leftovers()
        self.zombies = Zombies()
        self.framed: list[Program] = []
        #: What the vanishing client's instance sent before its initialize answer.
        self.early_elsewhere: list[list[str]] = []
        self.results: dict[str, tuple[Outcome, str]] = {}
        self.document_uri = Path(cwd, _DOCUMENT).as_uri()
        #: The capabilities of the main session's instance (its InitializeResult).
        self.capabilities: dict[str, Any] = {}

    def wants(self, *checks: str) -> bool:
        return self.only is None or any(c in self.only for c in checks)

    def note(self, check: str, outcome: Outcome, evidence: str) -> None:
        self.results[check] = (outcome, evidence)

    def params(self) -> dict[str, Any]:
        # The checker is the client of these instances, and it lives on: its own pid.
        return lsp_initialize_params(self.client, root=self.cwd, pid=os.getpid())

    def started(self, program: Program) -> None:
        self.framed.append(program)
        self.zombies.watch(program.descendants)

    async def initialize(self, program: Program) -> tuple[bool, str]:
        answer, waited = await program.request(
            "initialize", self.params(), timeout_s=self.bounds.initialize
        )
        if answer is None:
            why = await no_answer(program, self.bounds.initialize)
            if program.tree.returncode is not None:
                await self.leftovers.after_exit(program, "after it exited during initialize")
            tail = program.stderr_evidence()
            return False, why + (f"; stderr: {tail}" if tail else "")
        result = answer.get("result")
        if "error" in answer:
            return False, f"answered with an error: {cut_json(answer['error'])}"
        if not isinstance(result, dict):
            return False, (
                f"answered with {json_type(result)}"
                + ("" if result is None else f" ({cut_json(result)})")
                + ", not an InitializeResult object"
            )
        capabilities = result.get("capabilities")
        if not isinstance(capabilities, dict):
            return False, "the result has no 'capabilities' object"
        program.notify("initialized", {})
        self.capabilities = capabilities
        info = result.get("serverInfo")
        name = info.get("name") if isinstance(info, dict) else None
        return True, (
            f"answered in {ms(waited)}; {len(capabilities)} capabilities"
            + (f"; serverInfo {name!r}" if name else "")
        )

    # -- the main session ----------------------------------------------------------------

    async def main_session(self) -> None:
        async with open_program(self.argv, dap=False, cwd=self.cwd) as program:
            self.started(program)
            ok, evidence = await self.initialize(program)
            self.note("initialize", Outcome.PASS if ok else Outcome.FAIL, evidence)
            if not ok:
                for check in ("requests", "cancel", "client-stops-reading", "shutdown-exit"):
                    self.note(check, Outcome.SKIP, "initialize failed")
                return
            program.notify(
                "textDocument/didOpen",
                {
                    "textDocument": {
                        "uri": self.document_uri,
                        "languageId": "plaintext",
                        "version": 1,
                        "text": "",
                    }
                },
            )
            if self.wants("requests", "answers-once"):
                await self.requests(program)
            if self.wants("cancel"):
                await self.cancel(program)
            if self.wants("client-stops-reading"):
                await self.stop_reading(program)
            await settle_zombies(program.descendants)
            if program.tree.returncode is None:
                await self.shutdown_exit(program)
            else:
                self.note("shutdown-exit", Outcome.FAIL, "it had already exited")
            # Late duplicates and strays have had the whole session to show.
            if program.duplicate_answers or program.unknown_answers:
                self.note(
                    "answers-once",
                    Outcome.FAIL,
                    f"{len(program.duplicate_answers)} second answers (ids"
                    f" {program.duplicate_answers[:5]}), {len(program.unknown_answers)}"
                    f" answers to ids never sent ({program.unknown_answers[:5]})",
                )
            else:
                self.note(
                    "answers-once",
                    Outcome.PASS,
                    f"{program.requests_sent} requests, one answer each",
                )

    def send_ordinary(self, program: Program) -> object:
        """Send the ordinary request (:data:`_ORDINARY_METHOD`); returns its id."""
        return program.send_request(_ORDINARY_METHOD, {"textDocument": {"uri": self.document_uri}})

    async def requests(self, program: Program) -> None:
        start = trio.current_time()
        ids = {
            self.send_ordinary(program): _ORDINARY_METHOD,
            program.send_request(_UNKNOWN, {}): _UNKNOWN,
        }
        parts: list[str] = []
        failed = False
        for rid, method in ids.items():
            left = max(0.0, start + self.bounds.request - trio.current_time())
            answer = await program.wait_answer(rid, left)
            if answer is None:
                failed = True
                status = program.tree.returncode
                parts.append(
                    f"{method}: no answer in {ms(self.bounds.request)}"
                    + (f" ({describe_status(status)})" if status is not None else "")
                    + behind(program, rid)
                )
                continue
            error = answer.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            parts.append(f"{method}: " + ("a result" if code is None else f"error {code}"))
            if method == _ORDINARY_METHOD and not self.capabilities.get("documentSymbolProvider"):
                parts[-1] += " (not advertised)"
        parts.append(f"within {ms(trio.current_time() - start)}")
        self.note("requests", Outcome.FAIL if failed else Outcome.PASS, "; ".join(parts))

    async def cancel(self, program: Program) -> None:
        # The cancel follows the request at once: it reaches the server while the request
        # is read or worked on, the case a client's stale-request cancel produces.
        rid = self.send_ordinary(program)
        program.notify("$/cancelRequest", {"id": rid})
        answer = await program.wait_answer(rid, self.bounds.request)
        if answer is None:
            self.note(
                "cancel",
                Outcome.FAIL,
                f"the cancelled request got no response in {ms(self.bounds.request)}"
                " (dropped: the client waits forever)" + behind(program, rid),
            )
            return
        error = answer.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        how = (
            "its result"
            if code is None
            else "RequestCancelled (-32800)"
            if code == -32800
            else f"error {code}"
        )
        self.note(
            "cancel", Outcome.PASS, f"{_ORDINARY_METHOD} cancelled at once: answered with {how}"
        )

    async def stop_reading(self, program: Program) -> None:
        program.pause_reading()
        pad = "x" * _STALL_PAD
        ids = [program.send_request(_UNKNOWN, {"pad": pad}) for _ in range(_STALL_REQUESTS)]
        await trio.sleep(self.bounds.stall)
        status = program.tree.returncode
        alive = status is None
        read_before = program.bytes_read
        program.resume_reading()
        start = trio.current_time()
        missing = 0
        for rid in ids:
            left = max(0.0, start + self.bounds.request - trio.current_time())
            if await program.wait_answer(rid, left) is None:
                missing += 1
        took = trio.current_time() - start
        queued = f"{_STALL_REQUESTS} requests"
        backlog = (program.bytes_read - read_before) // 1024
        if not alive:
            self.note(
                "client-stops-reading",
                Outcome.FAIL,
                f"{describe_status(status)} while the client did not read for"
                f" {ms(self.bounds.stall)} with {queued} sent"
                + (f"; stderr: {program.stderr_evidence()}" if program.stderr_tail else ""),
            )
        elif missing:
            self.note(
                "client-stops-reading",
                Outcome.FAIL,
                f"still running, but {missing} of {queued} never answered after reading resumed"
                + behind(program, ids[0]),
            )
        else:
            self.note(
                "client-stops-reading",
                Outcome.PASS,
                f"waited while not read for {ms(self.bounds.stall)} with {queued} sent;"
                f" all answered ({backlog} KiB) {ms(took)} after reading resumed",
            )

    async def shutdown_exit(self, program: Program) -> None:
        sent = trio.current_time()
        rid = program.send_request("shutdown", None)
        answer = await program.wait_answer(rid, self.bounds.shutdown)
        waited = trio.current_time() - sent
        parts: list[str] = []
        ok = True
        if answer is None:
            ok = False
            parts.append(f"no shutdown answer in {ms(self.bounds.shutdown)}{behind(program, rid)}")
        elif "error" in answer:
            ok = False
            parts.append(f"shutdown answered with an error {json.dumps(answer['error'])[:150]}")
        else:
            parts.append(f"shutdown answered in {ms(waited)}")
        program.notify("exit")
        start = trio.current_time()
        rc = await program.wait_exit(self.bounds.exit)
        if rc is None:
            ok = False
            parts.append(f"still running {ms(self.bounds.exit)} after exit")
        else:
            parts.append(f"{describe_status(rc)} {ms(trio.current_time() - start)} after exit")
            if rc != 0:
                ok = False
            await self.leftovers.after_exit(program, "after shutdown/exit")
        self.note("shutdown-exit", Outcome.PASS if ok else Outcome.FAIL, "; ".join(parts))

    # -- stdin EOF -----------------------------------------------------------------------

    async def eof_session(self) -> None:
        async with open_program(self.argv, dap=False, cwd=self.cwd) as program:
            self.started(program)
            ok, evidence = await self.initialize(program)
            if not ok:
                self.note("exit-on-eof", Outcome.SKIP, f"initialize failed: {evidence}")
                return
            await settle_zombies(program.descendants)
            await exit_on_eof(program, self.bounds.eof_exit, self.leftovers, self.note)

    # -- the client vanishes -------------------------------------------------------------

    async def vanish(self) -> None:
        await vanish_check(self, "lsp", self.params())

    # -- restart -------------------------------------------------------------------------

    async def restart(self) -> None:
        async with open_program(self.argv, dap=False, cwd=self.cwd) as old:
            self.started(old)
            ok, evidence = await self.initialize(old)
            if not ok:
                self.note("restart", Outcome.SKIP, f"initialize failed: {evidence}")
                return
            await settle_zombies(old.descendants)
            await old.request("shutdown", None, timeout_s=self.bounds.shutdown)
            old.notify("exit")
            await old.wait_exit(self.bounds.exit)
            async with open_program(self.argv, dap=False, cwd=self.cwd) as new:
                self.started(new)
                ok, evidence = await self.initialize(new)
                left = old.descendants.alive()
                if old.descendants.root_alive():
                    left[old.tree.pid] = "the old instance itself"
                parts: list[str] = []
                if left:
                    parts.append(
                        "when the new instance was ready the old one had " + describe_running(left)
                    )
                if not ok:
                    parts.append(f"the new instance did not initialize: {evidence}")
                if parts:
                    self.note("restart", Outcome.FAIL, "; ".join(parts))
                else:
                    self.note(
                        "restart",
                        Outcome.PASS,
                        f"the old instance was gone when the new one was ready ({evidence})",
                    )
                await settle_zombies(new.descendants)
                await new.request("shutdown", None, timeout_s=self.bounds.shutdown)
                new.notify("exit")
                await new.wait_exit(self.bounds.exit)

    async def run(self) -> ConformanceReport:
        await self.main_session()
        if self.wants("exit-on-eof"):
            await self.eof_session()
        if self.wants("client-vanishes"):
            await self.vanish()
        if self.wants("restart"):
            await self.restart()
        judge_passive(self)
        for check in LSP_CHECKS:
            wanted = self.only is None or check in self.only or check == "initialize"
            if wanted or check in PASSIVE_CHECKS:
                outcome, evidence = self.results.get(check, (Outcome.SKIP, "not run"))
                self.report.add(check, outcome, evidence, RULES[check])
        return self.report


def judge_passive(battery: Any) -> None:
    """Note the checks judged over every instance of ``battery`` (either protocol's)."""
    battery.note(
        "requests-before-initialize", *early_verdict(battery.framed, battery.early_elsewhere)
    )
    battery.note("reaps-children", *battery.zombies.verdict())
    battery.note("no-leftovers", *battery.leftovers.verdict())
    battery.note("stdout-frames", *stdout_verdict(battery.framed))


async def vanish_check(battery: Any, protocol: str, params: dict[str, Any]) -> None:
    """Start the program under a helper client, SIGKILL the client, watch the program."""
    bounds: Bounds = battery.bounds
    helper = [
        sys.executable,
        "-m",
        "supervisor._check._vanish",
        protocol,
        json.dumps(params),
        # Its own bound, so it reports an unanswered initialize before we stop waiting.
        repr(bounds.initialize),
        "--",
        *battery.argv,
    ]
    tree = await open_process_tree(
        helper, cwd=battery.cwd, stdin=DEVNULL, stdout=PIPE, stderr=DEVNULL
    )
    watch: Descendants | None = None
    try:
        assert tree.stdout is not None
        line = b""
        with trio.move_on_after(bounds.initialize + 10):
            while not line.endswith(b"\n"):
                chunk = await tree.stdout.receive_some(4096)
                if not chunk:
                    break
                line += chunk
        try:
            hello = json.loads(line)
            pid = int(hello["pid"])
        except (ValueError, KeyError, TypeError):
            battery.note("client-vanishes", Outcome.SKIP, "the helper client did not start it")
            return
        watch = Descendants(pid, tree.marker, exclude={tree.pid})
        if not hello.get("initialized"):
            battery.note("client-vanishes", Outcome.SKIP, "initialize failed under the helper")
            return
        early = hello.get("early")
        battery.early_elsewhere.append([str(m) for m in early] if isinstance(early, list) else [])
        battery.zombies.watch(watch)
        for _ in range(5):
            watch.sample()
            await trio.sleep(0.02)
        await settle_zombies(watch)
        os.kill(tree.pid, signal.SIGKILL)
        start = trio.current_time()
        # Collected at once, as a dead editor is by its parent: a server that watches its
        # processId with kill(pid, 0) must not see our zombie as a live client.
        with trio.move_on_after(1.0):
            await tree.wait()
        status: int | None = None
        gone = False
        while trio.current_time() - start < bounds.vanish_exit:
            watch.sample()
            st = read_stat(pid)
            if st is None or st.dead:
                gone = True
                if st is not None:
                    # Adopted by us (the child subreaper): collect how it ended.
                    with contextlib.suppress(ChildProcessError, OSError):
                        wpid, raw = os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks
                        if wpid == pid:
                            status = os.waitstatus_to_exitcode(raw)
                break
            await trio.sleep(0.02)
        took = ms(trio.current_time() - start)
        if not gone:
            battery.note(
                "client-vanishes",
                Outcome.FAIL,
                f"still running {ms(bounds.vanish_exit)} after its client was SIGKILLed",
            )
            return
        how = describe_status(status) if status is not None else "exited"
        leftover_deadline = trio.current_time() + 1.0
        live = watch.alive()
        while live and trio.current_time() < leftover_deadline:
            await trio.sleep(0.05)
            live = watch.alive()
        if live:
            battery.note(
                "client-vanishes",
                Outcome.FAIL,
                f"{how} {took} after its client was SIGKILLed, but " + describe_running(live),
            )
            return
        battery.note(
            "client-vanishes",
            Outcome.PASS,
            f"{how} {took} after its client was SIGKILLed; nothing of it left",
        )
    finally:
        with trio.CancelScope(shield=True):
            if watch is not None:
                # The program is not the tree's main process, and may have left the helper's
                # session: what ancestry saw is how the end finds it and its helpers.
                watch.sample()
                tree.note_members(watch.members())
            await tree.aclose(term_grace_ms=500)


async def check_language_server(
    argv: list[str],
    *,
    client: str = "vscode",
    cwd: str | None = None,
    bounds: Bounds | None = None,
    only: Collection[str] | None = None,
) -> ConformanceReport:
    """Run the LSP lifecycle battery against ``argv`` and return the report.

    Args:
        argv: The server's command line (no shell).
        client: The client-capability profile (``vscode``, ``neovim``, ``helix``).
        cwd: The workspace folder and working directory (default: ours).
        bounds: The time bounds (default :class:`Bounds`).
        only: Run only these checks (``initialize`` always runs).

    Returns:
        A :class:`ConformanceReport`; ``report.ok`` is False when a check failed.

    Raises:
        ValueError: An unknown client profile or check name.
        CoreError: ``invalid_request``/``launch_failed``: the program cannot be started.

    **Cancellation:** every instance the battery started is ended before this returns or
    raises (shielded, bounded).
    """
    lsp_initialize_params(client, root="/", pid=0)  # refuses an unknown profile up front
    if only is not None:
        unknown = set(only) - set(LSP_CHECKS)
        if unknown:
            raise ValueError(f"unknown check(s) {sorted(unknown)}; known: {', '.join(LSP_CHECKS)}")
    workdir = workdir_of(cwd)
    return await _Battery(list(argv), client, workdir, bounds or Bounds(), only).run()
