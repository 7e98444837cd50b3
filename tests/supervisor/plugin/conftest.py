"""Fixtures shared by the plugin tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.supervisor.cli.test_serve import serve_process

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.supervisor.cli.test_serve import Client


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    """A client on a ``supervisor serve`` child (example backends take a while to stop)."""
    async with serve_process(grace_s=20) as serve_client:
        yield serve_client
