"""lattice(1) and shell completion, generated from the argparse parser
(scripts/manpage.py, scripts/completion.py; issue 26 item 5): the man page
names every command and option the parser has, so it cannot go stale; the
bash completion completes commands, options, choices and the machine's own
block names and job ids; the zsh function asks for the same."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lattice.cli import main as cli
from test_service_machine import ROOT, Home, home  # noqa: F401 - fixture

SCRIPTS = ROOT / "scripts"
BIN = Path(sys.executable).parent         # the venv's, where setup.sh puts `lattice`


def every_command() -> list[tuple[str, argparse.ArgumentParser]]:
    """(name, parser) of every command and subcommand, walked from the parser itself."""
    out: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(prefix: str, p: argparse.ArgumentParser) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, q in a.choices.items():
                    out.append((f"{prefix} {name}".strip(), q))
                    walk(f"{prefix} {name}", q)
    walk("", cli.parser())
    return out


def generate(tmp_path: Path, script: str, *args: str) -> Path:
    target = tmp_path / args[-1]
    subprocess.run([sys.executable, str(SCRIPTS / script), *args[:-1], str(target)], check=True)
    return target


def test_the_man_page_names_every_command_and_option(tmp_path: Path) -> None:
    page = generate(tmp_path, "manpage.py", "lattice.1")
    source = page.read_text().replace("\\-", "-").replace("\\fB", "").replace("\\fR", "")
    commands = every_command()
    assert len(commands) >= len(cli.COMMANDS)
    for name, p in commands:
        if any(isinstance(a, argparse._SubParsersAction) for a in p._actions):
            continue            # `block`: its subcommands are the commands
        assert f".SS lattice {name}\n" in source, name
        for a in p._actions:
            for flag in a.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in source, (name, flag)
    rendered = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True, text=True,
                              env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0"))
    assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr
    text = re.sub(".\x08", "", rendered.stdout)      # bold and underline are overstruck
    assert "lattice run" in text and "RANK ENVIRONMENT" in text and "LATTICE_NODEID" in text


def test_man_finds_the_installed_page_beside_the_venvs_bin() -> None:
    found = subprocess.run(["man", "-w", "lattice"], capture_output=True, text=True,
                           env=dict(os.environ, PATH=f"{BIN}:/usr/bin:/bin"))
    assert found.stdout.strip() == str(BIN.parent / "share" / "man" / "man1" / "lattice.1"), found


def complete(script: Path, home: Home, line: list[str]) -> list[str]:
    """What _lattice offers for the last word of line."""
    words = " ".join(f"'{w}'" for w in line)
    p = subprocess.run(["bash", "-c", f"source {script}; COMP_WORDS=({words}); COMP_CWORD={len(line) - 1}; "
                                      '_lattice; printf "%s\\n" "${COMPREPLY[@]}"'],
                       capture_output=True, text=True, env=home.env(PATH=f"{BIN}:{os.environ['PATH']}"),
                       cwd=script.parent)       # files complete from here: the script and the home
    assert p.returncode == 0 and p.stderr == "", p.stderr
    return [w for w in p.stdout.splitlines() if w]


def test_bash_completes_commands_options_choices_and_the_machines_blocks_and_jobs(home: Home,
                                                                                  tmp_path: Path) -> None:
    script = generate(tmp_path, "completion.py", "bash", "lattice.bash")
    home.ok("init", "--shape", "1x1x4", "--pset-size", "2")
    home.ok("block", "create", "LEFT", "--shape", "1x1x2")
    home.ok("block", "create", "RIGHT", "--shape", "1x1x2")
    assert set(complete(script, home, ["lattice", ""])) >= set(cli.COMMANDS)
    assert complete(script, home, ["lattice", "ca"]) == ["cancel"]
    run = dict(every_command())["run"]
    flags = {f for a in run._actions for f in a.option_strings} - {"-h"}
    assert set(complete(script, home, ["lattice", "run", "-"])) >= flags
    assert complete(script, home, ["lattice", "run", "--ke"]) == ["--kernel"]
    assert complete(script, home, ["lattice", "run", "--kernel", ""]) == ["cnk", "linux"]
    # after the program's name the words are the program's: files, no option of lattice's
    assert complete(script, home, ["lattice", "run", "-n", "2", "/bin/echo", "--ke"]) == []
    assert complete(script, home, ["lattice", "run", "/bin/echo", "--mode", "h"]) == ["home"]
    assert complete(script, home, ["lattice", "run", "--block", ""]) == ["LEFT", "RIGHT"]
    assert complete(script, home, ["lattice", "boot", "R"]) == ["RIGHT"]
    assert complete(script, home, ["lattice", "free", "--force", ""]) == ["LEFT", "RIGHT"]
    assert complete(script, home, ["lattice", "block", ""]) == ["create", "delete"]
    assert complete(script, home, ["lattice", "block", "delete", ""]) == ["LEFT", "RIGHT"]
    assert complete(script, home, ["lattice", "block", "create", ""]) == []      # a new name
    assert complete(script, home, ["lattice", "ras", "--severity", "E"]) == ["ERROR"]
    # job ids from `lattice jobs` (two jobs of its history, put there as a run would)
    with home.db() as con:                      # either backend
        for _ in range(2):
            con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, state, submitted, kernel, "
                        "status) VALUES ('LEFT', 'u', 0, '/bin/x', '/bin/x', '/', 1, 'Terminated', 0, 'linux', 0)")
    con.close()
    assert complete(script, home, ["lattice", "cancel", ""]) == ["1", "2"]
    assert complete(script, home, ["lattice", "ras", "--job", ""]) == ["1", "2"]
    assert complete(script, home, ["lattice", "jobs", "--ranks", "2"]) == ["2"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (scripts/setup.sh installs it)")
def test_zsh_asks_compsys_for_the_same(home: Home, tmp_path: Path) -> None:
    """compsys itself needs a terminal: its functions are stood in for by ones
    that print what they were asked, which is what the generated code decides."""
    script = generate(tmp_path, "completion.py", "zsh", "_lattice")
    home.ok("init", "--shape", "1x1x4", "--pset-size", "2")
    home.ok("block", "create", "LEFT", "--shape", "1x1x2")
    stubs = ("_arguments() { print -rl -- \"$@\" }; _describe() { print -rl -- \"${(@P)2}\" }; "
             "compadd() { if [[ $1 == -a ]]; then print -rl -- \"${(@P)2}\"; else print -rl -- \"$@\"; fi }; "
             "_files() { print FILES $* }; ")

    def ask(*line: str) -> list[str]:
        words = " ".join(f"'{w}'" for w in line)
        p = subprocess.run(["zsh", "-f", "-c", stubs + f"words=({words}); CURRENT={len(line)}; "
                            f"source {script}"], capture_output=True, text=True,
                           env=home.env(PATH=f"{BIN}:{os.environ['PATH']}"))
        assert p.returncode == 0 and p.stderr == "", p.stderr
        return p.stdout.splitlines()

    assert [c.split(":")[0] for c in ask("lattice", "")] == list(cli.COMMANDS)
    specs = ask("lattice", "boot", "")
    assert specs == ["-s", "1:NAME:_lattice_blocks"], specs
    assert any(s.startswith("--kernel[") and s.endswith(":(cnk linux)") for s in ask("lattice", "run", "")), \
        ask("lattice", "run", "")
    assert ask("lattice", "block", "") == ["create", "delete"]
    p = subprocess.run(["zsh", "-f", "-c", stubs + f"source {script} >/dev/null 2>&1; _lattice_blocks"],
                       capture_output=True, text=True, env=home.env(PATH=f"{BIN}:{os.environ['PATH']}"))
    assert p.stdout.split() == ["LEFT"], p
