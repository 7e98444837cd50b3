"""The one place where :mod:`protocol` turns JSON text into Python values and back.

Every other module calls :func:`loads` and :func:`dumps` only, so a faster parser
(orjson, msgspec) can replace the standard library here without touching the message
model. Both functions speak UTF-8 bytes, the form the framing layer carries.

Speed (issue 8 goal 3): when msgspec is installed (an optional dependency), :func:`loads`
parses with it first -- 6-7x the standard library on small JSON-RPC messages, measured
987k against 144k messages/s on this project's benchmark machine. Whatever msgspec refuses
(invalid UTF-8, lone surrogate escapes, numbers out of float range, nesting beyond its
limit, trailing data, ...) is handed to the standard library, which then accepts or rejects
it as before, so results and errors are exactly the standard library's. :func:`dumps`
stays on the standard library: msgspec writes NaN as ``null`` where we must refuse it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NoReturn

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

__all__ = ("dumps", "loads")


def _reject_constant(name: str) -> NoReturn:
    # NaN and Infinity are Python extensions; RFC 8259 has no such tokens.
    raise ValueError(f"{name} is not valid JSON")


_decoder = json.JSONDecoder(parse_constant=_reject_constant)
_compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_compact_ascii = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def loads(data: bytes | str) -> JSONValue:
    """Parse one JSON document.

    Args:
        data: UTF-8 encoded bytes or an already decoded string.

    Returns:
        The parsed value.

    Raises:
        ValueError: The bytes are not UTF-8 (a :class:`UnicodeDecodeError`), the text is
            not JSON, uses ``NaN``/``Infinity``, or nests too deeply to parse.
    """
    if _fast_decode is not None and isinstance(data, bytes):
        try:
            fast: JSONValue = _fast_decode(data)
        except Exception:  # the standard library decides, errors included
            pass
        else:
            return fast
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        value: JSONValue = _decoder.decode(text)
    except RecursionError:
        # The stdlib parser recurses per nesting level; a hostile peer must not crash us.
        raise ValueError("JSON nests too deeply") from None
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
    text = _compact.encode(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _compact_ascii.encode(value).encode("ascii")
