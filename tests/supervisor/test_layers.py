"""Layers you can see (issue 24): no import circle spans two folders of ``supervisor/``, and
no import runs up a floor.

The floors are declared here and in docs/architecture.md "Layers", from the ground up; a
folder (a subpackage, or a top-level module) imports only from its own floor or below, and
the folders of one floor import each other in one direction only. Every import counts:
module level, deferred into a function, and under ``TYPE_CHECKING`` (a type named from above
is still a dependency on what is above). What is resolved by name at run time -- the Core's
session kinds (``_core/_registry.py``), the package's lazy public names -- is no import: that
is how a lower floor reaches a higher one, knowing its name and never its code.

Read from the sources (ast), in the spirit of trio's ``_tests/test_exports.py``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPERVISOR = ROOT / "supervisor"

#: The floors of ``supervisor/``, from the ground up (docs/architecture.md "Layers").
FLOORS: tuple[tuple[str, ...], ...] = (
    # The ground: errors, handles, supervision boundaries, the version, flow control's pieces.
    ("_errors", "_handles", "_boundary", "_version", "_flow"),
    # The declarations of the Core's edge: every command's payload, result and event.
    ("_api",),
    # The session clients, written against the commands (not the Core).
    ("_client",),
    # Processes and byte streams: process trees, the stop ladder, the JSON-RPC endpoint.
    ("_process", "_transport", "_endpoint"),
    # The session skeleton every kind stands on.
    ("_session",),
    # The Core: dispatch, operations, the service interface, process.run and the lanes.
    ("_core",),
    # The session kinds, each on the ones below it.
    ("_terminal",),
    ("_dap",),
    ("_plugin",),
    ("_lsp",),
    # What stands on the Core and its kinds: conformance checks, Ray lanes, the plugin SDK,
    # the misbehaving programs and the chaos runner.
    ("_check", "_ray", "plugin_sdk", "testbed"),
    # The command line.
    ("_cli",),
    # The faces: the package's public names, ``python -m supervisor``, the public command
    # declarations, the pytest plugin.
    ("__init__", "__main__", "commands", "pytest_plugin"),
)
FLOOR = {folder: n for n, folders in enumerate(FLOORS) for folder in folders}


def _folder(module: str) -> str:
    """The folder of a dotted module name of ``supervisor``: ``supervisor._lsp._service``
    -> ``_lsp``; ``supervisor`` itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@functools.cache
def _imports() -> list[tuple[str, str, str]]:
    """Every import of ``supervisor/`` that reaches another folder of it, as ``(from folder,
    to folder, where)``, ``where`` being ``file:line``."""
    found: list[tuple[str, str, str]] = []
    for path in sorted(SUPERVISOR.rglob("*.py")):
        relative = path.relative_to(ROOT).with_suffix("")
        module = ".".join(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        source = _folder(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                # ``from .. import _api`` names a folder by the imported name.
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] != "supervisor":
                    continue
                folder = _folder(target)
                if folder != source:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.append((source, folder, where))
    return found


def test_every_folder_has_a_floor() -> None:
    """A new folder of ``supervisor/`` is placed on a floor here (and in the docs) first."""
    folders = {
        path.name if path.is_dir() else path.stem
        for path in SUPERVISOR.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists()) or path.suffix == ".py"
    }
    assert folders - set(FLOOR) == set(), "place each folder on a floor (FLOORS)"
    assert set(FLOOR) - folders == set(), "FLOORS names a folder that is gone"


def test_no_import_runs_up_a_floor() -> None:
    upward = [
        f"{where}: {source} (floor {FLOOR[source]}) imports {target} (floor {FLOOR[target]})"
        for source, target, where in _imports()
        if FLOOR[target] > FLOOR[source]
    ]
    assert upward == []


def test_no_import_circle_spans_two_folders() -> None:
    """The folders of one floor import each other in one direction only (with the test
    above, no circle can cross floors either)."""
    edges: dict[str, set[str]] = {}
    for source, target, _ in _imports():
        edges.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            folder = todo.pop()
            if folder == goal:
                return True
            if folder not in seen:
                seen.add(folder)
                todo.extend(edges.get(folder, ()))
        return False

    circles = sorted(
        f"{source} -> {target} -> ... -> {source} ({where})"
        for source, target, where in _imports()
        if reaches(target, source)
    )
    assert circles == []


def test_the_packages_depend_one_way() -> None:
    """``supervisor -> lanes -> protocol``, ``supervisor -> protocol``: protocol imports
    neither, lanes not supervisor (docs/architecture.md, the top)."""
    above = {"protocol": ("lanes", "supervisor"), "lanes": ("supervisor",)}
    upward = []
    for package, forbidden in above.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                else:
                    continue
                upward += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
                    for name in names
                    if name.split(".")[0] in forbidden
                ]
    assert upward == []


def test_the_guard_imports_nothing_of_ours() -> None:
    """``_trio_process_supervisor/_guard.py`` is what ``supervisor`` and ``lanes`` import
    first; the command's entry beside it imports the command line, so a guard importing any
    of ours would close a circle through all three packages."""
    path = ROOT / "_trio_process_supervisor" / "_guard.py"
    ours = {"supervisor", "protocol", "lanes", "_trio_process_supervisor"}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["_trio_process_supervisor" if node.level else node.module or ""]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names if name.split(".")[0] in ours]
    assert found == []


def test_the_reading_finds_imports_of_every_kind() -> None:
    """The reader sees deferred and type-only imports (so the tests above can fail)."""
    imports = _imports()
    # A deferred one: CoreThread imports its portal when it runs.
    assert any(
        (s, t) == ("_core", "_client") and w.startswith("supervisor/_core/_core.py")
        for s, t, w in imports
    )
    # A type-only one: the Core names the session skeleton's Turn under TYPE_CHECKING.
    assert ("_core", "_session") in {(s, t) for s, t, _ in imports}
    # ``from .. import _api`` counts as an import of the folder _api.
    assert ("_core", "_api") in {(s, t) for s, t, _ in imports}
