"""JSON type aliases shared by every layer of :mod:`protocol`.

The aliases are recursive so that mypy checks JSON payloads structurally instead of
falling back to ``Any``. They are strings at runtime (Python 3.11 has no ``type``
statement), so use them in annotations only, never in ``isinstance``.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ("JSONObject", "JSONValue", "RequestId")

#: Any JSON value as :func:`json.loads` produces it: ``bool``, ``int``, ``float``, ``str``,
#: ``list``, ``dict`` with ``str`` keys (nested arbitrarily) or ``None``.
JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"

#: A JSON object: ``dict[str, JSONValue]``.
JSONObject: TypeAlias = "dict[str, JSONValue]"

#: A JSON-RPC request id. It keeps its JSON type: ``1`` and ``"1"`` are different ids.
RequestId: TypeAlias = "int | str"
