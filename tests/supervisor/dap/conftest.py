"""Fixtures shared by the debug-session tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from supervisor._core._core import open_core

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from supervisor._core._core import Core


@pytest.fixture
async def core() -> AsyncIterator[Core]:
    """A Core with the built-in services; it reaps what its sessions leave behind."""
    async with open_core() as core:
        yield core
