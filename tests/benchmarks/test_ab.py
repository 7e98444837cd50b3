"""The A/B harness's table (``benchmarks/_ab.py``) and the rows it pairs: each row once."""

from __future__ import annotations

from typing import Any

from benchmarks import bench_framing
from benchmarks._ab import Side, compare, render

FRAMER = "framer throughput, small messages (168 B each), 4-64 KiB chunks (ratio > 1: ...)"
NAIVE = "naive re-splitting parser (pygls-style)"


def framer_row(unit: str, ratio: float) -> dict[str, Any]:
    return {
        "benchmark": "bench_framing",
        "figure": FRAMER,
        "ours": 300.0 * ratio,
        "peer": 300.0,
        "unit": unit,
        "peer_name": NAIVE,
        "ratio": ratio,
        "goal": ">= 1x naive",
        "met": True,
    }


def row_lines(table_text: str) -> list[str]:
    """The table's rows as printed, without its two header lines."""
    return table_text.splitlines()[2:]


def test_the_framer_gives_one_row_per_workload() -> None:
    """One measurement, one goal, one row: the messages/s are the row's note, not a second
    row that counted the goal twice and printed twice in an A/B table."""
    rows = bench_framing.measure(rounds=2)
    framer = [r for r in rows if str(r["figure"]).startswith("framer throughput")]
    assert [r["unit"] for r in framer] == ["MB/s", "MB/s"]
    assert all("messages/s" in str(r["note"]) for r in framer)
    keys = [(r["figure"], r["peer_name"]) for r in rows]
    assert len(keys) == len(set(keys))


def test_each_row_is_printed_once_for_the_same_rows_on_both_sides() -> None:
    old = Side("old", "/old", "python")
    new = Side("new", "/new", "python")
    for side, ratio in ((old, 2.8), (new, 2.9)):
        side.runs = [[framer_row("MB/s", ratio)], [framer_row("MB/s", ratio)]]
    lines = row_lines(render(compare(old, new, None), old, new, markdown=False))
    assert len(lines) == 1
    assert lines[0].startswith(FRAMER[:44])


def test_rows_told_apart_only_by_their_unit_are_labelled_with_it() -> None:
    """An older commit measured the framer in two units: its two rows must not read as
    one row printed twice."""
    old = Side("old", "/old", "python")
    new = Side("new", "/new", "python")
    old.runs = [[framer_row("MB/s", 2.8), framer_row("messages/s", 2.8)]]
    new.runs = [[framer_row("MB/s", 2.9)]]
    table = compare(old, new, None)
    for markdown in (False, True):
        text = render(table, old, new, markdown=markdown)
        lines = row_lines(text) if not markdown else text.splitlines()[4:]
        labels = [line.split("|")[1] if markdown else line[:80] for line in lines]
        assert len(labels) == 2
        assert len(set(labels)) == 2, text
        assert any("[messages/s]" in line and "only old" in line for line in lines), text
