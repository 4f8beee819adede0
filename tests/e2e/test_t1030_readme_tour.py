"""The README's "A short tour", followed as a new user would (issue 26 item
7): its lines run in order in one bash, from the repository, with PATH as the
tour sets it and LATTICE_HOME a fresh directory of the test's in place of the
tour's; each line must exit as the tour says.

The convention, in the README itself: a line exits 0 unless its comment says
"exit status N"; a line ending in `&` runs in the background (its status is
not awaited: it is sent SIGTERM when the tour is over, and awaited then).  A
line added to the tour later is run as well, with no change here.  Files the
tour writes into the repository (-o patterns, lattice submit's output) are
removed afterwards."""
from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from conftest import ROOT, Machine, wait_for

EXPECT = re.compile(r"#.*\bexit status (\d+)")


def tour() -> list[str]:
    """The command lines of the tour's code block, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## A short tour\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def code_of(line: str) -> str:
    """The line without its trailing comment: a # after whitespace, outside quotes."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def expected(line: str) -> int:
    m = EXPECT.search(line)
    return int(m.group(1)) if m else 0


def script(lines: list[str], home: Path, status: Path) -> str:
    """The tour as one bash script that writes each line's status (or, for a
    background line, its pid) to status; the tour's LATTICE_HOME is home."""
    out = ["set +e"]
    for i, line in enumerate(lines):
        code = code_of(line)
        code = re.sub(r"^(\s*export\s+LATTICE_HOME=)\S+", rf"\g<1>{home}", code)
        if code.endswith("&") and not code.endswith("&&"):
            # its output to a file: holding the test's pipes open it would keep the tour from ending
            log = status.with_name(f"background-{i}.log")
            out += [f"{code[:-1].rstrip()} > {log} 2>&1 &", f'echo "{i} bg $!" >> {status}']
        else:
            out += [code, f'echo "{i} $?" >> {status}']
    return "\n".join(out) + "\n"


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def untracked() -> set[str]:
    p = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=all"],
                       capture_output=True, text=True, check=True)
    return {line[3:] for line in p.stdout.splitlines() if line.startswith("?? ")}


def test_the_readme_tour_runs_line_by_line(built: Path, tmp_path: Path) -> None:
    lines = tour()
    assert any("lattice boot" in line for line in lines) and any("lattice run" in line for line in lines)
    home, status = tmp_path / "my-machine", tmp_path / "status"
    before = untracked()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LATTICE_")}
    env.update(LATTICE_WARM_IDLE="60",      # the machine's warm server leaves soon after the test
               TMPDIR=str(tmp_path))        # the tour's mktemp directories go with the test's
    m = Machine(home=home, work=tmp_path, env=dict(env, LATTICE_HOME=str(home),
                                                    PATH=f"{ROOT / '.venv' / 'bin'}:{env['PATH']}"))
    background: list[int] = []
    try:
        p = subprocess.run(["bash", "-c", script(lines, home, status)], cwd=ROOT, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1800)
        results = [line.split() for line in status.read_text().splitlines()] if status.exists() else []
        background = [int(r[2]) for r in results if r[1] == "bg"]
        got = {int(r[0]): int(r[1]) for r in results if r[1] != "bg"}
        failed = [f"{lines[i]!r} exited {got.get(i)}, the tour says {expected(lines[i])}"
                  for i in range(len(lines)) if not code_of(lines[i]).endswith("&")
                  and got.get(i) != expected(lines[i])]
        assert not failed, "\n".join(failed) + f"\n--- stdout:\n{p.stdout[-4000:]}\n--- stderr:\n{p.stderr[-6000:]}"
    finally:
        for pid in background:          # SIGTERM: a background job of a script ignores SIGINT
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in background:
            wait_for(lambda: gone(pid), timeout=300)
        if home.exists():
            m.run("free", "--all", "--force", check=False)
        for name in untracked() - before:       # the tour's -o files in the repository
            (ROOT / name).unlink(missing_ok=True)
