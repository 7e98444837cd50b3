"""An unknown field is answered with the field most likely meant (``protocol.did_you_mean``,
the one rule for lanes files, the Core and the CLI), then every known field."""

from __future__ import annotations

import pytest

from protocol import CoreError
from supervisor._api import validate_payload


@pytest.mark.parametrize(
    ("command", "payload", "meant"),
    [
        # A misspelling: the closest known name.
        ("lsp.startServer", {"serverId": "s", "workingDir": "/"}, "workingDirectory"),
        ("debug.inspect", {"sessionId": "s", "kind": "threads", "threadID": 1}, "threadId"),
        (
            "job.start",
            {"root": "/", "kind": "build", "argv": ["x"], "supercede": True},
            "supersede",
        ),
        # Another command's name for the same concept: that command's own name.
        ("process.run", {"argv": ["x"], "workingDirectory": "/"}, "cwd"),
        ("process.run", {"argv": ["x"], "environment": {}}, "env"),
        ("lsp.startServer", {"serverId": "s", "cwd": "/"}, "workingDirectory"),
        ("terminal.create", {"executable": "sh", "argv": []}, "arguments"),
        ("lsp.request", {"sessionId": "s", "method": "m", "timeout": 5}, "timeoutMilliseconds"),
    ],
)
def test_an_unknown_field_suggests_the_one_meant(
    command: str, payload: dict[str, object], meant: str
) -> None:
    with pytest.raises(CoreError) as info:
        validate_payload(command, payload)
    message = info.value.message
    assert info.value.code == "invalid_request"
    assert "(known: " in message
    assert f"(did you mean '{meant}'?)" in message, message


def test_a_name_far_from_every_field_suggests_nothing() -> None:
    with pytest.raises(CoreError) as info:
        validate_payload("process.run", {"argv": ["x"], "zzzqqq": 1})
    assert "did you mean" not in info.value.message
    assert info.value.details == {"field": "zzzqqq"}
