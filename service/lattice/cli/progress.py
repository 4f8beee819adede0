"""One status line on a terminal, rewritten in place (a long boot's
"booting R00: 312/512 compute nodes up").  Only on a terminal: a pipe or a
file gets nothing from here, so scripts and logs see no carriage returns."""
from __future__ import annotations

import sys
from typing import TextIO

CLEAR = "\r\x1b[K"      # to the line's start, and erase it


class Line:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):    # closed, or no file at all
            self.tty = False
        self.shown = ""

    def show(self, text: str) -> None:
        """text as the line, if it changed (a terminal only)."""
        if not self.tty or text == self.shown:
            return
        self.write(CLEAR + text)
        self.shown = text

    def clear(self) -> None:
        """The line erased, so that what is written next starts a clean line."""
        if self.shown:
            self.write(CLEAR)
            self.shown = ""

    def write(self, s: str) -> None:
        try:
            self.stream.write(s)
            self.stream.flush()
        except (OSError, ValueError):
            self.tty = False        # the terminal went away: the boot goes on without its line
