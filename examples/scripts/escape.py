"""A job whose child leaves a grandchild behind that a polite supervisor can not end.

``python escape.py PIDFILE``: starts a grandchild in a new session (``setsid``: it leaves the
job's process group and session) that ignores SIGTERM, keeps the job's stdout open and
sleeps for ten minutes. Once the grandchild has written its pid to PIDFILE, this process
exits 0. The supervisor must still end the grandchild: it is found by its scope marker and
by ancestry, and SIGKILL follows the ignored SIGTERM after the grace period.
``check_gone.py PIDFILE`` then verifies it is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: How long the child waits for the grandchild to report its pid.
READY_TIMEOUT_S = 10.0


def grandchild(pidfile: str) -> int:
    """Ignore SIGTERM, publish the pid atomically, then outlive everyone."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    partial = f"{pidfile}.partial"
    with open(partial, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(partial, pidfile)
    print(f"grandchild {os.getpid()}: in session {os.getsid(0)}, ignoring SIGTERM", flush=True)
    time.sleep(600)
    return 0


def main(argv: list[str]) -> int:
    """Start the grandchild, wait until it is ready, exit 0."""
    if len(argv) == 3 and argv[1] == "--grandchild":
        return grandchild(argv[2])
    pidfile = argv[1]
    # No wait() on purpose: the grandchild must outlive this process.
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--grandchild", pidfile],
        start_new_session=True,
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not os.path.exists(pidfile):
        if time.monotonic() > deadline or child.poll() is not None:
            print("escape: the grandchild did not start", file=sys.stderr, flush=True)
            return 1
        time.sleep(0.01)
    print(f"escape: started grandchild {child.pid} in a new session; exiting", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
