"""The Core envelope: parse_envelope, envelope_ok, envelope_error."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pytest

from protocol import (
    CoreError,
    EnvelopeError,
    EnvelopeRequest,
    envelope_error,
    envelope_ok,
    parse_envelope,
)

if TYPE_CHECKING:
    from protocol import JSONObject


def test_full_request() -> None:
    text = json.dumps(
        {
            "id": "r1",
            "operationId": "op-7",
            "timeoutMilliseconds": 30000,
            "command": "process.run",
            "payload": {"argv": ["true"]},
        }
    )
    assert parse_envelope(text) == EnvelopeRequest(
        "r1", "op-7", 30000, "process.run", {"argv": ["true"]}
    )


@pytest.mark.parametrize("form", ["str", "bytes", "dict"])
def test_input_forms(form: str) -> None:
    obj: JSONObject = {"id": 3, "command": "core.ping"}
    data: str | bytes | JSONObject = obj
    if form == "str":
        data = json.dumps(obj)
    elif form == "bytes":
        data = json.dumps(obj).encode()
    assert parse_envelope(data) == EnvelopeRequest(3, "3", None, "core.ping", {})


def test_operation_id_defaults_to_id() -> None:
    assert parse_envelope({"id": "a", "command": "c"}).operation_id == "a"
    request = parse_envelope({"id": 12, "command": "c"})
    assert request.id == 12
    assert request.operation_id == "12"


def test_operation_id_is_generated_when_there_is_no_id() -> None:
    first = parse_envelope({"command": "c"})
    second = parse_envelope({"id": None, "command": "c"})
    assert first.id is None
    assert first.operation_id.startswith("op-")
    assert first.operation_id != second.operation_id


@pytest.mark.parametrize(("value", "expected"), [(None, None), (0, None), (1, 1), (5000, 5000)])
def test_timeout(value: int | None, expected: int | None) -> None:
    obj: JSONObject = {"id": "x", "command": "c", "timeoutMilliseconds": value}
    assert parse_envelope(obj).timeout_ms == expected
    obj.pop("timeoutMilliseconds")
    assert parse_envelope(obj).timeout_ms is None


def test_null_payload_defaults_to_empty_object() -> None:
    assert parse_envelope({"command": "c", "payload": None}).payload == {}


@pytest.mark.parametrize("text", ["[]", "1", "null", '"x"'])
def test_invalid_json(text: str | bytes) -> None:
    with pytest.raises(EnvelopeError) as info:
        parse_envelope(text)
    assert info.value.code == "invalid_request"
    assert info.value.message == "Invalid JSON request"
    assert info.value.request_id is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "message body is not valid JSON"),
        ("{", "message body is not valid JSON"),
        ('{"command": "c"', "message body is not valid JSON"),
        (b"\xff\xfe", "message body is not UTF-8"),
        (
            '{"id": 1, "command": "c", "payload": NaN}',
            "message body is not usable JSON: NaN is not valid JSON",
        ),
    ],
)
def test_unreadable_json_is_refused_with_its_cause(text: str | bytes, message: str) -> None:
    """A request that can not be parsed names why, as ``supervisor serve`` does (the same
    function reads both), with serve's JSON-RPC code: -32700, and no id (none was read)."""
    with pytest.raises(EnvelopeError) as info:
        parse_envelope(text)
    assert info.value.code == "invalid_request"
    assert info.value.message == message
    assert info.value.details == {"jsonrpcCode": -32700}
    assert info.value.request_id is None


@pytest.mark.parametrize(
    ("text", "message", "request_id"),
    [
        (
            '{"id": 7, "command": "c", "payload": {"a": ' + "[" * 600 + "]" * 600 + "}}",
            "the message nests deeper than 512 levels",
            7,
        ),
        (
            '{"id": "", "command": "c", "payload": ' + "[" * 600 + "]" * 600 + "}",
            "the message nests deeper than 512 levels",
            None,
        ),
        (
            '{"id": "r", "command": "c", "payload": {"n": ' + "1" * 5000 + "}}",
            f"a number in the message has more than {sys.get_int_max_str_digits()} digits",
            "r",
        ),
    ],
)
def test_json_that_can_not_be_used_is_refused_under_its_id(
    text: str, message: str, request_id: object
) -> None:
    """JSON read but refused is serve's -32600; the refusal names the request when its id is
    one an envelope may have (not an empty string)."""
    with pytest.raises(EnvelopeError) as info:
        parse_envelope(text)
    assert info.value.code == "invalid_request"
    assert info.value.message == message
    assert info.value.details == {"jsonrpcCode": -32600}
    assert info.value.request_id == request_id


BAD: list[tuple[str, JSONObject, str, object]] = [
    ("bool id", {"id": True, "command": "c"}, "id", None),
    ("float id", {"id": 1.5, "command": "c"}, "id", None),
    ("empty id", {"id": "", "command": "c"}, "id", None),
    ("list id", {"id": [], "command": "c"}, "id", None),
    ("empty operationId", {"id": "a", "operationId": "", "command": "c"}, "operationId", "a"),
    ("numeric operationId", {"id": "a", "operationId": 5, "command": "c"}, "operationId", "a"),
    ("negative timeout", {"id": 1, "command": "c", "timeoutMilliseconds": -1}, "timeout", 1),
    ("float timeout", {"id": 1, "command": "c", "timeoutMilliseconds": 1.5}, "timeout", 1),
    (
        "integral float timeout",
        {"id": 1, "command": "c", "timeoutMilliseconds": 10.0},
        "timeout",
        1,
    ),
    ("bool timeout", {"id": 1, "command": "c", "timeoutMilliseconds": True}, "timeout", 1),
    ("string timeout", {"id": 1, "command": "c", "timeoutMilliseconds": "5"}, "timeout", 1),
    ("missing command", {"id": "a"}, "command", "a"),
    ("empty command", {"id": "a", "command": ""}, "command", "a"),
    ("numeric command", {"id": "a", "command": 3}, "command", "a"),
    ("list payload", {"id": "a", "command": "c", "payload": []}, "payload", "a"),
    ("string payload", {"id": "a", "command": "c", "payload": "x"}, "payload", "a"),
]


@pytest.mark.parametrize(
    ("obj", "field", "request_id"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_invalid_fields(obj: JSONObject, field: str, request_id: object) -> None:
    with pytest.raises(EnvelopeError, match=field) as info:
        parse_envelope(json.dumps(obj))
    assert info.value.code == "invalid_request"
    assert info.value.request_id == request_id
    assert isinstance(info.value.details, dict)
    assert str(info.value.details["field"]).startswith(field)
    response = envelope_error(info.value.request_id, info.value)
    assert response["ok"] is False
    assert response["id"] == request_id


def test_wrong_python_type_is_misuse() -> None:
    with pytest.raises(TypeError):
        parse_envelope(5)  # type: ignore[arg-type]


def test_envelope_ok() -> None:
    assert envelope_ok("r1", {"pong": True}) == {"id": "r1", "ok": True, "data": {"pong": True}}
    assert envelope_ok(None, None) == {"id": None, "ok": True, "data": None}


def test_envelope_error_shapes() -> None:
    assert envelope_error("r1", CoreError("busy", "Too many")) == {
        "id": "r1",
        "ok": False,
        "error": {"code": "busy", "message": "Too many"},
    }
    assert envelope_error(2, CoreError("not_found", "No job", {"jobId": "j"})) == {
        "id": 2,
        "ok": False,
        "error": {"code": "not_found", "message": "No job", "details": {"jobId": "j"}},
    }
    with pytest.raises(TypeError):
        envelope_error(1, ValueError("x"))  # type: ignore[arg-type]


def test_envelope_error_is_a_core_error() -> None:
    with pytest.raises(CoreError):
        parse_envelope("{")
