"""The ``terminal.*`` commands: PTY terminals the supervisor owns.

Contract (the plugin contract "Plugin-owned native terminals", "Close, retained context and
reopen"). The supervisor is the native terminal service: it owns each terminal's
PTY, process tree and retained display text, and a host (or later a plugin backend session,
the terminal's *owner*) drives it:

- ``terminal.create {owner?, executable, arguments?, cwd?, environment?, title?, rows?,
  cols?, retainedContextBytes?}`` -> ``{terminalID, generation: 1}``. ``cwd`` is an
  absolute path string (the supervisor has no workspace roots, so the reference's
  ``{rootID, path}`` form is refused here; ``lithe/host/terminal/*`` resolves it against the
  backend's workspace context first, :mod:`supervisor._plugin._host_terminal`). Limits in
  :mod:`._launch`; at most
  :data:`MAX_HANDLES_PER_OWNER` handles per owner, closed ones included
  (``plugin.host.limitExceeded``); a handle without owner belongs to the host.
- ``terminal.write {terminalID, data}`` -> null; ``terminal.resize {terminalID, rows, cols}``
  -> null (SIGWINCH reaches the program). Both need a running terminal
  (``plugin.host.preconditionFailed``).
- ``output {terminalID, generation, data}`` events, ordered, bounded
  (:data:`MAX_TERMINAL_EVENTS` per terminal and 4 MiB of output as JSON, oldest dropped
  with ``gap: true`` and a ``dropped``/``droppedBytes`` report), flow-controlled (output not
  taken pauses the PTY reader at 1 MiB and resumes it at 256 KiB, once the terminal's events
  were drained once: :mod:`._events`), drained by
  ``terminal.waitEvents {terminalID, timeoutMilliseconds}`` and ``terminal.pollEvents
  {terminalID}`` -> ``{events, gap}`` (:mod:`._events`). Each event's ``seq`` is
  monotonic per handle across generations and never renumbered; ``exit`` outcomes are never
  evicted by output.
- ``terminal.close {terminalID, retainedContextBytes?}`` -> ``{retainedContextBytes}``: hang-up,
  TERM and KILL of the whole tree (see :mod:`._pty`), then a rendered plain-text suffix
  of the display is kept with the launch settings.
- ``terminal.reopen {terminalID}`` -> ``{terminalID, generation, restoredContextBytes}``: the
  retained text is emitted as ``output`` of the new generation (never written to stdin), then
  the saved launch starts on a new PTY. Queued ``output`` of older generations is dropped.
- ``terminal.dispose {terminalID}`` -> null: ends a live process and forgets the handle.
- ``exit {type: "exit", terminalID, generation, exitCode, signal, signalName, reason:
  "exited" | "closed" | "internal", crashReport?, subscriptionID?}``: one event per
  generation, queued after cleanup whether or not anyone subscribed (``signal`` is the number
  of the signal that ended the program and ``signalName`` its name, both null after a normal
  exit), so a loop that drains ``terminal.waitEvents`` until the exit always ends.
- ``terminal.onExit {terminalID}`` -> ``{subscriptionID}``: a subscription to the outcomes
  (a plugin backend's ``lithe/host/terminal/onExit`` is told of each one); while it lives the
  ``exit`` events carry its ``subscriptionID``. A late subscriber is told the recorded outcome
  once (its event is already queued); one live subscription per handle, kept across reopen;
  ``terminal.disposeSubscription {subscriptionID}`` ends it and keeps the terminal.
- ``terminal.list {}`` -> ``[{terminalID, owner, title, state, generation, rows, cols,
  pid?, reason?, crashReport?, renderFallback?}]``; ``reason: "internal"`` and
  ``crashReport {exceptionType, message, stderrTail: []}`` with ``state: "failed"``.
  ``renderFallback`` (``"<Type>: <message>"``) says the current
  or last generation's display fell back to plain text because the emulator rejected what the
  program wrote (:mod:`._render`); the terminal itself is unaffected.

Cancelling a ``terminal.create`` or ``terminal.reopen`` before its spawn starts nothing
(the handle is as before); cancelling it after the spawn closes the new process at once (a
create also forgets its handle; a reopen leaves it closed, with an ``exit`` outcome
``reason: "closed"`` for the new generation). Either way nothing it started survives.

Codes: ``not_found`` (unknown or disposed handle), ``busy`` (a close, reopen or dispose is
running on the handle, or its natural-exit cleanup), ``plugin.host.preconditionFailed``,
``plugin.host.limitExceeded``, ``invalid_request``, ``launch_failed``.

Boundary: each terminal is a supervision boundary. An unexpected exception inside one of its
tasks (reader, render loop, exit watcher: :mod:`._pty`) or its cleanup ends that
terminal only: its processes end by the stop ladder (hang-up, TERM, KILL; the ladder alone
when the cleanup itself raised), its handle becomes ``failed`` (reopenable and disposable as
a closed one) and its ``exit`` outcome says ``reason: "internal"`` with a ``crashReport``.
Siblings, the Core and serve go on. Fault points: ``terminal.cleanup`` (before each end of a
generation or dispose) and ``terminal.outcome`` (after the outcome of a generation's end is
recorded, before it is delivered), besides those of :mod:`._pty`.

Ownership: every terminal task runs in the service's own nursery, inside the Core's root
nursery. :meth:`TerminalService.dispose_owner` is the hook a plugin session calls when it
ends: a terminal a plugin backend asked for (``lithe/host/terminal/create``) is created with
``owner: <sessionId>`` of that backend's session, and the Core calls ``dispose_owner`` with
that id when the session's backend process ends (``ServiceContext.owner_ended``); closing
the service (the Core) disposes every terminal, concurrently, shielded and bounded by
:class:`EndBounds`.
"""

from __future__ import annotations

import functools
import itertools
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import trio

from protocol import MAX_ECHO_BYTES, CoreError, cut_utf8, echo

from .._boundary import crash_report, fault_point, log_failure, run_contained
from .._core._service import declared
from .._session import exit_detail
from .._session._registry import SessionRegistry
from ._events import TerminalEvents
from ._launch import (
    DEFAULT_RETAINED_CONTEXT_BYTES,
    MAX_WRITE_BYTES,
    TerminalLaunch,
    parse_create,
)
from ._pty import EndBounds, TerminalProcess
from ._render import RetainedDisplay, pending_bound, utf8_suffix
from ._state import PRECONDITION_FAILED, TerminalInput, TerminalLifecycle, TerminalState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

    from protocol import JSONObject, JSONValue

    from .._api._terminal import (
        TerminalClose,
        TerminalCreate,
        TerminalDisposeSubscription,
        TerminalList,
        TerminalRef,
        TerminalResize,
        TerminalWrite,
    )
    from .._core._service import CommandHandler, ServiceContext
    from .._session._events import EventBudget

__all__ = (
    "MAX_HANDLES_PER_OWNER",
    "MAX_TERMINAL_EVENTS",
    "TerminalService",
    "open_terminal_service",
)

#: Handles one owner may hold, closed ones included (the plugin contract).
MAX_HANDLES_PER_OWNER: Final = 8
#: Events queued per terminal (ours). Memory is bounded by bytes as well
#: (:data:`._events.DEFAULT_MAX_OUTPUT_BYTES`, 4 MiB as JSON): one event carries up to
#: 64 KiB of output.
MAX_TERMINAL_EVENTS: Final = 256

_In = TerminalInput


def _display(rows: int, cols: int, budget_bytes: int) -> RetainedDisplay:
    # The render work a flood leaves for the close follows the handle's budget.
    return RetainedDisplay(rows, cols, max_pending_chars=pending_bound(budget_bytes, rows, cols))


@dataclass(eq=False)
class _Handle:
    terminal_id: str
    owner: str | None
    launch: TerminalLaunch
    title: str | None
    rows: int
    cols: int
    retained_budget: int
    events: TerminalEvents
    lifecycle: TerminalLifecycle
    generation: int = 1
    process: TerminalProcess | None = None
    retained_text: str = ""
    #: The exit outcome of the current generation, once its cleanup finished.
    outcome: JSONObject | None = None
    subscription: str | None = None
    #: Called with each outcome delivered to the subscription (a plugin backend's onExit).
    exit_listener: Callable[[JSONObject], None] | None = None
    #: Set whenever no start, cleanup or dispose runs on the handle.
    idle: trio.Event = field(default_factory=trio.Event)
    #: Why the last generation's display fell back to plain text (kept after it ended).
    render_fallback: str | None = None
    #: The crash report of the last generation when it failed (state FAILED).
    crash: JSONObject | None = None

    def wire(self) -> JSONObject:
        data: JSONObject = {
            "terminalID": self.terminal_id,
            "owner": self.owner,
            "title": self.title,
            "state": self.lifecycle.state.value,
            "generation": self.generation,
            "rows": self.rows,
            "cols": self.cols,
        }
        if self.process is not None and self.lifecycle.state is TerminalState.RUNNING:
            data["pid"] = self.process.pid
        if self.lifecycle.state is TerminalState.FAILED and self.crash is not None:
            data["reason"] = "internal"
            data["crashReport"] = self.crash
        fallback = self.render_fallback if self.process is None else self.process.display.fallback
        if fallback is not None:
            data["renderFallback"] = fallback
        return data


class TerminalService:
    """The terminal service of a Core (see the module docstring).

    Made by :func:`open_terminal_service`.

    Args:
        nursery: The service's own nursery (every terminal task runs here).
        max_events: The Core's event-queue bound (each terminal uses at most
            :data:`MAX_TERMINAL_EVENTS`).
        bounds: How long each step of ending a terminal may take.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        max_events: int,
        bounds: EndBounds,
        event_budget: EventBudget | None = None,
    ) -> None:
        self._nursery = nursery
        self._event_budget = event_budget
        self._max_events = min(max_events, MAX_TERMINAL_EVENTS)
        self._bounds = bounds
        self._handles: SessionRegistry[_Handle] = SessionRegistry(
            "term", "terminal", "terminalID", _events_of
        )
        self._subscription_ids = itertools.count(1)
        self._closing = False

    def commands(self) -> Mapping[str, CommandHandler]:
        return {
            "terminal.create": self._create,
            "terminal.write": self._write,
            "terminal.resize": self._resize,
            "terminal.close": self._close,
            "terminal.reopen": self._reopen,
            "terminal.dispose": self._dispose,
            "terminal.onExit": self._on_exit,
            "terminal.disposeSubscription": self._dispose_subscription,
            **self._handles.event_commands("terminal"),
            "terminal.list": self._list,
            "terminal.screen": self._screen,
        }

    # -- the Python-level hooks ----------------------------------------------------------

    async def dispose_owner(self, owner: str | None) -> int:
        """Dispose every terminal of ``owner`` (None: the host's), e.g. when its session ends.

        A handle in the middle of a start, close or dispose is disposed once that finishes.

        Returns:
            How many handles were disposed.

        **Cancellation:** shielded and bounded: the ends run concurrently, each bounded by
        :class:`EndBounds`.
        """
        handles = [h for h in self._handles.values() if h.owner == owner]
        return await self._dispose_many(handles)

    async def dispose_all(self) -> int:
        """Dispose every terminal (the Core is closing). Shielded and bounded as above."""
        return await self._dispose_many(list(self._handles.values()))

    async def aclose(self) -> None:
        """Refuse new terminals and dispose every one (the Core is closing); idempotent.

        **Cancellation:** shielded and bounded as :meth:`dispose_all`.
        """
        self._closing = True
        await self.dispose_all()

    def terminal_ids(self) -> tuple[str, ...]:
        """The ids of the handles that exist now."""
        return tuple(self._handles)

    def state_of(self, terminal_id: str) -> str | None:
        """The handle's state (``running``, ``closed``, ...), or None when it does not exist."""
        handle = self._handles.get(terminal_id)
        return None if handle is None else handle.lifecycle.state.value

    def launch_of(self, terminal_id: str) -> TerminalLaunch | None:
        """What the handle starts (kept across close), or None when it does not exist."""
        handle = self._handles.get(terminal_id)
        return None if handle is None else handle.launch

    def subscribe_exit(self, terminal_id: str, listener: Callable[[JSONObject], None]) -> str:
        """``terminal.onExit`` for Python callers: each outcome is also passed to
        ``listener`` (a recorded one at once), until :meth:`end_exit_subscription`.

        Raises:
            CoreError: ``not_found``; ``plugin.host.preconditionFailed`` when the handle
                already has a live subscription.
        """
        return self._subscribe(self._handles.find(terminal_id), listener)

    def end_exit_subscription(self, subscription: str) -> bool:
        """End an onExit subscription, keeping the terminal; False when none has the id."""
        for handle in self._handles.values():
            if handle.subscription == subscription:
                handle.subscription = None
                handle.exit_listener = None
                return True
        return False

    async def _dispose_many(self, handles: list[_Handle]) -> int:
        disposed = 0

        async def one(handle: _Handle) -> None:
            nonlocal disposed
            while handle.lifecycle.busy:
                await handle.idle.wait()
            if handle.lifecycle.state is TerminalState.DISPOSED:
                return
            handle.lifecycle.apply(_In.DISPOSE)
            # A fresh event: a concurrent dispose of the same handle (an owner's end while
            # the Core closes) waits for this one instead of spinning on a set event.
            handle.idle = trio.Event()
            await self._dispose_now(handle)
            disposed += 1

        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for handle in handles:
                    nursery.start_soon(one, handle)
        return disposed

    # -- helpers ---------------------------------------------------------------------

    async def _get_settled(self, terminal_id: str) -> _Handle:
        """The terminal ``payload`` names, once its own end has run.

        docs/architecture.md "The order rule": commands on one terminal take effect in
        arrival order, and the terminal's own end -- the cleanup after its program exited
        or failed, or its owner's end -- is in that order too, at the point it happened: a
        close, reopen or dispose that arrives while it runs waits for it (bounded by the
        end's own bounds) instead of being refused ``busy``.
        """
        handle = self._handles.find(terminal_id)
        while not handle.idle.is_set():
            await handle.idle.wait()
            handle = self._handles.find(terminal_id)
        return handle

    def _output_sink(self, handle: _Handle, generation: int) -> Callable[[str], int | None]:
        def on_output(text: str) -> int | None:
            # Late output of an older generation never reaches the new one.
            if handle.generation == generation and handle.lifecycle.state in (
                TerminalState.STARTING,
                TerminalState.RUNNING,
                TerminalState.CLOSING,
            ):
                return handle.events.put_output(
                    {"terminalID": handle.terminal_id, "generation": generation, "data": text}
                )
            return None

        return on_output

    async def _start(self, handle: _Handle, display: RetainedDisplay) -> None:
        """Start the handle's launch for its current generation (state STARTING)."""
        launch = handle.launch
        handle.process = await TerminalProcess.start(
            self._nursery,
            launch.argv,
            cwd=launch.cwd,
            env=launch.env(),
            rows=handle.rows,
            cols=handle.cols,
            display=display,
            on_output=self._output_sink(handle, handle.generation),
            on_exit=lambda process: self._on_process_exit(handle, process),
            on_failure=lambda process, _exc: self._on_process_failure(handle, process),
        )
        # Output nobody takes pauses this generation's reader (flow control); the next
        # generation's reader replaces it.
        handle.events.watch(handle.process)

    def _on_process_exit(self, handle: _Handle, process: TerminalProcess) -> None:
        """The waiter task saw the main process exit: run the natural-exit cleanup."""
        if handle.process is not process:
            return
        if handle.lifecycle.apply(_In.EXITED):
            handle.idle = trio.Event()
            cleanup = functools.partial(self._cleanup_after_exit, handle, process)
            self._nursery.start_soon(self._contained_cleanup, handle, cleanup)

    def _on_process_failure(self, handle: _Handle, process: TerminalProcess) -> None:
        """A generation's task raised (logged already): end the terminal as ``failed``.

        In any state but RUNNING a cleanup already runs (or ran); it sees
        ``process.failure`` and records the failure.
        """
        if handle.process is not process:
            return
        if handle.lifecycle.apply(_In.FAIL):
            handle.idle = trio.Event()
            cleanup = functools.partial(self._cleanup_after_failure, handle)
            self._nursery.start_soon(self._contained_cleanup, handle, cleanup)

    async def _cleanup_after_failure(self, handle: _Handle) -> None:
        with trio.CancelScope(shield=True):
            await self._end_generation(handle, reason="internal", keep_output=True)

    async def _contained_cleanup(
        self, handle: _Handle, cleanup: Callable[[], Awaitable[None]]
    ) -> None:
        """Run a cleanup task in the service's nursery as the terminal's boundary.

        :meth:`_end_generation` contains the end of the processes itself; this catches what
        is left (a bug in the bookkeeping after it): the handle is left ``failed`` and not
        busy, and the service, the Core and the other terminals go on.
        """

        generation = handle.generation

        async def fail(exc: Exception) -> None:
            if handle.lifecycle.state is TerminalState.DISPOSED:
                return
            handle.process = None
            handle.crash = crash_report(exc)
            handle.lifecycle.state = TerminalState.FAILED
            handle.idle.set()
            if handle.generation == generation and (
                handle.outcome is None or handle.outcome.get("reason") != "internal"
            ):
                handle.outcome = {
                    "type": "exit",
                    "terminalID": handle.terminal_id,
                    "generation": generation,
                    "exitCode": None,
                    "signal": None,
                    "signalName": None,
                    "reason": "internal",
                    "crashReport": handle.crash,
                }
                self._publish_outcome(handle)

        await run_contained(f"terminal {handle.terminal_id} cleanup", cleanup, fail)

    async def _end_process(
        self, handle: _Handle, process: TerminalProcess, *, keep_output: bool
    ) -> tuple[int | None, Exception | None]:
        """``process.end``, contained: when it raises, the stop ladder alone ends the tree.

        Returns:
            The main process's status (as :meth:`TerminalProcess.end`) and the failure that
            ended the generation: one of its tasks' (``process.failure``), the cleanup's,
            or None.
        """
        failure: Exception | None = None
        with trio.CancelScope(shield=True):
            try:
                fault_point("terminal.cleanup")
                returncode = await process.end(self._bounds, keep_output=keep_output)
            except Exception as exc:
                log_failure(f"terminal {handle.terminal_id} cleanup", exc)
                failure = exc
                returncode = await process.abort(self._bounds)
        return returncode, process.failure or failure

    async def _cleanup_after_exit(self, handle: _Handle, process: TerminalProcess) -> None:
        with trio.CancelScope(shield=True):
            # Invariant 10: the output after the exit is drained for a bounded time only.
            await process.drain(self._bounds.drain_ms)
            await self._end_generation(handle, reason="exited", keep_output=True)

    async def _end_generation(self, handle: _Handle, *, reason: str, keep_output: bool) -> None:
        """End the running process (state CLOSING), retain the display, record the outcome."""
        process = handle.process
        assert process is not None
        failure: Exception | None = None
        with trio.CancelScope(shield=True):
            try:
                returncode, failure = await self._end_process(
                    handle, process, keep_output=keep_output
                )
                handle.retained_text = process.display.snapshot(handle.retained_budget)
                handle.render_fallback = process.display.fallback
            finally:
                failure = failure or process.failure
                handle.process = None
                handle.crash = None if failure is None else crash_report(failure)
                handle.lifecycle.apply(_In.CLEANED if failure is None else _In.CLEANED_FAILED)
                handle.idle.set()
        handle.outcome = {
            "type": "exit",
            "terminalID": handle.terminal_id,
            "generation": handle.generation,
            "exitCode": None,
            "signal": None,
            "signalName": None,
            **exit_detail(returncode),
            "reason": reason if handle.crash is None else "internal",
        }
        if handle.crash is not None:
            handle.outcome["crashReport"] = handle.crash
        fault_point("terminal.outcome")
        self._publish_outcome(handle)

    def _publish_outcome(self, handle: _Handle) -> None:
        """Queue the generation's ``exit`` among the terminal's events and tell the subscriber.

        Queued whether or not anyone subscribed (issue 28: a host that drains
        ``terminal.waitEvents`` until the exit must not need ``terminal.onExit`` first);
        ``subscriptionID`` names the live subscription, when there is one.
        """
        assert handle.outcome is not None
        event = dict(handle.outcome)
        if handle.subscription is not None:
            event["subscriptionID"] = handle.subscription
        handle.events.put_outcome(event)
        if handle.exit_listener is not None:
            handle.exit_listener(dict(handle.outcome))

    async def _dispose_now(self, handle: _Handle) -> None:
        """End a live process (state DISPOSING) and forget the handle; no further events."""
        with trio.CancelScope(shield=True):
            failure: Exception | None = None
            try:
                if handle.process is not None:
                    _, failure = await self._end_process(handle, handle.process, keep_output=False)
            finally:
                handle.process = None
                handle.lifecycle.apply(_In.CLEANED if failure is None else _In.CLEANED_FAILED)
                self._handles.remove(handle.terminal_id)
                handle.retained_text = ""
                # Its waitEvents calls end with not_found.
                handle.events.close()
                handle.idle.set()

    async def _end_if_cancelled(self, handle: _Handle, *, forget: bool) -> None:
        """Close the new process when the create/reopen was cancelled during its launch.

        the plugin contract: "cancellation ... during launch closes the newly created
        process". A cancelled create also forgets the handle (``forget``): its caller never
        learned the id, so it could neither use nor dispose it, and it would hold one of the
        owner's handles. A cancelled reopen closes the new generation like
        ``terminal.close`` (its outcome says ``closed``) and keeps the handle reopenable
        with its retained text.

        **Cancellation:** re-raises the caller's cancellation after the shielded, bounded
        close.
        """
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except trio.Cancelled:
            # No checkpoint since STARTED, so the waiter task has not seen an exit: RUNNING.
            with trio.CancelScope(shield=True):
                handle.idle = trio.Event()
                if forget:
                    handle.lifecycle.apply(_In.DISPOSE)
                    await self._dispose_now(handle)
                else:
                    handle.lifecycle.apply(_In.CLOSE)
                    await self._end_generation(handle, reason="closed", keep_output=True)
            raise

    # -- commands ----------------------------------------------------------------------

    @declared
    async def _create(self, payload: TerminalCreate) -> JSONValue:
        owner, launch, title, (rows, cols), budget = parse_create(payload)
        if self._closing:
            raise CoreError("cancelled", "The supervisor is shutting down")
        held = sum(1 for h in self._handles.values() if h.owner == owner)
        if held >= MAX_HANDLES_PER_OWNER:
            raise CoreError(
                "plugin.host.limitExceeded",
                f"{'owner ' + repr(owner) if owner else 'the host'} already holds "
                f"{MAX_HANDLES_PER_OWNER} terminals (closed ones count; dispose one)",
                {"limit": MAX_HANDLES_PER_OWNER},
            )
        terminal_id = self._handles.new_id()
        handle = _Handle(
            terminal_id=terminal_id,
            owner=owner,
            launch=launch,
            title=title,
            rows=rows,
            cols=cols,
            retained_budget=budget,
            events=TerminalEvents(self._max_events, budget=self._event_budget),
            lifecycle=TerminalLifecycle(terminal_id),
        )
        # Registered before the spawn so concurrent creates count it against the limit.
        self._handles.add(terminal_id, handle)
        try:
            await self._start(handle, _display(rows, cols, budget))
        except BaseException:
            self._handles.remove(terminal_id)
            handle.idle.set()
            raise
        handle.lifecycle.apply(_In.STARTED)
        handle.idle.set()
        await self._end_if_cancelled(handle, forget=True)
        return {"terminalID": terminal_id, "generation": 1}

    @declared
    async def _write(self, payload: TerminalWrite) -> JSONValue:
        data = payload.data.encode("utf-8")  # the declaration refused lone surrogates
        if len(data) > MAX_WRITE_BYTES:
            raise CoreError(
                "invalid_request",
                f"terminal.write: data is longer than {MAX_WRITE_BYTES} bytes",
                {"field": "data"},
            )
        handle = self._handles.find(payload.terminal_id)
        handle.lifecycle.check(_In.USE)
        assert handle.process is not None
        await handle.process.write(data)
        return None

    @declared
    async def _resize(self, payload: TerminalResize) -> JSONValue:
        rows, cols = payload.rows, payload.cols
        handle = self._handles.find(payload.terminal_id)
        handle.lifecycle.check(_In.USE)
        assert handle.process is not None
        handle.process.resize(rows, cols)
        handle.rows, handle.cols = rows, cols
        return None

    @declared
    async def _close(self, payload: TerminalClose) -> JSONValue:
        handle = await self._get_settled(payload.terminal_id)
        budget = payload.retained_context_bytes
        if budget is None:
            budget = handle.retained_budget
        # A failed terminal is closed too (its process already ended): nothing to end.
        was_closed = handle.lifecycle.state in (TerminalState.CLOSED, TerminalState.FAILED)
        handle.lifecycle.apply(_In.CLOSE)
        # A budget given at close replaces the one chosen at create.
        handle.retained_budget = budget
        if was_closed:
            # Nothing runs: a smaller budget trims what is kept; a larger one can't add.
            handle.retained_text = utf8_suffix(handle.retained_text, budget)
        else:
            handle.idle = trio.Event()
            await self._end_generation(handle, reason="closed", keep_output=True)
        return {"retainedContextBytes": len(handle.retained_text.encode("utf-8"))}

    @declared
    async def _reopen(self, payload: TerminalRef) -> JSONValue:
        handle = await self._get_settled(payload.terminal_id)
        handle.lifecycle.apply(_In.REOPEN)
        handle.idle = trio.Event()
        old_generation, old_outcome = handle.generation, handle.outcome
        handle.generation += 1
        handle.outcome = None
        handle.events.keep_output_of(handle.generation)
        restored = handle.retained_text
        display = _display(handle.rows, handle.cols, handle.retained_budget)
        if restored:
            # The retained text goes to the display (an event and the new render), never
            # to the program's stdin.
            shown = restored.replace("\n", "\r\n") + "\r\n"
            # The event first, as the PTY reader does: a screen then includes its seq.
            seq = handle.events.put_output(
                {"terminalID": handle.terminal_id, "generation": handle.generation, "data": shown}
            )
            display.feed(shown, seq)
        try:
            await self._start(handle, display)
        except BaseException:
            handle.generation, handle.outcome = old_generation, old_outcome
            handle.events.keep_output_of(old_generation)
            handle.lifecycle.apply(_In.START_FAILED)
            handle.idle.set()
            raise
        handle.retained_text = ""
        handle.lifecycle.apply(_In.STARTED)
        handle.idle.set()
        await self._end_if_cancelled(handle, forget=False)
        return {
            "terminalID": handle.terminal_id,
            "generation": handle.generation,
            "restoredContextBytes": len(restored.encode("utf-8")),
        }

    @declared
    async def _dispose(self, payload: TerminalRef) -> JSONValue:
        handle = await self._get_settled(payload.terminal_id)
        handle.lifecycle.apply(_In.DISPOSE)
        handle.idle = trio.Event()
        await self._dispose_now(handle)
        return None

    @declared
    async def _on_exit(self, payload: TerminalRef) -> JSONValue:
        return {"subscriptionID": self._subscribe(self._handles.find(payload.terminal_id), None)}

    def _subscribe(self, handle: _Handle, listener: Callable[[JSONObject], None] | None) -> str:
        if handle.subscription is not None:
            raise CoreError(
                PRECONDITION_FAILED,
                f"terminal {handle.terminal_id} already has a live onExit subscription",
                {"terminalID": handle.terminal_id, "subscriptionID": handle.subscription},
            )
        handle.subscription = f"sub-{next(self._subscription_ids)}"
        handle.exit_listener = listener
        if handle.outcome is not None and listener is not None:
            # Subscribing after the exit delivers the recorded outcome once: the event is
            # already queued (every exit is), so only the listener is told now.
            listener(dict(handle.outcome))
        return handle.subscription

    @declared
    async def _dispose_subscription(self, payload: TerminalDisposeSubscription) -> JSONValue:
        subscription = payload.subscription_id
        if self.end_exit_subscription(subscription):
            return None
        raise CoreError(
            "not_found",
            f"no subscription {echo(subscription)}",
            {"subscriptionID": cut_utf8(subscription, MAX_ECHO_BYTES)},
        )

    @declared
    async def _list(self, payload: TerminalList) -> JSONValue:
        return [handle.wire() for handle in self._handles.values()]

    @declared
    async def _screen(self, payload: TerminalRef) -> JSONValue:
        """``terminal.screen {terminalID}`` -> ``{terminalID, generation, rows, cols, text,
        seq}``: the displayed text and the newest output event it includes (issue 30: a
        client that attaches draws it, then the output events after ``seq``).

        Ordered with the terminal's writes and resizes: it shows what the program made of
        the keystrokes sent before it, as far as the program has answered them.
        """
        handle = self._handles.find(payload.terminal_id)
        budget = handle.retained_budget or DEFAULT_RETAINED_CONTEXT_BYTES
        process = handle.process
        if process is None:
            # No program runs: what its last generation showed, complete up to its last
            # output (rendered when it ended). Nothing retained (retainedContextBytes 0)
            # includes no event: the client takes whatever output is still queued.
            text = handle.retained_text
            seq = handle.events.last_output_seq if text else None
        else:
            text, seq = await trio.to_thread.run_sync(process.display.screen, budget)
        return {
            "terminalID": handle.terminal_id,
            "generation": handle.generation,
            "rows": handle.rows,
            "cols": handle.cols,
            "text": text,
            "seq": seq,
        }


def _events_of(handle: _Handle) -> TerminalEvents:
    return handle.events


@asynccontextmanager
async def open_terminal_service(
    context: ServiceContext, *, bounds: EndBounds | None = None
) -> AsyncIterator[TerminalService]:
    """Open the terminal service; leaving the block disposes every terminal.

    Args:
        context: The Core's service context.
        bounds: Bounds of ending a terminal (:class:`EndBounds` defaults).

    Yields:
        The :class:`TerminalService`.

    **Cancellation:** leaving the block, however it happens, ends every terminal's process
    tree (shielded, bounded, concurrently) before it returns.
    """
    async with trio.open_nursery() as nursery:
        service = TerminalService(
            nursery, context.max_events, bounds or EndBounds(), context.event_budget
        )
        try:
            yield service
        finally:
            service._closing = True
            await service.dispose_all()
            nursery.cancel_scope.cancel()
