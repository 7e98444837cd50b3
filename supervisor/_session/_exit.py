"""One exit detail for every kind: how a process ended, as the wire reports it."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from protocol import JSONObject

__all__ = ("exit_detail", "signal_name")


def signal_name(number: int) -> str:
    """``"SIGKILL"`` for 9; ``"SIG<n>"`` for a number the platform has no name for."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def exit_detail(returncode: int | None) -> JSONObject:
    """The exit detail of a return code (``subprocess`` convention: ``-N`` is signal ``N``).

    Returns:
        ``{exitCode, signal, signalName}``: ``exitCode`` is the status (0-255) or None when a
        signal ended the process; ``signal`` is the signal's number and ``signalName`` its name
        (``"SIGTERM"``), both None for a normal exit. An empty object while the process runs
        (``returncode`` None).
    """
    if returncode is None:
        return {}
    if returncode < 0:
        return {"exitCode": None, "signal": -returncode, "signalName": signal_name(-returncode)}
    return {"exitCode": returncode, "signal": None, "signalName": None}
