"""ServerLifecycle: the (state, input) table, request gating, notification dropping, exit codes."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from protocol import (
    ErrorCode,
    LifecycleInput as I,
    LifecycleState as S,
    LocalProtocolError,
    ServerLifecycle,
)

#: The oracle, written from LSP 3.17 "Lifecycle Messages" independently of the module's table.
EXPECTED: dict[tuple[S, I], S] = {
    (S.UNINITIALIZED, I.RECV_INITIALIZE): S.INITIALIZING,
    (S.UNINITIALIZED, I.RECV_EXIT): S.EXITED,
    (S.INITIALIZING, I.SEND_INITIALIZE_RESULT): S.RUNNING,
    (S.INITIALIZING, I.SEND_INITIALIZE_ERROR): S.UNINITIALIZED,
    (S.INITIALIZING, I.RECV_EXIT): S.EXITED,
    (S.RUNNING, I.RECV_SHUTDOWN): S.SHUTTING_DOWN,
    (S.RUNNING, I.RECV_EXIT): S.EXITED,
    (S.SHUTTING_DOWN, I.RECV_EXIT): S.EXITED,
}

#: A legal path from a fresh machine to each state.
PATHS: dict[S, list[I]] = {
    S.UNINITIALIZED: [],
    S.INITIALIZING: [I.RECV_INITIALIZE],
    S.RUNNING: [I.RECV_INITIALIZE, I.SEND_INITIALIZE_RESULT],
    S.SHUTTING_DOWN: [I.RECV_INITIALIZE, I.SEND_INITIALIZE_RESULT, I.RECV_SHUTDOWN],
    S.EXITED: [I.RECV_EXIT],
    S.ERROR: [I.RECV_SHUTDOWN],
}


def machine_in(state: S) -> ServerLifecycle:
    machine = ServerLifecycle()
    for step in PATHS[state]:
        try:
            machine.process(step)
        except LocalProtocolError:
            assert state is S.ERROR
    assert machine.state is state
    return machine


def assert_poisoned(machine: ServerLifecycle) -> None:
    assert machine.state is S.ERROR
    for event in I:
        with pytest.raises(LocalProtocolError):
            machine.process(event)
    with pytest.raises(LocalProtocolError):
        machine.check_request("initialize")
    with pytest.raises(LocalProtocolError):
        machine.should_drop_notification("exit")
    assert machine.state is S.ERROR


@given(st.sampled_from(S), st.sampled_from(I))
def test_every_state_input_pair(state: S, event: I) -> None:
    machine = machine_in(state)
    expected = EXPECTED.get((state, event))
    if expected is None:
        message = "is in ERROR" if state is S.ERROR else "illegal lifecycle step"
        with pytest.raises(LocalProtocolError, match=message):
            machine.process(event)
        assert_poisoned(machine)
    else:
        assert machine.process(event) is expected
        assert machine.state is expected


@given(st.lists(st.sampled_from(I), max_size=12))
def test_random_sequences_follow_the_model(events: list[I]) -> None:
    machine = ServerLifecycle()
    state = S.UNINITIALIZED
    exit_code: int | None = None
    for event in events:
        expected = EXPECTED.get((state, event))
        if expected is None:
            with pytest.raises(LocalProtocolError):
                machine.process(event)
            state = S.ERROR
            break
        if expected is S.EXITED:
            exit_code = 0 if state is S.SHUTTING_DOWN else 1
        machine.process(event)
        state = expected
        assert machine.state is state
    assert machine.state is state
    assert machine.exit_code == exit_code


@pytest.mark.parametrize(
    ("state", "initialize", "shutdown", "other"),
    [
        (S.UNINITIALIZED, None, ErrorCode.SERVER_NOT_INITIALIZED, ErrorCode.SERVER_NOT_INITIALIZED),
        (S.INITIALIZING, ErrorCode.INVALID_REQUEST, ErrorCode.SERVER_NOT_INITIALIZED,
         ErrorCode.SERVER_NOT_INITIALIZED),
        (S.RUNNING, ErrorCode.INVALID_REQUEST, None, None),
        (S.SHUTTING_DOWN, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
         ErrorCode.INVALID_REQUEST),
        (S.EXITED, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST),
    ],
)  # fmt: skip
def test_check_request(
    state: S, initialize: ErrorCode | None, shutdown: ErrorCode | None, other: ErrorCode | None
) -> None:
    machine = machine_in(state)
    assert machine.check_request("initialize") is initialize
    assert machine.check_request("shutdown") is shutdown
    assert machine.check_request("process.run") is other
    assert machine.state is state  # a query never moves the machine


@pytest.mark.parametrize(
    ("state", "dropped", "kept"),
    [
        (S.UNINITIALIZED, ["initialized", "$/cancelRequest", "textDocument/didOpen"], ["exit"]),
        (S.INITIALIZING, [], ["$/cancelRequest", "initialized", "exit"]),
        (S.RUNNING, [], ["initialized", "$/cancelRequest", "exit"]),
        (S.SHUTTING_DOWN, [], ["$/cancelRequest", "exit"]),
        (S.EXITED, ["exit", "$/cancelRequest"], []),
    ],
)
def test_should_drop_notification(state: S, dropped: list[str], kept: list[str]) -> None:
    machine = machine_in(state)
    for method in dropped:
        assert machine.should_drop_notification(method)
    for method in kept:
        assert not machine.should_drop_notification(method)


def test_clean_session_exits_zero() -> None:
    machine = ServerLifecycle()
    assert machine.exit_code is None
    machine.initialize_received()
    machine.initialize_answered()
    machine.shutdown_received()
    assert machine.check_request("anything") is ErrorCode.INVALID_REQUEST
    assert machine.exit_received() == 0
    assert machine.exit_code == 0
    assert machine.state is S.EXITED


@pytest.mark.parametrize("state", [S.UNINITIALIZED, S.INITIALIZING, S.RUNNING])
def test_exit_without_shutdown_exits_one(state: S) -> None:
    machine = machine_in(state)
    assert machine.exit_received() == 1
    assert machine.exit_code == 1


def test_failed_initialize_can_be_retried() -> None:
    machine = ServerLifecycle()
    machine.initialize_received()
    machine.initialize_failed()
    assert machine.state is S.UNINITIALIZED
    assert machine.check_request("initialize") is None
    machine.initialize_received()
    machine.initialize_answered()
    assert machine.check_request("process.run") is None


def test_illegal_step_poisons() -> None:
    machine = ServerLifecycle()
    with pytest.raises(LocalProtocolError) as info:
        machine.shutdown_received()
    assert info.value.error_code is ErrorCode.INVALID_REQUEST
    assert_poisoned(machine)
