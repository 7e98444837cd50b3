"""Launch plans (plugin-contract.md "Process start" .. "Backend-resolved launch"; issue 17).

Pure checks first (shapes, templates, bounds, codes: nothing is touched or started), then
resolution against the real file system and real probes, then ``lsp.startServer`` with a
``launchPlan`` starting a real server. Every test ends with nothing left running (the leak
guard in conftest.py checks it).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import sys
from typing import TYPE_CHECKING, Any

import pytest
import trio

from protocol import CoreError
from supervisor import open_core
from supervisor._lsp._service import parse_launch_start, parse_start
from supervisor._plugin._launch import (
    MAX_ARGUMENTS,
    MAX_ENVIRONMENT,
    LaunchPlan,
    decode_resolved_launch,
    host_architecture,
    parse_launch_plan,
    resolve_launch,
)
from tests.supervisor.lsp._support import FAKE, WAIT_S, Session, as_obj

if TYPE_CHECKING:
    from pathlib import Path

    from protocol import JSONObject, JSONValue

PYTHON = os.path.basename(sys.executable)
PY_DIR = os.path.dirname(sys.executable)


def plan_payload(tmp: Path, **extra: Any) -> dict[str, Any]:
    package = tmp / "package"
    package.mkdir(exist_ok=True)
    payload: dict[str, Any] = {
        "launch": {"kind": "systemCommand", "commands": ["true"]},
        "pluginDirectory": str(package),
        "stateDirectory": str(tmp / "state"),
    }
    payload.update(extra)
    return payload


def refused(payload: JSONValue, **kwargs: bool) -> CoreError:
    with pytest.raises(CoreError) as caught:
        parse_launch_plan(payload, **kwargs)
    return caught.value


def field_of(error: CoreError) -> JSONValue:
    return (error.details or {}).get("field")


def exists(path: Path) -> bool:
    return os.path.exists(path)


def is_dir(path: Path) -> bool:
    return os.path.isdir(path)


def write_script(path: Path, body: str, *, executable: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}", encoding="utf-8")
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


# -- pure: shapes, templates, codes ------------------------------------------------------------


def test_launch_kinds_parse(tmp_path: Path) -> None:
    packaged = parse_launch_plan(
        plan_payload(tmp_path, launch={"kind": "packaged", "path": "bin/${arch}/server"})
    )
    assert (packaged.kind, packaged.path) == ("packaged", "bin/${arch}/server")
    system = parse_launch_plan(
        plan_payload(tmp_path, launch={"kind": "systemCommand", "commands": ["a", "b"]})
    )
    assert system.commands == ("a", "b")
    runtime = parse_launch_plan(
        plan_payload(
            tmp_path,
            requiresTools=["node"],
            launch={
                "kind": "runtime",
                "tool": "node",
                "entry": "server/main.js",
                "minimumVersion": "18.17",
                "runtimeArguments": ["--max-old-space-size=512"],
            },
        )
    )
    assert (runtime.kind, runtime.tool, runtime.minimum_version) == ("tool", "node", "18.17")
    assert runtime.architecture == host_architecture()


@pytest.mark.parametrize(
    ("launch", "code", "field"),
    [
        ({"kind": "nope"}, "invalid_request", "launch.kind"),
        ({"kind": "packaged", "path": "../x"}, "plugin.launch.outsidePackage", "launch.path"),
        ({"kind": "packaged", "path": "/bin/sh"}, "plugin.launch.outsidePackage", "launch.path"),
        (
            {"kind": "packaged", "path": "bin/${setting:x}"},
            "plugin.template.invalid",
            "launch.path",
        ),
        ({"kind": "packaged", "path": "x", "extra": 1}, "invalid_request", "launch.extra"),
        ({"kind": "systemCommand", "commands": ["/bin/sh"]}, "invalid_request", "launch.commands"),
        ({"kind": "systemCommand", "commands": []}, "invalid_request", "launch.commands"),
        (
            {"kind": "runtime", "tool": "node", "entry": "m.js"},
            "plugin.runtime.undeclared",
            "launch.tool",
        ),
        (
            {
                "kind": "runtime",
                "tool": "py",
                "entry": "m.py",
                "packagedRuntime": "rt/py",
                "minimumVersion": "3",
            },
            "invalid_request",
            "launch.minimumVersion",
        ),
        (
            {"kind": "runtime", "tool": "py", "entry": "m.py", "minimumVersion": "3.x"},
            "invalid_request",
            "launch.minimumVersion",
        ),
        (
            {"kind": "runtime", "tool": "py", "entry": "${arch}/m.py"},
            "plugin.template.invalid",
            "launch.entry",
        ),
    ],
)
def test_malformed_launches_are_refused_with_a_code_and_field(
    tmp_path: Path, launch: JSONObject, code: str, field: str
) -> None:
    error = refused(plan_payload(tmp_path, launch=launch, requiresTools=["py"]))
    assert (error.code, field_of(error)) == (code, field)


def test_tool_references_must_be_required(tmp_path: Path) -> None:
    """plugin-contract.md "Tool references": an ID requiresTools does not list is
    plugin.runtime.undeclared with the field that names it; the launch tool is not repeated."""
    error = refused(plan_payload(tmp_path, runtimeDependencies=[{"tool": "go"}]))
    assert (error.code, field_of(error)) == (
        "plugin.runtime.undeclared",
        "runtimeDependencies[0].tool",
    )
    error = refused(
        plan_payload(
            tmp_path,
            requiresTools=["py"],
            runtimeDependencies=[{"tool": "py"}],
            launch={"kind": "runtime", "tool": "py", "entry": "m.py"},
        )
    )
    assert field_of(error) == "runtimeDependencies"
    assert refused(plan_payload(tmp_path, requiresTools=["a", "a"])).code == "invalid_request"
    too_many = [f"t{i}" for i in range(33)]
    assert field_of(refused(plan_payload(tmp_path, requiresTools=too_many))) == "requiresTools"
    error = refused(
        plan_payload(
            tmp_path,
            requiresTools=["py"],
            validationArguments=["--version"],
            launch={"kind": "runtime", "tool": "py", "entry": "m.py"},
        )
    )
    assert field_of(error) == "validationArguments"


@pytest.mark.parametrize(
    ("where", "template", "field"),
    [
        ("arguments", "${nope}", "arguments[0]"),
        ("arguments", "${pluginDir}${pluginDir}/x", "arguments[0]"),
        ("arguments", "${pluginDir}x", "arguments[0]"),
        ("arguments", "${pluginDir}/${setting:mode}", "arguments[0]"),
        ("arguments", "${stateDir", "arguments[0]"),
        ("validationArguments", "${stateDir}", "validationArguments[0]"),
        ("validationArguments", "${logDir}", "validationArguments[0]"),
        ("validationArguments", "${setting:mode}", "validationArguments[0]"),
        ("validationArguments", "${workspaceStateDir}", "validationArguments[0]"),
    ],
)
def test_unknown_misplaced_and_unguarded_variables(
    tmp_path: Path, where: str, template: str, field: str
) -> None:
    error = refused(plan_payload(tmp_path, settings={"mode": "x"}, **{where: [template]}))
    assert (error.code, field_of(error)) == ("plugin.template.invalid", field)


def test_template_places_and_missing_directories(tmp_path: Path) -> None:
    # ${workspaceStateDir}: not in a plugin backend, which belongs to no workspace.
    error = refused(
        plan_payload(
            tmp_path,
            workspaceStateDirectory=str(tmp_path / "ws"),
            arguments=["${workspaceStateDir}"],
        ),
        backend=True,
    )
    assert (error.code, field_of(error)) == ("plugin.template.invalid", "arguments[0]")
    error = refused(plan_payload(tmp_path, initializationOptions={"a": ["${workspaceStateDir}"]}))
    assert (error.code, field_of(error)) == (
        "plugin.launch.invalidRequest",
        "workspaceStateDirectory",
    )
    error = refused(plan_payload(tmp_path, arguments=["--log=${logDir}/x"]))
    assert (error.code, field_of(error)) == ("plugin.launch.invalidRequest", "logDirectory")
    error = refused(plan_payload(tmp_path, logDirectory="relative/log"))
    assert (error.code, field_of(error)) == ("plugin.launch.invalidRequest", "logDirectory")
    error = refused(plan_payload(tmp_path, architecture="mips"))
    assert (error.code, field_of(error)) == ("plugin.launch.invalidRequest", "architecture")
    error = refused(plan_payload(tmp_path, arguments=["${setting:absent}"]))
    assert error.code == "plugin.template.invalid"
    payload = plan_payload(tmp_path)
    del payload["stateDirectory"]
    assert refused(payload).code == "plugin.launch.invalidRequest"


def test_decoded_answer_bounds_and_codes(tmp_path: Path) -> None:
    """plugin-contract.md "Backend-resolved launch": the answer's bounds and rejections."""
    dirs = {name: str(tmp_path / name) for name in ("state", "workspaceState", "log", "temporary")}
    plan = parse_launch_plan(
        plan_payload(
            tmp_path,
            stateDirectory=dirs["state"],
            workspaceStateDirectory=dirs["workspaceState"],
            logDirectory=dirs["log"],
            temporaryDirectory=dirs["temporary"],
        )
    )

    def decode(answer: Any) -> LaunchPlan:
        return decode_resolved_launch(plan, answer, tool_definitions=frozenset({"py"}))[0]

    def code(answer: Any) -> tuple[str, JSONValue]:
        with pytest.raises(CoreError) as caught:
            decode(answer)
        return caught.value.code, field_of(caught.value)

    ok = decode(
        {
            "executable": {"kind": "tool", "tool": "py"},
            "arguments": ["x" * 32 * 1024] * MAX_ARGUMENTS,
            "environment": {f"V{i}": "v" for i in range(MAX_ENVIRONMENT)},
            "writablePaths": [dirs["log"] + "/b", dirs["state"] + "/a/"],
        }
    )
    assert ok.expanded
    assert ok.writable_paths == (dirs["log"] + "/b", dirs["state"] + "/a")
    packaged: Any = {"kind": "packaged", "path": "bin/server"}
    assert code({"executable": packaged, "extra": 1}) == ("plugin.launch.invalidResult", "extra")
    over_count = {"executable": packaged, "arguments": ["a"] * (MAX_ARGUMENTS + 1)}
    assert code(over_count)[0] == "plugin.launch.invalidResult"
    over_size = {"executable": packaged, "arguments": ["a" * (32 * 1024 + 1)]}
    assert code(over_size)[0] == "plugin.launch.invalidResult"
    assert code({"executable": packaged, "arguments": ["a\0b"]})[0] == "plugin.launch.invalidResult"
    env = {f"V{i}": "v" for i in range(MAX_ENVIRONMENT + 1)}
    assert code({"executable": packaged, "environment": env}) == (
        "plugin.launch.invalidResult",
        "environment",
    )
    assert code({"executable": packaged, "environment": {"A=B": "v"}})[0] == (
        "plugin.launch.invalidResult"
    )
    assert code({"executable": packaged, "environment": {"A": "v" * (32 * 1024 + 1)}})[0] == (
        "plugin.launch.invalidResult"
    )
    big = {"k": "x" * (1024 * 1024)}
    assert code({"executable": packaged, "initializationOptions": big}) == (
        "plugin.launch.invalidResult",
        "initializationOptions",
    )
    assert code({"executable": packaged, "workspaceConfiguration": big})[1] == (
        "workspaceConfiguration"
    )
    assert code({"executable": packaged, "gates": [{}] * 9}) == (
        "plugin.launch.invalidResult",
        "gates",
    )
    paths = [dirs["state"] + f"/{i}" for i in range(33)]
    assert code({"executable": packaged, "writablePaths": paths})[1] == "writablePaths"
    assert code({"executable": {"kind": "packaged", "path": "../x"}}) == (
        "plugin.launch.outsidePackage",
        "executable.path",
    )
    assert code({"executable": {"kind": "tool", "tool": "node"}}) == (
        "plugin.launch.undeclaredTool",
        "executable.tool",
    )
    assert code({"executable": packaged, "writablePaths": ["/etc/x"]}) == (
        "plugin.launch.unwritablePath",
        "writablePaths[0]",
    )
    assert code({"executable": packaged, "writablePaths": [dirs["state"] + "/../x"]})[0] == (
        "plugin.launch.unwritablePath"
    )
    partial = parse_launch_plan(plan_payload(tmp_path))
    with pytest.raises(CoreError) as caught:
        decode_resolved_launch(partial, {"executable": packaged}, tool_definitions=frozenset())
    assert caught.value.code == "plugin.launch.invalidRequest"


# -- resolution: the file system and real probes ---------------------------------------------


async def test_system_command_candidates_and_the_validation_probe(tmp_path: Path) -> None:
    """Candidates in order; a missing one and one whose probe fails are skipped; the first
    passing one runs. No candidate: plugin.launch.missing listing each and why."""
    bin_dir = tmp_path / "bin"
    write_script(bin_dir / "fails-probe", "import sys; sys.exit(3)\n")
    write_script(bin_dir / "passes-probe", "import sys; sys.exit(0)\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    plan = parse_launch_plan(
        plan_payload(
            tmp_path,
            launch={
                "kind": "systemCommand",
                "commands": ["no-such-command-xyz", "fails-probe", "passes-probe"],
            },
            validationArguments=["--version", "${arch}"],
            arguments=["--state=${stateDir}", "${pluginDir}/lib/${arch}/x"],
        )
    )
    resolved = await resolve_launch(plan, env=env)
    arch = host_architecture()
    assert resolved.argv == [
        str(bin_dir / "passes-probe"),
        f"--state={tmp_path / 'state'}",
        f"{tmp_path / 'package'}/lib/{arch}/x",
    ]
    assert is_dir(tmp_path / "state")  # required directories are created first
    plan = parse_launch_plan(
        plan_payload(
            tmp_path,
            launch={"kind": "systemCommand", "commands": ["no-such-command-xyz", "fails-probe"]},
            validationArguments=["--version"],
        )
    )
    with pytest.raises(CoreError) as caught:
        await resolve_launch(plan, env=env)
    assert caught.value.code == "plugin.launch.missing"
    assert (caught.value.details or {})["commands"] == [
        {"command": "no-such-command-xyz", "reason": "notFound"},
        {"command": "fails-probe", "reason": "validationFailed"},
    ]


async def test_packaged_paths_are_checked(tmp_path: Path) -> None:
    package = tmp_path / "package"
    arch = host_architecture()
    write_script(package / "bin" / arch / "server", "pass\n")
    plan = parse_launch_plan(
        plan_payload(tmp_path, launch={"kind": "packaged", "path": "bin/${arch}/server"})
    )
    assert (await resolve_launch(plan)).argv == [str(package / "bin" / arch / "server")]
    # Missing, not executable, a symbolic link, a link that leaves the package.
    cases = {
        "bin/missing": "plugin.launch.missing",
        "bin/plain": "plugin.launch.missing",
        "bin/link": "plugin.launch.outsidePackage",
        "escape/server": "plugin.launch.outsidePackage",
    }
    write_script(package / "bin" / "plain", "pass\n", executable=False)
    (package / "bin" / "link").symlink_to(package / "bin" / arch / "server")
    outside = tmp_path / "outside"
    write_script(outside / "server", "pass\n")
    (package / "escape").symlink_to(outside)
    for path, code in cases.items():
        plan = parse_launch_plan(plan_payload(tmp_path, launch={"kind": "packaged", "path": path}))
        with pytest.raises(CoreError) as caught:
            await resolve_launch(plan)
        assert (caught.value.code, field_of(caught.value)) == (code, "launch.path"), path


async def test_runtime_launch_tools_versions_and_dependencies(tmp_path: Path) -> None:
    """A runtime launch: the tool from the host's table (or the PATH), its minimum version,
    the definition's launch template, runtime dependencies exported and first on PATH."""
    package = tmp_path / "package"
    (package / "server").mkdir(parents=True)
    (package / "server" / "main.py").write_text("pass\n", encoding="utf-8")
    base: Any = {
        "requiresTools": ["py", "helper"],
        "runtimeDependencies": [{"tool": "helper"}],
        "arguments": ["--stdio"],
        "tools": {
            "py": {"executable": sys.executable, "version": "3.11.4"},
            "helper": {"executable": "/usr/bin/env"},
        },
    }
    launch: dict[str, JSONValue] = {
        "kind": "runtime",
        "tool": "py",
        "entry": "server/main.py",
        "runtimeArguments": ["-X", "utf8"],
        "minimumVersion": "3.8",
    }
    plan = parse_launch_plan(plan_payload(tmp_path, launch=launch, **base))
    resolved = await resolve_launch(plan, env={})
    entry = str(package / "server" / "main.py")
    assert resolved.argv == [sys.executable, "-X", "utf8", entry, "--stdio"]
    assert resolved.env["LITHE_HELPER_PATH"] == "/usr/bin/env"
    assert resolved.env["PATH"].split(os.pathsep)[0] == "/usr/bin"
    # A user-set LITHE_<TOOL>_PATH takes precedence; it is not overwritten.
    kept = await resolve_launch(plan, env={"LITHE_HELPER_PATH": "/mine"})
    assert "LITHE_HELPER_PATH" not in kept.env

    too_old = parse_launch_plan(
        plan_payload(tmp_path, launch={**launch, "minimumVersion": "3.12"}, **base)
    )
    with pytest.raises(CoreError) as caught:
        await resolve_launch(too_old)
    assert caught.value.code == "plugin.runtime.missing"
    assert (caught.value.details or {})["tool"] == "py"
    # Only the components minimumVersion names are compared: "3" accepts every 3.x.
    three = parse_launch_plan(
        plan_payload(tmp_path, launch={**launch, "minimumVersion": "3"}, **base)
    )
    await resolve_launch(three)

    # No entry in the host's table: the short ID on the child's PATH; its version probed.
    discovered = parse_launch_plan(
        plan_payload(
            tmp_path,
            requiresTools=[PYTHON],
            launch={
                "kind": "runtime",
                "tool": PYTHON,
                "entry": "server/main.py",
                "minimumVersion": "3",
            },
        )
    )
    found = await resolve_launch(discovered, env={"PATH": PY_DIR})
    assert found.argv[1:] == [entry]
    with pytest.raises(CoreError) as caught:
        await resolve_launch(discovered, env={"PATH": str(tmp_path)})
    assert caught.value.details == {"tool": PYTHON, "reason": "notFound"}
    # The host's definition decides the template, and can run no entry at all; the tool
    # code is the caller's (plugin.host.toolUnresolved for a host request).
    custom = parse_launch_plan(
        plan_payload(
            tmp_path,
            requiresTools=["py"],
            launch={"kind": "runtime", "tool": "py", "entry": "server/main.py"},
            arguments=["a"],
            tools={
                "py": {
                    "executable": sys.executable,
                    "launch": ["${executable}", "-I", "${arguments}"],
                }
            },
        )
    )
    assert (await resolve_launch(custom)).argv == [sys.executable, "-I", "a"]
    missing = parse_launch_plan(
        plan_payload(
            tmp_path,
            requiresTools=["zz"],
            launch={"kind": "runtime", "tool": "zz", "entry": "server/main.py"},
        )
    )
    with pytest.raises(CoreError) as caught:
        await resolve_launch(
            missing, env={"PATH": str(tmp_path)}, tool_code="plugin.host.toolUnresolved"
        )
    assert caught.value.code == "plugin.host.toolUnresolved"


async def test_packaged_runtime_is_used_exactly(tmp_path: Path) -> None:
    package = tmp_path / "package"
    arch = host_architecture()
    runtime = package / "runtime" / arch / "bin" / "py"
    runtime.parent.mkdir(parents=True)
    runtime.symlink_to(sys.executable)  # a link: refused, the host starts exactly a file
    (package / "main.py").write_text("pass\n", encoding="utf-8")
    launch: Any = {
        "kind": "runtime",
        "tool": "py",
        "entry": "main.py",
        "packagedRuntime": "runtime/${arch}/bin/py",
    }
    plan = parse_launch_plan(plan_payload(tmp_path, requiresTools=["py"], launch=launch))
    with pytest.raises(CoreError) as caught:
        await resolve_launch(plan)
    assert caught.value.code == "plugin.launch.outsidePackage"
    runtime.unlink()
    shutil.copy(sys.executable, runtime)
    resolved = await resolve_launch(plan, env={"PATH": str(tmp_path)})  # never looked up
    assert resolved.argv == [str(runtime), str(package / "main.py")]


async def test_a_failed_resolution_removes_the_temporary_directory_it_made(tmp_path: Path) -> None:
    plan = parse_launch_plan(
        plan_payload(
            tmp_path,
            temporaryDirectory=str(tmp_path / "scratch"),
            launch={"kind": "systemCommand", "commands": ["no-such-command-xyz"]},
        )
    )
    with pytest.raises(CoreError):
        await resolve_launch(plan)
    assert not exists(tmp_path / "scratch")
    assert is_dir(tmp_path / "state")


# -- lsp.startServer with a launch plan --------------------------------------------------------

SERVER = f"""
import json, os, runpy, sys
with open(sys.argv[1], "w") as f:
    json.dump({{"argv": sys.argv[1:], "cwd": os.getcwd(),
               "lithe": os.environ.get("LITHE_HELPER_PATH")}}, f)
sys.argv = [{FAKE!r}]
runpy.run_path({FAKE!r}, run_name="__main__")
"""


def test_start_payload_rules(tmp_path: Path) -> None:
    plan = plan_payload(tmp_path)
    base: dict[str, JSONValue] = {"serverId": "s", "launchPlan": plan}
    for name in ("executable", "arguments", "initializationOptions"):
        with pytest.raises(CoreError) as caught:
            parse_launch_start({**base, name: []})
        assert field_of(caught.value) == name
    backend = {**base, "launchPlan": {**plan, "backend": True}}
    with pytest.raises(CoreError) as caught:
        parse_launch_start(backend)
    assert field_of(caught.value) == "pluginId"
    with pytest.raises(CoreError) as caught:
        parse_launch_start({**backend, "pluginId": "p", "workingDirectory": str(tmp_path)})
    assert field_of(caught.value) == "workingDirectory"
    # Without a launch plan, the executable and working directory stay required; the root
    # defaults to the working directory (rootUri is optional in the declaration).
    for name in ("executable", "workingDirectory"):
        plain: dict[str, Any] = {
            "serverId": "s",
            "executable": "/bin/true",
            "workingDirectory": str(tmp_path),
            "rootUri": tmp_path.as_uri(),
        }
        del plain[name]
        with pytest.raises(CoreError) as caught:
            parse_start(parse_launch_start(plain)[1])
        assert (caught.value.code, field_of(caught.value)) == ("invalid_request", name)
    plain = {"serverId": "s", "executable": "/bin/true", "workingDirectory": str(tmp_path)}
    assert parse_start(parse_launch_start(plain)[1]).root_uri == tmp_path.as_uri()
    # The plan's owner is the identity the session gets; another one is refused.
    owned = {**backend, "launchPlan": {**plan, "backend": True, "owner": {"pluginID": "p"}}}
    with pytest.raises(CoreError) as caught:
        parse_launch_start({**owned, "pluginId": "q"})
    assert field_of(caught.value) == "pluginId"
    parse_launch_start({**owned, "pluginId": "p"})
    contribution: Any = {"pluginID": "q", "context": {"contextID": "w1", "generation": 1}}
    with pytest.raises(CoreError) as caught:
        parse_launch_start(
            {
                **base,
                "launchPlan": {**plan, "owner": {"pluginID": "p", "version": "1.0.0"}},
                "contribution": contribution,
            }
        )
    assert field_of(caught.value) == "contribution"
    owners: list[Any] = [{"pluginID": ""}, {"pluginID": "p", "extra": 1}, "p"]
    for owner in owners:
        assert field_of(refused({**plan, "owner": owner})) == "owner"
    _, payload = parse_launch_start({**backend, "pluginId": "p"})
    # plugin-contract.md "Plugin backend": ${stateDir} is its root and working directory.
    assert payload.working_directory == str(tmp_path / "state")
    assert payload.root_uri == (tmp_path / "state").as_uri()


async def test_start_server_from_a_launch_plan(tmp_path: Path) -> None:
    """A runtime launch through lsp.startServer: templates expanded in arguments and
    initializationOptions, the dependency exported, the temporary directory removed when
    the server ends; a bad plan answers its code and starts nothing."""
    package = tmp_path / "package"
    package.mkdir()
    (package / "server.py").write_text(SERVER, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    scratch = tmp_path / "scratch"
    launch_plan = plan_payload(
        tmp_path,
        requiresTools=["py", "helper"],
        runtimeDependencies=[{"tool": "helper"}],
        tools={
            "py": {"executable": sys.executable},
            "helper": {"executable": "/usr/bin/env"},
        },
        launch={"kind": "runtime", "tool": "py", "entry": "server.py"},
        arguments=["${stateDir}/seen.json", "${setting:mode}"],
        initializationOptions={"cache": "${stateDir}/cache", "n": 3},
        settings={"mode": "strict"},
        temporaryDirectory=str(scratch),
    )
    async with open_core() as core:
        with pytest.raises(CoreError) as caught:
            await core.call(
                "lsp.startServer",
                {
                    "serverId": "py",
                    "workingDirectory": str(work),
                    "rootUri": work.as_uri(),
                    "launchPlan": {**launch_plan, "requiresTools": ["helper"]},
                },
            )
        assert caught.value.code == "plugin.runtime.undeclared"
        reply = as_obj(
            await core.call(
                "lsp.startServer",
                {
                    "serverId": "py",
                    "workingDirectory": str(work),
                    "rootUri": work.as_uri(),
                    "launchPlan": launch_plan,
                },
            )
        )
        session = Session(core, str(reply["sessionId"]))
        await session.wait_state("ready")
        assert is_dir(scratch)
        params = as_obj((await session.roundtrip("test/initializeParams"))["result"])
        state = tmp_path / "state"
        assert params["initializationOptions"] == {"cache": f"{state}/cache", "n": 3}
        seen = json.loads((state / "seen.json").read_text(encoding="utf-8"))
        assert seen == {
            "argv": [f"{state}/seen.json", "strict"],
            "cwd": str(work),
            "lithe": "/usr/bin/env",
        }
        await session.stop()
        with trio.fail_after(WAIT_S):
            while exists(scratch):  # noqa: ASYNC110 - removed after the session's end
                await trio.sleep(0.05)


async def test_backend_starts_in_its_state_directory(tmp_path: Path) -> None:
    package = tmp_path / "package"
    package.mkdir()
    (package / "server.py").write_text(SERVER, encoding="utf-8")
    state = tmp_path / "state"
    launch_plan = plan_payload(
        tmp_path,
        backend=True,
        requiresTools=["py"],
        tools={"py": {"executable": sys.executable}},
        launch={"kind": "runtime", "tool": "py", "entry": "server.py"},
        arguments=["${stateDir}/seen.json"],
    )
    async with open_core() as core:
        reply = as_obj(
            await core.call(
                "lsp.startServer",
                {"serverId": "backend", "pluginId": "org.example.p", "launchPlan": launch_plan},
            )
        )
        session = Session(core, str(reply["sessionId"]))
        await session.wait_state("ready")
        seen = json.loads((state / "seen.json").read_text(encoding="utf-8"))
        assert seen["cwd"] == str(state)
        params = as_obj((await session.roundtrip("test/initializeParams"))["result"])
        assert params["rootUri"] == state.as_uri()
        await session.stop()


# -- backend-resolved launch -------------------------------------------------------------------

BACKEND = os.path.join(os.path.dirname(__file__), "..", "..", "peers", "plugin_backend.py")
OWNER = "com.example.launcher"


def backend_plan(tmp: Path, **extra: Any) -> dict[str, Any]:
    return plan_payload(
        tmp,
        launch={"kind": "backend", "function": "launch.resolve", "timeoutMilliseconds": 1000},
        owner={"pluginID": OWNER, "version": "1.0.0"},
        toolDefinitions=["py"],
        requiresTools=["py"],
        workspaceStateDirectory=str(tmp / "ws"),
        logDirectory=str(tmp / "log"),
        temporaryDirectory=str(tmp / "scratch"),
        tools={"py": {"executable": sys.executable, "version": "3.11.0"}},
        context={"contextID": "c1", "generation": 1},
        **extra,
    )


def test_backend_resolved_launch_shape(tmp_path: Path) -> None:
    plan = parse_launch_plan(backend_plan(tmp_path))
    assert (plan.kind, plan.function, plan.resolve_timeout_ms, plan.owner) == (
        "backend",
        "launch.resolve",
        1000,
        OWNER,
    )
    default = backend_plan(tmp_path)
    default["launch"] = {"kind": "backend", "function": "launch.resolve"}
    assert parse_launch_plan(default).resolve_timeout_ms == 30_000
    for timeout in (999, 120_001, True):
        bad = backend_plan(tmp_path)
        bad["launch"] = {**bad["launch"], "timeoutMilliseconds": timeout}
        assert field_of(refused(bad)) == "launch.timeoutMilliseconds"
    # The answer carries these: the server declares none of them.
    for name in (
        "arguments",
        "validationArguments",
        "runtimeDependencies",
        "initializationOptions",
    ):
        assert field_of(refused(backend_plan(tmp_path, **{name: []}))) == name
    for name in ("workspaceStateDirectory", "logDirectory", "temporaryDirectory"):
        payload = backend_plan(tmp_path)
        del payload[name]
        error = refused(payload)
        assert (error.code, field_of(error)) == ("plugin.launch.invalidRequest", name)
    # Only a language server uses it.
    assert field_of(refused(backend_plan(tmp_path, backend=True))) == "launch.kind"
    payload = backend_plan(tmp_path)
    del payload["owner"]
    assert field_of(refused(payload)) == "owner"


async def test_backend_resolved_launch_through_the_core(tmp_path: Path) -> None:
    """The owner's backend answers the command line; the answer is decoded and started;
    a failed, timed-out or refused answer ends the start without a process and without
    its scratch directory."""
    functions = {"version": 0, "functions": [{"id": "launch.resolve"}]}
    work = tmp_path / "work"
    work.mkdir()
    scratch = tmp_path / "scratch"
    answer = {
        "executable": {"kind": "tool", "tool": "py"},
        "arguments": ["@fake"],
        "writablePaths": ["@state/cache/db"],
        "workspaceConfiguration": {"py": {"strict": True}},
    }

    async def start_server(**settings: Any) -> JSONObject:
        payload: dict[str, Any] = {
            "serverId": "py",
            "workingDirectory": str(work),
            "rootUri": work.as_uri(),
            "launchPlan": backend_plan(tmp_path, settings=settings),
        }
        return as_obj(await core.call("lsp.startServer", payload))

    async with open_core() as core:
        with pytest.raises(CoreError) as caught:
            await start_server(answer=answer)
        assert caught.value.code == "plugin.function.providerUnavailable"
        backend = as_obj(
            await core.call(
                "lsp.startServer",
                {
                    "serverId": "backend",
                    "executable": sys.executable,
                    "arguments": [BACKEND, json.dumps(functions), json.dumps({"version": 0})],
                    "workingDirectory": str(work),
                    "rootUri": work.as_uri(),
                    "pluginId": OWNER,
                },
            )
        )
        await Session(core, str(backend["sessionId"])).wait_state("ready")

        reply = await start_server(answer=answer)
        session = Session(core, str(reply["sessionId"]))
        await session.wait_state("ready")
        assert is_dir(scratch)
        assert is_dir(tmp_path / "state" / "cache")  # a writable path's parent
        params = as_obj((await session.roundtrip("test/initializeParams"))["result"])
        options = as_obj(params["initializationOptions"])
        assert options["context"] == {"contextID": "c1", "generation": 1}
        assert options["resolveParams"] == {
            "serverID": "py",
            "platform": {"os": "linux", "arch": host_architecture()},
            "stateDirectory": str(tmp_path / "state"),
            "workspaceStateDirectory": str(tmp_path / "ws"),
            "logDirectory": str(tmp_path / "log"),
            "temporaryDirectory": str(scratch),
            "settings": {"answer": answer},
            "tools": {"py": {"executable": sys.executable, "version": "3.11.0"}},
        }
        # The answer's workspace configuration is the one the server is answered from.
        asked: Any = {"method": "workspace/configuration", "params": {"items": [{"section": "py"}]}}
        configuration = as_obj((await session.roundtrip("test/ask", asked))["result"])
        assert configuration["result"] == [{"strict": True}]
        await session.stop()
        with trio.fail_after(WAIT_S):
            while exists(scratch):  # noqa: ASYNC110 - removed after the session's end
                await trio.sleep(0.05)

        cases: list[tuple[dict[str, Any], str]] = [
            ({"mode": "fail"}, "plugin.function.failed"),
            ({"mode": "hang"}, "timed_out"),
            (
                {"answer": {**answer, "executable": {"kind": "tool", "tool": "node"}}},
                "plugin.launch.undeclaredTool",
            ),
            ({"answer": {**answer, "writablePaths": ["/etc/x"]}}, "plugin.launch.unwritablePath"),
            ({"answer": {**answer, "gates": [{"bogus": 1}]}}, "plugin.launch.invalidResult"),
        ]
        for settings, code in cases:
            with pytest.raises(CoreError) as caught:
                await start_server(**settings)
            assert caught.value.code == code, settings
            assert not exists(scratch), settings


async def test_backend_resolved_launch_for_a_changed_context_starts_nothing(
    tmp_path: Path,
) -> None:
    """An answer for a context that closed or has a newer generation ends the start without
    a process (plugin.host.contextExpired), also when the context changes during the call."""
    functions = {"version": 0, "functions": [{"id": "launch.resolve"}]}
    work = tmp_path / "work"
    work.mkdir()
    answer = {"executable": {"kind": "tool", "tool": "py"}, "arguments": ["@fake"]}

    def start_payload(**settings: Any) -> dict[str, Any]:
        plan = backend_plan(tmp_path, settings=settings)
        # Generous: the context change, not this deadline, must end the hanging call.
        plan["launch"]["timeoutMilliseconds"] = 120_000
        return {
            "serverId": "py",
            "workingDirectory": str(work),
            "rootUri": work.as_uri(),
            "launchPlan": plan,
        }

    async def set_contexts(*folders: str) -> None:
        contexts: Any = [{"contextID": "c1", "folders": [{"path": f} for f in folders]}]
        await core.call("workspace.setContexts", {"contexts": contexts})

    async with open_core(plugin_state_root=tmp_path / "plugins") as core:
        await set_contexts(str(work))
        backend = as_obj(
            await core.call(
                "lsp.startServer",
                {
                    "serverId": "backend",
                    "executable": sys.executable,
                    "arguments": [BACKEND, json.dumps(functions), json.dumps({"version": 0})],
                    "workingDirectory": str(work),
                    "rootUri": work.as_uri(),
                    "pluginId": OWNER,
                },
            )
        )
        await Session(core, str(backend["sessionId"])).wait_state("ready")
        started = as_obj(await core.call("lsp.startServer", start_payload(answer=answer)))
        server = Session(core, str(started["sessionId"]))
        await server.wait_state("ready")
        await server.stop()
        # The context changes while the backend works on the answer.
        async with trio.open_nursery() as nursery:

            async def change_soon() -> None:
                await trio.sleep(0.2)
                await set_contexts(str(work), str(tmp_path))

            nursery.start_soon(change_soon)
            with pytest.raises(CoreError) as caught:
                await core.call("lsp.startServer", start_payload(mode="hang"))
        assert (caught.value.code, field_of(caught.value)) == (
            "plugin.host.contextExpired",
            "launchPlan.context",
        )
        # Generation 1 is gone now: refused before the backend is asked.
        with pytest.raises(CoreError) as caught:
            await core.call("lsp.startServer", start_payload(answer=answer))
        assert caught.value.code == "plugin.host.contextExpired"
        assert not exists(tmp_path / "scratch")


@pytest.mark.parametrize(
    ("plan", "code", "fact"),
    [
        ({"arguments": ["${nope}"]}, "plugin.template.invalid", "host.planFailed"),
        (
            {"launch": {"kind": "systemCommand", "commands": ["no-such-command-xyz"]}},
            "plugin.launch.missing",
            "host.executableUnavailable",
        ),
    ],
)
async def test_a_plan_that_starts_nothing_records_its_fact(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    plan: dict[str, Any],
    code: str,
    fact: str,
) -> None:
    """plugin-contract.md "Structured plugin diagnostics": host.planFailed when the launch
    could not be planned, host.executableUnavailable when its executable can't be found; on
    the plugin's channel, also for a server that is a contribution rather than the backend."""
    caplog.set_level(logging.INFO, logger="supervisor.plugins")
    async with open_core() as core:
        with pytest.raises(CoreError) as caught:
            await core.call(
                "lsp.startServer",
                {
                    "serverId": "py",
                    "workingDirectory": str(tmp_path),
                    "rootUri": tmp_path.as_uri(),
                    "contribution": {
                        "pluginID": "org.example.p",
                        "context": {"contextID": "w1", "generation": 1},
                    },
                    "launchPlan": plan_payload(tmp_path, **plan),
                },
            )
    assert caught.value.code == code
    (recorded,) = [r.plugin_fact for r in caplog.records if hasattr(r, "plugin_fact")]
    assert (recorded["code"], recorded["channel"]) == (fact, "plugins/org.example.p/host")
