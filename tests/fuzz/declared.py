"""The fuzz table derived from the Core's declarations (``supervisor._api``, msgspec structs).

Every declared command gets its fields, their types, bounds and required flags from its
payload struct (``msgspec.inspect``): an integer field draws values within its ``ge``/``le``
and its near-valid values just outside them, a literal its values and a wrong one, a nested
struct a dictionary of its own fields, a tagged union one variant with its tag. What a type
can not say -- a field names a program, a directory or a live session -- comes from the
hand-written rows of :data:`tests.fuzz.strategies.HAND` where a command has one, and from the
field's name (``sessionId``, ``terminalID``, ...) otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec.inspect as mi
from hypothesis import strategies as st

from .strategies import (
    BOOL,
    HAND,
    JSON,
    Kind,
    _const,
    _id,
    _plain_text,
)

if TYPE_CHECKING:
    from .strategies import Context

__all__ = ("declared_table",)

#: Fields that name a live thing, by wire name: the kind of id they take.
_ID_FIELDS = {
    "terminalID": "terminal",
    "jobId": "job",
    "operationId": "operation",
    "subscriptionID": "subscription",
}
#: How deep nested structs are drawn (deeper optional fields are left out).
_MAX_DEPTH = 3


def _ints(info: mi.IntType) -> Kind:
    low = info.ge if info.ge is not None else (info.gt + 1 if info.gt is not None else -(2**31))
    high = info.le if info.le is not None else (info.lt - 1 if info.lt is not None else 2**31 - 1)
    # A deadline or a wait is kept short when valid: a long one is the driver's to cancel.
    typical = sorted({low, min(high, max(low, 1)), min(high, max(low, 50))})
    return Kind(
        lambda ctx: st.one_of(st.sampled_from(typical), st.integers(low, min(high, low + 2000))),
        _const(low - 1, high + 1, high, 2**63, 1.5, "1", None),
    )


def _text(info: mi.StrType) -> Kind:
    low = info.min_length or 0
    high = info.max_length

    def valid(ctx: Context) -> st.SearchStrategy[object]:
        if info.pattern:
            return st.from_regex(info.pattern, fullmatch=True)
        return _plain_text(max_size=min(high or 30, 30)).filter(lambda t: len(t) >= low) | st.just(
            "x" * max(low, 1)
        )

    near: list[object] = ["", 1, None, ["x"]]
    if high is not None:
        near.append("x" * (high + 1))
    return Kind(valid, _const(*near))


def kind_of(info: Any, depth: int = 0) -> Kind:
    """A :class:`Kind` for a declared type (``msgspec.inspect`` type info)."""
    if isinstance(info, mi.UnionType):
        members = [kind_of(t, depth) for t in info.types if not isinstance(t, mi.NoneType)]
        if not members:
            return Kind(_const(None), _const(1, "x"))
        return Kind(
            lambda ctx: st.one_of([m.valid(ctx) for m in members]),
            lambda ctx: st.one_of([m.near(ctx) for m in members]),
        )
    if isinstance(info, mi.IntType):
        return _ints(info)
    if isinstance(info, mi.FloatType):
        return Kind(
            lambda ctx: st.floats(
                min_value=info.ge, max_value=info.le, allow_nan=False, allow_infinity=False
            ),
            _const("1.0", None, [1.0]),
        )
    if isinstance(info, mi.StrType):
        return _text(info)
    if isinstance(info, mi.BoolType):
        return BOOL
    if isinstance(info, mi.NoneType):
        return Kind(_const(None), _const(0, ""))
    if isinstance(info, mi.LiteralType):
        values = tuple(info.values)
        return Kind(_const(*values), _const("other", 1, None, ""))
    if isinstance(info, mi.EnumType):
        values = tuple(member.value for member in info.cls)
        return Kind(_const(*values), _const("other", 1, None, ""))
    if isinstance(info, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        item = kind_of(info.item_type, depth + 1)
        low = getattr(info, "min_length", None) or 0
        high = min(getattr(info, "max_length", None) or 3, max(low, 3))
        return Kind(
            lambda ctx: st.lists(item.valid(ctx), min_size=low, max_size=high),
            lambda ctx: st.one_of(
                st.lists(item.near(ctx), min_size=1, max_size=2), st.just({}), st.just("x")
            ),
        )
    if isinstance(info, mi.DictType):
        value = kind_of(info.value_type, depth + 1)
        return Kind(
            lambda ctx: st.dictionaries(_plain_text(8), value.valid(ctx), max_size=3),
            lambda ctx: st.one_of(
                st.dictionaries(_plain_text(8), value.near(ctx), min_size=1, max_size=2),
                st.just([]),
            ),
        )
    if isinstance(info, mi.StructType | mi.TypedDictType | mi.DataclassType):
        if depth >= _MAX_DEPTH:
            return Kind(_const({}), _const([], "x"))
        fields = _fields(info, {}, "", depth + 1)
        required = {name: kind for name, kind in fields.items() if kind.required}
        optional = {name: kind for name, kind in fields.items() if not kind.required}

        def valid(ctx: Context) -> st.SearchStrategy[object]:
            return st.fixed_dictionaries(
                {name: kind.valid(ctx) for name, kind in required.items()},
                optional={name: kind.valid(ctx) for name, kind in optional.items()},
            )

        return Kind(valid, _const({}, [], "x", {"unknownField": 1}))
    return JSON  # Any, Raw and what else: pass-through JSON


def _fields(info: Any, hand: dict[str, Kind], command: str, depth: int) -> dict[str, Kind]:
    fields: dict[str, Kind] = {}
    tag_field = getattr(info, "tag_field", None)
    if tag_field is not None:
        tag = info.tag
        fields[tag_field] = Kind(_const(tag), _const("other", 1, None)).req()
    for field in info.fields:
        name = field.encode_name
        kind = hand.get(name)
        if kind is None:
            if name == "sessionId":
                kind = _id("debug" if command.startswith("debug.") else "lsp")
            elif name in _ID_FIELDS:
                kind = _id(_ID_FIELDS[name])
            else:
                kind = kind_of(field.type, depth)
        fields[name] = kind.req() if field.required else Kind(kind.valid, kind.near, ref=kind.ref)
    return fields


def declared_table() -> dict[str, list[dict[str, Kind]]] | None:
    """``{command: [fields of each payload variant]}`` from the declarations, or None when
    this tree has none (the hand table is used then)."""
    try:
        from supervisor._api import COMMANDS as DECLARED
    except ImportError:  # pragma: no cover -- a tree without declarations
        return None
    table: dict[str, list[dict[str, Kind]]] = {}
    for name, command in DECLARED.items():
        info = mi.type_info(command.payload)
        variants = info.types if isinstance(info, mi.UnionType) else (info,)
        table[name] = [
            _fields(variant, HAND.get(name, {}), name, 0)
            for variant in variants
            if isinstance(variant, mi.StructType)
        ] or [{}]
    return table
