"""Pure rules of ``lithe/host/run/*`` and ``lithe/host/debug/start`` (host side).

the plugin contract "Run and debug sessions": what Core refuses before anything is written or
started. Every refusal is a :class:`~supervisor._plugin._state.HostRefusal`; malformed params
are -32602 ``plugin.host.invalidParams`` whose ``details`` carry Core's rejection
(``{code: "plugin.run.invalidStart" | "plugin.debug.invalidStart", field}``). The checks run in
the order of the params (label, then process, then the rest) and the first failing one wins.

The only I/O here is looking at the file system for the paths the params name (the working
directory and a packaged executable must exist inside their roots); nothing is created.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from protocol import lookup_error, text_problem

from ._state import HostRefusal, _is_context, is_function_id, json_size

if TYPE_CHECKING:
    from collections.abc import Mapping

    from protocol import JSONObject, JSONValue

__all__ = (
    "DEBUG_CONFIGURATION_BYTES",
    "LABEL_CHARACTERS",
    "MAX_ARGUMENTS",
    "MAX_ARGUMENT_BYTES",
    "MAX_ENVIRONMENT",
    "MAX_TEMPORARY_FILES",
    "RERUN_DATA_BYTES",
    "TEMPORARY_FILE_BYTES",
    "DebugAdapter",
    "DebugStart",
    "RunStart",
    "RunTools",
    "decode_debug_start",
    "decode_run_start",
    "decode_run_stop",
    "expand_temporary_files",
    "resolve_tool",
)

#: "Run and debug sessions": label 1 to 256 characters without control characters.
LABEL_CHARACTERS: Final = 256
#: temporaryFiles: at most four files of up to 4 MiB each.
MAX_TEMPORARY_FILES: Final = 4
TEMPORARY_FILE_BYTES: Final = 4 * 1024 * 1024
#: rerun.data: a JSON object of up to 64 KiB (serialized).
RERUN_DATA_BYTES: Final = 64 * 1024
#: debug/start configuration: at most 256 KiB (serialized).
DEBUG_CONFIGURATION_BYTES: Final = 256 * 1024
#: "the bounds of run preparation" (Provider run preparation): 1024 arguments of at most
#: 64 KiB UTF-8, 64 environment entries with names [A-Za-z_][A-Za-z0-9_]* of at most 128
#: bytes and values of at most 64 KiB.
MAX_ARGUMENTS: Final = 1024
MAX_ARGUMENT_BYTES: Final = 64 * 1024
MAX_ENVIRONMENT: Final = 64
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_TEMP_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_TEMP_REF: Final = re.compile(r"\$\{temporaryFile:([^}]*)\}")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_RUN_FIELDS: Final = frozenset({"context", "label", "process", "temporaryFiles", "debug", "rerun"})
_PROCESS_FIELDS: Final = frozenset({"executable", "arguments", "workingDirectory", "environment"})
_DEBUG_FIELDS: Final = frozenset({"context", "label", "adapter", "request", "configuration"})


def _run_invalid(field: str, message: str) -> HostRefusal:
    return HostRefusal(
        -32602,
        "plugin.host.invalidParams",
        message,
        {"code": "plugin.run.invalidStart", "field": field},
    )


def _debug_invalid(field: str, message: str) -> HostRefusal:
    return HostRefusal(
        -32602,
        "plugin.host.invalidParams",
        message,
        {"code": "plugin.debug.invalidStart", "field": field},
    )


def _host(code: str, message: str, details: JSONObject | None = None) -> HostRefusal:
    number = lookup_error(code).jsonrpc_code
    assert number is not None
    return HostRefusal(number, code, message, details)


@dataclass(frozen=True)
class RunTools:
    """What the host knows of one plugin for its runs.

    Attributes:
        required: The manifest's ``requiresTools``.
        resolved: Tool-definition ID -> the executable the host resolved for it, or None
            when it resolves to nothing (``plugin.host.toolUnresolved``); a required tool
            not listed is looked up by its short ID on PATH, as a launch plan's tool.
        package_root: The installed package's root, for ``{kind: "packaged"}``; None: the
            host gave none, so a packaged executable is refused.
    """

    required: frozenset[str] = frozenset()
    resolved: Mapping[str, str | None] = field(default_factory=dict)
    package_root: str | None = None


@dataclass(frozen=True)
class RunStart:
    """A checked ``run/start``: nothing is started yet.

    ``arguments`` and ``environment`` still hold ``${temporaryFile:<name>}``; the run
    replaces them with :func:`expand_temporary_files` once the files are written.
    """

    context: JSONObject
    label: str
    executable: str
    arguments: tuple[str, ...]
    working_directory: str
    environment: dict[str, str]
    temporary_files: tuple[tuple[str, bytes], ...]
    rerun: JSONObject | None


def _label(value: JSONValue) -> str:
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= LABEL_CHARACTERS
        or _CONTROL.search(value)
        or text_problem(value, "label") is not None
    ):
        raise _run_invalid("label", f"label must be 1 to {LABEL_CHARACTERS} characters")
    return value


def _inside(root: str, path: str) -> bool:
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _normalized_relative(value: str) -> bool:
    parts = value.split("/")
    return (
        bool(value)
        and not value.startswith("/")
        and "\\" not in value
        and all(part not in ("", ".", "..") for part in parts)
        and text_problem(value, "path") is None
    )


def resolve_tool(tool: str, tools: RunTools) -> str:
    """The executable the host's runtime selection resolves for a required ``tool``: the
    host's ``tools`` entry, else its short ID on PATH (as a launch plan's tool).

    Raises:
        HostRefusal: -32025 ``plugin.host.toolUnresolved`` with ``details {tool, reason:
            notFound | unusable}``.
    """
    if tool in tools.resolved:
        resolved = tools.resolved[tool]
    else:
        resolved = shutil.which(tool.rsplit(":", 1)[-1])
    if resolved is None:
        raise _host(
            "plugin.host.toolUnresolved",
            f"the tool {tool!r} resolves to no executable",
            {"tool": tool, "reason": "notFound"},
        )
    if not os.path.isfile(resolved) or not os.access(resolved, os.X_OK):
        raise _host(
            "plugin.host.toolUnresolved",
            f"the tool {tool!r} resolves to {resolved!r}, which cannot be run",
            {"tool": tool, "reason": "unusable"},
        )
    return os.path.abspath(resolved)


def _executable(value: JSONValue, tools: RunTools) -> str:
    where = "process.executable"
    if not isinstance(value, dict):
        raise _run_invalid(where, "process.executable must be an object")
    kind = value.get("kind")
    if kind == "tool":
        if set(value) != {"kind", "tool"} or not isinstance(value["tool"], str):
            raise _run_invalid(where, "a tool executable is {kind: tool, tool}")
        tool = value["tool"]
        if tool not in tools.required:
            raise _run_invalid(f"{where}.tool", f"{tool!r} is not in the plugin's requiresTools")
        return resolve_tool(tool, tools)
    if kind == "packaged":
        if set(value) != {"kind", "path"} or not isinstance(value["path"], str):
            raise _run_invalid(where, "a packaged executable is {kind: packaged, path}")
        path = value["path"]
        if not _normalized_relative(path):
            raise _run_invalid(f"{where}.path", "path must be a normalized relative path")
        root = tools.package_root
        if root is None:
            raise _run_invalid(f"{where}.path", "the host knows no package for this plugin")
        full = os.path.join(root, path)
        if not _inside(root, full) or not os.path.isfile(full):
            raise _run_invalid(f"{where}.path", f"{path!r} is not a file inside the package")
        return full
    raise _run_invalid(f"{where}.kind", "process.executable.kind must be tool or packaged")


def _arguments(value: JSONValue) -> tuple[str, ...]:
    where = "process.arguments"
    if not isinstance(value, list) or len(value) > MAX_ARGUMENTS:
        raise _run_invalid(where, f"arguments must be an array of at most {MAX_ARGUMENTS}")
    for index, item in enumerate(value):
        if (
            not isinstance(item, str)
            or len(item.encode("utf-8", "surrogatepass")) > MAX_ARGUMENT_BYTES
            or text_problem(item, "argument") is not None
        ):
            raise _run_invalid(
                f"{where}[{index}]", f"an argument is a string of at most {MAX_ARGUMENT_BYTES}"
            )
    return tuple(str(item) for item in value)


def _working_directory(value: JSONValue, root: str) -> str:
    where = "process.workingDirectory"
    if not isinstance(value, str):
        raise _run_invalid(where, "workingDirectory must be a string")
    if value in ("", "."):
        full = root
    elif not _normalized_relative(value):
        raise _run_invalid(where, "workingDirectory must be relative to the workspace root")
    else:
        full = os.path.join(root, value)
    # Inside "after resolving filesystem aliases": a symlink out of the root is refused.
    if not _inside(root, full) or not os.path.isdir(full):
        raise _run_invalid(where, f"{value!r} is not a directory inside the workspace")
    return full


def _environment(value: JSONValue) -> dict[str, str]:
    where = "process.environment"
    if not isinstance(value, dict) or len(value) > MAX_ENVIRONMENT:
        raise _run_invalid(where, f"environment must be an object of at most {MAX_ENVIRONMENT}")
    for name, item in value.items():
        if (
            not _ENV_NAME.fullmatch(name)
            or not isinstance(item, str)
            or len(item.encode("utf-8", "surrogatepass")) > MAX_ARGUMENT_BYTES
            or text_problem(item, "value") is not None
        ):
            raise _run_invalid(f"{where}.{name}", "an environment entry is NAME: string")
    return {name: str(item) for name, item in value.items()}


def _temporary_files(value: JSONValue) -> tuple[tuple[str, bytes], ...]:
    where = "temporaryFiles"
    if not isinstance(value, list) or len(value) > MAX_TEMPORARY_FILES:
        raise _run_invalid(where, f"temporaryFiles is an array of at most {MAX_TEMPORARY_FILES}")
    files: list[tuple[str, bytes]] = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise _run_invalid(at, "a temporary file is an object")
        kinds = {"contents", "base64"} & item.keys()
        if len(kinds) != 1 or set(item) - {"name", "contents", "base64"}:
            raise _run_invalid(at, "a temporary file has name and one of contents or base64")
        name = item.get("name")
        if not isinstance(name, str) or not _TEMP_NAME.fullmatch(name):
            raise _run_invalid(f"{at}.name", "a name is 1 to 64 letters, digits, ., _ or -")
        if any(name == seen for seen, _ in files):
            raise _run_invalid(f"{at}.name", f"the name {name!r} is used twice")
        if "contents" in item:
            contents = item["contents"]
            try:
                if not isinstance(contents, str):
                    raise ValueError
                data = contents.encode("utf-8")  # a lone surrogate has no UTF-8 form
            except ValueError:
                raise _run_invalid(f"{at}.contents", "contents is text") from None
        else:
            encoded = item["base64"]
            try:
                if not isinstance(encoded, str):
                    raise ValueError
                data = base64.b64decode(encoded, validate=True)
            except (ValueError, binascii.Error):
                raise _run_invalid(f"{at}.base64", "base64 is standard base64") from None
        if len(data) > TEMPORARY_FILE_BYTES:
            raise _run_invalid(at, f"a temporary file is at most {TEMPORARY_FILE_BYTES} bytes")
        files.append((name, data))
    return tuple(files)


def _check_references(run: RunStart) -> None:
    names = {name for name, _ in run.temporary_files}
    places = [(f"process.arguments[{i}]", a) for i, a in enumerate(run.arguments)]
    places += [(f"process.environment.{k}", v) for k, v in run.environment.items()]
    for where, text in places:
        for match in _TEMP_REF.finditer(text):
            if match.group(1) not in names:
                raise _run_invalid(where, f"no temporary file is named {match.group(1)!r}")


def _rerun(value: JSONValue, registered: frozenset[str]) -> JSONObject:
    if not isinstance(value, dict) or set(value) != {"function", "data"}:
        raise _run_invalid("rerun", "rerun is {function, data}")
    function = value["function"]
    if not is_function_id(function) or function not in registered:
        raise _run_invalid("rerun.function", "rerun.function is not a registered function")
    data = value["data"]
    if not isinstance(data, dict) or json_size(data) > RERUN_DATA_BYTES:
        raise _run_invalid("rerun.data", f"rerun.data is an object of at most {RERUN_DATA_BYTES}")
    return value


def _debug(value: JSONValue) -> None:
    if not isinstance(value, dict) or set(value) != {"configurationType", "target"}:
        raise _run_invalid("debug", "debug is {configurationType, target}")
    if not isinstance(value["configurationType"], str) or not value["configurationType"]:
        raise _run_invalid("debug.configurationType", "configurationType is a string")
    target = value["target"]
    if isinstance(target, dict) and target.get("kind") == "launch" and set(target) == {"kind"}:
        return
    if isinstance(target, dict) and target.get("kind") == "connection":
        port = target.get("port")
        if (
            set(target) == {"kind", "port"}
            and isinstance(port, int)
            and not isinstance(port, bool)
            and 1 <= port <= 65535
        ):
            return
        raise _run_invalid("debug.target.port", "port is 1 to 65535")
    raise _run_invalid("debug.target", "target is {kind: connection, port} or {kind: launch}")


def decode_run_start(
    params: JSONObject,
    tools: RunTools,
    workspace_root: str,
    registered: frozenset[str] = frozenset(),
) -> RunStart:
    """``lithe/host/run/start``: the checked run, or Core's refusal.

    Args:
        params: The request's params (an object; Core's generic checks already ran).
        tools: The plugin's tools and package.
        workspace_root: The root of the request's (open) workspace context.
        registered: The functions the calling session has registered (for ``rerun``).

    Raises:
        HostRefusal: -32018 ``plugin.host.unsupportedOption`` for a field run/start does not
            define; -32602 ``plugin.host.invalidParams`` with ``details {code:
            "plugin.run.invalidStart", field}``; -32025 ``plugin.host.toolUnresolved`` with
            ``details {tool, reason}``; -32018 for ``debug`` (see below).
    """
    unknown = sorted(set(params) - _RUN_FIELDS)
    if unknown:
        raise _host(
            "plugin.host.unsupportedOption",
            f"run/start has no field {unknown[0]}",
            {"option": unknown[0]},
        )
    if not _is_context(params.get("context")):
        raise _run_invalid("context", "context is {contextID, generation}")
    label = _label(params.get("label"))
    process = params.get("process")
    if not isinstance(process, dict):
        raise _run_invalid("process", "process is an object")
    for name in sorted(_PROCESS_FIELDS):
        if name not in process:
            raise _run_invalid(f"process.{name}", f"process.{name} is required")
    extra = sorted(set(process) - _PROCESS_FIELDS)
    if extra:
        raise _run_invalid(f"process.{extra[0]}", f"process has no field {extra[0]}")
    executable = _executable(process["executable"], tools)
    arguments = _arguments(process["arguments"])
    directory = _working_directory(process["workingDirectory"], workspace_root)
    environment = _environment(process["environment"])
    files = _temporary_files(params.get("temporaryFiles", []))
    if "debug" in params:
        _debug(params["debug"])
    rerun = _rerun(params["rerun"], registered) if "rerun" in params else None
    context = params["context"]
    assert isinstance(context, dict)
    run = RunStart(context, label, executable, arguments, directory, environment, files, rerun)
    _check_references(run)
    if "debug" in params:
        # A valid debug target, but no public debug adapter alias is known to Core: the
        # host's registry connection debugging is not part of the supervisor.
        raise _host(
            "plugin.host.unsupportedOption",
            "this host starts no debug session for a run",
            {"option": "debug"},
        )
    return run


def expand_temporary_files(text: str, paths: Mapping[str, str]) -> str:
    """Replace every ``${temporaryFile:<name>}`` in ``text`` with that file's path."""
    return _TEMP_REF.sub(lambda m: paths[m.group(1)], text)


def decode_run_stop(params: JSONObject) -> tuple[str, str]:
    """``lithe/host/run/stop {runID} | {sessionID}`` (no context).

    Returns:
        ``("runID" | "sessionID", the id)``.

    Raises:
        HostRefusal: -32602 ``plugin.host.invalidParams`` unless exactly one id is given.
    """
    if len(params) == 1:
        ((name, value),) = params.items()
        if name in ("runID", "sessionID") and isinstance(value, str) and value:
            return name, value
    raise _host("plugin.host.invalidParams", "run/stop takes {runID} or {sessionID}")


@dataclass(frozen=True)
class DebugAdapter:
    """One of a plugin's declared debug adapters, as the host gave it.

    Attributes:
        local_id: Its plugin-local ID.
        requests: ``launch`` and/or ``attach``.
        adapter: The ``debug.createSession`` ``adapter`` object that starts it.
        adapter_id: DAP ``initialize.adapterID``.
        defaults: Request -> the declared default DAP arguments.
        runtime_tool: For ``launch {kind: runSelectedRuntime, tool}``: the tool whose
            resolved executable starts the adapter (``adapter`` then has no
            ``executable``); resolved when a session starts.
    """

    local_id: str
    requests: frozenset[str]
    adapter: JSONObject
    adapter_id: str
    defaults: Mapping[str, JSONObject] = field(default_factory=dict)
    runtime_tool: str | None = None


@dataclass(frozen=True)
class DebugStart:
    """A checked ``debug/start``."""

    context: JSONObject
    label: str
    adapter: DebugAdapter
    request: str
    configuration: JSONObject


def decode_debug_start(
    params: JSONObject, plugin_id: str, adapters: Mapping[str, DebugAdapter]
) -> DebugStart:
    """``lithe/host/debug/start``: the adapter, request and merged configuration.

    The adapter is named by its local ID or ``<plugin-id>/<local-id>``. The configuration
    is laid on top of the adapter's declared defaults for the request.

    Raises:
        HostRefusal: -32018 for an unknown field; -32602 ``plugin.host.invalidParams`` with
            ``details {code: "plugin.debug.invalidStart", field}`` (malformed, a request the
            adapter does not serve, ``noDebug`` or a ``__`` key); -32016
            ``plugin.host.notFound`` with ``details.code`` ``plugin.debug.foreignAdapter``
            (another plugin's) or ``plugin.debug.unknownAdapter`` (not declared); -32014
            ``plugin.host.limitExceeded`` with ``details.code`` ``plugin.debug.limitExceeded``
            for a configuration over 256 KiB.
    """
    unknown = sorted(set(params) - _DEBUG_FIELDS)
    if unknown:
        raise _host(
            "plugin.host.unsupportedOption",
            f"debug/start has no field {unknown[0]}",
            {"option": unknown[0]},
        )
    if not _is_context(params.get("context")):
        raise _debug_invalid("context", "context is {contextID, generation}")
    try:
        label = _label(params.get("label"))
    except HostRefusal:
        raise _debug_invalid("label", "label must be 1 to 256 characters") from None
    name = params.get("adapter")
    if not isinstance(name, str) or not name:
        raise _debug_invalid("adapter", "adapter is an adapter ID")
    owner, slash, local = name.partition("/")
    if not slash:
        owner, local = plugin_id, name
    if owner != plugin_id:
        raise _host(
            "plugin.host.notFound",
            f"{name} is an adapter of another plugin",
            {"code": "plugin.debug.foreignAdapter", "field": "adapter"},
        )
    adapter = adapters.get(local)
    if adapter is None:
        raise _host(
            "plugin.host.notFound",
            f"the plugin declares no adapter {name}",
            {"code": "plugin.debug.unknownAdapter", "field": "adapter"},
        )
    request = params.get("request")
    if request not in ("launch", "attach"):
        raise _debug_invalid("request", "request is launch or attach")
    assert isinstance(request, str)
    if request not in adapter.requests:
        raise _debug_invalid("request", f"the adapter does not serve {request}")
    configuration = params.get("configuration")
    if not isinstance(configuration, dict):
        raise _debug_invalid("configuration", "configuration is an object")
    if json_size(configuration) > DEBUG_CONFIGURATION_BYTES:
        raise _host(
            "plugin.host.limitExceeded",
            f"configuration is over {DEBUG_CONFIGURATION_BYTES} bytes",
            {"code": "plugin.debug.limitExceeded", "field": "configuration"},
        )
    for key in sorted(configuration):
        if key == "noDebug" or key.startswith("__"):
            raise _debug_invalid(f"configuration.{key}", f"{key} belongs to the host")
    context = params["context"]
    assert isinstance(context, dict)
    merged: JSONObject = {**adapter.defaults.get(request, {}), **configuration}
    return DebugStart(context, label, adapter, request, merged)
