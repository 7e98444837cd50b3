"""The lanes package's public surface (STYLE.md point 7) and its import boundary."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import lanes

ROOT = Path(__file__).resolve().parents[2]


def _modules() -> list[types.ModuleType]:
    names = [info.name for info in pkgutil.iter_modules(lanes.__path__, "lanes.")]
    assert names, "lanes has no modules?"
    return [lanes, *(importlib.import_module(name) for name in names)]


def test_every_module_has_a_tuple_all_of_existing_names() -> None:
    for module in _modules():
        exported = getattr(module, "__all__", None)
        assert isinstance(exported, tuple), module.__name__
        for name in exported:
            assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"


def test_nothing_private_is_exported() -> None:
    for module in _modules():
        assert not [name for name in module.__all__ if name.startswith("_")], module.__name__


def test_the_package_exports_exactly_its_public_names() -> None:
    public = {
        name
        for name, value in vars(lanes).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert public == set(lanes.__all__)
    assert len(lanes.__all__) == len(set(lanes.__all__))


def test_public_names_live_in_private_modules() -> None:
    for name in lanes.__all__:
        value = getattr(lanes, name)
        module = getattr(value, "__module__", None)
        if isinstance(value, type) or callable(value):
            assert module is not None
            assert module.startswith("lanes._"), (name, module)


def test_import_lanes_does_not_import_supervisor() -> None:
    code = (
        "import sys, lanes\n"
        "bad = sorted(m for m in sys.modules if m == 'supervisor' or m.startswith('supervisor.'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
