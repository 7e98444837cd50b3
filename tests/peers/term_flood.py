"""A program that floods its terminal with output until it is killed (issue 5).

Every line is ``flood line <n>`` followed by a two-byte and a three-byte UTF-8 character, so
a reader that splits characters between chunks would show U+FFFD.
"""

from __future__ import annotations

import os

n = 0
while True:
    lines = []
    for _ in range(256):
        n += 1
        lines.append(f"flood line {n} é€\n")
    os.write(1, "".join(lines).encode())
