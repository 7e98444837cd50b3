"""Typed readers for command payloads, on the shared readers of :mod:`protocol`.

A payload is validated once, by the Core, which decodes it as its command's declaration
(:mod:`supervisor._api`) before the handler runs; handlers that still read the JSON object
(``@declared`` ones get the decoded struct) use these readers to narrow its values, and to
check what the declaration can not say. Either way bad input starts and loses nothing.

These readers raise :class:`protocol.CoreError` with code ``invalid_request``, a message that
names the field and ``details.field``, so every command reports bad input the same way. JSON
booleans are never accepted where a number is expected (``True`` is an ``int`` in Python). The
rules for what may reach the OS (argv, environment, paths, stdin: no NUL, no lone surrogate) and
for durations and sizes (bounded integers) live in :mod:`protocol` (``read_argv``, ``read_env``,
``read_path``, ``read_text``, ``read_int``, ``read_milliseconds``), shared with the lanes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from protocol import (
    MAX_MILLISECONDS,
    CoreError,
    did_you_mean,
    echo,
    invalid_field,
    read_argv,
    read_env,
    read_int,
    read_milliseconds,
    read_path,
    read_text,
)

from .._api._base import FIELD_ALIASES

if TYPE_CHECKING:
    from protocol import JSONObject

__all__ = (
    "MAX_COUNT",
    "check_fields",
    "optional_bool",
    "optional_env",
    "optional_path",
    "optional_positive_int",
    "optional_str",
    "optional_text",
    "optional_timeout_ms",
    "require_argv",
    "require_path",
    "require_str",
)

#: The bound of an integer field whose command documents none (ids, counts): 2**31 - 1.
MAX_COUNT: Final = 2**31 - 1


def _invalid(message: str, field: str | None = None) -> CoreError:
    if field is None:
        return CoreError("invalid_request", message)
    return invalid_field(field, message)


def check_fields(payload: JSONObject, allowed: frozenset[str], command: str) -> None:
    """Refuse fields the command does not define.

    Raises:
        CoreError: ``invalid_request`` naming the first unknown field (sorted; cut when
            long) and listing the known ones, sorted: ``"terminal.create: unknown field
            'argv' (did you mean 'arguments'?) (known: arguments, cols, ...)"``, with
            ``details.field`` the unknown one.
    """
    if allowed.issuperset(payload):
        return  # the common case, without building a set (it is on every command's path)
    unknown = sorted(set(payload) - allowed)
    # A caller who guessed a name (``argv`` for ``arguments``) can correct it from the answer.
    known = ", ".join(sorted(allowed)) or "none"
    hint = did_you_mean(unknown[0], allowed, aliases=FIELD_ALIASES)
    raise _invalid(
        f"{command}: unknown field {echo(unknown[0])}{hint} (known: {known})", unknown[0]
    )


def require_str(payload: JSONObject, name: str, *, non_empty: bool = True) -> str:
    """Read a required string field."""
    value = payload.get(name)
    if not isinstance(value, str) or (non_empty and not value):
        raise _invalid(f"{name} must be a non-empty string", name)
    return value


def optional_str(payload: JSONObject, name: str) -> str | None:
    """Read an optional string field (absent or null gives None)."""
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _invalid(f"{name} must be a string", name)
    return value


def optional_text(payload: JSONObject, name: str) -> str | None:
    """Read optional data written to a stream (stdin): valid Unicode, NUL allowed; absent
    or null gives None."""
    return read_text(payload, name, allow_nul=True)


def require_path(payload: JSONObject, name: str) -> str:
    """Read a required path (an executable, a working directory): non-empty, for the OS."""
    path = read_path(payload, name, required=True)
    assert path is not None  # required
    return path


def optional_path(payload: JSONObject, name: str) -> str | None:
    """Read an optional path: absent or null gives None; else as :func:`require_path`."""
    return read_path(payload, name)


def optional_bool(payload: JSONObject, name: str, default: bool = False) -> bool:
    """Read an optional boolean field."""
    value = payload.get(name, default)
    if not isinstance(value, bool):
        raise _invalid(f"{name} must be a boolean", name)
    return value


def optional_positive_int(
    payload: JSONObject, name: str, *, maximum: int = MAX_COUNT
) -> int | None:
    """Read an optional integer field from 1 to ``maximum`` (:data:`MAX_COUNT` by default)."""
    return read_int(payload, name, minimum=1, maximum=maximum)


def optional_timeout_ms(
    payload: JSONObject, name: str = "timeoutMilliseconds", *, maximum: int = MAX_MILLISECONDS
) -> int | None:
    """Read a deadline in milliseconds: 1 to ``maximum`` starts one; absent, null or 0 is none.

    This is the envelope's rule (the Core API contract "Envelope": "a positive value starts a
    cooperative deadline"), applied to every command's own timeout field.
    """
    return read_milliseconds(payload, name, maximum=maximum)


def require_argv(payload: JSONObject, name: str = "argv") -> list[str]:
    """Read a non-empty list of strings for the OS (no NUL, no lone surrogate).

    Raises:
        CoreError: ``invalid_request`` for an absent or empty list, a non-string item, an
            empty program, a NUL or a lone surrogate.
    """
    return read_argv(payload, name)


def optional_env(payload: JSONObject, name: str = "env") -> dict[str, str | None] | None:
    """Read an environment table: names to strings, or null to remove the variable."""
    return read_env(payload, name)
