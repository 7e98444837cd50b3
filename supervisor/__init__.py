"""The supervisor: process trees, the JSON-RPC endpoint, the Core, serve mode and the CLI.

Everything that touches processes, streams and cancel scopes lives here; the sans-I/O
protocol is in :mod:`protocol` and the lane policy in :mod:`lanes`.
"""

from __future__ import annotations

# The error types and codes a caller of the Core meets, importable from here too.
from protocol import (
    ERROR_CATALOG as ERROR_CATALOG,
    CatalogEntry as CatalogEntry,
    CoreError as CoreError,
    CoreErrorCode as CoreErrorCode,
    ErrorCode as ErrorCode,
    lookup_error as lookup_error,
)

from ._cli._runfile import RunFileError as RunFileError, load_run_file as load_run_file
from ._cli._serve import serve as serve
from ._core._context import current_operation_id as current_operation_id
from ._core._core import (
    DEFAULT_SERVICES as DEFAULT_SERVICES,
    PROTOCOL_VERSION as PROTOCOL_VERSION,
    Core as Core,
    CoreThread as CoreThread,
    open_core as open_core,
)
from ._core._jobs import ProcessJobRunner as ProcessJobRunner
from ._core._service import (
    CommandHandler as CommandHandler,
    Service as Service,
    ServiceContext as ServiceContext,
    ServiceFactory as ServiceFactory,
)
from ._core._subscription import EventSubscription as EventSubscription
from ._dap._service import DebugService as DebugService, open_debug_service as open_debug_service
from ._dap._state import DebugState as DebugState
from ._endpoint import (
    EndpointClosed as EndpointClosed,
    EndpointStatistics as EndpointStatistics,
    JSONRPCEndpoint as JSONRPCEndpoint,
    JSONRPCError as JSONRPCError,
    NotificationHandler as NotificationHandler,
    RequestHandler as RequestHandler,
    current_request_id as current_request_id,
    method_not_found as method_not_found,
    open_jsonrpc_endpoint as open_jsonrpc_endpoint,
)
from ._lsp._service import LspService as LspService, open_lsp_service as open_lsp_service
from ._lsp._state import LspState as LspState, RestartBudget as RestartBudget
from ._process._marker import SCOPE_ENV as SCOPE_ENV
from ._process._oneshot import (
    DEFAULT_MAX_OUTPUT_BYTES as DEFAULT_MAX_OUTPUT_BYTES,
    ProcessResult as ProcessResult,
    run_process as run_process,
)
from ._process._reaper import (
    reap_adopted_children as reap_adopted_children,
    reap_orphans as reap_orphans,
)
from ._process._tree import (
    DEVNULL as DEVNULL,
    PIPE as PIPE,
    STDOUT as STDOUT,
    ProcessTree as ProcessTree,
    TreeEndReport as TreeEndReport,
    open_process_tree as open_process_tree,
)
from ._session._events import EventQueue as EventQueue, EventQueueStatistics as EventQueueStatistics
from ._terminal._pty import EndBounds as EndBounds
from ._terminal._service import (
    TerminalService as TerminalService,
    open_terminal_service as open_terminal_service,
)

__all__ = (
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_SERVICES",
    "DEVNULL",
    "ERROR_CATALOG",
    "PIPE",
    "PROTOCOL_VERSION",
    "SCOPE_ENV",
    "STDOUT",
    "CatalogEntry",
    "CommandHandler",
    "Core",
    "CoreError",
    "CoreErrorCode",
    "CoreThread",
    "DebugService",
    "DebugState",
    "EndBounds",
    "EndpointClosed",
    "EndpointStatistics",
    "ErrorCode",
    "EventQueue",
    "EventQueueStatistics",
    "EventSubscription",
    "JSONRPCEndpoint",
    "JSONRPCError",
    "LspService",
    "LspState",
    "NotificationHandler",
    "ProcessJobRunner",
    "ProcessResult",
    "ProcessTree",
    "RequestHandler",
    "RestartBudget",
    "RunFileError",
    "Service",
    "ServiceContext",
    "ServiceFactory",
    "TerminalService",
    "TreeEndReport",
    "current_operation_id",
    "current_request_id",
    "load_run_file",
    "lookup_error",
    "method_not_found",
    "open_core",
    "open_debug_service",
    "open_jsonrpc_endpoint",
    "open_lsp_service",
    "open_process_tree",
    "open_terminal_service",
    "reap_adopted_children",
    "reap_orphans",
    "run_process",
    "serve",
)
