"""The declarations of the Core's edge: every command's payload and result, every event.

Each service has its module (``_core``, ``_process``, ``_job``, ``_lsp``, ``_plugin``,
``_run``, ``_debug``, ``_terminal``) with a ``COMMANDS`` table ``{name: (payload, result)}``
and, for a kind with events, ``EVENTS``. Declaring a new command is a payload struct, a
result struct and one row in its module's table; the Core refuses to open with a command
that has none (:func:`declaration`), and ``docs/commands.md`` and ``docs/schema/`` are
generated from these tables (``python -m supervisor._api.docgen``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from . import _core, _debug, _job, _lsp, _plugin, _process, _run, _terminal
from ._base import (
    ENDING_TURN_WAIT_MS,
    TAKES_DECLARATION,
    Ordered,
    decode_payload,
    takes_declaration,
)

__all__ = (
    "CHECK_RESULTS",
    "COMMANDS",
    "ENDING_TURN_WAIT_MS",
    "EVENTS",
    "EVENT_STREAMS",
    "TAKES_DECLARATION",
    "Command",
    "Ordered",
    "check_result",
    "declaration",
    "decode_payload",
    "takes_declaration",
    "target_of",
    "validate_payload",
)

#: Check every answer against its result declaration too (``SUPERVISOR_CHECK_RESULTS=1``;
#: the test suite sets it, so a declaration that drifts from its command fails a test).
CHECK_RESULTS: Final = os.environ.get("SUPERVISOR_CHECK_RESULTS") == "1"


@dataclass(frozen=True)
class Command:
    """One command's declaration.

    Attributes:
        name: ``"process.run"``.
        payload: Its payload type (a struct, or a tagged union of structs).
        result: Its result type (``None``: the command answers ``null``).
        service: The module that declares it (``"process"``).
        order: The target it acts on (docs/architecture.md "The order rule"), or None when
            it is ordered with nothing.
    """

    name: str
    payload: Any
    result: Any
    service: str
    order: Ordered | None = None


def _table() -> dict[str, Command]:
    table: dict[str, Command] = {}
    for module in (_core, _process, _job, _lsp, _plugin, _run, _debug, _terminal):
        service = module.__name__.rpartition("._")[2]
        order: dict[str, Ordered] = getattr(module, "ORDER", {})
        for name, (payload, result) in module.COMMANDS.items():
            if name in table:
                raise RuntimeError(f"{name} is declared twice")
            table[name] = Command(name, payload, result, service, order.get(name))
        if unknown := set(order) - set(module.COMMANDS):
            raise RuntimeError(f"ORDER names undeclared commands: {sorted(unknown)}")
    return table


#: Every declared command by name.
COMMANDS: Final = _table()
#: The event union of each kind that has events (``"job"``, ``"lsp"``, ...).
EVENTS: Final[dict[str, Any]] = {
    **_job.EVENTS,
    **_lsp.EVENTS,
    **_debug.EVENTS,
    **_terminal.EVENTS,
    **_run.EVENTS,
}
#: What ends the event stream of each kind (docs/commands.md "Events").
EVENT_STREAMS: Final[dict[str, str]] = {
    **_job.STREAMS,
    **_lsp.STREAMS,
    **_debug.STREAMS,
    **_terminal.STREAMS,
    **_run.STREAMS,
}


def declaration(name: str) -> Command:
    """The declaration of command ``name``.

    Raises:
        KeyError: ``name`` is not declared.
    """
    return COMMANDS[name]


def target_of(name: str, payload: object) -> tuple[str, str] | None:
    """The target command ``name`` acts on with this (undecoded) payload, or None.

    Read before the payload is decoded -- where a request arrives, synchronously -- so it
    only looks: a payload whose target field is missing or not a non-empty string has no
    target (its decoding refuses it before any effect).

    Returns:
        ``(kind, id)``; ``(kind, "")`` for a kind with one target (:attr:`Ordered.field`
        None); None for a command ordered with nothing or an unknown command.
    """
    command = COMMANDS.get(name)
    if command is None or command.order is None:
        return None
    order = command.order
    if order.field is None:
        return (order.target, "")
    if not isinstance(payload, dict):
        return None
    value = payload.get(order.field)
    if not isinstance(value, str) or not value:
        return None
    return (order.target, value)


def validate_payload(name: str, payload: object) -> Any:
    """Decode ``payload`` as command ``name``'s declaration (see :func:`decode_payload`)."""
    return decode_payload(name, COMMANDS[name].payload, payload)


def check_result(name: str, data: object) -> None:
    """Check ``data`` against command ``name``'s result declaration.

    Raises:
        msgspec.ValidationError: It does not match (a bug of ours: the declaration or the
            command drifted).
    """
    command = COMMANDS.get(name)
    if command is None:
        return
    if command.result is None:
        if data is not None:
            raise msgspec.ValidationError(f"{name} answers null, not {type(data).__name__}")
        return
    msgspec.convert(data, command.result, strict=True)
