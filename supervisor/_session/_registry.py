"""One registry of a kind's sessions: ids, lookup, and ``*.waitEvents`` / ``*.pollEvents``.

Every kind (language-server sessions, debug sessions, terminals) keeps its sessions by id,
answers an unknown id with ``not_found``, and drains a session's event queue with the same
two commands (the Core API contract "Events": ``<kind>.waitEvents {<idField>, timeoutMilliseconds}``
and ``<kind>.pollEvents {<idField>}``). That is written here once; a service registers the
two handlers under its own command names and keeps only what is its own.

An echoed id is cut (:func:`protocol.echo`, :data:`protocol.MAX_ECHO_BYTES`), so a caller's
megabyte-long id never comes back in a message or its details.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

import msgspec
import trio

from protocol import MAX_ECHO_BYTES, CoreError, cut_utf8, echo

from .._api._base import takes_declaration
from ._events import MAX_WAIT_EVENTS_MS

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from protocol import JSONObject, JSONValue

__all__ = ("EventSource", "SessionRegistry")

#: (declaration, id field's wire name) -> the struct attribute holding the id.
_ID_ATTRIBUTES: Final[dict[tuple[type, str], str]] = {}


class EventSource(Protocol):
    """What ``*.waitEvents`` / ``*.pollEvents`` drain: an event queue of one session.

    ``wait`` may raise :class:`trio.ClosedResourceError` when the session is forgotten while
    a caller waits (a disposed terminal); the registry answers that caller ``not_found``.
    """

    def poll(self) -> JSONObject: ...

    async def wait(self, timeout_ms: int) -> JSONObject: ...


S = TypeVar("S")


class SessionRegistry(Mapping[str, S], Generic[S]):
    """The sessions of one kind by id; a read-only mapping plus the registry's own steps.

    Args:
        prefix: Allocated ids are ``f"{prefix}-{n}"``, n counting from 1 (``"lsp"``,
            ``"debug"``, ``"term"``).
        noun: How a session is named in ``not_found`` messages (``"language-server
            session"``, ``"debug session"``, ``"terminal"``).
        id_field: The payload field that names a session (``"sessionId"``,
            ``"terminalID"``).
        events_of: A session's event queue, for ``*.waitEvents`` / ``*.pollEvents``.
    """

    def __init__(
        self,
        prefix: str,
        noun: str,
        id_field: str,
        events_of: Callable[[S], EventSource],
    ) -> None:
        self._prefix = prefix
        self._noun = noun
        self._id_field = id_field
        self._events_of = events_of
        self._sessions: dict[str, S] = {}
        self._counter = itertools.count(1)

    # -- the mapping ---------------------------------------------------------------------

    def __getitem__(self, session_id: str) -> S:
        return self._sessions[session_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sessions)

    def __len__(self) -> int:
        return len(self._sessions)

    # -- ids and membership --------------------------------------------------------------

    def new_id(self) -> str:
        """Allocate the next free id of this kind (one a caller chose is skipped)."""
        session_id = f"{self._prefix}-{next(self._counter)}"
        while session_id in self._sessions:
            session_id = f"{self._prefix}-{next(self._counter)}"
        return session_id

    def add(self, session_id: str, session: S) -> None:
        """Register ``session`` under ``session_id``.

        Raises:
            ValueError: The id is taken (the service checks a caller's id first).
        """
        if session_id in self._sessions:
            raise ValueError(f"session id {session_id!r} is taken")
        self._sessions[session_id] = session

    def remove(self, session_id: str) -> S | None:
        """Forget a session; returns it, or None when it was not registered."""
        return self._sessions.pop(session_id, None)

    # -- lookup --------------------------------------------------------------------------

    def _id_of(self, payload: object) -> str:
        """The id a decoded declaration names: its field whose wire name is the id field."""
        name = _ID_ATTRIBUTES.get((type(payload), self._id_field))
        if name is None:
            name = next(
                f.name
                for f in msgspec.structs.fields(type(payload))  # type: ignore[arg-type]
                if f.encode_name == self._id_field
            )
            _ID_ATTRIBUTES[type(payload), self._id_field] = name
        value = getattr(payload, name)
        assert isinstance(value, str)
        return value

    def not_found(self, session_id: str) -> CoreError:
        """``not_found`` for an unknown id: ``no <noun> '<id>'``, the id cut in both the
        message and ``details.<idField>``."""
        return CoreError(
            "not_found",
            f"no {self._noun} {echo(session_id)}",
            {self._id_field: cut_utf8(session_id, MAX_ECHO_BYTES)},
        )

    def find(self, session_id: str) -> S:
        """The session registered as ``session_id``.

        Raises:
            CoreError: ``not_found`` (:meth:`not_found`).
        """
        session = self._sessions.get(session_id)
        if session is None:
            raise self.not_found(session_id)
        return session

    # -- waitEvents / pollEvents ---------------------------------------------------------

    def event_commands(self, kind: str) -> dict[str, Callable[[JSONObject], Awaitable[JSONValue]]]:
        """``{"<kind>.waitEvents": ..., "<kind>.pollEvents": ...}`` for ``commands()``.

        ``waitEvents {<idField>, timeoutMilliseconds?}`` blocks until events are queued or
        the timeout (0 to the wait bound, absent: 0) passes; ``pollEvents {<idField>}``
        drains without waiting. Both answer ``{events, gap}``; a session forgotten while a
        caller waits answers that caller ``not_found`` ("... was disposed").
        """
        wait_name = f"{kind}.waitEvents"
        poll_name = f"{kind}.pollEvents"

        # Both take their declaration (``<kind>WaitEvents``, ``<kind>Ref``: supervisor/_api),
        # so the id and the bound are the declaration's.
        @takes_declaration
        async def wait_events(payload: Any) -> JSONValue:
            session_id = self._id_of(payload)
            session = self.find(session_id)
            timeout = payload.timeout_milliseconds
            timeout_ms = 0 if timeout is None else min(timeout, MAX_WAIT_EVENTS_MS)
            try:
                return await self._events_of(session).wait(timeout_ms)
            except trio.ClosedResourceError:
                # The session was forgotten while we waited; the wait ended at once.
                raise CoreError(
                    "not_found",
                    f"{self._noun} {cut_utf8(session_id, MAX_ECHO_BYTES)} was disposed",
                    {self._id_field: cut_utf8(session_id, MAX_ECHO_BYTES)},
                ) from None

        @takes_declaration
        async def poll_events(payload: Any) -> JSONValue:
            return self._events_of(self.find(self._id_of(payload))).poll()

        return {wait_name: wait_events, poll_name: poll_events}
