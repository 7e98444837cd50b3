"""plugin-contract.md "Cross-plugin calls": a plugin declares at most 32 exports and 32
calls, each function once, with versions 1..1000 (``lsp.configureFunctionRelay``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from protocol import CoreError
from supervisor._plugin._relay_state import parse_snapshot

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue


def entries(count: int) -> list[JSONValue]:
    return [{"id": f"fn.n{index}", "version": 1} for index in range(count)]


def snapshot(field: str, value: JSONValue) -> JSONObject:
    return {"plugins": [{"pluginID": "p", "enabled": True, field: value}], "contexts": []}


@pytest.mark.parametrize("field", ["exports", "calls"])
def test_at_most_32_entries_each_function_once(field: str) -> None:
    parsed = parse_snapshot(snapshot(field, entries(32)))
    assert parsed is not None
    malformed: list[JSONValue] = [
        entries(33),
        [{"id": "fn.a", "version": 1}, {"id": "fn.a", "version": 2}],
        [{"id": "fn.a", "version": 0}],
        [{"id": "fn.a", "version": 1001}],
    ]
    for bad in malformed:
        with pytest.raises(CoreError) as refused:
            parse_snapshot(snapshot(field, bad))
        assert refused.value.code == "invalid_request"
