"""The pytest11 entry point: the testbed plugin (:mod:`supervisor.pytest_plugin`), after the
check that ``supervisor`` is ours. pytest loads entry points in every run of the
environment, so a shadowed package names itself here rather than as a missing module."""

from __future__ import annotations

from ._guard import check

check()

#: pytest registers the real plugin from here, under its module name.
pytest_plugins = ("supervisor.pytest_plugin",)
