"""Did-you-mean: one rule for every place that refuses an unknown name.

Lanes files (keys, job names, placeholders), the Core (unknown payload fields, commands) and
the command line all suggest the same way: the closest known name by :mod:`difflib`'s ratio,
compared case-insensitively, plus a table of habits from neighbouring tools (``cmd`` for
``argv``) that no spelling distance finds. Pure: no I/O.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ("did_you_mean", "suggest")

#: How close a name must be (difflib's ratio, 0..1) to be suggested.
_CUTOFF = 0.6


def suggest(
    name: str, known: Iterable[str], *, aliases: Mapping[str, str] | None = None
) -> str | None:
    """The known name ``name`` most likely meant, or None.

    Args:
        name: What was given (an unknown key, field, job or command name).
        known: The names that would have been accepted.
        aliases: Names from other tools' habits mapped to ours (``{"cmd": "argv"}``); an
            alias wins over spelling distance, and is only suggested when its target is known.

    Returns:
        One of ``known``, or None when nothing is close enough.
    """
    names = list(known)
    if aliases:
        target = aliases.get(name) or aliases.get(name.lower())
        if target is not None and target in names:
            return target
    by_lower: dict[str, str] = {}
    for known_name in names:
        by_lower.setdefault(known_name.lower(), known_name)
    if name.lower() in by_lower and by_lower[name.lower()] != name:
        return by_lower[name.lower()]  # only the case differs
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=_CUTOFF)
    return by_lower[close[0]] if close else None


def did_you_mean(
    name: str, known: Iterable[str], *, aliases: Mapping[str, str] | None = None
) -> str:
    """``" (did you mean 'x'?)"`` for :func:`suggest`'s answer, or ``""`` when there is none.

    Made to be appended to a refusal: ``f"unknown field {name!r}{did_you_mean(name, known)}"``.
    """
    close = suggest(name, known, aliases=aliases)
    return f" (did you mean {close!r}?)" if close is not None else ""
