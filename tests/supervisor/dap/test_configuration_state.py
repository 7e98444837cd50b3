"""The DAP configuration as a pure table (issue 24): due once the ``initialize`` response and
the ``initialized`` event both came, in either order; begun and finished once; what it sends
and in which order. No process: tests/supervisor/dap/test_configuration.py has the adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, strategies as st

from protocol import LocalProtocolError
from supervisor._dap._state import (
    ConfigurationInput,
    ConfigurationSequence,
    ConfigurationState,
    DataBreakpoint,
    ExceptionFilter,
    FunctionBreakpoint,
    SetAction,
    SourceBreakpoint,
    configuration_requests,
    normalize_capabilities,
)

if TYPE_CHECKING:
    from protocol import JSONObject

RESPONSE = ConfigurationInput.RECV_INITIALIZE_RESPONSE
INITIALIZED = ConfigurationInput.RECV_INITIALIZED
S = ConfigurationState


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ((), S.AWAITING_BOTH),
        ((RESPONSE,), S.AWAITING_EVENT),
        ((INITIALIZED,), S.AWAITING_RESPONSE),
        ((RESPONSE, INITIALIZED), S.DUE),
        # netcoredbg, hxcpp-debugger: the event before the response.
        ((INITIALIZED, RESPONSE), S.DUE),
        # A repeated event is ignored, before and after the response.
        ((INITIALIZED, INITIALIZED), S.AWAITING_RESPONSE),
        ((INITIALIZED, INITIALIZED, RESPONSE), S.DUE),
        ((RESPONSE, INITIALIZED, INITIALIZED), S.DUE),
        ((RESPONSE, RESPONSE), S.AWAITING_EVENT),
    ],
)
def test_due_only_after_both_in_either_order(
    inputs: tuple[ConfigurationInput, ...], expected: ConfigurationState
) -> None:
    sequence = ConfigurationSequence()
    for event in inputs:
        sequence.handle(event)
    assert sequence.state is expected
    assert sequence.due is (expected is S.DUE)
    assert sequence.set_action is SetAction.RECORD


def due() -> ConfigurationSequence:
    sequence = ConfigurationSequence()
    sequence.handle(INITIALIZED)
    sequence.handle(RESPONSE)
    return sequence


def begin(sequence: ConfigurationSequence, caps: JSONObject | None = None) -> list[str]:
    plan = sequence.begin(
        caps or {"supportsConfigurationDoneRequest": True},
        exception_filters=None,
        function_breakpoints=(),
        data_breakpoints=(),
        source_breakpoints={},
    )
    return [request.command for request in plan]


def state(sequence: ConfigurationSequence) -> ConfigurationState:
    return sequence.state


def action(sequence: ConfigurationSequence) -> SetAction:
    return sequence.set_action


def test_begun_once_and_finished_once() -> None:
    sequence = due()
    assert begin(sequence) == ["configurationDone"]
    assert state(sequence) is S.CONFIGURING
    assert action(sequence) is SetAction.WAIT
    assert not sequence.due
    with pytest.raises(LocalProtocolError):
        begin(sequence)
    sequence.handle(INITIALIZED)  # an event now changes nothing
    sequence.finish()
    assert state(sequence) is S.CONFIGURED
    assert action(sequence) is SetAction.SEND
    with pytest.raises(LocalProtocolError):
        sequence.finish()
    with pytest.raises(LocalProtocolError):
        begin(sequence)
    assert state(sequence) is S.CONFIGURED


def test_a_held_start_holds_the_configuration() -> None:
    sequence = due()
    sequence.start_held = True
    assert not sequence.due
    with pytest.raises(LocalProtocolError):
        begin(sequence)
    assert sequence.state is S.DUE
    sequence.start_held = False
    assert sequence.due
    assert begin(sequence) == ["configurationDone"]


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("event", list(ConfigurationInput))
def test_every_state_input_pair(state: ConfigurationState, event: ConfigurationInput) -> None:
    sequence = ConfigurationSequence()
    sequence._machine.state = state
    local = event in (
        ConfigurationInput.SEND_CONFIGURATION,
        ConfigurationInput.SEND_CONFIGURATION_DONE,
    )
    allowed = {
        (S.AWAITING_BOTH, RESPONSE),
        (S.AWAITING_BOTH, INITIALIZED),
        (S.AWAITING_EVENT, INITIALIZED),
        (S.AWAITING_RESPONSE, RESPONSE),
        (S.DUE, ConfigurationInput.SEND_CONFIGURATION),
        (S.CONFIGURING, ConfigurationInput.SEND_CONFIGURATION_DONE),
    }
    if (state, event) in allowed:
        assert sequence.handle(event)
    elif local:
        with pytest.raises(LocalProtocolError):
            sequence.handle(event)
    else:
        assert not sequence.handle(event)
        assert sequence.state is state


FILTERS: JSONObject = {
    "exceptionBreakpointFilters": [
        {"filter": "raised", "label": "Raised"},
        {"filter": "uncaught", "label": "Uncaught", "default": True},
    ]
}
SOURCES = {
    "/z/last.py": (SourceBreakpoint(4),),
    "/a/first.py": (SourceBreakpoint(2), SourceBreakpoint(3, enabled=False)),
}
FUNCTIONS = (FunctionBreakpoint("main"),)
DATA = (DataBreakpoint("7/x"),)


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        # core-api.md: filters, function breakpoints, sources in path order, done.
        (
            {
                "supportsConfigurationDoneRequest": True,
                "supportsFunctionBreakpoints": True,
                "supportsDataBreakpoints": True,
                **FILTERS,
            },
            [
                "setExceptionBreakpoints",
                "setFunctionBreakpoints",
                "setDataBreakpoints",
                "setBreakpoints /a/first.py",
                "setBreakpoints /z/last.py",
                "configurationDone",
            ],
        ),
        # Only what the adapter supports.
        (
            {"supportsConfigurationDoneRequest": True},
            ["setBreakpoints /a/first.py", "setBreakpoints /z/last.py", "configurationDone"],
        ),
        # Without configurationDone, setExceptionBreakpoints ends the configuration (DAP).
        (
            {**FILTERS, "supportsFunctionBreakpoints": True},
            [
                "setFunctionBreakpoints",
                "setBreakpoints /a/first.py",
                "setBreakpoints /z/last.py",
                "setExceptionBreakpoints",
            ],
        ),
        (
            {},
            ["setBreakpoints /a/first.py", "setBreakpoints /z/last.py", "setExceptionBreakpoints"],
        ),
    ],
)
def test_configuration_requests_and_their_order(caps: JSONObject, expected: list[str]) -> None:
    plan = configuration_requests(
        normalize_capabilities(caps),
        exception_filters=None,
        function_breakpoints=FUNCTIONS,
        data_breakpoints=DATA,
        source_breakpoints=SOURCES,
    )
    described = [
        f"{r.command} {r.arguments['source']['path']}"  # type: ignore[call-overload,index]
        if r.command == "setBreakpoints"
        else r.command
        for r in plan
    ]
    assert described == expected
    by_command = {r.command: r.arguments for r in plan if r.command != "setBreakpoints"}
    if "setExceptionBreakpoints" in by_command:
        # The adapter's default filters (no selection made), or none when it declared none.
        expected_filters = ["uncaught"] if caps.get("exceptionBreakpointFilters") else []
        assert by_command["setExceptionBreakpoints"] == {"filters": expected_filters}
    first = next(r for r in plan if r.command == "setBreakpoints")
    assert first.arguments is not None
    assert first.arguments["breakpoints"] == [{"line": 2}]  # the disabled one is kept back


def test_a_selection_replaces_the_default_filters() -> None:
    caps = normalize_capabilities({"supportsConfigurationDoneRequest": True, **FILTERS})
    plan = configuration_requests(
        caps,
        exception_filters=(ExceptionFilter("raised"), ExceptionFilter("uncaught", enabled=False)),
        function_breakpoints=(),
        data_breakpoints=(),
        source_breakpoints={},
    )
    assert [r.command for r in plan] == ["setExceptionBreakpoints", "configurationDone"]
    assert plan[0].arguments == {"filters": ["raised"]}


# -- the property: both orders, interleaved with launch/attach and sets -------------------

#: The steps of a session, in any order: the adapter's response and event, a
#: ``debug.launch`` accepted, its held request going out (once the response came), a
#: ``debug.setBreakpoints``, and the answer to the configuration's requests.
STEPS = ("response", "initialized", "launch", "launch goes", "set", "answers")
CAPS = normalize_capabilities(
    {"supportsConfigurationDoneRequest": True, "supportsFunctionBreakpoints": True, **FILTERS}
)


@dataclass
class Model:
    """The session's rules over a :class:`ConfigurationSequence` (``_session.py`` applies
    the same ones): the wire is what is queued to the adapter, in order."""

    sequence: ConfigurationSequence = field(default_factory=ConfigurationSequence)
    wire: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    sources: dict[str, tuple[SourceBreakpoint, ...]] = field(default_factory=dict)
    waiting: list[int] = field(default_factory=list)
    launch: str | None = None  # None, "held" or "sent"
    held_when_due: bool = False
    version: int = 0

    def moved(self) -> None:
        if self.sequence.state is S.DUE and self.sequence.start_held:
            self.held_when_due = True
        if not self.sequence.due:
            return
        # The configuration never begins before both, nor while a launch is held.
        assert {"response", "initialized"} <= self.seen
        assert self.launch != "held"
        plan = self.sequence.begin(
            CAPS,
            exception_filters=None,
            function_breakpoints=(),
            data_breakpoints=(),
            source_breakpoints=dict(self.sources),
        )
        for request in plan:
            if request.command == "setBreakpoints":
                assert request.arguments is not None
                line = request.arguments["breakpoints"][0]["line"]  # type: ignore[index,call-overload]
                self.wire.append(f"setBreakpoints {line}")
            else:
                self.wire.append(request.command)

    def step(self, name: str) -> None:
        if name == "response" and "response" not in self.seen:
            self.seen.add(name)
            if self.sequence.handle(RESPONSE):
                self.moved()
        elif name == "initialized":
            self.seen.add(name)
            if self.sequence.handle(INITIALIZED):
                self.moved()
        elif name == "launch" and self.launch is None:
            self.launch = "held"
            self.sequence.start_held = True
        elif name == "launch goes" and self.launch == "held" and "response" in self.seen:
            self.launch = "sent"
            self.wire.append("launch")
            self.sequence.start_held = False
            self.moved()
        elif name == "set":
            self.version += 1
            self.sources["/a.py"] = (SourceBreakpoint(self.version),)
            action = self.sequence.set_action
            if action is SetAction.WAIT:
                self.waiting.append(self.version)
            elif action is SetAction.SEND:
                self.wire.append(f"setBreakpoints {self.version}")
        elif name == "answers" and self.sequence.state is S.CONFIGURING:
            self.sequence.finish()
            self.wire.extend(f"setBreakpoints {v}" for v in self.waiting)
            self.waiting.clear()


@given(st.lists(st.sampled_from(STEPS), max_size=16), st.booleans())
def test_configured_once_after_both_in_any_interleaving(steps: list[str], event: bool) -> None:
    model = Model()
    for name in steps:
        model.step(name)
    # The rest of the session: the response comes, the adapter's event may or may not, the
    # held launch goes, the configuration is answered.
    for name in ("response", *(("initialized",) if event else ()), "launch goes", "answers"):
        model.step(name)
    configured = {"response", "initialized"} <= model.seen
    done = model.wire.count("configurationDone")
    assert done == (1 if configured else 0)
    assert model.wire.count("setExceptionBreakpoints") == done
    if model.launch is not None:
        assert model.wire.count("launch") == 1
    if not configured:
        assert all(w.startswith("launch") for w in model.wire)  # nothing configured
        return
    assert model.sequence.state is S.CONFIGURED
    start = model.wire.index("setExceptionBreakpoints")
    end = model.wire.index("configurationDone")
    # Filters first, then the source set as it was when the configuration began (at most
    # one request for the one path), then configurationDone.
    inside = model.wire[start + 1 : end]
    assert len(inside) <= 1
    assert all(w.startswith("setBreakpoints") for w in inside)
    if model.held_when_due:
        assert model.wire.index("launch") < start
    # Sets after the configuration began go after it, in the order they were made, and the
    # adapter ends with the latest.
    after = [int(w.split()[1]) for w in model.wire[end + 1 :] if w.startswith("setBreakpoints")]
    assert after == sorted(after)
    sent = [int(w.split()[1]) for w in model.wire if w.startswith("setBreakpoints")]
    if model.version:
        assert sent
        assert sent[-1] == model.version
