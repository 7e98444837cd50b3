"""Peer: write N bytes to stdout and N bytes to stderr, interleaved, then exit 0.

Usage: flood.py N
"""

from __future__ import annotations

import os
import sys

total = int(sys.argv[1])
chunk = b"x" * 65536
left = {1: total, 2: total}
while any(left.values()):
    for fd in (1, 2):
        n = min(len(chunk), left[fd])
        if n:
            left[fd] -= os.write(fd, chunk[:n])
