"""The torus broadcast's schedule (compute/libtorus/sched.c), through its C
checker (tests/unit/torus_sched_check.c, built by `make libtorus`): for every
root and colour of meshes and tori of one to four dimensions, each colour is
a spanning tree of the box (one parent each, fed once, every node reached),
and a node off the root's lines gets its colours over n different links on a
mesh, 2n on a torus."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "build" / "tests" / "torus_sched_check"
BOXES = ["8", "8 wrap", "4x4", "4x4 wrap", "2x2 wrap", "3x5", "4x2 wrap", "4x4x2", "4x4x4 wrap",
         "3x3x3 wrap", "2x2x2x2", "3x5x2x2", "8x4x4"]


def test_every_colour_is_a_spanning_tree_fed_over_distinct_links() -> None:
    assert CHECK.exists(), f"{CHECK} missing: run make"
    p = subprocess.run([str(CHECK), *BOXES], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == len(BOXES) and all(l.startswith("ok ") for l in lines), p.stdout
    # n colours on a mesh, 2n on a torus
    assert "ok 4x4x2: 32 nodes, 3 colours" in lines
    assert "ok 4x4x4 wrap: 64 nodes, 6 colours" in lines
    assert "ok 2x2x2x2: 16 nodes, 4 colours" in lines


def test_checker_catches_a_broken_schedule(tmp_path: Path) -> None:
    """The checker fails a schedule whose colours all come over one link (a
    plain dimension-ordered tree): it is not vacuous."""
    src = (ROOT / "compute" / "libtorus" / "sched.c").read_text()
    broken = src.replace("order[i] = (colour % n + i) % n;", "order[i] = i;")
    assert broken != src
    (tmp_path / "sched.c").write_text(broken)
    exe = tmp_path / "check"
    subprocess.run(["gcc", "-std=c11", "-O2", f"-I{ROOT / 'compute' / 'libtorus'}", "-o", str(exe),
                    str(ROOT / "tests" / "unit" / "torus_sched_check.c"), str(tmp_path / "sched.c")], check=True)
    p = subprocess.run([str(exe), "4x4"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 1 and "FAIL 4x4" in p.stdout, p.stdout
