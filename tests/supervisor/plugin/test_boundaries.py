"""Plugin backend sessions, function calls and relayed calls as supervision boundaries.

A :class:`~supervisor._boundary.FaultPlan` raises at one ``plugin.*`` fault point: a fault
while a backend's notification is handled fails that session (``internal``, crash report, its
backend gone) while a sibling backend keeps answering and the Core answers ``core.ping``; a
fault inside one function call or one relayed call ends only that call, ``internal``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from supervisor import open_core
from supervisor._boundary import FaultPlan, arm_faults
from tests.supervisor.lsp._support import as_obj
from tests.supervisor.plugin.test_functions import backend as raw_backend, call
from tests.supervisor.plugin.test_relay import backend as hop_backend, snapshot, value
from tests.testbed._poll import gone, wait_until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from protocol import JSONObject
    from supervisor import Core


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        await opened.call("lsp.configureFunctionRelay", snapshot())
        yield opened


@pytest.fixture
def faults() -> Iterator[None]:
    try:
        yield
    finally:
        arm_faults(None)


def arm(site: str) -> FaultPlan:
    plan = FaultPlan(sites=(site,))
    arm_faults(plan)
    return plan


async def test_a_fault_in_a_backend_session_fails_only_that_session(
    core: Core, tmp_path: Path, faults: None
) -> None:
    other = await raw_backend(core, str(tmp_path))
    # One backend per plugin: the victim is another plugin's.
    victim = await raw_backend(core, str(tmp_path), pluginId="com.example.victim")
    pid = (await victim.wait_state("starting"))["pid"]
    assert isinstance(pid, int)
    await other.wait_state("ready")
    await victim.wait_state("ready")
    plan = arm("plugin.notification")
    # The backend's lithe/log notification is handled by the session's reader.
    fact: JSONObject = {"event": "plugins.operation.started", "operation": "echo.value"}
    op = (
        await victim.call(
            "lsp.functionRequest",
            function={"pluginID": "com.example.victim", "functionID": "log.send"},
            params={"facts": [fact]},
        )
    )["operationId"]
    failed = await victim.wait_state("failed")
    assert plan.fired == ["plugin.notification"]
    assert failed["reason"] == "internal"
    error = as_obj(failed["error"])
    assert error["code"] == "internal"
    assert as_obj(error["crashReport"])["exceptionType"] == "InjectedFault"
    # The call ended once, with the session.
    done = [e for e in victim.seen if e["event"] == "requestCompleted" and e["operationId"] == op]
    if not done:
        done = [await victim.completed(str(op))]
    assert len(done) == 1
    assert "error" in done[0] or "result" in done[0]
    snapshot_ = await victim.snapshot()
    assert snapshot_["pid"] is None
    assert as_obj(snapshot_["lastExit"])["code"] == "internal"
    await wait_until(lambda: gone(pid))
    # The sibling backend and the Core go on.
    echoed = await call(other, "echo.value", {"value": 7})
    assert as_obj(echoed["result"]) == {"value": 7}
    assert "version" in as_obj(await core.call("core.ping", {}))
    assert (await other.stop())["state"] == "stopped"


async def test_a_fault_in_one_function_call_ends_only_that_call(
    core: Core, tmp_path: Path, faults: None
) -> None:
    session = await raw_backend(core, str(tmp_path))
    await session.wait_state("ready")
    plan = arm("plugin.call")
    failed = await call(session, "echo.value", {"value": 1})
    assert plan.fired == ["plugin.call"]
    error = as_obj(failed["error"])
    assert error["code"] == "internal"
    assert "plugin.call" in str(error["message"])
    again = await call(session, "echo.value", {"value": 2})
    assert as_obj(again["result"]) == {"value": 2}
    assert (await session.snapshot())["state"] == "ready"
    assert (await session.stop())["state"] == "stopped"


async def test_a_fault_in_one_relayed_call_ends_only_that_call(
    core: Core, tmp_path: Path, faults: None
) -> None:
    cwd = str(tmp_path)
    caller, _ = await hop_backend(core, cwd, "hop.a")
    provider, _ = await hop_backend(core, cwd, "hop.b")
    plan = arm("plugin.relay")
    # Two relayed calls at once: the fault ends one of them; its sibling call completes.
    fanned = as_obj(await value(caller, "hop.a", "hop.call", {"to": ["hop.b"], "fan": 2}))
    assert plan.fired == ["plugin.relay"]
    results = fanned["fan"]
    assert isinstance(results, list)
    assert {"error": "internal"} in results
    assert any(as_obj(r).get("hops") == 0 for r in results)
    # Both sessions go on.
    again = as_obj(await value(caller, "hop.a", "hop.call", {"to": ["hop.b"]}))
    assert again["hops"] == 1
    assert (await caller.snapshot())["state"] == "ready"
    assert (await provider.snapshot())["state"] == "ready"
    assert (await caller.stop())["state"] == "stopped"
    assert (await provider.stop())["state"] == "stopped"
