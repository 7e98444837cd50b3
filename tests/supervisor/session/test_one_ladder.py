"""``grep`` finds one stop ladder (issue 24): every kind ends its program through
``_process/_ladder.py``'s ``stop_ladder``, and the shared stop bounds are declared there once.

Read from the sources (ast), so a new kind that ends its tree its own way, or declares its own
TERM grace, fails here rather than drifting.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from supervisor._process._ladder import (
    DRAIN_AFTER_EXIT_MS,
    KILL_WAIT_MS,
    MAX_DRAIN_MS,
    POLITE_TIMEOUT_MS,
    TERM_GRACE_MS,
    StopBounds,
)
from supervisor._session import (
    StopBounds as SkeletonStopBounds,
    stop_ladder as skeleton_stop_ladder,
)

SUPERVISOR = Path(__file__).resolve().parents[3] / "supervisor"
LADDER = "_process/_ladder.py"
#: The session kinds and the process kinds: each ends its tree by the ladder, never by hand.
KIND_DIRS = ("_lsp", "_dap", "_terminal", "_plugin", "_core")
KIND_FILES = ("_process/_oneshot.py",)
#: Names of the shared bounds: a literal assigned to one of them is a second declaration.
_SHARED_BOUND = re.compile(r"(TERM_GRACE|KILL_WAIT|DRAIN)\w*_(MS|S)$")


@functools.cache
def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(SUPERVISOR).as_posix(), ast.parse(path.read_text(), str(path)))
        for path in sorted(SUPERVISOR.rglob("*.py"))
    ]


def _is_kind(name: str) -> bool:
    return name.split("/", 1)[0] in KIND_DIRS or name in KIND_FILES


def test_only_the_ladder_runs_the_trees_signal_steps() -> None:
    """``ProcessTree._end`` (polite, TERM, grace, KILL, sweep) is called by the ladder only."""
    callers = [
        f"{name}:{node.lineno}"
        for name, module in _modules()
        for node in ast.walk(module)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "_end"
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "self")
        and name != LADDER
    ]
    assert callers == []


def test_no_kind_ends_a_tree_by_hand() -> None:
    """A kind's tree ends by ``stop_ladder`` (which reads through it), not ``tree.aclose()``."""
    by_hand = [
        f"{name}:{node.lineno}"
        for name, module in _modules()
        if _is_kind(name)
        for node in ast.walk(module)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "aclose"
        and ast.unparse(node.func.value).endswith("tree")
    ]
    assert by_hand == []
    users = {
        name
        for name, module in _modules()
        if _is_kind(name)
        for node in ast.walk(module)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "stop_ladder"
    }
    # Every kind with a process tree of its own calls it.
    assert users >= {
        "_lsp/_session.py",
        "_dap/_session.py",
        "_terminal/_pty.py",
        "_plugin/_runs.py",
        "_core/_jobs.py",
        "_process/_oneshot.py",
    }


def test_the_shared_bounds_are_declared_once() -> None:
    """No module but the ladder's assigns a number to a TERM grace, kill wait or drain."""
    again = [
        f"{name}:{node.lineno}"
        for name, module in _modules()
        if name != LADDER
        for node in ast.walk(module)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, (int, float))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and _SHARED_BOUND.search(target.id)
    ]
    assert again == []


def test_the_bounds_are_designs_and_the_skeleton_offers_them() -> None:
    """DESIGN.md "Default bounds": TERM grace 2 000 ms, kill wait 1 000 ms, drain 500 ms."""
    assert (TERM_GRACE_MS, KILL_WAIT_MS, DRAIN_AFTER_EXIT_MS) == (2_000, 1_000, 500)
    bounds = StopBounds()
    assert (bounds.polite_ms, bounds.term_grace_ms, bounds.kill_wait_ms, bounds.drain_ms) == (
        POLITE_TIMEOUT_MS,
        TERM_GRACE_MS,
        KILL_WAIT_MS,
        DRAIN_AFTER_EXIT_MS,
    )
    assert bounds.total_ms == POLITE_TIMEOUT_MS + TERM_GRACE_MS + KILL_WAIT_MS + MAX_DRAIN_MS
    assert SkeletonStopBounds is StopBounds
    assert skeleton_stop_ladder.__module__ == "supervisor._process._ladder"


@pytest.mark.parametrize(
    "fields",
    [{"term_grace_ms": -1}, {"drain_ms": -1}, {"drain_ms": 600, "max_drain_ms": 500}],
)
def test_bad_bounds_are_refused(fields: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be"):
        StopBounds(**fields)
