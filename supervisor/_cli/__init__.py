"""The command line and its front ends: ``supervisor`` (main), ``serve``, ``run`` and
its lanes file.

Private package: import its modules directly; the public names are re-exported by
:mod:`supervisor`.
"""

from __future__ import annotations

__all__: tuple[str, ...] = ()
