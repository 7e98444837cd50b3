"""``core.*``: the Core's own commands."""

from __future__ import annotations

from ._base import Payload, Result

__all__ = ("COMMANDS", "CorePing", "CorePingResult")


class CorePing(Payload, kw_only=True):
    """``core.ping {}``: no fields."""


class CorePingResult(Result, kw_only=True):
    """``core.ping``: the protocol version (1) and the package version."""

    protocol_version: int
    version: str


COMMANDS = {"core.ping": (CorePing, CorePingResult)}
