"""The chaos runner (issue 7): reproducible plans, a short seeded round, reporting.

CI runs the long seeded run itself (``.ci/run``: ``supervisor chaos --iterations 200``); the
rounds here are few, to keep the default pytest run short, but they draw every kind of step.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import trio

import supervisor
from supervisor._boundary import FAULT_SITES, FaultPlan, InjectedFault, fault_point, fault_unit
from supervisor.testbed import ChaosReport, ChaosStep, plan_round, run_chaos
from supervisor.testbed._chaos import ALL_VIAS, available_vias, fault_sites, plan_fault
from tests._faults import armed

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

#: The seed of the in-suite round and of CI's long run (.ci/run): a failure names it.
CI_SEED = 20261129
CI_ITERATIONS = 8
#: The fault rounds in the suite (CI runs 60 more with CI_SEED).
FAULT_SEED = 2
FAULT_ITERATIONS = 3


def test_plans_are_a_function_of_the_seed() -> None:
    assert plan_round(7, 3) == plan_round(7, 3)
    assert [plan_round(7, i) for i in range(20)] != [plan_round(8, i) for i in range(20)]
    seen: set[str] = set()
    for i in range(300):
        steps = plan_round(CI_SEED, i)
        assert 1 <= len(steps) <= 4
        for step in steps:
            seen.add(step.via)
            assert step.via in ALL_VIAS
            assert step.action in ("finish", "cancel", "deadline")
            # A program that never ends alone is never left to "finish".
            if step.scenario in ("hang", "ignore-sigterm", "terminal-ignore-hangup"):
                assert step.action != "finish"
            if step.via == "terminal":
                assert step.scenario in ("bash", "terminal-ignore-hangup")
    assert seen == set(ALL_VIAS)


def test_missing_peers_and_services_are_skipped_and_named() -> None:
    commands = {"core.ping", "process.run", "job.start", "lsp.startServer", "terminal.create"}
    vias, skipped = available_vias(commands, {"debugpy": "not installed", "bash": "no bash"})
    assert set(vias) == {"process.run", "job", "session", "lsp", "terminal"}
    assert skipped["plugin"] == "the Core has no lsp.functionRequest"
    assert skipped["debug"] == "the Core has no debug.createSession"
    assert skipped["bash"] == "no bash"  # terminals then run only the testbed PTY program
    for i in range(100):
        for step in plan_round(1, i, vias=vias, missing_peers={"bash"}):
            assert step.via in vias
            assert step.scenario != "bash"


async def test_short_seeded_round_has_no_violation() -> None:
    rounds: list[list[ChaosStep]] = []
    report = await run_chaos(
        CI_ITERATIONS, CI_SEED, on_round=lambda index, steps, violations: rounds.append(steps)
    )
    assert report.ok, report.violations
    assert report.iterations == CI_ITERATIONS
    assert report.scenarios_run == sum(len(steps) for steps in rounds)
    assert sum(report.steps_by_via.values()) == report.scenarios_run
    assert report.cancels + report.deadlines > 0
    assert report.process_trees_started > 0
    assert report.processes_recorded > 0
    assert report.processes_reaped == report.processes_recorded
    assert report.to_json()["ok"] is True


@pytest.mark.parametrize(
    ("via", "rounds"), [("plugin", 3), ("debug", 3), ("debugpy", 2), ("terminal", 3)]
)
async def test_each_session_kind_runs_clean(via: str, rounds: int) -> None:
    report = await run_chaos(rounds, CI_SEED, only=(via,))
    if via in report.skipped:
        pytest.skip(report.skipped[via])
    assert report.ok, report.violations
    assert report.steps_by_via == {via: report.scenarios_run}
    assert report.processes_reaped == report.processes_recorded


async def test_a_violation_stops_the_run_and_names_the_round() -> None:
    # Any growth of resident memory counts when the bound is negative: a forced violation.
    report = await run_chaos(3, 11, max_rss_growth_bytes=-(2**40), only=("process.run",))
    assert not report.ok
    assert report.failing_round == 1
    assert report.iterations == 2
    assert report.failing_steps  # the round's steps (memory is not a per-step failure)
    assert "resident memory" in report.violations[0]
    assert "seed 11" in report.summary()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="iterations"):
        trio.run(run_chaos, -1, 0)
    with pytest.raises(ValueError, match="unknown via"):
        trio.run(lambda: run_chaos(1, 0, only=("nope",)))


def test_fault_plans_are_a_function_of_the_seed_and_skip_endpoint_sessions() -> None:
    steps = [ChaosStep("well-behaved", "session", "finish", 100)]
    assert plan_fault(1, 0, steps) is None  # an endpoint session talks to no Core
    steps.append(ChaosStep("bash", "terminal", "cancel", 300))
    for round_index in range(20):
        planned = plan_fault(CI_SEED, round_index, steps)
        again = plan_fault(CI_SEED, round_index, steps)
        assert planned is not None
        assert again is not None
        assert planned[0] == again[0] == 1
        assert planned[1].sites == again[1].sites
        (site,) = planned[1].sites
        assert site in (*fault_sites(steps[1]), "request.dispatch")
        assert planned[1].limit == 1


async def test_fault_rounds_end_only_the_unit_the_fault_hit() -> None:
    """A few rounds with an exception injected inside one step's unit: only it ends internal."""
    report = await run_chaos(
        FAULT_ITERATIONS, FAULT_SEED, faults=True, only=("process.run", "terminal")
    )
    if "terminal" in report.skipped:
        pytest.skip(report.skipped["terminal"])
    assert report.ok, report.violations
    assert report.iterations == FAULT_ITERATIONS
    # The seed is chosen so that faults fire at requests (process.run, terminal.create) and
    # at the first terminal site a terminal reaches, each with certainty.
    assert report.faults_fired.get("request.dispatch") == 2
    assert any(site.startswith("terminal.") for site in report.faults_fired)
    assert report.processes_reaped == report.processes_recorded
    assert report.to_json()["faultsFired"] == report.faults_fired


def test_a_fault_plan_fires_only_inside_its_unit() -> None:
    plan = FaultPlan(sites=("lsp.",), unit="r0/1")
    with armed(plan):
        fault_point("lsp.reader")  # outside any unit
        with fault_unit("r0/0"):
            fault_point("lsp.reader")  # another unit
        with fault_unit("r0/1"):
            fault_point("terminal.reader")  # another kind
            with pytest.raises(InjectedFault, match=r"lsp\.reader"):
                fault_point("lsp.reader")
            fault_point("lsp.reader")  # the limit: once
    assert plan.fired == ["lsp.reader"]


def test_every_fault_point_in_the_source_is_registered() -> None:
    """``FAULT_SITES`` names every ``fault_point`` call, so a fault run can list the points
    that never fired (issue 25)."""
    root = Path(supervisor.__file__).parent
    called: set[str] = set()
    for path in root.rglob("*.py"):
        called.update(re.findall(r'fault_point\("([A-Za-z.]+)"\)', path.read_text()))
    assert called == set(FAULT_SITES)


def test_fault_plans_reach_every_point_of_a_kind_alike() -> None:
    """Each point a step can reach is planned about as often as the others (issue 25): a
    point late in a unit's life is not starved by one that comes first."""

    def planned_sites(step: ChaosStep) -> dict[str, int]:
        counts: dict[str, int] = {}
        for round_index in range(2000):
            planned = plan_fault(9, round_index, [step])
            assert planned is not None
            (site,) = planned[1].sites
            counts[site] = counts.get(site, 0) + 1
        return counts

    for step in (
        ChaosStep("well-behaved", "lsp", "finish", 100),
        ChaosStep("bash", "terminal", "cancel", 100),
        ChaosStep("chaos-backend", "plugin", "finish", 100),
    ):
        counts = planned_sites(step)
        assert set(counts) == {*fault_sites(step), "request.dispatch"}
        own = [n for site, n in counts.items() if site != "request.dispatch"]
        assert max(own) < 2 * min(own)
    # A storm's requests to the supervisor, which only a storm reaches, get half its faults.
    counts = planned_sites(ChaosStep("request-storm", "debug", "finish", 100))
    assert 800 < counts["dap.reverse"] < 1200


def test_a_fault_report_names_the_points_that_never_fired() -> None:
    report = ChaosReport(seed=1, faults_fired={"request.dispatch": 2, "lsp.reader": 1})
    report.fault_run = True
    never = report.faults_never_fired
    assert "request.dispatch" not in never
    assert "lsp.reader" not in never
    assert set(never) == set(FAULT_SITES) - {"request.dispatch", "lsp.reader"}
    assert report.to_json()["faultsNeverFired"] == never
    assert "never fired: " in report.summary()
