"""docs/commands.md gives every field a meaning and every command a description (issue 28.7):
a field without one, a declaration without a docstring or a silent command section fails here.

Meanings come from the declarations (``supervisor/_api``): a struct's ``Attributes:`` entry,
the one of a class it stands on (an event's ``seq``), or the one a shared field has wherever
it appears (``_base.FIELD_MEANINGS``).
"""

from __future__ import annotations

import re
from pathlib import Path

from supervisor._api import COMMANDS, EVENTS, _base
from supervisor._api.docgen import _structs_in

_ROW = re.compile(r"^\| `(\w+)` \| .* \| (yes|) \|(.*)\|\s*$")
_STRUCT = re.compile(r"^#### (\w+)")
_COMMAND = re.compile(r"^### `([\w.]+)`$")


def _rows() -> list[tuple[str, str, str]]:
    """``(struct, field, meaning)`` of every field row of docs/commands.md."""
    text = (Path(__file__).parents[3] / "docs" / "commands.md").read_text(encoding="utf-8")
    rows: list[tuple[str, str, str]] = []
    struct = ""
    for line in text.splitlines():
        if heading := _STRUCT.match(line):
            struct = heading[1]
        elif row := _ROW.match(line):
            rows.append((struct, row[1], row[3].strip()))
    return rows


def test_every_field_has_a_meaning() -> None:
    rows = _rows()
    assert len(rows) > 700, "the field tables were not found"
    empty = [f"{struct}.{field}" for struct, field, meaning in rows if not meaning]
    assert not empty, f"fields without a meaning (give them an Attributes entry): {empty}"


def test_every_shared_meaning_is_written_and_used() -> None:
    meanings = [*_base.FIELD_MEANINGS.values(), _base.WAIT_MEANING, _base.DEADLINE_MEANING]
    assert all(text.strip().endswith(".") for text in meanings)
    documented = {field for _, field, _ in _rows()}
    assert set(_base.FIELD_MEANINGS) <= documented


def test_every_declaration_is_described() -> None:
    """Every payload, result and event struct says what it is (its docstring's summary is
    the text under its heading), so no command's section is a bare table."""
    parts = [part for command in COMMANDS.values() for part in (command.payload, command.result)]
    structs = {
        cls for part in [*parts, *EVENTS.values()] if part is not None for cls in _structs_in(part)
    }
    assert len(structs) > 100, "the declarations were not found"
    bare = sorted(cls.__name__ for cls in structs if not (cls.__doc__ or "").strip())
    assert not bare, f"declarations without a description (give them a docstring): {bare}"


def test_every_command_section_says_something() -> None:
    """``terminal.onExit`` used to be a heading over a bare table (issue 28)."""
    text = (Path(__file__).parents[3] / "docs" / "commands.md").read_text(encoding="utf-8")
    commands = text[text.index("\n## core\n") : text.index("\n## Events\n")]
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in commands.splitlines():
        if heading := _COMMAND.match(line):
            current = sections.setdefault(heading[1], [])
        elif line and not line.startswith(("|", "#")) and line != "No fields.":
            current.append(line)
    assert set(sections) == set(COMMANDS)
    silent = sorted(name for name, prose in sections.items() if not prose)
    assert not silent, f"commands whose section says nothing: {silent}"
