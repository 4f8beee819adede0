"""lattice.jobs.collectives: which MPI programs get the torus collectives
library preloaded, where in LD_PRELOAD it goes, and the errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from lattice.errors import LatticeError
from lattice.jobs import collectives
from lattice.jobs.mapping import App

BUILD = Path(__file__).resolve().parents[2] / "build"
MPICH = str(BUILD / "examples" / "mpi" / "hello")
OMPI = str(BUILD / "examples" / "openmpi" / "hello")
PLAIN = "/bin/true"
LIB = str(BUILD / "lib" / "libtorus.so")


def preload(given: str | None, default: str, exes: list[str], user: dict[str, str] | None = None,
            exported: list[str] | None = None) -> tuple[str | None, dict[str, str], dict[str, str], list[str]]:
    user_env, lattice_env, exp = dict(user or {}), {}, list(exported or [])
    got = collectives.add_preload(given, default, [App(e, [], 1) for e in exes], user_env, lattice_env, exp)
    return got, user_env, lattice_env, exp


@pytest.fixture(autouse=True)
def built() -> None:
    for p in (MPICH, LIB):
        assert Path(p).exists(), f"{p} missing: run make"


def test_torus_preloads_the_library_into_mpich_programs_only() -> None:
    got, _, env, _ = preload("torus", "mpi", [MPICH])
    assert got == LIB and env == {"LD_PRELOAD": LIB}
    assert preload("torus", "mpi", [PLAIN])[0] is None          # not an MPI program: nothing to interpose
    assert preload(None, "mpi", [MPICH])[0] is None              # the default is MPICH's own
    assert preload(None, "torus", [MPICH])[0] == LIB             # the machine's default
    assert preload("mpi", "torus", [MPICH])[0] is None           # the option wins over it


def test_the_library_goes_first_before_the_jobs_own_preload() -> None:
    _, user, env, _ = preload("torus", "mpi", [MPICH], user={"LD_PRELOAD": "/x/mine.so"})
    assert user == {"LD_PRELOAD": f"{LIB}:/x/mine.so"} and env == {}
    _, _, env, exp = preload("torus", "mpi", [MPICH], exported=["A=1", "LD_PRELOAD=/y/theirs.so"])
    assert env == {"LD_PRELOAD": f"{LIB}:/y/theirs.so"} and exp == ["A=1"]


def test_open_mpi_with_torus_is_refused_and_left_alone_by_the_default() -> None:
    if not Path(OMPI).exists():
        pytest.skip("Open MPI examples not built")
    with pytest.raises(LatticeError, match="works with MPICH programs only"):
        preload("torus", "mpi", [OMPI])
    assert preload(None, "torus", [OMPI, MPICH])[0] is None


def test_missing_library_and_bad_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LATTICE_PREFIX", str(tmp_path))
    with pytest.raises(LatticeError, match="libtorus.so is missing"):
        preload("torus", "mpi", [MPICH])
    with pytest.raises(LatticeError, match="bad collectives 'fast'"):
        collectives.choice("fast", "mpi")
