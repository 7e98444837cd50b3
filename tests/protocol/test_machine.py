"""The one transition-table engine: legal steps, ignored remote inputs, poisoning local ones,
checked over every (state, input) pair of a table (h2's state-machine tests)."""

from __future__ import annotations

import enum

import pytest
from hypothesis import given, strategies as st

from protocol import LocalProtocolError
from protocol._machine import StateMachine


class S(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"


class I(enum.Enum):  # noqa: E742
    SEND_START = "send_start"
    RECV_EXIT = "recv_exit"
    SEND_STOP = "send_stop"


TABLE = {
    (S.IDLE, I.SEND_START): S.RUNNING,
    (S.RUNNING, I.RECV_EXIT): S.DONE,
    (S.RUNNING, I.SEND_STOP): S.DONE,
    (S.DONE, I.RECV_EXIT): S.DONE,
}
LOCAL = (I.SEND_START, I.SEND_STOP)


def test_legal_steps_move_and_report_a_change() -> None:
    machine = StateMachine(TABLE, S.IDLE, error=S.ERROR, local_inputs=LOCAL)
    seen = []
    for event, changed in [(I.SEND_START, True), (I.RECV_EXIT, True), (I.RECV_EXIT, False)]:
        assert machine.process(event) is changed  # a step to the same state is no change
        seen.append(machine.state)
    assert seen == [S.RUNNING, S.DONE, S.DONE]


def test_a_remote_input_the_table_lacks_is_ignored() -> None:
    machine = StateMachine(TABLE, S.IDLE, error=S.ERROR, local_inputs=LOCAL)
    assert machine.process(I.RECV_EXIT) is False
    assert machine.state is S.IDLE
    assert not machine.poisoned


def test_an_illegal_local_input_poisons_the_machine() -> None:
    machine = StateMachine(TABLE, S.IDLE, error=S.ERROR, local_inputs=LOCAL, name="session")
    with pytest.raises(LocalProtocolError, match="illegal session step SEND_STOP in state IDLE"):
        machine.process(I.SEND_STOP)
    assert machine.poisoned
    assert machine.state is S.ERROR
    with pytest.raises(LocalProtocolError):
        machine.process(I.SEND_START)


def test_strict_makes_every_input_local() -> None:
    machine = StateMachine(TABLE, S.IDLE, error=S.ERROR, strict=True)
    with pytest.raises(LocalProtocolError):
        machine.process(I.RECV_EXIT)
    assert machine.state is S.ERROR


def test_without_an_error_state_an_illegal_step_raises_and_the_state_stays() -> None:
    machine = StateMachine(TABLE, S.IDLE, strict=True)
    with pytest.raises(LocalProtocolError):
        machine.process(I.SEND_STOP)
    assert machine.state is S.IDLE
    assert not machine.poisoned


@given(st.sampled_from(S), st.sampled_from(I))
def test_every_pair_follows_the_table_or_its_rule(state: S, event: I) -> None:
    machine = StateMachine(TABLE, state, error=S.ERROR, local_inputs=LOCAL)
    expected = TABLE.get((state, event))
    assert machine.can(event) is (expected is not None)
    if state is S.ERROR and event in LOCAL:
        with pytest.raises(LocalProtocolError):
            machine.process(event)
    elif expected is not None:
        machine.process(event)
        assert machine.state is expected
    elif event in LOCAL:
        with pytest.raises(LocalProtocolError):
            machine.process(event)
        assert machine.state is S.ERROR
    else:
        assert machine.process(event) is False
        assert machine.state is state
