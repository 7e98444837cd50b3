"""The chaos runner (issue 7): reproducible plans, a short seeded CI round, reporting."""

from __future__ import annotations

import os

import pytest

from supervisor.testbed import ChaosStep, plan_round, run_chaos

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs procfs")

#: The CI round: seeded, so a failure names a reproducible seed.
CI_SEED = 20261129
CI_ITERATIONS = 15


def test_plans_are_a_function_of_the_seed() -> None:
    assert plan_round(7, 3) == plan_round(7, 3)
    assert [plan_round(7, i) for i in range(20)] != [plan_round(8, i) for i in range(20)]
    for i in range(200):
        steps = plan_round(CI_SEED, i)
        assert 1 <= len(steps) <= 4
        for step in steps:
            assert step.via in ("process.run", "job", "session")
            assert step.action in ("finish", "cancel", "deadline")
            # A program that never ends alone is never left to "finish".
            if step.scenario in ("hang", "ignore-sigterm", "terminal-ignore-hangup"):
                assert step.action != "finish"


async def test_short_seeded_round_has_no_violation() -> None:
    rounds: list[list[ChaosStep]] = []
    report = await run_chaos(
        CI_ITERATIONS, CI_SEED, on_round=lambda index, steps, violations: rounds.append(steps)
    )
    assert report.ok, report.violations
    assert report.iterations == CI_ITERATIONS
    assert report.scenarios_run == sum(len(steps) for steps in rounds)
    assert report.cancels + report.deadlines > 0
    assert report.processes_started > 0
    assert report.processes_reaped == report.processes_started
    assert report.to_json()["ok"] is True


async def test_a_violation_stops_the_run_and_names_the_round() -> None:
    # Any growth of resident memory counts when the bound is negative: a forced violation.
    report = await run_chaos(3, 11, max_rss_growth_bytes=-(2**40))
    assert not report.ok
    assert report.failing_round == 1
    assert report.iterations == 2
    assert report.failing_steps  # the round's steps (memory is not a per-step failure)
    assert "resident memory" in report.violations[0]
    assert "seed 11" in report.summary()


def test_bad_arguments() -> None:
    import trio

    with pytest.raises(ValueError, match="iterations"):
        trio.run(run_chaos, -1, 0)
