"""What a session client needs of a Core: ``call`` and the typed helper of every command.

The clients stand on the Core's commands, not on the Core: :class:`CommandCaller` is the
interface they are written against, and :class:`~supervisor.Core` implements it. So the
Core can offer the clients (``core.language_server(...)``) while the clients name nothing of
the Core's machinery (docs/architecture.md "Layers").
"""

from __future__ import annotations

import abc
import warnings
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from .._api._helpers import CommandHelpers

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping
    from types import TracebackType

    from protocol import JSONObject, JSONValue

__all__ = ("CommandCaller", "SessionBlock", "check_options", "renamed_option")

_T = TypeVar("_T")


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
    warnings.warn(
        f"{where}: {old}= is deprecated; use {name}=",
        DeprecationWarning,
        stacklevel=_callers_level(),
    )
    return options[old]


def check_options(options: Mapping[str, Any], known: type, where: str) -> None:
    """Refuse a keyword ``known`` (a ``TypedDict`` of the options) does not declare.

    A misspelt option, or the wire's camelCase name (``workingDirectory`` for ``cwd``), would
    otherwise be ignored without a word (the options are read with ``get``).

    Raises:
        TypeError: ``<where>() got an unexpected keyword argument 'x' (did you mean 'y'?)``,
            the suggestion by the one did-you-mean helper (``protocol.did_you_mean``).
    """
    from protocol import did_you_mean

    names = set(getattr(known, "__annotations__", {}))
    for key in options:
        if key not in names:
            hint = did_you_mean(key, sorted(names), aliases=_WIRE_NAMES)
            raise TypeError(f"{where}() got an unexpected keyword argument {key!r}{hint}")


#: The wire's names (and other tools' habits) of the options, for the did-you-mean.
_WIRE_NAMES: dict[str, str] = {
    "workingDirectory": "cwd",
    "working_dir": "cwd",
    "environment": "env",
    "serverId": "server_id",
    "adapterID": "adapter_id",
    "adapterId": "adapter_id",
    "rootPath": "root_path",
    "initializationOptions": "initialization_options",
    "workspaceConfiguration": "workspace_configuration",
    "clientCapabilities": "client_capabilities",
    "initializeTimeoutMilliseconds": "initialize_timeout_ms",
    "requestTimeoutMilliseconds": "request_timeout_ms",
    "shutdownTimeoutMilliseconds": "shutdown_timeout_ms",
    "connectTimeoutMilliseconds": "connect_timeout_ms",
}


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside this package and ``contextlib``: a
    warning about an option names the line that gave it, not the context manager's."""
    import os
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(package) and not filename.endswith("contextlib.py"):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return 2


class SessionBlock(AbstractAsyncContextManager[_T]):
    """What ``core.language_server(...)`` and ``core.debug_adapter(...)`` return: the
    session's block (``async with ... as client``), and a clear ``TypeError`` when it is
    awaited instead (other clients' habit, pytest-lsp's for one), where Python would say
    only that the object "can't be used in 'await' expression". Awaited, nothing starts.
    """

    __slots__ = ("_block", "_what")

    def __init__(self, block: AbstractAsyncContextManager[_T], what: str) -> None:
        self._block = block
        self._what = what

    async def __aenter__(self) -> _T:
        return await self._block.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._block.__aexit__(exc_type, exc, tb)

    def __await__(self) -> Generator[Any, None, NoReturn]:
        raise TypeError(
            f"core.{self._what}(...) is not awaited: it starts the session for a block, "
            f"'async with core.{self._what}(...) as client:', and stops it when the block ends"
        )
