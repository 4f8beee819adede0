"""`lattice`: the service node's command line.

One module per command under lattice.cli.cmd, each with `description`,
`setup_parser(parser)` and a function named after the command.  One error
boundary: a LatticeError prints `lattice: error: MESSAGE` and exits with its
status; a traceback only with LATTICE_DEBUG=1.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Callable

from lattice.errors import LatticeError

COMMANDS = ("init", "machine", "block", "boot", "free", "blocks", "run", "submit", "jobs", "cancel", "ras",
            "counters", "personality", "serve")


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, just that command's module is
    imported and set up (the others stay names), which keeps a `lattice run`
    from importing every other command's dependencies."""
    ap = argparse.ArgumentParser(prog="lattice", description="Lattice service node: machine, blocks and jobs. "
                                 "The machine lives in $LATTICE_HOME (default ~/.lattice).")
    ap.add_argument("--version", action="version", version=version())
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        mod = importlib.import_module(f"lattice.cli.cmd.{name}")
        p = sub.add_parser(name, help=mod.description, description=mod.description)
        mod.setup_parser(p)
        p.set_defaults(func=getattr(mod, name))
    return ap


def version() -> str:
    """`lattice --version`: the release and the wire protocol it speaks."""
    from lattice import __version__
    from lattice.transport import wire
    return f"lattice {__version__} (wire protocol {wire.VERSION})"


def command_of(argv: list[str]) -> str | None:
    """The command argv names, if its first word is one (the top level has no
    options but --help, which needs every command's description)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


PARSER: argparse.ArgumentParser | None = None     # the whole parser, made once by a warm server (lattice.cli.warm)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    args = (PARSER or parser(command_of(argv))).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LatticeError as e:
        if os.environ.get("LATTICE_DEBUG"):
            raise
        print(f"lattice: error: {e.message}", file=sys.stderr)
        if e.long_message:
            print(e.long_message, file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 141
    except Exception as e:      # the machine's files or database failed under the command: one line
        from lattice.state import db
        line = db.failure_line(e)
        if line is None or os.environ.get("LATTICE_DEBUG"):
            raise
        print(f"lattice: error: {line}", file=sys.stderr)
        return 1


def entry(tell: Callable[[int], None] | None = None) -> None:
    """The `lattice` command: main(), then out without the interpreter's
    teardown.  Every write is committed and flushed by then; the teardown
    only freed memory and checkpointed the database's write-ahead log, which
    SQLite does as well on a later commit (with its fsync): 10-15 ms of every
    command, a tenth of a small `lattice run`.  tell: who else must learn
    the status first (a warm server's client, lattice.cli.warm)."""
    status = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        status = status or 141
    if tell is not None:
        tell(status)
    os._exit(status)


if __name__ == "__main__":
    entry()
