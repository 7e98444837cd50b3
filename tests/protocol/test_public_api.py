"""The public surface of ``protocol``: explicit, small, and free of trio (STYLE.md 1 and 7)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types

import protocol


def test_import_does_not_load_trio() -> None:
    code = (
        "import sys, protocol\n"
        "loaded = sorted(m for m in ('trio', 'anyio', 'asyncio', 'socket') if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""


def test_all_is_a_tuple_of_existing_public_names() -> None:
    assert isinstance(protocol.__all__, tuple)
    assert len(set(protocol.__all__)) == len(protocol.__all__)
    for name in protocol.__all__:
        assert not name.startswith("_")
        assert hasattr(protocol, name), name


def test_nothing_public_is_left_out_of_all() -> None:
    # dir(): the names a submodule gives when first used (the package imports lazily) too.
    public = {
        name
        for name in dir(protocol)
        if not name.startswith("_") and not isinstance(getattr(protocol, name), types.ModuleType)
    }
    public.discard("annotations")  # the __future__ feature
    assert public == set(protocol.__all__)


def test_every_module_declares_all() -> None:
    for info in pkgutil.walk_packages(protocol.__path__, prefix="protocol."):
        module = importlib.import_module(info.name)
        assert isinstance(getattr(module, "__all__", None), tuple), info.name
        if not info.name.rsplit(".", 1)[1].startswith("_"):
            raise AssertionError(f"public submodule {info.name}: keep implementations private")


def test_exported_objects_are_defined_in_protocol() -> None:
    for name in protocol.__all__:
        value = getattr(protocol, name)
        module = getattr(value, "__module__", None)
        if isinstance(value, type | types.FunctionType):
            assert module is not None
            assert module.startswith("protocol."), (name, module)
