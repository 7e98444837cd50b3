"""Pure LSP session policy (issue 3): state table, restart budget, gates, documents.

No processes and no clock: times are passed in milliseconds.
"""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from protocol import CoreError, JSONObject
from supervisor._lsp._documents import DocumentStore, apply_change
from supervisor._lsp._session import configuration_section, describe_exit
from supervisor._lsp._state import (
    FACT_WINDOW_MS,
    FACTS_PER_WINDOW,
    Gate,
    LspInput,
    LspState,
    QueueShare,
    RateLimit,
    ReadinessTracker,
    RestartBudget,
    next_state,
    params_match,
)

S = LspState
In = LspInput


@pytest.mark.parametrize("state", [S.STARTING, S.INITIALIZING, S.READY, S.STOPPING])
def test_stopping_is_reachable_from_every_earlier_state(state: LspState) -> None:
    assert next_state(state, In.STOP) is S.STOPPING


def test_exit_during_stop_is_not_a_failure() -> None:
    assert next_state(S.STOPPING, In.FAILED) is S.STOPPING
    assert next_state(S.STOPPING, In.STOP_DONE) is S.STOPPED


def test_happy_path_and_restart() -> None:
    state = S.STARTING
    for event, expected in [
        (In.SPAWNED, S.INITIALIZING),
        (In.HANDSHAKE_DONE, S.READY),
        (In.FAILED, S.FAILED),
        (In.RESTART, S.STARTING),
    ]:
        state = next_state(state, event)
        assert state is expected


@given(st.sampled_from(LspState), st.sampled_from(LspInput))
def test_table_is_closed_and_terminal_states_only_leave_by_restart(
    state: LspState, event: LspInput
) -> None:
    try:
        after = next_state(state, event)
    except RuntimeError:
        return
    assert isinstance(after, LspState)
    if state is S.STOPPED:
        # Left only by a restart, or by a failure of ours found while it was stopping.
        assert event in (In.STOP, In.RESTART, In.INTERNAL)
    if event is In.INTERNAL:
        assert after is S.FAILED


def test_budget_backoff_doubles_to_the_cap_and_is_spent_at_five() -> None:
    budget = RestartBudget(max_crashes=50)
    delays = [budget.record_crash(t * 100.0) for t in range(7)]
    assert delays == [500, 1000, 2000, 4000, 8000, 8000, 8000]
    default = RestartBudget()
    assert [default.record_crash(t * 1000.0) for t in range(5)] == [500, 1000, 2000, 4000, None]


def test_budget_window_slides() -> None:
    budget = RestartBudget()
    for t in range(4):
        assert budget.record_crash(t * 1000.0) is not None
    # The first crashes leave the 180 s window: the budget has room again.
    assert budget.record_crash(181_500.0) is not None
    assert budget.crashes_in_window == 3  # 2000, 3000 and 181500


def test_budget_stable_start_resets_backoff_and_explicit_reset_forgets() -> None:
    budget = RestartBudget()
    assert budget.record_crash(0.0) == 500
    assert budget.record_crash(1000.0) == 1000
    budget.handshake_done(2000.0)
    assert budget.record_crash(12_000.0) == 500  # stable: handshake + 10 s
    budget.handshake_done(13_000.0)
    assert budget.record_crash(14_000.0) == 1000  # not stable
    budget.reset()
    assert budget.crashes_in_window == 0
    assert budget.record_crash(15_000.0) == 500


def test_params_match_is_nested_containment_with_json_types() -> None:
    assert params_match({"a": 1, "b": {"c": "x", "d": 2}}, {"b": {"c": "x"}})
    assert not params_match({"a": True}, {"a": 1})
    assert not params_match({"a": {"c": "y"}}, {"a": {"c": "x"}})
    assert params_match({"anything": 1}, {})


def test_readiness_gates_and_deadlines() -> None:
    gates = (
        Gate("status", "language/status", {"type": "ServiceReady"}),
        Gate("index", "custom/indexed", {}),
    )
    tracker = ReadinessTracker(gates, 0.0, idle_timeout_ms=45_000, absolute_timeout_ms=600_000)
    assert not tracker.ready
    assert not tracker.notification("language/status", {"type": "Starting"}, 10.0)
    assert tracker.notification("language/status", {"type": "ServiceReady", "x": 1}, 20.0)
    assert tracker.closed_gates == ("index",)
    assert tracker.expired(44_999.0) is None
    assert tracker.expired(45_000.0) == "idle"
    progress: JSONObject = {"token": "t", "value": {"kind": "report", "percentage": 10}}
    tracker.notification("$/progress", progress, 40_000.0)
    assert tracker.deadline_ms() == 85_000.0
    # Duplicate progress does not refresh the idle deadline.
    tracker.notification("$/progress", progress, 80_000.0)
    assert tracker.deadline_ms() == 85_000.0
    assert tracker.notification("custom/indexed", None, 81_000.0) is False  # params not object
    assert tracker.notification("custom/indexed", {}, 81_000.0)
    assert tracker.ready


def test_readiness_absolute_deadline() -> None:
    tracker = ReadinessTracker(
        (Gate("g", "m", {}),), 0.0, idle_timeout_ms=1000, absolute_timeout_ms=2500
    )
    for t in range(1, 3):
        tracker.notification("$/progress", {"token": 1, "value": t}, t * 900.0)
    assert tracker.expired(2500.0) == "absolute"


def test_documents_open_change_and_identical_text() -> None:
    store = DocumentStore()
    plan = store.plan_sync("file:///a.py", "python", "x = 1\n", None, 2)
    assert plan.method == "textDocument/didOpen"
    assert plan.version == 1
    same = store.plan_sync("file:///a.py", "python", "x = 1\n", None, 2)
    assert (same.method, same.version, same.changed) == (None, 1, False)
    full = store.plan_sync("file:///a.py", "python", "x = 2\n", None, 2)
    assert full.method == "textDocument/didChange"
    assert full.params is not None
    assert full.params["contentChanges"] == [{"text": "x = 2\n"}]
    assert full.version == 2
    ranged_change: JSONObject = {
        "range": {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 5}},
        "text": "3",
    }
    ranged = store.plan_sync("file:///a.py", "python", None, [ranged_change], 2)
    assert ranged.params is not None
    assert ranged.params["contentChanges"] == [ranged_change]
    assert ranged.version == 3
    doc = store.get("file:///a.py")
    assert doc is not None
    assert doc.text == "x = 3\n"
    # A full-sync server gets the whole text for a ranged change.
    back: JSONObject = {**ranged_change, "text": "4"}
    full_for_ranged = store.plan_sync("file:///a.py", "python", None, [back], 1)
    assert full_for_ranged.params is not None
    assert full_for_ranged.params["contentChanges"] == [{"text": "x = 4\n"}]


def test_documents_refuse_bad_syncs() -> None:
    store = DocumentStore()
    with pytest.raises(CoreError) as info:
        store.plan_sync("file:///a.py", "python", None, [{"text": "x"}], 2)
    assert info.value.code == "invalid_request"
    with pytest.raises(CoreError):
        store.plan_sync("file:///a.py", "python", "x", [{"text": "x"}], 2)
    with pytest.raises(CoreError) as closing:
        store.close("file:///nope.py")
    assert closing.value.code == "not_found"


def test_diagnostics_kept_only_for_open_documents_and_current_versions() -> None:
    store = DocumentStore()
    store.plan_sync("file:///a.py", "python", "a", None, 2)
    store.plan_sync("file:///a.py", "python", "b", None, 2)  # version 2
    assert store.accept_diagnostics({"uri": "file:///other.py", "diagnostics": [1]}) is None
    assert (
        store.accept_diagnostics({"uri": "file:///a.py", "version": 1, "diagnostics": [1]}) is None
    )
    assert store.accept_diagnostics({"uri": "file:///a.py", "version": 2, "diagnostics": [1]})
    assert store.accept_diagnostics({"uri": "file:///a.py", "diagnostics": [2]})
    cleared = store.clear_diagnostics()
    assert [d.uri for d in cleared] == ["file:///a.py"]


def test_utf16_columns() -> None:
    text = "a😀b\nsecond\n"
    # 😀 is two UTF-16 code units: column 3 is just before "b".
    change: JSONObject = {
        "range": {"start": {"line": 0, "character": 3}, "end": {"line": 0, "character": 4}},
        "text": "X",
    }
    assert apply_change(text, change) == "a😀X\nsecond\n"
    past_end: JSONObject = {
        "range": {"start": {"line": 9, "character": 0}, "end": {"line": 9, "character": 0}},
        "text": "tail",
    }
    assert apply_change(text, past_end) == text + "tail"


def test_configuration_sections_and_exit_detail() -> None:
    config: JSONObject = {"pylsp": {"plugins": {"jedi": {"enabled": True}}}, "flat.key": 3}
    assert configuration_section(config, "pylsp.plugins.jedi") == {"enabled": True}
    assert configuration_section(config, "flat.key") == 3
    assert configuration_section(config, "missing.x") is None
    assert configuration_section(config, None) == config
    # The exit detail is the shared one (signal a number plus signalName); messages say both.
    assert describe_exit(-9) == "signal 9 (SIGKILL)"
    assert describe_exit(3) == "exit code 3"


def test_fact_rate_is_600_per_sliding_minute_and_counts_the_rest() -> None:
    """plugin-contract.md: ingress admits at most 600 facts per minute per session."""
    facts = RateLimit(FACTS_PER_WINDOW, FACT_WINDOW_MS)
    assert (FACTS_PER_WINDOW, FACT_WINDOW_MS) == (600, 60_000)
    assert all(facts.admit(t * 10.0) for t in range(600))  # 600 within 6 s
    assert not facts.admit(6_000.0)
    assert not facts.admit(59_999.0)
    assert facts.to_wire() == {"admitted": 600, "dropped": 2}
    # A minute after the first one, one slot is free again; not two.
    assert facts.admit(60_000.0)
    assert not facts.admit(60_000.0)
    assert facts.admit(60_010.0)
    # Sliding: no burst of twice the limit across a window edge.
    burst = RateLimit(3, 1000)
    assert [burst.admit(t) for t in (999.0, 999.0, 999.0, 1000.0, 1500.0, 1999.0)] == [
        True,
        True,
        True,
        False,
        False,
        True,
    ]
    with pytest.raises(ValueError, match="positive"):
        RateLimit(0, 1000)


@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=200))
def test_rate_limit_never_admits_more_than_limit_in_any_window(gaps: list[int]) -> None:
    limit = RateLimit(4, 100)
    now = 0.0
    admitted: list[float] = []
    for gap in gaps:
        now += gap
        if limit.admit(now):
            admitted.append(now)
    for index, start in enumerate(admitted):
        assert len([t for t in admitted[index:] if t - start < 100]) <= 4
    assert limit.admitted + limit.dropped == len(gaps)


def test_queue_share_counts_only_undrained_events() -> None:
    share = QueueShare(2)
    # Queue state: next_seq 1, nothing queued. Two of ours go in (seq 1 and 2).
    assert share.has_room(1, 0)
    share.add(1)
    assert share.has_room(2, 1)
    share.add(2)
    assert not share.has_room(3, 2)
    # Other events follow (seq 3..5); ours are still queued.
    assert not share.has_room(6, 5)
    # A drain empties the queue: room again.
    assert share.has_room(6, 0)
    share.add(6)
    share.add(7)
    assert not share.has_room(8, 2)
    # The queue dropped its oldest (seq 6): one slot is free.
    assert share.has_room(10, 3)
