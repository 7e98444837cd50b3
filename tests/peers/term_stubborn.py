"""A program that ignores SIGHUP and SIGTERM and starts a background child (issue 5).

The child ignores both signals too and runs in its own process group, the way an
interactive shell's background job does. Both pids are written to the file named by
``argv[1]``, then ``READY`` is printed; both sleep until killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

CHILD = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True: time.sleep(1)\n"
)

signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", CHILD], process_group=0)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
print("READY", flush=True)
while True:
    time.sleep(1)
