"""`lattice run -t/--time`: a job's wall-clock limit, in srun's formats.

MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS,
DAYS-HOURS:MINUTES and DAYS-HOURS:MINUTES:SECONDS; 0, UNLIMITED or INFINITE
mean no limit.  At the limit the run ends the job on every node at once
(SIGKILL, as for any job Lattice ends), logs a RAS event, says so in one line
and exits with TIME_LIMIT.
"""
from __future__ import annotations

import re

from lattice.errors import LatticeError

TIME_LIMIT = 124        # the job's exit status at its limit, as timeout(1)'s
NO_LIMIT = ("0", "unlimited", "infinite")
FORMS = "MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
_DAYS = re.compile(r"(\d+)-(\d+)(?::(\d+))?(?::(\d+))?")


def parse(text: str) -> int | None:
    """Seconds, or None for no limit; a LatticeError names the forms."""
    t = text.strip().lower()
    if t in NO_LIMIT:
        return None
    m = _DAYS.fullmatch(t)
    if m:
        d, h, mi, s = (int(g) if g else 0 for g in m.groups())
        seconds = ((d * 24 + h) * 60 + mi) * 60 + s
    else:
        parts = t.split(":")
        if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise LatticeError(f"bad --time {text!r}: {FORMS}")
        n = [int(p) for p in parts]
        seconds = n[0] * 60 if len(n) == 1 else n[0] * 60 + n[1] if len(n) == 2 else (n[0] * 60 + n[1]) * 60 + n[2]
    if seconds <= 0:
        raise LatticeError(f"bad --time {text!r}: the limit must be above zero (0 or UNLIMITED: none)")
    return seconds


def words(seconds: int) -> str:
    """The limit as srun prints one: [D-]HH:MM:SS."""
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"
