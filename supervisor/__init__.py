"""The supervisor: process trees, the JSON-RPC endpoint, the Core, serve mode and the CLI.

Everything that touches processes, streams and cancel scopes lives here; the sans-I/O
protocol is in :mod:`protocol` and the lane policy in :mod:`lanes`.
"""

from __future__ import annotations

#: The distribution this package belongs to: ``_trio_process_supervisor`` tells ours from
#: supervisord's package (``supervisor`` on PyPI) by it.
__distribution__ = "trio-process-supervisor"

import importlib
import logging

from _trio_process_supervisor import _guard

# Before anything of ours imports them: another distribution's ``protocol`` or ``lanes`` (or
# a ``protocol.py`` in the working directory) would fail on a name it lacks, far from the
# cause. Nothing is imported here (``find_spec``), so the lazy names below stay lazy.
_guard.check("protocol", "lanes")
from typing import TYPE_CHECKING

# A library logs, it does not print: without logging set up by the host, nothing of ours
# reaches its stderr (Python's last-resort handler would print warnings there).
logging.getLogger(__name__).addHandler(logging.NullHandler())

# The names load on first use (PEP 562), so importing a submodule -- the pytest plugin,
# ``supervisor.testbed``'s programs, the CLI -- does not pay for Trio and every service.
if TYPE_CHECKING:
    from ._check._report import (
        CheckResult as CheckResult,
        ConformanceReport as ConformanceReport,
        Outcome as Outcome,
    )
    from ._cli._runfile import RunFileError as RunFileError, load_run_file as load_run_file
    from ._cli._serve import serve as serve
    from ._client._dap import (
        DapClient as DapClient,
        DebugAdapterOptions as DebugAdapterOptions,
        open_dap_client as open_dap_client,
    )
    from ._client._errors import (
        LanguageServerError as LanguageServerError,
        RequestFailed as RequestFailed,
        SessionError as SessionError,
        SessionFailed as SessionFailed,
        StartFailed as StartFailed,
    )
    from ._client._lsp import (
        Document as Document,
        LanguageServerOptions as LanguageServerOptions,
        LspClient as LspClient,
        open_lsp_client as open_lsp_client,
    )
    from ._client._sync import SyncDapClient as SyncDapClient, SyncLspClient as SyncLspClient
    from ._core._context import current_operation_id as current_operation_id
    from ._core._core import (
        DEFAULT_SERVICES as DEFAULT_SERVICES,
        PROTOCOL_VERSION as PROTOCOL_VERSION,
        Core as Core,
        CoreThread as CoreThread,
        SubmittedOperation as SubmittedOperation,
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
    from ._dap._service import (
        DebugService as DebugService,
        open_debug_service as open_debug_service,
    )
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

    # The error types and codes a caller of the Core meets (from protocol).
    from ._errors import (
        ERROR_CATALOG as ERROR_CATALOG,
        CatalogEntry as CatalogEntry,
        CoreError as CoreError,
        CoreErrorCode as CoreErrorCode,
        ErrorCode as ErrorCode,
        lookup_error as lookup_error,
    )
    from ._lsp._service import LspService as LspService, open_lsp_service as open_lsp_service
    from ._lsp._state import LspState as LspState, RestartBudget as RestartBudget
    from ._plugin._host import (
        AllowAll as AllowAll,
        Consent as Consent,
        HostPolicy as HostPolicy,
        RouteToClient as RouteToClient,
        Show as Show,
    )
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
    from ._ray import open_ray_lanes as open_ray_lanes
    from ._session._events import (
        EventQueue as EventQueue,
        EventQueueStatistics as EventQueueStatistics,
    )
    from ._terminal._pty import EndBounds as EndBounds
    from ._terminal._service import (
        TerminalService as TerminalService,
        open_terminal_service as open_terminal_service,
    )

#: ``{public name: (submodule, name in it)}``.
_LAZY: dict[str, tuple[str, str]] = {
    "CheckResult": ("_check._report", "CheckResult"),
    "ConformanceReport": ("_check._report", "ConformanceReport"),
    "Outcome": ("_check._report", "Outcome"),
    "RunFileError": ("_cli._runfile", "RunFileError"),
    "DapClient": ("_client._dap", "DapClient"),
    "DebugAdapterOptions": ("_client._dap", "DebugAdapterOptions"),
    "open_dap_client": ("_client._dap", "open_dap_client"),
    "LanguageServerError": ("_client._errors", "LanguageServerError"),
    "RequestFailed": ("_client._errors", "RequestFailed"),
    "SessionError": ("_client._errors", "SessionError"),
    "SessionFailed": ("_client._errors", "SessionFailed"),
    "StartFailed": ("_client._errors", "StartFailed"),
    "Document": ("_client._lsp", "Document"),
    "LanguageServerOptions": ("_client._lsp", "LanguageServerOptions"),
    "LspClient": ("_client._lsp", "LspClient"),
    "open_lsp_client": ("_client._lsp", "open_lsp_client"),
    "SyncDapClient": ("_client._sync", "SyncDapClient"),
    "SyncLspClient": ("_client._sync", "SyncLspClient"),
    "load_run_file": ("_cli._runfile", "load_run_file"),
    "serve": ("_cli._serve", "serve"),
    "current_operation_id": ("_core._context", "current_operation_id"),
    "DEFAULT_SERVICES": ("_core._core", "DEFAULT_SERVICES"),
    "PROTOCOL_VERSION": ("_core._core", "PROTOCOL_VERSION"),
    "Core": ("_core._core", "Core"),
    "CoreThread": ("_core._core", "CoreThread"),
    "SubmittedOperation": ("_core._core", "SubmittedOperation"),
    "open_core": ("_core._core", "open_core"),
    "ProcessJobRunner": ("_core._jobs", "ProcessJobRunner"),
    "EventSubscription": ("_core._subscription", "EventSubscription"),
    "CommandHandler": ("_core._service", "CommandHandler"),
    "Service": ("_core._service", "Service"),
    "ServiceContext": ("_core._service", "ServiceContext"),
    "ServiceFactory": ("_core._service", "ServiceFactory"),
    "DebugService": ("_dap._service", "DebugService"),
    "open_debug_service": ("_dap._service", "open_debug_service"),
    "DebugState": ("_dap._state", "DebugState"),
    "AllowAll": ("_core._policy", "AllowAll"),
    "Consent": ("_core._policy", "Consent"),
    "HostPolicy": ("_core._policy", "HostPolicy"),
    "RouteToClient": ("_core._policy", "RouteToClient"),
    "Show": ("_core._policy", "Show"),
    "EndpointClosed": ("_endpoint", "EndpointClosed"),
    "EndpointStatistics": ("_endpoint", "EndpointStatistics"),
    "JSONRPCEndpoint": ("_endpoint", "JSONRPCEndpoint"),
    "JSONRPCError": ("_endpoint", "JSONRPCError"),
    "NotificationHandler": ("_endpoint", "NotificationHandler"),
    "RequestHandler": ("_endpoint", "RequestHandler"),
    "current_request_id": ("_endpoint", "current_request_id"),
    "method_not_found": ("_endpoint", "method_not_found"),
    "open_jsonrpc_endpoint": ("_endpoint", "open_jsonrpc_endpoint"),
    "ERROR_CATALOG": ("_errors", "ERROR_CATALOG"),
    "CatalogEntry": ("_errors", "CatalogEntry"),
    "CoreError": ("_errors", "CoreError"),
    "CoreErrorCode": ("_errors", "CoreErrorCode"),
    "ErrorCode": ("_errors", "ErrorCode"),
    "lookup_error": ("_errors", "lookup_error"),
    "LspService": ("_lsp._service", "LspService"),
    "open_lsp_service": ("_lsp._service", "open_lsp_service"),
    "LspState": ("_lsp._state", "LspState"),
    "RestartBudget": ("_lsp._state", "RestartBudget"),
    "SCOPE_ENV": ("_process._marker", "SCOPE_ENV"),
    "DEFAULT_MAX_OUTPUT_BYTES": ("_process._oneshot", "DEFAULT_MAX_OUTPUT_BYTES"),
    "ProcessResult": ("_process._oneshot", "ProcessResult"),
    "run_process": ("_process._oneshot", "run_process"),
    "reap_adopted_children": ("_process._reaper", "reap_adopted_children"),
    "reap_orphans": ("_process._reaper", "reap_orphans"),
    "open_ray_lanes": ("_ray", "open_ray_lanes"),
    "DEVNULL": ("_process._tree", "DEVNULL"),
    "PIPE": ("_process._tree", "PIPE"),
    "STDOUT": ("_process._tree", "STDOUT"),
    "ProcessTree": ("_process._tree", "ProcessTree"),
    "TreeEndReport": ("_process._tree", "TreeEndReport"),
    "open_process_tree": ("_process._tree", "open_process_tree"),
    "EventQueue": ("_session._events", "EventQueue"),
    "EventQueueStatistics": ("_session._events", "EventQueueStatistics"),
    "EndBounds": ("_terminal._pty", "EndBounds"),
    "TerminalService": ("_terminal._service", "TerminalService"),
    "open_terminal_service": ("_terminal._service", "open_terminal_service"),
}


def __getattr__(name: str) -> object:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = (
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_SERVICES",
    "DEVNULL",
    "ERROR_CATALOG",
    "PIPE",
    "PROTOCOL_VERSION",
    "SCOPE_ENV",
    "STDOUT",
    "AllowAll",
    "CatalogEntry",
    "CheckResult",
    "CommandHandler",
    "ConformanceReport",
    "Consent",
    "Core",
    "CoreError",
    "CoreErrorCode",
    "CoreThread",
    "DapClient",
    "DebugAdapterOptions",
    "DebugService",
    "DebugState",
    "Document",
    "EndBounds",
    "EndpointClosed",
    "EndpointStatistics",
    "ErrorCode",
    "EventQueue",
    "EventQueueStatistics",
    "EventSubscription",
    "HostPolicy",
    "JSONRPCEndpoint",
    "JSONRPCError",
    "LanguageServerError",
    "LanguageServerOptions",
    "LspClient",
    "LspService",
    "LspState",
    "NotificationHandler",
    "Outcome",
    "ProcessJobRunner",
    "ProcessResult",
    "ProcessTree",
    "RequestFailed",
    "RequestHandler",
    "RestartBudget",
    "RouteToClient",
    "RunFileError",
    "Service",
    "ServiceContext",
    "ServiceFactory",
    "SessionError",
    "SessionFailed",
    "Show",
    "StartFailed",
    "SubmittedOperation",
    "SyncDapClient",
    "SyncLspClient",
    "TerminalService",
    "TreeEndReport",
    "current_operation_id",
    "current_request_id",
    "load_run_file",
    "lookup_error",
    "method_not_found",
    "open_core",
    "open_dap_client",
    "open_debug_service",
    "open_jsonrpc_endpoint",
    "open_lsp_client",
    "open_lsp_service",
    "open_process_tree",
    "open_ray_lanes",
    "open_terminal_service",
    "reap_adopted_children",
    "reap_orphans",
    "run_process",
    "serve",
)
