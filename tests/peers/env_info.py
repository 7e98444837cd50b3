"""Peer: print one JSON line describing this process, then exit 0.

Usage: env_info.py [VAR ...]  -- the named variables are included (null if unset).
"""

from __future__ import annotations

import json
import os
import sys

print(
    json.dumps(
        {
            "pid": os.getpid(),
            "pgid": os.getpgrp(),
            "sid": os.getsid(0),
            "marker": os.environ.get("SUPERVISOR_SCOPE"),
            "vars": {name: os.environ.get(name) for name in sys.argv[1:]},
        }
    ),
    flush=True,
)
