"""A full-screen program that redraws (issue 5): a curses counter in a box.

It draws ``count=001`` .. ``count=100`` at the same place, then ``FINAL-FRAME`` and the
window size it sees, and waits for keys: ``q`` quits, a resize (SIGWINCH, curses
``KEY_RESIZE``) redraws ``resized=<rows>x<cols>``. The retained context of a terminal running
it must be the last frame only: one ``count=`` line, no escape sequences.
"""

from __future__ import annotations

import curses
import time


def main(screen: curses.window) -> None:
    curses.curs_set(0)
    rows, cols = screen.getmaxyx()
    screen.border()
    for n in range(1, 101):
        screen.addstr(2, 4, f"count={n:03d}")
        screen.refresh()
        time.sleep(0.002)
    screen.addstr(4, 4, "FINAL-FRAME")
    screen.addstr(5, 4, f"size={rows}x{cols}")
    screen.refresh()
    while True:
        key = screen.getch()
        if key == ord("q"):
            return
        if key == curses.KEY_RESIZE:
            rows, cols = screen.getmaxyx()
            screen.addstr(6, 4, f"resized={rows}x{cols}")
            screen.refresh()


curses.wrapper(main)
