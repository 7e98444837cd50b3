"""Hypothesis strategies for every Core command: valid, near-valid and hostile values.

The table (:func:`table`) gives each command's fields as *kinds* (a program's argv, a
directory, milliseconds, pass-through JSON, the id of a live session, ...). A kind knows
three sets of values: valid ones (what a careful client sends), near-valid ones (bounds and
their neighbours, empty and wrong-but-plausible values) and hostile ones (lone surrogates,
NUL, integers far beyond 64 bits, ``1e400`` and ``NaN`` tokens, megabyte strings, deep
nesting, wrong JSON types). A request is drawn as a whole: a command (or an unknown name),
a mode (valid, near-valid in one field, hostile in some, garbage payload) and its fields.

From the declarations: the Core's payloads are declared as msgspec structs
(``supervisor._api``); :func:`table` derives every command's fields, types, bounds and
required flags from them (:mod:`tests.fuzz.declared`) and keeps the rows of :data:`HAND`
only for what a type can not say. ``test_every_command_has_a_row`` fails when a command
the Core answers has no row.

Values travel as JSON text (:func:`to_json_text`): :class:`Raw` holds a token Python's
encoder would refuse or change (``1e400``, ``NaN``, a 5 000-digit integer, brackets nested
thousands deep), so the edge sees exactly what a hostile client would send.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st

from supervisor.testbed import program_argv

if TYPE_CHECKING:
    from collections.abc import Callable

PY = sys.executable

__all__ = (
    "HAND",
    "Context",
    "Kind",
    "Raw",
    "Request",
    "requests",
    "table",
    "targets",
    "to_json_text",
)


@dataclass(frozen=True)
class Raw:
    """A JSON token written as it is (``1e400``, ``NaN``, ``[[[...]]]``)."""

    text: str


@dataclass
class Context:
    """What a request may refer to: live ids the drivers learned from earlier answers.

    Attributes:
        workdir: An existing directory (a job root, a working directory).
        ids: Live ids by kind: ``"job"``, ``"lsp"``, ``"debug"``, ``"terminal"``,
            ``"subscription"``, ``"operation"``.
    """

    workdir: str
    ids: dict[str, list[str]] = field(default_factory=dict)

    def remember(self, kind: str, value: object) -> None:
        if isinstance(value, str) and value not in self.ids.setdefault(kind, []):
            self.ids[kind].append(value)
            del self.ids[kind][:-8]  # the latest few


@dataclass(frozen=True)
class Request:
    """One drawn request: its command, payload, and how it was made (for the report)."""

    command: str
    payload: Any
    mode: str


# -- hostile and near-valid values of any kind ---------------------------------------------

_MEGABYTE = "x" * (1 << 20)
_DEEP_OK = Raw("[" * 100 + "]" * 100)
_DEEP_BAD = Raw("[" * 600 + "]" * 600)
_DEEPER = Raw('{"a":' * 3000 + "1" + "}" * 3000)

#: Values no field accepts as they are, each a kind of its own (see the module docstring).
HOSTILE_SCALARS: list[object] = [
    "\ud800",
    "a\udfffb",
    "\x00",
    "nul\x00inside",
    "\x1b[31m\x07\x7f",
    "",
    _MEGABYTE,
    "é" * 50_000,
    2**64,
    -(2**63) - 1,
    10**30,
    -1,
    0,
    2**31,
    2**53 + 1,
    Raw("1e400"),
    Raw("-1e400"),
    Raw("NaN"),
    Raw("1" + "0" * 5000),
    Raw("-0.0"),
    1.5,
    -0.0,
    1e308,
    True,
    False,
    None,
    [],
    {},
    _DEEP_OK,
    _DEEP_BAD,
    _DEEPER,
]
HOSTILE_CONTAINERS: list[object] = [
    ["\ud800"],
    [Raw("1e400")],
    {"\ud800": 1},
    {"": None},
    {"k": Raw("1e400")},
    {"=": "v"},
    {"a\x00b": "v"},
    {"k": "v\x00"},
    [None, 1, "a", [], {}],
    ["x"] * 10_000,
]


@functools.cache
def hostile() -> st.SearchStrategy[object]:
    """Any hostile value: scalars, containers, and JSON of every type.

    Made once: Hypothesis keeps each strategy's repr, which here quotes the megabyte values
    (a strategy made per draw grew the test process by a megabyte per example).
    """
    return st.one_of(
        st.sampled_from(HOSTILE_SCALARS),
        st.sampled_from(HOSTILE_CONTAINERS),
        json_values(finite=False),
    )


@functools.cache
def json_values(*, finite: bool = True, max_leaves: int = 12) -> st.SearchStrategy[object]:
    """Any JSON value (pass-through JSON); ``finite=False`` mixes in hostile tokens."""
    scalars: st.SearchStrategy[object] = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(codec="utf-8"), max_size=20),
    )
    if not finite:
        scalars = st.one_of(scalars, st.sampled_from(HOSTILE_SCALARS))
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(
                st.text(st.characters(codec="utf-8"), max_size=8), children, max_size=4
            ),
        ),
        max_leaves=max_leaves,
    )


# -- kinds ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """How to draw one field's values.

    Attributes:
        valid: Values a careful client sends (given the context).
        near: Values next to the valid ones: bounds and their neighbours, empty, plausible
            but wrong.
        required: Whether a valid payload always has the field.
    """

    valid: Callable[[Context], st.SearchStrategy[object]]
    near: Callable[[Context], st.SearchStrategy[object]]
    required: bool = False
    #: The kind of live id the field names (``"lsp"``, ``"terminal"``...), or None.
    ref: str | None = None

    def req(self) -> Kind:
        return Kind(self.valid, self.near, required=True, ref=self.ref)


def _const(*values: object) -> Callable[[Context], st.SearchStrategy[object]]:
    return lambda ctx: st.sampled_from(values)


def _plain_text(max_size: int = 30) -> st.SearchStrategy[str]:
    # Text that can reach the OS: Unicode scalar values without NUL.
    return st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=max_size)


def _ints(low: int, high: int, *typical: int) -> Kind:
    def valid(ctx: Context) -> st.SearchStrategy[object]:
        return st.one_of(st.integers(low, high), st.sampled_from(typical or (low,)))

    return Kind(valid, _const(low - 1, high, high + 1, 0, -1, 2**31 - 1, 2**31, 2**63, 1.0, "1"))


_ARGVS: list[list[str]] = [
    ["true"],
    ["/bin/true"],
    ["false"],
    [PY, "-c", "import sys; sys.stdout.write('out'); sys.stderr.write('err')"],
    ["head", "-c", "300000", "/dev/zero"],  # NUL bytes: six bytes each as JSON
    ["printf", "%b", "\\0\\1\\033[31m\\377\\376 tail"],
    ["cat"],
    ["sleep", "0.05"],
]


def _argv_valid(ctx: Context) -> st.SearchStrategy[object]:
    return st.one_of(
        st.sampled_from(_ARGVS),
        st.builds(lambda text: ["printf", "%s", text], _plain_text()),
    )


def _argv_near(ctx: Context) -> st.SearchStrategy[object]:
    return st.sampled_from(
        [
            [],
            [""],
            ["no-such-program-for-fuzz"],
            ["/"],
            [ctx.workdir],
            ["true", None],
            ["true", 1],
            "true",
            ["./relative-missing"],
        ]
    )


def _dir_valid(ctx: Context) -> st.SearchStrategy[object]:
    return st.sampled_from([ctx.workdir, "/", "/tmp"])


def _dir_near(ctx: Context) -> st.SearchStrategy[object]:
    return st.sampled_from(
        ["", ".", "relative/missing", "/no/such/dir", os.path.join(ctx.workdir, "a-file"), " "]
    )


def _env_valid(ctx: Context) -> st.SearchStrategy[object]:
    names = st.text(st.sampled_from("ABCXYZ_"), min_size=1, max_size=6)
    return st.dictionaries(names, st.one_of(st.none(), _plain_text(20)), max_size=3)


def _env_near(ctx: Context) -> st.SearchStrategy[object]:
    return st.sampled_from(
        [{"": "v"}, {"A=B": "v"}, {"A": 1}, {"A": ["v"]}, {"PATH": ""}, {"A": "\x00"}, []]
    )


def _text_valid(ctx: Context) -> st.SearchStrategy[object]:
    return st.one_of(_plain_text(), st.sampled_from(["line\n", "\t\r\n", "\x1b[0m", "é😀"]))


def _text_near(ctx: Context) -> st.SearchStrategy[object]:
    return st.sampled_from(["", " ", "\n", "x" * 10_000, 1, None, ["a"]])


def _id(kind: str) -> Kind:
    def valid(ctx: Context) -> st.SearchStrategy[object]:
        live = ctx.ids.get(kind, [])
        made_up = st.sampled_from([f"{kind}-1", "missing-id"])
        return st.sampled_from(live) if live else made_up

    return Kind(valid, _const("", " ", "missing", "x" * 2000, 0, None), ref=kind)


def _json(ctx: Context) -> st.SearchStrategy[object]:
    return json_values()


def _object(ctx: Context) -> st.SearchStrategy[object]:
    return st.dictionaries(st.text(max_size=8), json_values(max_leaves=6), max_size=4)


def _enum(*values: str) -> Kind:
    return Kind(_const(*values), _const("", values[0].upper(), values[0] + " ", "other", 1, None))


TEXT = Kind(_text_valid, _text_near)
NAME = Kind(lambda ctx: st.sampled_from(["fuzz", "a", "srv-1"]), _text_near)
ARGV = Kind(_argv_valid, _argv_near)
DIR = Kind(_dir_valid, _dir_near)
ENV = Kind(_env_valid, _env_near)
BOOL = Kind(lambda ctx: st.booleans(), _const(0, 1, "true", None))
JSON = Kind(_json, _const(None, [], {}, _DEEP_OK))
OBJECT = Kind(_object, _const([], "x", 1, None, {"": {}}))
URI = Kind(
    lambda ctx: st.sampled_from([f"file://{ctx.workdir}/a.py", "file:///tmp/x.txt"]),
    _const("", "not a uri", "file://", "http://x/y"),
)
#: A deadline of a command that waits (kept short: a long one is cancelled by the driver).
MS = _ints(1, 2**31 - 1, 1, 50, 300, 2000)
WAIT_MS = _ints(0, 600_000, 0, 1, 20)
SIZE = _ints(1, 64 * 1024 * 1024, 1, 10, 100_000, 64 * 1024 * 1024)
SMALL = _ints(0, 2**31 - 1, 0, 1, 2)
ROWS = _ints(1, 1000, 24, 80, 1)

_LSP_ARGV = program_argv("well-behaved", protocol="lsp")
_DAP_ARGV = program_argv("well-behaved", protocol="dap")
LSP_EXE = Kind(_const(_LSP_ARGV[0]), _argv_near)
LSP_ARGS = Kind(_const(_LSP_ARGV[1:]), _const([], [""], [None], "x", ["--no-such-flag"]))
ADAPTER = Kind(
    lambda ctx: st.fixed_dictionaries(
        {"executable": st.just(_DAP_ARGV[0]), "arguments": st.just(_DAP_ARGV[1:])},
        optional={"transport": st.just("stdio"), "initializeTimeoutMilliseconds": st.just(2000)},
    ),
    _const(
        {},
        {"executable": ""},
        {"executable": "true", "transport": "tcpPort"},
        {"executable": "true", "transport": "tcpPort", "port": 70000},
        {"executable": "true", "arguments": "x"},
        {"executable": "no-such-adapter"},
    ),
)
BREAKPOINTS = Kind(
    lambda ctx: st.lists(
        st.fixed_dictionaries({"line": st.integers(1, 100)}, optional={"condition": st.text()}),
        max_size=3,
    ),
    _const([{"line": 0}], [{"line": -1}], [{}], [1], {"line": 1}),
)
FUNCTION_BREAKPOINTS = Kind(
    lambda ctx: st.lists(st.fixed_dictionaries({"name": st.text(max_size=10)}), max_size=3),
    _const([{}], [{"name": 1}], ["main"]),
)
CHANGES = Kind(
    lambda ctx: st.lists(
        st.fixed_dictionaries(
            {
                "uri": st.just(f"file://{ctx.workdir}/a.py"),
                "kind": st.sampled_from(["created", "changed", "deleted"]),
            }
        ),
        max_size=3,
    ),
    _const([{"uri": "x", "kind": "moved"}], [{}], {}, [{"uri": "x", "type": 1}]),
)
CONTENT_CHANGES = Kind(
    lambda ctx: st.lists(st.fixed_dictionaries({"text": _plain_text()}), max_size=2),
    _const([{"text": "x", "range": {"start": {"line": -1, "character": 0}}}], [{}], [{"text": 1}]),
)
FUNCTION = Kind(
    lambda ctx: st.fixed_dictionaries(
        {"pluginID": st.just("com.example.fuzz"), "functionID": st.just("f")}
    ),
    _const({}, {"pluginID": "", "functionID": ""}, {"pluginID": 1}, "f"),
)
#: Every command's fields, by hand: what a field names (a program, a directory, a live id)
#: where its declared type can not say it. :func:`table` uses these rows over the fields
#: derived from the declarations, and the whole table when a tree has no declarations.
HAND: dict[str, dict[str, Kind]] = {
    "core.ping": {},
    "process.run": {
        "argv": ARGV.req(),
        "cwd": DIR,
        "env": ENV,
        "stdin": TEXT,
        "timeoutMilliseconds": Kind(_ints(1, 2000, 2000).valid, MS.near),
        "maxOutputBytes": SIZE,
    },
    "job.start": {
        "kind": _enum("build", "test", "pack", "toolchain", "add", "command").req(),
        "root": DIR.req(),
        "argv": ARGV.req(),
        "cwd": DIR,
        "env": ENV,
        "timeoutMilliseconds": Kind(_ints(1, 2000, 2000).valid, MS.near),
        "supersede": BOOL,
    },
    "job.cancel": {"jobId": _id("job").req()},
    "job.list": {},
    "job.pollEvents": {},
    "job.waitEvents": {"timeoutMilliseconds": WAIT_MS},
    "lsp.startServer": {
        "serverId": NAME.req(),
        "executable": LSP_EXE.req(),
        "arguments": LSP_ARGS.req(),
        "environment": ENV,
        "workingDirectory": DIR.req(),
        "rootUri": URI.req(),
        "initializationOptions": JSON,
        "workspaceConfiguration": OBJECT,
        "initializeTimeoutMilliseconds": Kind(_ints(1, 5000, 3000).valid, MS.near),
        "requestTimeoutMilliseconds": Kind(_ints(1, 5000, 3000).valid, MS.near),
        "shutdownTimeoutMilliseconds": Kind(_ints(1, 2000, 500).valid, MS.near),
        "serviceReadyIdleTimeoutMilliseconds": MS,
        "serviceReadyAbsoluteTimeoutMilliseconds": MS,
        "restart": Kind(_const(False, True, {"maxRestarts": 1}), _const(1, "yes", {"x": 1})),
        "sessionPolicy": Kind(_const(None), _const("x", 1, {"gates": 1})),
        "gates": Kind(_const(None), _const("x", 1, [1])),
        "pluginId": Kind(_const("com.example.fuzz"), _const("", "bad id", 1)),
        "hostServices": Kind(_const([], ["credentials"]), _const(["nope"], "x", [1])),
    },
    "lsp.stopServer": {"sessionId": _id("lsp").req()},
    "lsp.destroyServer": {"sessionId": _id("lsp").req()},
    "lsp.restartServer": {"sessionId": _id("lsp").req()},
    "lsp.snapshot": {"sessionId": _id("lsp").req()},
    "lsp.clearDiagnostics": {"sessionId": _id("lsp").req()},
    "lsp.pollEvents": {"sessionId": _id("lsp").req()},
    "lsp.waitEvents": {"sessionId": _id("lsp").req(), "timeoutMilliseconds": WAIT_MS},
    "lsp.syncDocument": {
        "sessionId": _id("lsp").req(),
        "uri": URI.req(),
        "languageId": NAME,
        "text": TEXT,
        "contentChanges": CONTENT_CHANGES,
    },
    "lsp.closeDocument": {"sessionId": _id("lsp").req(), "uri": URI.req()},
    "lsp.request": {
        "sessionId": _id("lsp").req(),
        "method": Kind(_const("textDocument/hover", "fuzz/echo", "shutdown"), _text_near).req(),
        "params": JSON,
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "lsp.notify": {
        "sessionId": _id("lsp").req(),
        "method": Kind(_const("fuzz/note", "textDocument/didOpen", "exit"), _text_near).req(),
        "params": JSON,
    },
    "lsp.cancelOperation": {"sessionId": _id("lsp").req(), "operationId": _id("operation").req()},
    "lsp.updateWorkspaceConfiguration": {
        "sessionId": _id("lsp").req(),
        "workspaceConfiguration": OBJECT.req(),
    },
    "lsp.workspaceFilesChanged": {"sessionId": _id("lsp").req(), "changes": CHANGES.req()},
    "lsp.functionRequest": {
        "sessionId": _id("lsp").req(),
        "function": FUNCTION.req(),
        "params": OBJECT,
        "context": JSON,
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "lsp.hostNotify": {"sessionId": _id("lsp").req(), "method": NAME.req(), "params": JSON},
    "lsp.hostResponse": {
        "sessionId": _id("lsp").req(),
        "hostRequestID": Kind(_const("1", 1), _const("", None, 2**64)).req(),
        "result": JSON,
        "error": Kind(_const({"message": "no"}), _const({}, {"message": 1}, "x")),
    },
    "lsp.pluginServerRequest": {
        "sessionId": _id("lsp").req(),
        "pluginId": Kind(_const("com.example.fuzz"), _text_near).req(),
        "method": NAME.req(),
        "params": JSON,
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "lsp.pluginServerNotify": {
        "sessionId": _id("lsp").req(),
        "pluginId": Kind(_const("com.example.fuzz"), _text_near).req(),
        "method": NAME.req(),
        "params": JSON,
    },
    "lsp.configureFunctionRelay": {
        "plugins": Kind(_const([]), _const({}, "x", [1], [{}])).req(),
        "contexts": Kind(_const([]), _const({}, "x", [1], [{}])),
    },
    "debug.createSession": {
        "sessionId": Kind(_const("fuzz-debug"), _text_near),
        "adapterId": NAME.req(),
        "adapter": ADAPTER.req(),
        "rootPath": DIR.req(),
        "supportsRunInTerminalRequest": BOOL,
        "runInTerminal": _enum("supervisor", "host"),
    },
    "debug.launch": {
        "sessionId": _id("debug").req(),
        "configuration": OBJECT.req(),
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "debug.attach": {
        "sessionId": _id("debug").req(),
        "configuration": OBJECT.req(),
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "debug.setBreakpoints": {
        "sessionId": _id("debug").req(),
        "path": DIR.req(),
        "breakpoints": BREAKPOINTS.req(),
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "debug.setFunctionBreakpoints": {
        "sessionId": _id("debug").req(),
        "breakpoints": FUNCTION_BREAKPOINTS.req(),
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "debug.setExceptionBreakpoints": {
        "sessionId": _id("debug").req(),
        "filters": Kind(_const([], ["raised"]), _const([1], "raised", [""])).req(),
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "debug.execute": {
        "sessionId": _id("debug").req(),
        "command": _enum("continue", "next", "stepIn", "stepOut", "pause").req(),
        "threadId": SMALL,
        "singleThread": BOOL,
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "debug.inspect": {
        "sessionId": _id("debug").req(),
        "kind": _enum("threads", "stackTrace", "scopes", "variables", "evaluate").req(),
        "threadId": SMALL,
        "frameId": SMALL,
        "variablesReference": SMALL,
        "expression": TEXT,
        "context": TEXT,
        "start": SMALL,
        "count": SMALL,
        "startFrame": SMALL,
        "levels": SMALL,
        "variableFilter": _enum("indexed", "named"),
        "operationId": _id("operation"),
        "timeoutMilliseconds": Kind(_ints(1, 2000, 1000).valid, MS.near),
    },
    "debug.cancelOperation": {
        "sessionId": _id("debug").req(),
        "operationId": _id("operation").req(),
        "reason": TEXT,
    },
    "debug.runInTerminalResponse": {
        "sessionId": _id("debug").req(),
        "requestId": SMALL.req(),
        "success": BOOL.req(),
        "processId": SMALL,
        "shellProcessId": SMALL,
        "message": TEXT,
    },
    "debug.disconnect": {"sessionId": _id("debug").req()},
    "debug.destroySession": {"sessionId": _id("debug").req()},
    "debug.listSessions": {},
    "debug.pollEvents": {"sessionId": _id("debug").req()},
    "debug.waitEvents": {"sessionId": _id("debug").req(), "timeoutMilliseconds": WAIT_MS},
    "terminal.create": {
        "executable": Kind(
            _const("/bin/true", "cat", "printf"), _const("", "no-such-program", "/")
        ).req(),
        "arguments": Kind(
            lambda ctx: st.lists(_plain_text(10), max_size=3), _const([None], "x", [1])
        ),
        "cwd": DIR,
        "environment": ENV,
        "title": TEXT,
        "rows": ROWS,
        "cols": ROWS,
        "retainedContextBytes": SIZE,
        "owner": _id("lsp"),
    },
    "terminal.write": {"terminalID": _id("terminal").req(), "data": TEXT.req()},
    "terminal.resize": {
        "terminalID": _id("terminal").req(),
        "rows": ROWS.req(),
        "cols": ROWS.req(),
    },
    "terminal.close": {"terminalID": _id("terminal").req(), "retainedContextBytes": SIZE},
    "terminal.reopen": {"terminalID": _id("terminal").req()},
    "terminal.dispose": {"terminalID": _id("terminal").req()},
    "terminal.onExit": {"terminalID": _id("terminal").req()},
    "terminal.disposeSubscription": {"subscriptionID": _id("subscription").req()},
    "terminal.list": {},
    "terminal.pollEvents": {"terminalID": _id("terminal").req()},
    "terminal.waitEvents": {"terminalID": _id("terminal").req(), "timeoutMilliseconds": WAIT_MS},
}


@functools.cache
def table() -> dict[str, list[dict[str, Kind]]]:
    """``{command: [fields of each payload variant]}``: from the declarations when the tree
    has them (:mod:`tests.fuzz.declared`), else from :data:`HAND`."""
    from .declared import declared_table

    return declared_table() or {name: [fields] for name, fields in HAND.items()}


@functools.cache
def targets() -> dict[str, list[str]]:
    """For each kind of live id, the commands whose required fields name one: once an
    example started a session, terminal or job, its next requests often go to it."""
    found: dict[str, list[str]] = {}
    for command, variants in table().items():
        kinds = {k.ref for fields in variants for k in fields.values() if k.required and k.ref}
        for kind in kinds:
            assert kind is not None
            found.setdefault(kind, []).append(command)
    return found


#: Command names that exist nowhere, hostile ones included.
UNKNOWN_COMMANDS = ["no.such", "", "process.run ", "PROCESS.RUN", "\ud800", "a\x00b", _MEGABYTE]
#: Commands that start processes or sessions: drawn more often, where deeper code runs.
STARTERS = ["process.run", "job.start", "lsp.startServer", "debug.createSession", "terminal.create"]


def _payload(
    draw: st.DrawFn, ctx: Context, fields: dict[str, Kind], mode: str
) -> dict[str, object]:
    payload: dict[str, object] = {}
    for name, kind in fields.items():
        if kind.required or draw(st.booleans()):
            payload[name] = draw(kind.valid(ctx))
    if not fields:
        return payload
    names = sorted(fields)
    if mode == "near":
        name = draw(st.sampled_from(names))
        payload[name] = draw(fields[name].near(ctx))
    elif mode == "hostile":
        for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)):
            payload[name] = draw(hostile())
    elif mode == "missing":
        required = [name for name in names if fields[name].required]
        if required:
            del payload[draw(st.sampled_from(required))]
    return payload


@st.composite
def requests(draw: st.DrawFn, ctx: Context) -> Request:
    """One request for the Core: a command and a payload drawn in one of the modes."""
    mode = draw(
        st.sampled_from(
            ["valid", "valid", "near", "near", "hostile", "hostile", "missing", "garbage"]
        )
    )
    if mode == "garbage":
        command = draw(
            st.one_of(st.sampled_from(sorted(table())), st.sampled_from(UNKNOWN_COMMANDS))
        )
        payload = draw(st.one_of(hostile(), st.just({"unknownField": 1})))
        return Request(command, payload, mode)
    live = sorted(kind for kind, ids in ctx.ids.items() if ids and kind in targets())
    target = draw(st.booleans()) if live else False
    if target:
        command = draw(st.sampled_from(targets()[draw(st.sampled_from(live))]))
        # Mostly valid: a live session's deeper code is what these requests are for.
        mode = draw(st.sampled_from(["valid", "valid", "valid", "near", "hostile"]))
    else:
        command = draw(st.one_of(st.sampled_from(sorted(table())), st.sampled_from(STARTERS)))
    payload = _payload(draw, ctx, draw(st.sampled_from(table()[command])), mode)
    if mode != "valid" and draw(st.integers(0, 9)) == 0:
        payload[draw(st.sampled_from(["unknownField", "\ud800", "", _MEGABYTE[:300]]))] = 1
    return Request(command, payload, mode)


# -- JSON text -------------------------------------------------------------------------------


def to_json_text(value: object) -> str:
    """``value`` as JSON text; each :class:`Raw` is written as its token, unquoted.

    Lone surrogates are written as ``\\udXXX`` escapes, as a JSON client may send them.
    """
    raws: list[str] = []

    def encode(item: object) -> object:
        if isinstance(item, Raw):
            raws.append(item.text)
            return f"\x01raw{len(raws) - 1}\x01"
        if isinstance(item, dict):
            return {key: encode(child) for key, child in item.items()}
        if isinstance(item, list):
            return [encode(child) for child in item]
        return item

    text = json.dumps(encode(value), ensure_ascii=True, allow_nan=True)
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x01raw{index}\x01"), raw, 1)
    return text


def strict_json(text: str) -> bool:
    """Whether ``text`` is JSON a strict reader accepts (no ``NaN``, no 5 000-digit integer)."""

    def refuse(token: str) -> object:
        raise ValueError(token)

    try:
        json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    return True
