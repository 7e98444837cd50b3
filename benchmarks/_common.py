"""Shared helpers of the benchmark modules: the row format and paired statistics.

A row is one figure measured side by side with a peer (or a floor) in the same run::

    {figure, ours, peer, unit, peer_name, ratio, goal, met, spread?, note?}

``ratio`` is always "ours relative to the peer" in the direction the goal states: for
times it is ours / peer (lower is better), for throughputs ours / peer (higher is better).
``spread`` gives the interquartile range of the per-round ratios, so a reader can judge how
noisy the machine was.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ("paired_ratios", "paired_row", "row", "spread")


def paired_ratios(ours: Sequence[float], peer: Sequence[float]) -> list[float]:
    """Per-round ratios ``ours[i] / peer[i]`` (each round ran both back to back)."""
    return [o / p for o, p in zip(ours, peer, strict=True)]


def spread(values: Sequence[float]) -> str:
    """The interquartile range of ``values`` as ``"q1-q3"`` (two decimals)."""
    if len(values) < 4:
        return f"{min(values):.2f}-{max(values):.2f}"
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.2f}-{q3:.2f}"


def row(
    figure: str,
    *,
    ours: float,
    peer: float,
    unit: str,
    peer_name: str,
    ratio: float,
    goal: str,
    met: bool,
    ratios: Sequence[float] | None = None,
    note: str | None = None,
) -> dict[str, object]:
    """One table row (see the module docstring)."""
    result: dict[str, object] = {
        "figure": figure,
        "ours": round(ours, 4),
        "peer": round(peer, 4),
        "unit": unit,
        "peer_name": peer_name,
        "ratio": round(ratio, 3),
        "goal": goal,
        "met": bool(met),
    }
    if ratios:
        result["spread"] = spread(ratios)
    if note:
        result["note"] = note
    return result


def paired_row(
    figure: str,
    ours: Sequence[float],
    peer: Sequence[float],
    *,
    unit: str,
    peer_name: str,
    at_most: float | None = None,
    at_least: float | None = None,
    note: str | None = None,
) -> dict[str, object]:
    """The row of a figure measured in pairs: each round ran ``ours[i]`` and ``peer[i]``.

    ``ours`` and ``peer`` are the medians of the samples, ``ratio`` the median per-round ratio
    ours / peer, ``spread`` its interquartile range.

    Args:
        at_most: The goal for a figure where lower is better (times): ``ratio <= at_most``.
        at_least: The goal for one where higher is better (rates): ``ratio >= at_least``.

    Raises:
        TypeError: Neither or both of ``at_most`` and ``at_least`` were given.
    """
    if (at_most is None) == (at_least is None):
        raise TypeError("give exactly one of at_most and at_least")
    ratios = paired_ratios(ours, peer)
    ratio = statistics.median(ratios)
    if at_most is not None:
        goal, met = f"<= {at_most}x", ratio <= at_most
    else:
        assert at_least is not None
        goal, met = f">= {at_least}x", ratio >= at_least
    return row(
        figure,
        ours=statistics.median(ours),
        peer=statistics.median(peer),
        unit=unit,
        peer_name=peer_name,
        ratio=ratio,
        goal=goal,
        met=met,
        ratios=ratios,
        note=note,
    )
