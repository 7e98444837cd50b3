#!/usr/bin/env python3
"""Check that every `name==version` of a constraints file is the version installed here.

pip installs constraints only for packages something requires: a pin nothing pulls in, or a
resolver that chose otherwise, would let CI claim a lower bound it never ran.
Usage: check_versions.py CONSTRAINTS-FILE (exit 1, naming each mismatch).
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, version


def main(path: str) -> int:
    wrong: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line)
            if match is None:
                continue
            name, pinned = match.groups()
            try:
                installed = version(name)
            except PackageNotFoundError:
                installed = "not installed"
            if installed != pinned:
                wrong.append(f"{name} {installed} (pinned {pinned})")
    if wrong:
        print("not the pinned versions: " + ", ".join(wrong), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
