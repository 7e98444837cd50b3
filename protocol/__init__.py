"""Sans-I/O protocol layer: framing, JSON-RPC 2.0, the session lifecycle, the envelope.

Nothing here does I/O, reads a clock or imports trio: objects take bytes or parsed JSON
and return events, messages or bytes (in the manner of h11 and wsproto). The layers compose as
``FrameDecoder`` (bytes -> frames) -> ``decode_message`` (frame body -> message) ->
``JSONRPCConnection`` (ids, pending requests, answered-once, cancels) ->
``ServerLifecycle`` / ``parse_envelope``; the EOF convention of every layer is an
explicit ``receive_eof()``.
"""

from __future__ import annotations

#: The distribution this package belongs to: ``_trio_process_supervisor`` tells ours from
#: another package named ``protocol`` (PyPI has one) by it.
__distribution__ = "trio-process-supervisor"

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
    MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES,
    CoreError as CoreError,
    LocalProtocolError as LocalProtocolError,
    ProtocolError as ProtocolError,
    RemoteProtocolError as RemoteProtocolError,
    cut_utf8 as cut_utf8,
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
from ._machine import StateMachine as StateMachine
from ._payload import (
    MAX_ECHO_BYTES as MAX_ECHO_BYTES,
    MAX_MILLISECONDS as MAX_MILLISECONDS,
    MAX_OUTPUT_BYTES as MAX_OUTPUT_BYTES,
    argv_item_problem as argv_item_problem,
    check_request_values as check_request_values,
    echo as echo,
    env_item_problem as env_item_problem,
    invalid_field as invalid_field,
    json_type as json_type,
    path_problem as path_problem,
    read_argv as read_argv,
    read_env as read_env,
    read_int as read_int,
    read_milliseconds as read_milliseconds,
    read_path as read_path,
    read_text as read_text,
    text_problem as text_problem,
)
from ._suggest import did_you_mean as did_you_mean, suggest as suggest
from ._types import JSONObject as JSONObject, JSONValue as JSONValue, RequestId as RequestId

__all__ = (
    "CANCEL_METHOD",
    "EOF",
    "ERROR_CATALOG",
    "JSONRPC_RESERVED_RANGE",
    "LSP_RESERVED_RANGE",
    "MAX_ECHO_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_MILLISECONDS",
    "MAX_OUTPUT_BYTES",
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
    "StateMachine",
    "StrayText",
    "argv_item_problem",
    "check_request_values",
    "cut_utf8",
    "decode_dap_message",
    "decode_message",
    "did_you_mean",
    "echo",
    "encode_dap_message",
    "encode_frame",
    "encode_message",
    "env_item_problem",
    "envelope_error",
    "envelope_ok",
    "invalid_field",
    "is_jsonrpc_reserved_code",
    "is_lsp_reserved_code",
    "is_server_error_code",
    "json_type",
    "lookup_error",
    "parse_envelope",
    "path_problem",
    "read_argv",
    "read_env",
    "read_int",
    "read_milliseconds",
    "read_path",
    "read_text",
    "suggest",
    "text_problem",
)
