"""Pure rules of the plugin-function protocol (issue 6): table tests, no processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from protocol import CoreError
from supervisor._plugin_state import (
    FunctionRegistry,
    HostRefusal,
    RegistrationError,
    capabilities_result,
    check_function_request,
    check_host_notification,
    check_host_request,
    check_host_services,
    function_failure,
    function_timeout_ms,
    host_failure,
    is_function_id,
    negotiate_functions,
    normalize_progress,
    validate_log_fact,
)

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("snapshot.refresh", True),
        ("a", True),
        ("aB1.c", True),
        ("Snapshot", False),
        ("a..b", False),
        ("a.", False),
        ("a-b", False),
        ("", False),
        ("a" * 128, True),
        ("a" * 129, False),
        (3, False),
    ],
)
def test_function_ids(value: object, ok: bool) -> None:
    assert is_function_id(value) is ok


def _answer(lf: JSONValue) -> JSONValue:
    return {"capabilities": {"experimental": {"litheFunctions": lf}}}


@pytest.mark.parametrize(
    ("lf", "expected"),
    [
        ({"version": 0}, (0, [])),
        (
            {"version": 0, "functions": [{"id": "b.x", "extra": 1}, {"id": "a"}], "x": 1},
            (0, ["a", "b.x"]),
        ),
        ({"version": 1, "functions": []}, None),
        ({"version": 0, "functions": [{"id": "a"}, {"id": "a"}]}, None),
        ({"version": 0, "functions": [{"id": "Bad"}]}, None),
        ({"version": 0, "functions": [{"id": f"f{i}"} for i in range(257)]}, None),
        ({"version": "0"}, None),
        (None, None),
    ],
)
def test_negotiation_is_all_or_nothing(lf: JSONValue, expected: object) -> None:
    assert negotiate_functions(_answer(lf)) == expected


def test_registration_all_or_nothing_and_limit() -> None:
    registry = FunctionRegistry(["a"])
    bad_registrations: list[JSONValue] = [
        {"functions": []},
        {"functions": [{"id": "b"}, {"id": "b"}]},
        {"functions": [{"id": "b"}, {"id": "a"}]},
        {"functions": [{"id": "b"}, {"id": "Bad"}]},
        None,
    ]
    for bad in bad_registrations:
        with pytest.raises(RegistrationError):
            registry.register(bad)
        assert registry.sorted_ids() == ["a"]
    assert registry.register({"functions": [{"id": f"f{i}"} for i in range(255)]})
    with pytest.raises(RegistrationError):
        registry.register({"functions": [{"id": "z"}]})
    assert len(registry) == 256
    bad_withdrawals: list[JSONValue] = [
        {"ids": []},
        {"ids": ["a", "a"]},
        {"ids": ["a", "nope"]},
        {"ids": ["A"]},
    ]
    for bad in bad_withdrawals:
        with pytest.raises(RegistrationError):
            registry.unregister(bad)
    assert registry.unregister({"ids": ["f1", "a"]}) == ["a", "f1"]
    assert len(registry) == 254


REF: JSONObject = {"pluginID": "com.example", "functionID": "snapshot.refresh"}


@pytest.mark.parametrize(
    ("function", "params", "owner", "negotiated", "code"),
    [
        # The first failing check wins, in the reference's order.
        ({"pluginID": "", "functionID": "x"}, 3, None, False, "plugin.function.invalidReference"),
        ({**REF, "functionID": "Bad"}, 3, None, False, "plugin.function.invalidReference"),
        (REF, 3, None, False, "plugin.function.invalidParams"),
        (REF, [], "com.example", True, "plugin.function.invalidParams"),
        (REF, {}, None, False, "plugin.function.unavailable"),
        (REF, {}, "com.other", False, "plugin.function.wrongPlugin"),
        (REF, {}, "com.example", False, "plugin.function.unavailable"),
        ({**REF, "functionID": "other"}, {}, "com.example", True, "plugin.function.unknown"),
    ],
)
def test_function_request_check_order(
    function: JSONValue, params: JSONValue, owner: str | None, negotiated: bool, code: str
) -> None:
    with pytest.raises(CoreError) as refused:
        check_function_request(
            function,
            params,
            None,
            session_plugin_id=owner,
            negotiated=negotiated,
            registry=FunctionRegistry(["snapshot.refresh"]) if negotiated else None,
        )
    assert refused.value.code == code


def test_function_request_accepts_and_defaults_params() -> None:
    assert check_function_request(
        REF,
        None,
        {"contextID": "w-1", "generation": 1},
        session_plugin_id="com.example",
        negotiated=True,
        registry=FunctionRegistry(["snapshot.refresh"]),
    ) == ("snapshot.refresh", {})
    with pytest.raises(CoreError) as bad_context:
        check_function_request(
            REF,
            {},
            {"contextID": "w-1", "generation": 0},
            session_plugin_id="com.example",
            negotiated=True,
            registry=FunctionRegistry(["snapshot.refresh"]),
        )
    assert bad_context.value.code == "plugin.function.invalidParams"


@pytest.mark.parametrize(
    ("requested", "session_default", "expected"),
    [
        (None, 30_000, 30_000),
        (1, 30_000, 1),
        (3_600_000, 30_000, 3_600_000),
        (3_600_001, 30_000, 3_600_000),
        (10**12, 30_000, 3_600_000),
        (None, 7_200_000, 3_600_000),
    ],
)
def test_function_timeout_defaults_to_the_session_and_is_capped_at_an_hour(
    requested: JSONValue, session_default: int, expected: int
) -> None:
    assert function_timeout_ms(requested, session_default) == expected


def test_failure_and_progress_normalization() -> None:
    failure = function_failure("é" * 1000, {"code": "db.locked"})
    assert len(str(failure["message"]).encode()) <= 1024
    assert failure["pluginErrorCode"] == "db.locked"
    assert "pluginErrorCode" not in function_failure("m", {"code": "x" * 65})
    assert "pluginErrorCode" not in function_failure("m", {"code": "has space"})
    assert normalize_progress({"operationID": "w", "percentage": 50.0}) == ("w", {"percentage": 50})
    bad_reports: list[JSONValue] = [
        {"operationID": "w", "percentage": 101},
        {"operationID": "w", "percentage": 1.5},
        {"operationID": "w", "percentage": True},
        {"operationID": "w", "message": 3},
        {"percentage": 1},
    ]
    for report in bad_reports:
        assert normalize_progress(report) is None
    cut = normalize_progress({"operationID": "w", "message": "x" * 2000})
    assert cut is not None
    assert cut[1]["message"] == "x" * 1024


GRANTS = frozenset({"credentials"})


@pytest.mark.parametrize(
    ("method", "params", "number", "code"),
    [
        ("lithe/function/invoke", {}, -32603, "plugin.function.recursiveCall"),
        ("lithe/build/execute", {}, -32603, "plugin.function.recursiveCall"),
        ("lithe/host/nothing", {"x": 1}, -32601, "plugin.host.unavailable"),
        ("lithe/host/workspace/listContexts", 5, -32010, "plugin.host.permissionDenied"),
        ("lithe/host/credentials/get", 5, -32602, "plugin.host.invalidParams"),
        ("lithe/host/credentials/get", {"key": "bad key"}, -32602, "plugin.host.invalidParams"),
        (
            "lithe/host/credentials/get",
            {"key": "k", "ttl": 1},
            -32018,
            "plugin.host.unsupportedOption",
        ),
    ],
)
def test_host_request_refusal_order(method: str, params: JSONValue, number: int, code: str) -> None:
    with pytest.raises(HostRefusal) as refused:
        check_host_request(method, params, GRANTS)
    assert (refused.value.number, refused.value.code) == (number, code)
    if code == "plugin.host.unsupportedOption":
        assert refused.value.data()["details"] == {"option": "ttl"}


def test_host_failures_map_codes_and_bound_details() -> None:
    assert host_failure({"message": "m", "code": "plugin.host.notFound"})[:2] == (-32016, "m")
    number, _, data = host_failure({"message": "m", "code": "weird", "details": {"a": 1}})
    assert (number, data) == (-32603, {"code": "plugin.host.failed", "details": {"a": 1}})
    _, _, dropped = host_failure({"message": "m", "details": {"a": "x" * 5000}})
    assert "details" not in dropped
    assert len(host_failure({"message": "y" * 3000})[1]) == 1024
    with pytest.raises(CoreError):
        host_failure({"code": "plugin.host.failed"})


def test_capabilities_list_only_what_is_granted() -> None:
    caps = capabilities_result(0, GRANTS)
    services = caps["services"]
    assert isinstance(services, dict)
    assert set(services) == {"host", "subscriptions", "commands", "credentials"}
    limits = caps["limits"]
    assert isinstance(limits, dict)
    assert limits["pendingHostRequests"] == 16
    with pytest.raises(CoreError):
        check_host_services(["credentials", "nope"])
    assert check_host_services(["workspace", "lithe/host/documents/list"])


@pytest.mark.parametrize(
    ("method", "params", "grants", "ok"),
    [
        (
            "lithe/host/subscriptions/notify",
            {"subscriptionID": "s", "sequence": 1, "event": {}},
            [],
            True,
        ),
        (
            "lithe/host/subscriptions/notify",
            {"subscriptionID": "s", "sequence": 0, "event": {}},
            [],
            False,
        ),
        ("lithe/host/workspace/didChangeContexts", {"revision": 2}, [], False),
        ("lithe/host/workspace/didChangeContexts", {"revision": 2}, ["workspace"], True),
        ("lithe/host/commands/didRun", {"commandID": "x" * 70000}, [], False),
        ("lithe/host/other", {}, [], False),
    ],
)
def test_host_notifications(method: str, params: JSONValue, grants: list[str], ok: bool) -> None:
    if ok:
        check_host_notification(method, params, frozenset(grants))
    else:
        with pytest.raises(CoreError):
            check_host_notification(method, params, frozenset(grants))


def test_log_facts() -> None:
    reg = FunctionRegistry(["snapshot.refresh"])
    ok = validate_log_fact(
        {"kind": "operationFinished", "operation": "snapshot.refresh", "durationMs": 3}, reg
    )
    assert ok is not None
    assert ok["catalogEvent"] == "plugins.operation.finished"
    bad_facts: list[JSONObject] = [
        {"kind": "operationFinished", "operation": "snapshot.refresh"},
        {"kind": "operationFailed", "operation": "snapshot.refresh", "durationMs": 1},
        {"kind": "degraded", "operation": "initialize", "code": "x", "durationMs": 1},
        {"kind": "degraded", "operation": "user input", "code": "x"},
        {"kind": "degraded", "operation": "initialize", "code": "x", "message": "no"},
        {"kind": "nope", "operation": "initialize"},
    ]
    for bad in bad_facts:
        assert validate_log_fact(bad, reg) is None
