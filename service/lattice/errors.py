"""The one exception the CLI turns into `lattice: error: ...`."""
from __future__ import annotations


class LatticeError(Exception):
    """A failure to report to the user: a message, and optionally more detail."""

    def __init__(self, message: str, long_message: str | None = None, status: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.long_message = long_message
        self.status = status
