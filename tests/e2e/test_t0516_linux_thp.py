"""Linux mode's malloc on transparent huge pages (issue 27): where the host
gives them only to memory that asks (THP `madvise`, Debian's default), a
Linux mode job's ranks get GLIBC_TUNABLES=glibc.malloc.hugetlb=1, so a big
malloc'd array is mapped 2 MiB at a time, as cnk's big memory is, in the
node sandbox and with the preload client alike; the job's own GLIBC_TUNABLES
wins whole.  Hydra's ranks (plain processes) keep 4 KiB pages."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, booted_block

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    try:
        m = re.search(r"\[(\w+)\]", THP.read_text())
    except OSError:
        return "none"
    return m.group(1) if m else "none"


pytestmark = pytest.mark.skipif(thp_mode() != "madvise",
                                reason=f"the host's transparent huge pages are {thp_mode()}, not madvise")


@pytest.fixture(scope="module")
def tm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("thp"), "C", "1x1x1", "--pset-size", "1", "--memory", "256M")


@pytest.fixture(scope="module")
def probe(tm: Machine) -> Path:
    exe = tm.work / "thp_probe"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(Path(__file__).with_name("thp_probe.c"))], check=True)
    exe.chmod(0o755)
    return exe


def thp_kb(out: str) -> int:
    m = re.search(r"thp_kb=(\d+) page_kb=4\b", out)
    assert m, out
    return int(m.group(1))


def run_probe(m: Machine, probe: Path, *opts: str) -> int:
    p = m.run("run", "--block", "C", "-n", "1", "--kernel", "linux", "--cwd", "/tmp", *opts, str(probe))
    return thp_kb(p.stdout)


def test_linux_mode_mallocs_on_huge_pages_in_the_sandbox(tm: Machine, probe: Path) -> None:
    assert run_probe(tm, probe) >= 32 << 10        # most of the 64 MiB (the ends need not be 2 MiB aligned)


def test_linux_mode_mallocs_on_huge_pages_with_the_preload_client(tm: Machine, probe: Path) -> None:
    assert run_probe(tm, probe, "--no-sandbox") >= 32 << 10


def test_the_jobs_own_tunables_win(tm: Machine, probe: Path) -> None:
    assert run_probe(tm, probe, "--env", "GLIBC_TUNABLES=glibc.malloc.hugetlb=0") == 0


def test_a_plain_process_keeps_small_pages(probe: Path) -> None:
    """What the job would get without the default (and what Hydra's ranks get)."""
    env = {"PATH": "/usr/bin:/bin"}
    assert shutil.which("env")
    p = subprocess.run([str(probe)], env=env, capture_output=True, text=True, check=True)
    assert thp_kb(p.stdout) == 0
