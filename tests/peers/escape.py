"""Peer: leave processes behind in the ways real programs do.

Usage: escape.py MODE [--exit]

Modes (each prints the pid of the process left behind on one line first):
- ``setsid``: a grandchild in a new session that ignores SIGTERM.
- ``setsid-clean``: like ``setsid`` but started with an empty environment, so it
  carries no scope marker (only ancestry can find it).
- ``daemon``: a classic double-forked daemon (fork, setsid, fork) that ignores
  SIGTERM and closes its stdio.
- ``hold``: a background child in the same group that keeps stdout open.
- ``hold-ignore``: like ``hold`` but the background child ignores SIGTERM.

With ``--exit`` the main process exits 0 right after printing; otherwise it sleeps
until it is ended (SIGTERM ends it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
IGNORE_TERM = os.path.join(HERE, "ignore_term.py")
SLEEPER = "import time\nwhile True: time.sleep(3600)"


def _daemon() -> int:
    rd, wr = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(rd)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(wr, f"{os.getpid()}\n".encode())
        os.close(wr)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        while True:
            time.sleep(3600)
    os.close(wr)
    os.waitpid(first, 0)
    with os.fdopen(rd) as f:
        return int(f.readline())


def main() -> None:
    mode = sys.argv[1]
    if mode in ("setsid", "setsid-clean"):
        child = subprocess.Popen(
            [sys.executable, IGNORE_TERM],
            start_new_session=True,
            stdout=subprocess.PIPE,
            env={} if mode == "setsid-clean" else None,
        )
        assert child.stdout is not None
        child.stdout.readline()  # wait until SIGTERM is ignored
        pid = child.pid
    elif mode == "daemon":
        pid = _daemon()
    elif mode == "hold":
        pid = subprocess.Popen([sys.executable, "-c", SLEEPER]).pid
    elif mode == "hold-ignore":
        child = subprocess.Popen([sys.executable, IGNORE_TERM], stdout=subprocess.PIPE)
        assert child.stdout is not None
        child.stdout.readline()
        pid = child.pid
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(pid, flush=True)
    if "--exit" in sys.argv:
        os._exit(0)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
