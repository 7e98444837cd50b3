"""The guard itself (:func:`check`): imported by ``supervisor``, ``protocol``'s siblings and
the entry points, so it imports nothing of ours (the command's entry, which imports the command
line, is the package's ``main``; the two in one file would be an import circle)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from typing import Final

#: Our distribution's name on PyPI.
DISTRIBUTION: Final = "trio-process-supervisor"
#: The top-level packages it installs.
PACKAGES: Final = ("supervisor", "protocol", "lanes")
#: The line each of them holds in its ``__init__.py``.
_MARKER: Final = re.compile(r'^__distribution__ = "trio-process-supervisor"$', re.MULTILINE)
#: Bytes of an ``__init__.py`` read to find the marker (it sits near the top).
_HEAD_BYTES: Final = 16 * 1024
#: What the distributions known to take our names are.
_KNOWN: Final = {
    "supervisor": "supervisord, the process control system",
    "protocol": "PyPI's 'protocol' package",
}


class ShadowedPackageError(ImportError):
    """Python finds another package (or module) under one of our top-level names.

    The message names what was found, whose it is, and the fix.
    """


def check(*names: str) -> None:
    """Raise when any of ``names`` (default: all of :data:`PACKAGES`) is not ours.

    Raises:
        ShadowedPackageError: one of them is another distribution's, a file of the working
            directory or of ``PYTHONPATH``, or our package with its ``__init__.py`` gone.
    """
    for name in names or PACKAGES:
        problem = _problem(name)
        if problem is not None:
            raise ShadowedPackageError(problem, name=name)


def _problem(name: str) -> str | None:
    module = sys.modules.get(name)
    if module is not None:
        if getattr(module, "__distribution__", None) == DISTRIBUTION:
            return None
        return _describe(name, getattr(module, "__file__", None))
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return (
            f"{DISTRIBUTION}: Python finds no package {name!r}, which this distribution installs."
            f" Fix: pip install --force-reinstall {DISTRIBUTION}"
        )
    origin = spec.origin if spec.has_location else None
    if origin is not None and os.path.basename(origin) == "__init__.py" and _marked(origin):
        return None
    return _describe(name, origin, locations=list(spec.submodule_search_locations or []))


def _marked(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError:
        return False
    return _MARKER.search(head.decode("utf-8", "replace")) is not None


def _owners(name: str) -> list[str]:
    """The other distributions that install a top-level ``name``."""
    from importlib.metadata import packages_distributions

    try:
        owners = packages_distributions().get(name, [])
    except Exception:  # a broken metadata file must not hide the real error
        return []
    return sorted({o for o in owners if o.lower().replace("_", "-") != DISTRIBUTION})


def _describe(name: str, origin: str | None, *, locations: list[str] | None = None) -> str:
    where = origin or (", ".join(locations) if locations else "a namespace package")
    head = f"{DISTRIBUTION}: Python imports {name!r} from {where}, which is not ours."
    if origin is None and locations:
        # A directory without __init__.py: ours, after another distribution's uninstall
        # removed the file both had installed.
        return (
            f"{head} Its __init__.py is missing: uninstalling another distribution that"
            f" installs a {name!r} package removes it. Fix: pip install --force-reinstall"
            f" {DISTRIBUTION}"
        )
    owners = _owners(name)
    if owners:
        known = "".join(f" ({_KNOWN[name]})" for o in owners[:1] if o.lower() == name)
        listed = ", ".join(repr(o) for o in owners)
        return (
            f"{head} The distribution {listed}{known} installs a top-level {name!r} too, and"
            f" the two can not share an environment. Fix: install them in separate virtual"
            f" environments; or `pip uninstall {owners[0]}` and then `pip install"
            f" --force-reinstall {DISTRIBUTION}` (uninstalling it removes files both"
            " installed)."
        )
    return (
        f"{head} A module or directory named {name!r} in the current directory or on"
        f" PYTHONPATH comes before the installed package. Fix: rename it, or run from"
        " another directory."
    )
