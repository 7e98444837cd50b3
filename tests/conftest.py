"""Suite-wide guards: no test may leave a process behind.

Every process the supervisor starts carries ``SUPERVISOR_SCOPE`` in its environment (DESIGN.md
invariant 1). A test passes only if every such process of this run that appeared while it ran
is gone (exited, not a zombie) shortly after it ends, and so is every descendant of the test
process, marked or not, and if the test process itself holds no unreaped child (invariant 3).
The guard is the ``no_leaked_processes`` fixture of our own pytest plugin
(``supervisor.pytest_plugin``), made autouse here; the plugin also scopes the check to this
run through ``SUPERVISOR_TEST_RUN``.
"""

from __future__ import annotations

import os
from importlib import metadata

# Every answer is checked against its command's result declaration (supervisor/_api), so a
# declaration that drifts from what its command answers fails the test that ran it. Set
# before the supervisor is imported, and inherited by the `supervisor serve` children.
os.environ.setdefault("SUPERVISOR_CHECK_RESULTS", "1")

import pytest


def _plugin_has_entry_point() -> bool:
    # Installed with its pytest11 entry point, pytest loads the plugin itself; registering it
    # a second time from here would be an error.
    return any(
        entry.value in ("supervisor.pytest_plugin", "_trio_process_supervisor._pytest_plugin")
        for entry in metadata.entry_points(group="pytest11")
    )


pytest_plugins = [] if _plugin_has_entry_point() else ["supervisor.pytest_plugin"]


@pytest.fixture(autouse=True)
def _no_leaked_processes(no_leaked_processes: None) -> None:
    """Apply the plugin's leak guard to every test of this suite."""
