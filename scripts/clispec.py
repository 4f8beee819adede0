"""The `lattice` command line as data, read from its argparse parser
(lattice.cli.main.parser): what scripts/manpage.py and scripts/completion.py
write, so neither can drift from the parser.  A command with subcommands
(`block create`) is one Command per subcommand, named "block create"."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "service"))

from lattice.cli.main import parser as lattice_parser  # noqa: E402 - after the path


@dataclass
class Arg:
    flags: list[str]            # option strings; [] for a positional
    dest: str
    metavar: str                # what the value is called, "" for a flag without one
    help: str
    choices: list[str]
    kind: str                   # what completes its value: block, job, file, dir, choice, none, flag
    many: bool = False          # a positional taking the rest of the line, or several values
    remainder: bool = False     # the rest of the line, options included (a program's arguments)


@dataclass
class Command:
    name: str                   # "run", "block create"
    description: str
    usage: str
    options: list[Arg] = field(default_factory=list)
    positionals: list[Arg] = field(default_factory=list)


# which values name a block or a job, by the argument's dest (a new command's
# --block or JOB argument completes without a change here)
BLOCK_DESTS = {"block"}
JOB_DESTS = {"job", "jobs", "ranks"}
DIR_DESTS = {"cwd", "chdir", "tree", "hide"}
FILE_DESTS = {"exe", "args", "mapping", "hostfile", "output", "error"}


def kind_of(cmd: str, a: argparse.Action) -> str:
    if a.nargs == 0:
        return "flag"
    if a.choices:
        return "choice"
    if a.dest in BLOCK_DESTS or (a.dest == "name" and cmd not in ("block create",)):
        return "block"
    if a.dest in JOB_DESTS:
        return "job"
    if a.dest in DIR_DESTS:
        return "dir"
    if a.dest in FILE_DESTS or (a.metavar or "").upper() in ("FILE", "PATH", "EXE"):
        return "file"
    return "none"


def subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return a
    return None


def read_command(name: str, p: argparse.ArgumentParser) -> Command:
    c = Command(name, p.description or "", " ".join(p.format_usage().split())[len("usage: "):])
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        metavar = a.metavar if isinstance(a.metavar, str) else ("" if a.nargs == 0 else a.dest.upper())
        arg = Arg(list(a.option_strings), a.dest, metavar, a.help or "", [str(x) for x in a.choices or []],
                  kind_of(name, a), a.nargs in ("*", "+", argparse.REMAINDER, "...")
                  or isinstance(a, argparse._AppendAction), a.nargs == argparse.REMAINDER)
        (c.options if a.option_strings else c.positionals).append(arg)
    return c


def commands() -> tuple[argparse.ArgumentParser, list[Command]]:
    """The whole parser, and every command (each subcommand its own)."""
    top = lattice_parser()
    sub = subparsers(top)
    assert sub is not None
    out: list[Command] = []
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    for name, p in sub.choices.items():
        inner = subparsers(p)
        if inner is None:
            c = read_command(name, p)
            c.description = c.description or helps.get(name, "")
            out.append(c)
            continue
        inner_helps = {a.dest: a.help or "" for a in inner._choices_actions}
        for action, q in inner.choices.items():
            c = read_command(f"{name} {action}", q)
            c.description = q.description or inner_helps.get(action, "") or p.description or ""
            out.append(c)
    return top, out


def top_commands() -> list[str]:
    """The first words: run, block, ..."""
    return list(dict.fromkeys(c.name.split()[0] for c in commands()[1]))
