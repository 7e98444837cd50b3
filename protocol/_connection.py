"""One side of a JSON-RPC 2.0 session over the LSP base protocol, sans-I/O.

Strategy (h11's ``Connection``): the object holds the protocol's bookkeeping -- which of our
requests wait for a reply, which of the peer's requests are in flight, whether a request
has been answered -- and nothing else. Bytes go in (:meth:`JSONRPCConnection.receive_data`,
:meth:`~JSONRPCConnection.receive_eof`), events come out
(:meth:`~JSONRPCConnection.next_event`); whatever we send is built by a ``send_*`` method
that returns the framed bytes for the I/O layer to write. No clock, no tasks, no I/O: the
Trio endpoint (``supervisor``) owns the waiting, the cancel scopes and the writes.

The rules it keeps, each of them something a peer or our own side can get wrong:

* every inbound request is answered exactly once: a second answer, or an answer to an id
  that is not in flight, raises :class:`~protocol.LocalProtocolError`;
* a reply is matched to one of our pending requests at most once; a late, duplicate or
  unknown reply is an :class:`ReplyIgnored` event, never a second completion;
* a malformed message is answered only when it could have been a request: a broken reply
  (a message without ``method``: an ``id`` with neither ``result`` nor ``error``, or with
  both, or a bad ``error``) is never answered -- a frame with its id would look like a reply
  to a request the peer never sent; if it names one of our pending requests, that request
  ends (:class:`ReplyReceived` with ``problem`` set);
* an inbound request whose id is already in flight is refused (-32600), and past
  ``max_inbound`` requests in flight one is refused as busy (-32803, ``data.code busy``),
  so reading never stops;
* ``$/cancelRequest`` for an inbound request in flight is a :class:`CancelReceived` event;
  for anything else it is dropped (JSON-RPC allows a cancel to race the answer);
* batches are refused with one -32600 (LSP has none).

The EOF convention is the package's: :meth:`~JSONRPCConnection.receive_eof`, then
:data:`~protocol.EOF` from :meth:`~JSONRPCConnection.next_event`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

from ._codes import ErrorCode
from ._errors import LocalProtocolError, MissingResultError, RemoteProtocolError
from ._framing import Frame, FrameDecoder, StrayText, encode_frame
from ._jsonrpc import (
    Batch,
    ErrorObject,
    ErrorResponse,
    Notification,
    Request,
    Response,
    decode_message,
    encode_message,
    encode_request,
)

if TYPE_CHECKING:
    from ._framing import _Sentinel
    from ._jsonrpc import Params
    from ._types import JSONValue, RequestId

__all__ = (
    "CANCEL_METHOD",
    "AnswerTooLarge",
    "CancelReceived",
    "ConnectionEvent",
    "JSONRPCConnection",
    "MessageRefused",
    "NotificationReceived",
    "ReplyIgnored",
    "ReplyReceived",
    "RequestReceived",
)

#: The LSP cancellation notification (LSP 3.17 "Cancellation Support").
CANCEL_METHOD: Final = "$/cancelRequest"


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """The peer sent a request; answer it once with :meth:`JSONRPCConnection.send_result`
    or :meth:`~JSONRPCConnection.send_error`.

    ``body_bytes`` is the size of the frame body it came in (0 when unknown), for a bound on
    the bytes held by requests in flight.
    """

    request: Request
    body_bytes: int = 0


@dataclass(frozen=True, slots=True)
class NotificationReceived:
    """The peer sent a notification (``$/cancelRequest`` is :class:`CancelReceived`)."""

    notification: Notification


@dataclass(frozen=True, slots=True)
class CancelReceived:
    """The peer cancelled a request of its own that is still in flight (it still needs
    its one answer: the result if it finished, else -32800)."""

    request_id: RequestId


@dataclass(frozen=True, slots=True)
class ReplyReceived:
    """A reply to one of our pending requests; that request is no longer pending.

    Attributes:
        request_id: Our request's id.
        reply: The :class:`Response` or :class:`ErrorResponse`; None when the reply was
            broken.
        problem: Why a broken reply is broken (a :class:`~protocol.MissingResultError` when
            it carried neither ``result`` nor ``error``), else None.
    """

    request_id: int
    reply: Response | ErrorResponse | None
    problem: RemoteProtocolError | None = None


@dataclass(frozen=True, slots=True)
class ReplyIgnored:
    """A reply that matched none of our pending requests (late, duplicate or never sent).

    Attributes:
        request_id: The id it named (None for an error without id).
        reply: The reply, when it could be decoded.
    """

    request_id: RequestId | None
    reply: Response | ErrorResponse | None


@dataclass(frozen=True, slots=True)
class MessageRefused:
    """A message was invalid, or a request could not be admitted.

    Attributes:
        error: What was wrong (its ``error_code`` is the JSON-RPC code).
        answer: The framed error response to write, or None when nothing may be answered
            (a broken reply).
    """

    error: RemoteProtocolError
    answer: bytes | None


#: What :meth:`JSONRPCConnection.next_event` returns.
ConnectionEvent: TypeAlias = (
    "RequestReceived | NotificationReceived | CancelReceived | ReplyReceived | ReplyIgnored"
    " | MessageRefused | StrayText | _Sentinel"
)


def _id_key(request_id: object) -> tuple[type, object]:
    # 1 and "1" are different ids (JSON-RPC 2.0 §4), and True is not an id at all.
    return (type(request_id), request_id)


def _error_frame(request_id: RequestId | None, code: int, message: str, data: JSONValue) -> bytes:
    answer = ErrorResponse(id=request_id, error=ErrorObject(code=code, message=message, data=data))
    return encode_frame(encode_message(answer))


def _looks_like_a_reply(body: bytes, exc: RemoteProtocolError) -> bool:
    """Whether an invalid message was meant as a reply: a JSON object without ``method``
    that has ``result`` or ``error`` (JSON that does not parse is answered, id null)."""
    if exc.error_code is ErrorCode.PARSE_ERROR or b'"method":' in body:
        return False
    return body.lstrip()[:1] == b"{" and (b'"result"' in body or b'"error"' in body)


class AnswerTooLarge(ValueError):
    """An answer's body is over the frame-body limit (:meth:`JSONRPCConnection.send_answer`)."""


class JSONRPCConnection:
    """Both sides' bookkeeping of one JSON-RPC session; see the module docstring.

    Args:
        max_body_bytes: Largest frame body accepted, in bytes; also the largest answer body
            :meth:`send_answer` frames (a peer with the same limit could not read a larger one).
        max_header_bytes: Largest header section, in bytes.
        max_stray_bytes: Most non-frame bytes tolerated in a row between frames.
        max_inbound: Inbound requests in flight before one is refused as busy.
        exempt_methods: Requests never refused as busy, however many are in flight: the
            ones that end the session (LSP ``shutdown``), so a loaded peer can always stop.
        finite_only: Refuse a message holding a number no float holds (``1e400``): a
            request is answered -32600 with its id, a reply ends the request it names. For a
            peer whose values are passed on unchecked (a language server's results, a
            backend's notifications); a side that checks every value itself (serve's Core)
            may accept them and refuse with a more precise error.

    Raises:
        ValueError: ``max_inbound`` is not positive (the framing limits raise as
            :class:`~protocol.FrameDecoder` does).
    """

    __slots__ = (
        "_decoder",
        "_error",
        "_exempt",
        "_finite_only",
        "_inbound",
        "_max_answer_bytes",
        "_max_inbound",
        "_next_id",
        "_pending",
    )

    def __init__(
        self,
        *,
        max_body_bytes: int = 64 * 1024 * 1024,
        max_header_bytes: int = 8192,
        max_stray_bytes: int = 65536,
        max_inbound: int = 128,
        finite_only: bool = True,
        exempt_methods: frozenset[str] = frozenset(),
    ) -> None:
        if max_inbound <= 0:
            raise ValueError("max_inbound must be positive")
        self._decoder = FrameDecoder(
            max_header_bytes=max_header_bytes,
            max_body_bytes=max_body_bytes,
            max_stray_bytes=max_stray_bytes,
        )
        self._max_inbound = max_inbound
        self._exempt = exempt_methods
        self._max_answer_bytes = max_body_bytes
        self._finite_only = finite_only
        self._next_id = 1
        self._pending: set[int] = set()
        self._inbound: set[tuple[type, object]] = set()
        self._error: RemoteProtocolError | None = None

    # -- state ---------------------------------------------------------------------------

    @property
    def pending_requests(self) -> int:
        """Our requests sent and neither answered nor forgotten."""
        return len(self._pending)

    @property
    def inbound_requests(self) -> int:
        """The peer's requests in flight (received, not yet answered)."""
        return len(self._inbound)

    @property
    def broken(self) -> bool:
        """Whether the framing broke; every later :meth:`next_event` raises again."""
        return self._error is not None

    def is_pending(self, request_id: int) -> bool:
        """Whether our request ``request_id`` still waits for its reply."""
        return request_id in self._pending

    # -- input ---------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes; ``b""`` is a no-op (EOF is :meth:`receive_eof`).

        Raises:
            RuntimeError: :meth:`receive_eof` was already called.
        """
        self._decoder.receive_data(data)

    def receive_eof(self) -> None:
        """Signal that the peer closed its side; idempotent."""
        self._decoder.receive_eof()

    def next_event(self) -> ConnectionEvent:
        """Return the next event, :data:`~protocol.NEED_DATA` or :data:`~protocol.EOF`.

        Returns:
            One of the event classes of this module, a :class:`~protocol.StrayText` (text
            skipped between frames: its byte count and a bounded ``sample``, which its
            ``repr`` leaves out), :data:`~protocol.NEED_DATA`, or
            :data:`~protocol.EOF` once the input ended and everything was returned.

        Raises:
            RemoteProtocolError: The framing broke (a header section that is not one, a
                body over the limit, stray text past its bound); the stream can not go on,
                and every later call raises the same error.
        """
        if self._error is not None:
            raise self._error
        try:
            event = self._decoder.next_event()
        except RemoteProtocolError as exc:
            self._error = exc
            raise
        if isinstance(event, Frame):
            return self._on_frame(event.body)
        return event

    def _on_frame(self, body: bytes) -> ConnectionEvent:
        try:
            message = decode_message(body, finite_only=self._finite_only)
        except RemoteProtocolError as exc:
            if isinstance(exc, MissingResultError) or _looks_like_a_reply(body, exc):
                return self._broken_reply(exc)
            return MessageRefused(
                exc, _error_frame(exc.request_id, int(exc.error_code), str(exc), None)
            )
        if isinstance(message, (Response, ErrorResponse)):
            request_id = message.id
            if type(request_id) is int and request_id in self._pending:
                self._pending.discard(request_id)
                return ReplyReceived(request_id, message)
            return ReplyIgnored(request_id, message)
        if isinstance(message, Request):
            return self._on_request(message, len(body))
        if isinstance(message, Notification):
            if message.method == CANCEL_METHOD:
                return self._on_cancel(message)
            return NotificationReceived(message)
        return self._refuse_batch(message)

    def _broken_reply(self, exc: RemoteProtocolError) -> ConnectionEvent:
        # No method member: not a request, so never answered (a frame with its id would
        # look like a reply to a request the peer never sent).
        request_id = exc.request_id
        if type(request_id) is int and request_id in self._pending:
            self._pending.discard(request_id)
            return ReplyReceived(request_id, None, exc)
        return MessageRefused(exc, None)

    def _on_request(self, request: Request, body_bytes: int = 0) -> ConnectionEvent:
        key = _id_key(request.id)
        if key in self._inbound:
            error = RemoteProtocolError(
                "Invalid Request: id already in use",
                error_code=ErrorCode.INVALID_REQUEST,
                request_id=request.id,
            )
            return MessageRefused(
                error, _error_frame(request.id, ErrorCode.INVALID_REQUEST, str(error), None)
            )
        if len(self._inbound) >= self._max_inbound and request.method not in self._exempt:
            error = RemoteProtocolError(
                "too many requests in flight",
                error_code=ErrorCode.REQUEST_FAILED,
                request_id=request.id,
            )
            return MessageRefused(
                error,
                _error_frame(request.id, ErrorCode.REQUEST_FAILED, str(error), {"code": "busy"}),
            )
        self._inbound.add(key)
        return RequestReceived(request, body_bytes)

    def _on_cancel(self, notification: Notification) -> ConnectionEvent:
        params = notification.params
        request_id = params.get("id") if isinstance(params, dict) else None
        if (
            not isinstance(request_id, bool)
            and isinstance(request_id, int | str)
            and _id_key(request_id) in self._inbound
        ):
            return CancelReceived(request_id)
        # Not in flight (already answered, never sent, or not an id): nothing to cancel.
        return NotificationReceived(notification)

    def _refuse_batch(self, batch: Batch) -> ConnectionEvent:
        # Answering a batch would tie every member's reply to the slowest member.
        error = RemoteProtocolError(
            "Invalid Request: batches are not supported", error_code=ErrorCode.INVALID_REQUEST
        )
        return MessageRefused(
            error, _error_frame(None, ErrorCode.INVALID_REQUEST, str(error), None)
        )

    # -- output --------------------------------------------------------------------------

    def send_request(self, method: str, params: Params | None = None) -> tuple[int, bytes]:
        """Number a request of ours and frame it; it is pending from now on.

        Returns:
            ``(request_id, frame)``: ids are 1, 2, 3, ... and never reused.
        """
        request_id = self._next_id
        self._next_id += 1
        frame = encode_frame(encode_request(request_id, method, params))
        self._pending.add(request_id)
        return request_id, frame

    def forget_request(self, request_id: int) -> bool:
        """Stop waiting for a reply of ours (the caller gave up); a later reply is ignored.

        Returns:
            True when the request was pending (so the peer may be told with
            :meth:`send_cancel`), False when it was answered or forgotten already.
        """
        if request_id in self._pending:
            self._pending.discard(request_id)
            return True
        return False

    def send_cancel(self, request_id: int) -> bytes:
        """Frame ``$/cancelRequest {id}`` for a request of ours."""
        return encode_frame(
            encode_message(Notification(method=CANCEL_METHOD, params={"id": request_id}))
        )

    def send_notification(self, method: str, params: Params | None = None) -> bytes:
        """Frame a notification."""
        return encode_frame(encode_message(Notification(method=method, params=params)))

    def _check_in_flight(self, request_id: RequestId) -> tuple[type, object]:
        key = _id_key(request_id)
        if key not in self._inbound:
            raise LocalProtocolError(
                f"request {request_id!r} is not in flight (answered already, or never received)",
                error_code=ErrorCode.INTERNAL_ERROR,
            )
        return key

    def send_answer(self, answer: Response | ErrorResponse) -> bytes:
        """Frame the one answer to an inbound request; it is no longer in flight.

        The frame is built before the request is marked answered, so an answer that can't
        be encoded (a result holding a value JSON can't carry) leaves it in flight for an
        error answer instead.

        Raises:
            LocalProtocolError: ``answer.id`` is not in flight (answered already, or never
                received).
            TypeError, ValueError: ``answer`` has no JSON form.
            AnswerTooLarge: ``answer``'s body is over ``max_body_bytes``; the request stays
                in flight for a smaller answer (an error saying so).
        """
        request_id = answer.id
        if request_id is None:
            raise LocalProtocolError(
                "an answer must name its request", error_code=ErrorCode.INTERNAL_ERROR
            )
        key = self._check_in_flight(request_id)
        body = encode_message(answer)
        if len(body) > self._max_answer_bytes:
            raise AnswerTooLarge(
                f"the answer is {len(body)} bytes as JSON, over the frame-body limit of"
                f" {self._max_answer_bytes} bytes"
            )
        frame = encode_frame(body)
        self._inbound.discard(key)
        return frame

    def send_result(self, request_id: RequestId, result: JSONValue) -> bytes:
        """Answer an inbound request with its result (:meth:`send_answer`)."""
        return self.send_answer(Response(id=request_id, result=result))

    def send_error(
        self, request_id: RequestId, code: int, message: str, data: JSONValue = None
    ) -> bytes:
        """Answer an inbound request with an error (:meth:`send_answer`)."""
        return self.send_answer(
            ErrorResponse(id=request_id, error=ErrorObject(code=code, message=message, data=data))
        )
