"""The shared payload readers: what may reach the OS, bounded integers, finite numbers."""

from __future__ import annotations

import decimal
import math
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, strategies as st

from protocol import (
    MAX_ECHO_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_MILLISECONDS,
    CoreError,
    _json as protocol_json,
    _payload,
    argv_item_problem,
    check_request_values,
    cut_utf8,
    echo,
    env_item_problem,
    json_type,
    path_problem,
    read_argv,
    read_env,
    read_int,
    read_milliseconds,
    read_path,
    read_text,
    text_problem,
)

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue


def _refused(call: object, field: str) -> CoreError:
    assert callable(call)
    with pytest.raises(CoreError) as info:
        call()
    assert info.value.code == "invalid_request"
    assert info.value.details is not None
    assert info.value.details["field"] == field
    return info.value


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("a\0b", "NUL"), ("\ud800", "lone surrogate"), ("x\udcff", "lone surrogate")],
)
def test_text_for_the_os_has_no_nul_and_no_lone_surrogate(text: str, fragment: str) -> None:
    problem = text_problem(text, "argv[1]")
    assert problem is not None
    assert fragment in problem
    assert text_problem("é ok \U0001f600", "x") is None


def test_argv_env_and_path_problems() -> None:
    assert argv_item_problem(0, "") == "argv[0] (the program) must not be empty"
    assert argv_item_problem(1, "") is None
    assert argv_item_problem(2, 3) == "argv[2] must be a string, not a number"
    assert argv_item_problem(1, "\ud800") is not None
    assert env_item_problem("A", None) is None
    for key in ("", "A=B", "a\0", "\ud800"):
        assert "invalid variable name" in (env_item_problem(key, "x") or "")
    assert "must be a string or null" in (env_item_problem("A", 1) or "")
    assert env_item_problem("A", "\ud800") is not None
    assert path_problem("", "cwd") == "cwd must not be empty"
    assert path_problem("/tmp", "cwd") is None


def test_wire_readers_name_the_field() -> None:
    assert read_argv({"argv": ["a", "b"]}) == ["a", "b"]
    _refused(lambda: read_argv({"argv": []}), "argv")
    _refused(lambda: read_argv({"argv": ["a", "\0"]}), "argv")
    _refused(
        lambda: read_argv({"arguments": ["a", "b", "c"]}, "arguments", max_items=2), "arguments"
    )
    assert read_env({"env": {"A": "1", "B": None}}) == {"A": "1", "B": None}
    assert read_env({}) is None
    _refused(lambda: read_env({"env": {"A": "\ud800"}}), "env")
    _refused(lambda: read_env({"env": ["A=1"]}), "env")
    assert read_path({"cwd": "/x"}, "cwd") == "/x"
    assert read_path({}, "cwd") is None
    _refused(lambda: read_path({}, "cwd", required=True), "cwd")
    _refused(lambda: read_path({"cwd": "/x\0"}, "cwd"), "cwd")
    assert read_text({"stdin": "a\0b"}, "stdin", allow_nul=True) == "a\0b"
    _refused(lambda: read_text({"stdin": "a\0b"}, "stdin"), "stdin")
    _refused(lambda: read_text({"stdin": "\ud800"}, "stdin", allow_nul=True), "stdin")


@pytest.mark.parametrize("value", [True, 1.5, "1", -1, 0, 101, 10**30])
def test_integers_are_bounded(value: JSONValue) -> None:
    _refused(lambda: read_int({"n": value}, "n", minimum=1, maximum=100), "n")


def test_milliseconds() -> None:
    assert read_milliseconds({"timeoutMilliseconds": 0}) is None
    assert read_milliseconds({}) is None
    assert read_milliseconds({"timeoutMilliseconds": MAX_MILLISECONDS}) == MAX_MILLISECONDS
    error = _refused(
        lambda: read_milliseconds({"timeoutMilliseconds": MAX_MILLISECONDS + 1}),
        "timeoutMilliseconds",
    )
    assert str(MAX_MILLISECONDS) in error.message
    _refused(lambda: read_milliseconds({"t": 10**400}, "t"), "t")
    _refused(lambda: read_milliseconds({"t": 700}, "t", maximum=600), "t")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"initializationOptions": {"a": [1, math.inf]}}, "initializationOptions.a[1]"),
        ({"x": -math.inf}, "x"),
        ({"argv": ["ok", "\ud800"]}, "argv[1]"),
        ({"env": {"\ud800": "x"}}, "env"),
        ({"n" * 1000: {"a": math.nan}}, ("n" * MAX_ECHO_BYTES) + "..."),
    ],
)
def test_request_values_are_finite_and_valid_unicode(payload: JSONObject, field: str) -> None:
    error = _refused(lambda: check_request_values(payload), field)
    assert len(error.message.encode()) <= MAX_MESSAGE_BYTES


@pytest.mark.parametrize(
    ("payload", "field", "words"),
    [
        ({"params": {"s": {1}}}, "params.s", "not set"),
        ({"params": [b"x"]}, "params[0]", "not bytes"),
        ({"p": {"d": decimal.Decimal("1.5")}}, "p.d", "not Decimal"),
        ({"p": object()}, "p", "not object"),
        ({"p": {1: "x"}}, "p", "must be a string, not 1"),
        ({None: 1}, "payload", "a key in payload must be a string, not None"),
    ],
)
def test_request_values_are_json(payload: object, field: str, words: str) -> None:
    """What a Python caller can pass and JSON can not carry is refused up front, named by
    its path (it failed inside the request, or was written in another form by chance)."""
    error = _refused(lambda: check_request_values(payload), field)  # type: ignore[arg-type]
    assert words in error.message


def test_request_values_nest_at_most_the_depth_bound() -> None:
    """Nesting past 512 levels is refused up front, as a peer's reader (ours) refuses it; a
    tuple is an array."""
    assert _payload._MAX_DEPTH == protocol_json.MAX_DEPTH
    value: JSONValue = 1
    for _ in range(protocol_json.MAX_DEPTH - 1):
        value = [value]
    check_request_values({"ok": value})  # 512 levels with the payload's own object
    with pytest.raises(CoreError) as info:
        check_request_values({"deep": [value]})
    assert info.value.code == "invalid_request"
    assert "nests deeper than 512 levels" in info.value.message
    assert info.value.details is not None
    assert str(info.value.details["field"]).startswith("deep[0][0]")
    check_request_values({"t": (1, ("a", {"k": None}))})  # type: ignore[dict-item]


def test_deep_request_values_do_not_recurse() -> None:
    value: JSONValue = math.inf
    for _ in range(100_000):
        value = [value]
    with pytest.raises(CoreError):
        check_request_values({"deep": value})
    check_request_values({"fine": [1, 2.5, "é", {"k": None, "b": True}]})


@given(st.text(), st.integers(0, 2000))
def test_cut_utf8_is_bounded_and_encodes(text: str, limit: int) -> None:
    cut = cut_utf8(text, limit)
    assert len(cut.encode("utf-8")) <= limit


def test_echo_and_json_type() -> None:
    assert echo("abc") == "'abc'"
    long = echo("x" * 10_000)
    assert long.endswith("...")
    assert len(long.encode()) <= MAX_ECHO_BYTES + 3
    values: list[object] = [None, True, 1, "s", [], {}]
    assert [json_type(v) for v in values] == [
        "null",
        "a boolean",
        "a number",
        "a string",
        "an array",
        "an object",
    ]


def test_core_error_messages_are_cut() -> None:
    error = CoreError("invalid_request", "é" * 5000)
    assert len(error.message.encode()) <= MAX_MESSAGE_BYTES
