"""Events of a :class:`~supervisor.CoreThread` as a blocking iterator, without polling loops.

Strategy: the iterator drains the Core's own event queue with the source's ``waitEvents``
command, one batch at a time, from the consuming thread. The Core's queue is already bounded
(it drops the oldest informational events and reports ``gap``), so the subscription keeps at
most the batch it is handing out and a slow consumer costs no more memory than an idle one.
No callback runs on the Core's thread: a consumer that blocks stalls only itself.

The wait is started and cancelled on the Core's thread (the ``closed`` flag is read and the
cancel scope entered there, in one step), so :meth:`EventSubscription.close` from any thread
always ends a wait in progress or prevents the next one; there is no window between the check
and the wait.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import TYPE_CHECKING, Final, final

import trio

from protocol import CoreError

from .._handles import NoPublicConstructor

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

    from protocol import JSONObject, JSONValue

    from ._core import Core

__all__ = ("EVENT_SOURCES", "EventSubscription")

#: The event sources: ``kind -> (waitEvents command, id field or None)``.
EVENT_SOURCES: Final = {
    "job": ("job.waitEvents", None),
    "lsp": ("lsp.waitEvents", "sessionId"),
    "debug": ("debug.waitEvents", "sessionId"),
    "terminal": ("terminal.waitEvents", "terminalID"),
}
#: How long one wait of the iterator lasts before it waits again (ms); any value works, as
#: the wait returns as soon as there are events and close() ends it at once.
_WAIT_MS: Final = 60_000
#: Codes that end the iteration rather than raise: the source is gone, or the Core closes.
_ENDING_CODES: Final = frozenset({"not_found", "cancelled"})


@final
class EventSubscription(metaclass=NoPublicConstructor):
    """The events of one source, in order: ``for event in subscription: ...``.

    Made by :meth:`supervisor.CoreThread.events`; it has no public constructor. Each item is
    one event object as ``*.waitEvents`` returns it (``{"seq", "event", ...}``). Iterating
    blocks the calling thread until the next event. The iteration ends when :meth:`close` is
    called (from any thread, also while another thread waits in it), when the source is gone
    (a session or terminal disposed: ``not_found``) or when the CoreThread closes. It is also
    a context manager that closes it. A terminal's ``exit`` events (one per generation) are
    among its events without any other call.

    Memory: the Core's own queue of the source is the bound (its ``max_events``; past it the
    oldest informational events are dropped); the subscription holds one drained batch (at
    most 16 MiB as JSON). Each batch that reported dropped events adds one to :attr:`gaps`.

    One consumer per source: two subscriptions of the same source share its events (each
    event reaches one of them).

    Attributes:
        gaps: How many drains reported that events were dropped before them (``gap: true``).
    """

    def __init__(
        self, core: Core, token: trio.lowlevel.TrioToken, kind: str, source_id: str | None
    ) -> None:
        command, id_field = EVENT_SOURCES[kind]
        payload: JSONObject = {"timeoutMilliseconds": _WAIT_MS}
        if id_field is not None:
            assert source_id is not None
            payload[id_field] = source_id
        self._core = core
        self._token = token
        self._command = command
        self._payload = payload
        self._buffer: deque[JSONObject] = deque()
        #: Read and written on the Core's thread only (see the module docstring).
        self._closed = False
        self._scope: trio.CancelScope | None = None
        #: Set once the iteration has ended, or by close() from any thread.
        self._ended = False
        self.gaps = 0

    def __iter__(self) -> Iterator[JSONObject]:
        return self

    def __next__(self) -> JSONObject:
        if self._ended:
            raise StopIteration
        while not self._buffer:
            if self._ended:
                raise StopIteration
            batch = self._wait_batch()
            if batch is None:
                self._ended = True
                raise StopIteration
            events = batch.get("events")
            if batch.get("gap"):
                self.gaps += 1
            if isinstance(events, list):
                self._buffer.extend(e for e in events if isinstance(e, dict))
        return self._buffer.popleft()

    def _wait_batch(self) -> JSONObject | None:
        """One drain on the Core's thread; None when the iteration ends."""
        try:
            return trio.from_thread.run(self._wait_in_core, trio_token=self._token)
        except trio.RunFinishedError:
            return None

    async def _wait_in_core(self) -> JSONObject | None:
        if self._closed:
            return None
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                batch: JSONValue = await self._core.call(self._command, self._payload)
            except CoreError as exc:
                if exc.code in _ENDING_CODES:
                    return None
                raise
            finally:
                self._scope = None
            return batch if isinstance(batch, dict) else None
        return None  # close() cancelled the wait

    def close(self) -> None:
        """End the iteration; a wait in progress (in any thread) returns at once. Idempotent.

        Events still queued in the Core stay there for the next drain; those of the batch
        this subscription was handing out are not handed out any more.
        """
        self._ended = True
        with contextlib.suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(self._close_in_core, trio_token=self._token)

    def _close_in_core(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()

    def __enter__(self) -> EventSubscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
