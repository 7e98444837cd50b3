"""Subscriptions and the host-notification queue of one plugin backend (pure model).

plugin-contract.md "Workspace contexts and capability discovery", "Host notifications":

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
    "MAX_QUEUED_NOTIFICATIONS",
    "MAX_QUEUED_NOTIFICATION_BYTES",
    "NOTIFY",
    "HostNotifications",
    "NotificationOverflow",
    "Subscription",
    "Subscriptions",
)

#: Host notifications queued per session before the session ends (plugin-contract.md).
MAX_QUEUED_NOTIFICATIONS: Final = 128
#: Bytes of their params (as JSON) queued per session before the session ends (ours).
MAX_QUEUED_NOTIFICATION_BYTES: Final = 8 * 1024 * 1024
NOTIFY: Final = "lithe/host/subscriptions/notify"
DID_CHANGE_CONTEXTS: Final = "lithe/host/workspace/didChangeContexts"


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

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, method: str, params: JSONObject) -> None:
        """Queue a notification; a queued ``didChangeContexts`` takes the later revision."""
        if self.overflowed:
            return
        size = encoded_size(params)
        if method == DID_CHANGE_CONTEXTS:
            for n, (queued, _params) in enumerate(self._queue):
                if queued == DID_CHANGE_CONTEXTS:
                    self._queue[n] = (method, params)
                    self._bytes += size - self._sizes[n]
                    self._sizes[n] = size
                    return
        if len(self._queue) >= self._bound or self._bytes + size > self._max_bytes:
            self.overflowed = True
            self._clear()
        else:
            self._queue.append((method, params))
            self._sizes.append(size)
            self._bytes += size
        self._ready.set()

    def _clear(self) -> None:
        self._queue.clear()
        self._sizes.clear()
        self._bytes = 0

    async def get(self) -> tuple[str, JSONObject]:
        """The next notification, waiting for one.

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
                self._bytes -= self._sizes.popleft()
                return self._queue.popleft()
            self._ready = trio.Event()
            await self._ready.wait()

    def clear(self) -> None:
        """Forget what is queued (the backend process ended)."""
        self._clear()
        self.overflowed = False


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
