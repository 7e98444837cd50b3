"""The supervisor package's public surface: small, explicit, and nothing private leaks."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import warnings
from typing import TYPE_CHECKING

import pytest

import supervisor

if TYPE_CHECKING:
    from collections.abc import Callable


def test_all_is_a_tuple_of_defined_public_names() -> None:
    assert isinstance(supervisor.__all__, tuple)
    assert len(set(supervisor.__all__)) == len(supervisor.__all__)
    for name in supervisor.__all__:
        assert not name.startswith("_"), name
        assert hasattr(supervisor, name), name


def test_every_implementation_module_declares_all() -> None:
    for module_info in pkgutil.walk_packages(supervisor.__path__, "supervisor."):
        private = module_info.name.split(".")[1:]
        if not all(part.startswith("_") for part in private) or private[-1] == "__main__":
            continue
        if module_info.name == "supervisor._ray._executor":
            # The runner's side of the [ray] extra imports Ray itself.
            if not importlib.util.find_spec("ray"):
                continue
            with warnings.catch_warnings():
                # Ray's compiled core calls str() on bytes while it is imported (-bb).
                warnings.simplefilter("ignore", BytesWarning)
                importlib.import_module("ray")
        module = importlib.import_module(module_info.name)
        exported = getattr(module, "__all__", None)
        assert isinstance(exported, tuple), f"{module_info.name} has no tuple __all__"
        for name in exported:
            assert hasattr(module, name), f"{module_info.name}.{name}"


def test_public_handles_have_no_public_constructor() -> None:
    """Handles only the supervisor may create are made through a private factory."""
    handles: tuple[Callable[[], object], ...] = (
        supervisor.ProcessTree,  # type: ignore[assignment]
        supervisor.JSONRPCEndpoint,
    )
    for handle in handles:
        with pytest.raises(TypeError, match="no public constructor"):
            handle()


def test_error_types_and_codes_are_re_exported() -> None:
    """A caller of the Core catches and compares errors without importing ``protocol``."""
    import protocol

    assert supervisor.CoreError is protocol.CoreError
    assert supervisor.CoreErrorCode is protocol.CoreErrorCode
    assert supervisor.ErrorCode is protocol.ErrorCode
    assert supervisor.ERROR_CATALOG is protocol.ERROR_CATALOG
    assert supervisor.CatalogEntry is protocol.CatalogEntry
    assert supervisor.lookup_error("busy").name == supervisor.CoreErrorCode.BUSY
    for name in ("CoreError", "CoreErrorCode", "ErrorCode", "ERROR_CATALOG", "lookup_error"):
        assert name in supervisor.__all__
