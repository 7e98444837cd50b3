"""The session clients' errors: why a start, a session or a request did not give a result.

Each carries what the Core reported, typed: the failure's ``reason`` (``exitedEarly``,
``crashed``, ``initializeTimeout``, ``adapterExited``, ...), the exit status and the
stderr tail of the process, and for a request the language server's own JSON-RPC error.
The Core's refusals of a bad call (a field out of range, an unknown method) stay
:class:`~protocol.CoreError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = (
    "LanguageServerError",
    "RequestFailed",
    "SessionError",
    "SessionFailed",
    "StartFailed",
)


class SessionError(Exception):
    """The base of the session clients' errors.

    Attributes:
        session_id: The session's id (``sessionId``), or None when none was made.
        message: What happened, one line.
    """

    def __init__(self, message: str, *, session_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.session_id = session_id


class SessionFailed(SessionError):
    """The session ended or can not serve: it failed, stopped, or is stopping.

    Raised by a request, a notification or a wait on a session that ended, at once.

    Attributes:
        reason: Why: the failure's code (``exitedEarly``, ``crashed``,
            ``initializeTimeout``, ``initializeFailed``, ``protocolError``,
            ``serviceReadyTimeout``, ``launchFailed`` for a language server;
            ``adapterExited``, ``initializeTimeout``, ``initializeFailed``,
            ``protocolError``, ... for a debug adapter), or the state it is in
            (``stopped``, ``stopping``).
        exit_code: The process's exit status, or None (still running, ended by a signal,
            or never started).
        signal: The number of the signal that ended it, or None.
        stderr_tail: Its last stderr lines (oldest first).
        details: Everything the Core reported (wire names), for what the fields above
            leave out.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        reason: str,
        exit_code: int | None = None,
        signal: int | None = None,
        stderr_tail: list[str] | None = None,
        details: JSONObject | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id)
        self.reason = reason
        self.exit_code = exit_code
        self.signal = signal
        self.stderr_tail = list(stderr_tail or [])
        self.details: JSONObject = dict(details or {})

    def __str__(self) -> str:
        parts = [self.message]
        if self.stderr_tail:
            parts.append("stderr tail:\n  " + "\n  ".join(self.stderr_tail[-10:]))
        return "\n".join(parts)


class StartFailed(SessionFailed):
    """A language server or debug adapter did not get ready: it exited, timed out, refused
    ``initialize``, or could not be started (``reason`` ``launchFailed``: a missing
    executable or working directory)."""


class RequestFailed(SessionError):
    """A request ended without a result.

    Attributes:
        code: The outcome's code: ``requestTimeout``, ``requestCancelled``,
            ``languageServerUnavailable`` (the server stopped or crashed under it),
            ``languageServerError`` (see :class:`LanguageServerError`), ``internal``; for a
            debug operation its ``reason`` (``adapterError``, ``timedOut``, ``cancelled``,
            ``sessionEnded``, ``refused``, ``internal``).
        method: The LSP method or DAP command.
        details: The outcome as the Core reported it (wire names).
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        code: str,
        method: str,
        details: JSONObject | None = None,
    ) -> None:
        super().__init__(message, session_id=session_id)
        self.code = code
        self.method = method
        self.details: JSONObject = dict(details or {})


class LanguageServerError(RequestFailed):
    """The language server answered the request with a JSON-RPC error.

    Attributes:
        error_code: The error's ``code`` (an LSP/JSON-RPC number, e.g. -32601 method not
            found, -32803 request failed; :class:`protocol.ErrorCode` names them).
        error_message: The error's ``message`` as the server sent it (cut at 1 KiB).
        data: The error's ``data``, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        method: str,
        error_code: int,
        error_message: str,
        data: JSONValue = None,
        details: JSONObject | None = None,
    ) -> None:
        super().__init__(
            message,
            session_id=session_id,
            code="languageServerError",
            method=method,
            details=details,
        )
        self.error_code = error_code
        self.error_message = error_message
        self.data = data
