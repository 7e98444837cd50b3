"""A program that says its last words from its signal handlers (issue 24: drain on every stop).

Usage: ``python last_words.py [--lines=N] [--exit-after=MS] [--ignore-hup]``.

It prints ``ready`` on stdout, then waits. On SIGTERM or SIGHUP it writes ``N`` numbered lines
to stdout (``last out I/N``) and to stderr (``last err I/N``), then ``last words done`` on
stdout, and exits 0 at once. With ``--exit-after=MS`` it does the same by itself after MS
milliseconds (a natural exit). With ``--ignore-hup`` SIGHUP is ignored, so only SIGTERM makes
it speak (a terminal's hang-up then leads to the TERM step). Default ``N`` is 50.

Everything it writes is flushed before it exits, so whatever is missing was lost by the
reader, not by the program.
"""

from __future__ import annotations

import os
import signal
import sys
import time

lines = 50
exit_after_ms: int | None = None
ignore_hup = False
for flag in sys.argv[1:]:
    name, _, value = flag.partition("=")
    if name == "--lines":
        lines = int(value)
    elif name == "--exit-after":
        exit_after_ms = int(value)
    elif name == "--ignore-hup":
        ignore_hup = True
    else:
        sys.exit(f"unknown flag {flag}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_speaking = False


def last_words(signum: int = 0, frame: object = None) -> None:
    global _speaking
    if _speaking:
        return  # a second signal (TERM after the hang-up) while it speaks: go on once
    _speaking = True
    for i in range(1, lines + 1):
        _write_all(1, f"last out {i}/{lines}\n".encode())
        _write_all(2, f"last err {i}/{lines}\n".encode())
    _write_all(1, b"last words done\n")
    os._exit(0)


signal.signal(signal.SIGTERM, last_words)
signal.signal(signal.SIGHUP, signal.SIG_IGN if ignore_hup else last_words)
_write_all(1, b"ready\n")
if exit_after_ms is not None:
    time.sleep(exit_after_ms / 1000)
    last_words()
while True:
    signal.pause()
