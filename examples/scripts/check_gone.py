"""Verify that the process whose pid is in PIDFILE no longer runs.

``python check_gone.py PIDFILE``: exit 0 when the process is gone (or a zombie waiting to be
reaped), 1 when it still runs, 2 when PIDFILE is missing or holds no pid.
"""

from __future__ import annotations

import os
import sys


def state(pid: int) -> str | None:
    """The one-letter state of ``pid`` (``R``, ``S``, ``Z``...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        # No /proc (not Linux): fall back to signal 0.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return "?"
        return "?"
    # The command name sits in parentheses and may itself hold ")".
    return data[data.rfind(b")") + 2 :].split(b" ", 1)[0].decode()


def main(argv: list[str]) -> int:
    """Check the pid in ``argv[1]``; return the exit code."""
    try:
        with open(argv[1]) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError, IndexError) as exc:
        print(f"check_gone: no pid to check: {exc}", file=sys.stderr)
        return 2
    found = state(pid)
    if found in (None, "Z", "X"):
        print(f"check_gone: grandchild {pid} is gone", flush=True)
        return 0
    print(f"check_gone: grandchild {pid} is still running (state {found})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
