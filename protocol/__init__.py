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

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
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
        STRAY_SAMPLE_BYTES as STRAY_SAMPLE_BYTES,
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

#: ``{public name: submodule}``. Each submodule is imported when one of its names is first
#: used: a caller that needs the error codes or the payload rules (``supervisor exec``, the
#: command line's start) does not pay for the JSON-RPC connection, DAP and framing layers.
_LAZY: dict[str, str] = {
    "Batch": "_jsonrpc",
    "CANCEL_METHOD": "_connection",
    "CancelReceived": "_connection",
    "CatalogEntry": "_codes",
    "ConnectionEvent": "_connection",
    "CoreError": "_errors",
    "CoreErrorCode": "_codes",
    "DAPConnection": "_dap",
    "DAPEvent": "_dap",
    "DAPEventKind": "_dap",
    "DAPMessage": "_dap",
    "DAPRequest": "_dap",
    "DAPResponse": "_dap",
    "EOF": "_framing",
    "ERROR_CATALOG": "_codes",
    "EnvelopeError": "_envelope",
    "EnvelopeRequest": "_envelope",
    "ErrorCode": "_codes",
    "ErrorObject": "_jsonrpc",
    "ErrorResponse": "_jsonrpc",
    "Frame": "_framing",
    "FrameDecoder": "_framing",
    "FrameEvent": "_framing",
    "JSONObject": "_types",
    "JSONRPCConnection": "_connection",
    "JSONRPC_RESERVED_RANGE": "_codes",
    "JSONValue": "_types",
    "LSP_RESERVED_RANGE": "_codes",
    "LifecycleInput": "_lifecycle",
    "LifecycleState": "_lifecycle",
    "LocalProtocolError": "_errors",
    "MAX_ECHO_BYTES": "_payload",
    "MAX_MESSAGE_BYTES": "_errors",
    "MAX_MILLISECONDS": "_payload",
    "MAX_OUTPUT_BYTES": "_payload",
    "Message": "_jsonrpc",
    "MessageRefused": "_connection",
    "NEED_DATA": "_framing",
    "Notification": "_jsonrpc",
    "NotificationReceived": "_connection",
    "Params": "_jsonrpc",
    "ProtocolError": "_errors",
    "RemoteProtocolError": "_errors",
    "ReplyIgnored": "_connection",
    "ReplyReceived": "_connection",
    "Request": "_jsonrpc",
    "RequestId": "_types",
    "RequestReceived": "_connection",
    "Response": "_jsonrpc",
    "SERVER_ERROR_RANGE": "_codes",
    "STRAY_SAMPLE_BYTES": "_framing",
    "ServerLifecycle": "_lifecycle",
    "StateMachine": "_machine",
    "StrayText": "_framing",
    "argv_item_problem": "_payload",
    "check_request_values": "_payload",
    "cut_utf8": "_errors",
    "decode_dap_message": "_dap",
    "decode_message": "_jsonrpc",
    "did_you_mean": "_suggest",
    "echo": "_payload",
    "encode_dap_message": "_dap",
    "encode_frame": "_framing",
    "encode_message": "_jsonrpc",
    "env_item_problem": "_payload",
    "envelope_error": "_envelope",
    "envelope_ok": "_envelope",
    "invalid_field": "_payload",
    "is_jsonrpc_reserved_code": "_codes",
    "is_lsp_reserved_code": "_codes",
    "is_server_error_code": "_codes",
    "json_type": "_payload",
    "lookup_error": "_codes",
    "parse_envelope": "_envelope",
    "path_problem": "_payload",
    "read_argv": "_payload",
    "read_env": "_payload",
    "read_int": "_payload",
    "read_milliseconds": "_payload",
    "read_path": "_payload",
    "read_text": "_payload",
    "suggest": "_suggest",
    "text_problem": "_payload",
}


def __getattr__(name: str) -> object:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    "STRAY_SAMPLE_BYTES",
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
