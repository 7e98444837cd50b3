"""Debug Adapter Protocol messages, sans-I/O: bytes in, messages out, seq numbers kept.

Contract (DAP "Base Protocol",
https://microsoft.github.io/debug-adapter-protocol/specification#Base_Protocol): a DAP stream
is the LSP base-protocol framing (``Content-Length`` headers, a blank line, a UTF-8 JSON body),
so :class:`DAPConnection` reuses :class:`~protocol.FrameDecoder` and
:func:`~protocol.encode_frame` with the same framing policy. The
body is a ``ProtocolMessage``: ``{seq, type, ...}`` where ``type`` is ``request``,
``response`` or ``event``.

Classification is by ``type`` alone, never by which other fields happen to be present: a
reverse request that carries a stray ``request_seq`` is still a :class:`DAPRequest`, and a
response without ``request_seq`` is malformed rather than "an event". Each side numbers the
messages it sends from 1; :class:`DAPConnection` owns our counter, so a reply to a reverse
request names its own ``seq`` and the request's ``seq`` as ``request_seq``.

Errors: a body that is not JSON, or JSON of the wrong shape, raises
:class:`~protocol.RemoteProtocolError` (``PARSE_ERROR`` / ``INVALID_REQUEST``) and poisons the
connection, like a broken frame: DAP has no way to answer a message it cannot read, so the
session that owns the connection fails. The EOF convention is the package's: an explicit
:meth:`DAPConnection.receive_eof`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from . import _json
from ._codes import ErrorCode
from ._errors import RemoteProtocolError
from ._framing import Frame, FrameDecoder, StrayText, _Sentinel, encode_frame

if TYPE_CHECKING:
    from ._types import JSONObject, JSONValue

__all__ = (
    "DAPConnection",
    "DAPEvent",
    "DAPEventKind",
    "DAPMessage",
    "DAPRequest",
    "DAPResponse",
    "decode_dap_message",
    "encode_dap_message",
)

_TYPES: Final = ("request", "response", "event")


@dataclass(frozen=True, slots=True)
class DAPRequest:
    """A DAP ``Request``: ``{seq, type: "request", command, arguments?}``.

    Attributes:
        seq: The sender's sequence number (>= 0).
        command: The request's command, e.g. ``"launch"`` or ``"runInTerminal"``.
        arguments: Its arguments, or None when absent.
    """

    seq: int
    command: str
    arguments: JSONValue = None


@dataclass(frozen=True, slots=True)
class DAPResponse:
    """A DAP ``Response``: ``{seq, type: "response", request_seq, success, command, ...}``.

    Attributes:
        seq: The sender's sequence number.
        request_seq: The ``seq`` of the request this answers.
        success: Whether the request succeeded.
        command: The command of the request this answers.
        message: The error text (or ``"cancelled"``) when ``success`` is false, or None.
        body: The response body, or None when absent.
    """

    seq: int
    request_seq: int
    success: bool
    command: str
    message: str | None = None
    body: JSONValue = None


@dataclass(frozen=True, slots=True)
class DAPEvent:
    """A DAP ``Event``: ``{seq, type: "event", event, body?}``.

    Attributes:
        seq: The sender's sequence number.
        event: The event's name, e.g. ``"stopped"``.
        body: Its body, or None when absent.
    """

    seq: int
    event: str
    body: JSONValue = None


#: Any DAP protocol message.
DAPMessage: TypeAlias = DAPRequest | DAPResponse | DAPEvent
#: What :meth:`DAPConnection.next_event` returns.
DAPEventKind: TypeAlias = DAPMessage | StrayText | Literal[_Sentinel.NEED_DATA, _Sentinel.EOF]


def _bad(message: str) -> RemoteProtocolError:
    return RemoteProtocolError(message, error_code=ErrorCode.INVALID_REQUEST)


def _read_seq(data: JSONObject, name: str) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(f"DAP message field {name!r} must be an integer >= 0")
    return value


def _read_str(data: JSONObject, name: str, *, optional: bool = False) -> str | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _bad(f"DAP message field {name!r} must be a string")
    return value


def decode_dap_message(body: bytes) -> DAPMessage:
    """Decode one DAP frame body.

    Args:
        body: The bytes of one frame (UTF-8 JSON).

    Returns:
        A :class:`DAPRequest`, :class:`DAPResponse` or :class:`DAPEvent`, chosen by ``type``.

    Raises:
        RemoteProtocolError: ``PARSE_ERROR`` when the body is not UTF-8 JSON;
            ``INVALID_REQUEST`` when it is not an object, ``type`` is unknown, or a field the
            type requires is missing or of the wrong JSON type.
    """
    try:
        data = _json.loads(body)
    except ValueError as exc:
        raise RemoteProtocolError(
            f"DAP body is not JSON: {type(exc).__name__}", error_code=ErrorCode.PARSE_ERROR
        ) from None
    if not isinstance(data, dict):
        raise _bad("DAP message is not a JSON object")
    kind = data.get("type")
    if kind not in _TYPES:
        raise _bad("DAP message 'type' must be request, response or event")
    seq = _read_seq(data, "seq")
    if kind == "request":
        command = _read_str(data, "command")
        assert command is not None
        return DAPRequest(seq, command, data.get("arguments"))
    if kind == "event":
        event = _read_str(data, "event")
        assert event is not None
        return DAPEvent(seq, event, data.get("body"))
    success = data.get("success")
    if not isinstance(success, bool):
        raise _bad("DAP response field 'success' must be a boolean")
    command = _read_str(data, "command")
    assert command is not None
    return DAPResponse(
        seq,
        _read_seq(data, "request_seq"),
        success,
        command,
        _read_str(data, "message", optional=True),
        data.get("body"),
    )


def encode_dap_message(message: DAPMessage) -> bytes:
    """Encode one DAP message as a compact UTF-8 JSON body (not framed).

    Absent optional fields (``arguments``, ``body``, ``message`` equal to None) are left out.

    Raises:
        TypeError: A payload holds something JSON cannot represent.
        ValueError: A payload holds a NaN or infinite float.
    """
    out: JSONObject
    if isinstance(message, DAPRequest):
        out = {"seq": message.seq, "type": "request", "command": message.command}
        if message.arguments is not None:
            out["arguments"] = message.arguments
    elif isinstance(message, DAPEvent):
        out = {"seq": message.seq, "type": "event", "event": message.event}
        if message.body is not None:
            out["body"] = message.body
    else:
        out = {
            "seq": message.seq,
            "type": "response",
            "request_seq": message.request_seq,
            "success": message.success,
            "command": message.command,
        }
        if message.message is not None:
            out["message"] = message.message
        if message.body is not None:
            out["body"] = message.body
    return _json.dumps(out)


class DAPConnection:
    """One side of a DAP stream, sans-I/O: decodes what it receives, numbers what it sends.

    Feed received bytes with :meth:`receive_data` (any chunking), signal the end of input with
    :meth:`receive_eof`, and call :meth:`next_event` until it returns :data:`NEED_DATA` or
    :data:`EOF`. :meth:`request`, :meth:`respond` and :meth:`event` return the framed bytes to
    write; each takes the next ``seq`` of our side (1, 2, 3, ...).

    Args:
        max_header_bytes: Largest header section, in bytes (default 8 KiB).
        max_body_bytes: Largest frame body, in bytes (default 64 MiB).
        max_stray_bytes: Most non-frame bytes tolerated in a row between frames (64 KiB).

    Raises:
        TypeError: A limit is not an ``int``.
        ValueError: A limit is not positive.
    """

    def __init__(
        self,
        *,
        max_header_bytes: int = 8192,
        max_body_bytes: int = 64 * 1024 * 1024,
        max_stray_bytes: int = 65536,
    ) -> None:
        self._decoder = FrameDecoder(
            max_header_bytes=max_header_bytes,
            max_body_bytes=max_body_bytes,
            max_stray_bytes=max_stray_bytes,
        )
        self._next_seq = 1
        self._error: RemoteProtocolError | None = None

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next message we send will carry."""
        return self._next_seq

    @property
    def broken(self) -> bool:
        """Whether a :class:`~protocol.RemoteProtocolError` was raised; later reads raise."""
        return self._error is not None

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes; ``b""`` is a no-op (EOF is :meth:`receive_eof`).

        Raises:
            RemoteProtocolError: The connection is broken.
            RuntimeError: :meth:`receive_eof` was already called.
        """
        self._check()
        self._decoder.receive_data(data)

    def receive_eof(self) -> None:
        """Signal that the peer closed its side; idempotent.

        Raises:
            RemoteProtocolError: The connection is broken.
        """
        self._check()
        self._decoder.receive_eof()

    def next_event(self) -> DAPEventKind:
        """Return the next decoded message.

        Returns:
            A :class:`DAPRequest`, :class:`DAPResponse` or :class:`DAPEvent`; a
            :class:`~protocol.StrayText` (its byte count and a bounded ``sample``, which its
            ``repr`` leaves out) for text skipped between frames;
            :data:`NEED_DATA`; or :data:`EOF` once the input ended and everything was returned.

        Raises:
            RemoteProtocolError: Broken framing or a malformed message; the connection stays
                broken and every later call raises again.
        """
        self._check()
        try:
            event = self._decoder.next_event()
            if isinstance(event, Frame):
                return decode_dap_message(event.body)
        except RemoteProtocolError as exc:
            self._error = exc
            raise
        return event

    def _check(self) -> None:
        if self._error is not None:
            raise RemoteProtocolError(
                f"the DAP connection is broken: {self._error}", error_code=self._error.error_code
            )

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def request(self, command: str, arguments: JSONValue = None) -> tuple[int, bytes]:
        """Frame a request of ours.

        Args:
            command: The DAP command.
            arguments: Its arguments (omitted from the message when None).

        Returns:
            ``(seq, frame)``: the request's ``seq`` (for matching the response) and the bytes.

        Raises:
            ValueError: ``command`` is empty.
        """
        if not command:
            raise ValueError("a DAP request needs a command")
        seq = self._take_seq()
        return seq, encode_frame(encode_dap_message(DAPRequest(seq, command, arguments)))

    def respond(
        self,
        request: DAPRequest,
        *,
        success: bool,
        body: JSONValue = None,
        message: str | None = None,
    ) -> bytes:
        """Frame our response to the peer's (reverse) request.

        The response carries our own next ``seq`` and ``request_seq = request.seq``.

        Returns:
            The framed bytes.
        """
        seq = self._take_seq()
        response = DAPResponse(seq, request.seq, success, request.command, message, body)
        return encode_frame(encode_dap_message(response))

    def event(self, event: str, body: JSONValue = None) -> bytes:
        """Frame an event of ours (adapters send events; tests and fake adapters use this).

        Returns:
            The framed bytes.
        """
        return encode_frame(encode_dap_message(DAPEvent(self._take_seq(), event, body)))
