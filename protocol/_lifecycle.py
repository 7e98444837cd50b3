"""The server side of an LSP-style session lifecycle, as a transition table.

Sources: LSP 3.17 "Lifecycle Messages"
(https://microsoft.github.io/language-server-protocol/specifications/lsp/3.17/specification/#lifeCycleMessages)
and the IDE backend protocol (``initialize`` first, -32002 before it;
``shutdown`` waits for requests in flight; ``exit`` ends with 0 after ``shutdown`` and
1 otherwise).

The machine is pure: the serve loop asks :meth:`ServerLifecycle.check_request` and
:meth:`ServerLifecycle.should_drop_notification` before dispatching, and reports what
happened with the event methods. Every step is one lookup in ``_TRANSITIONS``; a
missing ``(state, input)`` key is a bug of the caller, so the machine moves to
``ERROR``, raises :class:`LocalProtocolError`, and stays there (h11 ``_state.py``).

::

    UNINITIALIZED --RECV_INITIALIZE--> INITIALIZING --SEND_INITIALIZE_RESULT--> RUNNING
         ^                                  |
         +------SEND_INITIALIZE_ERROR-------+   (LSP lets the client retry)
    RUNNING --RECV_SHUTDOWN--> SHUTTING_DOWN --RECV_EXIT--> EXITED (exit code 0)
    UNINITIALIZED / INITIALIZING / RUNNING --RECV_EXIT--> EXITED (exit code 1)
"""

from __future__ import annotations

import enum
from typing import Final

from ._codes import ErrorCode
from ._machine import StateMachine

__all__ = ("LifecycleInput", "LifecycleState", "ServerLifecycle")


class LifecycleState(enum.Enum):
    """Where a server session is in its lifecycle."""

    #: No ``initialize`` yet: requests get -32002, notifications but ``exit`` are dropped.
    UNINITIALIZED = "uninitialized"
    #: ``initialize`` was received and is not answered yet.
    INITIALIZING = "initializing"
    #: ``initialize`` was answered: the session serves requests.
    RUNNING = "running"
    #: ``shutdown`` was received: only ``exit`` is expected now.
    SHUTTING_DOWN = "shutting_down"
    #: ``exit`` was received: :attr:`ServerLifecycle.exit_code` is set.
    EXITED = "exited"
    #: An illegal step was attempted; every later call raises.
    ERROR = "error"


class LifecycleInput(enum.Enum):
    """What can happen to a session (``RECV_*`` from the client, ``SEND_*`` by us)."""

    RECV_INITIALIZE = "recv_initialize"
    SEND_INITIALIZE_RESULT = "send_initialize_result"
    SEND_INITIALIZE_ERROR = "send_initialize_error"
    RECV_SHUTDOWN = "recv_shutdown"
    RECV_EXIT = "recv_exit"


_S = LifecycleState
_I = LifecycleInput

_TRANSITIONS: Final[dict[tuple[LifecycleState, LifecycleInput], LifecycleState]] = {
    (_S.UNINITIALIZED, _I.RECV_INITIALIZE): _S.INITIALIZING,
    (_S.UNINITIALIZED, _I.RECV_EXIT): _S.EXITED,
    (_S.INITIALIZING, _I.SEND_INITIALIZE_RESULT): _S.RUNNING,
    (_S.INITIALIZING, _I.SEND_INITIALIZE_ERROR): _S.UNINITIALIZED,
    (_S.INITIALIZING, _I.RECV_EXIT): _S.EXITED,
    (_S.RUNNING, _I.RECV_SHUTDOWN): _S.SHUTTING_DOWN,
    (_S.RUNNING, _I.RECV_EXIT): _S.EXITED,
    (_S.SHUTTING_DOWN, _I.RECV_EXIT): _S.EXITED,
}

_INITIALIZE: Final = "initialize"
_EXIT: Final = "exit"


class ServerLifecycle:
    """The lifecycle of one server session (the side that answers ``initialize``).

    Starts in :attr:`LifecycleState.UNINITIALIZED`.
    """

    def __init__(self) -> None:
        # Every input is a decision of ours (the endpoint admits or refuses first): strict.
        self._machine = StateMachine(
            _TRANSITIONS,
            LifecycleState.UNINITIALIZED,
            error=LifecycleState.ERROR,
            strict=True,
            name="lifecycle",
        )
        self._exit_code: int | None = None

    @property
    def state(self) -> LifecycleState:
        """The current state."""
        return self._machine.state

    @property
    def exit_code(self) -> int | None:
        """The process exit status once ``exit`` was received: 0 if it came after
        ``shutdown``, 1 otherwise; ``None`` before."""
        return self._exit_code

    def _check_poisoned(self) -> None:
        self._machine.check_poisoned()

    def check_request(self, method: str) -> ErrorCode | None:
        """How to answer an incoming request, without changing state.

        Args:
            method: The request's method.

        Returns:
            ``None`` when the request may be served, else the error to answer with:
            ``SERVER_NOT_INITIALIZED`` (-32002) for any request but ``initialize``
            before ``initialize`` was answered; ``INVALID_REQUEST`` for a second
            ``initialize`` and for every request after ``shutdown``.

        Raises:
            LocalProtocolError: The machine is in ``ERROR``.
        """
        self._check_poisoned()
        state = self._machine.state
        if state is LifecycleState.UNINITIALIZED:
            return None if method == _INITIALIZE else ErrorCode.SERVER_NOT_INITIALIZED
        if method == _INITIALIZE:
            return ErrorCode.INVALID_REQUEST
        if state is LifecycleState.INITIALIZING:
            return ErrorCode.SERVER_NOT_INITIALIZED
        if state is LifecycleState.RUNNING:
            return None
        return ErrorCode.INVALID_REQUEST

    def should_drop_notification(self, method: str) -> bool:
        """Whether an incoming notification must be ignored, without changing state.

        Before ``initialize`` every notification but ``exit`` is dropped (LSP 3.17);
        after ``exit`` everything is. In between nothing is, so ``$/cancelRequest``
        still reaches ``initialize`` and the requests ``shutdown`` waits for.

        Args:
            method: The notification's method.

        Raises:
            LocalProtocolError: The machine is in ``ERROR``.
        """
        self._check_poisoned()
        if self._machine.state is LifecycleState.UNINITIALIZED:
            return method != _EXIT
        return self._machine.state is LifecycleState.EXITED

    def process(self, event: LifecycleInput) -> LifecycleState:
        """Apply one input.

        Args:
            event: What happened.

        Returns:
            The new state.

        Raises:
            LocalProtocolError: ``(state, event)`` is not a legal step; the state becomes
                ``ERROR`` and stays there.
        """
        before = self._machine.state
        self._machine.process(event)
        if self._machine.state is LifecycleState.EXITED:
            self._exit_code = 0 if before is LifecycleState.SHUTTING_DOWN else 1
        return self._machine.state

    def initialize_received(self) -> None:
        """An ``initialize`` request was accepted (after :meth:`check_request` allowed it).

        Raises:
            LocalProtocolError: Not legal in the current state (see :meth:`process`).
        """
        self.process(LifecycleInput.RECV_INITIALIZE)

    def initialize_answered(self) -> None:
        """The ``initialize`` result was sent; the session is now ``RUNNING``.

        Raises:
            LocalProtocolError: Not legal in the current state (see :meth:`process`).
        """
        self.process(LifecycleInput.SEND_INITIALIZE_RESULT)

    def initialize_failed(self) -> None:
        """``initialize`` was answered with an error; the client may send it again.

        Raises:
            LocalProtocolError: Not legal in the current state (see :meth:`process`).
        """
        self.process(LifecycleInput.SEND_INITIALIZE_ERROR)

    def shutdown_received(self) -> None:
        """A ``shutdown`` request was accepted; later requests are ``INVALID_REQUEST``.

        Raises:
            LocalProtocolError: Not legal in the current state (see :meth:`process`).
        """
        self.process(LifecycleInput.RECV_SHUTDOWN)

    def exit_received(self) -> int:
        """The ``exit`` notification arrived.

        Returns:
            The exit status the server process should end with (:attr:`exit_code`).

        Raises:
            LocalProtocolError: Not legal in the current state (see :meth:`process`).
        """
        self.process(LifecycleInput.RECV_EXIT)
        assert self._exit_code is not None
        return self._exit_code
