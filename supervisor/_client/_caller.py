"""What a session client needs of a Core: ``call`` and the typed helper of every command.

The clients stand on the Core's commands, not on the Core: :class:`CommandCaller` is the
interface they are written against, and :class:`~supervisor.Core` implements it. So the
Core can offer the clients (``core.language_server(...)``) while the clients name nothing of
the Core's machinery (docs/architecture.md "Layers").
"""

from __future__ import annotations

import abc
import warnings
from typing import TYPE_CHECKING, Any

from .._api._helpers import CommandHelpers

if TYPE_CHECKING:
    from collections.abc import Mapping

    from protocol import JSONObject, JSONValue

__all__ = ("CommandCaller", "renamed_option")


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


def renamed_option(options: Mapping[str, Any], name: str, old: str, where: str) -> Any:
    """``options[name]``, or ``options[old]``, the older name of the same option.

    One Python name per concept (``cwd``, ``env``, as ``process.run``, ``job.start`` and
    Trio's ``run_process`` name them); the older name still works, with a
    ``DeprecationWarning``. None when neither is given.

    Raises:
        TypeError: Both names were given.
    """
    if old not in options:
        return options.get(name)
    if name in options:
        raise TypeError(f"{where}: give {name}= or {old}=, not both")
    warnings.warn(f"{where}: {old}= is deprecated; use {name}=", DeprecationWarning, stacklevel=3)
    return options[old]
