"""Pure policy of a language-server session: the state table, the restart budget, gates.

Nothing here does I/O, reads a clock or touches Trio: callers pass the time in milliseconds,
so every rule is tested without processes (a state table, after h11's ``_state.py``).

- :class:`LspState` / :class:`LspInput` / :func:`next_state`: the session lifecycle
  as a ``(state, input) -> state`` table. ``stopping`` is reachable from every earlier state (a
  stop may come at any time and is owned by the session) and an exit while stopping is
  ``stopped``, never a crash.
- :class:`RestartBudget`: the restart budget (ours, after VS Code's client): at most
  ``max_crashes`` crashes in a sliding window, a backoff that doubles from 500 ms to 8 s, and a
  start that counts as stable once the handshake has been done for 10 s.
- :func:`params_match` and :class:`ReadinessTracker`: readiness gates
  (the plugin contract "Plugin-owned sessions") and the serviceReady idle/absolute deadlines
  (the Core API contract ``lsp.startServer``): duplicate ``$/progress`` does not refresh the idle
  deadline.
- :class:`RateLimit` and :class:`QueueShare`: bounds on what a session queues as events.
  Structured facts are admitted at most 600 per minute per session (the plugin contract
  "Structured plugin diagnostics"); unclassified stderr lines become ``log`` events only
  within a rate (ours) and while fewer than a share of the event queue are such undrained
  events, so a chatty server never pushes diagnostics or ``requestCompleted`` out of the queue.
"""

from __future__ import annotations

import enum
import json
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from .._session._rate import RateLimit

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = (
    "DEFAULT_BACKOFF_INITIAL_MS",
    "DEFAULT_BACKOFF_MAX_MS",
    "DEFAULT_MAX_CRASHES",
    "DEFAULT_RESTART_WINDOW_MS",
    "DEFAULT_STABLE_AFTER_MS",
    "FACTS_PER_WINDOW",
    "FACT_WINDOW_MS",
    "STDERR_LOG_EVENTS_PER_WINDOW",
    "STDERR_LOG_WINDOW_MS",
    "Gate",
    "LspInput",
    "LspState",
    "QueueShare",
    "RateLimit",
    "ReadinessTracker",
    "RestartBudget",
    "next_state",
    "params_match",
)

#: Restart budget (ours, after VS Code's client): a crash loop must end, not spin.
DEFAULT_MAX_CRASHES: Final = 5
DEFAULT_RESTART_WINDOW_MS: Final = 180_000
DEFAULT_BACKOFF_INITIAL_MS: Final = 500
DEFAULT_BACKOFF_MAX_MS: Final = 8_000
DEFAULT_STABLE_AFTER_MS: Final = 10_000
#: the plugin contract "Structured plugin diagnostics": "Ingress admits at most 600 facts per
#: minute per session"; past that a fact is counted as dropped.
FACTS_PER_WINDOW: Final = 600
FACT_WINDOW_MS: Final = 60_000
#: Ours: unclassified stderr lines queued as ``log`` events per second; the rest only go to
#: the stderr ring (and are counted).
STDERR_LOG_EVENTS_PER_WINDOW: Final = 100
STDERR_LOG_WINDOW_MS: Final = 1_000


class LspState(enum.StrEnum):
    """The states of a language-server session; wire names as values."""

    #: The process is being started.
    STARTING = "starting"
    #: ``initialize`` was sent; or the handshake is done and readiness gates are still closed.
    INITIALIZING = "initializing"
    #: ``initialized`` was sent and every gate has opened.
    READY = "ready"
    #: A stop runs: shutdown, exit, then the tree cleanup.
    STOPPING = "stopping"
    #: Stopped on request; terminal.
    STOPPED = "stopped"
    #: Crashed, failed its handshake or readiness; terminal unless a restart follows.
    FAILED = "failed"


class LspInput(enum.Enum):
    """What happens to a session."""

    SPAWNED = enum.auto()  #: the process runs; ``initialize`` is being sent
    HANDSHAKE_DONE = enum.auto()  #: ``initialized`` sent, every gate open
    STOP = enum.auto()  #: a stop was requested
    STOP_DONE = enum.auto()  #: the stop sequence ended (the process is gone)
    FAILED = enum.auto()  #: crash, handshake failure or readiness timeout
    RESTART = enum.auto()  #: a new generation starts
    #: a contained failure of ours (a bug) ended the session; final, even while stopping
    INTERNAL = enum.auto()


_S = LspState
_I = LspInput
_TRANSITIONS: Final[dict[tuple[LspState, LspInput], LspState]] = {
    (_S.STARTING, _I.SPAWNED): _S.INITIALIZING,
    (_S.INITIALIZING, _I.HANDSHAKE_DONE): _S.READY,
    (_S.STARTING, _I.STOP): _S.STOPPING,
    (_S.INITIALIZING, _I.STOP): _S.STOPPING,
    (_S.READY, _I.STOP): _S.STOPPING,
    # A second stop joins the first.
    (_S.STOPPING, _I.STOP): _S.STOPPING,
    # A stop during a restart's backoff ends the session without starting anything.
    (_S.FAILED, _I.STOP): _S.STOPPED,
    (_S.STOPPED, _I.STOP): _S.STOPPED,
    (_S.STOPPING, _I.STOP_DONE): _S.STOPPED,
    (_S.STARTING, _I.FAILED): _S.FAILED,
    (_S.INITIALIZING, _I.FAILED): _S.FAILED,
    (_S.READY, _I.FAILED): _S.FAILED,
    # Invariant 12: an exit (or anything else) during a stop is not a failure.
    (_S.STOPPING, _I.FAILED): _S.STOPPING,
    (_S.FAILED, _I.RESTART): _S.STARTING,
    # An explicit restart of a running session goes through a stop first.
    (_S.STOPPED, _I.RESTART): _S.STARTING,
    # A failure of ours is not the server's exit: it fails the session from every state it
    # can happen in, a stop included (the stop's ladder still ends the server).
    (_S.STARTING, _I.INTERNAL): _S.FAILED,
    (_S.INITIALIZING, _I.INTERNAL): _S.FAILED,
    (_S.READY, _I.INTERNAL): _S.FAILED,
    (_S.STOPPING, _I.INTERNAL): _S.FAILED,
    (_S.FAILED, _I.INTERNAL): _S.FAILED,
    (_S.STOPPED, _I.INTERNAL): _S.FAILED,
}


def next_state(state: LspState, event: LspInput) -> LspState:
    """Return the state after ``event``.

    Raises:
        RuntimeError: The transition is not in the table (a bug of the caller).
    """
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise RuntimeError(f"no transition from {state.value} on {event.name}") from None


@dataclass
class RestartBudget:
    """Whether, and after how long, a crashed session may restart.

    Args:
        max_crashes: Crashes within ``window_ms`` that spend the budget; the crash that
            reaches this number is not answered with a restart.
        window_ms: The sliding window, in milliseconds.
        backoff_initial_ms: Delay before the first restart, in milliseconds.
        backoff_max_ms: Cap of the doubling delay, in milliseconds.
        stable_after_ms: A start whose handshake has been done this long resets the backoff.
    """

    max_crashes: int = DEFAULT_MAX_CRASHES
    window_ms: int = DEFAULT_RESTART_WINDOW_MS
    backoff_initial_ms: int = DEFAULT_BACKOFF_INITIAL_MS
    backoff_max_ms: int = DEFAULT_BACKOFF_MAX_MS
    stable_after_ms: int = DEFAULT_STABLE_AFTER_MS

    def __post_init__(self) -> None:
        if self.max_crashes < 1 or self.window_ms < 0 or self.backoff_initial_ms < 0:
            raise ValueError("restart budget bounds must be positive")
        self._crashes: deque[float] = deque()
        self._next_backoff_ms = self.backoff_initial_ms
        self._handshake_at_ms: float | None = None

    @property
    def crashes_in_window(self) -> int:
        """Crashes currently counted (as of the last :meth:`record_crash`)."""
        return len(self._crashes)

    def handshake_done(self, now_ms: float) -> None:
        """Note that the current start finished its handshake at ``now_ms``."""
        self._handshake_at_ms = now_ms

    def record_crash(self, now_ms: float) -> int | None:
        """Count a crash at ``now_ms``.

        Returns:
            The delay before the restart in milliseconds, or None when the budget is spent.
        """
        if self._handshake_at_ms is not None and now_ms - self._handshake_at_ms >= (
            self.stable_after_ms
        ):
            # The previous start was stable: the next restart is a fresh one.
            self._next_backoff_ms = self.backoff_initial_ms
        self._handshake_at_ms = None
        while self._crashes and now_ms - self._crashes[0] >= self.window_ms:
            self._crashes.popleft()
        self._crashes.append(now_ms)
        if len(self._crashes) >= self.max_crashes:
            return None
        delay = self._next_backoff_ms
        self._next_backoff_ms = min(max(delay * 2, 1), self.backoff_max_ms)
        return delay

    def reset(self) -> None:
        """Forget every crash and the backoff (an explicit restart)."""
        self._crashes.clear()
        self._next_backoff_ms = self.backoff_initial_ms
        self._handshake_at_ms = None

    def to_wire(self) -> JSONObject:
        """``{maxCrashes, windowMilliseconds, crashesInWindow, nextBackoffMilliseconds}``."""
        return {
            "maxCrashes": self.max_crashes,
            "windowMilliseconds": self.window_ms,
            "crashesInWindow": len(self._crashes),
            "nextBackoffMilliseconds": self._next_backoff_ms,
        }


class QueueShare:
    """How many events of one kind may wait undrained in an :class:`~supervisor.EventQueue`.

    An event queue drains everything at once and drops its oldest events, so the events still
    queued are exactly the last ``queued`` sequence numbers; ours among them are those at or
    above ``next_seq - queued``. Only the queue's ``statistics()`` are needed, no hook in it.

    Args:
        limit: Events of this kind allowed undrained at a time (>= 1).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be positive")
        self.limit = limit
        self._seqs: deque[int] = deque()

    def has_room(self, next_seq: int, queued: int) -> bool:
        """True when one more event fits; ``next_seq``/``queued`` are the queue's statistics."""
        oldest_queued = next_seq - queued
        while self._seqs and self._seqs[0] < oldest_queued:
            self._seqs.popleft()
        return len(self._seqs) < self.limit

    def add(self, seq: int) -> None:
        """Note that an event of this kind was queued with sequence number ``seq``."""
        self._seqs.append(seq)


def params_match(params: JSONValue, match: JSONValue) -> bool:
    """True when ``params`` contains every member of ``match``; nested objects match alike.

    Non-object values must be equal (JSON equality: ``1`` is not ``true``).
    """
    if isinstance(match, dict):
        if not isinstance(params, dict):
            return False
        return all(
            key in params and params_match(params[key], value) for key, value in match.items()
        )
    return type(params) is type(match) and params == match


@dataclass(frozen=True)
class Gate:
    """A readiness gate ``{id, until: "notification", method, match}``."""

    id: str
    method: str
    match: JSONObject

    def opened_by(self, method: str, params: JSONValue) -> bool:
        """True when a server notification ``method(params)`` opens this gate."""
        return method == self.method and params_match(params, self.match)


class ReadinessTracker:
    """Gates still closed, and the serviceReady idle and absolute deadlines.

    Args:
        gates: The session's gates; none means ready at once after ``initialized``.
        now_ms: When the handshake finished, in milliseconds.
        idle_timeout_ms: Longest time without *changed* ``$/progress``, in milliseconds.
        absolute_timeout_ms: Longest time to readiness, in milliseconds.
    """

    def __init__(
        self,
        gates: tuple[Gate, ...],
        now_ms: float,
        idle_timeout_ms: int,
        absolute_timeout_ms: int,
    ) -> None:
        self._closed = {gate.id: gate for gate in gates}
        self._idle_timeout_ms = idle_timeout_ms
        self._absolute_timeout_ms = absolute_timeout_ms
        self._absolute_deadline_ms = now_ms + absolute_timeout_ms
        self._last_change_ms = now_ms
        self._last_progress: dict[str, str] = {}

    @property
    def ready(self) -> bool:
        """True once every gate has opened."""
        return not self._closed

    @property
    def closed_gates(self) -> tuple[str, ...]:
        """Ids of the gates still closed, sorted."""
        return tuple(sorted(self._closed))

    def notification(self, method: str, params: JSONValue, now_ms: float) -> bool:
        """Feed one server notification; return True when it opened a gate."""
        if method == "$/progress" and isinstance(params, dict):
            token = json.dumps(params.get("token"), sort_keys=True)
            value = json.dumps(params.get("value"), sort_keys=True)
            if self._last_progress.get(token) != value:
                self._last_progress[token] = value
                self._last_change_ms = now_ms
        opened = [gid for gid, gate in self._closed.items() if gate.opened_by(method, params)]
        for gid in opened:
            del self._closed[gid]
        return bool(opened)

    def restart_clock(self, now_ms: float) -> None:
        """Count both deadlines from ``now_ms`` (the handshake's end)."""
        self._absolute_deadline_ms = now_ms + self._absolute_timeout_ms
        self._last_change_ms = now_ms

    def deadline_ms(self) -> float:
        """When readiness fails unless something changes, in milliseconds."""
        return min(self._last_change_ms + self._idle_timeout_ms, self._absolute_deadline_ms)

    def expired(self, now_ms: float) -> str | None:
        """``"idle"`` or ``"absolute"`` once a deadline passed, else None."""
        if now_ms >= self._absolute_deadline_ms:
            return "absolute"
        if now_ms >= self._last_change_ms + self._idle_timeout_ms:
            return "idle"
        return None
