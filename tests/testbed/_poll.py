"""Polling for states that have no event to wait on (procfs, another process's output)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

#: Generous: the machine is shared; a bound that fails only when something hangs.
BOUND_S = 30.0


async def wait_until(
    predicate: Callable[[], object], *, timeout_s: float = BOUND_S, interval_s: float = 0.02
) -> None:
    """Check ``predicate`` every ``interval_s`` seconds until it is true.

    Raises:
        trio.TooSlowError: It was still false after ``timeout_s`` seconds.
    """
    with trio.fail_after(timeout_s):
        while True:
            if predicate():
                return
            await trio.sleep(interval_s)


def gone(pid: int) -> bool:
    """True when ``pid`` has exited and was reaped (a zombie is not gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True
    return data[data.rfind(b")") + 2 :].startswith(b"X")
