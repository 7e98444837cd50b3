"""Optional in the types means optional at run time.

Every command's declaration is walked: a payload with only its required fields decodes,
and for the commands whose handler checks the payload further before any effect (the start
parsers), that check accepts it too -- so a field typed optional (``rootUri`` once was) is
never refused for being absent. Where a declaration documents a choice between optional
fields (``executable`` or ``launchPlan``), the test gives the plainer choice and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import msgspec.inspect as mi
import pytest

from supervisor._api import COMMANDS, validate_payload
from supervisor._dap._service import parse_adapter
from supervisor._lsp._service import parse_launch_start, parse_start
from supervisor._plugin._run_service import parse_plugin_runs
from supervisor._terminal._launch import parse_create

if TYPE_CHECKING:
    from collections.abc import Callable


def _sample(tp: mi.Type, name: str) -> Any:
    """A value of ``tp`` that its declaration accepts (the smallest one)."""
    if isinstance(tp, mi.UnionType):
        arms = [arm for arm in tp.types if not isinstance(arm, mi.NoneType)]
        return _sample(arms[0], name)
    if isinstance(tp, mi.StrType):
        text = "/tmp" if name.lower().endswith(("path", "directory", "root", "cwd")) else "x"
        return text.ljust(tp.min_length or 1, "x")
    if isinstance(tp, mi.IntType):
        return tp.ge if tp.ge is not None else 1
    if isinstance(tp, mi.BoolType):
        return False
    if isinstance(tp, mi.LiteralType):
        return tp.values[0]
    if isinstance(tp, mi.ListType):
        return [_sample(tp.item_type, name) for _ in range(tp.min_length or 0)]
    if isinstance(tp, (mi.DictType, mi.AnyType)):
        return {}
    if isinstance(tp, mi.StructType):
        return _required(tp)
    raise AssertionError(f"no sample for {tp!r}")


def _required(tp: mi.StructType) -> dict[str, Any]:
    payload = {
        field.encode_name: _sample(field.type, field.encode_name)
        for field in tp.fields
        if field.required
    }
    if tp.tag_field is not None:
        payload[tp.tag_field] = tp.tag
    return payload


def _minimal_payloads() -> list[tuple[str, dict[str, Any]]]:
    cases: list[tuple[str, dict[str, Any]]] = []
    for name, command in COMMANDS.items():
        info = mi.type_info(command.payload)
        arms = info.types if isinstance(info, mi.UnionType) else (info,)
        for arm in arms:
            assert isinstance(arm, mi.StructType), (name, arm)
            cases.append((name, _required(arm)))
    return cases


@pytest.mark.parametrize(("command", "payload"), _minimal_payloads())
def test_only_the_required_fields_decode(command: str, payload: dict[str, Any]) -> None:
    validate_payload(command, payload)


def _lsp_start(payload: dict[str, Any]) -> object:
    _, rest = parse_launch_start(payload)
    return parse_start(rest)


#: The handlers' own checks before any effect, by command.
CHECKS: dict[str, Callable[[Any], object]] = {
    "lsp.startServer": lambda p: _lsp_start(msgspec_builtins(p)),
    "terminal.create": parse_create,
    "debug.createSession": lambda p: parse_adapter(p.adapter),
    "run.configurePlugin": parse_plugin_runs,
}
#: A choice the declaration documents between optional fields: the plainer side.
CHOICES: dict[str, dict[str, Any]] = {
    # executable (with workingDirectory) or launchPlan (plugin-contract.md "Process start").
    "lsp.startServer": {"executable": "/bin/true", "workingDirectory": "/tmp"},
    # An adapter is started (executable) or reached on a TCP port.
    "debug.createSession": {"adapter": {"executable": "/bin/true"}},
    "run.configurePlugin": {"pluginId": "example.plugin"},
}


def msgspec_builtins(value: object) -> Any:
    """``lsp.startServer``'s parser still reads the JSON object: the decoded payload's."""
    return {k: v for k, v in msgspec.to_builtins(value).items() if v is not None}


@pytest.mark.parametrize("command", sorted(CHECKS))
def test_what_is_typed_optional_is_accepted_when_absent(command: str) -> None:
    info = mi.type_info(COMMANDS[command].payload)
    assert isinstance(info, mi.StructType)
    payload = {**_required(info), **CHOICES.get(command, {})}
    CHECKS[command](validate_payload(command, payload))


def test_the_walk_sees_every_command() -> None:
    assert {name for name, _ in _minimal_payloads()} == set(COMMANDS)
