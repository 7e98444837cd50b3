"""The distribution's version: what ``supervisor --version`` prints and ``core.ping`` answers.

One number, which the build reads too (``pyproject.toml``: ``dynamic = ["version"]``, from
this attribute), so the installed metadata and this constant can not differ. A constant
rather than ``importlib.metadata.version``: importing ``importlib.metadata`` alone takes
about 20 ms, more than the rest of ``supervisor --version`` (bench_startup).
"""

from __future__ import annotations

__all__ = ("__version__",)

__version__ = "0.1.0"
