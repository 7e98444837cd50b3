"""Validation of ``terminal.*`` payloads: the launch of a terminal and its limits.

Contract (the plugin contract "Plugin-owned native terminals"): ``executable`` is an
absolute path or a bare command found on PATH, and a relative path with a separator is
refused; ``arguments`` is an argv array, never shell text; ``cwd`` is an absolute path string (the
reference's ``{rootID, path}`` workspace resource needs workspace roots, which the supervisor
does not have, so it and a relative path are refused); ``environment`` maps names to
strings or null (null removes the variable) and can neither override nor remove the scope
marker. Limits: 256 arguments, 16 KiB (UTF-8) per argument, environment name or value,
64 environment entries, 64 KiB of launch data in all, a non-empty title of at most 128 UTF-8
bytes on one line, ``retainedContextBytes`` 0..262 144 (default 16 384; a larger value is
refused, never clamped). Every refusal is ``invalid_request`` naming the field, before
anything starts, so bad input starts nothing. Pure: no I/O beyond nothing at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from protocol import CoreError, invalid_field, text_problem

from .._api._terminal import (
    MAX_ARGUMENTS,
    MAX_COLS,
    MAX_ENVIRONMENT_ENTRIES,
    MAX_RETAINED_CONTEXT_BYTES,
    MAX_ROWS,
    TerminalCreate,
)
from .._process._marker import SCOPE_ENV

__all__ = (
    "DEFAULT_COLS",
    "DEFAULT_RETAINED_CONTEXT_BYTES",
    "DEFAULT_ROWS",
    "MAX_ARGUMENTS",
    "MAX_COLS",
    "MAX_ENVIRONMENT_ENTRIES",
    "MAX_ITEM_BYTES",
    "MAX_LAUNCH_BYTES",
    "MAX_RETAINED_CONTEXT_BYTES",
    "MAX_ROWS",
    "MAX_TITLE_BYTES",
    "MAX_WRITE_BYTES",
    "TerminalLaunch",
    "parse_create",
)

MAX_ITEM_BYTES: Final = 16 * 1024
MAX_LAUNCH_BYTES: Final = 64 * 1024
MAX_TITLE_BYTES: Final = 128
DEFAULT_RETAINED_CONTEXT_BYTES: Final = 16_384
#: Window size bounds (ours): the emulator keeps up to rows x cols cells per terminal.
DEFAULT_ROWS: Final = 24
DEFAULT_COLS: Final = 80
#: The most UTF-8 bytes one ``terminal.write`` carries (ours).
MAX_WRITE_BYTES: Final = 64 * 1024
#: The terminal type programs see unless ``environment`` sets ``TERM`` (ours): what the
#: retained-context emulator understands best.
DEFAULT_TERM: Final = "xterm-256color"


def _invalid(message: str, field: str) -> CoreError:
    return invalid_field(field, message)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _item(value: str, field: str) -> str:
    """``value``, checked for the OS (valid Unicode, no NUL) and the 16 KiB item bound."""
    if (problem := text_problem(value, field)) is not None:
        raise _invalid(problem, field)
    if _utf8_len(value) > MAX_ITEM_BYTES:
        raise _invalid(f"{field} is longer than {MAX_ITEM_BYTES} bytes", field)
    return value


@dataclass(frozen=True)
class TerminalLaunch:
    """What a terminal starts, kept across close for reopen.

    Attributes:
        executable: An absolute path or a bare command name (resolved on the child's PATH).
        arguments: The arguments after the program name.
        cwd: The working directory (an absolute path), or None for the supervisor's.
        environment: Changes to the supervisor's environment (None removes a variable);
            ``TERM`` defaults to :data:`DEFAULT_TERM`.
    """

    executable: str
    arguments: tuple[str, ...]
    cwd: str | None
    environment: tuple[tuple[str, str | None], ...]

    @property
    def argv(self) -> list[str]:
        """``[executable, *arguments]``."""
        return [self.executable, *self.arguments]

    def env(self) -> dict[str, str | None]:
        """The environment changes to start with."""
        return {"TERM": DEFAULT_TERM, **dict(self.environment)}


def parse_create(
    payload: TerminalCreate,
) -> tuple[str | None, TerminalLaunch, str | None, tuple[int, int], int]:
    """Check what the ``terminal.create`` declaration can not say (sizes in bytes, absolute
    paths, the scope marker, one-line titles) and read its defaults.

    Returns:
        ``(owner, launch, title, (rows, cols), retained_context_bytes)``.

    Raises:
        CoreError: ``invalid_request`` with ``details.field`` for the first bad field.
    """
    owner = None if payload.owner is None else _item(payload.owner, "owner")
    executable = _item(payload.executable, "executable")
    if os.sep in executable and not os.path.isabs(executable):
        raise _invalid("executable must be an absolute path or a bare command name", "executable")
    total = _utf8_len(executable)

    arguments = tuple(
        _item(item, f"arguments[{index}]") for index, item in enumerate(payload.arguments or [])
    )
    total += sum(_utf8_len(a) for a in arguments)

    cwd = payload.cwd
    if cwd is not None:
        _item(cwd, "cwd")
        if not os.path.isabs(cwd):
            raise _invalid(
                "cwd must be an absolute path (a relative one would depend on the "
                "supervisor's own working directory; the supervisor has no workspace roots)",
                "cwd",
            )
        total += _utf8_len(cwd)

    environment: list[tuple[str, str | None]] = []
    for name, value in (payload.environment or {}).items():
        field = f"environment.{name}"
        _item(name, field)
        if not name:
            raise _invalid(f"{field}: a variable name must not be empty", field)
        if "=" in name:
            raise _invalid(f"{field}: a variable name cannot contain '='", field)
        if name == SCOPE_ENV:
            raise _invalid(
                f"{SCOPE_ENV} is the supervisor's scope marker: it can be neither "
                "overridden nor removed",
                field,
            )
        if value is not None:
            total += _utf8_len(_item(value, field))
        total += _utf8_len(name)
        environment.append((name, value))

    title = payload.title
    if title is not None:
        _item(title, "title")
        if "\n" in title or "\r" in title:
            raise _invalid("title must be a single line", "title")
        if _utf8_len(title) > MAX_TITLE_BYTES:
            raise _invalid(f"title is longer than {MAX_TITLE_BYTES} bytes", "title")
        total += _utf8_len(title)

    if total > MAX_LAUNCH_BYTES:
        raise _invalid(
            f"the launch data is longer than {MAX_LAUNCH_BYTES} bytes in all", "arguments"
        )
    size = (payload.rows or DEFAULT_ROWS, payload.cols or DEFAULT_COLS)
    retained = payload.retained_context_bytes
    if retained is None:
        retained = DEFAULT_RETAINED_CONTEXT_BYTES
    launch = TerminalLaunch(executable, arguments, cwd, tuple(environment))
    return owner, launch, title, size, retained
