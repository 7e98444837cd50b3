# mypy: disable-error-code="arg-type,dict-item,call-overload,unused-ignore,index"
"""The relay's pure rules and its provider wait (plugin-contract.md "Cross-plugin calls").

No process is involved: the check order, the request fields, the snapshot, and the 30 s wait
for a provider that is not running (MockClock, autojump).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from protocol import CoreError
from supervisor._api import validate_payload
from supervisor._plugin._relay import FunctionRelay, ProviderHandle
from supervisor._plugin._relay_state import (
    MAX_TIMEOUT_MS,
    NOT_RUNNING_MESSAGE,
    RelayRefusal,
    check_invoke,
    check_still_allowed,
    parse_invoke,
    parse_providers,
    parse_snapshot,
    providers_result,
    relay_number,
)

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

CTX: JSONObject = {"contextID": "w1", "generation": 1}


def snapshot(**overrides: JSONValue) -> JSONObject:
    base: JSONObject = {
        "plugins": [
            {
                "pluginID": "a",
                "enabled": True,
                "exports": [],
                "calls": [{"id": "f.g", "version": 1}],
            },
            {
                "pluginID": "b",
                "enabled": True,
                "exports": [{"id": "f.g", "version": 1, "context": "workspace"}],
                "calls": [{"id": "f.g", "version": 1}],
            },
            {
                "pluginID": "c",
                "enabled": True,
                "exports": [{"id": "f.g", "version": 2}],
                "calls": [],
            },
            {
                "pluginID": "d",
                "enabled": False,
                "exports": [{"id": "f.g", "version": 1}],
                "calls": [],
            },
        ],
        "contexts": [
            {"contextID": "w1", "generation": 1, "authority": "local"},
            {"contextID": "r1", "generation": 1, "authority": "ssh"},
        ],
    }
    base.update(overrides)
    return base


SNAP = parse_snapshot(snapshot())


def refused(**kwargs: object) -> str:
    params: dict[str, JSONValue] = {"pluginID": "b", "functionID": "f.g", "context": CTX}
    params.update(kwargs.pop("params", {}))
    options: dict[str, object] = {
        "provider_functions": None,
        "parent_running": True,
        "chain": ("a",),
        "caller_running": 0,
    }
    options.update(kwargs)
    caller = str(options.pop("caller", "a"))
    try:
        check_invoke(SNAP, caller, parse_invoke(params), **options)
    except RelayRefusal as refusal:
        return refusal.code
    return "ok"


def test_check_order_each_code_and_first_failure_wins() -> None:
    assert refused() == "ok"
    assert refused(caller="c") == "plugin.function.notDeclared"
    assert refused(params={"pluginID": "d"}) == "plugin.function.providerDisabled"
    assert refused(params={"pluginID": "zz"}) == "plugin.function.providerDisabled"
    assert refused(params={"pluginID": "a"}) == "plugin.function.notExported"
    assert refused(provider_functions=frozenset()) == "plugin.function.notExported"
    assert refused(params={"pluginID": "c"}) == "plugin.function.versionMismatch"
    assert refused(params={"context": {"contextID": "w1", "generation": 2}}) == (
        "plugin.host.contextExpired"
    )
    assert refused(params={"context": {"contextID": "r1", "generation": 1}}) == (
        "plugin.host.authorityUnsupported"
    )
    big = {"x": "y" * (256 * 1024)}
    assert refused(params={"params": big}) == "plugin.function.payloadTooLarge"
    assert refused(parent_running=False) == "plugin.host.cancelled"
    assert refused(chain=("a", "b")) == "plugin.function.callCycle"
    assert refused(chain=("x", "y", "z", "w", "a")) == "plugin.function.depthExceeded"
    assert refused(chain=("x", "y", "z", "a")) == "ok"  # the 4th call
    assert refused(caller_running=8) == "plugin.function.tooManyCalls"
    assert refused(caller_running=7) == "ok"
    # The first failing check wins, row by row down the table.
    everything = {
        "parent_running": False,
        "chain": ("x", "y", "z", "w", "b"),
        "caller_running": 8,
    }
    assert refused(params={"params": big}, **everything) == "plugin.function.payloadTooLarge"
    assert refused(**everything) == "plugin.host.cancelled"
    assert refused(**{**everything, "parent_running": True}) == "plugin.function.callCycle"
    assert (
        refused(params={"context": {"contextID": "r1", "generation": 1}, "params": big})
        == "plugin.host.authorityUnsupported"
    )
    assert refused(params={"pluginID": "c", "context": {"contextID": "gone", "generation": 1}}) == (
        "plugin.function.versionMismatch"
    )


def test_numbers() -> None:
    assert relay_number("plugin.function.notDeclared") == -32027
    assert relay_number("plugin.function.providerUnavailable") == -32069
    assert relay_number("plugin.function.failed") == -32070
    assert relay_number("plugin.function.invalidResult") == -32071
    assert relay_number("plugin.host.cancelled") == -32800
    assert relay_number("plugin.host.timeout") == -32015
    assert RelayRefusal("plugin.host.cancelled", NOT_RUNNING_MESSAGE).data() == {
        "code": "plugin.host.cancelled"
    }


@pytest.mark.parametrize(
    ("params", "code", "option"),
    [
        ({"caller": {"pluginID": "x"}}, "plugin.host.unsupportedOption", "caller"),
        ({"extra": 1}, "plugin.host.unsupportedOption", "extra"),
        ({"parentOperationID": ""}, "plugin.host.invalidParams", None),
        ({"parentOperationID": "x" * 129}, "plugin.host.invalidParams", None),
        ({"timeoutMilliseconds": 0}, "plugin.host.invalidParams", None),
        ({"params": []}, "plugin.host.invalidParams", None),
        ({"context": None}, "plugin.host.invalidParams", None),
    ],
)
def test_invoke_fields(params: JSONObject, code: str, option: str | None) -> None:
    with pytest.raises(RelayRefusal) as info:
        parse_invoke({"pluginID": "b", "functionID": "f.g", "context": CTX, **params})
    assert info.value.code == code
    assert info.value.number == (-32018 if option else -32602)
    if option:
        assert info.value.details == {"option": option}


def test_invoke_defaults_and_caps() -> None:
    request = parse_invoke(
        {"pluginID": "b", "functionID": "f.g", "context": CTX, "parentOperationID": "x" * 128}
    )
    assert request.timeout_ms == 60_000
    assert request.params == {}
    capped = parse_invoke(
        {"pluginID": "b", "functionID": "f.g", "context": CTX, "timeoutMilliseconds": 10**9}
    )
    assert capped.timeout_ms == MAX_TIMEOUT_MS
    # A caller key inside params is ordinary data.
    inner = parse_invoke(
        {"pluginID": "b", "functionID": "f.g", "context": CTX, "params": {"caller": 1}}
    )
    assert inner.params == {"caller": 1}


def test_providers_and_snapshot() -> None:
    assert providers_result(SNAP, "a", "f.g") == {
        "providers": [{"pluginID": "b", "version": 1}, {"pluginID": "c", "version": 2}]
    }
    # The caller itself is never listed.
    assert providers_result(SNAP, "b", "f.g") == {"providers": [{"pluginID": "c", "version": 2}]}
    with pytest.raises(RelayRefusal, match="does not declare"):
        providers_result(SNAP, "c", "f.g")
    assert parse_providers({"functionID": "f.g"}) == "f.g"
    with pytest.raises(RelayRefusal) as info:
        parse_providers({"functionID": "f.g", "x": 1})
    assert info.value.code == "plugin.host.unsupportedOption"
    with pytest.raises(CoreError):
        # An unknown field is refused by the command's declaration, before parse_snapshot.
        validate_payload("lsp.configureFunctionRelay", {"bogus": 1})
    for bad in (
        snapshot(plugins=[{"pluginID": "a", "exports": [{"id": "f.g", "version": 0}]}]),
        snapshot(
            plugins=[{"pluginID": "a", "exports": [{"id": "f.g", "version": 1, "context": "x"}]}]
        ),
        snapshot(contexts=[{"contextID": "w", "generation": 0}]),
    ):
        with pytest.raises(CoreError):
            parse_snapshot(bad)


def test_still_allowed() -> None:
    def code(snap: JSONObject, context: tuple[str, int] = ("w1", 1)) -> str | None:
        refusal = check_still_allowed(parse_snapshot(snap), "a", "b", "f.g", *context)
        return refusal.code if refusal is not None else None

    assert code(snapshot()) is None
    plugins = snapshot()["plugins"]
    assert isinstance(plugins, list)
    disabled = [dict(p, enabled=False) if p["pluginID"] == "b" else p for p in plugins]
    assert code(snapshot(plugins=disabled)) == "plugin.function.providerDisabled"
    undeclared = [dict(p, calls=[]) if p["pluginID"] == "a" else p for p in plugins]
    assert code(snapshot(plugins=undeclared)) == "plugin.function.notDeclared"
    assert code(snapshot(), ("w1", 7)) == "plugin.host.contextExpired"


class _Caller:
    plugin_id = "a"
    session_id = "lsp-1"

    def __init__(self) -> None:
        self.events: list[tuple[str, JSONObject]] = []

    def emit_event(self, event: str, params: JSONObject) -> None:
        self.events.append((event, params))

    def serves_host_call(self, wire_id: str) -> bool:
        return False


async def test_provider_not_running_waits_30_s_and_announces_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relay = FunctionRelay(lambda plugin_id: None)
    caller = _Caller()
    refusals: list[tuple[str, float]] = []
    start = trio.current_time()

    async def wait() -> None:
        try:
            await relay.wait_for_provider(caller, "b", "f.g")
        except RelayRefusal as refusal:
            refusals.append((refusal.code, trio.current_time() - start))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        nursery.start_soon(wait)
        await trio.sleep(10)
        relay.changed()  # something else changed: still waiting, not announced again
    assert refusals == [("plugin.function.providerUnavailable", 30.0)] * 2
    assert caller.events == [("functionProviderStartRequired", {"result": {"pluginID": "b"}})]


async def test_provider_that_starts_is_dispatched(autojump_clock: trio.testing.MockClock) -> None:
    running: dict[str, ProviderHandle] = {}
    relay = FunctionRelay(running.get)
    caller = _Caller()
    marker = object()

    async def later() -> None:
        await trio.sleep(12)
        running["b"] = ProviderHandle(frozenset(), marker)
        relay.changed()  # started, negotiated, not registered yet: keeps waiting
        await trio.sleep(3)
        running["b"] = ProviderHandle(frozenset({"f.g"}), marker)
        relay.changed()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        endpoint = await relay.wait_for_provider(caller, "b", "f.g")
    assert endpoint is marker
    assert trio.current_time() == pytest.approx(15)
    assert len(caller.events) == 1


def test_params_bound_is_256_kib_serialized() -> None:
    """Discovery and invocation: params of at most 256 KiB pass; one byte more is
    plugin.function.payloadTooLarge (``{"x": "<n>"}`` serializes to n + 8 bytes)."""
    limit = 256 * 1024
    assert refused(params={"params": {"x": "y" * (limit - 8)}}) == "ok"
    assert refused(params={"params": {"x": "y" * (limit - 7)}}) == "plugin.function.payloadTooLarge"


def test_chain_of_exactly_four_calls_and_the_cycle_through_any_ancestor() -> None:
    """The call chain: ``chain`` holds the plugins that made the calls so far; a call to any
    of them (the caller included) is a cycle, and the fifth call is depthExceeded."""
    assert refused(chain=("b", "x", "a")) == "plugin.function.callCycle"
    assert refused(caller="b", params={"pluginID": "b"}, chain=("b",)) == (
        "plugin.function.callCycle"
    )
    assert refused(chain=("x", "y", "z", "a")) == "ok"
    assert refused(chain=("w", "x", "y", "z", "a")) == "plugin.function.depthExceeded"
