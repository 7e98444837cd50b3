"""The language-server session client for Trio: requests with results, documents, events.

``async with core.language_server(["pylsp"], root_uri=root) as server:`` starts the server
with ``lsp.startServer``, returns once it is ``ready`` (or raises :class:`StartFailed` with
the reason, exit status and stderr tail), and stops and forgets it when the block ends.

Strategy: one task pumps the session's events (``lsp.waitEvents``, no polling) and routes
each one. ``requestCompleted`` wakes the request waiting for it: the client names each
request's operation id itself, so the waiter exists before its event can arrive.
``diagnostics`` update :attr:`LspClient.diagnostics`; ``log``, ``progress``,
``diagnostics`` and ``serverNotification`` go to a bounded notification history that
:meth:`LspClient.wait_for_notification` takes from; ``stateChanged`` to ``failed`` or
``stopped`` ends every wait with :class:`SessionFailed`, so nothing waits for ever on a
session that ended. Results of the common requests are lsprotocol types (the shapes of
LSP 3.17, https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/);
:meth:`LspClient.request` returns any other result as JSON.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypedDict, cast, final
from urllib.parse import unquote, urlparse

import attrs
import trio
from lsprotocol import types as lsp
from lsprotocol.converters import get_converter

from protocol import CoreError

from .._api._lsp import (
    LspDiagnostics,
    LspFeaturesChanged,
    LspLog,
    LspProgress,
    LspRequestCompleted,
    LspServerInfoChanged,
    LspServerNotification,
    LspStateChanged,
    LspStopResult,
)
from .._boundary import raise_single
from .._handles import NoPublicConstructor
from ._caller import check_options, renamed_option
from ._errors import LanguageServerError, RequestFailed, SessionFailed, StartFailed

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping, Sequence

    from typing_extensions import Unpack

    from protocol import JSONObject, JSONValue

    from .._api._lsp import LspEvent, LspSnapshotResult
    from ._caller import CommandCaller

__all__ = (
    "NOTIFICATION_HISTORY",
    "Document",
    "LanguageServerOptions",
    "LspClient",
    "open_lsp_client",
)

#: Notifications kept for :meth:`LspClient.wait_for_notification` (the oldest go first).
NOTIFICATION_HISTORY: Final = 1024
#: ``log`` events kept in :attr:`LspClient.logs`.
_LOG_HISTORY: Final = 1024
#: How long one ``lsp.waitEvents`` of the pump lasts (ms): it returns as soon as there are
#: events, so this only sets how often an idle session is asked again.
_WAIT_MS: Final = 60_000
#: How long cancelling a request may take to reach the Core (seconds; never blocks long).
_CANCEL_BOUND_S: Final = 5.0
#: The session's ``log`` levels back to LSP ``MessageType`` numbers (LSP 3.17).
_MESSAGE_TYPES: Final = {"error": 1, "warning": 2, "info": 3, "log": 4, "debug": 5}

_converter = get_converter()
#: How a refused or deprecated option names its place.
_WHERE: Final = "language_server"


class LanguageServerOptions(TypedDict, total=False):
    """What :func:`open_lsp_client` (``core.language_server``) takes besides argv and root.

    Attributes:
        cwd: The server's working directory, absolute (default: the path of a ``file:``
            ``root_uri``, else the current directory); the wire's ``workingDirectory``.
        server_id: The name events and errors use (default: the program's file name).
        env: Variables to set (a None value removes one); the wire's ``environment``.
        working_directory: The older name of ``cwd`` (deprecated).
        environment: The older name of ``env`` (deprecated).
        initialization_options: ``initializationOptions`` of ``initialize``.
        workspace_configuration: What ``workspace/configuration`` answers.
        client_capabilities: The client capabilities sent in ``initialize`` (default: what
            the session serves; docs/commands.md ``lsp.startServer``).
        initialize_timeout_ms: The bound of the handshake (milliseconds; default 60 000).
        request_timeout_ms: The default deadline of a request (milliseconds; default
            60 000, at most 300 000).
        shutdown_timeout_ms: How long ``shutdown`` may take when the block ends
            (milliseconds; default 3 000).
    """

    cwd: str
    server_id: str
    env: Mapping[str, str | None]
    working_directory: str
    environment: Mapping[str, str | None]
    initialization_options: JSONValue
    workspace_configuration: JSONObject
    client_capabilities: JSONObject
    initialize_timeout_ms: int
    request_timeout_ms: int
    shutdown_timeout_ms: int


@dataclass
class Document:
    """An open document as the session tracks it.

    Attributes:
        uri: Its URI.
        language_id: Its LSP language id (``python``, ...).
        version: Its version: 1 when opened, one more per change that changed it.
        text: Its full text.
    """

    uri: str
    language_id: str
    version: int
    text: str


@dataclass
class _Notification:
    method: str
    params: JSONValue
    taken: bool = False


class _Pending:
    __slots__ = ("done", "outcome")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.outcome: JSONObject | None = None


def _result_type(method: str) -> Any:
    """The lsprotocol type of ``method``'s result (``Optional[Hover]`` for hover)."""
    response = lsp.METHOD_TO_TYPES[method][1]
    assert response is not None
    return attrs.fields(response).result.type


def _to_json(params: object) -> JSONValue:
    """Params as JSON: an lsprotocol object is unstructured, JSON passes as it is."""
    if attrs.has(type(params)):
        return cast("JSONValue", _converter.unstructure(params))
    return cast("JSONValue", params)


def _position(uri: str, line: int, character: int) -> JSONObject:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


def _failure(session_id: str, server_id: str, error: JSONObject, *, start: bool) -> SessionFailed:
    """A :class:`SessionFailed` (or :class:`StartFailed`) from a ``failed`` state's error."""
    reason = str(error.get("code") or "failed")
    message = str(error.get("message") or "the server failed")
    exit_code = error.get("exitCode")
    signal = error.get("signal")
    if reason == "exitedEarly" and (isinstance(exit_code, int) or isinstance(signal, int)):
        # Say what the process did, in our words: the transport's detail of how its end was
        # seen (a broken pipe, EOF) stays in ``details``.
        how = (
            f"exited with code {exit_code}"
            if isinstance(exit_code, int)
            else f"was killed by signal {signal}"
        )
        message = f"{how} before it was ready" if start else how
    tail = error.get("stderrTail")
    kind = StartFailed if start else SessionFailed
    return kind(
        f"{server_id} {'did not start' if start else 'failed'} ({reason}): {message}",
        session_id=session_id,
        reason=reason,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        signal=signal if isinstance(signal, int) else None,
        stderr_tail=[str(line) for line in tail] if isinstance(tail, list) else [],
        details=error,
    )


@final
class LspClient(metaclass=NoPublicConstructor):
    """A ready language-server session, as requests with results and typed events.

    Made by :func:`open_lsp_client` (``core.language_server(...)``); it has no public
    constructor. Positions are zero-based lines and UTF-16 characters, as LSP counts them.

    Attributes:
        session_id: The session's id (``sessionId`` of the ``lsp.*`` commands).
        server_id: Its name in events and errors.
        state: The session's state as the last event said: ``ready``, then ``stopping``,
            ``stopped`` or ``failed``.
        capabilities: The server's capabilities (``initialize`` result, JSON).
        server_info: The server's ``serverInfo`` (JSON), or None.
        diagnostics: The latest diagnostics of each open document, keyed by URI.
        log_messages: ``window/logMessage`` notifications the server sent, in order.
        show_messages: ``window/showMessage`` notifications the server sent, in order.
        logs: Every ``log`` event (server messages, stderr lines, the supervisor's notes on
            the session; the last 1 024).
        documents: The documents open through this client, keyed by URI.
    """

    def __init__(self, core: CommandCaller, session_id: str, server_id: str) -> None:
        self._core = core
        self.session_id = session_id
        self.server_id = server_id
        self.state = "starting"
        self.capabilities: JSONObject = {}
        self.server_info: JSONValue = None
        self.diagnostics: dict[str, list[lsp.Diagnostic]] = {}
        self.log_messages: list[lsp.LogMessageParams] = []
        self.show_messages: list[lsp.ShowMessageParams] = []
        self.logs: deque[LspLog] = deque(maxlen=_LOG_HISTORY)
        self.documents: dict[str, Document] = {}
        self._notifications: deque[_Notification] = deque(maxlen=NOTIFICATION_HISTORY)
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._changed = trio.Event()
        self._failure: SessionFailed | None = None
        self._start_failure: StartFailed | None = None
        self._ready = False

    # -- requests --------------------------------------------------------------------------

    async def request(
        self, method: str, params: object = None, *, timeout_ms: int | None = None
    ) -> JSONValue:
        """Send a request and return its result (JSON).

        Args:
            method: The LSP method, e.g. ``"textDocument/hover"``.
            params: Its params: JSON, or an lsprotocol object (``HoverParams(...)``).
            timeout_ms: Its deadline in milliseconds (default: the session's, 60 000).

        Returns:
            The result as the server sent it.

        Raises:
            LanguageServerError: The server answered with an error (its code, message and
                data).
            RequestFailed: The request ended otherwise: ``requestTimeout``,
                ``languageServerUnavailable`` (the server stopped or crashed under it), ...
            SessionFailed: The session had failed or stopped before (at once, with why).
            CoreError: The Core refused the call (a bad ``method`` or ``params``).

        **Cancellation:** cancelling the caller cancels the request (the server gets
        ``$/cancelRequest``).
        """
        self._raise_if_ended()
        operation_id = f"{self.session_id}-client-{next(self._ids)}"
        waiter = _Pending()
        self._pending[operation_id] = waiter
        payload: JSONObject = {
            "sessionId": self.session_id,
            "method": method,
            "operationId": operation_id,
        }
        json_params = _to_json(params)
        if json_params is not None:
            payload["params"] = json_params
        if timeout_ms is not None:
            payload["timeoutMilliseconds"] = timeout_ms
        try:
            try:
                await self._core.call("lsp.request", payload)
            except CoreError as exc:
                raise self._refusal(exc) from None
            try:
                await waiter.done.wait()
            except BaseException:
                if waiter.outcome is None:
                    # Already ended, or the Core is closing: nothing left to cancel.
                    with (
                        trio.CancelScope(shield=True),
                        trio.move_on_after(_CANCEL_BOUND_S),
                        contextlib.suppress(CoreError),
                    ):
                        await self._core.call(
                            "lsp.cancelOperation",
                            {"sessionId": self.session_id, "operationId": operation_id},
                        )
                raise
        finally:
            del self._pending[operation_id]
        return self._outcome(method, waiter.outcome)

    async def notify(self, method: str, params: object = None) -> None:
        """Send a notification (``lsp.notify``).

        Documents open and change through :meth:`open_document` / :meth:`change_document`
        (the session keeps their versions); those methods are refused here.

        Raises:
            SessionFailed: The session had failed or stopped.
            CoreError: ``invalid_request`` for a notification the session sends itself.
        """
        self._raise_if_ended()
        payload: JSONObject = {"sessionId": self.session_id, "method": method}
        json_params = _to_json(params)
        if json_params is not None:
            payload["params"] = json_params
        try:
            await self._core.call("lsp.notify", payload)
        except CoreError as exc:
            raise self._refusal(exc) from None

    async def hover(self, uri: str, line: int, character: int) -> lsp.Hover | None:
        """``textDocument/hover`` at a position; raises as :meth:`request`."""
        result = await self.request("textDocument/hover", _position(uri, line, character))
        return cast("lsp.Hover | None", self._structure("textDocument/hover", result))

    async def completion(
        self, uri: str, line: int, character: int
    ) -> lsp.CompletionList | Sequence[lsp.CompletionItem] | None:
        """``textDocument/completion`` at a position; raises as :meth:`request`."""
        method = "textDocument/completion"
        result = await self.request(method, _position(uri, line, character))
        return cast(
            "lsp.CompletionList | Sequence[lsp.CompletionItem] | None",
            self._structure(method, result),
        )

    async def definition(
        self, uri: str, line: int, character: int
    ) -> lsp.Location | Sequence[lsp.Location] | Sequence[lsp.LocationLink] | None:
        """``textDocument/definition`` at a position; raises as :meth:`request`."""
        method = "textDocument/definition"
        result = await self.request(method, _position(uri, line, character))
        return cast(
            "lsp.Location | Sequence[lsp.Location] | Sequence[lsp.LocationLink] | None",
            self._structure(method, result),
        )

    async def references(
        self, uri: str, line: int, character: int, *, include_declaration: bool = True
    ) -> Sequence[lsp.Location] | None:
        """``textDocument/references`` at a position; raises as :meth:`request`."""
        method = "textDocument/references"
        params = {
            **_position(uri, line, character),
            "context": {"includeDeclaration": include_declaration},
        }
        result = await self.request(method, params)
        return cast("Sequence[lsp.Location] | None", self._structure(method, result))

    async def document_symbol(
        self, uri: str
    ) -> Sequence[lsp.DocumentSymbol] | Sequence[lsp.SymbolInformation] | None:
        """``textDocument/documentSymbol`` of a document; raises as :meth:`request`."""
        method = "textDocument/documentSymbol"
        result = await self.request(method, {"textDocument": {"uri": uri}})
        return cast(
            "Sequence[lsp.DocumentSymbol] | Sequence[lsp.SymbolInformation] | None",
            self._structure(method, result),
        )

    async def formatting(
        self, uri: str, *, tab_size: int = 4, insert_spaces: bool = True
    ) -> Sequence[lsp.TextEdit] | None:
        """``textDocument/formatting`` of a document; raises as :meth:`request`."""
        method = "textDocument/formatting"
        params = {
            "textDocument": {"uri": uri},
            "options": {"tabSize": tab_size, "insertSpaces": insert_spaces},
        }
        result = await self.request(method, params)
        return cast("Sequence[lsp.TextEdit] | None", self._structure(method, result))

    # -- documents -------------------------------------------------------------------------

    async def open_document(self, uri: str, language_id: str, text: str) -> Document:
        """Open a document (``textDocument/didOpen``, version 1).

        Opening a document that is open already changes it to ``text``.

        Raises:
            SessionFailed: The session had failed or stopped.
        """
        return await self._sync(uri, language_id, text)

    async def change_document(self, uri: str, text: str) -> Document:
        """Replace an open document's text (``textDocument/didChange``, the next version;
        an unchanged text sends nothing and keeps the version).

        Raises:
            KeyError: The document is not open through this client.
            SessionFailed: The session had failed or stopped.
        """
        return await self._sync(uri, self.documents[uri].language_id, text)

    async def close_document(self, uri: str) -> None:
        """Close a document (``textDocument/didClose``); its diagnostics become empty."""
        try:
            await self._core.call("lsp.closeDocument", {"sessionId": self.session_id, "uri": uri})
        except CoreError as exc:
            raise self._refusal(exc) from None
        self.documents.pop(uri, None)

    async def _sync(self, uri: str, language_id: str, text: str) -> Document:
        self._raise_if_ended()
        try:
            synced = await self._core.lsp_sync_document(
                session_id=self.session_id, uri=uri, language_id=language_id, text=text
            )
        except CoreError as exc:
            raise self._refusal(exc) from None
        document = Document(uri, language_id, synced.document_version, text)
        self.documents[uri] = document
        return document

    # -- events ----------------------------------------------------------------------------

    async def wait_for_notification(
        self, method: str, predicate: Callable[[JSONValue], bool] | None = None
    ) -> JSONValue:
        """The next notification of ``method`` (matching ``predicate``) not taken before.

        Each notification the server sent is handed out once: one that arrived before this
        call and was not taken by an earlier wait counts (so opening a document and then
        waiting for its diagnostics never misses them), and two waits get two
        notifications. Covered: ``textDocument/publishDiagnostics`` (``{uri, diagnostics,
        version?}``, for documents open through the session), ``window/logMessage`` and
        ``window/showMessage`` (``{type, message}``), ``$/progress`` (``{token, value}``) and
        every other notification (the session forwards all of them).

        Args:
            method: The notification's method.
            predicate: Called with its params (JSON); None takes the first.

        Returns:
            Its params (JSON).

        Raises:
            SessionFailed: The session failed or stopped before one came.

        **Cancellation:** a plain wait; bound it with :func:`trio.fail_after`.
        """
        while True:
            for note in self._notifications:
                if note.taken or note.method != method:
                    continue
                if predicate is None or predicate(note.params):
                    note.taken = True
                    return note.params
            self._raise_if_ended()
            await self._changed.wait()

    async def wait_for_diagnostics(self, uri: str) -> list[lsp.Diagnostic]:
        """The diagnostics of the next ``publishDiagnostics`` for ``uri`` not taken before
        (see :meth:`wait_for_notification`); raises :class:`SessionFailed` as it does."""
        await self.wait_for_notification(
            "textDocument/publishDiagnostics",
            lambda params: isinstance(params, dict) and params.get("uri") == uri,
        )
        return list(self.diagnostics.get(uri, []))

    # -- the session -----------------------------------------------------------------------

    async def snapshot(self) -> LspSnapshotResult:
        """``lsp.snapshot``: state, pending requests, documents, stderr tail, ..."""
        return await self._core.lsp_snapshot(session_id=self.session_id)

    async def stderr_tail(self) -> list[str]:
        """The server's last stderr lines (oldest first), of every generation."""
        return list((await self.snapshot()).stderr_tail)

    async def stop(self) -> LspStopResult:
        """Stop the server (``shutdown``, ``exit``, then the bounded end of its process tree).

        A second call, or the end of the ``async with`` block, joins the first.

        Returns:
            The stop's result: state, timeline, last exit.
        """
        result = await self._core.lsp_stop_server(session_id=self.session_id)
        self.state = result.state
        self._note_ended()
        return result

    # -- the pump and its routes -----------------------------------------------------------

    async def _pump(self) -> None:
        while True:
            try:
                batch = await self._core.lsp_wait_events(
                    session_id=self.session_id, timeout_milliseconds=_WAIT_MS
                )
            except CoreError as exc:
                # Destroyed by someone else, or the Core closes: no event comes any more,
                # so every wait ends now (a request's outcome stays None: see _outcome).
                self._failure = self._failure or SessionFailed(
                    f"{self.server_id}: the session is gone ({exc.message})",
                    session_id=self.session_id,
                    reason="destroyed",
                )
                for waiter in self._pending.values():
                    waiter.done.set()
                self._changed.set()
                return
            for event in batch.events:
                self._route(event)
            self._changed.set()
            self._changed = trio.Event()

    def _route(self, event: LspEvent) -> None:
        if isinstance(event, LspRequestCompleted):
            waiter = self._pending.get(event.operation_id)
            if waiter is not None:
                outcome: JSONObject = {}
                if event.error is not None:
                    outcome["error"] = event.error
                else:
                    outcome["result"] = event.result
                waiter.outcome = outcome
                waiter.done.set()
        elif isinstance(event, LspDiagnostics):
            self.diagnostics[event.uri] = list(
                _converter.structure(event.diagnostics, list[lsp.Diagnostic])
            )
            params: JSONObject = {"uri": event.uri, "diagnostics": event.diagnostics}
            if event.version is not None:
                params["version"] = event.version
            self._note("textDocument/publishDiagnostics", params)
        elif isinstance(event, LspLog):
            self.logs.append(event)
            if event.source in ("window/logMessage", "window/showMessage"):
                kind = _MESSAGE_TYPES.get(event.level, 3)
                note: JSONObject = {"type": kind, "message": event.message}
                if event.source == "window/logMessage":
                    self.log_messages.append(_converter.structure(note, lsp.LogMessageParams))
                else:
                    self.show_messages.append(_converter.structure(note, lsp.ShowMessageParams))
                self._note(event.source, note)
        elif isinstance(event, LspProgress):
            self._note("$/progress", {"token": event.token, "value": event.value})
        elif isinstance(event, LspServerNotification):
            self._note(event.method, event.params)
        elif isinstance(event, LspStateChanged):
            self._state_changed(event)
        elif isinstance(event, LspFeaturesChanged):
            self.capabilities = event.capabilities
        elif isinstance(event, LspServerInfoChanged):
            self.server_info = event.server_info

    def _note(self, method: str, params: JSONValue) -> None:
        self._notifications.append(_Notification(method, params))

    def _state_changed(self, event: LspStateChanged) -> None:
        self.state = event.state
        if event.state == "ready":
            self._ready = True
            self._failure = None
        elif event.state == "failed":
            error = event.error or {"code": event.reason or "failed"}
            self._failure = _failure(self.session_id, self.server_id, error, start=False)
            if not self._ready:
                start = _failure(self.session_id, self.server_id, error, start=True)
                self._start_failure = cast("StartFailed", start)
        elif event.state in ("stopping", "stopped"):
            self._note_ended()
        elif event.state in ("starting", "initializing"):
            self._failure = None  # a restart: a new generation comes

    def _note_ended(self) -> None:
        if self._failure is None:
            self._failure = SessionFailed(
                f"{self.server_id} is {self.state}",
                session_id=self.session_id,
                reason=self.state,
            )

    async def _wait_ready(self) -> None:
        while not self._ready:
            if self._start_failure is not None:
                raise self._start_failure
            if self._failure is not None:
                raise StartFailed(
                    self._failure.message,
                    session_id=self.session_id,
                    reason=self._failure.reason,
                    exit_code=self._failure.exit_code,
                    signal=self._failure.signal,
                    stderr_tail=self._failure.stderr_tail,
                    details=self._failure.details,
                )
            await self._changed.wait()

    def _raise_if_ended(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _refusal(self, exc: CoreError) -> Exception:
        """The Core's refusal as the client's error: an ended session's is SessionFailed.

        ``lsp.request`` and ``lsp.notify`` refuse a failed, stopping or stopped session
        with ``details {sessionId, state, lastExit, stderrTail}``.
        """
        details = exc.details or {}
        state = details.get("state")
        if exc.code != "invalid_request" or not isinstance(state, str) or "lastExit" not in details:
            return exc
        last = details.get("lastExit")
        error: JSONObject = dict(last) if isinstance(last, dict) else {}
        if state != "failed":
            error["code"] = state
        tail = details.get("stderrTail")
        if isinstance(tail, list):
            error["stderrTail"] = tail
        failure = _failure(self.session_id, self.server_id, error, start=False)
        failure.message = exc.message
        failure.args = (exc.message,)
        return failure

    def _outcome(self, method: str, outcome: JSONObject | None) -> JSONValue:
        if outcome is None:
            raise self._failure or SessionFailed(
                f"{self.server_id}: the session ended", session_id=self.session_id, reason="ended"
            )
        if "error" not in outcome:
            return outcome.get("result")
        error = outcome["error"]
        assert isinstance(error, dict)
        code = str(error.get("code"))
        message = str(error.get("message", ""))
        details = error.get("details")
        if code == "languageServerError" and isinstance(details, dict):
            number = details.get("code")
            return_message = str(details.get("message", message))
            raise LanguageServerError(
                f"{self.server_id} answered {method} with error {number}: {return_message}",
                session_id=self.session_id,
                method=method,
                error_code=number if isinstance(number, int) else 0,
                error_message=return_message,
                data=details.get("data"),
                details=error,
            )
        raise RequestFailed(
            f"{method} on {self.server_id} ended {code}: {message}",
            session_id=self.session_id,
            code=code,
            method=method,
            details=error,
        )

    def _structure(self, method: str, result: JSONValue) -> object:
        return _converter.structure(result, _result_type(method))

    async def _close(self) -> None:
        """Stop and forget the session; shielded by the caller, bounded by the stop ladder."""
        for command in ("lsp.stopServer", "lsp.destroyServer"):
            # Gone already, or the Core is closing (it ends the session itself).
            with contextlib.suppress(CoreError):
                await self._core.call(command, {"sessionId": self.session_id})
        self._note_ended()


def _check_root_uri(root_uri: object) -> None:
    """Refuse a ``root_uri`` that is not a URI (a path is the usual slip): LSP's
    ``rootUri`` is a ``DocumentUri``, and a server given a path misreads the workspace
    quietly, far from the cause.

    Raises:
        TypeError: Not a string.
        ValueError: No scheme; the message gives the ``file:`` URI of the path.
    """
    if not isinstance(root_uri, str):
        raise TypeError(f"root_uri must be a URI string, not {type(root_uri).__name__}")
    scheme = urlparse(root_uri).scheme
    if len(scheme) < 2:  # none, or a Windows drive letter read as one
        hint = Path(root_uri).absolute().as_uri() if root_uri else "Path(root).as_uri()"
        raise ValueError(f"root_uri must be a URI, such as {hint!r}, not {root_uri!r}")


def _default_cwd(root_uri: str) -> str:
    parsed = urlparse(root_uri)
    if parsed.scheme == "file" and parsed.path:
        return unquote(parsed.path)
    return os.getcwd()


@asynccontextmanager
async def open_lsp_client(
    core: CommandCaller,
    argv: Sequence[str],
    *,
    root_uri: str,
    **options: Unpack[LanguageServerOptions],
) -> AsyncIterator[LspClient]:
    """Start a language server and yield it once it is ready; stop and forget it after.

    Args:
        core: The running Core.
        argv: The server's program and arguments (no shell), e.g. ``["pylsp"]``.
        root_uri: The workspace root URI sent in ``initialize``
            (``pathlib.Path(root).as_uri()``).
        **options: See :class:`LanguageServerOptions`.

    Yields:
        The ready :class:`LspClient`; every server notification is forwarded to it.

    Raises:
        StartFailed: The server did not get ready: it could not be started (``reason``
            ``launchFailed``: a missing executable or directory), exited (``exitedEarly``,
            with its exit code and stderr tail), failed or timed out its handshake. Nothing
            of it is left running.
        CoreError: A bad argument (``invalid_request`` naming the field).
        ValueError: ``argv`` is empty, or ``root_uri`` is not a URI (a path: the message
            gives its ``file:`` URI); nothing is started.

    **Cancellation:** leaving the block, however it happens, stops the server (``shutdown``,
    ``exit``, then TERM and KILL of its tree, bounded) and forgets the session.
    """
    if not argv:
        raise ValueError("argv must name the server's program")
    _check_root_uri(root_uri)
    check_options(options, LanguageServerOptions, _WHERE)
    server_id = options.get("server_id") or os.path.basename(argv[0])
    payload: JSONObject = {
        "serverId": server_id,
        "executable": argv[0],
        "arguments": list(argv[1:]),
        "workingDirectory": renamed_option(options, "cwd", "working_directory", _WHERE)
        or _default_cwd(root_uri),
        "rootUri": root_uri,
        "sessionPolicy": {"forwardNotifications": ["*"]},
    }
    if (env := renamed_option(options, "env", "environment", _WHERE)) is not None:
        payload["environment"] = dict(env)
    if "initialization_options" in options:
        payload["initializationOptions"] = options["initialization_options"]
    if "workspace_configuration" in options:
        payload["workspaceConfiguration"] = options["workspace_configuration"]
    if "client_capabilities" in options:
        payload["clientCapabilities"] = options["client_capabilities"]
    if "initialize_timeout_ms" in options:
        payload["initializeTimeoutMilliseconds"] = options["initialize_timeout_ms"]
    if "request_timeout_ms" in options:
        payload["requestTimeoutMilliseconds"] = options["request_timeout_ms"]
    if "shutdown_timeout_ms" in options:
        payload["shutdownTimeoutMilliseconds"] = options["shutdown_timeout_ms"]
    try:
        started = await core.call("lsp.startServer", payload)
    except CoreError as exc:
        if exc.code != "launch_failed":
            raise
        raise StartFailed(
            f"{server_id} could not be started: {exc.message}",
            reason="launchFailed",
            details=exc.details,
        ) from exc
    assert isinstance(started, dict)
    client = LspClient._create(core, str(started["sessionId"]), server_id)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._pump)
            try:
                await client._wait_ready()
                yield client
            finally:
                with trio.CancelScope(shield=True):
                    await client._close()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise_single(group)
