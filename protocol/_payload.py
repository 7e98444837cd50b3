"""The one set of payload readers: argv, environment, paths, milliseconds, sizes, JSON types.

Every command reads its payload at the edge, before it starts anything, and the values it
accepts must be ones that nothing downstream can raise on (the Core API contract "Envelope": bad
input
is ``invalid_request``):

- text that reaches the OS (an argument, an environment name or value, a path, stdin) is
  made of Unicode scalar values -- no lone UTF-16 surrogate, which JSON's ``\\ud800`` escape
  can carry but no encoding can write -- and holds no NUL, which C strings can not carry;
- a duration is a whole number of milliseconds from 1 to :data:`MAX_MILLISECONDS`, a size
  or a count an integer within the bound its command documents; JSON booleans are never
  numbers (``True`` is an ``int`` in Python);
- every number anywhere in a request is finite (``1e400`` decodes as infinity, which JSON
  can not write back), pass-through JSON included: :func:`check_request_values`;
- a name the caller sent is echoed cut (:func:`echo`), so that a message stays within
  :data:`MAX_MESSAGE_BYTES`.

Two layers: the ``*_problem`` functions return a message (or None) and raise nothing, so a
Python API can raise ``TypeError``/``ValueError`` with it while a wire reader raises
``CoreError("invalid_request", ..., {"field": ...})``; the ``read_*`` functions are those
wire readers. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, TypeAlias

from ._errors import CoreError, cut_utf8

if TYPE_CHECKING:
    from ._types import JSONObject, JSONValue

__all__ = (
    "MAX_ECHO_BYTES",
    "MAX_MILLISECONDS",
    "MAX_OUTPUT_BYTES",
    "argv_item_problem",
    "check_request_values",
    "echo",
    "env_item_problem",
    "invalid_field",
    "json_type",
    "path_problem",
    "read_argv",
    "read_env",
    "read_int",
    "read_milliseconds",
    "read_path",
    "read_text",
    "text_problem",
)

#: The most UTF-8 bytes of a caller's name (a command, a field, an id) echoed in a message.
MAX_ECHO_BYTES: Final = 128
#: The longest duration a request may give, in milliseconds: 2**31 - 1 (about 24.8 days),
#: the largest delay common runtimes accept (a signed 32-bit count of milliseconds). Longer
#: ones are refused rather than clamped; a deadline that far away is a mistake.
MAX_MILLISECONDS: Final = 2**31 - 1
#: The most output a caller may ask to keep per stream (``maxOutputBytes``, and every Python
#: API that keeps output): 64 MiB, the frame-body limit, past which an answer could not
#: reach a client anyway. A larger request is refused, not clamped: a process kept output
#: of 1 GiB asked for, and grew to 1.5 GiB resident.
MAX_OUTPUT_BYTES: Final = 64 * 1024 * 1024
#: The deadline of a ``process.run`` that gives none, in milliseconds: a day, the IDE backend
#: protocol's ``*/exec`` default without ``timeoutMs`` (``supervisor._api._process`` declares
#: it; kept here, below the declarations, for ``supervisor exec``'s start without them).
DEFAULT_RUN_TIMEOUT_MS: Final = 86_400_000


def echo(name: object) -> str:
    """A caller's name as it is quoted in a message: its ``repr``, cut to
    :data:`MAX_ECHO_BYTES` (with ``...`` when cut)."""
    return _short(repr(name))


def invalid_field(field: str, message: str) -> CoreError:
    """``CoreError("invalid_request", message, {"field": field})``; ``field`` is cut to
    :data:`MAX_ECHO_BYTES` (and ``...``; the message is cut by :class:`CoreError`)."""
    return CoreError(
        "invalid_request",
        message,
        {"field": _short(field)},
    )


def json_type(value: object) -> str:
    """The JSON type of ``value`` as a message names it: ``"a string"``, ``"null"``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _has_surrogate(text: str) -> bool:
    if text.isascii():  # a flag of the string: no scan
        return False
    # UTF-8 encodes every code point but the surrogates; encoding (in C) beats a regex scan
    # twice over on large documents.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def text_problem(value: str, field: str) -> str | None:
    """Why ``value`` can not reach the OS (a NUL, a lone surrogate), or None."""
    if "\0" in value:
        return f"{field} must not contain a NUL character"
    if _has_surrogate(value):
        return f"{field} must be valid Unicode text (a lone surrogate)"
    return None


def path_problem(value: str, field: str) -> str | None:
    """Why ``value`` is not a usable path: empty, a NUL, a lone surrogate; or None."""
    if not value:
        return f"{field} must not be empty"
    return text_problem(value, field)


def argv_item_problem(index: int, value: object, field: str = "argv") -> str | None:
    """Why ``value`` can not be item ``index`` of an argv, or None.

    The program (index 0) must not be empty; every item is a string that can reach the OS.
    """
    if not isinstance(value, str):
        return f"{field}[{index}] must be a string, not {json_type(value)}"
    if index == 0 and not value:
        return f"{field}[0] (the program) must not be empty"
    return text_problem(value, f"{field}[{index}]")


def env_item_problem(key: object, value: object, field: str = "env") -> str | None:
    """Why ``key: value`` can not be an environment change (a string sets, None removes)."""
    if not isinstance(key, str):
        return f"{field} keys must be strings"
    if not key or "=" in key or "\0" in key or _has_surrogate(key):
        return (
            f"{field} has an invalid variable name {echo(key)} "
            "(empty, '=', NUL or not valid Unicode)"
        )
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{field}[{echo(key)}] must be a string or null, not {json_type(value)}"
    return text_problem(value, f"{field}[{echo(key)}]")


# -- wire readers: CoreError("invalid_request") with details.field --------------------------


def read_text(
    payload: JSONObject,
    name: str,
    *,
    required: bool = False,
    non_empty: bool = False,
    allow_nul: bool = False,
) -> str | None:
    """Read a string that reaches the OS (a title, stdin); absent or null is None.

    ``allow_nul`` is for data written to a stream (stdin, a terminal), where NUL is a byte
    like any other; a lone surrogate is refused either way.

    Raises:
        CoreError: ``invalid_request`` (``details.field`` = ``name``) for a missing required
            field, a non-string, an empty string when ``non_empty``, a NUL (unless
            ``allow_nul``) or a lone surrogate.
    """
    value = payload.get(name)
    if value is None:
        if required:
            raise invalid_field(name, f"{name} is required")
        return None
    if not isinstance(value, str):
        raise invalid_field(name, f"{name} must be a string, not {json_type(value)}")
    if non_empty and not value:
        raise invalid_field(name, f"{name} must not be empty")
    if allow_nul:
        if _has_surrogate(value):
            raise invalid_field(name, f"{name} must be valid Unicode text (a lone surrogate)")
    elif (problem := text_problem(value, name)) is not None:
        raise invalid_field(name, problem)
    return value


def read_path(payload: JSONObject, name: str, *, required: bool = False) -> str | None:
    """Read a path (a working directory, an executable): a non-empty string for the OS."""
    value = payload.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise invalid_field(name, f"{name} must be a non-empty string, not {json_type(value)}")
    if (problem := path_problem(value, name)) is not None:
        raise invalid_field(name, problem)
    return value


def read_argv(
    payload: JSONObject, name: str = "argv", *, max_items: int | None = None
) -> list[str]:
    """Read a non-empty argv: strings for the OS, the program (item 0) not empty.

    Raises:
        CoreError: ``invalid_request`` (``details.field`` = ``name``) for an absent or empty
            list, more than ``max_items`` items, a non-string item, an empty program, a NUL
            or a lone surrogate.
    """
    value: JSONValue = payload.get(name)
    if not isinstance(value, list) or not value:
        raise invalid_field(name, f"{name} must be a non-empty array of strings")
    if max_items is not None and len(value) > max_items:
        raise invalid_field(name, f"{name} has more than {max_items} items")
    for index, item in enumerate(value):
        if (problem := argv_item_problem(index, item, name)) is not None:
            raise invalid_field(name, problem)
    return [item for item in value if isinstance(item, str)]


def read_env(payload: JSONObject, name: str = "env") -> dict[str, str | None] | None:
    """Read an environment table: names to strings, or null to remove the variable.

    Raises:
        CoreError: ``invalid_request`` (``details.field`` = ``name``) for a non-object, an
            empty name or one with ``=``, NUL or a lone surrogate, a value that is neither a
            string nor null, or a value with NUL or a lone surrogate.
    """
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid_field(name, f"{name} must be an object of strings, not {json_type(value)}")
    env: dict[str, str | None] = {}
    for key, item in value.items():
        if (problem := env_item_problem(key, item, name)) is not None:
            raise invalid_field(name, problem)
        env[key] = item if isinstance(item, str) else None
    return env


def read_int(
    payload: JSONObject,
    name: str,
    *,
    minimum: int,
    maximum: int,
    default: int | None = None,
) -> int | None:
    """Read an integer from ``minimum`` to ``maximum`` (a size, a dimension, a count).

    Absent or null gives ``default``.

    Raises:
        CoreError: ``invalid_request`` (``details.field`` = ``name``) for a non-integer (a
            boolean or a float included) or a value out of range.
    """
    value = payload.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_field(name, f"{name} must be an integer, not {json_type(value)}")
    if value < minimum:
        if minimum == 1:
            raise invalid_field(name, f"{name} must be a positive integer")
        raise invalid_field(name, f"{name} must be an integer >= {minimum}")
    if value > maximum:
        raise invalid_field(name, f"{name} must be at most {maximum}")
    return value


def read_milliseconds(
    payload: JSONObject,
    name: str = "timeoutMilliseconds",
    *,
    maximum: int = MAX_MILLISECONDS,
    zero_is_none: bool = True,
) -> int | None:
    """Read a duration in milliseconds: 1 to ``maximum`` (:data:`MAX_MILLISECONDS`).

    Absent or null is None; so is 0 when ``zero_is_none`` (the envelope's rule, the Core API
    contract "Envelope": "a positive value starts a cooperative deadline").

    Raises:
        CoreError: ``invalid_request`` (``details.field`` = ``name``) for a non-integer, a
            negative value (0 too unless ``zero_is_none``) or one above ``maximum``.
    """
    value = payload.get(name)
    if zero_is_none and value == 0 and not isinstance(value, bool):
        return None
    return read_int(payload, name, minimum=1, maximum=min(maximum, MAX_MILLISECONDS))


# -- the whole request ---------------------------------------------------------------------


#: Where a value sits in a request: ``(parent, key)`` links from the value up to the root.
_Where: TypeAlias = "tuple[_Where | None, str | int]"


def _path(where: _Where | None, root: str) -> str:
    keys: list[str | int] = []
    while where is not None:
        where, key = where
        keys.append(key)
    text = root
    for key in reversed(keys):
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return _short(text or "payload")


def _short(text: str) -> str:
    cut = cut_utf8(text, MAX_ECHO_BYTES)
    return cut if cut == text else cut + "..."


def check_request_values(value: JSONValue, field: str = "") -> None:
    """Refuse values no part of the supervisor can carry, anywhere in ``value``.

    Walks every object, array, key and value (pass-through JSON included: initialization
    options, settings, request params, launch configurations) without recursion.

    Args:
        value: A decoded JSON value (a command's payload).
        field: The name of ``value`` in ``details.field`` paths ("" for a payload, whose
            paths then start at its own fields: ``initializationOptions.a[2]``).

    Raises:
        CoreError: ``invalid_request`` whose ``details.field`` is the path (cut to
            :data:`MAX_ECHO_BYTES`) of the first non-finite number (``1e400`` decodes as
            infinity, which JSON can not write back), of the first string or key holding
            a lone surrogate (no encoding can write it; a key is named by its object), of
            the first value that is not JSON at all (a Python caller's set, bytes, Decimal:
            an array is a list or a tuple, an object a dict with string keys), or of the
            first container nested deeper than :data:`protocol._json.MAX_DEPTH` (512) levels,
            which a peer's reader refuses (ours does).
    """
    stack: list[tuple[JSONValue, _Where | None, int]] = [(value, None, 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                path = _path(where, field)
                raise invalid_field(path, f"{path} must be valid Unicode text (a lone surrogate)")
        elif isinstance(item, float):
            if not math.isfinite(item):
                path = _path(where, field)
                raise invalid_field(path, f"{path} must be a finite number")
        elif isinstance(item, dict):
            _check_depth(depth, where, field)
            for key, child in item.items():
                if not isinstance(key, str):
                    path = _path(where, field)
                    raise invalid_field(path, f"a key in {path} must be a string, not {echo(key)}")
                if _has_surrogate(key):
                    path = _path(where, field)
                    raise invalid_field(
                        path, f"a key in {path} must be valid Unicode text (a lone surrogate)"
                    )
                stack.append((child, (where, key), depth + 1))
        elif isinstance(item, list | tuple):
            _check_depth(depth, where, field)
            stack.extend((child, (where, index), depth + 1) for index, child in enumerate(item))
        elif item is not None and not isinstance(item, int):  # bool is an int
            path = _path(where, field)
            raise invalid_field(
                path, f"{path} must be a JSON value, not {type(item).__name__}: {echo(item)}"
            )


#: :data:`protocol._json.MAX_DEPTH`, not imported: this module stays free of msgspec (the
#: start of ``supervisor exec`` imports it); a test holds the two equal.
_MAX_DEPTH: Final = 512


def _check_depth(depth: int, where: _Where | None, field: str) -> None:
    if depth > _MAX_DEPTH:
        path = _path(where, field)
        raise invalid_field(path, f"{path} nests deeper than {_MAX_DEPTH} levels")
