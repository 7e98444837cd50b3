"""Peer: print "before" to stdout and "err-before" to stderr, then sleep forever."""

from __future__ import annotations

import sys
import time

print("before", flush=True)
print("err-before", file=sys.stderr, flush=True)
while True:
    time.sleep(3600)
