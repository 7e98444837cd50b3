"""A terminal program that records, in order, the lines it reads (issue 24, the order rule).

Usage: ``python order_tty.py RECORD``. Echo is turned off; each line read is appended to
RECORD as it came, except ``size`` (appends ``size ROWS COLS``: the window size when the line
was read) and ``quit`` (appends ``quit`` and exits 0). Standard library only.
"""

from __future__ import annotations

import fcntl
import struct
import sys
import termios


def main() -> int:
    attributes = termios.tcgetattr(0)
    attributes[3] &= ~termios.ECHO
    termios.tcsetattr(0, termios.TCSANOW, attributes)
    with open(sys.argv[1], "w") as record:
        for raw in sys.stdin:
            line = raw.rstrip("\n")
            if line == "size":
                size = fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8)
                rows, cols = struct.unpack("hhhh", size)[:2]
                record.write(f"size {rows} {cols}\n")
            else:
                record.write(line + "\n")
            record.flush()
            if line == "quit":
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
