"""How a command prints a --json document (docs/cli.md, "JSON output")."""
from __future__ import annotations

import json
import sys
from typing import Any


def emit(doc: dict[str, Any]) -> None:
    """One JSON document on stdout: indented for a person at a terminal, one
    line otherwise (a pipe or a file, where a script reads it)."""
    sys.stdout.write(json.dumps(doc, indent=2 if sys.stdout.isatty() else None) + "\n")
