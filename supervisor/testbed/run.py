"""``python -m supervisor.testbed.run SCENARIO [options]``: run one misbehaving program.

The same programs as ``supervisor testbed run``; see :mod:`supervisor.testbed._programs` for
the options and :data:`supervisor.testbed.SCENARIOS` for what each one does.
"""

from __future__ import annotations

import sys

from ._programs import main

__all__ = ("main",)

if __name__ == "__main__":
    sys.exit(main())
