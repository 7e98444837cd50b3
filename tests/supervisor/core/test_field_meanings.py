"""docs/commands.md gives every field a meaning (issue 28.7): a field without one fails here.

Meanings come from the declarations (``supervisor/_api``): a struct's ``Attributes:`` entry,
the one of a class it stands on (an event's ``seq``), or the one a shared field has wherever
it appears (``_base.FIELD_MEANINGS``).
"""

from __future__ import annotations

import re
from pathlib import Path

from supervisor._api import _base

_ROW = re.compile(r"^\| `(\w+)` \| .* \| (yes|) \|(.*)\|\s*$")
_STRUCT = re.compile(r"^#### (\w+)")


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
