"""The blocking facades of the session clients, over a :class:`~supervisor.CoreThread`.

``with core_thread.language_server(["pylsp"], root_uri=root) as server:`` gives a
:class:`SyncLspClient` with the methods of :class:`~supervisor.LspClient`, blocking and
typed: a sync program, or an asyncio one through ``asyncio.to_thread``, gets lsprotocol
results and the client's errors, not JSON text.

Strategy: the Trio client lives on the Core's thread, inside a task of the CoreThread's own
nursery that holds its ``async with`` open until :meth:`SyncLspClient.close`. Each call is
handed to the Core's loop with ``TrioToken.run_sync_soon`` and waited for on a
:class:`threading.Event`, so it may come from any thread -- a plain one, an asyncio loop's,
or another Trio loop's (``trio.from_thread`` refuses those) -- except the Core's own.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Self, TypeVar, final

import outcome
import trio

from .._handles import NoPublicConstructor

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType

    from lsprotocol import types as lsp

    from protocol import JSONObject, JSONValue

    from .._api._debug import (
        DebugContinued,
        DebugDisconnectResult,
        DebugEvent,
        DebugOutput,
        DebugStopped,
        DebugTerminated,
    )
    from .._api._lsp import LspLog, LspSnapshotResult, LspStopResult
    from ._dap import DapClient
    from ._lsp import Document, LspClient

__all__ = ("Portal", "SyncDapClient", "SyncLspClient")

_T = TypeVar("_T")


class _Closed(RuntimeError):
    pass


@final
class Portal(metaclass=NoPublicConstructor):
    """Runs work on a CoreThread's Trio loop from any other thread, blocking the caller.

    Made by :class:`~supervisor.CoreThread`; the clients' facades use it.
    """

    def __init__(
        self, token: trio.lowlevel.TrioToken, nursery: trio.Nursery, thread: threading.Thread
    ) -> None:
        self._token = token
        self._nursery = nursery
        self._thread = thread
        #: Events callers block on: set by :meth:`abandon` when the Core's run has ended (a
        #: callback queued after the run's last pass never runs).
        self._waiting: set[threading.Event] = set()
        self._lock = threading.Lock()
        self._abandoned = False

    def _check_thread(self) -> None:
        if threading.current_thread() is self._thread:
            raise RuntimeError("a blocking client call from the Core's own thread would deadlock")

    def _track(self, *events: threading.Event) -> None:
        with self._lock:
            if self._abandoned:
                raise _Closed("the CoreThread is not running")
            self._waiting.update(events)

    def _submit(self, schedule: Callable[[], None], done: threading.Event) -> None:
        self._check_thread()
        self._track(done)
        try:
            self._token.run_sync_soon(schedule)
        except trio.RunFinishedError:
            raise _Closed("the CoreThread is not running") from None
        done.wait()
        with self._lock:
            self._waiting.discard(done)

    def abandon(self) -> None:
        """Wake every caller still blocked: the Core's run has ended (they get
        ``RuntimeError``). Called by the CoreThread once its Trio run returned."""
        with self._lock:
            self._abandoned = True
            waiting, self._waiting = self._waiting, set()
        for event in waiting:
            event.set()

    def call(self, afn: Callable[..., Awaitable[_T]], *args: object) -> _T:
        """``await afn(*args)`` on the Core's loop; its result, or its exception.

        Raises:
            RuntimeError: The CoreThread is not running or closed meanwhile, or this is the
                Core's own thread.
        """
        done = threading.Event()
        box: list[outcome.Outcome[_T]] = []

        async def run() -> None:
            try:
                box.append(outcome.Value(await afn(*args)))
            except trio.Cancelled:
                box.append(outcome.Error(_Closed("the CoreThread closed during the call")))
                raise
            except Exception as exc:
                box.append(outcome.Error(exc))
            finally:
                done.set()

        def schedule() -> None:
            try:
                self._nursery.start_soon(run)
            except RuntimeError:  # the nursery is closed: the CoreThread closes
                box.append(outcome.Error(_Closed("the CoreThread is closing")))
                done.set()

        self._submit(schedule, done)
        if not box:
            raise _Closed("the CoreThread closed during the call")
        return box[0].unwrap()

    def read(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` on the Core's loop (a consistent read of state the loop changes)."""
        done = threading.Event()
        box: list[outcome.Outcome[_T]] = []

        def schedule() -> None:
            box.append(outcome.capture(fn))
            done.set()

        self._submit(schedule, done)
        return box[0].unwrap()

    def hold(self, open_cm: Callable[[], AbstractAsyncContextManager[_T]]) -> tuple[_T, _Holder]:
        """Enter ``open_cm()`` in a task on the Core's loop and keep it open.

        Returns:
            What it yielded, and the :class:`_Holder` whose ``close()`` leaves it.

        Raises:
            Exception: What entering it raised.
        """
        entered = threading.Event()
        finished = threading.Event()
        box: list[outcome.Outcome[_T]] = []
        holder = _Holder(self, finished)

        async def run() -> None:
            holder.stop = trio.Event()
            try:
                async with open_cm() as value:
                    box.append(outcome.Value(value))
                    entered.set()
                    await holder.stop.wait()
            except trio.Cancelled:
                if not box:
                    box.append(outcome.Error(_Closed("the CoreThread closed")))
                raise
            except Exception as exc:
                if not box:
                    box.append(outcome.Error(exc))
                else:
                    holder.error = exc
            finally:
                entered.set()
                finished.set()

        def schedule() -> None:
            try:
                self._nursery.start_soon(run)
            except RuntimeError:
                box.append(outcome.Error(_Closed("the CoreThread is closing")))
                entered.set()
                finished.set()

        self._track(finished)
        self._submit(schedule, entered)
        if not box:
            raise _Closed("the CoreThread closed")
        return box[0].unwrap(), holder


class _Holder:
    """Leaves a context :meth:`Portal.hold` entered; idempotent."""

    def __init__(self, portal: Portal, finished: threading.Event) -> None:
        self._portal = portal
        self._finished = finished
        self.stop: trio.Event | None = None
        self.error: Exception | None = None

    def close(self) -> None:
        """Leave the context and wait until it is left (its cleanup is bounded).

        Raises:
            Exception: What leaving it raised.
        """
        if not self._finished.is_set():
            stop = self.stop
            if stop is not None:
                # The CoreThread closed: its nursery ended the context already.
                with contextlib.suppress(_Closed):
                    self._portal.read(stop.set)
            self._finished.wait()
        error, self.error = self.error, None
        if error is not None:
            raise error


class _Facade:
    """The blocking shape shared by both facades: ``close()`` and ``with``."""

    _holder: _Holder

    def close(self) -> None:
        """Stop the session (bounded) and forget it; idempotent."""
        self._holder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@final
class SyncLspClient(_Facade, metaclass=NoPublicConstructor):
    """:class:`~supervisor.LspClient`'s methods, blocking; made by
    :meth:`CoreThread.language_server <supervisor.CoreThread.language_server>`.

    Every method blocks the calling thread until its answer and raises what the Trio
    client's raises. ``timeout_ms`` of the waits bounds them (then :class:`TimeoutError`).
    Attributes are read on the Core's thread, as copies.
    """

    def __init__(self, portal: Portal, client: LspClient, holder: _Holder) -> None:
        self._portal = portal
        self._client = client
        self._holder = holder
        self.session_id = client.session_id
        self.server_id = client.server_id

    # -- requests (see LspClient) ----------------------------------------------------------

    def request(self, method: str, params: object = None, *, timeout_ms: int | None = None) -> Any:
        """:meth:`LspClient.request <supervisor.LspClient.request>`."""
        return self._portal.call(_kw(self._client.request, timeout_ms=timeout_ms), method, params)

    def notify(self, method: str, params: object = None) -> None:
        """:meth:`LspClient.notify <supervisor.LspClient.notify>`."""
        self._portal.call(self._client.notify, method, params)

    def hover(self, uri: str, line: int, character: int) -> lsp.Hover | None:
        """:meth:`LspClient.hover <supervisor.LspClient.hover>`."""
        return self._portal.call(self._client.hover, uri, line, character)

    def completion(
        self, uri: str, line: int, character: int
    ) -> lsp.CompletionList | Sequence[lsp.CompletionItem] | None:
        """:meth:`LspClient.completion <supervisor.LspClient.completion>`."""
        return self._portal.call(self._client.completion, uri, line, character)

    def definition(
        self, uri: str, line: int, character: int
    ) -> lsp.Location | Sequence[lsp.Location] | Sequence[lsp.LocationLink] | None:
        """:meth:`LspClient.definition <supervisor.LspClient.definition>`."""
        return self._portal.call(self._client.definition, uri, line, character)

    def references(
        self, uri: str, line: int, character: int, *, include_declaration: bool = True
    ) -> Sequence[lsp.Location] | None:
        """:meth:`LspClient.references <supervisor.LspClient.references>`."""
        call = _kw(self._client.references, include_declaration=include_declaration)
        return self._portal.call(call, uri, line, character)

    def document_symbol(
        self, uri: str
    ) -> Sequence[lsp.DocumentSymbol] | Sequence[lsp.SymbolInformation] | None:
        """:meth:`LspClient.document_symbol <supervisor.LspClient.document_symbol>`."""
        return self._portal.call(self._client.document_symbol, uri)

    def formatting(
        self, uri: str, *, tab_size: int = 4, insert_spaces: bool = True
    ) -> Sequence[lsp.TextEdit] | None:
        """:meth:`LspClient.formatting <supervisor.LspClient.formatting>`."""
        call = _kw(self._client.formatting, tab_size=tab_size, insert_spaces=insert_spaces)
        return self._portal.call(call, uri)

    # -- documents -------------------------------------------------------------------------

    def open_document(self, uri: str, language_id: str, text: str) -> Document:
        """:meth:`LspClient.open_document <supervisor.LspClient.open_document>`."""
        return self._portal.call(self._client.open_document, uri, language_id, text)

    def change_document(self, uri: str, text: str) -> Document:
        """:meth:`LspClient.change_document <supervisor.LspClient.change_document>`."""
        return self._portal.call(self._client.change_document, uri, text)

    def close_document(self, uri: str) -> None:
        """:meth:`LspClient.close_document <supervisor.LspClient.close_document>`."""
        self._portal.call(self._client.close_document, uri)

    # -- events ----------------------------------------------------------------------------

    def wait_for_notification(
        self,
        method: str,
        predicate: Callable[[JSONValue], bool] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> JSONValue:
        """:meth:`LspClient.wait_for_notification
        <supervisor.LspClient.wait_for_notification>`; ``predicate`` runs on the Core's
        thread. Raises :class:`TimeoutError` after ``timeout_ms`` milliseconds."""
        wait = _bounded(self._client.wait_for_notification, timeout_ms)
        return self._portal.call(wait, method, predicate)

    def wait_for_diagnostics(
        self, uri: str, *, timeout_ms: int | None = None
    ) -> list[lsp.Diagnostic]:
        """:meth:`LspClient.wait_for_diagnostics <supervisor.LspClient.wait_for_diagnostics>`;
        raises :class:`TimeoutError` after ``timeout_ms`` milliseconds."""
        return self._portal.call(_bounded(self._client.wait_for_diagnostics, timeout_ms), uri)

    @property
    def diagnostics(self) -> dict[str, list[lsp.Diagnostic]]:
        """A copy of :attr:`LspClient.diagnostics <supervisor.LspClient.diagnostics>`."""
        return self._portal.read(lambda: {k: list(v) for k, v in self._client.diagnostics.items()})

    @property
    def log_messages(self) -> list[lsp.LogMessageParams]:
        """A copy of :attr:`LspClient.log_messages <supervisor.LspClient.log_messages>`."""
        return self._portal.read(lambda: list(self._client.log_messages))

    @property
    def show_messages(self) -> list[lsp.ShowMessageParams]:
        """A copy of :attr:`LspClient.show_messages <supervisor.LspClient.show_messages>`."""
        return self._portal.read(lambda: list(self._client.show_messages))

    @property
    def logs(self) -> list[LspLog]:
        """A copy of :attr:`LspClient.logs <supervisor.LspClient.logs>`."""
        return self._portal.read(lambda: list(self._client.logs))

    @property
    def documents(self) -> dict[str, Document]:
        """A copy of :attr:`LspClient.documents <supervisor.LspClient.documents>`."""
        return self._portal.read(lambda: dict(self._client.documents))

    @property
    def state(self) -> str:
        """:attr:`LspClient.state <supervisor.LspClient.state>`."""
        return self._portal.read(lambda: self._client.state)

    @property
    def capabilities(self) -> JSONObject:
        """:attr:`LspClient.capabilities <supervisor.LspClient.capabilities>`."""
        return self._portal.read(lambda: dict(self._client.capabilities))

    # -- the session -----------------------------------------------------------------------

    def snapshot(self) -> LspSnapshotResult:
        """:meth:`LspClient.snapshot <supervisor.LspClient.snapshot>`."""
        return self._portal.call(self._client.snapshot)

    def stderr_tail(self) -> list[str]:
        """:meth:`LspClient.stderr_tail <supervisor.LspClient.stderr_tail>`."""
        return self._portal.call(self._client.stderr_tail)

    def stop(self) -> LspStopResult:
        """:meth:`LspClient.stop <supervisor.LspClient.stop>`."""
        return self._portal.call(self._client.stop)


@final
class SyncDapClient(_Facade, metaclass=NoPublicConstructor):
    """:class:`~supervisor.DapClient`'s methods, blocking; made by
    :meth:`CoreThread.debug_adapter <supervisor.CoreThread.debug_adapter>` (see
    :class:`SyncLspClient`)."""

    def __init__(self, portal: Portal, client: DapClient, holder: _Holder) -> None:
        self._portal = portal
        self._client = client
        self._holder = holder
        self.session_id = client.session_id
        self.adapter_id = client.adapter_id

    def request(
        self,
        command: str,
        arguments: Mapping[str, JSONValue] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> JSONValue:
        """:meth:`DapClient.request <supervisor.DapClient.request>`."""
        call = _kw(self._client.request, timeout_ms=timeout_ms)
        return self._portal.call(call, command, arguments)

    def wait_for_event(
        self,
        name: str,
        predicate: Callable[[DebugEvent], bool] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> DebugEvent:
        """:meth:`DapClient.wait_for_event <supervisor.DapClient.wait_for_event>`; raises
        :class:`TimeoutError` after ``timeout_ms`` milliseconds."""
        return self._portal.call(_bounded(self._client.wait_for_event, timeout_ms), name, predicate)

    def wait_stopped(
        self, thread_id: int | None = None, *, timeout_ms: int | None = None
    ) -> DebugStopped:
        """:meth:`DapClient.wait_stopped <supervisor.DapClient.wait_stopped>`."""
        return self._portal.call(_bounded(self._client.wait_stopped, timeout_ms), thread_id)

    def wait_continued(self, *, timeout_ms: int | None = None) -> DebugContinued:
        """:meth:`DapClient.wait_continued <supervisor.DapClient.wait_continued>`."""
        return self._portal.call(_bounded(self._client.wait_continued, timeout_ms))

    def wait_terminated(self, *, timeout_ms: int | None = None) -> DebugTerminated:
        """:meth:`DapClient.wait_terminated <supervisor.DapClient.wait_terminated>`."""
        return self._portal.call(_bounded(self._client.wait_terminated, timeout_ms))

    @property
    def state(self) -> str:
        """:attr:`DapClient.state <supervisor.DapClient.state>`."""
        return self._portal.read(lambda: self._client.state)

    @property
    def capabilities(self) -> JSONObject:
        """:attr:`DapClient.capabilities <supervisor.DapClient.capabilities>`."""
        return self._portal.read(lambda: dict(self._client.capabilities))

    @property
    def output(self) -> list[DebugOutput]:
        """A copy of :attr:`DapClient.output <supervisor.DapClient.output>`."""
        return self._portal.read(lambda: list(self._client.output))

    @property
    def terminated(self) -> DebugTerminated | None:
        """:attr:`DapClient.terminated <supervisor.DapClient.terminated>`."""
        return self._portal.read(lambda: self._client.terminated)

    def stop(self) -> DebugDisconnectResult:
        """:meth:`DapClient.stop <supervisor.DapClient.stop>`."""
        return self._portal.call(self._client.stop)


def _kw(fn: Callable[..., Awaitable[_T]], **kwargs: object) -> Callable[..., Awaitable[_T]]:
    async def call(*args: object) -> _T:
        return await fn(*args, **kwargs)

    return call


def _bounded(
    fn: Callable[..., Awaitable[_T]], timeout_ms: int | None
) -> Callable[..., Awaitable[_T]]:
    """``fn`` bounded by ``timeout_ms`` milliseconds (None: unbounded); past it
    :class:`TimeoutError` (the builtin, so a sync caller needs no Trio)."""

    async def call(*args: object) -> _T:
        if timeout_ms is None:
            return await fn(*args)
        with trio.move_on_after(timeout_ms / 1000):
            return await fn(*args)
        raise TimeoutError(f"nothing came within {timeout_ms} ms")

    return call
