"""The lifecycle every session kind shares: stop once, join a stop in progress, end once.

A session is a resource in trio's sense (trio ``AsyncResource``, anyio ``aclose``):
``aclose()`` is idempotent and always releases -- the processes end by the stop ladder even
when the caller is cancelled, because the ladder is the session's, not the caller's. The
rule written here once:

- the *first* stop starts the ladder (the kind's polite step, TERM, KILL, drain);
- a stop while one is in progress *joins* it: it starts nothing (no earlier SIGKILL, no
  second polite step), waits for the same end, and gets the same result;
- a stop after the end returns the recorded result at once;
- the end is recorded once: :attr:`SessionResource.ended` turns true, every
  :meth:`SessionResource.wait_ended` wakes, :attr:`SessionResource.stop_result` is fixed.

Each kind keeps its own state table and ladder; this class holds only the three facts the
rule needs (stop started, ended, the result).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Generic, TypeVar

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ("SessionResource",)

R = TypeVar("R")


class SessionResource(ABC, Generic[R]):
    """Base of a session: the stop-joining rule and the end, with a result of type ``R``.

    A subclass implements :meth:`stop` with one of two shapes:

    - the caller runs the ladder: ``return await self._stop_once(ladder, fallback=...)``;
    - the session's own task runs it: claim with :meth:`_claim_stop`, ask the task to stop,
      ``await self.wait_ended()``; the task calls :meth:`_mark_ended` when it ends.
    """

    def __init__(self) -> None:
        self._stop_claimed = False
        self._ended_event = trio.Event()
        self._stop_result: R | None = None

    # -- the facts -----------------------------------------------------------------------

    @property
    def stop_started(self) -> bool:
        """Whether a stop was started (by a caller or by the session itself)."""
        return self._stop_claimed

    @property
    def ended(self) -> bool:
        """Whether the session ended: everything it started is gone, its result is fixed."""
        return self._ended_event.is_set()

    @property
    def stop_result(self) -> R | None:
        """What every stop returns, once recorded (None before)."""
        return self._stop_result

    async def wait_ended(self) -> None:
        """Wait until the session ended.

        **Cancellation:** cancellable; the session is unaffected.
        """
        await self._ended_event.wait()

    # -- stopping ------------------------------------------------------------------------

    @abstractmethod
    async def stop(self) -> R:
        """Stop the session (the kind's ladder); a second call joins the first."""

    async def aclose(self) -> None:
        """Stop the session and wait for its end; idempotent (a later call joins).

        **Cancellation:** the stop is the session's: once started it goes on to the end even
        when the caller is cancelled (each kind bounds its ladder).
        """
        await self.stop()

    def _claim_stop(self) -> bool:
        """Record that a stop started; True for the first caller only (it starts the ladder).

        A caller that gets False joins: it must start nothing and wait for the end.
        """
        if self._stop_claimed:
            return False
        self._stop_claimed = True
        return True

    def _mark_ended(self, result: R) -> None:
        """Record the end: ``result`` unless one is recorded already; wakes every waiter.

        Idempotent: a second call changes nothing.
        """
        if self._stop_result is None:
            self._stop_result = result
        self._ended_event.set()

    async def _stop_once(
        self, ladder: Callable[[], Awaitable[R]], *, fallback: Callable[[], R]
    ) -> R:
        """Run ``ladder`` for the first stop; join it for every later one.

        Args:
            ladder: Ends everything the session started; returns the result.
            fallback: The result when ``ladder`` raised (it is still the end).

        Returns:
            The recorded result; the same object for every caller.

        Raises:
            Whatever ``ladder`` raised, to the first caller only (the session has ended
            anyway: joiners get the fallback result).

        **Cancellation:** shielded: the ladder bounds itself.
        """
        with trio.CancelScope(shield=True):
            if self._claim_stop():
                try:
                    self._mark_ended(await ladder())
                finally:
                    if not self._ended_event.is_set():
                        self._mark_ended(fallback())
            else:
                await self._ended_event.wait()
        assert self._stop_result is not None
        return self._stop_result
