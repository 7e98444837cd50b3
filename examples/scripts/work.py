"""A stand-in for a long job: prints a tick every 100 ms for SECONDS seconds, then exits 0.

Usage: ``python work.py SECONDS [LABEL]``. SIGTERM ends it at once (the default action), as
it would a compiler or a test runner; the demo uses it for the jobs that a deadline, a
``supersede`` or a cancel ends before they are done.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    """Tick for ``argv[1]`` seconds; return the exit code."""
    seconds = float(argv[1]) if len(argv) > 1 else 1.0
    label = argv[2] if len(argv) > 2 else "work"
    end = time.monotonic() + seconds
    ticks = 0
    print(f"{label}: working for {seconds:g} s", flush=True)
    while time.monotonic() < end:
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))
        ticks += 1
        if ticks % 5 == 0:
            print(f"{label}: {ticks / 10:.1f} s", flush=True)
    print(f"{label}: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
