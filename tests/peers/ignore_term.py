"""Peer: ignore SIGTERM, print "ready", then sleep until killed."""

from __future__ import annotations

import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "--close-stdout":
    sys.stdout.close()
while True:
    time.sleep(3600)
