"""The pure part of debug sessions (issue 4): state table, breakpoint sets, capabilities."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, strategies as st

from protocol import CoreError, LocalProtocolError
from supervisor._api import validate_payload
from supervisor._dap._state import (
    CAPABILITY_FLAGS,
    DebugInput,
    DebugLifecycle,
    DebugState,
    ExceptionFilter,
    check_execute,
    data_breakpoints_arguments,
    default_exception_filters,
    exception_breakpoints_arguments,
    function_breakpoints_arguments,
    normalize_capabilities,
    normalize_data_breakpoints as _data,
    normalize_exception_filters as _filters,
    normalize_function_breakpoints as _functions,
    normalize_result,
    normalize_source_breakpoints as _sources,
    source_breakpoints_arguments,
)

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue


# The normalizers take the decoded entries, as the handlers pass them: these decode JSON
# through the commands' declarations first, as the Core does (bad entries are refused there).


def _decoded(command: str, field: str, items: object, **extra: object) -> Any:
    payload: Any = {"sessionId": "s", **extra, field: items}
    return getattr(validate_payload(command, payload), field)


def normalize_source_breakpoints(items: object) -> Any:
    return _sources(_decoded("debug.setBreakpoints", "breakpoints", items, path="/a.py"))


def normalize_function_breakpoints(items: object) -> Any:
    return _functions(_decoded("debug.setFunctionBreakpoints", "breakpoints", items))


def normalize_exception_filters(items: object) -> Any:
    return _filters(_decoded("debug.setExceptionBreakpoints", "filters", items))


def normalize_data_breakpoints(items: object) -> Any:
    return _data(_decoded("debug.setDataBreakpoints", "breakpoints", items))


def state_of(lifecycle: DebugLifecycle) -> str:
    return lifecycle.state.value


def at(state: DebugState, *, kind: str | None = None, thread: int | None = None) -> DebugLifecycle:
    lifecycle = DebugLifecycle()
    lifecycle.state = state
    lifecycle.request_kind = kind
    lifecycle.selected_thread = thread
    return lifecycle


def test_launch_flow_through_the_table() -> None:
    lc = DebugLifecycle()
    assert state_of(lc) == "initializing"
    assert lc.handle(DebugInput.RECV_INITIALIZE_RESPONSE)
    lc.handle(DebugInput.SEND_START)
    assert state_of(lc) == "starting"
    # debugpy may stop before it answers launch; the answer keeps the session paused.
    lc.handle(DebugInput.RECV_STOPPED)
    lc.handle(DebugInput.RECV_START_RESPONSE)
    assert state_of(lc) == "paused"
    lc.handle(DebugInput.RECV_CONTINUED)
    assert state_of(lc) == "running"
    lc.handle(DebugInput.SEND_DISCONNECT)
    assert state_of(lc) == "terminating"
    assert not lc.handle(DebugInput.RECV_STOPPED)  # ignored while stopping
    lc.handle(DebugInput.RECV_ENDED)
    assert state_of(lc) == "terminated"


def test_refused_launch_returns_to_ready() -> None:
    lc = at(DebugState.STARTING)
    lc.handle(DebugInput.RECV_START_FAILED)
    assert lc.state is DebugState.READY


def test_local_input_not_allowed_poisons() -> None:
    lc = at(DebugState.TERMINATED)
    with pytest.raises(LocalProtocolError):
        lc.handle(DebugInput.SEND_START)
    assert lc.state is DebugState.ERROR


@given(st.sampled_from(DebugState), st.sampled_from(DebugInput))
def test_every_state_input_pair(state: DebugState, event: DebugInput) -> None:
    lc = at(state)
    if lc.can(event):
        lc.handle(event)
        assert (lc.state is DebugState.ERROR) == (state is DebugState.ERROR)
    elif event in (DebugInput.SEND_START, DebugInput.SEND_DISCONNECT):
        with pytest.raises(LocalProtocolError):
            lc.handle(event)
        assert lc.state is DebugState.ERROR
    else:
        assert not lc.handle(event)
        assert lc.state is state
    # Stopping is reachable from every live state, and the end from every state but ERROR.
    if state in (
        DebugState.INITIALIZING,
        DebugState.READY,
        DebugState.STARTING,
        DebugState.RUNNING,
        DebugState.PAUSED,
    ):
        assert at(state).can(DebugInput.SEND_DISCONNECT)
    assert at(state).can(DebugInput.RECV_ENDED)


@pytest.mark.parametrize(("kind", "expected"), [("launch", True), ("attach", False), (None, False)])
def test_terminate_debuggee_from_request_kind(kind: str | None, expected: bool) -> None:
    assert at(DebugState.RUNNING, kind=kind).terminate_debuggee is expected


def test_source_breakpoints_sorted_deduplicated_disabled_kept() -> None:
    bps = normalize_source_breakpoints(
        [
            {"line": 10},
            {"line": 3, "condition": "  x > 1 "},
            {"line": 10, "column": 4, "enabled": False},
            {"line": 3, "hitCondition": "2", "logMessage": ""},
            {"line": 1, "logMessage": "hi {x}"},
        ]
    )
    assert [bp.to_wire() for bp in bps] == [
        {"line": 1, "enabled": True, "logMessage": "hi {x}"},
        {"line": 3, "enabled": True, "hitCondition": "2"},
        {"line": 10, "enabled": True},
        {"line": 10, "enabled": False, "column": 4},
    ]
    caps: JSONObject = {"supportsHitConditionalBreakpoints": True}
    assert source_breakpoints_arguments("/a.py", bps, caps) == {
        "source": {"path": "/a.py"},
        "breakpoints": [{"line": 1}, {"line": 3, "hitCondition": "2"}, {"line": 10}],
        "sourceModified": False,
    }


@pytest.mark.parametrize(
    "items",
    [
        "x",
        [1],
        [{"line": 0}],
        [{"line": True}],
        [{"line": 1, "column": 0}],
        [{"line": 1, "enabled": "yes"}],
        [{"line": 1, "condition": 3}],
        [{"line": 1, "extra": 1}],
    ],
)
def test_source_breakpoints_invalid(items: object) -> None:
    with pytest.raises(CoreError) as info:
        normalize_source_breakpoints(items)
    assert info.value.code == "invalid_request"


@given(
    st.lists(
        st.fixed_dictionaries(
            {"line": st.integers(1, 20)},
            optional={"column": st.integers(1, 3), "enabled": st.booleans()},
        ),
        max_size=12,
    )
)
def test_source_breakpoints_normalization_is_idempotent(items: list[dict[str, int]]) -> None:
    once = normalize_source_breakpoints(list(items))
    again = normalize_source_breakpoints([bp.to_wire() for bp in once])
    assert once == again
    keys = [(bp.line, bp.column or 0) for bp in once]
    assert keys == sorted(set(keys))


def test_function_breakpoints_and_capabilities() -> None:
    bps = normalize_function_breakpoints(
        [{"name": " b "}, {"name": "a", "condition": "x"}, {"name": "b", "enabled": False}]
    )
    assert [bp.to_wire() for bp in bps] == [
        {"name": "a", "enabled": True, "condition": "x"},
        {"name": "b", "enabled": False},
    ]
    assert function_breakpoints_arguments(bps, {}) == {"breakpoints": [{"name": "a"}]}
    with pytest.raises(CoreError):
        normalize_function_breakpoints([{"name": "  "}])


def test_exception_filters_defaults_and_options() -> None:
    caps = normalize_capabilities(
        {
            "exceptionBreakpointFilters": [
                {"filter": "raised", "label": "Raised"},
                {"filter": "uncaught", "label": "Uncaught", "default": True},
                {"label": "no id"},
            ]
        }
    )
    assert default_exception_filters(caps) == (ExceptionFilter("uncaught"),)
    filters = normalize_exception_filters(
        [
            {"filterId": "uncaught"},
            {"filterId": "raised", "condition": "E"},
            {"filterId": "x", "enabled": False},
        ]
    )
    assert [f.filter_id for f in filters] == ["raised", "uncaught", "x"]
    assert exception_breakpoints_arguments(filters, caps) == {"filters": ["raised", "uncaught"]}
    caps["supportsExceptionFilterOptions"] = True
    assert exception_breakpoints_arguments(filters, caps) == {
        "filters": ["uncaught"],
        "filterOptions": [{"filterId": "raised", "condition": "E"}],
    }


def test_capabilities_are_all_booleans() -> None:
    caps = normalize_capabilities({"supportsCancelRequest": True, "supportsStepBack": "yes"})
    assert all(isinstance(caps[name], bool) for name in CAPABILITY_FLAGS)
    assert caps["supportsCancelRequest"] is True
    assert caps["supportsStepBack"] is False
    assert normalize_capabilities(None)["exceptionBreakpointFilters"] == []


def test_execute_rules() -> None:
    caps = normalize_capabilities({"supportsTerminateRequest": True})
    paused = at(DebugState.PAUSED, thread=7)
    assert check_execute(paused, caps, "next", None, False).arguments == {"threadId": 7}
    assert check_execute(paused, caps, "continue", 3, False).arguments == {"threadId": 3}
    plan = check_execute(paused, caps, "terminate", 3, False)
    assert (plan.command, plan.arguments) == ("terminate", {})  # never a stale thread
    for command, lifecycle, code in (
        ("next", at(DebugState.RUNNING, thread=7), "invalid_request"),
        ("stepIn", at(DebugState.PAUSED), "invalid_request"),  # no thread selected
        ("pause", paused, "invalid_request"),
        ("restart", paused, "not_supported"),
        ("jump", paused, "invalid_request"),
    ):
        with pytest.raises(CoreError) as info:
            check_execute(lifecycle, caps, command, None, False)
        assert info.value.code == code
    with pytest.raises(CoreError) as info:
        check_execute(paused, caps, "next", None, True)
    assert info.value.code == "not_supported"


def test_inspect_results_never_negative() -> None:
    result = normalize_result(
        "variables",
        {
            "variables": [
                {"name": "x", "value": "1", "variablesReference": -1, "namedVariables": -4},
                "junk",
            ]
        },
    )
    assert result == {
        "variables": [
            {
                "name": "x",
                "value": "1",
                "type": None,
                "evaluateName": None,
                "variablesReference": 0,
                "namedVariables": 0,
                "indexedVariables": 0,
            }
        ]
    }
    evaluated = normalize_result("evaluate", {"result": "3", "indexedVariables": 2})
    assert evaluated["indexedVariables"] == 2
    assert normalize_result("stackTrace", {"stackFrames": []}) == {
        "stackFrames": [],
        "totalFrames": 0,
    }


@given(st.sampled_from(DebugState))
def test_an_internal_failure_ends_every_state_but_the_ended_ones(state: DebugState) -> None:
    lc = at(state)
    changed = lc.handle(DebugInput.FAILED_INTERNAL)
    if state in (DebugState.TERMINATED, DebugState.ERROR):
        # Already over: a late failure changes nothing.
        assert not changed
        assert lc.state is state
    else:
        assert lc.state is DebugState.FAILED
        assert not lc.live


# -- issue 16: targets, step back, data breakpoints, normalizations --------------------------


def test_execute_targets_and_step_back_are_capability_gated() -> None:
    paused = at(DebugState.PAUSED, kind="launch", thread=3)
    caps: JSONObject = {"supportsGotoTargetsRequest": True, "supportsStepInTargetsRequest": True}
    plan = check_execute(paused, caps, "goto", None, False, 7)
    assert (plan.command, plan.arguments) == ("goto", {"threadId": 3, "targetId": 7})
    plan = check_execute(paused, caps, "stepIn", 4, False, 9)
    assert plan.arguments == {"threadId": 4, "targetId": 9}
    for command, target, code in (
        ("goto", None, "invalid_request"),  # goto needs a target
        ("next", 1, "invalid_request"),  # only goto and stepIn take one
        ("stepBack", None, "not_supported"),
    ):
        with pytest.raises(CoreError) as info:
            check_execute(paused, caps, command, None, False, target)
        assert info.value.code == code, command
    with pytest.raises(CoreError) as info:
        check_execute(paused, {}, "stepIn", None, False, 1)
    assert info.value.code == "not_supported"
    with pytest.raises(CoreError) as info:
        check_execute(paused, {}, "goto", None, False, 1)
    assert info.value.code == "not_supported"
    plan = check_execute(paused, {"supportsStepBack": True}, "stepBack", None, False)
    assert plan.arguments == {"threadId": 3}
    with pytest.raises(CoreError):
        check_execute(at(DebugState.RUNNING), {"supportsStepBack": True}, "stepBack", 1, False)


def test_data_breakpoints_sorted_deduplicated_disabled_kept() -> None:
    items: list[JSONValue] = [
        {"dataId": "b", "accessType": "write", "condition": " x ", "hitCondition": "2"},
        {"dataId": "a", "enabled": False},
        {"dataId": "b", "accessType": "read"},
    ]
    bps = normalize_data_breakpoints(items)
    assert [bp.to_wire() for bp in bps] == [
        {"dataId": "a", "enabled": False},
        {"dataId": "b", "enabled": True, "accessType": "read"},
    ]
    bps = normalize_data_breakpoints([{"dataId": "d", "condition": "x", "hitCondition": "3"}])
    assert data_breakpoints_arguments(bps, {}) == {"breakpoints": [{"dataId": "d"}]}
    full: JSONObject = {
        "supportsConditionalBreakpoints": True,
        "supportsHitConditionalBreakpoints": True,
    }
    assert data_breakpoints_arguments(bps, full) == {
        "breakpoints": [{"dataId": "d", "condition": "x", "hitCondition": "3"}]
    }
    bad_sets: list[JSONValue] = [
        "x",
        [{"dataId": ""}],
        [{"dataId": "a", "accessType": "exec"}],
        [{"id": "a"}],
    ]
    for bad in bad_sets:
        with pytest.raises(CoreError):
            normalize_data_breakpoints(bad)


def test_exception_details_and_filtered_frames_normalized() -> None:
    body: JSONObject = {
        "exceptionId": "E",
        "breakMode": "sometimes",
        "details": {
            "message": "outer",
            "typeName": 3,
            "innerException": [{"message": "inner", "innerException": "no"}, "junk"],
        },
    }
    info = normalize_result("exceptionInfo", body)
    assert info["breakMode"] == "never"  # not a DAP break mode
    assert info["details"] == {
        "message": "outer",
        "typeName": None,
        "fullTypeName": None,
        "evaluateName": None,
        "stackTrace": None,
        "innerException": [
            {
                "message": "inner",
                "typeName": None,
                "fullTypeName": None,
                "evaluateName": None,
                "stackTrace": None,
                "innerException": [],
            }
        ],
    }
    deep: JSONObject = {"message": "0"}
    for level in range(1, 20):
        deep = {"message": str(level), "innerException": [deep]}
    cut: JSONValue = normalize_result("exceptionInfo", {"details": deep})["details"]
    depth = 0
    while isinstance(cut, dict) and cut["innerException"]:
        inner = cut["innerException"]
        assert isinstance(inner, list)
        cut = inner[0]
        depth += 1
    assert depth == 8
    assert isinstance(cut, dict)
    assert cut["innerExceptionCut"] is True
    frames: Any = normalize_result(
        "stackTrace",
        {
            "stackFrames": [
                {"id": 1, "name": "mine"},
                {"id": 2, "name": "lib", "presentationHint": "subtle"},
                {
                    "id": 3,
                    "name": "dep",
                    "source": {"path": "/x", "presentationHint": "deemphasize"},
                },
            ]
        },
    )["stackFrames"]
    assert [f["isFiltered"] for f in frames] == [False, True, True]
    targets = normalize_result("gotoTargets", {"targets": [{"id": 1, "label": "L", "line": 3}, {}]})
    assert targets == {
        "targets": [
            {"id": 1, "label": "L", "line": 3, "column": None, "endLine": None, "endColumn": None}
        ]
    }
