"""Pure rules of the plugin-function protocol (issue 6): table tests, no processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from protocol import ERROR_CATALOG, CoreError
from supervisor._plugin._state import (
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
    ("function", "params", "owner", "negotiated", "code", "plugin_code"),
    [
        # The first failing check wins, in the reference's order.
        (
            {"pluginID": "", "functionID": "x"},
            3,
            None,
            False,
            "invalid_request",
            "invalidReference",
        ),
        ({**REF, "functionID": "Bad"}, 3, None, False, "invalid_request", "invalidReference"),
        (REF, 3, None, False, "invalid_request", "invalidParams"),
        (REF, [], "com.example", True, "invalid_request", "invalidParams"),
        (REF, {}, None, False, "not_supported", "unavailable"),
        (REF, {}, "com.other", False, "permission_denied", "wrongPlugin"),
        (REF, {}, "com.example", False, "not_supported", "unavailable"),
        ({**REF, "functionID": "other"}, {}, "com.example", True, "not_supported", "unknown"),
    ],
)
def test_function_request_check_order(
    function: JSONValue,
    params: JSONValue,
    owner: str | None,
    negotiated: bool,
    code: str,
    plugin_code: str,
) -> None:
    """plugin-contract.md "Invocation": the Core code in ``error.code``, the
    ``plugin.function.*`` code in ``error.details.code``."""
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
    assert refused.value.details == {"code": f"plugin.function.{plugin_code}"}


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
    assert bad_context.value.code == "invalid_request"
    assert bad_context.value.details == {"code": "plugin.function.invalidParams"}


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


# -- issue 6 audit: the boundaries of each bound, and the rules not covered above ----------


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ({"operationID": "w", "percentage": 0}, {"percentage": 0}),
        ({"operationID": "w", "percentage": 100}, {"percentage": 100}),
        ({"operationID": "w", "percentage": -1}, None),
        ({"operationID": "w", "percentage": 100.5}, None),
        ({"operationID": "w", "message": "é" * 600}, {"message": "é" * 512}),
        ({"operationID": "w", "message": "x" * 1024}, {"message": "x" * 1024}),
        ({"operationID": "", "percentage": 1}, None),
        ({"operationID": 7, "percentage": 1}, None),
        ({"operationID": "w"}, {}),
    ],
)
def test_progress_bounds(report: JSONValue, expected: JSONObject | None) -> None:
    """Issue 6 "Progress": message cut to 1024 bytes on a character boundary; percentage a
    whole number 0..100; anything else is a malformed report (dropped)."""
    normalized = normalize_progress(report)
    assert (normalized[1] if normalized is not None else None) == expected


def test_failure_message_cut_and_plugin_error_code_bounds() -> None:
    """Issue 6 "Invocation": the message cut to 1024 bytes on a character boundary;
    pluginErrorCode only for an identifier of at most 64 bytes."""
    assert function_failure("é" * 600, None)["message"] == "é" * 512
    assert function_failure(None, None) == {"code": "plugin.function.failed", "message": ""}
    assert function_failure("m", {"code": "a" * 64})["pluginErrorCode"] == "a" * 64
    for bad in ("a" * 65, "1abc", "", 7, None):
        assert "pluginErrorCode" not in function_failure("m", {"code": bad})
    assert "pluginErrorCode" not in function_failure("m", "db.locked")


@pytest.mark.parametrize(
    ("method", "params", "number", "code", "option"),
    [
        # An unknown field names itself even when a known one is malformed too.
        (
            "lithe/host/credentials/get",
            {"key": "bad key", "ttl": 1},
            -32018,
            "plugin.host.unsupportedOption",
            "ttl",
        ),
        # Not granted beats an unknown field; an unknown method beats everything.
        ("lithe/host/workspace/getFolders", {"x": 1}, -32010, "plugin.host.permissionDenied", None),
        ("lithe/host/nothing", 5, -32601, "plugin.host.unavailable", None),
        ("lithe/build/model", {"x": 1}, -32603, "plugin.function.recursiveCall", None),
        (
            "lithe/host/credentials/get",
            {"key": "k" * 129},
            -32602,
            "plugin.host.invalidParams",
            None,
        ),
        (
            "lithe/host/credentials/set",
            {"key": "k", "secret": "s" * (16 * 1024 + 1)},
            -32602,
            "plugin.host.invalidParams",
            None,
        ),
        ("lithe/host/credentials/get", {}, -32602, "plugin.host.invalidParams", None),
    ],
)
def test_host_request_first_failing_check_wins(
    method: str, params: JSONValue, number: int, code: str, option: str | None
) -> None:
    with pytest.raises(HostRefusal) as refused:
        check_host_request(method, params, GRANTS)
    assert (refused.value.number, refused.value.code) == (number, code)
    assert refused.value.details == ({"option": option} if option else None)


def test_host_request_bounds_that_pass() -> None:
    get = check_host_request("lithe/host/credentials/get", {"key": "k" * 128}, GRANTS)
    assert get.service == "credentials"
    secret: JSONObject = {"key": "k", "secret": "s" * (16 * 1024)}
    assert check_host_request("lithe/host/credentials/set", secret, GRANTS).service == (
        "credentials"
    )
    # getCapabilities and subscriptions/dispose need no grant.
    assert check_host_request("lithe/host/getCapabilities", None, frozenset()).grant is None
    dispose = check_host_request(
        "lithe/host/subscriptions/dispose", {"subscriptionID": "s1"}, frozenset()
    )
    assert dispose.grant is None


def test_every_host_failure_code_keeps_its_number_and_details_are_bounded() -> None:
    """Issue 6: hostResponse codes map to their JSON-RPC numbers; unknown codes (and
    ``plugin.function.*`` codes, which are not host codes) give plugin.host.failed -32603;
    details over 4 KiB serialized, or not an object, are dropped."""
    host_codes = [e for e in ERROR_CATALOG if e.name.startswith("plugin.host.")]
    assert len(host_codes) >= 21
    for entry in host_codes:
        number, _, data = host_failure({"message": "m", "code": entry.name})
        assert (number, data) == (entry.jsonrpc_code, {"code": entry.name}), entry.name
    for unknown in ("plugin.function.callCycle", "plugin.host.nope", None):
        error: JSONObject = {"message": "m"}
        if unknown is not None:
            error["code"] = unknown
        assert host_failure(error)[0] == -32603
        assert host_failure(error)[2] == {"code": "plugin.host.failed"}
    # {"a": "<n x>"} serializes to n + 8 bytes: exactly 4096 is kept, 4097 is dropped.
    fits: JSONObject = {"a": "x" * (4096 - 8)}
    assert host_failure({"message": "m", "details": fits})[2]["details"] == fits
    over: JSONObject = {"a": "x" * (4097 - 8)}
    assert "details" not in host_failure({"message": "m", "details": over})[2]
    assert "details" not in host_failure({"message": "m", "details": [1]})[2]
    with pytest.raises(CoreError):
        host_failure({"message": "m", "extra": 1})


@pytest.mark.parametrize(
    ("method", "params", "grants", "ok"),
    [
        ("lithe/host/workspace/didChangeContexts", {"revision": 0}, ["workspace"], False),
        ("lithe/host/workspace/didChangeContexts", {"revision": -1}, ["workspace"], False),
        ("lithe/host/workspace/didChangeContexts", {"revision": 1.5}, ["workspace"], False),
        ("lithe/host/subscriptions/notify", {"subscriptionID": "s", "sequence": 1}, [], False),
        (
            "lithe/host/subscriptions/notify",
            {"subscriptionID": "s", "sequence": 1, "event": []},
            [],
            False,
        ),
        ("lithe/host/run/didExit", {"runID": "r", "exitCode": 0}, [], False),
        (
            "lithe/host/run/didExit",
            {"runID": "r", "signal": 9},
            ["lithe/host/run/start"],
            True,
        ),
        (
            "lithe/host/run/didExit",
            {"runID": "r", "signal": 128},
            ["lithe/host/run/start"],
            False,
        ),
        ("lithe/host/commands/didRun", {"commandID": "x" * 60_000}, [], True),
        (
            "lithe/host/commands/didRun",
            {"commandID": "go", "context": {"contextID": "w", "generation": 0}},
            [],
            False,
        ),
    ],
)
def test_host_notification_rules(
    method: str, params: JSONValue, grants: list[str], ok: bool
) -> None:
    """Issue 6 "Host notifications": granted, positive revision/sequence, event an object,
    signal 1..127, size bound (notificationBytes, 64 KiB)."""
    if ok:
        check_host_notification(method, params, frozenset(grants))
    else:
        with pytest.raises(CoreError) as refused:
            check_host_notification(method, params, frozenset(grants))
        assert refused.value.code == "invalid_request"


LONG_ID = "f" + "x" * 64  # a registered function ID of 65 bytes


@pytest.mark.parametrize(
    ("fact", "ok"),
    [
        ({"kind": "operationFinished", "operation": "snapshot.refresh", "durationMs": 0}, True),
        (
            {
                "kind": "operationFinished",
                "operation": "snapshot.refresh",
                "durationMs": 9_007_199_254_740_991,
            },
            True,
        ),
        (
            {
                "kind": "operationFinished",
                "operation": "snapshot.refresh",
                "durationMs": 9_007_199_254_740_992,
            },
            False,
        ),
        ({"kind": "operationFinished", "operation": "snapshot.refresh", "durationMs": -1}, False),
        ({"kind": "operationFinished", "operation": "snapshot.refresh", "durationMs": 1.5}, False),
        (
            {"kind": "operationFailed", "operation": "shutdown", "durationMs": 1, "code": "a" * 64},
            True,
        ),
        (
            {"kind": "operationFailed", "operation": "shutdown", "durationMs": 1, "code": "a" * 65},
            False,
        ),
        ({"kind": "degraded", "operation": "notification", "code": "a b"}, False),
        ({"kind": "degraded", "operation": "notification", "code": ""}, False),
        ({"kind": "recovered", "operation": "result-encoding", "code": "x.y:z/$-_"}, True),
        ({"kind": "recovered", "operation": "initialize", "code": "c", "count": 0}, True),
        ({"kind": "recovered", "operation": "initialize", "code": "c", "count": -1}, False),
        ({"kind": "recovered", "operation": "initialize", "code": "c", "count": True}, False),
        ({"kind": "recovered", "operation": "initialize", "code": "c", "operationId": "7"}, True),
        (
            {"kind": "recovered", "operation": "initialize", "code": "c", "operationId": "o" * 128},
            True,
        ),
        (
            {"kind": "recovered", "operation": "initialize", "code": "c", "operationId": "o" * 129},
            False,
        ),
        ({"kind": "recovered", "operation": "initialize", "code": "c", "operationId": ""}, False),
        ({"kind": "degraded", "operation": "lithe/build/model", "code": "c"}, True),
        ({"kind": "degraded", "operation": "lithe/vcs/status", "code": "c"}, True),
        ({"kind": "degraded", "operation": "lithe/keymap/import", "code": "c"}, True),
        ({"kind": "degraded", "operation": "lithe/other/x", "code": "c"}, False),
        ({"kind": "degraded", "operation": "not.registered", "code": "c"}, False),
        # A registered ID over 64 bytes is reported as function-call, never by itself.
        ({"kind": "degraded", "operation": "function-call", "code": "c"}, True),
        ({"kind": "degraded", "operation": LONG_ID, "code": "c"}, False),
    ],
)
def test_log_fact_fields(fact: JSONObject, ok: bool) -> None:
    """Issue 6 "Structured plugin diagnostics": each field as the reference bounds it."""
    registry = FunctionRegistry(["snapshot.refresh", LONG_ID])
    assert (validate_log_fact(fact, registry) is not None) is ok


def test_log_fact_function_call_needs_a_long_registered_id() -> None:
    fact: JSONObject = {"kind": "degraded", "operation": "function-call", "code": "c"}
    assert validate_log_fact(fact, FunctionRegistry(["snapshot.refresh"])) is None
    # Without a negotiated registry only non-function operations are accepted.
    assert validate_log_fact(fact, None) is None
    assert validate_log_fact({"kind": "degraded", "operation": "shutdown", "code": "c"}, None)
