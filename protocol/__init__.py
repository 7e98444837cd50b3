"""Sans-I/O protocol layer: framing, JSON-RPC 2.0, the session lifecycle, the envelope.

Nothing here does I/O, reads a clock or imports trio: objects take bytes or parsed JSON
and return events, messages or bytes (STYLE.md point 1). The layers compose as
``FrameDecoder`` (bytes -> frames) -> ``decode_message`` (frame body -> message) ->
``JSONRPCConnection`` (ids, pending requests, answered-once, cancels) ->
``ServerLifecycle`` / ``parse_envelope``; the EOF convention of every layer is an
explicit ``receive_eof()``.
"""

from __future__ import annotations

from ._codes import (
    ERROR_CATALOG as ERROR_CATALOG,
    JSONRPC_RESERVED_RANGE as JSONRPC_RESERVED_RANGE,
    LSP_RESERVED_RANGE as LSP_RESERVED_RANGE,
    SERVER_ERROR_RANGE as SERVER_ERROR_RANGE,
    CatalogEntry as CatalogEntry,
    CoreErrorCode as CoreErrorCode,
    ErrorCode as ErrorCode,
    is_jsonrpc_reserved_code as is_jsonrpc_reserved_code,
    is_lsp_reserved_code as is_lsp_reserved_code,
    is_server_error_code as is_server_error_code,
    lookup_error as lookup_error,
)
from ._connection import (
    CANCEL_METHOD as CANCEL_METHOD,
    CancelReceived as CancelReceived,
    ConnectionEvent as ConnectionEvent,
    JSONRPCConnection as JSONRPCConnection,
    MessageRefused as MessageRefused,
    NotificationReceived as NotificationReceived,
    ReplyIgnored as ReplyIgnored,
    ReplyReceived as ReplyReceived,
    RequestReceived as RequestReceived,
)
from ._dap import (
    DAPConnection as DAPConnection,
    DAPEvent as DAPEvent,
    DAPEventKind as DAPEventKind,
    DAPMessage as DAPMessage,
    DAPRequest as DAPRequest,
    DAPResponse as DAPResponse,
    decode_dap_message as decode_dap_message,
    encode_dap_message as encode_dap_message,
)
from ._envelope import (
    EnvelopeError as EnvelopeError,
    EnvelopeRequest as EnvelopeRequest,
    envelope_error as envelope_error,
    envelope_ok as envelope_ok,
    parse_envelope as parse_envelope,
)
from ._errors import (
    CoreError as CoreError,
    LocalProtocolError as LocalProtocolError,
    ProtocolError as ProtocolError,
    RemoteProtocolError as RemoteProtocolError,
)
from ._framing import (
    EOF as EOF,
    NEED_DATA as NEED_DATA,
    Frame as Frame,
    FrameDecoder as FrameDecoder,
    FrameEvent as FrameEvent,
    StrayText as StrayText,
    encode_frame as encode_frame,
)
from ._jsonrpc import (
    Batch as Batch,
    ErrorObject as ErrorObject,
    ErrorResponse as ErrorResponse,
    Message as Message,
    Notification as Notification,
    Params as Params,
    Request as Request,
    Response as Response,
    decode_message as decode_message,
    encode_message as encode_message,
)
from ._lifecycle import (
    LifecycleInput as LifecycleInput,
    LifecycleState as LifecycleState,
    ServerLifecycle as ServerLifecycle,
)
from ._types import JSONObject as JSONObject, JSONValue as JSONValue, RequestId as RequestId

__all__ = (
    "CANCEL_METHOD",
    "EOF",
    "ERROR_CATALOG",
    "JSONRPC_RESERVED_RANGE",
    "LSP_RESERVED_RANGE",
    "NEED_DATA",
    "SERVER_ERROR_RANGE",
    "Batch",
    "CancelReceived",
    "CatalogEntry",
    "ConnectionEvent",
    "CoreError",
    "CoreErrorCode",
    "DAPConnection",
    "DAPEvent",
    "DAPEventKind",
    "DAPMessage",
    "DAPRequest",
    "DAPResponse",
    "EnvelopeError",
    "EnvelopeRequest",
    "ErrorCode",
    "ErrorObject",
    "ErrorResponse",
    "Frame",
    "FrameDecoder",
    "FrameEvent",
    "JSONObject",
    "JSONRPCConnection",
    "JSONValue",
    "LifecycleInput",
    "LifecycleState",
    "LocalProtocolError",
    "Message",
    "MessageRefused",
    "Notification",
    "NotificationReceived",
    "Params",
    "ProtocolError",
    "RemoteProtocolError",
    "ReplyIgnored",
    "ReplyReceived",
    "Request",
    "RequestId",
    "RequestReceived",
    "Response",
    "ServerLifecycle",
    "StrayText",
    "decode_dap_message",
    "decode_message",
    "encode_dap_message",
    "encode_frame",
    "encode_message",
    "envelope_error",
    "envelope_ok",
    "is_jsonrpc_reserved_code",
    "is_lsp_reserved_code",
    "is_server_error_code",
    "lookup_error",
    "parse_envelope",
)
