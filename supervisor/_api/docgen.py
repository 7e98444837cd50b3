"""Generate what is derived from the declarations, and check that it is current.

``python -m supervisor._api.docgen`` writes:

- ``supervisor/_api/_helpers.py``: the typed Python helpers (``await core.process_run(...)``);
- ``docs/commands.md``: the command reference (payloads, results, events, states, stop
  steps, error codes, bounds);
- ``docs/schema/*.json``: JSON Schema of every payload, result and event.

``python -m supervisor._api.docgen --check`` writes nothing and exits 1 when a file is stale
(the test suite runs the same comparison).
"""

from __future__ import annotations

import inspect
import json
import keyword
import re
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any, Final

import msgspec

from protocol import ERROR_CATALOG

from . import COMMANDS, ENDING_TURN_WAIT_MS, EVENT_STREAMS, EVENTS, Command, Ordered, _base
from ._core import Envelope, Response
from ._debug import DEBUG_STATES
from ._lsp import LSP_STATES, LSP_STOP_STEPS
from ._terminal import TERMINAL_STATES

__all__ = ("generated", "main")

ROOT: Final = Path(__file__).resolve().parents[2]
_BUILTINS: Final = frozenset({"None", "int", "str", "bool", "float", "list", "dict", "tuple"})


def snake(name: str) -> str:
    """``"lsp.startServer"`` -> ``"lsp_start_server"``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name.replace(".", "_")).lower()


# -- the helpers -------------------------------------------------------------------------


class _Imports:
    """Names the generated module imports, each under a name unique to its module."""

    def __init__(self) -> None:
        self.names: dict[tuple[str, str], str] = {}

    def alias(self, module: str, name: str) -> str:
        key = (module, name)
        if key not in self.names:
            short = module.rpartition(".")[2].lstrip("_")
            self.names[key] = f"{short}_{name.lstrip('_')}"
        return self.names[key]

    def lines(self) -> list[str]:
        by_module: dict[str, list[str]] = {}
        for (module, name), alias in sorted(self.names.items()):
            by_module.setdefault(module, []).append(f"{name} as {alias}")
        out = []
        for module, names in sorted(by_module.items()):
            relative = "." + module.rpartition(".")[2]
            out.append(f"from {relative} import (")
            out += [f"    {item}," for item in names]
            out.append(")")
        return out


def _annotation(cls: type, field: str, imports: _Imports) -> str:
    """The source text of ``field``'s annotation, its names imported under unique aliases."""
    for base in cls.__mro__:
        text = inspect.get_annotations(base).get(field)
        if text is not None:
            return _rename(str(text), base.__module__, imports)
    raise KeyError(field)


def _wire_name(cls: type[msgspec.Struct], field: str) -> str:
    """``field``'s name on the wire."""
    info = msgspec.structs.fields(cls)
    return next(f.encode_name for f in info if f.name == field)


def _rename(text: str, module: str, imports: _Imports) -> str:
    namespace = vars(sys.modules[module])

    def rename(match: re.Match[str]) -> str:
        name = match[0]
        if name in _BUILTINS or keyword.iskeyword(name) or name not in namespace:
            return name
        if name in ("Annotated", "Literal", "Union", "Any"):
            return f"typing.{name}"
        if name == "msgspec":
            return name
        return imports.alias(_defining_module(name, module), name)

    return re.sub(r"(?<![\w.'\"])[A-Za-z_]\w*(?![\w'\"])", rename, text)


def _defining_module(name: str, module: str) -> str:
    # A type alias has no __module__ of its own: import it from _base when it is _base's.
    base = vars(sys.modules["supervisor._api._base"])
    if name in base and base[name] is vars(sys.modules[module]).get(name):
        return "supervisor._api._base"
    return module


def _type_text(tp: Any, imports: _Imports) -> str:
    if tp is None:
        return "None"
    origin = typing.get_origin(tp)
    if origin is list:
        return f"list[{_type_text(typing.get_args(tp)[0], imports)}]"
    if isinstance(tp, type):
        return imports.alias(tp.__module__, tp.__name__)
    raise TypeError(f"no source text for {tp!r}")


def _union_name(command: Command) -> tuple[str, str] | None:
    """(module, alias name) of a payload that is a union (``debug.inspect``)."""
    module = sys.modules[f"supervisor._api._{command.service}"]
    for name, value in vars(module).items():
        if value is command.payload and not name.startswith("__"):
            return module.__name__, name
    return None


def _order_md(order: Ordered | None) -> str:
    if order is None:
        return ""
    text = order.target if order.field is None else f"{order.target} (`{order.field}`)"
    if order.named:
        text += ", *named*"
    return f"{text}, *ends*" if order.ending else text


#: One Python name per concept (issue 28.5): a payload field the wire names after the
#: reference (``environment``, ``workingDirectory``) is the helper's ``env`` / ``cwd``, as
#: ``process.run`` and ``job.start`` (and Trio's ``run_process``) name them. The field's own
#: name stays accepted as a keyword, with a ``DeprecationWarning``.
PYTHON_NAMES: Final = {"environment": "env", "working_directory": "cwd"}


def _render_helper(name: str, command: Any, imports: _Imports) -> str:
    """One ``CommandHelpers`` method: ``command``'s payload as keywords (renamed ones with
    their older keyword, deprecated), its call and its result's conversion."""
    result = _type_text(command.result, imports)
    method = snake(name)
    doc = f'        """``{name}``; see docs/commands.md."""'
    convert = (
        "        _none(data)\n"
        if command.result is None
        else f"        return _convert(data, {result})\n"
    )
    if isinstance(command.payload, type):
        payload_name = imports.alias(command.payload.__module__, command.payload.__name__)
        params: list[str] = []
        args: list[str] = []
        old_names: list[str] = []
        renames: list[str] = []
        notes: list[str] = []
        for field in msgspec.structs.fields(command.payload):
            text = _annotation(command.payload, field.name, imports)
            python_name = PYTHON_NAMES.get(field.name, field.name)
            if field.default is msgspec.NODEFAULT and field.default_factory is msgspec.NODEFAULT:
                assert python_name == field.name, (name, field.name)
                params.insert(len([p for p in params if "=" not in p]), f"{field.name}: {text}")
            else:
                params.append(f"{python_name}: {text} = {field.default!r}")
            if python_name != field.name:
                assert field.default is None, (name, field.name)
                old_names.append(f"{field.name}: {text} = None")
                renames.append(
                    f"        {python_name} = _renamed({name!r}, {python_name!r},"
                    f" {python_name}, {field.name!r}, {field.name})\n"
                )
                wire = _wire_name(command.payload, field.name)
                notes.append(f"``{python_name}`` is the wire's ``{wire}``")
            args.append(f"{field.name}={python_name}")
        params += old_names
        if notes:
            old = " and ".join(f"``{n.split(':')[0]}=``" for n in old_names)
            verb = "works" if len(old_names) == 1 else "work"
            note = textwrap.fill(
                f"{' and '.join(notes)} ({old} still {verb}, deprecated).",
                width=100,
                initial_indent=" " * 8,
                subsequent_indent=" " * 8,
            )
            doc = f'        """``{name}``; see docs/commands.md.\n\n{note}\n        """'
        keywords = [p.split(":")[0] for p in params]
        assert len(set(keywords)) == len(keywords), (name, keywords)
        signature = ", ".join(["self: _Caller", *(["*", *params] if params else [])])
        built = f"{payload_name}({', '.join(args)})"
        body = "".join(renames) + f"        data = await self.call({name!r}, _wire({built}))\n"
    else:
        found = _union_name(command)
        assert found is not None, name
        payload_name = imports.alias(*found)
        signature = f"self: _Caller, payload: {payload_name}"
        body = f"        data = await self.call({name!r}, _wire(payload))\n"
    return f"    async def {method}({signature}) -> {result}:\n{doc}\n{body}{convert}"


def render_helpers() -> str:
    """The source of ``supervisor/_api/_helpers.py``."""
    imports = _Imports()
    methods = [_render_helper(name, COMMANDS[name], imports) for name in sorted(COMMANDS)]
    header = [
        '"""Typed helpers for every Core command, generated from the declarations.',
        "",
        "Generated by ``python -m supervisor._api.docgen``; do not edit. Each helper builds",
        "its payload declaration, calls ``self.call`` (which validates it, as for any",
        "caller) and converts the answer into its result declaration.",
        '"""',
        "",
        "# ruff: noqa",
        "",
        "from __future__ import annotations",
        "",
        "import typing",
        "import warnings",
        "from typing import Any, Protocol, TypeVar",
        "",
        "import msgspec",
        "",
        *imports.lines(),
        "",
        '__all__ = ("CommandHelpers",)',
        "",
        'R = TypeVar("R")',
        'T = TypeVar("T")',
        "",
        "",
        "class _Caller(Protocol):",
        "    async def call(",
        "        self,",
        "        command: str,",
        "        payload: dict[str, Any],",
        "        *,",
        "        operation_id: str | None = None,",
        "        timeout_ms: int | None = None,",
        "    ) -> Any: ...",
        "",
        "",
        "def _wire(payload: msgspec.Struct) -> dict[str, Any]:",
        "    data: dict[str, Any] = msgspec.to_builtins(payload)",
        "    return data",
        "",
        "",
        "def _convert(data: object, result: type[R]) -> R:",
        "    return msgspec.convert(data, result, strict=True)",
        "",
        "",
        "def _none(data: object) -> None:",
        "    if data is not None:",
        '        raise msgspec.ValidationError("expected null")',
        "",
        "",
        "def _renamed(command: str, name: str, value: T, old: str, old_value: T) -> T:",
        '    """``value``, or the one given by the older keyword ``old`` (deprecated)."""',
        "    if old_value is None:",
        "        return value",
        "    if value is not None:",
        '        raise TypeError(f"{command}: give {name}= or {old}=, not both")',
        "    warnings.warn(",
        '        f"{command}: {old}= is deprecated; use {name}=", DeprecationWarning, stacklevel=3',
        "    )",
        "    return old_value",
        "",
        "",
        "class CommandHelpers:",
        '    """One typed method per command: ``await core.process_run(argv=[...])`` returns a',
        "    ``ProcessResult``. Errors are :class:`protocol.CoreError` as for ``call``.",
        '    """',
        "",
    ]
    text = "\n".join(header) + "\n" + "\n".join(methods)
    return text.replace("typing.typing.", "typing.")


_MODULES: Final = (
    "_base",
    "_core",
    "_process",
    "_job",
    "_lsp",
    "_plugin",
    "_run",
    "_debug",
    "_terminal",
)


def _public_names() -> dict[str, str]:
    """``{name: module}`` of every declaration a user may name: structs, unions, literals."""
    names: dict[str, str] = {}
    for short in _MODULES:
        module = sys.modules[f"supervisor._api.{short}"]
        for name, value in vars(module).items():
            if name.startswith("_") or name in names:
                continue
            is_struct = isinstance(value, type) and issubclass(value, msgspec.Struct)
            if (is_struct and value.__module__ == module.__name__ and value not in _BASES) or (
                name in getattr(module, "__all__", ())
                and (typing.get_origin(value) is not None or name in ("JsonValue", "JsonObject"))
            ):
                names[name] = short
    return names


_BASES: Final = (_base.Payload, _base.Result, _base.Event)


def render_public() -> str:
    """The source of ``supervisor/commands.py``: the declarations, for code that embeds the
    Core and wants to name them."""
    names = _public_names()
    lines = [
        '"""The declarations of every Core command\'s payload and result, and of every event.',
        "",
        "For code that embeds the Core and names these types (``await core.process_run(...)``",
        "returns a :class:`ProcessResult`; ``isinstance(event, JobFinished)``). The reference is",
        "docs/commands.md. Generated by ``python -m supervisor._api.docgen``; do not edit.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
    ]
    for short in sorted(_MODULES):
        chosen = sorted(n for n, m in names.items() if m == short)
        if chosen:
            lines.append(f"from ._api.{short} import (")
            lines += [f"    {name} as {name}," for name in chosen]
            lines.append(")")
    lines += ["", "__all__ = ("]
    lines += [f'    "{name}",' for name in sorted(names)]
    lines += [")", ""]
    return "\n".join(lines)


# -- the reference -----------------------------------------------------------------------


def _schema_of(tp: Any) -> dict[str, Any]:
    schema: dict[str, Any] = msgspec.json.schema(tp)
    return schema


def _schema_components(types_: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``msgspec.json.schema_components``, in one form whatever the versions that run it.

    Every ``description`` is cleaned as :func:`inspect.cleandoc` cleans a docstring (msgspec
    took ``__doc__`` as written before 0.19, and Python 3.13 strips docstring indents when it
    compiles them), and an ``anyOf`` lists ``{"type": "null"}`` last (msgspec put it first
    before 0.22). So the files and ``test_generated_files_are_current`` hold for every
    msgspec the project allows (CI runs the lowest).
    """
    (schemas, components) = msgspec.json.schema_components(types_, ref_template="#/$defs/{name}")
    return _normalized(schemas), _normalized(components)


def _normalized(value: Any) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == "description" and isinstance(item, str):
                out[key] = inspect.cleandoc(item)
            elif key == "anyOf" and isinstance(item, list):
                members = [_normalized(member) for member in item]
                out[key] = sorted(members, key=lambda member: member == {"type": "null"})
            else:
                out[key] = _normalized(item)
        return out
    if isinstance(value, list | tuple):
        return type(value)(_normalized(item) for item in value)
    return value


def render_schemas() -> dict[str, str]:
    """``{file name: JSON text}`` of ``docs/schema/``: one file per service and events."""
    services: dict[str, dict[str, Any]] = {}
    for name, command in sorted(COMMANDS.items()):
        services.setdefault(command.service, {})[name] = command
    files: dict[str, str] = {}
    for service, commands in sorted(services.items()):
        types_: list[Any] = []
        for command in commands.values():
            types_.append(command.payload)
            if command.result is not None:
                types_.append(command.result)
        (schemas, components) = _schema_components(types_)
        document: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"{service} commands",
            "commands": {},
            "$defs": components,
        }
        it = iter(schemas)
        for name, command in commands.items():
            entry = {"payload": next(it)}
            entry["result"] = next(it) if command.result is not None else {"type": "null"}
            document["commands"][name] = entry
        files[f"{service}.json"] = json.dumps(document, indent=2, sort_keys=True) + "\n"
    kinds = sorted(EVENTS)
    (schemas, components) = _schema_components([EVENTS[k] for k in kinds])
    document = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "events of *.waitEvents / *.pollEvents",
        "events": dict(zip(kinds, schemas, strict=True)),
        "$defs": components,
    }
    files["events.json"] = json.dumps(document, indent=2, sort_keys=True) + "\n"
    (schemas, components) = _schema_components([Envelope, Response])
    document = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "the envelope: a request and its response",
        "request": schemas[0],
        "response": schemas[1],
        "$defs": components,
    }
    files["envelope.json"] = json.dumps(document, indent=2, sort_keys=True) + "\n"
    return files


def _type_md(tp: Any) -> str:
    """A short text of a type for a table: ``string``, ``int 1..2147483647``, ``Adapter``."""
    metas: list[msgspec.Meta] = []
    rules: list[str] = []
    while typing.get_origin(tp) is typing.Annotated:
        tp, *extras = typing.get_args(tp)
        metas += [e for e in extras if isinstance(e, msgspec.Meta)]
        rules += [e.name for e in extras if isinstance(e, _base.Rule)]
    origin = typing.get_origin(tp)
    if origin in (typing.Union, __import__("types").UnionType):
        arms = [a for a in typing.get_args(tp) if a is not type(None)]
        text = " \\| ".join(_type_md(a) for a in arms)
        if len(arms) < len(typing.get_args(tp)):
            text += " \\| null"
    elif origin is typing.Literal:
        text = " \\| ".join(json.dumps(v) for v in typing.get_args(tp))
    elif origin is list:
        text = f"array of {_type_md(typing.get_args(tp)[0])}"
    elif origin is dict:
        text = f"object of {_type_md(typing.get_args(tp)[1])}"
    elif tp is typing.Any:
        text = "JSON"
    elif isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        text = f"[{tp.__name__}](#{tp.__name__.lower()})"
    else:
        text = {str: "string", int: "integer", bool: "boolean", float: "number"}.get(
            tp, getattr(tp, "__name__", str(tp))
        )
    for meta in metas:
        bounds = []
        if meta.ge is not None or meta.le is not None:
            low = "" if meta.ge is None else meta.ge
            high = "" if meta.le is None else meta.le
            bounds.append(f"{low}..{high}")
        if meta.min_length is not None:
            bounds.append(f"length >= {meta.min_length}")
        if meta.max_length is not None:
            bounds.append(f"length <= {meta.max_length}")
        if bounds:
            text += f" ({', '.join(bounds)})"
    if rules:
        text += f" [{'; '.join(rules)}]"
    return text


def _attributes(cls: type) -> dict[str, str]:
    """``{field: text}`` from the ``Attributes:`` sections of ``cls``'s docstring and of the
    classes it stands on (its own entries win: an event's ``seq`` is documented once, on
    :class:`~._base.Event`)."""
    texts: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        doc = klass.__dict__.get("__doc__")
        if isinstance(doc, str):
            texts.update(_attributes_section(inspect.cleandoc(doc)))
    return texts


def _attributes_section(doc: str) -> dict[str, str]:
    _, found, section = doc.partition("Attributes:\n")
    if not found:
        return {}
    texts: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        if not line.strip():
            break
        match = re.match(r"    (\w+): (.*)", line)
        if match:
            name = match[1]
            texts[name] = match[2]
        elif name is not None and line.startswith("        "):
            texts[name] += " " + line.strip()
        else:
            break
    return texts


def _meaning(cls: type, field: msgspec.structs.FieldInfo, texts: dict[str, str]) -> str:
    """A field's meaning: its struct's own entry, else the one it has wherever it appears
    (:data:`~._base.FIELD_MEANINGS`)."""
    text = texts.get(field.name)
    if text:
        return text
    if field.encode_name == "timeoutMilliseconds":
        return _base.WAIT_MEANING if cls.__name__.endswith("WaitEvents") else _base.DEADLINE_MEANING
    return _base.FIELD_MEANINGS.get(field.encode_name, "")


def _struct_md(cls: type[msgspec.Struct], seen: set[type], out: list[str]) -> None:
    if cls in seen:
        return
    seen.add(cls)
    hints = typing.get_type_hints(cls, include_extras=True)
    config = cls.__struct_config__
    title = cls.__name__
    if config.tag_field and config.tag is not None:
        title += f" (`{config.tag_field}`: `{config.tag}`)"
    out.append(f"#### {cls.__name__}\n")
    if config.tag_field and config.tag is not None:
        out.append(f"`{config.tag_field}`: `{json.dumps(config.tag)}`\n")
    doc = (inspect.getdoc(cls) or "").split("\n\n")[0]
    if inspect.getdoc(cls) == inspect.getdoc(cls.__mro__[1]):
        doc = ""
    if doc and not doc.startswith(("A command's", "One queued event")):
        out.append(" ".join(line.strip() for line in doc.splitlines()) + "\n")
    fields = msgspec.structs.fields(cls)
    if not fields:
        out.append("No fields.\n")
        return
    texts = _attributes(cls)
    out.append("| field | type | required | meaning |")
    out.append("|---|---|---|---|")
    nested: list[type[msgspec.Struct]] = []
    for field in fields:
        required = field.default is msgspec.NODEFAULT and field.default_factory is msgspec.NODEFAULT
        mark = "yes" if required else ""
        text = _meaning(cls, field, texts).replace("|", "\\|")
        out.append(f"| `{field.encode_name}` | {_type_md(hints[field.name])} | {mark} | {text} |")
        nested += _structs_in(hints[field.name])
    out.append("")
    for inner in nested:
        _struct_md(inner, seen, out)


def _rst(text: str) -> str:
    """Docstring markup (``x``) as Markdown (`x`), on one line."""
    return " ".join(text.replace("``", "`").split())


def _event_md(cls: type[msgspec.Struct]) -> str:
    """One event as a list item: its name, when it comes, and what it carries."""
    tag = cls.__struct_config__.tag
    doc = inspect.getdoc(cls) or ""
    when = _rst(doc.split("\nAttributes:")[0]) if doc else "(undocumented)"
    carried = [
        f"`{field.encode_name}`"
        for field in msgspec.structs.fields(cls)
        if field.encode_name not in ("seq", "event")
    ]
    anchor = cls.__name__.lower()
    return (
        f"- `{tag}` ([{cls.__name__}](#{anchor})): {when} Carries "
        + (", ".join(carried) if carried else "nothing more")
        + " (besides `seq` and `event`)."
    )


def _structs_in(tp: Any) -> list[type[msgspec.Struct]]:
    found: list[type[msgspec.Struct]] = []
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return [tp]
    for arg in typing.get_args(tp):
        if not isinstance(arg, (msgspec.Meta, _base.Rule, str, int, bool)):
            found += _structs_in(arg)
    return found


def render_markdown() -> str:
    """The text of ``docs/commands.md``."""
    out = [
        "# Command reference",
        "",
        "Generated from the declarations in `supervisor/_api/` by",
        "`python -m supervisor._api.docgen`; do not edit. JSON Schema of every payload,",
        "result and event: [schema/](schema/).",
        "",
        "Every request is an envelope `{id, operationId?, timeoutMilliseconds?, command,",
        'payload}` (the Core API contract "Envelope"); `timeoutMilliseconds` is 0 (none) to',
        f"{_base.MAX_MILLISECONDS}. A payload is decoded by its declaration: an unknown field, a",
        "wrong type, a value out of its bounds or one that breaks a rule is `invalid_request`",
        'with `details.field` naming its path (`"argv[2]"`, `"env.PATH"`); an unknown field\'s',
        "message lists the known ones. Optional fields may be absent or null. Everywhere in a",
        "request numbers must be finite and strings valid Unicode (pass-through JSON",
        "included); names echoed in a message are cut so a message stays within 1024 bytes.",
        "",
        "## Envelope",
        "",
    ]
    seen: set[type] = set()
    for envelope in (Envelope, Response):
        _struct_md(envelope, seen, out)
    out += [
        "## Commands",
        "",
        'The order column is the order rule (docs/architecture.md "The order rule"):',
        "commands on one target take effect in the order they arrived on one connection,",
        "one thread of `CoreThread` or one task; the column names the target and the payload",
        "field naming it. Commands that share a target are ordered with each other (`lsp.*`",
        "and the plugin commands on one `sessionId`, for example); answers may come in any",
        "order, and a command with no target is ordered with nothing. *ends* marks a command",
        "that ends its target: it waits for an ending command ahead of it, but for any other",
        f"operation at most {ENDING_TURN_WAIT_MS} ms, so a target stuck on a blocked write can",
        "always be ended. *named* marks an operation its kind's `*.cancelOperation` (ordered",
        "with nothing: it never waits behind what it cancels) finds while it still waits for",
        "its turn, by its `operationId` (the Core operation's id when the payload has none):",
        "it then ends cancelled as a running one does, and nothing of it is sent.",
        "",
        "| command | payload | result | order |",
        "|---|---|---|---|",
    ]
    for name in sorted(COMMANDS):
        command = COMMANDS[name]
        out.append(
            f"| `{name}` | {_type_md(command.payload)} | "
            f"{_type_md(command.result) if command.result is not None else 'null'} | "
            f"{_order_md(command.order)} |"
        )
    out.append("")
    by_service: dict[str, list[Command]] = {}
    for command in COMMANDS.values():
        by_service.setdefault(command.service, []).append(command)
    for service in sorted(by_service):
        out += [f"## {service}", ""]
        for command in sorted(by_service[service], key=lambda c: c.name):
            out += [f"### `{command.name}`", ""]
            before = len(out)
            for part in (command.payload, command.result):
                for cls in _structs_in(part) if part is not None else []:
                    _struct_md(cls, seen, out)
            if len(out) == before:
                # Its declarations were all described under an earlier command: say which.
                result = "null" if command.result is None else _type_md(command.result)
                out += [
                    f"Payload {_type_md(command.payload)}, result {result}: described above.",
                    "",
                ]
    out += ["## Events", ""]
    out += [
        "`*.waitEvents` and `*.pollEvents` answer `{events, gap}`: events in order, each",
        "with `seq` (one more per queued event) and `event` (its kind); `gap` is true when",
        "events were dropped since the last drain (the consumer did not keep up). The first",
        "event drained of a target (job, terminal, run or session) that lost events carries",
        "`dropped` (how many) and `droppedBytes` (their bytes as JSON). `supervisor serve`",
        "pushes job events as notifications instead (with the same two members).",
        "",
    ]
    for kind in sorted(EVENTS):
        out += [f"### {kind} events", "", f"**What ends the stream.** {_rst(EVENT_STREAMS[kind])}"]
        out.append("")
        for cls in _structs_in(EVENTS[kind]):
            out.append(_event_md(cls))
        out.append("")
        for cls in _structs_in(EVENTS[kind]):
            _struct_md(cls, seen, out)
    _tables_md(out)
    return "\n".join(out)


def _tables_md(out: list[str]) -> None:
    """The reference's closing tables: session states, stop steps and error codes."""
    out += ["## Session states", ""]
    for title, states in (
        ("Language-server sessions (`lsp.*`)", LSP_STATES),
        ("Debug sessions (`debug.*`)", DEBUG_STATES),
        ("Terminals (`terminal.*`)", TERMINAL_STATES),
    ):
        out += [f"### {title}", "", "| state | meaning |", "|---|---|"]
        out += [f"| `{state}` | {meaning} |" for state, meaning in states.items()]
        out.append("")
    out += ["## Stop steps (`lsp.stopServer` `timeline`)", "", "| step | meaning |", "|---|---|"]
    out += [f"| `{step}` | {meaning} |" for step, meaning in LSP_STOP_STEPS.items()]
    out += ["", "## Error codes", "", "From the one catalog (`protocol.ERROR_CATALOG`).", ""]
    out += ["| code | JSON-RPC code | meaning |", "|---|---|---|"]
    for entry in ERROR_CATALOG:
        number = "" if entry.jsonrpc_code is None else str(entry.jsonrpc_code)
        out.append(f"| `{entry.name}` | {number} | {entry.meaning} |")
    out.append("")


def generated() -> dict[Path, str]:
    """Every generated file (path from the repository root) and its current text."""
    files = {
        Path("supervisor/_api/_helpers.py"): _format(render_helpers()),
        Path("supervisor/commands.py"): _format(render_public(), "commands.py"),
        Path("docs/commands.md"): render_markdown(),
    }
    for name, text in render_schemas().items():
        files[Path("docs/schema") / name] = text
    return files


def _format(source: str, name: str = "_helpers.py") -> str:
    """``ruff format`` the generated source when ruff is at hand (it is in [dev])."""
    import shutil
    import subprocess

    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    for args in (["check", "--fix", "--select", "I", "--quiet"], ["format"]):
        try:
            done = subprocess.run(
                [ruff, *args, "--stdin-filename", name, "-"],
                input=source,
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
        except (OSError, subprocess.CalledProcessError):
            return source
        source = done.stdout
    return source


def main(argv: list[str] | None = None) -> int:
    """Write the generated files, or with ``--check`` report the stale ones (exit 1)."""
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    stale = []
    for path, text in generated().items():
        target = ROOT / path
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if check else 'wrote'}: {path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
