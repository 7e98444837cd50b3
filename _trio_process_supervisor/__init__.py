"""The distribution's own guard: a clear error when Python finds another package's name first.

trio-process-supervisor installs three top-level packages, ``supervisor``, ``protocol`` and
``lanes`` (the product's names), and other code uses the same names: supervisord is
``supervisor`` on PyPI, PyPI has a ``protocol``, and a ``protocol.py`` in the working
directory (or on ``PYTHONPATH``) comes before any installed package. Python then imports the
other one, and the first name it lacks fails far from the cause (``cannot import name
'open_core' from 'supervisor'``); pip sees nothing wrong, since two distributions may install
files into one directory, the second overwriting the first's ``__init__.py``.

Contract: :func:`check` finds each name as ``import`` would (the module already imported, or
``importlib.util.find_spec``, which runs nothing) and accepts it only when it is ours: an
imported module whose ``__distribution__`` is :data:`DISTRIBUTION`, or an ``__init__.py``
whose source says so. Anything else raises one :class:`ShadowedPackageError` that names what
Python found, the distribution it belongs to, and the fix. ``supervisor`` checks ``protocol``
and ``lanes`` when it is imported, ``lanes`` checks ``protocol``; the ``supervisor`` command
and the pytest plugin (:mod:`._pytest_plugin`) check all three first, because a shadowed
``supervisor`` never runs a line of ours. Only a program's own ``import supervisor`` of
supervisord's package can not be caught: its code is not ours.

This package has a name nobody else uses (the distribution's) so that it is always ours.
"""

from __future__ import annotations

import sys

from ._guard import (
    DISTRIBUTION as DISTRIBUTION,
    PACKAGES as PACKAGES,
    ShadowedPackageError as ShadowedPackageError,
    check as check,
)

__all__ = ("DISTRIBUTION", "PACKAGES", "ShadowedPackageError", "check", "main")


def main() -> int:
    """The ``supervisor`` command: check our packages, then run the command line."""
    try:
        check()
    except ShadowedPackageError as exc:
        print(exc, file=sys.stderr)
        return 1
    from supervisor._cli._main import main as run

    return run()
