"""What a session client needs of a Core: ``call`` and the typed helper of every command.

The clients stand on the Core's commands, not on the Core: :class:`CommandCaller` is the
interface they are written against, and :class:`~supervisor.Core` implements it. So the
Core can offer the clients (``core.language_server(...)``) while the clients name nothing of
the Core's machinery (docs/architecture.md "Layers").
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from .._api._helpers import CommandHelpers

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = ("CommandCaller",)


class CommandCaller(CommandHelpers, abc.ABC):
    """Runs Core commands: :meth:`call`, and one typed method per command (the helpers)."""

    @abc.abstractmethod
    async def call(
        self,
        command: str,
        payload: JSONObject,
        *,
        operation_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> JSONValue:
        """Run one command and return its data (:meth:`supervisor.Core.call`).

        Raises:
            CoreError: The command's refusal or failure.
        """
