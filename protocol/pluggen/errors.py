"""The generator's one error: a place in the header and what is wrong there."""
from __future__ import annotations


class PluggenError(Exception):
    def __init__(self, file: str, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file, self.line, self.message = file, line, message
