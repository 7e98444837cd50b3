"""The typed edge: base structs, field types with domain rules, and the one decode step.

Every command's payload is a :class:`Payload` struct (camelCase on the wire, unknown fields
refused, ranges and lengths as :class:`msgspec.Meta`). :func:`decode_payload` converts a
request's JSON object into it; that conversion *is* the validation, so every command refuses
bad input in one place with one error shape (the Core API contract "Envelope": bad input is
``invalid_request``)::

    CoreError("invalid_request", "<command>: <message>", {"field": "<path>"})

``details.field`` is the path of the bad value (``"argv[2]"``, ``"env.PATH"``,
``"adapter.port"``); an unknown field's message lists the known ones.

What msgspec can not say is a :class:`Rule` on an ``Annotated`` type, checked by the same
step right after the conversion: text that reaches the OS holds no NUL and is valid Unicode
(:data:`OsText`, :data:`Path`, :data:`Argv`, :data:`Env`, :data:`StreamText`). Two rules hold
for the whole request and are checked by the Core before this step
(:func:`protocol.check_request_values`): every number is finite and every string is valid
Unicode, pass-through JSON (:data:`JsonValue`) included. Echoed names are cut
(:func:`protocol.echo`) so a message stays within 1024 bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Final, TypeAlias, TypeVar, Union

import msgspec

from protocol import (
    MAX_ECHO_BYTES,
    MAX_MILLISECONDS,
    CoreError,
    argv_item_problem,
    cut_utf8,
    did_you_mean,
    echo,
    env_item_problem,
    invalid_field,
    path_problem,
    text_problem,
)

__all__ = (
    "ENDING_TURN_WAIT_MS",
    "MAX_COUNT",
    "MAX_MILLISECONDS",
    "AcceptedResult",
    "Argv",
    "CancelledResult",
    "Count",
    "Env",
    "Event",
    "JsonObject",
    "JsonValue",
    "Milliseconds",
    "NonEmpty",
    "Ordered",
    "OsText",
    "Path",
    "Payload",
    "RefusedAs",
    "Result",
    "Rule",
    "StreamText",
    "WaitMilliseconds",
    "decode_payload",
)

#: The bound of an integer field whose command documents none (ids, counts): 2**31 - 1.
MAX_COUNT: Final = 2**31 - 1

T = TypeVar("T")


class Payload(
    msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True, omit_defaults=True
):
    """A command's payload: camelCase on the wire, unknown fields refused.

    An optional field is ``X | None = None``: absent and ``null`` mean the same.
    """


class Result(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """A command's result (its ``data``)."""


class Event(
    msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True, tag_field="event"
):
    """One queued event as ``*.waitEvents`` / ``*.pollEvents`` return it.

    Attributes:
        seq: Its number in its queue, growing by one per event queued (a gap in the numbers
            is an event dropped while the queue was full).
        dropped: Events of the same target (job, terminal, run or session) dropped since its
            last drained event, because the consumer did not keep up (absent when none).
        dropped_bytes: The bytes those events took as JSON (with ``dropped``).
    """

    seq: int
    dropped: int | None = None
    dropped_bytes: int | None = None


class CancelledResult(Result, kw_only=True):
    """A ``*.cancelOperation``: false when the operation was unknown or already ended.

    Attributes:
        cancelled: True when the operation was running, or still waited for its turn on
            its session (it arrived before the cancel), and is now ending ``cancelled``;
            false when it was unknown, another session's, or had already ended.
    """

    cancelled: bool


class AcceptedResult(Result, kw_only=True):
    """An answer to a request the other side made: false for an unknown, late or repeated
    id.

    Attributes:
        accepted: True when the answer was taken; false for an unknown, late or repeated id
            (nothing was sent).
    """

    accepted: bool


@dataclasses.dataclass(frozen=True)
class Ordered:
    """The target a command acts on: commands on one target take effect in arrival order.

    docs/architecture.md "The order rule": operations on one target take effect in the order
    they arrived on one connection, thread or task; answers may come in any order and
    different targets run concurrently. A command without an :class:`Ordered` entry (a
    read, a wait for events, a cancel, a one-shot process) is ordered with nothing.

    Attributes:
        target: The kind of target (``"terminal"``, ``"lsp"``, ``"debug"``, ``"run"``,
            ``"job"``, ``"workspace"``); commands of different services that share a kind
            share the target (a plugin backend is an ``"lsp"`` session).
        field: The payload field (wire name) naming the target (``"terminalID"``,
            ``"sessionId"``); None: one target for the whole kind (the job lanes, the
            workspace contexts).
        ending: The command ends its target (stop, close, dispose, disconnect, destroy): it
            waits for the operations ahead of it at most :data:`ENDING_TURN_WAIT_MS`, so a
            target stuck on a blocked write can always be ended.
        named: The target's own cancel (``lsp.cancelOperation``, ``debug.cancelOperation``)
            finds the command while it still waits for its turn, by the id the target will
            know it by: the payload's ``operationId``, else the Core operation's id (the
            envelope's, the JSON-RPC id in serve). It then ends cancelled without its
            effect (:meth:`supervisor._session._order.Sequencer.withdraw`).
    """

    target: str
    field: str | None = None
    ending: bool = False
    named: bool = False


#: How long an ending command (:attr:`Ordered.ending`) waits for the operations ahead of it
#: on its target before it takes effect anyway (ours): the default polite-step bound.
ENDING_TURN_WAIT_MS: Final = 2_000


@dataclasses.dataclass(frozen=True)
class Rule:
    """A domain rule of a field that a declaration can not express.

    Attributes:
        name: How the reference names it (``"text for the OS"``).
        check: ``check(value, path)`` raises :class:`CoreError` ``invalid_request`` with
            ``details.field`` the path of the bad value.
    """

    name: str
    check: Callable[[Any, str], None]


@dataclasses.dataclass(frozen=True)
class RefusedAs:
    """A field whose bad value a contract refuses with its own code, not ``invalid_request``.

    The plugin contract refuses a plugin's malformed request field with
    ``plugin.host.invalidParams``; a field declared ``Annotated[T, RefusedAs(code)]`` keeps
    its bound in the declaration and the contract's code on the wire. The decode step raises
    ``CoreError(code, "<command>: <message>")`` (no ``details``, as the contract's refusals).

    Attributes:
        code: The error code (``"plugin.host.invalidParams"``).
    """

    code: str


def _problem(path: str, problem: str | None) -> None:
    if problem is not None:
        raise invalid_field(path, problem)


def _check_os_text(value: str, path: str) -> None:
    _problem(path, text_problem(value, path))


def _check_path(value: str, path: str) -> None:
    _problem(path, path_problem(value, path))


def _check_stream_text(value: str, path: str) -> None:
    # NUL is a byte like any other on a stream; only a lone surrogate can't be written.
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_field(path, f"{path} must be valid Unicode text (a lone surrogate)") from None


def _check_argv(value: list[str], path: str) -> None:
    for index, item in enumerate(value):
        _problem(f"{path}[{index}]", argv_item_problem(index, item, path))


def _check_env(value: dict[str, str | None], path: str) -> None:
    for key, item in value.items():
        _problem(f"{path}.{cut_utf8(key, MAX_ECHO_BYTES)}", env_item_problem(key, item, path))


OS_TEXT: Final = Rule("text for the OS: no NUL, valid Unicode", _check_os_text)
PATH: Final = Rule("a path: not empty, no NUL, valid Unicode", _check_path)
STREAM_TEXT: Final = Rule("text for a stream: valid Unicode (NUL allowed)", _check_stream_text)
ARGV: Final = Rule("an argv: the program not empty; no NUL, valid Unicode", _check_argv)
ENV: Final = Rule(
    "an environment: names not empty, without '=', NUL; values no NUL; null removes", _check_env
)

#: Pass-through JSON (initialization options, settings, request params): any JSON value;
#: its numbers must be finite and its strings valid Unicode (checked for the whole request).
JsonValue: TypeAlias = Any
#: A pass-through JSON object.
JsonObject: TypeAlias = dict[str, Any]
#: A non-empty string.
NonEmpty: TypeAlias = Annotated[str, msgspec.Meta(min_length=1)]
#: Text that reaches the OS (a title, a name): no NUL, valid Unicode.
OsText: TypeAlias = Annotated[str, OS_TEXT]
#: A path (a working directory, an executable): not empty, no NUL, valid Unicode.
Path: TypeAlias = Annotated[str, msgspec.Meta(min_length=1), PATH]
#: Data written to a stream (stdin): valid Unicode; NUL allowed.
StreamText: TypeAlias = Annotated[str, STREAM_TEXT]
#: A program and its arguments: at least the program, which is not empty.
Argv: TypeAlias = Annotated[list[str], msgspec.Meta(min_length=1), ARGV]
#: Environment changes: a name to a value, or to null to remove the variable.
Env: TypeAlias = Annotated[dict[str, str | None], ENV]
#: A duration in whole milliseconds: 1 to 2**31 - 1 (about 24.8 days).
Milliseconds: TypeAlias = Annotated[int, msgspec.Meta(ge=1, le=MAX_MILLISECONDS)]
#: ``timeoutMilliseconds`` of a ``*.waitEvents``: 0 (drain at once) to 2**31 - 1; a wait
#: longer than 10 minutes is cut to 10 minutes.
WaitMilliseconds: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_MILLISECONDS)]
#: A count or an id: 1 to 2**31 - 1.
Count: TypeAlias = Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)]


#: Field names from other habits (and from our other commands) mapped to the field a
#: declaration may have instead: an unknown-field refusal suggests the alias's target when
#: that command has it (:func:`protocol.did_you_mean`), else the closest spelling.
FIELD_ALIASES: Final = {
    "argv": "arguments",
    "args": "arguments",
    "cmd": "executable",
    "command": "executable",
    "program": "executable",
    "cwd": "workingDirectory",
    "workingDirectory": "cwd",
    "env": "environment",
    "environment": "env",
    "timeout": "timeoutMilliseconds",
    "timeoutMs": "timeoutMilliseconds",
}


#: What a wire field means wherever it appears, for docs/commands.md: a struct's own
#: ``Attributes:`` entry wins where the field means more there. One text per concept, so the
#: reference says the same thing about ``sessionId`` in all of its 80 places.
FIELD_MEANINGS: Final = {
    "sessionId": "The session's id, as its start answered it (``lsp.startServer``,"
    " ``debug.createSession``).",
    "terminalID": "The terminal's id, as ``terminal.create`` answered it.",
    "jobId": "The job's id, as ``job.start`` answered it.",
    "runId": "The run's id, as ``run.list`` and the run's events give it.",
    "operationId": "The operation's id: its events carry it and ``*.cancelOperation`` names"
    " it (the caller's, when it gave one; else one the supervisor made).",
    "generation": "Which start this is: 1 for the first, one more for each restart (a"
    " language server), reopen (a terminal) or change (a workspace context).",
    "pid": "The process id of its main process; null or absent when none runs.",
    "adapterPid": "The debug adapter's process id; null when the supervisor did not start it"
    " (an adapter reached over TCP) or it runs no more.",
    "exitCode": "The process's exit status; null when a signal ended it or it has not exited.",
    "signal": "The number of the signal that ended the process; null when none did.",
    "signalName": "That signal's name (``SIGTERM``); null when none.",
    "crashReport": "Only in state ``failed``: a bounded report of the unexpected exception"
    " that ended it (type, message, where); nothing of it reaches other sessions.",
    "events": "The events taken from the queue, oldest first; empty when none came in time.",
    "gap": "True when events of this queue were dropped since the last drain (the queue was"
    " full): what the consumer holds is incomplete. The events next to the loss carry"
    " ``dropped``.",
    "threadId": "A DAP thread id (from ``debug.inspect`` ``threads`` or a ``stopped`` event).",
    "frameId": "A DAP stack frame id (from ``debug.inspect`` ``stackTrace``).",
    "variablesReference": "A DAP variables reference (from ``scopes``, ``variables`` or"
    " ``evaluate``): 1 or more (DAP's 0 means a value has no children, so there is nothing"
    " to ask).",
    "subscriptionID": "The subscription's id, as the command that made it answered"
    " (``terminal.onExit``).",
    "hostRequestID": "The host request's id, from its ``hostRequest`` event; ``lsp.hostResponse``"
    " answers it.",
    "pluginId": "The plugin (its id under the plugin contract) the session or call belongs to.",
    "uri": "A document's URI, as LSP writes it (``file:///...``).",
    "owner": "The plugin session that owns it (it ends with that session); null for the"
    " host's own.",
    "rows": "Screen height, in lines.",
    "cols": "Screen width, in columns.",
    "state": "Its lifecycle state (the states of language-server sessions, debug sessions"
    ' and terminals are explained under "Session states" below).',
    "method": "The LSP (JSON-RPC) method, as the protocol names it (``textDocument/hover``).",
    "params": "The params, passed through as JSON (an object or an array).",
    "enabled": "False keeps the entry but off: it is not sent to the adapter (default true).",
    "condition": "An expression the adapter evaluates; it stops only when the expression is"
    " true (sent only to an adapter that announced conditions).",
    "hitCondition": "How many hits to ignore before it stops, as the adapter reads it (sent"
    " only to an adapter that announced hit conditions).",
}
#: ``timeoutMilliseconds`` of a ``*.waitEvents``.
WAIT_MEANING: Final = (
    "How long to wait for an event, in milliseconds: 0 or absent returns at once; a wait"
    " longer than 10 minutes is cut to 10 minutes."
)
#: ``timeoutMilliseconds`` of any other command.
DEADLINE_MEANING: Final = (
    "The operation's deadline, in milliseconds: past it the operation ends as timed out (how"
    " the command says); absent: the command's default."
)


# -- the rule walker --------------------------------------------------------------------

_Checker: TypeAlias = Callable[[Any, str], None]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@functools.cache
def _checker(tp: Any) -> _Checker | None:
    """The post-decode check of a type (its rules, and those of what it contains), or None
    when nothing in it has a rule (the common case: nothing to walk)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        inner, *extras = typing.get_args(tp)
        rules = [extra.check for extra in extras if isinstance(extra, Rule)]
        nested = _checker(inner)
        if nested is not None:
            rules.insert(0, nested)
        if not rules:
            return None
        if len(rules) == 1:
            return rules[0]

        def annotated(value: Any, path: str) -> None:
            for rule in rules:
                rule(value, path)

        return annotated
    if origin in (Union, types.UnionType):
        arms: list[tuple[Any, _Checker]] = [
            (arg, check) for arg in typing.get_args(tp) if (check := _checker(arg)) is not None
        ]
        if not arms:
            return None

        def union(value: Any, path: str) -> None:
            for arg, check in arms:
                base = typing.get_origin(arg) or arg
                while base is Annotated:
                    arg = typing.get_args(arg)[0]
                    base = typing.get_origin(arg) or arg
                if isinstance(base, type) and isinstance(value, base):
                    check(value, path)
                    return

        return union
    if origin in (list, tuple):
        args = typing.get_args(tp)
        item = _checker(args[0]) if args else None
        if item is None:
            return None

        def sequence(value: Any, path: str) -> None:
            for index, child in enumerate(value):
                item(child, f"{path}[{index}]")

        return sequence
    if origin is dict:
        value_check = _checker(typing.get_args(tp)[1])
        if value_check is None:
            return None

        def mapping(value: Any, path: str) -> None:
            for key, child in value.items():
                value_check(child, _join(path, cut_utf8(str(key), MAX_ECHO_BYTES)))

        return mapping
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return _struct_checker(tp)
    return None


def _struct_checker(cls: type[msgspec.Struct]) -> _Checker | None:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = [
        (field.name, field.encode_name, check)
        for field in msgspec.structs.fields(cls)
        if (check := _checker(hints[field.name])) is not None
    ]
    if not fields:
        return None

    def struct(value: Any, path: str) -> None:
        for name, wire, check in fields:
            child = getattr(value, name)
            if child is not None:
                check(child, _join(path, wire))

    return struct


# -- decoding ----------------------------------------------------------------------------

_LOCATION = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_JSON_NAMES: Final = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}


def _json_name(spec: str) -> str:
    return " or ".join(_JSON_NAMES.get(part, part) for part in spec.split(" | "))


def _wire_path(location: str) -> str:
    # msgspec writes `$.a.b[2]`; a dict's key is `[...]`.
    return location.lstrip(".")


_PART = re.compile(r"[^.\[\]]+|\[[^\]]*\]")


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _arms(tp: Any) -> list[Any]:
    tp = _strip(tp)
    if typing.get_origin(tp) in (Union, types.UnionType):
        return [a for arg in typing.get_args(tp) for a in _arms(arg)]
    return [tp]


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _pick(tp: Any, raw: object) -> Any:
    """The arm of ``tp`` that ``raw`` is meant as: the struct (by its tag when the union is
    tagged), the container, or ``tp`` unwrapped; None when there is no telling."""
    arms = [a for a in _arms(tp) if a is not type(None)]
    structs = [a for a in arms if _is_struct(a)]
    if len(structs) > 1 and isinstance(raw, dict):
        config = structs[0].__struct_config__
        tag = raw.get(config.tag_field) if config.tag_field else None
        return next((a for a in structs if a.__struct_config__.tag == tag), None)
    if isinstance(raw, dict):
        for arm in arms:
            if _is_struct(arm) or (typing.get_origin(arm) or arm) is dict:
                return arm
    if isinstance(raw, list):
        for arm in arms:
            if (typing.get_origin(arm) or arm) in (list, tuple):
                return arm
    return arms[0] if len(arms) == 1 else None


def _field_type(cls: Any, wire: str) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    match = [f for f in msgspec.structs.fields(cls) if f.encode_name == wire]
    return hints[match[0].name] if match else None


def _walk(tp: Any, raw: object, path: str) -> tuple[Any, object, str]:
    """Follow ``path`` through the type and the raw value together; ``[...]`` (msgspec's
    name of a dict's key) becomes the first key whose value is the bad one's JSON type
    when known, else the first key. Returns ``(type, value, path with keys)``."""
    shown = ""
    for part in _PART.findall(path):
        arm = _pick(tp, raw)
        if part.startswith("["):
            args = typing.get_args(arm) if arm is not None else ()
            tp = args[-1] if args else None
            if part == "[...]" and isinstance(raw, dict):
                key = next(iter(raw), "")
                raw = raw.get(key)
                shown = _join(shown, cut_utf8(str(key), MAX_ECHO_BYTES))
            else:
                index = int(part[1:-1])
                raw = raw[index] if isinstance(raw, list) and index < len(raw) else None
                shown += part
            continue
        tp = _field_type(arm, part) if _is_struct(arm) else None
        raw = raw.get(part) if isinstance(raw, dict) else None
        shown = _join(shown, part)
    return tp, raw, shown


def _dict_key(tp: Any, raw: object, path: str, got: str) -> str:
    """``path`` with its ``[...]`` replaced by the key whose value is of JSON type ``got``."""
    if "[...]" not in path:
        return path
    head, _, tail = path.partition("[...]")
    _, container, shown = _walk(tp, raw, head)
    if isinstance(container, dict):
        for key, value in container.items():
            if _json_name(_type_name(value)) == got:
                return _join(shown, cut_utf8(str(key), MAX_ECHO_BYTES)) + tail
    return shown + tail


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _known_fields(tp: Any, raw: object, path: str) -> list[str]:
    """The wire names of the struct at ``path`` (empty when none is found)."""
    target, value, _ = _walk(tp, raw, path)
    cls = _pick(target, value)
    if not _is_struct(cls):
        return []
    names = {f.encode_name for f in msgspec.structs.fields(cls)}
    tag_field = cls.__struct_config__.tag_field
    return sorted(names | ({tag_field} if tag_field else set()))


def _allowed_values(tp: Any, raw: object, path: str) -> list[str]:
    """The literal values (or union tags) allowed at ``path``, for a message."""
    parent, _, last = path.rpartition(".")
    target, value, _ = _walk(tp, raw, parent)
    structs = [a for a in _arms(target) if _is_struct(a)]
    tags = [
        str(a.__struct_config__.tag)
        for a in structs
        if a.__struct_config__.tag_field == last and a.__struct_config__.tag is not None
    ]
    if tags:
        return tags
    cls = _pick(target, value)
    field = _field_type(cls, last) if _is_struct(cls) else None
    return [
        str(v)
        for arm in _arms(field)
        if typing.get_origin(arm) is typing.Literal
        for v in typing.get_args(arm)
    ]


def _message(command: str, tp: Any, raw: object, text: str) -> CoreError:
    """The ``invalid_request`` of a :class:`msgspec.ValidationError` message."""
    location = _LOCATION.search(text)
    path = _wire_path(location["path"]) if location else ""
    text = text[: location.start()] if location else text

    def fail(where: str, message: str) -> CoreError:
        where = where or "payload"
        return invalid_field(where, f"{command}: {message.format(where=where)}")

    if match := re.fullmatch(r"Object contains unknown field `(.*)`", text, re.S):
        names = _known_fields(tp, raw, path)
        known = ", ".join(names) or "none"
        field = _join(_walk(tp, raw, path)[2], match[1])
        hint = _braces(did_you_mean(match[1], names, aliases=FIELD_ALIASES))
        return fail(field, f"unknown field {_braces(echo(field))}{hint} (known: {known})")
    if match := re.fullmatch(r"Object missing required field `(.*)`", text, re.S):
        return fail(_join(_walk(tp, raw, path)[2], match[1]), "{where} is required")
    if match := re.fullmatch(r"Expected `(.*)`, got `(.*)`", text, re.S):
        expected, got = _json_name(match[1]), _json_name(match[2])
        where = _dict_key(tp, raw, path, got)
        return fail(where, f"{{where}} must be {expected}, not {got}")
    where = _walk(tp, raw, path)[2] if "[...]" in path else path
    if match := re.fullmatch(r"Expected `(\w+)` (>=|<=|>|<) (-?\d+)", text):
        op, bound = match[2], int(match[3])
        if op == ">=" and bound == 1:
            return fail(where, "{where} must be a positive integer")
        if op == ">=" and bound == 0:
            return fail(where, "{where} must be 0 or more")
        if op == "<=":
            return fail(where, f"{{where}} must be at most {bound}")
        return fail(where, f"{{where}} must be {op} {bound}")
    if match := re.fullmatch(r"Expected `(\w+)` of length (>=|<=) (\d+)", text):
        kind, op, bound = match[1], match[2], int(match[3])
        if op == ">=" and bound == 1:
            return fail(where, "{where} must not be empty")
        unit = "characters" if kind == "str" else "items"
        if op == "<=":
            return fail(where, f"{{where}} has more than {bound} {unit}")
        return fail(where, f"{{where}} needs at least {bound} {unit}")
    if match := re.fullmatch(r"Invalid (?:enum )?value (.*)", text, re.S):
        allowed = _allowed_values(tp, raw, path)
        suffix = f" (one of: {', '.join(allowed)})" if allowed else ""
        value = _braces(cut_utf8(match[1], MAX_ECHO_BYTES))
        return fail(where, f"{{where}} has an unknown value {value}{suffix}")
    return fail(where, f"{{where}}: {_braces(cut_utf8(text, 512))}")


def _refused_as(tp: Any, details: object) -> str | None:
    """The :class:`RefusedAs` code of the top-level field a refusal names, if it has one."""
    if not _is_struct(tp) or not isinstance(details, dict):
        return None
    field = details.get("field")
    parts = _PART.findall(field) if isinstance(field, str) else []
    hint = _field_type(tp, parts[0]) if parts else None
    for arm in (hint, *typing.get_args(_strip(hint))):
        if typing.get_origin(arm) is Annotated:
            for extra in typing.get_args(arm)[1:]:
                if isinstance(extra, RefusedAs):
                    return extra.code
    return None


def _braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


@functools.cache
def _union_fields(tp: Any) -> frozenset[str] | None:
    """Every wire field of a tagged union's arms (its tag included); None for another type."""
    arms = _arms(tp)
    if len(arms) < 2 or not all(_is_struct(a) for a in arms):
        return None
    names = {f.encode_name for arm in arms for f in msgspec.structs.fields(arm)}
    names.update(a.__struct_config__.tag_field for a in arms if a.__struct_config__.tag_field)
    return frozenset(names)


#: The attribute :func:`takes_declaration` sets on a command handler.
TAKES_DECLARATION: Final = "takes_declaration"

_H = typing.TypeVar("_H", bound=typing.Callable[..., typing.Any])


def takes_declaration(handler: _H) -> _H:
    """Mark ``handler`` as taking its command's payload declaration, decoded (the Core decodes
    the JSON object, which is its validation, and passes the struct), not the JSON object.

    Methods of a service use ``supervisor._core._service.declared``, which calls this; a
    handler that is a plain function (the session registry's ``*.waitEvents``) calls it
    directly, since the skeleton stands below the Core.
    """
    handler.__dict__[TAKES_DECLARATION] = True
    return handler


def decode_payload(command: str, tp: Any, payload: object) -> Any:
    """Convert ``payload`` into the declaration ``tp`` and check its rules: the validation.

    Args:
        command: The command's name, for messages.
        tp: Its payload declaration (a :class:`Payload` struct or a tagged union of them).
        payload: The decoded JSON object.

    Returns:
        The payload as its declaration.

    Raises:
        CoreError: ``invalid_request`` with ``details.field`` the path of the first bad value;
            for an unknown field the message lists the known ones. A field marked
            :class:`RefusedAs` is refused with its code instead (no ``details``).
    """
    if isinstance(payload, dict) and (known := _union_fields(tp)) is not None:
        # A tagged union (``debug.inspect``): a field no kind has is named before the tag
        # is read, with every kind's fields listed.
        unknown = sorted(set(payload) - known)
        if unknown:
            names = ", ".join(sorted(known))
            hint = did_you_mean(unknown[0], known, aliases=FIELD_ALIASES)
            raise invalid_field(
                unknown[0], f"{command}: unknown field {echo(unknown[0])}{hint} (known: {names})"
            )
    try:
        value = msgspec.convert(payload, tp, strict=True)
    except msgspec.ValidationError as exc:
        error = _message(command, tp, payload, str(exc))
        code = _refused_as(tp, error.details)
        if code is not None:
            raise CoreError(code, error.message) from None
        raise error from None
    check = _checker(tp)
    if check is not None:
        try:
            check(value, "")
        except CoreError as exc:
            raise CoreError(exc.code, f"{command}: {exc.message}", exc.details) from None
    return value


def encode_value(value: object) -> Any:
    """A declaration's value as JSON builtins (wire names, absent optionals left out)."""
    return msgspec.to_builtins(value)
