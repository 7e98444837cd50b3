"""Exceptions of the protocol layer.

Two families, never mixed:

* :class:`CoreError` is a *user-facing* failure with a stable string code from
  :data:`~protocol.ERROR_CATALOG`; it becomes an envelope error or the ``data.code`` of
  a JSON-RPC error.
* :class:`ProtocolError` is a *wire* failure (h11's ``LocalProtocolError`` /
  ``RemoteProtocolError`` split): :class:`RemoteProtocolError` when the peer sent
  something illegal, :class:`LocalProtocolError` when our own side tried to. Each
  carries ``error_code``, the JSON-RPC code to answer with, as h11's
  ``error_status_hint`` does for HTTP.

Misuse of the Python API (wrong types, calls in the wrong order) raises ``TypeError``,
``ValueError`` or ``RuntimeError`` instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._codes import ErrorCode, lookup_error

if TYPE_CHECKING:
    from ._types import JSONObject, RequestId

__all__ = (
    "MAX_MESSAGE_BYTES",
    "CoreError",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "cut_utf8",
)

#: Messages on the wire are cut to this many UTF-8 bytes (the Core API contract "Envelope";
#: the plugin contract "Outcomes and error codes": messages are bounded at 1024).
MAX_MESSAGE_BYTES: Final = 1024


def cut_utf8(text: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, on a character boundary.

    Lone surrogates (which JSON text may carry, but no encoding can write) become ``?``, so
    the result always encodes.
    """
    if text.isascii():
        return text[:limit]
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8")
    return data[:limit].decode("utf-8", "ignore")


class CoreError(Exception):
    """A failure reported to the user with a stable code (the Core API contract "Envelope").

    Args:
        code: A name from :data:`~protocol.ERROR_CATALOG` (``"invalid_request"``,
            ``"plugin.host.timeout"``, a :class:`~protocol.CoreErrorCode`, ...).
        message: A user-facing sentence; never payload data the user did not send. It is
            cut to :data:`MAX_MESSAGE_BYTES` UTF-8 bytes, so an echoed name can never make
            a message longer than the contract allows.
        details: Optional structured details (a JSON object).

    Attributes:
        code: The code as a plain ``str``.
        message: The message.
        details: The details, or ``None``.

    Raises:
        ValueError: ``code`` is not in the catalog.
        TypeError: ``message`` is not a string or ``details`` is not a dict.
    """

    code: str
    message: str
    details: JSONObject | None

    def __init__(self, code: str, message: str, details: JSONObject | None = None) -> None:
        try:
            entry = lookup_error(code)
        except KeyError:
            raise ValueError(f"{code!r} is not a code of protocol.ERROR_CATALOG") from None
        if not isinstance(message, str):
            raise TypeError(f"message must be a str, not {type(message).__name__}")
        if details is not None and not isinstance(details, dict):
            raise TypeError(f"details must be a dict or None, not {type(details).__name__}")
        message = cut_utf8(message)
        super().__init__(message)
        self.code = entry.name
        self.message = message
        self.details = None if details is None else _bounded_details(details)

    def __repr__(self) -> str:
        extra = "" if self.details is None else f", {self.details!r}"
        return f"{type(self).__name__}({self.code!r}, {self.message!r}{extra})"

    def to_json(self) -> JSONObject:
        """The wire form ``{code, message, details?}`` (``details`` only when set)."""
        out: JSONObject = {"code": self.code, "message": self.message}
        if self.details is not None:
            out["details"] = self.details
        return out


#: Text a ``details`` value keeps (each string, in UTF-8 bytes) and items a list keeps:
#: details name what was wrong (a field, a path, a pid), they never carry a caller's payload
#: back at full size.
_DETAIL_TEXT_BYTES: Final = 1024
_DETAIL_ITEMS: Final = 64


def _bounded_details(value: Any) -> Any:
    if isinstance(value, str):
        return cut_utf8(value, _DETAIL_TEXT_BYTES)
    if isinstance(value, dict):
        return {
            cut_utf8(str(k), _DETAIL_TEXT_BYTES): _bounded_details(v)
            for k, v in list(value.items())[:_DETAIL_ITEMS]
        }
    if isinstance(value, list | tuple):
        return [_bounded_details(v) for v in value[:_DETAIL_ITEMS]]
    return value


class ProtocolError(Exception):
    """A violation of the framing or JSON-RPC rules; never instantiated itself.

    Args:
        message: What was wrong, for logs; it never quotes payload content.
        error_code: The JSON-RPC code a reply about this error should carry.

    Attributes:
        error_code: The JSON-RPC code hint.

    Raises:
        TypeError: On direct instantiation; use a subclass.
    """

    error_code: ErrorCode

    def __init__(self, message: str, *, error_code: ErrorCode) -> None:
        if type(self) is ProtocolError:
            raise TypeError(
                "ProtocolError is abstract: raise LocalProtocolError or RemoteProtocolError"
            )
        super().__init__(message)
        self.error_code = ErrorCode(error_code)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.args[0]!r}, error_code={self.error_code.name})"


class LocalProtocolError(ProtocolError):
    """Our own side tried something the protocol forbids (e.g. an illegal lifecycle step).

    A state machine that raises it moves to its ERROR state and stays there.
    """


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids: a broken frame or a malformed message.

    Args:
        message: What was wrong.
        error_code: The JSON-RPC code to answer with: ``PARSE_ERROR`` for bytes that are
            not JSON (and for broken framing), ``INVALID_REQUEST`` for JSON of the wrong
            shape.
        request_id: The id of the offending message when it could be read (so the reply
            can name it), else ``None``.

    Attributes:
        request_id: As above.
    """

    request_id: RequestId | None

    def __init__(
        self,
        message: str,
        *,
        error_code: ErrorCode = ErrorCode.INVALID_REQUEST,
        request_id: RequestId | None = None,
    ) -> None:
        super().__init__(message, error_code=error_code)
        self.request_id = request_id


class MissingResultError(RemoteProtocolError):
    """A reply that names its request (``request_id``) but has neither ``result`` nor ``error``.

    JSON-RPC 2.0 §5 makes it invalid, like any :class:`RemoteProtocolError`; the subclass
    lets the receiver end the request it names rather than answer the reply, and tell a
    missing result from a ``null`` one (the plugin contract "Invocation": no result is
    ``plugin.function.invalidResult``; ``null`` is a result).
    """
