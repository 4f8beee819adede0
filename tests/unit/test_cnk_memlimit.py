"""Every way a program asks for memory, under build/bin/cnk started directly
(the fake ciod of test_cnk_core), answers as Linux does under RLIMIT_AS of
the node's memory: examples/cnk/memlimit asks each way for twice the node
(and sizes that overflow) and prints one line a case, natively under
`prlimit --as` and under cnk the same (issue 28; tests/e2e/test_t0512
runs it on a booted block)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from test_cnk_core import ROOT, run

MEMLIMIT = ROOT / "build" / "examples" / "cnk" / "memlimit"
NODE_MIB = 256
CASE = re.compile(r"^memlimit: (\S+): (.*)$", re.M)


def cases(out: str) -> dict[str, str]:
    return {k: v for k, v in CASE.findall(out) if k != "done"}


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    assert MEMLIMIT.exists(), f"{MEMLIMIT} missing: run make"
    p = subprocess.run(["prlimit", f"--as={NODE_MIB << 20}", str(MEMLIMIT), str(NODE_MIB)],
                       cwd=tmp_path_factory.mktemp("native"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return cases(p.stdout)


@pytest.mark.parametrize("pages", ["4K", "2M"])
def test_memory_requests_answer_as_linux_under_a_limit(native: dict[str, str], tmp_path: Path,
                                                       pages: str) -> None:
    """4K: transparent huge pages; 2M: hugetlb pages taken at first touch
    (MAP_NORESERVE, as `lattice run` maps them), so nothing is reserved."""
    r = run(MEMLIMIT, str(NODE_MIB), memory=f"{NODE_MIB}M", cwd=tmp_path,
            env={"LATTICE_BIGMEM_PAGES": pages, "LATTICE_BIGMEM_RESERVE": "0"})
    got = cases(r.out)
    assert r.rc == 0, r.out + r.cnk_err
    assert len(native) >= 31
    assert got == native, "\n".join(f"{k}: cnk {got.get(k)!r} native {native.get(k)!r}"
                                    for k in sorted(set(got) | set(native)) if got.get(k) != native.get(k))
