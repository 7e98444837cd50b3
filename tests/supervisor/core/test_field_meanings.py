"""docs/commands.md gives every field a meaning (issue 28.7) -- not yet all of them: this
test holds the number of fields without one to what is left, so it only goes down. When it
reaches 0, ``MAX_WITHOUT_MEANING`` becomes 0 and the test is the rule the issue asks for."""

from __future__ import annotations

import re
from pathlib import Path

from supervisor._api import _base

#: Field rows of docs/commands.md without a meaning on 2026-12-05 (701 before the meanings
#: that hold wherever a field appears, ``_base.FIELD_MEANINGS``, and the inherited ones).
MAX_WITHOUT_MEANING = 98

_ROW = re.compile(r"^\| `(\w+)` \| .* \| (yes|) \|(.*)\|\s*$")


def _rows() -> list[tuple[str, str]]:
    text = (Path(__file__).parents[3] / "docs" / "commands.md").read_text(encoding="utf-8")
    return [(m[1], m[3].strip()) for line in text.splitlines() if (m := _ROW.match(line))]


def test_fields_without_a_meaning_only_get_fewer() -> None:
    rows = _rows()
    assert len(rows) > 700, "the field tables were not found"
    empty = [name for name, meaning in rows if not meaning]
    assert len(empty) <= MAX_WITHOUT_MEANING, (
        f"{len(empty)} fields have no meaning (at most {MAX_WITHOUT_MEANING}): give the new"
        " ones an Attributes entry in supervisor/_api"
    )


def test_every_shared_meaning_is_written() -> None:
    meanings = {
        **_base.FIELD_MEANINGS,
        "wait": _base.WAIT_MEANING,
        "deadline": _base.DEADLINE_MEANING,
    }
    assert all(text.strip().endswith(".") for text in meanings.values())
    # A shared meaning is used: it names a field some declaration has.
    documented = {name for name, _ in _rows()}
    assert set(_base.FIELD_MEANINGS) <= documented
