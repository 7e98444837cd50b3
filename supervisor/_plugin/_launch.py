"""Launch plans: how a plugin's declared process becomes an argv, an environment and directories.

Contract (the plugin contract "Process start", "Runtime launch", "Tool references", "Launch
templates", "Backend-resolved launch"): a process is declared as a launch kind
(``packaged {path}``, ``systemCommand {commands}``, ``runtime {tool, packagedRuntime?,
minimumVersion?, runtimeArguments?, entry}``) plus ``arguments``, ``validationArguments``,
``runtimeDependencies`` and ``initializationOptions`` written as launch templates
(``${pluginDir}``, ``${stateDir}``, ``${workspaceStateDir}``, ``${logDir}``, ``${arch}``,
``${setting:<id>}``). The host expands them, creates the directories the plan needs, checks
the package paths, resolves the executable (``systemCommand`` candidates in order, each
passing the validation probe; a runtime tool by its definition) and starts the process.

Two layers, so that bad input starts nothing:

- :func:`parse_launch_plan` and :func:`decode_resolved_launch` are pure: shapes, template
  variables and their places, bounds; every refusal is a :class:`~protocol.CoreError` with a
  ``plugin.launch.*``, ``plugin.runtime.undeclared`` or ``plugin.template.invalid`` code (or
  ``invalid_request`` for a malformed field) and ``details.field``.
- :func:`resolve_launch` touches the file system and runs probes: it creates the required
  directories, verifies package paths (inside the package, not a symbolic link), finds the
  executable and answers a :class:`ResolvedLaunch`; a missing executable is
  ``plugin.launch.missing``, a missing or too old tool ``plugin.runtime.missing`` with
  ``details: {tool, reason}`` (the reasons of ``plugin.host.toolUnresolved``).

The supervisor keeps no tool registry (the reference's toolchain layers are the embedding
host's): a tool resolves from the plan's ``tools`` table (``{<toolID>: {executable, version?,
home?, launch?}}``, the shape a host passes to a backend-resolved launch), and otherwise by
looking its short ID up on the child's ``PATH`` (the host's tool discovery in the reference).
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import re
import shutil
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

import msgspec
import trio

from protocol import CoreError, echo, invalid_field, json_type
from protocol._payload import argv_item_problem, env_item_problem, path_problem

from .._api._base import decode_payload
from .._api._contract import DEFAULT_RESOLVE_TIMEOUT_MS, BackendLaunch
from .._endpoint import EndpointClosed, JSONRPCError, ReplyWithoutResult
from .._process._oneshot import run_process
from ._relay import INVOKE_METHOD

if TYPE_CHECKING:
    from collections.abc import Mapping

    from protocol import JSONObject, JSONValue

    from .._endpoint import JSONRPCEndpoint

__all__ = (
    "DEFAULT_TOOL_LAUNCH",
    "MAX_ARGUMENTS",
    "MAX_ARGUMENT_BYTES",
    "MAX_ENVIRONMENT",
    "MAX_OPTIONS_BYTES",
    "MAX_REQUIRED_TOOLS",
    "MAX_WRITABLE_PATHS",
    "VALIDATION_TIMEOUT_MS",
    "LaunchPlan",
    "ResolvedLaunch",
    "ToolInstall",
    "call_launch_function",
    "decode_resolved_launch",
    "expand_probe",
    "host_architecture",
    "parse_launch_plan",
    "prepare_directories",
    "remove_temporary_directory",
    "resolve_launch",
    "resolve_params",
)

#: the plugin contract "Backend-resolved launch": at most 1024 arguments of at most 32 KiB.
MAX_ARGUMENTS: Final = 1024
MAX_ARGUMENT_BYTES: Final = 32 * 1024
#: ... at most 256 environment variables, each value at most 32 KiB.
MAX_ENVIRONMENT: Final = 256
#: ... initializationOptions and workspaceConfiguration at most 1 MiB each (serialized).
MAX_OPTIONS_BYTES: Final = 1024 * 1024
#: ... at most 32 writable paths.
MAX_WRITABLE_PATHS: Final = 32
#: the plugin contract "Tool references": requiresTools holds at most 32 IDs.
MAX_REQUIRED_TOOLS: Final = 32
#: Ours: a validation or version probe that has not exited after this many milliseconds
#: fails (the reference gives no bound; a probe is ``--version``-like and quick).
VALIDATION_TIMEOUT_MS: Final = 10_000
#: the plugin contract "Tool references": the launch template of a definition that gives none.
DEFAULT_TOOL_LAUNCH: Final = ("${executable}", "${runtimeArguments}", "${entry}", "${arguments}")

_ARCHITECTURES: Final = ("arm64", "x86_64")
_TOOL_ID: Final = re.compile(
    r"^(?:[a-z0-9][a-z0-9-]*(?:\.[a-z0-9][a-z0-9-]*)*:)?[A-Za-z][\w.-]{0,63}$"
)
_VERSION: Final = re.compile(r"^\d+(?:\.\d+){0,2}$")
_VERSION_IN_TEXT: Final = re.compile(r"(\d+(?:\.\d+)*)")
_VARIABLE: Final = re.compile(r"\$\{([^}]*)\}")
_SETTING_ID: Final = re.compile(r"^[A-Za-z][\w.-]{0,63}$")
_ENV_NAME: Final = re.compile(r"[^A-Za-z0-9]")

#: Where a template is used, and the variables that place refuses (the plugin contract
#: "Launch templates": none of the writable directories nor settings in validationArguments;
#: ${workspaceStateDir} not in a plugin backend, which belongs to no workspace).
Place = Literal["arguments", "validationArguments", "runtimeArguments", "initializationOptions"]
_NOT_IN_VALIDATION: Final = frozenset({"stateDir", "workspaceStateDir", "logDir", "setting"})

_PLAN_FIELDS: Final = frozenset(
    {
        "launch",
        "arguments",
        "validationArguments",
        "runtimeDependencies",
        "initializationOptions",
        "requiresTools",
        "pluginDirectory",
        "stateDirectory",
        "workspaceStateDirectory",
        "logDirectory",
        "temporaryDirectory",
        "architecture",
        "settings",
        "tools",
        "backend",
        "owner",
        "toolDefinitions",
        "context",
    }
)
_ANSWER_FIELDS: Final = frozenset(
    {
        "executable",
        "arguments",
        "environment",
        "initializationOptions",
        "workspaceConfiguration",
        "gates",
        "writablePaths",
    }
)


def host_architecture() -> str:
    """The ``${arch}`` value of this machine: ``arm64`` or ``x86_64`` (another CPU's own name)."""
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return "arm64"
    if machine in ("x86_64", "amd64"):
        return "x86_64"
    return machine


@dataclass(frozen=True)
class ToolInstall:
    """One tool's installation as the embedding host resolved it.

    Attributes:
        executable: Absolute path of the tool's executable.
        version: Its version (``"21.6.1"``), or None when unknown (then a ``minimumVersion``
            is checked by running ``<executable> --version``).
        home: Its installation directory, or None.
        launch: The definition's launch template (the plugin contract "Tool references").
    """

    executable: str
    version: str | None = None
    home: str | None = None
    launch: tuple[str, ...] = DEFAULT_TOOL_LAUNCH


@dataclass(frozen=True)
class LaunchPlan:
    """A validated launch plan request (see :func:`parse_launch_plan`); nothing resolved yet.

    ``kind`` is ``packaged`` (``path``), ``systemCommand`` (``commands``) or ``tool`` (a
    runtime launch: ``tool``, ``entry``, ``runtime_arguments``, ``packaged_runtime``,
    ``minimum_version``). Templates are kept unexpanded; directories are absolute.
    """

    kind: Literal["packaged", "systemCommand", "tool", "backend"]
    plugin_dir: str
    state_dir: str
    path: str | None = None
    commands: tuple[str, ...] = ()
    tool: str | None = None
    entry: str | None = None
    runtime_arguments: tuple[str, ...] = ()
    packaged_runtime: str | None = None
    minimum_version: str | None = None
    arguments: tuple[str, ...] = ()
    validation_arguments: tuple[str, ...] | None = None
    runtime_dependencies: tuple[str, ...] = ()
    initialization_options: JSONValue = None
    requires_tools: frozenset[str] = frozenset()
    workspace_state_dir: str | None = None
    log_dir: str | None = None
    temporary_dir: str | None = None
    architecture: str = field(default_factory=host_architecture)
    settings: Mapping[str, JSONValue] = field(default_factory=dict)
    tools: Mapping[str, ToolInstall] = field(default_factory=dict)
    backend: bool = False
    #: A backend-resolved answer's own environment and writable paths (absolute).
    environment: Mapping[str, str] = field(default_factory=dict)
    writable_paths: tuple[str, ...] = ()
    #: A backend-resolved answer's arguments are final, not templates.
    expanded: bool = False
    #: ``owner.pluginID``: the plugin whose backend answers a backend-resolved launch.
    owner: str | None = None
    #: A backend-resolved launch: the plugin function, its timeout (ms), the tool IDs the
    #: plugin defines, and the workspace context the call carries.
    function: str | None = None
    resolve_timeout_ms: int = DEFAULT_RESOLVE_TIMEOUT_MS
    tool_definitions: frozenset[str] = frozenset()
    context: JSONValue = None


@dataclass(frozen=True)
class ResolvedLaunch:
    """What to start: the result of :func:`resolve_launch`.

    Attributes:
        argv: The program (absolute path) and its arguments, expanded.
        env: Changes to the supervisor's environment for the process (``LITHE_<TOOL>_PATH``,
            ``PATH`` with the runtime dependencies' directories first, a resolved answer's
            variables).
        cwd: The working directory a plugin backend starts in (its state directory), else None.
        initialization_options: The expanded ``initializationOptions`` (None when absent).
        temporary_dir: The scratch directory this start created, which the caller removes
            (:func:`remove_temporary_directory`) when the process ends; None when there is none.
        required_directories: The directories created before the start, by kind.
    """

    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    initialization_options: JSONValue
    temporary_dir: str | None
    required_directories: Mapping[str, str]


# -- errors ---------------------------------------------------------------------------------


def _refuse(code: str, message: str, field_name: str, **details: JSONValue) -> CoreError:
    return CoreError(code, message, {"field": field_name, **details})


def _template_invalid(message: str, field_name: str) -> CoreError:
    return _refuse("plugin.template.invalid", message, field_name)


# -- pure readers -----------------------------------------------------------------------------


def _strings(value: JSONValue, field_name: str, *, code: str = "invalid_request") -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _refuse(code, f"{field_name} must be an array of strings", field_name)
    if len(value) > MAX_ARGUMENTS:
        raise _refuse(code, f"{field_name} has more than {MAX_ARGUMENTS} items", field_name)
    out: list[str] = []
    for index, item in enumerate(value):
        problem = argv_item_problem(1 + index, item, field_name)
        if problem is not None:
            raise _refuse(code, problem, f"{field_name}[{index}]")
        assert isinstance(item, str)
        if len(item.encode()) > MAX_ARGUMENT_BYTES:
            raise _refuse(
                code, f"{field_name}[{index}] is over {MAX_ARGUMENT_BYTES} bytes", field_name
            )
        out.append(item)
    return out


def _directory(payload: JSONObject, name: str, *, required: bool) -> str | None:
    value = payload.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or path_problem(value, name) is not None:
        raise _refuse(
            "plugin.launch.invalidRequest", f"{name} must be an absolute directory path", name
        )
    if not os.path.isabs(value):
        raise _refuse("plugin.launch.invalidRequest", f"{name} must be absolute", name)
    return os.path.normpath(value)


def _package_relative(value: JSONValue, field_name: str, *, allow_arch: bool) -> str:
    """A package-relative path: no leading ``/``, no ``.``/``..`` components."""
    if not isinstance(value, str) or path_problem(value, field_name) is not None:
        raise invalid_field(field_name, f"{field_name} must be a package-relative path")
    for name in _VARIABLE.findall(value):
        if not (allow_arch and name == "arch"):
            raise _template_invalid(
                f"{field_name} may use no template variable but ${{arch}}"
                if allow_arch
                else f"{field_name} may use no template variable",
                field_name,
            )
    parts = value.split("/")
    if value.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise _refuse(
            "plugin.launch.outsidePackage",
            f"{field_name} must be a path inside the package without . or .. components",
            field_name,
        )
    return value


def _tool_id(value: JSONValue, field_name: str, requires: frozenset[str]) -> str:
    if not isinstance(value, str) or not _TOOL_ID.match(value):
        raise invalid_field(field_name, f"{field_name} must be a tool-definition ID")
    if value not in requires:
        raise _refuse(
            "plugin.runtime.undeclared",
            f"tool {echo(value)} is not listed in requiresTools",
            field_name,
        )
    return value


def _check_template(value: str, field_name: str, place: Place, *, backend: bool) -> None:
    """Refuse unknown and misplaced variables and an unguarded ``${pluginDir}``."""
    names = _VARIABLE.findall(value)
    if "${" in _VARIABLE.sub("", value):
        raise _template_invalid(f"{field_name} has an unterminated template variable", field_name)
    for name in names:
        base = "setting" if name.startswith("setting:") else name
        if base not in ("pluginDir", "stateDir", "workspaceStateDir", "logDir", "arch", "setting"):
            raise _template_invalid(f"{field_name} uses unknown variable ${{{name}}}", field_name)
        if base == "setting" and not _SETTING_ID.match(name[len("setting:") :]):
            raise _template_invalid(f"{field_name} names a malformed setting", field_name)
        if place == "validationArguments" and base in _NOT_IN_VALIDATION:
            raise _template_invalid(
                f"${{{name}}} is not available in validationArguments", field_name
            )
        if backend and base == "workspaceStateDir":
            raise _template_invalid(
                "${workspaceStateDir} is not available to a plugin backend", field_name
            )
    if names.count("pluginDir") > 1:
        raise _template_invalid(f"{field_name} uses ${{pluginDir}} more than once", field_name)
    if "pluginDir" in names:
        rest = value.split("${pluginDir}", 1)[1]
        if not rest.startswith("/"):
            raise _template_invalid(
                f"{field_name}: ${{pluginDir}} must be followed by a /-rooted package path",
                field_name,
            )
        inner = rest[1:]
        if any(n != "arch" for n in _VARIABLE.findall(inner)):
            raise _template_invalid(
                f"{field_name}: a package path may vary only by ${{arch}}", field_name
            )
        if any(part in (".", "..") for part in inner.split("/")):
            raise _refuse(
                "plugin.launch.outsidePackage",
                f"{field_name}: the package path must not use . or ..",
                field_name,
            )


def _check_options(value: JSONValue, field_name: str, *, backend: bool) -> None:
    if isinstance(value, str):
        _check_template(value, field_name, "initializationOptions", backend=backend)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_options(item, f"{field_name}[{index}]", backend=backend)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_options(item, f"{field_name}.{key}", backend=backend)


def _json_bytes(value: JSONValue) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _read_tools(value: JSONValue) -> dict[str, ToolInstall]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_field("tools", "tools must be an object of tool installations")
    tools: dict[str, ToolInstall] = {}
    for tool_id, raw in value.items():
        where = f"tools.{tool_id}"
        if not _TOOL_ID.match(tool_id) or not isinstance(raw, dict):
            raise invalid_field(where, f"{where} must be an installation object")
        executable = raw.get("executable")
        if (
            not isinstance(executable, str)
            or path_problem(executable, where) is not None
            or not os.path.isabs(executable)
        ):
            raise invalid_field(f"{where}.executable", "executable must be an absolute path")
        version = raw.get("version")
        if version is not None and not isinstance(version, str):
            raise invalid_field(f"{where}.version", "version must be a string")
        home = raw.get("home")
        if home is not None and not isinstance(home, str):
            raise invalid_field(f"{where}.home", "home must be a string")
        launch = raw.get("launch")
        template: tuple[str, ...] = DEFAULT_TOOL_LAUNCH
        if launch is not None:
            template = tuple(_strings(launch, f"{where}.launch"))
            if template[:1] != ("${executable}",):
                raise invalid_field(f"{where}.launch", "launch must start with ${executable}")
        tools[tool_id] = ToolInstall(executable, version, home, template)
    return tools


def parse_launch_plan(payload: JSONValue, *, backend: bool = False) -> LaunchPlan:
    """Validate a launch plan request; nothing is touched on disk, nothing is started.

    ``payload`` is ``{launch, arguments?, validationArguments?, runtimeDependencies?:
    [{tool}], initializationOptions?, requiresTools?, pluginDirectory, stateDirectory,
    workspaceStateDirectory?, logDirectory?, temporaryDirectory?, architecture?, settings?,
    tools?, backend?}`` (the plugin contract "Process start", "Launch templates"): the process
    fields as the manifest declares them, plus the directories and values the host chose.

    Args:
        payload: The plan request (a JSON object).
        backend: The process is the plugin backend (``backend: true`` in the payload too).

    Raises:
        CoreError: ``invalid_request`` for a malformed field; ``plugin.launch.invalidRequest``
            for a missing or relative directory, a template needing an absent one
            (``${workspaceStateDir}``, ``${logDir}``) or an unknown architecture;
            ``plugin.template.invalid`` for an unknown or misplaced variable;
            ``plugin.runtime.undeclared`` for a tool ``requiresTools`` does not list;
            ``plugin.launch.outsidePackage`` for a package path with ``..``; always with
            ``details.field``.
    """
    if not isinstance(payload, dict):
        raise invalid_field("launchPlan", f"launchPlan must be an object, not {json_type(payload)}")
    unknown = sorted(set(payload) - _PLAN_FIELDS)
    if unknown:
        raise invalid_field(unknown[0], f"launchPlan has an unknown field {echo(unknown[0])}")
    raw_backend = payload.get("backend", False)
    if not isinstance(raw_backend, bool):
        raise invalid_field("backend", "backend must be a boolean")
    backend = backend or raw_backend
    plugin_dir = _directory(payload, "pluginDirectory", required=True)
    state_dir = _directory(payload, "stateDirectory", required=True)
    assert plugin_dir is not None
    assert state_dir is not None
    workspace_state_dir = _directory(payload, "workspaceStateDirectory", required=False)
    log_dir = _directory(payload, "logDirectory", required=False)
    temporary_dir = _directory(payload, "temporaryDirectory", required=False)
    architecture = payload.get("architecture", host_architecture())
    if architecture not in _ARCHITECTURES:
        raise _refuse(
            "plugin.launch.invalidRequest",
            f"unknown architecture {echo(architecture)}",
            "architecture",
        )
    assert isinstance(architecture, str)
    settings = payload.get("settings", {})
    if not isinstance(settings, dict):
        raise invalid_field("settings", "settings must be an object")

    requires = _required_tools(payload)
    arguments, validation, options = _plan_arguments(payload, backend=backend)
    dependencies = _runtime_dependencies(payload, requires)

    launch = payload.get("launch")
    if not isinstance(launch, dict):
        raise invalid_field("launch", "launch must be an object {kind, ...}")
    common: dict[str, object] = {
        "plugin_dir": plugin_dir,
        "state_dir": state_dir,
        "arguments": tuple(arguments),
        "validation_arguments": None if validation is None else tuple(validation),
        "runtime_dependencies": tuple(dependencies),
        "initialization_options": options,
        "requires_tools": requires,
        "workspace_state_dir": workspace_state_dir,
        "log_dir": log_dir,
        "temporary_dir": temporary_dir,
        "architecture": architecture,
        "settings": dict(settings),
        "tools": _read_tools(payload.get("tools")),
        "backend": backend,
        "owner": _owner(payload.get("owner")),
    }
    plan = _plan_of_kind(launch, common, payload, dependencies, validation, backend=backend)
    _check_directories_present(plan)
    return plan


def _plan_of_kind(
    launch: dict[str, JSONValue],
    common: dict[str, object],
    payload: dict[str, JSONValue],
    dependencies: list[str],
    validation: list[str] | None,
    *,
    backend: bool,
) -> LaunchPlan:
    """The plan of ``launch.kind`` (packaged, systemCommand, runtime or backend)."""
    kind = launch.get("kind")
    plan: LaunchPlan
    if kind == "packaged":
        _only(launch, {"kind", "path"})
        path = _package_relative(launch.get("path"), "launch.path", allow_arch=True)
        plan = LaunchPlan(kind="packaged", path=path, **common)  # type: ignore[arg-type]
    elif kind == "systemCommand":
        _only(launch, {"kind", "commands"})
        commands = _strings(launch.get("commands"), "launch.commands")
        if not commands or any("/" in c or not c or "$" in c for c in commands):
            raise invalid_field("launch.commands", "commands must be bare command names")
        plan = LaunchPlan(kind="systemCommand", commands=tuple(commands), **common)  # type: ignore[arg-type]
    elif kind == "runtime":
        plan = _runtime_launch(launch, common, dependencies, validation, backend=backend)
    elif kind == "backend":
        plan = _backend_launch(payload, launch, common)
    else:
        raise invalid_field(
            "launch.kind", 'launch.kind must be "packaged", "systemCommand" or "runtime"'
        )
    return plan


def _runtime_launch(
    launch: dict[str, JSONValue],
    common: dict[str, object],
    dependencies: list[str],
    validation: list[str] | None,
    *,
    backend: bool,
) -> LaunchPlan:
    """``launch {kind: "runtime", tool, entry, packagedRuntime?, minimumVersion?,
    runtimeArguments?}``: the entry run by a tool the plan requires."""
    requires = common["requires_tools"]
    assert isinstance(requires, frozenset)
    _only(
        launch,
        {"kind", "tool", "packagedRuntime", "minimumVersion", "runtimeArguments", "entry"},
    )
    tool = _tool_id(launch.get("tool"), "launch.tool", requires)
    if tool in dependencies:
        raise invalid_field(
            "runtimeDependencies", "the launch tool must not be repeated in runtimeDependencies"
        )
    if validation is not None:
        raise invalid_field(
            "validationArguments", "a runtime launch declares no validationArguments"
        )
    entry = _package_relative(launch.get("entry"), "launch.entry", allow_arch=False)
    packaged_runtime = None
    if "packagedRuntime" in launch:
        packaged_runtime = _package_relative(
            launch["packagedRuntime"], "launch.packagedRuntime", allow_arch=True
        )
    minimum = launch.get("minimumVersion")
    if minimum is not None:
        if not isinstance(minimum, str) or not _VERSION.match(minimum):
            raise invalid_field(
                "launch.minimumVersion", "minimumVersion is one to three dot-separated numbers"
            )
        if packaged_runtime is not None:
            raise invalid_field("launch.minimumVersion", "packagedRuntime excludes minimumVersion")
    runtime_arguments = _strings(launch.get("runtimeArguments"), "launch.runtimeArguments")
    for index, item in enumerate(runtime_arguments):
        _check_template(
            item, f"launch.runtimeArguments[{index}]", "runtimeArguments", backend=backend
        )
    return LaunchPlan(
        kind="tool",
        tool=tool,
        entry=entry,
        packaged_runtime=packaged_runtime,
        minimum_version=minimum,
        runtime_arguments=tuple(runtime_arguments),
        **common,  # type: ignore[arg-type]
    )


def _required_tools(payload: dict[str, JSONValue]) -> frozenset[str]:
    """``requiresTools``: distinct tool-definition IDs, at most :data:`MAX_REQUIRED_TOOLS`."""
    requires_list = _strings(payload.get("requiresTools", []), "requiresTools")
    if len(requires_list) > MAX_REQUIRED_TOOLS:
        raise invalid_field("requiresTools", f"requiresTools has more than {MAX_REQUIRED_TOOLS}")
    if len(set(requires_list)) != len(requires_list):
        raise invalid_field("requiresTools", "requiresTools lists a tool twice")
    for index, tool in enumerate(requires_list):
        if not _TOOL_ID.match(tool):
            raise invalid_field(f"requiresTools[{index}]", "not a tool-definition ID")
    return frozenset(requires_list)


def _plan_arguments(
    payload: dict[str, JSONValue], *, backend: bool
) -> tuple[list[str], list[str] | None, JSONValue]:
    """``arguments``, ``validationArguments`` (``None`` when absent) and
    ``initializationOptions``, their templates checked."""
    arguments = _strings(payload.get("arguments"), "arguments")
    for index, item in enumerate(arguments):
        _check_template(item, f"arguments[{index}]", "arguments", backend=backend)
    validation: list[str] | None = None
    if "validationArguments" in payload:
        validation = _strings(payload["validationArguments"], "validationArguments")
        for index, item in enumerate(validation):
            _check_template(
                item, f"validationArguments[{index}]", "validationArguments", backend=backend
            )
    options = payload.get("initializationOptions")
    if options is not None:
        if _json_bytes(options) > MAX_OPTIONS_BYTES:
            raise invalid_field("initializationOptions", "initializationOptions is over 1 MiB")
        _check_options(options, "initializationOptions", backend=backend)
    return arguments, validation, options


def _runtime_dependencies(payload: dict[str, JSONValue], requires: frozenset[str]) -> list[str]:
    """``runtimeDependencies [{tool}]``: tools the plan requires (``requiresTools``)."""
    dependencies: list[str] = []
    raw_deps = payload.get("runtimeDependencies", [])
    if not isinstance(raw_deps, list):
        raise invalid_field("runtimeDependencies", "runtimeDependencies must be an array")
    for index, dep in enumerate(raw_deps):
        where = f"runtimeDependencies[{index}].tool"
        if not isinstance(dep, dict):
            raise invalid_field(where, "a runtime dependency is an object {tool}")
        dependencies.append(_tool_id(dep.get("tool"), where, requires))
    return dependencies


def _owner(value: JSONValue) -> str | None:
    """``owner {pluginID, version?}``: the installation the plan is for; its plugin ID."""
    if value is None:
        return None
    plugin_id = value.get("pluginID") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or set(value) - {"pluginID", "version"}
        or not isinstance(plugin_id, str)
        or not plugin_id
        or not isinstance(value.get("version", ""), str)
    ):
        raise invalid_field("owner", "owner must be {pluginID, version?}")
    return plugin_id


def _backend_launch(
    payload: JSONObject, launch: JSONObject, common: dict[str, object]
) -> LaunchPlan:
    """the plugin contract "Backend-resolved launch": only a language server, with all four
    directories and none of the fields the answer carries."""
    _only(launch, {f.encode_name for f in msgspec.structs.fields(BackendLaunch)})
    if common["backend"]:
        raise invalid_field("launch.kind", "a plugin backend can not resolve its own launch")
    for name in (
        "arguments",
        "validationArguments",
        "runtimeDependencies",
        "initializationOptions",
    ):
        if name in payload:
            raise invalid_field(name, f"a backend-resolved launch declares no {name}")
    for name, key in (
        ("workspaceStateDirectory", "workspace_state_dir"),
        ("logDirectory", "log_dir"),
        ("temporaryDirectory", "temporary_dir"),
    ):
        if common[key] is None:
            raise _refuse(
                "plugin.launch.invalidRequest", f"a backend-resolved launch needs {name}", name
            )
    try:
        declared: BackendLaunch = decode_payload("launch", BackendLaunch, launch)
    except CoreError as exc:
        field_name = exc.details.get("field") if isinstance(exc.details, dict) else None
        raise invalid_field(f"launch.{field_name}", exc.message) from None
    function = declared.function
    if not _SETTING_ID.match(function):
        raise invalid_field("launch.function", "launch.function must be a plugin function ID")
    if common["owner"] is None:
        raise invalid_field("owner", "a backend-resolved launch needs owner {pluginID}")
    definitions = _strings(payload.get("toolDefinitions"), "toolDefinitions")
    context = payload.get("context")
    if context is not None and not isinstance(context, dict):
        raise invalid_field("context", "context must be an object")
    return LaunchPlan(
        kind="backend",
        function=function,
        resolve_timeout_ms=declared.timeout_milliseconds,
        tool_definitions=frozenset(definitions),
        context=context,
        **common,  # type: ignore[arg-type]
    )


def resolve_params(plan: LaunchPlan, server_id: str) -> JSONObject:
    """The ``resolveParams`` of a backend-resolved launch (the plugin contract): ``{serverID,
    platform: {os, arch}, stateDirectory, workspaceStateDirectory, logDirectory,
    temporaryDirectory, settings}``."""
    params: JSONObject = {
        "serverID": server_id,
        "platform": {"os": platform.system().lower(), "arch": plan.architecture},
        "stateDirectory": plan.state_dir,
        "settings": dict(plan.settings),
    }
    for name, value in (
        ("workspaceStateDirectory", plan.workspace_state_dir),
        ("logDirectory", plan.log_dir),
        ("temporaryDirectory", plan.temporary_dir),
    ):
        if value is not None:
            params[name] = value
    return params


def _only(launch: JSONObject, allowed: set[str]) -> None:
    extra = sorted(set(launch) - allowed)
    if extra:
        raise invalid_field(f"launch.{extra[0]}", f"launch has an unknown field {echo(extra[0])}")


def _templates(plan: LaunchPlan) -> list[str]:
    values = [*plan.arguments, *plan.runtime_arguments]
    stack: list[JSONValue] = [plan.initialization_options]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            values.append(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return values


def _check_directories_present(plan: LaunchPlan) -> None:
    """the plugin contract "Launch templates": a template needing an absent directory is
    ``plugin.launch.invalidRequest``; so is a setting the request carries no value for."""
    used = {name for value in _templates(plan) for name in _VARIABLE.findall(value)}
    if "workspaceStateDir" in used and plan.workspace_state_dir is None:
        raise _refuse(
            "plugin.launch.invalidRequest",
            "a template uses ${workspaceStateDir} but workspaceStateDirectory is absent",
            "workspaceStateDirectory",
        )
    if "logDir" in used and plan.log_dir is None:
        raise _refuse(
            "plugin.launch.invalidRequest",
            "a template uses ${logDir} but logDirectory is absent",
            "logDirectory",
        )
    for name in sorted(used):
        if name.startswith("setting:") and name[len("setting:") :] not in plan.settings:
            raise _template_invalid(
                f"${{{name}}} names a setting the request has no value for", "settings"
            )


# -- the backend-resolved answer ---------------------------------------------------------------


def decode_resolved_launch(
    plan: LaunchPlan, answer: JSONValue, *, tool_definitions: frozenset[str]
) -> tuple[LaunchPlan, JSONValue, tuple[JSONValue, ...]]:
    """Decode a backend-resolved launch answer into an ordinary plan (pure).

    the plugin contract "Backend-resolved launch": the answer is ``{executable: {kind:
    "packaged", path} | {kind: "tool", tool}, arguments?, environment?,
    initializationOptions?, workspaceConfiguration?, gates?, writablePaths?}``; an unknown
    field is refused.

    Args:
        plan: The first step's plan (its directories; all four must be present).
        answer: The backend function's result.
        tool_definitions: The tool IDs the plugin defines.

    Returns:
        ``(plan, workspaceConfiguration, gates)``: the plan to resolve (arguments final, not
        templates), the answer's workspace configuration (None when absent) and its raw gates
        (checked by the session policy's reader).

    Raises:
        CoreError: ``plugin.launch.invalidResult`` (malformed, unknown field, over a bound:
            1024 arguments x 32 KiB, 256 variables x 32 KiB, 1 MiB options, 8 gates, 32
            writable paths), ``plugin.launch.outsidePackage``, ``plugin.launch.undeclaredTool``,
            ``plugin.launch.unwritablePath``, ``plugin.launch.invalidRequest`` (a directory of
            the four is missing); always with ``details.field``.
    """
    bad = "plugin.launch.invalidResult"
    dirs = {
        "stateDirectory": plan.state_dir,
        "workspaceStateDirectory": plan.workspace_state_dir,
        "logDirectory": plan.log_dir,
        "temporaryDirectory": plan.temporary_dir,
    }
    for name, directory in dirs.items():
        if directory is None:
            raise _refuse(
                "plugin.launch.invalidRequest", f"a backend-resolved launch needs {name}", name
            )
    if not isinstance(answer, dict):
        raise _refuse(bad, "the launch answer must be an object", "result")
    unknown = sorted(set(answer) - _ANSWER_FIELDS)
    if unknown:
        raise _refuse(bad, f"the launch answer has an unknown field {echo(unknown[0])}", unknown[0])
    executable = answer.get("executable")
    if not isinstance(executable, dict):
        raise _refuse(bad, "executable must be an object {kind, ...}", "executable")
    arguments = tuple(_strings(answer.get("arguments"), "arguments", code=bad))
    environment = _answer_environment(answer.get("environment"))
    options = answer.get("initializationOptions")
    config = answer.get("workspaceConfiguration")
    for name, value in (("initializationOptions", options), ("workspaceConfiguration", config)):
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _refuse(bad, f"{name} must be an object", name)
        if _json_bytes(value) > MAX_OPTIONS_BYTES:
            raise _refuse(bad, f"{name} is over 1 MiB", name)
    gates = answer.get("gates", [])
    if not isinstance(gates, list) or len(gates) > 8:
        raise _refuse(bad, "gates must be an array of at most 8 gates", "gates")
    writable = _writable_paths(answer.get("writablePaths"), [v for v in dirs.values() if v])

    kind = executable.get("kind")
    common: dict[str, object] = {
        **{k: getattr(plan, k) for k in ("plugin_dir", "state_dir", "workspace_state_dir")},
        "log_dir": plan.log_dir,
        "temporary_dir": plan.temporary_dir,
        "architecture": plan.architecture,
        "settings": plan.settings,
        "tools": plan.tools,
        "arguments": arguments,
        "initialization_options": options,
        "environment": environment,
        "writable_paths": writable,
        "expanded": True,
    }
    decoded: LaunchPlan
    if kind == "packaged":
        if set(executable) - {"kind", "path"}:
            raise _refuse(bad, "a packaged executable is {kind, path}", "executable")
        path = executable.get("path")
        if not isinstance(path, str) or path_problem(path, "executable.path") is not None:
            raise _refuse(bad, "executable.path must be a package path", "executable.path")
        if path.startswith("/") or any(p in ("", ".", "..") for p in path.split("/")):
            raise _refuse(
                "plugin.launch.outsidePackage",
                "the packaged executable leaves the plugin package",
                "executable.path",
            )
        decoded = LaunchPlan(kind="packaged", path=path, **common)  # type: ignore[arg-type]
    elif kind == "tool":
        if set(executable) - {"kind", "tool"}:
            raise _refuse(bad, "a tool executable is {kind, tool}", "executable")
        tool = executable.get("tool")
        if not isinstance(tool, str) or tool not in tool_definitions:
            raise _refuse(
                "plugin.launch.undeclaredTool",
                f"tool {echo(tool)} is not one of the plugin's tool definitions",
                "executable.tool",
            )
        decoded = LaunchPlan(
            kind="tool",
            tool=tool,
            requires_tools=frozenset({tool}),
            **common,  # type: ignore[arg-type]
        )
    else:
        raise _refuse(bad, 'executable.kind must be "packaged" or "tool"', "executable.kind")
    return decoded, config, tuple(gates)


def _answer_environment(value: JSONValue) -> dict[str, str]:
    bad = "plugin.launch.invalidResult"
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse(bad, "environment must be an object of strings", "environment")
    if len(value) > MAX_ENVIRONMENT:
        raise _refuse(bad, f"environment has more than {MAX_ENVIRONMENT} variables", "environment")
    env: dict[str, str] = {}
    for key, item in value.items():
        problem = env_item_problem(key, item, "environment")
        if problem is not None or not isinstance(item, str):
            raise _refuse(bad, problem or "environment values must be strings", "environment")
        if len(item.encode()) > MAX_ARGUMENT_BYTES:
            raise _refuse(bad, f"environment[{echo(key)}] is over 32 KiB", "environment")
        env[key] = item
    return env


def _writable_paths(value: JSONValue, roots: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_WRITABLE_PATHS:
        raise _refuse(
            "plugin.launch.invalidResult",
            f"writablePaths must be an array of at most {MAX_WRITABLE_PATHS} paths",
            "writablePaths",
        )
    out: set[str] = set()
    for index, item in enumerate(value):
        where = f"writablePaths[{index}]"
        if not isinstance(item, str) or path_problem(item, where) is not None:
            raise _refuse("plugin.launch.invalidResult", f"{where} must be a path", where)
        parts = item.split("/")
        inside = os.path.isabs(item) and any(
            item == root or item.startswith(root.rstrip("/") + "/") for root in roots
        )
        if not inside or any(p in (".", "..") for p in parts):
            raise _refuse(
                "plugin.launch.unwritablePath",
                f"{where} lies outside the state, workspace state, log and temporary directories",
                where,
            )
        out.add(item.rstrip("/") or "/")
    return tuple(sorted(out))


# -- resolution (file system, probes) -----------------------------------------------------------


def _values(plan: LaunchPlan) -> dict[str, str]:
    values = {"pluginDir": plan.plugin_dir, "stateDir": plan.state_dir, "arch": plan.architecture}
    if plan.workspace_state_dir is not None:
        values["workspaceStateDir"] = plan.workspace_state_dir
    if plan.log_dir is not None:
        values["logDir"] = plan.log_dir
    return values


def _setting_text(value: JSONValue) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":"))


def _expand(value: str, plan: LaunchPlan) -> str:
    values = _values(plan)

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("setting:"):
            return _setting_text(plan.settings[name[len("setting:") :]])
        return values[name]

    return _VARIABLE.sub(one, value)


def _expand_options(value: JSONValue, plan: LaunchPlan) -> JSONValue:
    if isinstance(value, str):
        return _expand(value, plan)
    if isinstance(value, list):
        return [_expand_options(item, plan) for item in value]
    if isinstance(value, dict):
        return {key: _expand_options(item, plan) for key, item in value.items()}
    return value


def _package_file(plan: LaunchPlan, relative: str, field_name: str, code: str) -> str:
    """The absolute path of a package file, checked: inside the package after resolving
    links, not itself a symbolic link, a regular file."""
    path = os.path.join(plan.plugin_dir, relative.replace("${arch}", plan.architecture))
    root = os.path.realpath(plan.plugin_dir)
    real = os.path.realpath(path)
    if not (real == root or real.startswith(root.rstrip("/") + "/")):
        raise _refuse(
            "plugin.launch.outsidePackage", f"{field_name} leaves the plugin package", field_name
        )
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        raise _refuse(code, f"{field_name} does not exist in the package", field_name) from None
    if stat.S_ISLNK(mode):
        raise _refuse(
            "plugin.launch.outsidePackage", f"{field_name} is a symbolic link", field_name
        )
    if not stat.S_ISREG(mode):
        raise _refuse(code, f"{field_name} is not a file", field_name)
    return path


def _executable(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) and os.access(path, os.X_OK)


def _merged_env(plan: LaunchPlan, env: Mapping[str, str | None] | None) -> dict[str, str]:
    merged = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


async def _probe(argv: list[str], env: Mapping[str, str | None]) -> tuple[bool, str]:
    """Run a probe; ``(exited 0, stdout+stderr)``; a probe that can't start fails."""
    try:
        result = await run_process(
            argv, env=env, timeout_ms=VALIDATION_TIMEOUT_MS, max_output_bytes=64 * 1024
        )
    except CoreError:
        return False, ""
    return result.exit_code == 0 and not result.timed_out, result.stdout + result.stderr


async def _tool_executable(
    plan: LaunchPlan,
    tool: str,
    minimum: str | None,
    env: Mapping[str, str | None],
    code: str,
) -> ToolInstall:
    """Resolve a tool: the plan's ``tools`` entry, else its short ID on the child's PATH."""
    install = plan.tools.get(tool)
    if install is None:
        short = tool.rsplit(":", 1)[-1]
        found = shutil.which(short, path=os.pathsep.join(os.get_exec_path(dict(env))))  # type: ignore[arg-type]
        if found is None:
            raise CoreError(
                code,
                f"tool {echo(tool)} resolves to no executable",
                {"tool": tool, "reason": "notFound"},
            )
        install = ToolInstall(found if os.path.isabs(found) else os.path.join(os.getcwd(), found))
    if not _executable(install.executable):
        raise CoreError(
            code, f"tool {echo(tool)} is not executable", {"tool": tool, "reason": "unusable"}
        )
    if minimum is not None:
        version = install.version
        if version is None:
            ok, output = await _probe([install.executable, "--version"], env)
            match = _VERSION_IN_TEXT.search(output) if ok else None
            version = match.group(1) if match else None
        wanted = _version_tuple(minimum)
        if version is None or not re.match(r"^\d+(\.\d+)*", version):
            raise CoreError(
                code,
                f"the version of tool {echo(tool)} cannot be read",
                {"tool": tool, "reason": "notFound"},
            )
        have = _version_tuple(re.match(r"^\d+(?:\.\d+)*", version).group(0))  # type: ignore[union-attr]
        if have[: len(wanted)] < wanted:
            raise CoreError(
                code,
                f"tool {echo(tool)} is version {version}, older than {minimum}",
                {"tool": tool, "reason": "notFound", "version": version[:64]},
            )
    return install


def _splice(template: tuple[str, ...], parts: Mapping[str, list[str]]) -> list[str]:
    """Expand a definition's launch template: a list variable standing alone is spliced."""
    argv: list[str] = []
    for item in template:
        if item in ("${runtimeArguments}", "${arguments}", "${entry}"):
            argv.extend(parts[item[2:-1]])
        else:
            argv.append(item.replace("${executable}", parts["executable"][0]))
    return argv


def _env_name(tool: str) -> str:
    return "LITHE_" + _ENV_NAME.sub("_", tool.rsplit(":", 1)[-1]).upper() + "_PATH"


async def resolve_launch(
    plan: LaunchPlan,
    *,
    env: Mapping[str, str | None] | None = None,
    tool_code: str = "plugin.runtime.missing",
) -> ResolvedLaunch:
    """Make a plan startable: directories, package checks, executable, environment.

    In order: create the directories the plan uses (state; workspace state, log and
    temporary when given; the parents of an answer's writable paths); verify the package
    paths it points at; resolve the executable (``packaged``: the package file;
    ``systemCommand``: the first command on the child's ``PATH`` whose validation probe,
    ``<command> <validationArguments>``, exits 0 within :data:`VALIDATION_TIMEOUT_MS`;
    ``runtime``: the packaged runtime, else the tool, of at least ``minimumVersion``);
    export each runtime dependency as ``LITHE_<TOOL>_PATH`` (a value the environment already
    sets wins) with its directory first on ``PATH``; expand the templates; apply the argument
    bounds.

    Args:
        plan: From :func:`parse_launch_plan` or :func:`decode_resolved_launch`.
        env: The caller's changes to our environment for the process (its ``PATH`` is the
            one commands and tools are looked up on).
        tool_code: The code of a tool that can't be resolved: ``plugin.runtime.missing`` when
            a server starts, ``plugin.host.toolUnresolved`` for a host request.

    Raises:
        CoreError: ``plugin.launch.missing`` (the packaged executable or every
            ``systemCommand`` candidate missing, not executable or failing its probe;
            ``details.commands`` lists the candidates tried), ``tool_code`` with ``details:
            {tool, reason}``, ``plugin.launch.outsidePackage``, ``plugin.launch.invalidRequest``
            (a directory can't be created), ``invalid_request`` (an expanded argument over
            :data:`MAX_ARGUMENT_BYTES`, or more than :data:`MAX_ARGUMENTS`). A temporary
            directory this call created is removed again before it raises.

    **Cancellation:** a probe in flight is ended with its process tree; a temporary directory
    this call created is removed.
    """
    created_temporary = (
        plan.temporary_dir is not None and not await trio.Path(plan.temporary_dir).exists()
    )
    try:
        directories = await prepare_directories(plan)
        return await _resolve(plan, env, tool_code, directories)
    except BaseException:
        if created_temporary and plan.temporary_dir is not None:
            with trio.CancelScope(shield=True):
                await remove_temporary_directory(plan.temporary_dir)
        raise


async def prepare_directories(plan: LaunchPlan) -> dict[str, str]:
    """Create the directories a plan uses and the parents of its writable paths.

    Returns:
        The directories by kind: ``state``, and ``workspaceState``, ``log``, ``temporary``
        when the plan has them.

    Raises:
        CoreError: ``plugin.launch.invalidRequest`` naming the directory that can't be made.
    """
    directories = {"state": plan.state_dir}
    if plan.workspace_state_dir is not None:
        directories["workspaceState"] = plan.workspace_state_dir
    if plan.log_dir is not None:
        directories["log"] = plan.log_dir
    if plan.temporary_dir is not None:
        directories["temporary"] = plan.temporary_dir
    for kind, path in directories.items():
        try:
            await trio.to_thread.run_sync(_make_directory, path)
            for writable in plan.writable_paths:
                if writable.startswith(path.rstrip("/") + "/"):
                    await trio.to_thread.run_sync(_make_directory, os.path.dirname(writable))
        except OSError as exc:
            raise _refuse(
                "plugin.launch.invalidRequest",
                f"could not create the {kind} directory: {exc.strerror or exc}",
                f"{kind}Directory",
            ) from None
    return directories


_launch_ids = itertools.count(1)


async def call_launch_function(
    endpoint: JSONRPCEndpoint, plan: LaunchPlan, server_id: str
) -> JSONValue:
    """Ask the plugin backend for a server's command line (``lithe/function/invoke``).

    the plugin contract "Backend-resolved launch": the params are :func:`resolve_params`
    plus ``tools`` (the plan's tool table as ``{<toolID>: {executable, home?, version?}}``),
    with the plan's workspace context. A failed or timed-out call ends the start without a
    process.

    Returns:
        The function's result, to decode with :func:`decode_resolved_launch`.

    Raises:
        CoreError: ``timed_out`` (``timeoutMilliseconds`` passed; the backend was sent
            ``$/cancelRequest``), ``plugin.function.failed`` (an error answer),
            ``plugin.function.invalidResult`` (no result), ``plugin.function.providerUnavailable``
            (the backend ended); ``details.field`` is ``launch.function``.
    """
    assert plan.function is not None
    params = resolve_params(plan, server_id)
    if plan.tools:
        tools: JSONObject = {}
        for tool_id, install in sorted(plan.tools.items()):
            entry: JSONObject = {"executable": install.executable}
            if install.home is not None:
                entry["home"] = install.home
            if install.version is not None:
                entry["version"] = install.version
            tools[tool_id] = entry
        params["tools"] = tools
    invoke: JSONObject = {
        "functionID": plan.function,
        "operationID": f"launch-{next(_launch_ids)}",
        "params": params,
    }
    if plan.context is not None:
        invoke["context"] = plan.context
    where: JSONObject = {"field": "launch.function", "functionID": plan.function}
    try:
        return await endpoint.request(INVOKE_METHOD, invoke, timeout_ms=plan.resolve_timeout_ms)
    except trio.TooSlowError:
        raise CoreError(
            "timed_out",
            f"the launch function did not answer within {plan.resolve_timeout_ms} ms",
            where,
        ) from None
    except JSONRPCError as exc:
        raise CoreError(
            "plugin.function.failed", f"the launch function failed: {exc.message}", where
        ) from None
    except ReplyWithoutResult:
        raise CoreError(
            "plugin.function.invalidResult", "the launch function gave no result", where
        ) from None
    except EndpointClosed as exc:
        raise CoreError(
            "plugin.function.providerUnavailable",
            f"the plugin backend ended during the launch function: {exc.reason}",
            where,
        ) from None


async def _resolve(
    plan: LaunchPlan,
    env: Mapping[str, str | None] | None,
    tool_code: str,
    directories: dict[str, str],
) -> ResolvedLaunch:
    if plan.kind == "backend":
        raise ValueError("decode a backend-resolved launch's answer before resolving it")
    child_env = _merged_env(plan, env)
    changes: dict[str, str] = dict(plan.environment)
    # Runtime dependencies first: their directories lead the PATH the launch tool and the
    # system command are looked up on too.
    prepend: list[str] = []
    for tool in plan.runtime_dependencies:
        install = await _tool_executable(plan, tool, None, child_env, tool_code)
        name = _env_name(tool)
        if name not in child_env:
            changes[name] = install.executable
        prepend.append(os.path.dirname(install.executable))
    if prepend:
        path = os.pathsep.join([*dict.fromkeys(prepend), child_env.get("PATH", os.defpath)])
        changes["PATH"] = path
        child_env["PATH"] = path
    child_env.update(changes)

    def expand_all(values: tuple[str, ...]) -> list[str]:
        return list(values) if plan.expanded else [_expand(v, plan) for v in values]

    arguments = expand_all(plan.arguments)
    if plan.kind == "packaged":
        assert plan.path is not None
        program = _package_file(plan, plan.path, "launch.path", "plugin.launch.missing")
        if not _executable(program):
            raise _refuse("plugin.launch.missing", "launch.path is not executable", "launch.path")
        argv = [program, *arguments]
    elif plan.kind == "systemCommand":
        argv = await _system_command(plan, child_env, arguments)
    else:
        assert plan.tool is not None
        if plan.packaged_runtime is not None:
            runtime = _package_file(
                plan, plan.packaged_runtime, "launch.packagedRuntime", "plugin.runtime.missing"
            )
            if not _executable(runtime):
                raise CoreError(
                    "plugin.runtime.missing",
                    "the packaged runtime is not executable",
                    {"tool": plan.tool, "reason": "unusable", "field": "launch.packagedRuntime"},
                )
            install = plan.tools.get(plan.tool) or ToolInstall(runtime)
            install = ToolInstall(runtime, None, None, install.launch)
        else:
            install = await _tool_executable(
                plan, plan.tool, plan.minimum_version, child_env, tool_code
            )
        entry: list[str] = []
        if plan.entry is not None:
            entry = [_package_file(plan, plan.entry, "launch.entry", "plugin.launch.missing")]
        argv = _splice(
            install.launch,
            {
                "executable": [install.executable],
                "runtimeArguments": expand_all(plan.runtime_arguments),
                "entry": entry,
                "arguments": arguments,
            },
        )
    if len(argv) - 1 > MAX_ARGUMENTS:
        raise invalid_field("arguments", f"the launch has more than {MAX_ARGUMENTS} arguments")
    for index, item in enumerate(argv):
        if len(item.encode()) > MAX_ARGUMENT_BYTES:
            raise invalid_field(
                "arguments", f"expanded argument {index} is over {MAX_ARGUMENT_BYTES} bytes"
            )
        if (problem := argv_item_problem(index, item, "arguments")) is not None:
            raise invalid_field("arguments", problem)
    options = (
        plan.initialization_options
        if plan.expanded
        else _expand_options(plan.initialization_options, plan)
    )
    return ResolvedLaunch(
        argv=argv,
        env=changes,
        cwd=plan.state_dir if plan.backend else None,
        initialization_options=options,
        temporary_dir=plan.temporary_dir,
        required_directories=directories,
    )


def _make_directory(path: str) -> None:
    os.makedirs(path, exist_ok=True)


async def _system_command(
    plan: LaunchPlan, child_env: dict[str, str], arguments: list[str]
) -> list[str]:
    search = os.pathsep.join(os.get_exec_path(child_env))
    probe = None if plan.validation_arguments is None else expand_probe(plan)
    tried: list[JSONValue] = []
    for command in plan.commands:
        found = shutil.which(command, path=search)
        if found is None:
            tried.append({"command": command, "reason": "notFound"})
            continue
        found = found if os.path.isabs(found) else os.path.join(os.getcwd(), found)
        if probe is not None:
            ok, _ = await _probe([found, *probe], child_env)
            if not ok:
                tried.append({"command": command, "reason": "validationFailed"})
                continue
        return [found, *arguments]
    raise CoreError(
        "plugin.launch.missing",
        "no command of launch.commands is usable: "
        + ", ".join(f"{t['command']} ({t['reason']})" for t in tried if isinstance(t, dict)),
        {"field": "launch.commands", "commands": tried},
    )


def expand_probe(plan: LaunchPlan) -> list[str]:
    """The expanded ``validationArguments`` of ``plan`` (empty when it declares none)."""
    return [_expand(v, plan) for v in plan.validation_arguments or ()]


async def remove_temporary_directory(path: str) -> None:
    """Remove a start's scratch directory and everything in it; a missing one is fine.

    **Cancellation:** runs in a worker thread; cancelling abandons the wait, not the removal.
    """
    await trio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=True))
