# mypy: disable-error-code="arg-type,dict-item,index,unused-ignore"
"""Core's rules of run/start, run/stop and debug/start (plugin-contract.md "Run and debug
sessions"): every refusal's code, details.code and details.field. No process is started; the
paths checked are real directories under tmp_path.
"""

from __future__ import annotations

import base64
import os
import shutil
import sys
from typing import TYPE_CHECKING

import pytest

from protocol import CoreError
from supervisor._api import validate_payload
from supervisor._plugin._run_service import parse_plugin_runs
from supervisor._plugin._run_state import (
    DEBUG_CONFIGURATION_BYTES,
    MAX_ARGUMENT_BYTES,
    MAX_ARGUMENTS,
    MAX_ENVIRONMENT,
    RERUN_DATA_BYTES,
    TEMPORARY_FILE_BYTES,
    DebugAdapter,
    RunTools,
    decode_debug_start,
    decode_run_start,
    decode_run_stop,
    expand_temporary_files,
    resolve_tool,
)
from supervisor._plugin._state import HostRefusal

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject, JSONValue

CTX: JSONObject = {"contextID": "w1", "generation": 1}


@pytest.fixture
def roots(tmp_path: Path) -> tuple[str, RunTools]:
    workspace = tmp_path / "ws"
    (workspace / "app").mkdir(parents=True)
    package = tmp_path / "pkg"
    (package / "bin").mkdir(parents=True)
    (package / "bin" / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", workspace / "escape")
    (tmp_path / "plain.txt").write_text("not a program")
    tools = RunTools(
        required=frozenset({"python", "missing", "gone", "plain", "org.example.tools:sh"}),
        resolved={"python": sys.executable, "gone": None, "plain": str(tmp_path / "plain.txt")},
        package_root=str(package),
    )
    return str(workspace), tools


def run(**overrides: JSONValue) -> JSONObject:
    params: JSONObject = {
        "context": CTX,
        "label": "Run app",
        "process": {
            "executable": {"kind": "tool", "tool": "python"},
            "arguments": ["-c", "pass"],
            "workingDirectory": "app",
            "environment": {"MODE": "dev"},
        },
    }
    params.update(overrides)
    return params


def process(**overrides: JSONValue) -> JSONObject:
    base = run()["process"]
    assert isinstance(base, dict)
    return {**base, **overrides}


def refused(params: JSONObject, roots: tuple[str, RunTools], **kw: object) -> HostRefusal:
    workspace, tools = roots
    with pytest.raises(HostRefusal) as caught:
        decode_run_start(params, tools, workspace, **kw)  # type: ignore[arg-type]
    return caught.value


def test_a_valid_start_resolves_tool_directory_and_files(roots: tuple[str, RunTools]) -> None:
    workspace, tools = roots
    files: list[JSONValue] = [
        {"name": "args.txt", "contents": "héllo"},
        {"name": "raw.bin", "base64": base64.b64encode(b"\xff\x00").decode()},
    ]
    params = run(
        process=process(
            arguments=["@${temporaryFile:args.txt}"],
            environment={"RAW": "${temporaryFile:raw.bin}"},
        ),
        temporaryFiles=files,
        rerun={"function": "app.run", "data": {"n": 1}},
    )
    started = decode_run_start(params, tools, workspace, frozenset({"app.run"}))
    assert started.executable == sys.executable
    assert started.working_directory == os.path.join(workspace, "app")
    assert started.temporary_files == (("args.txt", "héllo".encode()), ("raw.bin", b"\xff\x00"))
    assert started.rerun == {"function": "app.run", "data": {"n": 1}}
    paths = {"args.txt": "/t/args.txt", "raw.bin": "/t/raw.bin"}
    assert expand_temporary_files(started.arguments[0], paths) == "@/t/args.txt"
    # The workspace root itself, and a packaged file of the plugin.
    packaged = run(
        process=process(executable={"kind": "packaged", "path": "bin/tool"}, workingDirectory=".")
    )
    started = decode_run_start(packaged, tools, workspace)
    assert started.executable.endswith(os.path.join("pkg", "bin", "tool"))
    assert started.working_directory == workspace


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (run(context={"contextID": "w1"}), "context"),
        (run(label=""), "label"),
        (run(label="x" * 257), "label"),
        (run(label="two\nlines"), "label"),
        (run(process="python"), "process"),
        (run(process={"executable": {"kind": "tool", "tool": "python"}}), "process.arguments"),
        (run(process=process(shell=True)), "process.shell"),
        (run(process=process(executable="python")), "process.executable"),
        (
            run(process=process(executable={"kind": "path", "path": "/bin/sh"})),
            "process.executable.kind",
        ),
        (
            run(process=process(executable={"kind": "tool", "tool": "node"})),
            "process.executable.tool",
        ),
        (
            run(process=process(executable={"kind": "packaged", "path": "../x"})),
            "process.executable.path",
        ),
        (
            run(process=process(executable={"kind": "packaged", "path": "/bin/sh"})),
            "process.executable.path",
        ),
        (
            run(process=process(executable={"kind": "packaged", "path": "bin/none"})),
            "process.executable.path",
        ),
        (run(process=process(arguments="-c")), "process.arguments"),
        (run(process=process(arguments=["a", 1])), "process.arguments[1]"),
        (run(process=process(arguments=["a\0b"])), "process.arguments[0]"),
        (run(process=process(arguments=["x" * (MAX_ARGUMENT_BYTES + 1)])), "process.arguments[0]"),
        (run(process=process(arguments=["a"] * (MAX_ARGUMENTS + 1))), "process.arguments"),
        (run(process=process(workingDirectory="/tmp")), "process.workingDirectory"),
        (run(process=process(workingDirectory="../ws")), "process.workingDirectory"),
        (run(process=process(workingDirectory="missing")), "process.workingDirectory"),
        (run(process=process(workingDirectory="escape")), "process.workingDirectory"),
        (run(process=process(environment={"1BAD": "x"})), "process.environment.1BAD"),
        (run(process=process(environment={"A": 1})), "process.environment.A"),
        (
            run(process=process(environment={f"V{i}": "x" for i in range(MAX_ENVIRONMENT + 1)})),
            "process.environment",
        ),
        (
            run(temporaryFiles=[{"name": f"f{i}", "contents": ""} for i in range(5)]),
            "temporaryFiles",
        ),
        (run(temporaryFiles=[{"name": "a", "contents": "", "base64": ""}]), "temporaryFiles[0]"),
        (run(temporaryFiles=[{"name": "a"}]), "temporaryFiles[0]"),
        (run(temporaryFiles=[{"name": ".a", "contents": ""}]), "temporaryFiles[0].name"),
        (run(temporaryFiles=[{"name": "a" * 65, "contents": ""}]), "temporaryFiles[0].name"),
        (
            run(temporaryFiles=[{"name": "a", "contents": ""}, {"name": "a", "contents": ""}]),
            "temporaryFiles[1].name",
        ),
        (run(temporaryFiles=[{"name": "a", "base64": "***"}]), "temporaryFiles[0].base64"),
        (
            run(temporaryFiles=[{"name": "a", "contents": "x" * (TEMPORARY_FILE_BYTES + 1)}]),
            "temporaryFiles[0]",
        ),
        (run(process=process(arguments=["${temporaryFile:nope}"])), "process.arguments[0]"),
        (run(debug={"configurationType": "python"}), "debug"),
        (
            run(debug={"configurationType": "python", "target": {"kind": "connection", "port": 0}}),
            "debug.target.port",
        ),
        (run(debug={"configurationType": "python", "target": {"kind": "remote"}}), "debug.target"),
        (run(rerun={"function": "app.other", "data": {}}), "rerun.function"),
        (run(rerun={"function": "app.run", "data": []}), "rerun.data"),
        (run(rerun={"function": "app.run", "data": {"x": "y" * RERUN_DATA_BYTES}}), "rerun.data"),
    ],
)
def test_malformed_starts_name_their_field(
    params: JSONObject, field: str, roots: tuple[str, RunTools]
) -> None:
    caught = refused(params, roots, registered=frozenset({"app.run"}))
    assert (caught.number, caught.code) == (-32602, "plugin.host.invalidParams")
    assert caught.details == {"code": "plugin.run.invalidStart", "field": field}


def test_unknown_field_unresolved_tool_and_debug_target(roots: tuple[str, RunTools]) -> None:
    caught = refused(run(console=True), roots)
    assert (caught.number, caught.code) == (-32018, "plugin.host.unsupportedOption")
    assert caught.details == {"option": "console"}
    for tool, reason in (("missing", "notFound"), ("gone", "notFound"), ("plain", "unusable")):
        caught = refused(run(process=process(executable={"kind": "tool", "tool": tool})), roots)
        assert (caught.number, caught.code) == (-32025, "plugin.host.toolUnresolved")
        assert caught.details == {"tool": tool, "reason": reason}
    # A required tool the host did not list: its short ID on PATH, as a launch plan's tool.
    workspace, tools = roots
    on_path = run(process=process(executable={"kind": "tool", "tool": "org.example.tools:sh"}))
    found = shutil.which("sh")
    assert found is not None
    assert decode_run_start(on_path, tools, workspace).executable == os.path.abspath(found)
    # A well-formed debug target: no public adapter alias is known to the supervisor.
    debug = {"configurationType": "python", "target": {"kind": "connection", "port": 5678}}
    caught = refused(run(debug=debug), roots)
    assert (caught.code, caught.details) == ("plugin.host.unsupportedOption", {"option": "debug"})


def test_a_packaged_executable_needs_a_package(roots: tuple[str, RunTools]) -> None:
    workspace, _ = roots
    params = run(process=process(executable={"kind": "packaged", "path": "bin/tool"}))
    with pytest.raises(HostRefusal) as caught:
        decode_run_start(params, RunTools(), workspace)
    assert caught.value.details == {
        "code": "plugin.run.invalidStart",
        "field": "process.executable.path",
    }


def test_run_stop_takes_one_id_and_no_context() -> None:
    assert decode_run_stop({"runID": "run-1"}) == ("runID", "run-1")
    assert decode_run_stop({"sessionID": "s"}) == ("sessionID", "s")
    for params in (
        {},
        {"runID": ""},
        {"runID": "a", "sessionID": "b"},
        {"runID": "a", "context": CTX},
    ):
        with pytest.raises(HostRefusal) as caught:
            decode_run_stop(params)  # type: ignore[arg-type]
        assert (caught.value.number, caught.value.code) == (-32602, "plugin.host.invalidParams")


ADAPTERS = {
    "py": DebugAdapter(
        "py",
        frozenset({"launch"}),
        {"executable": "/usr/bin/python3"},
        "python",
        {"launch": {"justMyCode": True, "console": "internalConsole"}},
    )
}


def debug(**overrides: JSONValue) -> JSONObject:
    params: JSONObject = {
        "context": CTX,
        "label": "Debug app",
        "adapter": "py",
        "request": "launch",
        "configuration": {"program": "app.py", "justMyCode": False},
    }
    params.update(overrides)
    return params


def test_debug_start_resolves_local_and_qualified_adapters() -> None:
    for name in ("py", "dev.example/py"):
        started = decode_debug_start(debug(adapter=name), "dev.example", ADAPTERS)
        assert started.adapter is ADAPTERS["py"]
        # The configuration lies on top of the declared defaults.
        assert started.configuration == {
            "justMyCode": False,
            "console": "internalConsole",
            "program": "app.py",
        }


@pytest.mark.parametrize(
    ("params", "number", "code", "details"),
    [
        (debug(extra=1), -32018, "plugin.host.unsupportedOption", {"option": "extra"}),
        (
            debug(label="a\tb"),
            -32602,
            "plugin.host.invalidParams",
            {"code": "plugin.debug.invalidStart", "field": "label"},
        ),
        (
            debug(adapter="other.plugin/py"),
            -32016,
            "plugin.host.notFound",
            {"code": "plugin.debug.foreignAdapter", "field": "adapter"},
        ),
        (
            debug(adapter="node"),
            -32016,
            "plugin.host.notFound",
            {"code": "plugin.debug.unknownAdapter", "field": "adapter"},
        ),
        (
            debug(adapter="dev.example/node"),
            -32016,
            "plugin.host.notFound",
            {"code": "plugin.debug.unknownAdapter", "field": "adapter"},
        ),
        (
            debug(request="run"),
            -32602,
            "plugin.host.invalidParams",
            {"code": "plugin.debug.invalidStart", "field": "request"},
        ),
        (
            debug(request="attach"),
            -32602,
            "plugin.host.invalidParams",
            {"code": "plugin.debug.invalidStart", "field": "request"},
        ),
        (
            debug(configuration=[]),
            -32602,
            "plugin.host.invalidParams",
            {"code": "plugin.debug.invalidStart", "field": "configuration"},
        ),
        (
            debug(configuration={"noDebug": True}),
            -32602,
            "plugin.host.invalidParams",
            {"code": "plugin.debug.invalidStart", "field": "configuration.noDebug"},
        ),
        (
            debug(configuration={"__sessionId": "x"}),
            -32602,
            "plugin.host.invalidParams",
            {"code": "plugin.debug.invalidStart", "field": "configuration.__sessionId"},
        ),
        (
            debug(configuration={"blob": "x" * DEBUG_CONFIGURATION_BYTES}),
            -32014,
            "plugin.host.limitExceeded",
            {"code": "plugin.debug.limitExceeded", "field": "configuration"},
        ),
    ],
)
def test_debug_start_refusals(
    params: JSONObject, number: int, code: str, details: JSONObject
) -> None:
    with pytest.raises(HostRefusal) as caught:
        decode_debug_start(params, "dev.example", ADAPTERS)
    assert (caught.value.number, caught.value.code, caught.value.details) == (
        number,
        code,
        details,
    )


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"pluginId": "bad id"}, "pluginId"),
        ({"pluginId": "p", "packageRoot": "relative"}, "packageRoot"),
        ({"pluginId": "p", "requiresTools": ["a", "a"]}, "requiresTools"),
        ({"pluginId": "p", "requiresTools": [f"t{i}" for i in range(33)]}, "requiresTools"),
        ({"pluginId": "p", "tools": {"node": "/usr/bin/node"}}, "tools.node"),
        ({"pluginId": "p", "requiresTools": ["node"], "tools": {"node": "node"}}, "tools.node"),
        ({"pluginId": "p", "debugAdapters": [{"id": "py"}]}, "debugAdapters[0].adapter"),
        (
            {
                "pluginId": "p",
                "debugAdapters": [
                    {
                        "id": "py",
                        "adapter": {"executable": "/bin/true"},
                        "configurations": {"attach": {}},
                    }
                ],
            },
            "debugAdapters[0].configurations.attach",
        ),
        (
            {
                "pluginId": "p",
                "debugAdapters": [
                    {"id": "py", "requests": ["run"], "adapter": {"executable": "/bin/true"}}
                ],
            },
            "debugAdapters[0].requests[0]",
        ),
    ],
)
def test_configure_plugin_refuses_what_it_cannot_use(payload: JSONObject, field: str) -> None:
    with pytest.raises(CoreError) as caught:
        parse_plugin_runs(validate_payload("run.configurePlugin", payload))
    assert caught.value.code == "invalid_request"
    assert caught.value.details == {"field": field}


def test_configure_plugin_accepts_launch_plan_tool_entries() -> None:
    plugin_id, runs = parse_plugin_runs(
        validate_payload(
            "run.configurePlugin",
            {
                "pluginId": "p",
                "requiresTools": ["python", "node"],
                "tools": {
                    "python": {"executable": sys.executable, "version": "3.11"},
                    "node": None,
                },
                "debugAdapters": [{"id": "py", "adapter": {"executable": sys.executable}}],
            },
        )
    )
    assert plugin_id == "p"
    assert runs.tools.resolved == {"python": sys.executable, "node": None}
    assert runs.adapters["py"].requests == frozenset({"launch"})
    assert runs.adapters["py"].adapter_id == "py"


RUNTIME_LAUNCH: JSONObject = {"kind": "runSelectedRuntime", "tool": "python"}


def runtime_adapter(**changes: JSONValue) -> JSONObject:
    entry: JSONObject = {"id": "py", "launch": RUNTIME_LAUNCH, "adapter": {"arguments": ["-m"]}}
    return {"pluginId": "p", "requiresTools": ["python"], "debugAdapters": [{**entry, **changes}]}


def test_configure_plugin_adapter_started_by_the_selected_runtime() -> None:
    _, runs = parse_plugin_runs(validate_payload("run.configurePlugin", runtime_adapter()))
    assert runs.adapters["py"].runtime_tool == "python"
    assert runs.adapters["py"].adapter == {"arguments": ["-m"]}  # no executable yet
    assert resolve_tool("python", RunTools(resolved={"python": sys.executable})) == sys.executable
    with pytest.raises(HostRefusal) as caught:
        resolve_tool("python", RunTools(resolved={"python": None}))
    assert caught.value.details == {"tool": "python", "reason": "notFound"}


@pytest.mark.parametrize(
    ("entry", "code", "field"),
    [
        (
            runtime_adapter(launch={"kind": "runSelectedRuntime", "tool": "node"}),
            "plugin.runtime.undeclared",
            "debugAdapters[0].launch.tool",
        ),
        (
            runtime_adapter(launch={"kind": "process", "tool": "python"}),
            "invalid_request",
            "debugAdapters[0].launch.kind",
        ),
        (
            runtime_adapter(adapter={"executable": sys.executable}),
            "invalid_request",
            "debugAdapters[0].adapter",
        ),
        (
            runtime_adapter(adapter={"transport": "tcpLanguageServer"}),
            "invalid_request",
            "debugAdapters[0].adapter",
        ),
        (
            runtime_adapter(adapter={"arguments": "-m"}),
            "invalid_request",
            "debugAdapters[0].adapter",
        ),
    ],
)
def test_configure_plugin_refuses_bad_runtime_adapters(
    entry: JSONObject, code: str, field: str
) -> None:
    with pytest.raises(CoreError) as caught:
        parse_plugin_runs(validate_payload("run.configurePlugin", entry))
    assert caught.value.code == code
    assert caught.value.details == {"field": field}
