"""The process-lifecycle testbed: misbehaving programs, helpers to run them, a chaos runner.

People who build language servers, debug adapters or plugin backends use it to prove their
lifecycle handling: :data:`SCENARIOS` documents each misbehaving program and what a
correct supervisor does with it; :func:`program_argv` gives the argv that runs one (also
``supervisor testbed run NAME`` and ``python -m supervisor.testbed.run NAME``);
:func:`open_scenario` / :func:`open_scenario_session` run one under the supervisor;
:func:`run_chaos` (``supervisor chaos``) mixes them at random, seeded, and checks the
lifecycle invariants after every round.
"""

from __future__ import annotations

from ._chaos import (
    ChaosReport as ChaosReport,
    ChaosStep as ChaosStep,
    plan_round as plan_round,
    run_chaos as run_chaos,
)
from ._fixtures import (
    ScenarioSession as ScenarioSession,
    open_scenario as open_scenario,
    open_scenario_session as open_scenario_session,
)
from ._scenarios import (
    SCENARIOS as SCENARIOS,
    Scenario as Scenario,
    get_scenario as get_scenario,
    program_argv as program_argv,
)

__all__ = (
    "SCENARIOS",
    "ChaosReport",
    "ChaosStep",
    "Scenario",
    "ScenarioSession",
    "get_scenario",
    "open_scenario",
    "open_scenario_session",
    "plan_round",
    "program_argv",
    "run_chaos",
)
