"""Language-server sessions as supervision boundaries: a failure of ours ends only its unit.

A :class:`~supervisor._boundary.FaultPlan` raises an exception at one fault point of one
session's task. That session ends ``failed`` with code ``internal`` and a crash report, its
server is gone, while a real sibling server (pylsp) started alongside keeps answering and the
Core answers ``core.ping``. A fault inside one request's task ends only that request.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor import open_core
from supervisor._boundary import FaultPlan, arm_faults
from tests.supervisor.lsp._support import PYLSP, as_obj, fake, start
from tests.testbed._poll import gone, wait_until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from protocol import JSONObject, JSONValue
    from supervisor import Core
    from tests.supervisor.lsp._support import Session

SOURCE = "def greet(name):\n    return 'hello ' + name\n"
FAST_STOP: dict[str, JSONValue] = {"shutdownTimeoutMilliseconds": 1000}


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    async with open_core() as opened:
        yield opened


@pytest.fixture
def faults() -> Iterator[list[FaultPlan]]:
    """Arm plans with ``faults.append(plan); arm_faults(plan)``; disarmed after the test."""
    plans: list[FaultPlan] = []
    try:
        yield plans
    finally:
        arm_faults(None)


def arm(faults: list[FaultPlan], site: str) -> FaultPlan:
    plan = FaultPlan(sites=(site,))
    faults.append(plan)
    arm_faults(plan)
    return plan


async def sibling(core: Core, tmp: str) -> tuple[Session, str]:
    """A ready pylsp session with one open document whose diagnostics have arrived."""
    path = os.path.join(tmp, "greet.py")
    await trio.Path(path).write_text(SOURCE)
    uri = "file://" + path
    session = await start(core, [PYLSP], tmp)
    await session.wait_state("ready")
    await session.call("lsp.syncDocument", uri=uri, languageId="python", text=SOURCE)
    await session.wait_for(lambda e: e["event"] == "diagnostics" and e["uri"] == uri)
    return session, uri


async def still_answers(core: Core, session: Session, uri: str) -> None:
    symbols = await session.roundtrip("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    result = symbols["result"]
    assert isinstance(result, list)
    assert "greet" in {as_obj(s)["name"] for s in result}
    assert (await session.snapshot())["state"] == "ready"
    assert "version" in as_obj(await core.call("core.ping", {}))


async def first_pid(session: Session) -> int:
    started = await session.wait_state("starting")
    pid = started["pid"]
    assert isinstance(pid, int)
    return pid


def check_internal(failed: JSONObject, site: str) -> JSONObject:
    assert failed["reason"] == "internal"
    error = as_obj(failed["error"])
    assert error["code"] == "internal"
    report = as_obj(error["crashReport"])
    assert report["exceptionType"] == "InjectedFault"
    assert site in str(report["message"])
    assert isinstance(report["stderrTail"], list)
    return report


async def trigger(site: str, victim: Session) -> None:
    """Make the victim's task reach ``site``."""
    if site == "lsp.reader":
        await victim.request(
            "test/notify",
            {"method": "window/logMessage", "params": {"type": 3, "message": "hi"}},
        )
    elif site == "lsp.stderr":
        await victim.request("test/floodStderr", {"lines": 3})
    elif site == "lsp.exitWatch":
        await victim.request("test/exit", {"code": 7})


@pytest.mark.parametrize("site", ["lsp.handshake", "lsp.reader", "lsp.stderr", "lsp.exitWatch"])
async def test_a_fault_in_a_session_task_fails_only_that_session(
    core: Core, tmp_path: str, faults: list[FaultPlan], site: str
) -> None:
    other, uri = await sibling(core, str(tmp_path))
    if site == "lsp.handshake":
        # A real server's handshake.
        plan = arm(faults, site)
        victim = await start(core, [PYLSP], str(tmp_path), **FAST_STOP)
    else:
        victim = await start(core, fake(), str(tmp_path), **FAST_STOP)
        await victim.wait_state("ready")
        plan = arm(faults, site)
        await trigger(site, victim)
    pid = await first_pid(victim)
    failed = await victim.wait_state("failed")
    assert plan.fired == [site]
    report = check_internal(failed, site)
    if site == "lsp.stderr":
        assert "noise line 2" in report["stderrTail"]  # type: ignore[operator]
    snapshot = await victim.snapshot()
    assert snapshot["state"] == "failed"
    assert snapshot["pid"] is None
    last_exit = as_obj(snapshot["lastExit"])
    assert last_exit["code"] == "internal"
    assert as_obj(last_exit["crashReport"])["exceptionType"] == "InjectedFault"
    await wait_until(lambda: gone(pid))
    # Final: no restart (a bug of ours would meet it again), and a stop changes nothing.
    assert (await victim.stop())["state"] == "failed"
    await still_answers(core, other, uri)
    assert (await other.stop())["state"] == "stopped"


async def test_internal_failure_is_final_even_with_restart(
    core: Core, tmp_path: str, faults: list[FaultPlan]
) -> None:
    victim = await start(core, fake(), str(tmp_path), restart=True, **FAST_STOP)
    await victim.wait_state("ready")
    arm(faults, "lsp.reader")
    await trigger("lsp.reader", victim)
    check_internal(await victim.wait_state("failed"), "lsp.reader")
    stopped = await victim.stop()
    assert stopped["state"] == "failed"
    assert stopped["generation"] == 1
    states = [e["state"] for e in victim.seen if e["event"] == "stateChanged"]
    assert states == ["starting", "initializing", "ready", "failed"]


async def test_a_fault_in_one_request_ends_only_that_request(
    core: Core, tmp_path: str, faults: list[FaultPlan]
) -> None:
    other, uri = await sibling(core, str(tmp_path))
    victim = await start(core, fake(), str(tmp_path))
    await victim.wait_state("ready")
    plan = arm(faults, "lsp.request")
    failed = await victim.roundtrip("test/sleep", {"ms": 1})
    assert plan.fired == ["lsp.request"]
    error = as_obj(failed["error"])
    assert error["code"] == "internal"
    assert "lsp.request" in str(error["message"])
    completions = [e for e in victim.seen if e["event"] == "requestCompleted"]
    assert len(completions) == 1
    # The session goes on.
    assert (await victim.roundtrip("test/sleep", {"ms": 1}))["result"] == "slept"
    assert (await victim.snapshot())["state"] == "ready"
    await still_answers(core, other, uri)
    assert (await victim.stop())["state"] == "stopped"
    assert (await other.stop())["state"] == "stopped"


async def test_a_fault_answering_a_server_request_answers_only_it(
    core: Core, tmp_path: str, faults: list[FaultPlan]
) -> None:
    victim = await start(core, fake(), str(tmp_path))
    await victim.wait_state("ready")
    arm(faults, "lsp.serverRequest")
    asked = await victim.roundtrip(
        "test/ask", {"method": "workspace/configuration", "params": {"items": []}}
    )
    reply = as_obj(asked["result"])
    assert reply["code"] == -32603
    assert as_obj(reply["data"])["code"] == "internal"
    again = await victim.roundtrip(
        "test/ask", {"method": "workspace/configuration", "params": {"items": []}}
    )
    assert again["result"] == {"result": []}
    assert (await victim.snapshot())["state"] == "ready"
    assert (await victim.stop())["state"] == "stopped"
