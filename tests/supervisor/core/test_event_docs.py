"""Every event is documented: when it comes, what it carries, what ends its stream (issue 28).

docs/commands.md's "Events" section is generated from the event declarations
(``supervisor/_api``): each event's own docstring says when it comes, its fields are what it
carries, and ``EVENT_STREAMS`` says what ends each kind's stream.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from supervisor._api import EVENT_STREAMS, EVENTS
from supervisor._api.docgen import _structs_in

COMMANDS_MD = Path(__file__).resolve().parents[3] / "docs" / "commands.md"


@pytest.mark.parametrize("kind", sorted(EVENTS))
def test_every_event_of_every_kind_has_its_own_docstring(kind: str) -> None:
    for cls in _structs_in(EVENTS[kind]):
        own = cls.__dict__.get("__doc__")
        assert own, f"{kind} event {cls.__name__} has no docstring of its own"
        assert inspect.getdoc(cls) == inspect.cleandoc(own)


def test_every_kind_says_what_ends_its_stream_and_the_reference_shows_it() -> None:
    assert set(EVENT_STREAMS) == set(EVENTS)
    text = COMMANDS_MD.read_text()
    events = text.split("\n## Events\n", 1)[1].split("\n## Session states\n", 1)[0]
    for kind in EVENTS:
        section = events.split(f"### {kind} events\n", 1)[1].split("\n### ", 1)[0]
        assert "**What ends the stream.**" in section
        for cls in _structs_in(EVENTS[kind]):
            assert f"- `{cls.__struct_config__.tag}` ([{cls.__name__}]" in section
        assert "(undocumented)" not in section
