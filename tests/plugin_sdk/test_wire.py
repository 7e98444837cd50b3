"""Pure rules of the SDK: IDs, cuts, progress, facts, negotiation, error mapping."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from supervisor.plugin_sdk import HostError, PluginError
from supervisor.plugin_sdk._wire import (
    HOST_ERRORS,
    cut_utf8,
    encode_result,
    is_function_id,
    log_fact,
    log_operation,
    negotiate,
    normalize_progress,
)

if TYPE_CHECKING:
    from protocol import JSONValue


@pytest.mark.parametrize("good", ["snapshot.refresh", "a", "tool.runTests", "a1.b2c"])
def test_function_ids_accepted(good: str) -> None:
    assert is_function_id(good)


@pytest.mark.parametrize("bad", ["", "Snapshot", "a..b", "a.", ".a", "a-b", "a." * 70 + "a", 3])
def test_function_ids_refused(bad: object) -> None:
    assert not is_function_id(bad)


def test_function_id_bound_is_128_bytes() -> None:
    assert is_function_id("a" * 128)
    assert not is_function_id("a" * 129)


def test_cut_on_character_boundary() -> None:
    assert cut_utf8("é" * 600, 1024) == "é" * 512
    assert cut_utf8("aé", 2) == "a"
    assert cut_utf8("short", 1024) == "short"


def test_progress_normalized() -> None:
    assert normalize_progress("x" * 2000, 33.6) == {"message": "x" * 1024, "percentage": 34}
    assert normalize_progress(None, 250) == {"percentage": 100}
    assert normalize_progress(None, -3) == {"percentage": 0}
    assert normalize_progress(None, float("nan")) == {}


def test_result_bound() -> None:
    assert encode_result(None) == 4
    with pytest.raises(ValueError, match="over"):
        encode_result("x" * (1024 * 1024))
    with pytest.raises(ValueError, match="not JSON"):
        encode_result({1, 2})


def test_log_facts_follow_the_contract() -> None:
    assert log_fact("operationFinished", "a.b", duration_ms=5, operation_id="7") == {
        "kind": "operationFinished",
        "operation": "a.b",
        "durationMs": 5,
        "operationId": "7",
    }
    with pytest.raises(ValueError, match="code"):
        log_fact("operationFailed", "a.b", duration_ms=1)  # code required
    with pytest.raises(ValueError, match="durationMs"):
        log_fact("degraded", "a.b", duration_ms=1, code="x")  # no duration for degraded
    with pytest.raises(ValueError, match="kind"):
        log_fact("info", "a.b")
    assert log_operation("a" * 65) == "function-call"


def test_negotiation_reads_offers() -> None:
    offers: JSONValue = {"capabilities": {"experimental": {"litheFunctions": {"versions": [0]}}}}
    assert negotiate(offers).functions_version == 0
    assert negotiate(offers).logging_version is None
    assert (
        negotiate(
            {"capabilities": {"experimental": {"litheFunctions": {"versions": [1]}}}}
        ).functions_version
        is None
    )
    assert negotiate(None).functions_version is None


def test_errors() -> None:
    with pytest.raises(ValueError, match="code"):
        PluginError("1bad", "x")
    with pytest.raises(ValueError, match="code"):
        PluginError("a" * 65, "x")
    error = HostError.from_wire(-32065, "cycle", None)
    assert error.code == "plugin.function.callCycle"
    error = HostError.from_wire(
        -32018, "no", {"code": "plugin.host.unsupportedOption", "details": {"option": "x"}}
    )
    assert error.details == {"option": "x"}
    assert HostError.from_wire(-1, "?", None).code == "plugin.host.failed"


#: plugin-contract.md "Outcomes and error codes" (host codes with numbers) and
#: plugin-sdk-node.md "Calling other plugins" (relay numbers): every one a HostError knows.
REFERENCE_NUMBERS = {
    "plugin.host.unavailable": -32601,
    "plugin.host.invalidParams": -32602,
    "plugin.host.failed": -32603,
    "plugin.host.cancelled": -32800,
    "plugin.host.permissionDenied": -32010,
    "plugin.host.contextExpired": -32011,
    "plugin.host.authorityUnsupported": -32012,
    "plugin.host.versionConflict": -32013,
    "plugin.host.limitExceeded": -32014,
    "plugin.host.timeout": -32015,
    "plugin.host.notFound": -32016,
    "plugin.host.readOnly": -32017,
    "plugin.host.unsupportedOption": -32018,
    "plugin.host.preconditionFailed": -32019,
    "plugin.host.busy": -32020,
    "plugin.host.rateLimited": -32021,
    "plugin.host.languageServerUnavailable": -32022,
    "plugin.host.languageServerError": -32023,
    "plugin.host.methodNotDeclared": -32024,
    "plugin.host.toolUnresolved": -32025,
    "plugin.host.foreignContribution": -32026,
    "plugin.function.notDeclared": -32027,
    "plugin.function.notExported": -32028,
    "plugin.function.providerDisabled": -32029,
    "plugin.function.versionMismatch": -32030,
    "plugin.function.callCycle": -32065,
    "plugin.function.depthExceeded": -32066,
    "plugin.function.tooManyCalls": -32067,
    "plugin.function.payloadTooLarge": -32068,
    "plugin.function.providerUnavailable": -32069,
    "plugin.function.failed": -32070,
    "plugin.function.invalidResult": -32071,
}


@pytest.mark.parametrize(("code", "number"), sorted(REFERENCE_NUMBERS.items()))
def test_host_errors_map_every_reference_code_to_its_number(code: str, number: int) -> None:
    assert HOST_ERRORS[code] == number
    assert HostError(code, "x").rpc_code == number
