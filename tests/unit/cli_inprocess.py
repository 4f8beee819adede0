"""`lattice` run inside the test's own process (no machine is booted)."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any, Iterator
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


@contextlib.contextmanager
def jobs_not_run() -> Iterator[dict[str, Any]]:
    """`lattice run` up to the job: booting, freeing and the job itself are
    replaced; what reaches job.run is kept ("spec", "block", "booted")."""
    from lattice.jobs import job
    from lattice.state import blocks
    from lattice.state.blocks import Block
    from lattice.state.machine import Machine
    seen: dict[str, Any] = {}

    def fake_boot(con: Any, m: Machine, name: str, owner: tuple[int, int] | None = None) -> Block:
        seen.setdefault("booted", []).append(name)
        return blocks.get(con, name)

    def fake_run(con: Any, m: Machine, b: Block, spec: job.Spec, wait: bool = False) -> int:
        seen["spec"], seen["block"] = spec, b
        return 0

    with mock.patch("lattice.nodes.boot.boot", fake_boot), mock.patch("lattice.nodes.boot.free"), \
            mock.patch("lattice.jobs.job.run", fake_run), mock.patch("lattice.jobs.launch.need_kernel"):
        yield seen
