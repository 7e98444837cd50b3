"""Every command and every event kind is declared once (supervisor/_api), the declaration is
the validation, and what is generated from the declarations is current.

A command added to a service without a payload and result declaration fails here, and so
does a stale docs/commands.md, docs/schema/*.json or supervisor/_api/_helpers.py
(regenerate with ``python -m supervisor._api.docgen``).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

import msgspec
import pytest
import trio

from protocol import CoreError, parse_envelope
from supervisor import open_core
from supervisor._api import COMMANDS, EVENTS, decode_payload
from supervisor._api._core import Envelope, Response
from supervisor._api._helpers import CommandHelpers
from supervisor._api.docgen import ROOT, generated, snake

if TYPE_CHECKING:
    from protocol import JSONObject


def _core_commands() -> tuple[str, ...]:
    async def main() -> tuple[str, ...]:
        async with open_core() as core:
            return core.commands

    return trio.run(main)


def test_every_registered_command_has_a_payload_and_result_declaration() -> None:
    registered = set(_core_commands())
    missing = sorted(registered - set(COMMANDS))
    assert not missing, f"commands without a declaration in supervisor/_api: {missing}"
    stale = sorted(set(COMMANDS) - registered)
    assert not stale, f"declarations of commands no service registers: {stale}"


def test_every_event_kind_has_a_declaration() -> None:
    kinds = {name.partition(".")[0] for name in COMMANDS if name.endswith(".waitEvents")}
    assert kinds == set(EVENTS)
    for kind in kinds:
        assert COMMANDS[f"{kind}.waitEvents"].result is COMMANDS[f"{kind}.pollEvents"].result


def test_every_command_has_a_typed_helper() -> None:
    for name in COMMANDS:
        assert callable(getattr(CommandHelpers, snake(name), None)), name


def _code(source: str) -> str:
    """``source`` as code: its syntax tree, the names of each ``from ... import`` sorted."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            node.names.sort(key=lambda alias: (alias.name, alias.asname or ""))
    return ast.dump(tree)


@pytest.mark.parametrize("path", sorted(str(p) for p in generated()))
def test_generated_files_are_current(path: str) -> None:
    text = generated()[next(p for p in generated() if str(p) == path)]
    current = (ROOT / path).read_text(encoding="utf-8")
    if path.endswith(".py") and current != text:
        # Laid out by `ruff format` and sorted by ruff's isort, whose styles change between
        # releases (CI also runs the lowest ruff the project allows): the code must be the
        # same, not its layout or the order of the names one import brings.
        assert _code(current) == _code(text), (
            f"{path} is stale: run python -m supervisor._api.docgen"
        )
        return
    assert current == text, f"{path} is stale: run python -m supervisor._api.docgen"


@pytest.mark.parametrize(
    ("command", "payload", "field", "words"),
    [
        ("process.run", {"argv": ["a", 1]}, "argv[1]", "must be a string"),
        ("process.run", {"argv": ["a", "b\0"]}, "argv[1]", "NUL"),
        ("process.run", {"argv": ["a"], "env": {"PATH": 3}}, "env.PATH", "string or null"),
        ("process.run", {"argv": ["a"], "env": {"PATH": "a\0"}}, "env.PATH", "NUL"),
        ("process.run", {"argv": ["a"], "bogus": 1}, "bogus", "known: argv, cwd, env"),
        ("process.run", {"argv": ["a"], "maxOutputBytes": 2**70}, "maxOutputBytes", "at most"),
        ("job.start", {"kind": "nope", "root": "/", "argv": ["a"]}, "kind", "one of: build"),
        ("debug.inspect", {"sessionId": "s", "kind": "threads", "frameId": 1}, "frameId", "known"),
        (
            "debug.createSession",
            {"adapterId": "a", "rootPath": "/", "adapter": {"port": 0}},
            "adapter.port",
            "positive",
        ),
        ("lsp.request", {"sessionId": "s", "method": "m", "params": 3}, "params", "must be"),
    ],
)
def test_the_declaration_is_the_validation(
    command: str, payload: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(CoreError) as info:
        decode_payload(command, COMMANDS[command].payload, payload)
    assert info.value.code == "invalid_request"
    assert info.value.details == {"field": field}
    assert words in info.value.message
    assert info.value.message.startswith(f"{command}: ")


def test_a_megabyte_name_is_cut_in_the_message() -> None:
    with pytest.raises(CoreError) as info:
        decode_payload("process.run", COMMANDS["process.run"].payload, {"n" * 2**20: 1})
    assert len(info.value.message.encode()) <= 1024
    assert len(str(info.value.details).encode()) <= 1024


def test_typed_helpers_send_the_payload_and_convert_the_result() -> None:
    async def main() -> None:
        async with open_core() as core:
            result = await core.process_run(argv=["sh", "-c", "printf hi"])
            assert (result.exit_code, result.stdout, result.truncated) == (0, "hi", False)
            assert await core.terminal_list() == []
            with pytest.raises(CoreError) as info:
                # Refused by the same declaration, in the Core, as through call().
                await core.process_run(argv=["true"], max_output_bytes=0)
            assert info.value.details == {"field": "maxOutputBytes"}

    trio.run(main)


@pytest.mark.parametrize(
    "request_",
    [
        {"id": "r1", "command": "core.ping", "payload": {}},
        {"id": 7, "operationId": "op", "timeoutMilliseconds": 0, "command": "core.ping"},
        {"command": "core.ping", "payload": None},
    ],
)
def test_the_envelope_declaration_reads_what_the_core_reads(request_: JSONObject) -> None:
    envelope = msgspec.convert(request_, Envelope, strict=True)
    parsed = parse_envelope(request_)
    assert (envelope.command, envelope.id) == (parsed.command, parsed.id)


def test_every_response_matches_its_declaration() -> None:
    async def main() -> None:
        async with open_core() as core:
            requests: list[JSONObject] = [
                {"id": "a", "command": "core.ping"},
                {"id": "b", "command": "nope"},
                {"id": "c", "command": "process.run", "payload": {"argv": [""]}},
            ]
            for request_ in requests:
                msgspec.convert(await core.execute(request_), Response, strict=True)

    trio.run(main)
