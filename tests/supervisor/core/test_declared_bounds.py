"""Every bound a declaration gives (``msgspec.Meta(le=...)`` on a millisecond, byte or count
field) is the number the session enforces, so the two cannot drift again.

``lsp.request`` once declared (and documented) up to 3 600 000 ms while the session refused
anything above 300 000. The table below names, for each bounded field of every command's
payload, the constant the session enforces (imported from the session's module where it keeps
one; the LSP start's bounds are the declaration's own, which the LSP service imports); a new
bounded field fails here until it is added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec.inspect as mi
import pytest

from protocol import MAX_MILLISECONDS, CoreError
from supervisor._api import (
    COMMANDS,
    _contract as contract_api,
    _lsp as lsp_api,
    validate_payload,
)
from supervisor._api._base import MAX_COUNT
from supervisor._api._process import MAX_OUTPUT_BYTES_LIMIT
from supervisor._dap import _session as dap_session
from supervisor._lsp import _session as lsp_session
from supervisor._plugin import _relay_state
from supervisor._terminal import _launch as terminal_launch

if TYPE_CHECKING:
    from protocol import JSONObject

#: The largest TCP port (the transport's, not ours).
_MAX_PORT = 65_535

#: ``(struct, field)`` -> the constant the session enforces for it.
ENFORCED: dict[tuple[str, str], int] = {
    ("ProcessRun", "timeoutMilliseconds"): MAX_MILLISECONDS,
    ("ProcessRun", "maxOutputBytes"): MAX_OUTPUT_BYTES_LIMIT,
    ("JobStart", "timeoutMilliseconds"): MAX_MILLISECONDS,
    ("JobWaitEvents", "timeoutMilliseconds"): MAX_MILLISECONDS,
    ("LspWaitEvents", "timeoutMilliseconds"): MAX_MILLISECONDS,
    ("RunWaitEvents", "timeoutMilliseconds"): MAX_MILLISECONDS,
    ("DebugWaitEvents", "timeoutMilliseconds"): MAX_MILLISECONDS,
    ("TerminalWaitEvents", "timeoutMilliseconds"): MAX_MILLISECONDS,
    ("LspStartServer", "initializeTimeoutMilliseconds"): lsp_api.MAX_SESSION_TIMEOUT_MS,
    ("LspStartServer", "requestTimeoutMilliseconds"): lsp_session.MAX_REQUEST_TIMEOUT_MS,
    ("LspStartServer", "shutdownTimeoutMilliseconds"): lsp_api.MAX_SHUTDOWN_TIMEOUT_MS,
    (
        "LspStartServer",
        "serviceReadyIdleTimeoutMilliseconds",
    ): lsp_api.MAX_SESSION_TIMEOUT_MS,
    (
        "LspStartServer",
        "serviceReadyAbsoluteTimeoutMilliseconds",
    ): lsp_api.MAX_SESSION_TIMEOUT_MS,
    ("RestartBudget", "maxCrashes"): lsp_api.MAX_CRASHES,
    ("RestartBudget", "windowMilliseconds"): lsp_api.MAX_SESSION_TIMEOUT_MS,
    ("RestartBudget", "initialBackoffMilliseconds"): lsp_api.MAX_BACKOFF_MS,
    ("RestartBudget", "maxBackoffMilliseconds"): lsp_api.MAX_BACKOFF_MS,
    ("StateRetention", "maxEntries"): lsp_api.MAX_STATE_ENTRIES,
    ("StateRetention", "maxAgeDays"): lsp_api.MAX_STATE_AGE_DAYS,
    ("LspRequest", "timeoutMilliseconds"): lsp_session.MAX_REQUEST_TIMEOUT_MS,
    ("ResponseError", "code"): MAX_COUNT,
    ("LspFunctionRequest", "timeoutMilliseconds"): MAX_MILLISECONDS,
    ("LspPluginServerRequest", "timeoutMilliseconds"): lsp_session.MAX_REQUEST_TIMEOUT_MS,
    # The plugin contract's requests (CONTRACT_DECLARATIONS).
    ("HostServerRequest", "timeoutMilliseconds"): lsp_session.MAX_REQUEST_TIMEOUT_MS,
    ("HostServerStatus", "percentage"): contract_api.MAX_STATUS_PERCENTAGE,
    ("BackendLaunch", "timeoutMilliseconds"): contract_api.MAX_RESOLVE_TIMEOUT_MS,
    ("RelayContext", "generation"): MAX_COUNT,
    ("Adapter", "port"): _MAX_PORT,
    ("Adapter", "connectTimeoutMilliseconds"): dap_session.MAX_OPERATION_TIMEOUT_MS,
    ("Adapter", "initializeTimeoutMilliseconds"): dap_session.MAX_OPERATION_TIMEOUT_MS,
    ("TerminalCreate", "rows"): terminal_launch.MAX_ROWS,
    ("TerminalCreate", "cols"): terminal_launch.MAX_COLS,
    ("TerminalCreate", "retainedContextBytes"): terminal_launch.MAX_RETAINED_CONTEXT_BYTES,
    ("TerminalResize", "rows"): terminal_launch.MAX_ROWS,
    ("TerminalResize", "cols"): terminal_launch.MAX_COLS,
    ("TerminalClose", "retainedContextBytes"): terminal_launch.MAX_RETAINED_CONTEXT_BYTES,
}
#: The plugin contract's requests a backend makes (and the backend-resolved launch of a
#: launch plan): declared beside the commands and decoded the same way, so their bounds are
#: the declarations' too.
CONTRACT_DECLARATIONS: tuple[type, ...] = (
    contract_api.HostServerRequest,
    contract_api.HostServerNotify,
    contract_api.HostServerStatus,
    contract_api.RelayInvoke,
    contract_api.BackendLaunch,
)
#: Debug payloads: every ``timeoutMilliseconds`` is an operation's deadline; every other
#: bounded integer is a DAP id or position (the Core's count bound).
_DEBUG_OPERATION = dap_session.MAX_OPERATION_TIMEOUT_MS


def _bounded(tp: mi.Type, owner: Any, field: str, seen: frozenset[type], out: set[Any]) -> None:
    if isinstance(tp, mi.IntType):
        if tp.le is not None:
            out.add((owner, field, tp.le))
    elif isinstance(tp, mi.UnionType):
        for arm in tp.types:
            _bounded(arm, owner, field, seen, out)
    elif isinstance(tp, mi.ListType):
        _bounded(tp.item_type, owner, field, seen, out)
    elif isinstance(tp, mi.DictType):
        _bounded(tp.value_type, owner, field, seen, out)
    elif isinstance(tp, mi.StructType) and tp.cls not in seen:
        for child in tp.fields:
            _bounded(child.type, tp.cls, child.encode_name, seen | {tp.cls}, out)


def _declared_bounds() -> dict[tuple[type, str], int]:
    found: set[tuple[type, str, int]] = set()
    for command in COMMANDS.values():
        _bounded(mi.type_info(command.payload), None, "", frozenset(), found)
    for declaration in CONTRACT_DECLARATIONS:
        _bounded(mi.type_info(declaration), None, "", frozenset(), found)
    return {(owner, field): bound for owner, field, bound in found}


def _enforced(owner: type, field: str) -> int | None:
    if (owner.__name__, field) in ENFORCED:
        return ENFORCED[owner.__name__, field]
    if owner.__module__ == "supervisor._api._debug":
        return _DEBUG_OPERATION if field == "timeoutMilliseconds" else MAX_COUNT
    return None


def test_every_declared_bound_is_the_bound_the_session_enforces() -> None:
    declared = _declared_bounds()
    assert declared, "the walk found no bounded field"
    unknown = sorted(
        f"{owner.__name__}.{field}" for owner, field in declared if _enforced(owner, field) is None
    )
    assert not unknown, f"bounded fields without their session constant in ENFORCED: {unknown}"
    drifted = {
        f"{owner.__name__}.{field}": (bound, _enforced(owner, field))
        for (owner, field), bound in declared.items()
        if bound != _enforced(owner, field)
    }
    assert not drifted, f"declared bound != enforced bound: {drifted}"


def test_lsp_request_bound_is_the_references_forwarded_request_bound() -> None:
    # DESIGN.md "Default bounds" / plugin-contract.md: a forwarded language-server request
    # waits 60 000 ms by default, at most 300 000 ms; the plugin host path obeys the same.
    assert lsp_session.MAX_REQUEST_TIMEOUT_MS == 300_000
    assert lsp_session.DEFAULT_REQUEST_TIMEOUT_MS == 60_000
    ok = {"sessionId": "s", "method": "x", "timeoutMilliseconds": 300_000}
    assert validate_payload("lsp.request", ok).timeout_milliseconds == 300_000
    with pytest.raises(CoreError) as raised:
        validate_payload("lsp.request", {**ok, "timeoutMilliseconds": 300_001})
    assert raised.value.code == "invalid_request"
    assert raised.value.details == {"field": "timeoutMilliseconds"}


def test_plugin_request_bounds_keep_the_plugin_contracts_code() -> None:
    """A plugin's bad ``timeoutMilliseconds``/``params`` is refused at the edge by the
    declared bound, with the plugin contract's code, not ``invalid_request`` (issue 24.4)."""
    ok = {"sessionId": "s", "method": "x", "timeoutMilliseconds": 300_000}
    assert validate_payload("lsp.pluginServerRequest", ok).timeout_milliseconds == 300_000
    bads: list[JSONObject] = [
        {"timeoutMilliseconds": 300_001},
        {"timeoutMilliseconds": 0},
        {"params": []},
    ]
    for bad in bads:
        with pytest.raises(CoreError) as raised:
            validate_payload("lsp.pluginServerRequest", {**ok, **bad})
        assert raised.value.code == "plugin.host.invalidParams"
        assert raised.value.details is None
    # Another field of the same payload is still the edge's.
    with pytest.raises(CoreError) as edge:
        validate_payload("lsp.pluginServerRequest", {**ok, "method": ""})
    assert edge.value.code == "invalid_request"


def test_relay_and_launch_deadlines_are_the_declarations() -> None:
    # A relayed call's deadline is cut to its cap, not refused; the cap is declared once.
    assert _relay_state.MAX_TIMEOUT_MS == contract_api.MAX_RELAY_TIMEOUT_MS
    invoke: JSONObject = {
        "pluginID": "p",
        "functionID": "f.g",
        "context": {"contextID": "c", "generation": 1},
        "timeoutMilliseconds": contract_api.MAX_RELAY_TIMEOUT_MS + 1,
    }
    assert _relay_state.parse_invoke(invoke).timeout_ms == contract_api.MAX_RELAY_TIMEOUT_MS
    del invoke["timeoutMilliseconds"]
    assert _relay_state.parse_invoke(invoke).timeout_ms == contract_api.DEFAULT_RELAY_TIMEOUT_MS
    # A backend-resolved launch's lower bound is the declaration's too (999 is refused:
    # tests/supervisor/plugin/test_launch.py).
    lower = mi.type_info(contract_api.BackendLaunch)
    assert isinstance(lower, mi.StructType)
    (timeout,) = [f for f in lower.fields if f.encode_name == "timeoutMilliseconds"]
    assert isinstance(timeout.type, mi.IntType)
    assert timeout.type.ge == contract_api.MIN_RESOLVE_TIMEOUT_MS
