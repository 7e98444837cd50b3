"""Shared plumbing for the supervisor's handles and its stdio servers.

- :class:`NoPublicConstructor`: handles only the supervisor may create (process trees,
  endpoints) hide their constructor, trio's idiom (``Cls()`` raises ``TypeError``; the module
  that owns the class uses ``Cls._create``).
- :func:`take_over_stdio`: a program that speaks a protocol on its stdin/stdout
  (``supervisor serve``, a plugin backend) keeps private copies of both and points the real
  fds elsewhere, so nothing but its frames can reach the peer.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn, TypeVar

__all__ = ("NoPublicConstructor", "take_over_stdio")

_T = TypeVar("_T")


class NoPublicConstructor(type):
    """Metaclass: ``Cls()`` raises TypeError; the owning module uses ``Cls._create``."""

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} has no public constructor")

    def _create(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc, no-any-return]


def take_over_stdio() -> tuple[int, int]:
    """Keep private copies of fds 0 and 1 for the protocol, and retarget the real ones.

    Afterwards whatever else writes to fd 1 (a stray ``print``, a library, a child that
    inherits it) lands on stderr, and fd 0 reads ``/dev/null``, so no child can consume the
    peer's input.

    Returns:
        ``(protocol_in, protocol_out)``: the copies of stdin and stdout to speak the protocol on.
    """
    protocol_in = os.dup(0)
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return protocol_in, protocol_out
