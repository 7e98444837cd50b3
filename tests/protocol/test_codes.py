"""Error codes, the catalog, and the exception types."""

from __future__ import annotations

import re
from pathlib import Path

import lsprotocol.types as lsp
import pytest

from protocol import (
    ERROR_CATALOG,
    CatalogEntry,
    CoreError,
    CoreErrorCode,
    ErrorCode,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    is_jsonrpc_reserved_code,
    is_lsp_reserved_code,
    is_server_error_code,
    lookup_error,
)

#: The reference documents sit beside the checkout (``../shared/reference``), in CI too.
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"
PLUGIN_CONTRACT = REFERENCE / "plugin-contract.md"
PLUGIN_SDK = REFERENCE / "plugin-sdk-node.md"


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


@pytest.mark.parametrize("lsp_enum", [lsp.ErrorCodes, lsp.LSPErrorCodes])
def test_numbers_match_lsprotocol(lsp_enum: type[lsp.ErrorCodes | lsp.LSPErrorCodes]) -> None:
    for member in lsp_enum:
        assert ErrorCode[_snake(member.name)] == member.value


def test_every_code_is_known_to_lsprotocol() -> None:
    known = {m.value for m in lsp.ErrorCodes} | {m.value for m in lsp.LSPErrorCodes}
    assert {int(code) for code in ErrorCode} == known


def test_range_predicates() -> None:
    assert is_jsonrpc_reserved_code(-32768)
    assert is_jsonrpc_reserved_code(-32000)
    assert not is_jsonrpc_reserved_code(-32769)
    assert not is_jsonrpc_reserved_code(-31999)
    assert is_server_error_code(-32099)
    assert is_server_error_code(-32000)
    assert not is_server_error_code(-32100)
    assert is_server_error_code(ErrorCode.SERVER_NOT_INITIALIZED)
    assert is_lsp_reserved_code(ErrorCode.REQUEST_CANCELLED)
    assert is_lsp_reserved_code(-32899)
    assert not is_lsp_reserved_code(-32900)
    assert not is_lsp_reserved_code(-32799)
    assert not is_lsp_reserved_code(ErrorCode.PARSE_ERROR)


def test_catalog_names_are_unique_and_lookup_works() -> None:
    names = [entry.name for entry in ERROR_CATALOG]
    assert len(names) == len(set(names))
    for entry in ERROR_CATALOG:
        assert lookup_error(entry.name) is entry
        assert isinstance(entry, CatalogEntry)
        assert entry.meaning
    with pytest.raises(KeyError):
        lookup_error("no_such_code")


def test_catalog_holds_every_core_code() -> None:
    assert {code.value for code in CoreErrorCode} == {
        "invalid_request",
        "not_supported",
        "not_found",
        "permission_denied",
        "busy",
        "cancelled",
        "timed_out",
        "launch_failed",
        "internal",
    }
    for code in CoreErrorCode:
        assert lookup_error(code).name == code.value


def test_plugin_numbers_named_by_the_reference() -> None:
    assert lookup_error("plugin.host.unavailable").jsonrpc_code == -32601
    assert lookup_error("plugin.host.permissionDenied").jsonrpc_code == -32010
    assert lookup_error("plugin.host.foreignContribution").jsonrpc_code == -32026
    assert lookup_error("plugin.function.failed").jsonrpc_code == -32070
    assert lookup_error("plugin.function.invalidResult").jsonrpc_code == -32071
    assert lookup_error("plugin.function.invalidRegistration").jsonrpc_code == -32602
    assert lookup_error("plugin.function.callCycle").jsonrpc_code == -32065
    assert lookup_error("plugin.function.revoked").jsonrpc_code is None
    host = [e.jsonrpc_code for e in ERROR_CATALOG if e.name.startswith("plugin.host.")]
    assert host[4:] == list(range(-32010, -32027, -1))  # "grow by one", never reused


@pytest.mark.skipif(not PLUGIN_CONTRACT.exists(), reason="reference not available")
def test_plugin_host_table_matches_the_reference() -> None:
    text = PLUGIN_CONTRACT.read_text(encoding="utf-8")
    table = dict(re.findall(r"^\s+(plugin\.host\.\w+) (-\d+) ", text, flags=re.MULTILINE))
    assert len(table) >= 21
    ours = {e.name: e.jsonrpc_code for e in ERROR_CATALOG if e.name.startswith("plugin.host.")}
    assert ours == {name: int(number) for name, number in table.items()}


@pytest.mark.skipif(not PLUGIN_SDK.exists(), reason="reference not available")
def test_plugin_function_numbers_match_the_sdk_table() -> None:
    """Every plugin.function.* number the reference SDK's error table gives is ours too."""
    text = PLUGIN_SDK.read_text(encoding="utf-8")
    table = dict(re.findall(r"^(plugin\.function\.\w+) (-\d+) ", text, flags=re.MULTILINE))
    assert len(table) >= 11
    for name, number in table.items():
        assert lookup_error(name).jsonrpc_code == int(number), name


@pytest.mark.skipif(not PLUGIN_CONTRACT.exists(), reason="reference not available")
def test_plugin_function_codes_match_the_reference() -> None:
    text = PLUGIN_CONTRACT.read_text(encoding="utf-8")
    named = set(re.findall(r"plugin\.function\.[A-Za-z]+", text))
    ours = {e.name for e in ERROR_CATALOG if e.name.startswith("plugin.function.")}
    assert ours == named


def test_core_error() -> None:
    error = CoreError(CoreErrorCode.BUSY, "Too many requests")
    assert error.code == "busy"
    assert type(error.code) is str
    assert error.message == "Too many requests"
    assert str(error) == "Too many requests"
    assert error.details is None
    assert error.to_json() == {"code": "busy", "message": "Too many requests"}
    detailed = CoreError("plugin.host.timeout", "Slow", {"afterMilliseconds": 5})
    assert detailed.to_json() == {
        "code": "plugin.host.timeout",
        "message": "Slow",
        "details": {"afterMilliseconds": 5},
    }
    assert "plugin.host.timeout" in repr(detailed)


def test_core_error_refuses_unknown_codes_and_bad_types() -> None:
    with pytest.raises(ValueError, match="ERROR_CATALOG"):
        CoreError("made_up", "x")
    with pytest.raises(TypeError):
        CoreError("busy", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CoreError("busy", "x", ["not", "an", "object"])  # type: ignore[arg-type]


def test_protocol_error_is_abstract() -> None:
    with pytest.raises(TypeError):
        ProtocolError("x", error_code=ErrorCode.INTERNAL_ERROR)
    local = LocalProtocolError("x", error_code=ErrorCode.INTERNAL_ERROR)
    remote = RemoteProtocolError("y", error_code=ErrorCode.PARSE_ERROR, request_id="r")
    assert isinstance(local, ProtocolError)
    assert isinstance(remote, ProtocolError)
    assert local.error_code is ErrorCode.INTERNAL_ERROR
    assert remote.error_code is ErrorCode.PARSE_ERROR
    assert remote.request_id == "r"
    assert "PARSE_ERROR" in repr(remote)
