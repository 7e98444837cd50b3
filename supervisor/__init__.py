"""The supervisor: process trees, the JSON-RPC endpoint, the Core, serve mode and the CLI.

Everything that touches processes, streams and cancel scopes lives here; the sans-I/O
protocol is in :mod:`protocol` and the lane policy in :mod:`lanes`.
"""

from __future__ import annotations

from ._core import (
    DEFAULT_SERVICES as DEFAULT_SERVICES,
    PROTOCOL_VERSION as PROTOCOL_VERSION,
    Core as Core,
    CoreThread as CoreThread,
    open_core as open_core,
)
from ._core_context import current_operation_id as current_operation_id
from ._dap_service import DebugService as DebugService, open_debug_service as open_debug_service
from ._dap_state import DebugState as DebugState
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
from ._events import EventQueue as EventQueue, EventQueueStatistics as EventQueueStatistics
from ._jobs import ProcessJobRunner as ProcessJobRunner
from ._lsp_service import LspService as LspService, open_lsp_service as open_lsp_service
from ._lsp_state import LspState as LspState, RestartBudget as RestartBudget
from ._marker import SCOPE_ENV as SCOPE_ENV
from ._process import (
    DEFAULT_MAX_OUTPUT_BYTES as DEFAULT_MAX_OUTPUT_BYTES,
    ProcessResult as ProcessResult,
    run_process as run_process,
)
from ._reaper import reap_adopted_children as reap_adopted_children, reap_orphans as reap_orphans
from ._runfile import RunFileError as RunFileError, load_run_file as load_run_file
from ._serve import serve as serve
from ._service import (
    CommandHandler as CommandHandler,
    Service as Service,
    ServiceContext as ServiceContext,
    ServiceFactory as ServiceFactory,
)
from ._terminal import EndBounds as EndBounds
from ._terminal_service import (
    TerminalService as TerminalService,
    open_terminal_service as open_terminal_service,
)
from ._tree import (
    DEVNULL as DEVNULL,
    PIPE as PIPE,
    STDOUT as STDOUT,
    ProcessTree as ProcessTree,
    TreeEndReport as TreeEndReport,
    open_process_tree as open_process_tree,
)

__all__ = (
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_SERVICES",
    "DEVNULL",
    "PIPE",
    "PROTOCOL_VERSION",
    "SCOPE_ENV",
    "STDOUT",
    "CommandHandler",
    "Core",
    "CoreThread",
    "DebugService",
    "DebugState",
    "EndBounds",
    "EndpointClosed",
    "EndpointStatistics",
    "EventQueue",
    "EventQueueStatistics",
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
