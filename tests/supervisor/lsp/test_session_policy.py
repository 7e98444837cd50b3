"""plugin-contract.md "Plugin-owned sessions": what a session policy may say, checked before
anything starts, and the defaults of ``lsp.startServer`` (core-api.md "lsp.* session lifecycle").

Most checks are on ``parse_start`` (pure: it starts nothing); the remote refusal also goes
through the Core with an executable that would leave a mark if it ever ran.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from protocol import CoreError
from supervisor import open_core
from supervisor._lsp._service import parse_start

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

BASE: JSONObject = {
    "serverId": "x",
    "executable": sys.executable,
    "workingDirectory": "/",
    "rootUri": "file:///x",
}


def refused(policy: JSONValue, **extra: JSONValue) -> CoreError:
    with pytest.raises(CoreError) as caught:
        parse_start({**BASE, "sessionPolicy": policy, **extra})
    return caught.value


def names(count: int, prefix: str = "m/") -> list[JSONValue]:
    return [f"{prefix}{index}" for index in range(count)]


@pytest.mark.parametrize(
    ("field", "limit"),
    [("requestMethods", 64), ("commands", 128), ("forwardNotifications", 32)],
)
def test_list_bounds(field: str, limit: int) -> None:
    extra: JSONObject = {}
    if field == "commands":
        extra = {"requestMethods": ["workspace/executeCommand"]}
    policy: JSONObject = {**extra, field: names(limit)}
    spec = parse_start({**BASE, "sessionPolicy": policy})
    assert spec.policy is not None
    error = refused({**extra, field: names(limit + 1)})
    assert error.code == "invalid_request"
    assert f"more than {limit}" in error.message
    assert error.details == {"field": f"sessionPolicy.{field}"}


@pytest.mark.parametrize(
    "bad",
    ["", "two words", "tab\there", "new\nline", "nbsp\u00a0x", "bell\x07", "zw\u200bspace", None],
)
def test_a_name_is_nonempty_without_whitespace_or_control(bad: JSONValue) -> None:
    error = refused({"requestMethods": ["ok/one", bad]})
    assert error.code == "invalid_request"
    # The declaration names the item (an empty or null name); the policy's own check the list.
    assert error.details is not None
    assert error.details["field"] in (
        "sessionPolicy.requestMethods",
        "sessionPolicy.requestMethods[1]",
    )


def test_a_name_is_at_most_256_bytes_and_unique() -> None:
    at_limit = "m/" + "é" * 127  # 2 + 254 bytes
    assert len(at_limit.encode()) == 256
    spec = parse_start({**BASE, "sessionPolicy": {"forwardNotifications": [at_limit]}})
    assert spec.policy.forward_notifications == frozenset({at_limit})
    assert "256 bytes" in refused({"forwardNotifications": [at_limit + "x"]}).message
    assert "duplicate" in refused({"forwardNotifications": ["a/b", "a/b"]}).message


@pytest.mark.parametrize(
    "host_method",
    ["initialize", "initialized", "shutdown", "exit", "textDocument/didOpen",
     "textDocument/willSaveWaitUntil", "workspace/didChangeWorkspaceFolders", "$/progress"],
)  # fmt: skip
@pytest.mark.parametrize("field", ["requestMethods", "forwardNotifications"])
def test_the_hosts_own_methods_cannot_be_handed_out(host_method: str, field: str) -> None:
    error = refused({field: [host_method]})
    assert error.code == "invalid_request"
    assert host_method in error.message


def test_commands_exactly_when_execute_command_is_a_request_method() -> None:
    spec = parse_start(
        {
            **BASE,
            "sessionPolicy": {
                "requestMethods": ["workspace/executeCommand"],
                "commands": ["build"],
            },
        }
    )
    assert spec.policy.commands == frozenset({"build"})
    without_method = refused({"requestMethods": ["custom/x"], "commands": ["build"]})
    assert without_method.details == {"field": "sessionPolicy.commands"}
    without_commands = refused({"requestMethods": ["workspace/executeCommand"]})
    assert without_commands.details == {"field": "sessionPolicy.commands"}


def test_serialized_commands_are_a_subset_of_commands() -> None:
    error = refused(
        {
            "requestMethods": ["workspace/executeCommand"],
            "commands": ["a"],
            "serializedCommands": ["b"],
        }
    )
    assert error.details == {"field": "sessionPolicy.serializedCommands"}


def test_at_most_8_gates() -> None:
    gate = {"until": "notification", "method": "ready"}
    gates: list[JSONValue] = [{**gate, "id": f"g{index}"} for index in range(8)]
    assert len(parse_start({**BASE, "gates": gates}).gates) == 8
    with pytest.raises(CoreError) as error:
        parse_start({**BASE, "gates": [*gates, {**gate, "id": "g8"}]})
    assert error.value.details == {"field": "gates"}


def test_remote_value_and_workspace_authority_are_checked() -> None:
    assert refused({"remote": "sometimes"}).details == {"field": "sessionPolicy.remote"}
    assert refused(None, workspaceAuthority="elsewhere").details == {"field": "workspaceAuthority"}
    # A server that supports remote workspaces (the default) starts for one.
    parse_start({**BASE, "workspaceAuthority": "remote"})
    parse_start({**BASE, "sessionPolicy": {"remote": "supported"}, "workspaceAuthority": "remote"})
    # A server that does not still starts for a local workspace.
    parse_start({**BASE, "sessionPolicy": {"remote": "unsupported"}})


async def test_remote_unsupported_server_is_not_started_for_a_remote_workspace(
    tmp_path: str,
) -> None:
    mark = os.path.join(tmp_path, "ran")
    async with open_core() as core:
        with pytest.raises(CoreError) as error:
            await core.call(
                "lsp.startServer",
                {
                    **BASE,
                    "arguments": ["-c", f"open({mark!r}, 'w').close()"],
                    "sessionPolicy": {"remote": "unsupported"},
                    "workspaceAuthority": "remote",
                },
            )
        assert error.value.code == "not_supported"
        assert error.value.details == {"field": "sessionPolicy.remote"}
    assert not await trio.Path(mark).exists()


def test_defaults_of_the_lsp_deadlines() -> None:
    spec = parse_start(dict(BASE))
    assert spec.request_timeout_ms == 60_000
    assert spec.service_ready_idle_ms == 45_000
    assert spec.service_ready_absolute_ms == 600_000
    assert spec.shutdown_timeout_ms == 3_000
    assert spec.exit_wait_ms == 2_000
    capped = parse_start({**BASE, "requestTimeoutMilliseconds": 300_000})
    assert capped.request_timeout_ms == 300_000
    with pytest.raises(CoreError) as error:
        parse_start({**BASE, "requestTimeoutMilliseconds": 300_001})
    assert error.value.code == "invalid_request"
