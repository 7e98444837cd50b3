"""Subscriptions and the host-notification queue of one plugin backend (pure model).

the plugin contract "Workspace contexts and capability discovery", "Host notifications":

- A service that creates a subscription returns a ``subscriptionID`` of the key alphabet
  (:meth:`Subscriptions.open`); its events reach the backend as
  ``lithe/host/subscriptions/notify {subscriptionID, sequence, event}``, ``sequence``
  starting at 1 and growing by one per subscription, nothing after its disposal
  (:meth:`Subscriptions.publish`).
- ``lithe/host/subscriptions/dispose``, the end of the backend process (a replacement never
  hears an old subscription), and closing the subscription's context dispose it; the
  service that made it is told (``on_dispose``) so it stops the work.
- Host notifications wait in a queue of :data:`MAX_QUEUED_NOTIFICATIONS` per session and
  :data:`MAX_QUEUED_NOTIFICATION_BYTES` of params (as JSON); ``workspace/didChangeContexts``
  coalesces to the latest revision; overflow ends the session (:class:`NotificationOverflow`)
  rather than growing without bound or losing a command.

Of the six host notifications, only ``didChangeContexts`` is "latest wins" in the contract
(:data:`LATEST_WINS`): "context revisions coalesce to the latest", and the backend reads the
contexts with ``listContexts`` anyway. ``subscriptions/notify`` carries a ``sequence`` the
backend checks for gaps, ``commands/didRun`` and ``run/didExit`` are each one event, and
``languageServer/didChangeState`` and ``didReceiveNotification`` report each state and message
of a server (a ``crashed`` between two ``running`` must be seen): none of them merges. A
coalescing notification merges only while it waits here, so the sender keeps it here until
the backend has read what was written before it (``JSONRPCEndpoint.wait_read_by_peer``):
a backend that stops reading while 30 contexts change gets the one written before it stopped,
then the latest.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

from protocol._json import encoded_size

if TYPE_CHECKING:
    from collections.abc import Callable

    from protocol import JSONObject

__all__ = (
    "DID_CHANGE_CONTEXTS",
    "LATEST_WINS",
    "MAX_QUEUED_NOTIFICATIONS",
    "MAX_QUEUED_NOTIFICATION_BYTES",
    "NOTIFY",
    "HostNotifications",
    "NotificationOverflow",
    "Subscription",
    "Subscriptions",
)

#: Host notifications queued per session before the session ends (the plugin contract).
MAX_QUEUED_NOTIFICATIONS: Final = 128
#: Bytes of their params (as JSON) queued per session before the session ends (ours).
MAX_QUEUED_NOTIFICATION_BYTES: Final = 8 * 1024 * 1024
NOTIFY: Final = "lithe/host/subscriptions/notify"
DID_CHANGE_CONTEXTS: Final = "lithe/host/workspace/didChangeContexts"
#: Host notifications of which only the latest queued one matters (the plugin contract "Host
#: services": "context revisions coalesce to the latest").
LATEST_WINS: Final = frozenset({DID_CHANGE_CONTEXTS})


class NotificationOverflow(Exception):
    """More than :data:`MAX_QUEUED_NOTIFICATIONS` host notifications, or more than
    :data:`MAX_QUEUED_NOTIFICATION_BYTES` of them, waited: the session ends (the backend
    stopped reading)."""


class HostNotifications:
    """The ordered queue of host notifications to one backend process.

    ``put`` never blocks; the session's sender task takes them with :meth:`get` and writes
    them in order.
    """

    def __init__(
        self, bound: int = MAX_QUEUED_NOTIFICATIONS, max_bytes: int = MAX_QUEUED_NOTIFICATION_BYTES
    ) -> None:
        self._bound = bound
        self._max_bytes = max_bytes
        self._queue: deque[tuple[str, JSONObject]] = deque()
        #: The JSON size of each queued notification's params, in queue order.
        self._sizes: deque[int] = deque()
        self._bytes = 0
        self._ready = trio.Event()
        self.overflowed = False
        # Entries ever queued, and those written (or dropped) since: a call started after a
        # notification waits until it is written (``wait_written``).
        self._queued_total = 0
        self._written_total = 0
        self._written = trio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, method: str, params: JSONObject) -> None:
        """Queue a notification; a queued one of :data:`LATEST_WINS` takes the later params."""
        if self.overflowed:
            return
        size = encoded_size(params)
        if method in LATEST_WINS:
            for n, (queued, _params) in enumerate(self._queue):
                if queued == method:
                    self._queue[n] = (method, params)
                    self._bytes += size - self._sizes[n]
                    self._sizes[n] = size
                    return
        if len(self._queue) >= self._bound or self._bytes + size > self._max_bytes:
            self.overflowed = True
            self._clear()
            self._all_written()
        else:
            self._queue.append((method, params))
            self._sizes.append(size)
            self._bytes += size
            self._queued_total += 1
        self._ready.set()

    def mark(self) -> int:
        """A mark for :meth:`wait_written`: what is queued now."""
        return self._queued_total

    async def wait_written(self, mark: int) -> None:
        """Wait until every notification queued before ``mark`` was written (or dropped).

        A function call waits here before its ``invoke``, and a request or notification of
        the session before it is written: a notification held back so that later revisions
        can replace it (:meth:`peek`) is never overtaken by what the host sent after it
        (docs/architecture.md "The order rule").

        **Cancellation:** safe to cancel. Not a checkpoint when nothing is left to write: a
        call then goes straight on to its ``invoke`` as before, and a cancel that follows at
        once still reaches the backend as ``$/cancelRequest``.
        """
        while self._written_total < mark:
            await self._written.wait()

    def pending(self, mark: int) -> bool:
        """Whether a notification queued before ``mark`` is still to be written."""
        return self._written_total < mark

    def written(self) -> None:
        """The sender wrote the notification it took last (:meth:`get`)."""
        self._written_total += 1
        self._wake_writers()

    def _all_written(self) -> None:
        self._written_total = self._queued_total
        self._wake_writers()

    def _wake_writers(self) -> None:
        self._written.set()
        self._written = trio.Event()

    def _clear(self) -> None:
        self._queue.clear()
        self._sizes.clear()
        self._bytes = 0

    async def get(self) -> tuple[str, JSONObject]:
        """The next notification, waiting for one.

        Raises:
            NotificationOverflow: The queue overflowed; the session must end.
        """
        await self.peek()
        self._bytes -= self._sizes.popleft()
        return self._queue.popleft()

    async def peek(self) -> str:
        """The method of the next notification, left queued (so a later one of
        :data:`LATEST_WINS` can still replace it), waiting for one.

        Raises:
            NotificationOverflow: The queue overflowed; the session must end.
        """
        while True:
            if self.overflowed:
                raise NotificationOverflow(
                    f"more than {self._bound} host notifications (or {self._max_bytes} bytes"
                    " of them) waited for the backend"
                )
            if self._queue:
                return self._queue[0][0]
            self._ready = trio.Event()
            await self._ready.wait()

    def clear(self) -> None:
        """Forget what is queued (the backend process ended)."""
        self._clear()
        self.overflowed = False
        self._all_written()


@dataclass(eq=False)
class Subscription:
    """One live subscription: its ID, last sequence, context and disposal hook."""

    subscription_id: str
    context_id: str | None
    on_dispose: Callable[[], None] | None
    sequence: int = 0


class Subscriptions:
    """The live subscriptions of one backend session.

    Args:
        send: Queues a host notification to the backend (``send(method, params)``).
    """

    def __init__(self, send: Callable[[str, JSONObject], None]) -> None:
        self._send = send
        self._live: dict[str, Subscription] = {}
        self._ids = itertools.count(1)

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._live

    def __len__(self) -> int:
        return len(self._live)

    def live(self) -> tuple[Subscription, ...]:
        """The live subscriptions."""
        return tuple(self._live.values())

    def open(
        self, context_id: str | None = None, on_dispose: Callable[[], None] | None = None
    ) -> Subscription:
        """A new subscription (``s<n>``, never reused in this session)."""
        subscription = Subscription(f"s{next(self._ids)}", context_id, on_dispose)
        self._live[subscription.subscription_id] = subscription
        return subscription

    def publish(self, subscription_id: str, event: JSONObject) -> bool:
        """Queue ``subscriptions/notify`` with the next sequence; False once disposed."""
        subscription = self._live.get(subscription_id)
        if subscription is None:
            return False
        subscription.sequence += 1
        self._send(
            NOTIFY,
            {
                "subscriptionID": subscription_id,
                "sequence": subscription.sequence,
                "event": event,
            },
        )
        return True

    def dispose(self, subscription_id: str) -> bool:
        """End one subscription (unknown or disposed: nothing); True when it was live."""
        subscription = self._live.pop(subscription_id, None)
        if subscription is None:
            return False
        if subscription.on_dispose is not None:
            subscription.on_dispose()
        return True

    def dispose_context(self, context_id: str) -> int:
        """End the subscriptions made for ``context_id``; how many ended."""
        ids = [s.subscription_id for s in self._live.values() if s.context_id == context_id]
        for subscription_id in ids:
            self.dispose(subscription_id)
        return len(ids)

    def close(self) -> int:
        """End every subscription (the backend process ended); how many ended."""
        ids = list(self._live)
        for subscription_id in ids:
            self.dispose(subscription_id)
        return len(ids)
