"""The supervisor package's public surface: small, explicit, and nothing private leaks."""

from __future__ import annotations

import importlib
import pkgutil

import supervisor


def test_all_is_a_tuple_of_defined_public_names() -> None:
    assert isinstance(supervisor.__all__, tuple)
    assert len(set(supervisor.__all__)) == len(supervisor.__all__)
    for name in supervisor.__all__:
        assert not name.startswith("_"), name
        assert hasattr(supervisor, name), name


def test_every_implementation_module_declares_all() -> None:
    for module_info in pkgutil.iter_modules(supervisor.__path__):
        if not module_info.name.startswith("_") or module_info.name == "__main__":
            continue
        module = importlib.import_module(f"supervisor.{module_info.name}")
        exported = getattr(module, "__all__", None)
        assert isinstance(exported, tuple), f"supervisor.{module_info.name} has no tuple __all__"
        for name in exported:
            assert hasattr(module, name), f"supervisor.{module_info.name}.{name}"


def test_public_handles_have_no_public_constructor() -> None:
    """Handles only the supervisor may create are made through a private factory."""
    import pytest

    for handle in (supervisor.ProcessTree, supervisor.JSONRPCEndpoint):
        with pytest.raises(TypeError):
            handle()
