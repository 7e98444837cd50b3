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
writes with it too (about 15x the standard library on a small request), except what it would
get wrong or refuse: msgspec writes NaN and infinities as ``null`` where we must refuse them,
so a document whose bytes hold ``null`` anywhere is written by the standard library, which
then writes the same bytes or refuses the value; and whatever msgspec refuses (lone
surrogates, keys JSON has no form for, nesting past its limit) goes the same way.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any, Final, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._types import JSONValue

_fast_decode: Callable[[bytes], Any] | None
_fast_encode: Callable[[Any], bytes] | None
_to_builtins: Callable[[Any], Any] | None
try:
    import msgspec.json
except ImportError:  # the optional speed-up is not installed
    _fast_decode = _fast_encode = _to_builtins = None
else:
    _to_builtins = msgspec.to_builtins
    _fast_decode = msgspec.json.Decoder().decode
    # Its bytes are the standard library's for every string (same escapes, non-ASCII kept);
    # dumps() guards the one value it writes wrongly (NaN as null).
    _fast_encode = msgspec.json.Encoder().encode

__all__ = (
    "MAX_DEPTH",
    "NestingTooDeep",
    "TooDeepToRead",
    "check_depth",
    "cut_text_to_size",
    "dumps",
    "encoded_size",
    "fit_texts",
    "id_of",
    "loads",
    "may_nest_deeper",
    "scan_id",
    "text_size",
)

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


class TooDeepToRead(ValueError):
    """A document nests too deeply for the parser to read it at all (its id, if any, can
    only be found by :func:`scan_id`)."""


class NestingTooDeep(ValueError):
    """A document nests deeper than the bound; it was read, so its top level is known.

    Attributes:
        document: The decoded document (a reader may still take its ``id`` from it, so the
            refusal names the request it refuses).
    """

    def __init__(self, message: str, document: object) -> None:
        super().__init__(message)
        self.document = document


def id_of(document: object) -> object:
    """The top-level ``id`` member of a document that is an object, or None."""
    return document.get("id") if isinstance(document, dict) else None


_TOKEN: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def scan_id(data: bytes) -> object:
    """The top-level ``id`` member of a JSON object that could not be decoded as a whole
    (nested past the parser's reach, a number too long to convert), or None.

    A token scan, iterative and linear: only for naming the request a refusal answers
    (JSON-RPC 2.0 section 5: the id is null only when it could not be detected).
    """
    depth = 0
    key: bytes | None = None
    expect_key = False
    for match in _TOKEN.finditer(data):
        token = match.group()
        if token in (b"{", b"["):
            if depth == 0 and token != b"{":
                return None
            depth += 1
            expect_key = token == b"{" and depth == 1
            key = None
        elif token in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                return None
        elif depth != 1:
            continue
        elif token == b",":
            expect_key, key = True, None
        elif token == b":":
            expect_key = False
        elif expect_key:
            key = token
        elif key == b'"id"':
            try:
                value = json.loads(token)
            except ValueError:
                return None
            return value if isinstance(value, str | int) and not isinstance(value, bool) else None
    return None


def check_depth(value: object, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`NestingTooDeep` when ``value`` nests containers deeper than ``limit``.

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
            raise NestingTooDeep(f"JSON nests deeper than {limit} levels", value)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


_decoder = json.JSONDecoder(parse_constant=_reject_constant)
_finite_decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def _msgspec_form(value: object) -> object:
    """What msgspec writes for a type JSON has none of (a set, bytes, a date), as builtins:
    so the standard library's path (a document with a null in it) writes such a value as the
    msgspec path does, not refuses it only when a null happens to be beside it."""
    if _to_builtins is None:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return _to_builtins(value)


_compact = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_msgspec_form
)
_compact_ascii = json.JSONEncoder(
    ensure_ascii=True, allow_nan=False, separators=(",", ":"), default=_msgspec_form
)


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
        raise TooDeepToRead("JSON nests too deeply") from None
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

    Floats are written in their shortest form (``1e16``, where the standard library writes
    ``1e+16``: the same number). Types msgspec writes that JSON has none of (sets, bytes,
    dates, enums, dataclasses) are written in msgspec's JSON form, not refused, on both
    paths. (The Core refuses them in a command's payload before anything is written:
    :func:`protocol.check_request_values`.)

    Raises:
        TypeError: ``value`` holds something neither JSON nor msgspec can represent.
        ValueError: ``value`` holds a NaN or infinite float, or a circular reference.
    """
    if _fast_encode is not None:
        try:
            data = _fast_encode(value)
        except Exception:  # lone surrogates, keys JSON has no form for, nesting: see below
            pass
        else:
            # msgspec writes a NaN or an infinity as null where we must refuse it; a document
            # with a null in it is written (or refused) by the standard library instead.
            if b"null" not in data:
                return data
    try:
        text = _compact.encode(value)
    except RecursionError:
        raise ValueError("JSON nests too deeply to write") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _compact_ascii.encode(value).encode("ascii")


#: Characters measured per encoding call when a text is measured or cut in pieces, so that
#: measuring never holds more than one piece's encoded copy (a text of NUL characters grows
#: six times when encoded).
_PIECE_CHARS: Final = 64 * 1024
#: The most bytes one character takes in a JSON string: ``\u0000`` for a control character.
_MAX_BYTES_PER_CHAR: Final = 6


def _piece_size(text: str) -> int:
    if _fast_encode is not None:
        try:
            return len(_fast_encode(text))
        except UnicodeEncodeError:  # a lone surrogate: dumps() then writes ASCII escapes
            pass
    return len(_compact_ascii.encode(text))


def text_size(text: str) -> int:
    """The bytes ``text`` takes as a JSON string in :func:`dumps`' output, quotes included.

    Measured in pieces, so a long text costs one piece's encoded copy at a time.
    """
    if len(text) <= _PIECE_CHARS:
        return _piece_size(text)
    return 2 + sum(
        _piece_size(text[i : i + _PIECE_CHARS]) - 2 for i in range(0, len(text), _PIECE_CHARS)
    )


def encoded_size(value: object) -> int:
    """The bytes :func:`dumps` makes of ``value`` (without making them when msgspec can).

    A value :func:`dumps` refuses (a NaN, a type JSON has no form for) measures 0: sending
    it fails anyway, where the sender checks for that.
    """
    if _fast_encode is not None:
        try:
            return len(_fast_encode(value))
        except (TypeError, ValueError, OverflowError):  # lone surrogates, exotic types
            pass
    try:
        return len(dumps(value))
    except (TypeError, ValueError):
        return 0


def cut_text_to_size(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose JSON string (quotes included) fits ``limit`` bytes.

    Never splits an escape or a character (it cuts the text, not its encoding).
    """
    if len(text) * _MAX_BYTES_PER_CHAR + 2 <= limit:
        return text
    room = limit - 2
    position = 0
    while position < len(text):
        piece = text[position : position + _PIECE_CHARS]
        size = _piece_size(piece) - 2
        if size > room:
            break
        room -= size
        position += len(piece)
    else:
        return text
    # Within the piece that does not fit: the longest prefix that does, by bisection.
    low, high = 0, len(piece)
    while low < high:
        middle = (low + high + 1) // 2
        if _piece_size(piece[:middle]) - 2 <= room:
            low = middle
        else:
            high = middle - 1
    return text[: position + low]


def fit_texts(texts: Sequence[str], limit: int) -> tuple[list[str], bool]:
    """Cut ``texts`` so their JSON strings take at most ``limit`` bytes together.

    Each text keeps its head. When they do not fit, the room is shared fairly: a text
    smaller than its share stays whole and leaves the rest to the others.

    Returns:
        The texts (cut or not) and whether any was cut.
    """
    if sum(len(text) for text in texts) * _MAX_BYTES_PER_CHAR + 2 * len(texts) <= limit:
        return list(texts), False  # the common case: no text can be too long, nothing measured
    sizes = [text_size(text) for text in texts]
    if sum(sizes) <= limit:
        return list(texts), False
    room = limit
    allotted = [0] * len(texts)
    order = sorted(range(len(texts)), key=sizes.__getitem__)
    for done, index in enumerate(order):
        allotted[index] = min(sizes[index], room // (len(texts) - done))
        room -= allotted[index]
    return [
        text if allotted[i] >= sizes[i] else cut_text_to_size(text, allotted[i])
        for i, text in enumerate(texts)
    ], True
