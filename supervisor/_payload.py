"""Typed readers for command payloads.

Every command validates its payload before it starts anything (DESIGN.md invariant 9). These
readers raise :class:`protocol.CoreError` with code ``invalid_request`` and a message that
names the field, so every command reports bad input the same way. JSON booleans are never
accepted where a number is expected (``True`` is an ``int`` in Python).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol import CoreError

if TYPE_CHECKING:
    from protocol import JSONObject, JSONValue

__all__ = (
    "check_fields",
    "optional_bool",
    "optional_env",
    "optional_positive_int",
    "optional_str",
    "optional_timeout_ms",
    "require_argv",
    "require_str",
)


def _invalid(message: str) -> CoreError:
    return CoreError("invalid_request", message)


def check_fields(payload: JSONObject, allowed: frozenset[str], command: str) -> None:
    """Refuse fields the command does not define.

    Raises:
        CoreError: ``invalid_request`` naming the first unknown field (sorted) and listing
            the known ones, sorted: ``"terminal.create: unknown field 'argv' (known:
            arguments, cols, ...)"``. No details: the message is the whole answer.
    """
    if allowed.issuperset(payload):
        return  # the common case, without building a set (it is on every command's path)
    unknown = sorted(set(payload) - allowed)
    # A caller who guessed a name (``argv`` for ``arguments``) can correct it from the answer.
    known = ", ".join(sorted(allowed)) or "none"
    raise _invalid(f"{command}: unknown field {unknown[0]!r} (known: {known})")


def require_str(payload: JSONObject, name: str, *, non_empty: bool = True) -> str:
    """Read a required string field."""
    value = payload.get(name)
    if not isinstance(value, str) or (non_empty and not value):
        raise _invalid(f"{name} must be a non-empty string")
    return value


def optional_str(payload: JSONObject, name: str) -> str | None:
    """Read an optional string field (absent or null gives None)."""
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _invalid(f"{name} must be a string")
    return value


def optional_bool(payload: JSONObject, name: str, default: bool = False) -> bool:
    """Read an optional boolean field."""
    value = payload.get(name, default)
    if not isinstance(value, bool):
        raise _invalid(f"{name} must be a boolean")
    return value


def optional_positive_int(
    payload: JSONObject, name: str, *, maximum: int | None = None
) -> int | None:
    """Read an optional integer field that must be at least 1 (and at most ``maximum``)."""
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid(f"{name} must be a positive integer")
    if maximum is not None and value > maximum:
        raise _invalid(f"{name} must be at most {maximum}")
    return value


def optional_timeout_ms(
    payload: JSONObject, name: str = "timeoutMilliseconds", *, maximum: int | None = None
) -> int | None:
    """Read a deadline in milliseconds: a positive integer starts one; absent, null or 0 is none.

    This is the envelope's rule (core-api.md "Envelope": "a positive value starts a
    cooperative deadline"), applied to every command's own timeout field.
    """
    value = payload.get(name)
    if value == 0 and not isinstance(value, bool):
        return None
    return optional_positive_int(payload, name, maximum=maximum)


def require_argv(payload: JSONObject, name: str = "argv") -> list[str]:
    """Read a non-empty list of strings without NUL characters.

    Raises:
        CoreError: ``invalid_request`` for an absent or empty list, a non-string item, or a NUL.
    """
    value: JSONValue = payload.get(name)
    if not isinstance(value, list) or not value:
        raise _invalid(f"{name} must be a non-empty array of strings")
    argv: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise _invalid(f"{name}[{index}] must be a string")
        if "\0" in item:
            raise _invalid(f"{name}[{index}] contains a NUL character")
        argv.append(item)
    return argv


def optional_env(payload: JSONObject, name: str = "env") -> dict[str, str | None] | None:
    """Read an environment table: names to strings, or null to remove the variable."""
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _invalid(f"{name} must be an object of strings")
    env: dict[str, str | None] = {}
    for key, item in value.items():
        if not key or "=" in key or "\0" in key:
            raise _invalid(f"{name} has an invalid variable name {key!r}")
        if item is not None and not isinstance(item, str):
            raise _invalid(f"{name}.{key} must be a string or null")
        if isinstance(item, str) and "\0" in item:
            raise _invalid(f"{name}.{key} contains a NUL character")
        env[key] = item
    return env
