"""The one place where :mod:`protocol` turns JSON text into Python values and back.

Every other module calls :func:`loads` and :func:`dumps` only, so a faster parser
(orjson, msgspec) can replace the standard library here without touching the message
model. Both functions speak UTF-8 bytes, the form the framing layer carries.

Speed: when msgspec is installed (an optional dependency), :func:`loads`
parses with it first -- 6-7x the standard library on small JSON-RPC messages, measured
987k against 144k messages/s on this project's benchmark machine. Whatever msgspec refuses
(invalid UTF-8, lone surrogate escapes, numbers out of float range, nesting beyond its
limit, trailing data, ...) is handed to the standard library, which then accepts or rejects
it as before, so results and errors are exactly the standard library's. :func:`dumps`
stays on the standard library: msgspec writes NaN as ``null`` where we must refuse it.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Final, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._types import JSONValue

_fast_decode: Callable[[bytes], Any] | None
try:
    import msgspec.json
except ImportError:  # the optional speed-up is not installed
    _fast_decode = None
else:
    _fast_decode = msgspec.json.Decoder().decode

__all__ = ("MAX_DEPTH", "check_depth", "dumps", "loads", "may_nest_deeper")

#: Nesting levels a document may have. Deeper JSON is refused when it is read: writing it
#: again (an answer, an event) would recurse past the interpreter's limit, and no LSP or DAP
#: message comes near it (a selection range's parent chain is the deepest, tens of levels).
MAX_DEPTH: Final = 512


def _reject_constant(name: str) -> NoReturn:
    # NaN and Infinity are Python extensions; RFC 8259 has no such tokens.
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    # 1e400 is JSON by its grammar, but a float can't hold it: it would come back as
    # infinity, which no JSON document can carry on (refused here, not when re-encoded).
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number is out of range")
    return value


def may_nest_deeper(data: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Whether ``data`` has more opening brackets than ``limit`` (so it may nest deeper).

    Two scans in C: the cheap test that spares :func:`check_depth` for nearly every body.
    """
    if isinstance(data, str):
        return data.count("[") + data.count("{") > limit
    return data.count(b"[") + data.count(b"{") > limit


def check_depth(value: object, limit: int = MAX_DEPTH) -> None:
    """Raise ValueError when ``value`` nests containers deeper than ``limit`` levels.

    Iterative, so a hostile document can't exhaust the stack checking itself.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise ValueError(f"JSON nests deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


_decoder = json.JSONDecoder(parse_constant=_reject_constant)
_finite_decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_compact_ascii = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def loads(data: bytes | str, *, finite_only: bool = False) -> JSONValue:
    """Parse one JSON document.

    Args:
        data: UTF-8 encoded bytes or an already decoded string.
        finite_only: Refuse a number no float holds (``1e400``), which otherwise reads as
            an infinity that no JSON document can carry on.

    Returns:
        The parsed value.

    Raises:
        ValueError: The bytes are not UTF-8 (a :class:`UnicodeDecodeError`), the text is
            not JSON, uses ``NaN``/``Infinity``, nests deeper than :data:`MAX_DEPTH`, or
            (``finite_only``) holds a number no float can.
    """
    deep = may_nest_deeper(data)
    if _fast_decode is not None and isinstance(data, bytes):
        try:
            fast: JSONValue = _fast_decode(data)
        except Exception:  # the standard library decides, errors included
            pass
        else:
            if deep:
                check_depth(fast)
            return fast
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        value: JSONValue = (_finite_decoder if finite_only else _decoder).decode(text)
    except RecursionError:
        # The stdlib parser recurses per nesting level; a hostile peer must not crash us.
        raise ValueError("JSON nests too deeply") from None
    if deep:
        check_depth(value)
    return value


def dumps(value: object) -> bytes:
    """Serialize ``value`` as compact UTF-8 JSON (no spaces, non-ASCII kept as is).

    Strings holding lone surrogates (which a peer can send as ``"\\ud800"`` escapes)
    have no UTF-8 form; such documents are written with ASCII escapes instead, which is
    still valid JSON and decodes to the same value.

    Args:
        value: A JSON-compatible Python value.

    Returns:
        The encoded document.

    Raises:
        TypeError: ``value`` holds something JSON cannot represent.
        ValueError: ``value`` holds a NaN or infinite float, or a circular reference.
    """
    try:
        text = _compact.encode(value)
    except RecursionError:
        raise ValueError("JSON nests too deeply to write") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _compact_ascii.encode(value).encode("ascii")
