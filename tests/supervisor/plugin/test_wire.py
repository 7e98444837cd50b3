"""Both ends of the plugin wire check alike: the host's rules and the SDK's are one module.

plugin-contract.md "Structured plugin diagnostics" (``operationId``: 1-128 ASCII token bytes),
"Cross-plugin calls" (``parentOperationID``: a string of 1-128 bytes), "Invocation"
(``pluginErrorCode``: an identifier of at most 64 bytes) and the ``plugin.*`` numbers of the
error catalog. No processes: table tests of pure functions.
"""

from __future__ import annotations

import pytest

from protocol import ERROR_CATALOG
from supervisor._plugin._relay_state import RelayRefusal, parse_invoke
from supervisor._plugin._state import function_failure, validate_log_fact
from supervisor.plugin_sdk import HOST_ERRORS, HostError, PluginError, PluginSdkError
from supervisor.plugin_sdk._backend import _invoke_params
from supervisor.plugin_sdk._wire import is_operation_id, log_fact

OPERATION_IDS = [
    ("7", True),
    ("fn-12", True),
    ("relay-3", True),
    ("o" * 128, True),
    ("!#$%&'*+-.^_`|~:/", True),
    ("o" * 129, False),
    ("", False),
    ('say"hi"', False),  # a token never holds a quote
    ("a b", False),
    ("tab\there", False),
    ("\x7f", False),
    ("é", False),
]


@pytest.mark.parametrize(("operation_id", "ok"), OPERATION_IDS)
def test_sdk_and_host_agree_on_operation_ids(operation_id: str, ok: bool) -> None:
    """What the SDK attaches to a ``lithe/log`` fact the host keeps, and only that."""
    assert is_operation_id(operation_id) is ok
    fact = log_fact("recovered", "initialize", code="c", operation_id=operation_id)
    assert ("operationId" in fact) is ok
    sent = {"kind": "recovered", "operation": "initialize", "code": "c"}
    kept = validate_log_fact({**sent, "operationId": operation_id}, None)
    assert (kept is not None) is ok
    # The SDK drops an ID the host would refuse, so the fact itself still arrives.
    assert validate_log_fact(fact, None) is not None


PARENT_IDS = [
    ("fn-1", True),
    ("a b", True),  # any string: not the token rule of operationId
    ('say"hi"', True),
    ("é" * 64, True),
    ("o" * 128, True),
    ("é" * 65, False),
    ("", False),
    (7, False),
]


def _invoke(parent: object) -> dict[str, object]:
    return {
        "pluginID": "dev.example.tools",
        "functionID": "snapshot.refresh",
        "context": {"contextID": "ctx", "generation": 1},
        "parentOperationID": parent,
    }


@pytest.mark.parametrize(("parent", "ok"), PARENT_IDS, ids=[repr(p)[:12] for p, _ in PARENT_IDS])
def test_sdk_and_host_agree_on_parent_operation_ids(parent: object, ok: bool) -> None:
    """The SDK refuses locally exactly the ``parentOperationID`` the relay would refuse."""
    context = {"contextID": "ctx", "generation": 1}
    if ok:
        call = _invoke_params(context, "dev.example.tools", "snapshot.refresh", None, None, parent)
        assert call["parentOperationID"] == parent
        assert parse_invoke(_invoke(parent)).parent_operation_id == parent  # type: ignore[arg-type]
        return
    with pytest.raises(PluginSdkError, match="parentOperationID"):
        _invoke_params(context, "dev.example.tools", "snapshot.refresh", None, None, parent)
    with pytest.raises(RelayRefusal, match="parentOperationID"):
        parse_invoke(_invoke(parent))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "code", ["db.locked", "a" * 64, "_private", "x-y_z.1", "a" * 65, "1abc", "has space", ""]
)
def test_sdk_and_host_agree_on_plugin_error_codes(code: str) -> None:
    """A code ``PluginError`` accepts is the ``pluginErrorCode`` the host passes on."""
    try:
        PluginError(code, "m")
    except ValueError:
        accepted = False
    else:
        accepted = True
    kept = function_failure("m", {"code": code}).get("pluginErrorCode") == code
    assert accepted is kept


def test_host_errors_are_the_catalog_plugin_codes() -> None:
    """Every numbered ``plugin.*`` code of the catalog, with its number; none other."""
    expected = {
        entry.name: entry.jsonrpc_code
        for entry in ERROR_CATALOG
        if entry.name.startswith("plugin.") and entry.jsonrpc_code is not None
    }
    assert expected == HOST_ERRORS
    assert HOST_ERRORS["plugin.host.languageServerUnavailable"] == -32022


def test_a_number_without_a_code_names_the_first_catalog_code() -> None:
    """-32602 is shared by invalidParams and invalidRegistration: the first one names it."""
    assert HostError.from_wire(-32602, "m", None).code == "plugin.host.invalidParams"
    assert HostError.from_wire(-32070, "m", {}).code == "plugin.function.failed"
    assert HostError.from_wire(-32099, "m", None).code == "plugin.host.failed"
    assert HostError("plugin.function.invalidRegistration", "m").rpc_code == -32602
