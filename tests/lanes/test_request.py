"""parse_job_start: strict validation of the wire job.start payload (issue 2 section 6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from lanes import JobKind, JobRequest, parse_job_start
from protocol import CoreError

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

GOOD: JSONObject = {"kind": "build", "root": "/w/p/", "argv": ["make", "-j2"]}


def with_(**changes: JSONValue) -> JSONObject:
    payload = dict(GOOD)
    payload.update(changes)
    return payload


def without(field: str) -> JSONObject:
    return {k: v for k, v in GOOD.items() if k != field}


def test_minimal_payload() -> None:
    request = parse_job_start(GOOD)
    assert request == JobRequest(kind=JobKind.BUILD, root="/w/p", argv=("make", "-j2"))
    assert request.root == "/w/p"
    assert request.cwd is None
    assert request.env is None
    assert request.timeout_ms is None
    assert request.supersede is False


def test_full_payload() -> None:
    request = parse_job_start(
        {
            "kind": "command",
            "root": "/srv/work/../project",
            "argv": ["python", "-c", ""],
            "cwd": "/tmp",
            "env": {"A": "1", "B": None},
            "timeoutMilliseconds": 2500,
            "supersede": True,
        }
    )
    assert request.kind is JobKind.COMMAND
    assert request.root == "/srv/project"
    assert request.argv == ("python", "-c", "")
    assert request.cwd == "/tmp"
    assert request.env == {"A": "1", "B": None}
    assert request.timeout_ms == 2500
    assert request.supersede is True


def test_null_optional_fields_are_absent() -> None:
    request = parse_job_start(with_(cwd=None, env=None, timeoutMilliseconds=None, supersede=None))
    assert request == parse_job_start(GOOD)


@pytest.mark.parametrize(
    ("payload", "field", "fragment"),
    [
        (["not", "an", "object"], "payload", "must be an object"),
        (with_(target="x86_64"), "target", "unknown field 'target'"),
        (without("kind"), "kind", "kind is required"),
        (with_(kind=3), "kind", "kind is required"),
        (with_(kind="deploy"), "kind", "unknown kind 'deploy'"),
        (without("root"), "root", "root is required"),
        (with_(root=["/p"]), "root", "root is required"),
        (with_(root=""), "root", "root must not be empty"),
        (with_(root="/p\0x"), "root", "NUL"),
        (without("argv"), "argv", "argv is required"),
        (with_(argv="make"), "argv", "array of strings"),
        (with_(argv=[]), "argv", "argv must not be empty"),
        (with_(argv=["make", 3]), "argv", "argv[1] must be a string, not a number"),
        (with_(argv=["make", None]), "argv", "argv[1] must be a string, not null"),
        (with_(argv=["ma\0ke"]), "argv", "argv[0] must not contain a NUL"),
        (with_(argv=[""]), "argv", "argv[0] (the program) must not be empty"),
        (with_(cwd=5), "cwd", "cwd must be a string"),
        (with_(cwd=""), "cwd", "cwd must not be empty"),
        (with_(env=["A=1"]), "env", "env must be an object"),
        (with_(env={"A": 1}), "env", "env['A'] must be a string or null"),
        (with_(env={"A": True}), "env", "not a boolean"),
        (with_(env={"": "x"}), "env", "invalid variable name"),
        (with_(env={"A=B": "x"}), "env", "invalid variable name"),
        (with_(env={"A": "x\0"}), "env", "NUL"),
        (with_(timeoutMilliseconds=0), "timeoutMilliseconds", "must be positive"),
        (with_(timeoutMilliseconds=-5), "timeoutMilliseconds", "must be positive"),
        (with_(timeoutMilliseconds=1.5), "timeoutMilliseconds", "must be an integer"),
        (with_(timeoutMilliseconds="100"), "timeoutMilliseconds", "must be an integer"),
        (with_(timeoutMilliseconds=True), "timeoutMilliseconds", "must be an integer"),
        (with_(timeoutMilliseconds=2**31), "timeoutMilliseconds", "must be at most 2147483647"),
        (with_(argv=["make", "\ud800"]), "argv", "argv[1] must be valid Unicode text"),
        (with_(env={"A": "\udcff"}), "env", "valid Unicode text"),
        (with_(root="/p\ud800"), "root", "valid Unicode text"),
        (with_(**{"t" * 100_000: 1}), "t" * 128 + "...", "unknown field 'ttt"),
        (with_(supersede="yes"), "supersede", "supersede must be a boolean"),
        (with_(supersede=1), "supersede", "supersede must be a boolean"),
    ],
)
def test_bad_payloads(payload: JSONValue, field: str, fragment: str) -> None:
    with pytest.raises(CoreError) as info:
        parse_job_start(payload)  # type: ignore[arg-type]
    assert info.value.code == "invalid_request"
    assert info.value.details == {"field": field}
    assert fragment in info.value.message
    assert info.value.message.startswith("job.start: ")


@pytest.mark.parametrize(
    ("changes", "error", "fragment"),
    [
        ({"kind": "deploy"}, ValueError, "JobKind"),
        ({"root": 3}, TypeError, "root"),
        ({"root": ""}, ValueError, "root"),
        ({"argv": "make"}, TypeError, "single string"),
        ({"argv": ()}, ValueError, "argv must not be empty"),
        ({"argv": ("make", 1)}, TypeError, "argv[1]"),
        ({"argv": ("a\0",)}, ValueError, "NUL"),
        ({"argv": ("a\ud800",)}, ValueError, "lone surrogate"),
        ({"timeout_ms": 2**31}, ValueError, "timeout_ms"),
        ({"cwd": 3}, TypeError, "cwd"),
        ({"env": ["A"]}, TypeError, "env"),
        ({"env": {"A": 1}}, ValueError, "env"),
        ({"timeout_ms": 0}, ValueError, "timeout_ms"),
        ({"timeout_ms": 1.0}, TypeError, "timeout_ms"),
        ({"supersede": "yes"}, TypeError, "supersede"),
    ],
)
def test_job_request_checks_python_callers(
    changes: dict[str, object], error: type[Exception], fragment: str
) -> None:
    fields: dict[str, object] = {"kind": "build", "root": "/p", "argv": ("make",)}
    fields.update(changes)
    with pytest.raises(error, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        JobRequest(**fields)  # type: ignore[arg-type]


def test_job_request_is_immutable_and_normalized() -> None:
    env = {"A": "1"}
    request = JobRequest(kind="test", root="/p/./q/", argv=["pytest"], env=env)  # type: ignore[arg-type]
    env["A"] = "changed"
    assert request.kind is JobKind.TEST
    assert request.root == "/p/q"
    assert request.argv == ("pytest",)
    assert request.env == {"A": "1"}
    with pytest.raises(TypeError):
        request.env["B"] = "2"  # type: ignore[index]


def test_relative_root_is_refused() -> None:
    """A relative root would resolve against the supervisor's cwd (newcomer report)."""
    with pytest.raises(CoreError) as caught:
        parse_job_start({"kind": "build", "root": "rel/project", "argv": ["true"]})
    assert caught.value.code == "invalid_request"
    assert "absolute" in caught.value.message
