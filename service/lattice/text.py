"""Untrusted text made safe to print and to store.

What a job supplies (a PMI abort message, a rank's exit text, a RAS event
it caused) reaches root's terminal, the RAS log and `lattice jobs`.  A
terminal obeys escape sequences (set the title, clear the screen, rewrite
what is shown, on some terminals answer back), and a line break or record
separator in a one-line field forges a line that is not the job's.  So
every character that is not printable is shown as Python writes it in a
string literal: \\xNN for C0 controls, DEL and C1 controls (ESC is \\x1b,
a newline \\x0a), \\uNNNN or \\UNNNNNNNN for the rest (bidirectional
overrides, line and paragraph separators, format characters, unassigned
code points).  A backslash stays as it is: the escaped text is for people
to read, not to be unescaped.  The job's own standard output and error are
its user's data and are never passed through here.
"""
from __future__ import annotations


def escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def printable(s: str, keep: str = "") -> str:
    """s with every character str.isprintable() refuses escaped (a space
    stays; keep: characters to leave as they are, e.g. "\\n" for text shown
    as several lines)."""
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() or ch in keep else escape(ch) for ch in s)
