"""`lattice` run inside the test's own process (no machine is booted)."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Iterator
from unittest import mock

from lattice.cli import main as cli


@contextlib.contextmanager
def home(path: Path) -> Iterator[None]:
    """LATTICE_HOME is path while the block runs."""
    with mock.patch.dict(os.environ, {"LATTICE_HOME": str(path)}):
        yield


def lattice(*args: str) -> tuple[int, str, str]:
    """`lattice ARGS`: exit status, stdout and stderr (argparse's usage errors included)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(list(args))
        except SystemExit as e:
            status = int(e.code or 0)
    return status, out.getvalue(), err.getvalue()
