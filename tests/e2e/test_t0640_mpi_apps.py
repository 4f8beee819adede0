"""The MPI application kernels of bench/apps.py (bench/apps/: CG, MG, FT, IS,
EP, NPB-like, self-verifying) at their tiny class T: each prints VERIFIED and
exits 0 under mpiexec.hydra at 3 ranks (uneven slabs and blocks) and under
`lattice run` with its defaults (cnk, co mode) at 2 ranks; one also in Linux
mode.  The result line carries the same rank-count independent checksum under
every launcher.  Tests never assert on timing.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, booted_block, Machine

APPS = BUILD / "bench" / "apps"
KERNELS = ["cg", "mg", "ft", "is", "ep"]
# the value each kernel's class T is checked against, as printed
CHECKSUM = {"cg": r"zeta=(\S+)", "mg": r"rnorm=(\S+)", "ft": r"checksum=([-+]?[0-9.]+e[-+][0-9]+)", "is": r"checksum=(\S+)",
            "ep": r"sx=(\S+)"}


def result(out: str, kernel: str) -> re.Match[str]:
    m = re.search(rf"^{kernel.upper()} class=T ranks=(\d+) time_s=\S+ .* (VERIFIED|FAILED.*)$", out, re.M)
    assert m, out
    return m


@pytest.fixture(scope="module")
def apps_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert shutil.which("mpiexec.hydra"), "MPICH is not installed (apt-get install mpich libmpich-dev)"
    for k in KERNELS:
        assert (APPS / k).exists(), f"{APPS / k} missing: run make"
    yield from booted_block(tmp_path_factory.mktemp("apps"), "A", "1x1x2", "--pset-size", "2", "--memory", "256M", "--cores", "2")


def hydra(kernel: str, n: int) -> str:
    p = subprocess.run(["mpiexec.hydra", "-n", str(n), str(APPS / kernel), "T"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_verifies_under_hydra_and_lattice(apps_machine: Machine, kernel: str) -> None:
    native = result(hydra(kernel, 3), kernel)
    assert native.group(1) == "3" and native.group(2) == "VERIFIED", native.group(0)
    p = apps_machine.run("run", "--block", "A", "-n", "2", "--cwd", str(apps_machine.work), str(APPS / kernel), "T",
                         timeout=180)
    cnk = result(p.stdout, kernel)
    assert cnk.group(1) == "2" and cnk.group(2) == "VERIFIED", p.stdout + p.stderr
    # the same global result on 3 ranks natively and 2 under cnk
    want = re.search(CHECKSUM[kernel], native.group(0))
    got = re.search(CHECKSUM[kernel], cnk.group(0))
    assert want and got
    if kernel in ("is", "ep"):
        assert got.group(1) == want.group(1)        # exact by construction
    else:
        assert abs(float(got.group(1)) / float(want.group(1)) - 1) < 1e-10


def test_kernel_verifies_in_linux_mode(apps_machine: Machine) -> None:
    p = apps_machine.run("run", "--block", "A", "-n", "2", "--kernel", "linux", "--cwd", str(apps_machine.work),
                         str(APPS / "ft"), "T", timeout=180)
    assert result(p.stdout, "ft").group(2) == "VERIFIED", p.stdout + p.stderr


def test_bad_class_is_refused() -> None:
    p = subprocess.run(["mpiexec.hydra", "-n", "1", str(APPS / "cg"), "Z"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert "CLASS is one of TSA" in p.stderr
