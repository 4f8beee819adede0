"""The plug-in generator (protocol/pluggen) end to end.

tests/unit/pluggen/sample.h uses every annotation; the generated stubs and
dispatcher are built with gcc, the dispatcher with a small implementation
(sample_impl.c) becomes a plug-in that a real ciod of a booted 1x1x2 block
loads, and sample_prog.c calls every function from two real compute
processes, under cnk and in Linux mode, checking every value exactly.
Malformed headers are refused with file and line.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, make_machine

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "tests" / "unit" / "pluggen"
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-g", "-Wall", "-Wextra", "-Werror"]


def pluggen(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "protocol"))
    return subprocess.run([sys.executable, "-m", "pluggen", *args], env=env, capture_output=True,
                          text=True, cwd=ROOT)


def build_sample(out: Path) -> tuple[Path, Path]:
    p = pluggen(str(SRC / "sample.h"), "--id", "7", "--out", str(out))
    assert p.returncode == 0, p.stderr
    so, prog = out / "libsample_ciod.so", out / "sample_prog"
    subprocess.run(["gcc", *CFLAGS, "-fPIC", "-shared", "-I", "ionode/include", "-I", str(SRC),
                    "-o", str(so), str(out / "sample_ciod.c"), str(SRC / "sample_impl.c")],
                   check=True, cwd=ROOT)
    subprocess.run(["gcc", *CFLAGS, "-I", "compute/include", "-I", str(SRC), "-o", str(prog),
                    str(SRC / "sample_prog.c"), str(out / "sample_stubs.c"), "-lm"],
                   check=True, cwd=ROOT)
    return so, prog


@pytest.fixture(scope="module")
def plugged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Machine, Path]]:
    for p in ("bin/ciod", "bin/cnode", "bin/cnk", "lib/libcnclient.so"):
        assert (ROOT / "build" / p).exists(), f"build/{p} missing: run make"
    m = make_machine(tmp_path_factory.mktemp("plug"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", "256M")
    so, prog = build_sample(m.work)
    with open(m.home / "machine.toml", "a") as f:
        f.write(f'\n[ionode]\nplugins = ["{so}:256K;ok"]\n')
    m.run("block", "create", "P", "--shape", "1x1x2")
    m.run("boot", "P")
    yield m, prog
    m.run("free", "P", check=False)


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_round_trip(plugged: tuple[Machine, Path], kernel: str) -> None:
    m, prog = plugged
    # Linux mode's plug-in calls are the preload client's (lattice_zoid_call): --no-sandbox
    mode = ["--no-sandbox"] if kernel == "linux" else []
    p = m.run("run", "--block", "P", "-n", "2", "--kernel", kernel, *mode, "--hugepages", "keep",
              "--cwd", "/tmp", str(prog), check=False, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for r in range(2):
        assert f"rank {r}: all ok" in out, out
        for name in ("obj", "ptr", "arr inout", "zerocopy out data", "zerocopy in", "str nullok",
                     "arr2d inout", "nullok NULL", "caller", "userbuf data", "limit", "bad plug-in",
                     "size mismatch", "huge count", "unterminated str", "NULL without nullok"):
            assert f"rank {r}: ok {name}\n" in out, (name, out)


def test_bad_calls_are_ras_events(plugged: tuple[Machine, Path]) -> None:
    m, _ = plugged
    ras = m.run("ras").stdout
    assert "plug-in sample (id 7" in ras, ras
    assert "no plug-in with id 4242" in ras and "has no function 99" in ras, ras
    assert "over its limit" in ras, ras


def test_cnk_classes_the_call_shipped(plugged: tuple[Machine, Path]) -> None:
    m, prog = plugged
    p = m.run("run", "--block", "P", "-n", "1", "--kernel", "cnk", "--hugepages", "keep", "--trace",
              "--cwd", "/tmp", str(prog), check=False, timeout=60)
    assert re.search(r"lattice_zoid\(7, 0, .*shipped", p.stdout + p.stderr), p.stdout + p.stderr


BAD = {
    "int f(int a);": "a: no annotation",
    "int f(int a /* sideways:obj */);": "direction 'sideways'",
    "int f(int a /* in:blob */);": "kind 'blob'",
    "int f(int a /* out:obj */);": "obj is passed by value",
    "int f(int *v /* in:arr */, int n /* in:obj */);": "arr needs size=",
    "int f(int *v /* in:arr:size=+5 */, int n /* in:obj */);": "points outside",
    "int f(int *v /* in:arr:size=+1 */, double n /* in:obj */);": "must be an integer",
    "int f(int *v /* in:arr:size=x */, int n /* in:obj */);": "signed, non-zero",
    "int f(int a /* in:obj:zerocopy */);": "zerocopy applies to arr only",
    "int f(int *v /* in:arr:size=+1:zerocopy:userbuf */, int n /* in:obj */);": "userbuf needs out",
    "int f(char *s /* out:str */);": "str can only be 'in'",
    "int f(int **m /* in:arr2d:size=+1 */, int r /* in:obj */);": "size2=",
    "int f(int a /* in:obj:bogus */);": "unknown annotation 'bogus'",
    "int *f(int a /* in:obj */);": "returns a pointer",
    "int f(int a /* in:obj */, ...);": "variable arguments",
    "int f(void *p /* in:ptr */);": "complete type",
}


@pytest.mark.parametrize("decl", list(BAD))
def test_bad_annotation(tmp_path: Path, decl: str) -> None:
    h = tmp_path / "bad.h"
    h.write_text("#include <stdint.h>\n/* a plug-in */\n\n" + decl + "\n")
    p = pluggen(str(h), "--id", "1", "--out", str(tmp_path))
    assert p.returncode == 1
    assert p.stderr.startswith(f"{h}:4: "), p.stderr
    assert BAD[decl] in p.stderr, p.stderr
    assert not (tmp_path / "bad_stubs.c").exists()


def test_error_line_of_a_later_argument(tmp_path: Path) -> None:
    h = tmp_path / "multi.h"
    h.write_text("int ok(int a /* in:obj */);\n\nint g(int a /* in:obj */,\n"
                 "      int *b /* inout:arr:size=-1 */,\n      int c /* in:obj:nullok */);\n")
    p = pluggen(str(h), "--id", "1", "--out", str(tmp_path))
    assert p.returncode == 1 and p.stderr.startswith(f"{h}:5: g: c: nullok"), p.stderr


def test_generator_is_mypy_strict_clean() -> None:
    mypy = ROOT / ".venv" / "bin" / "mypy"
    if not mypy.exists():
        pytest.skip("mypy not installed in .venv")
    p = subprocess.run([str(mypy), "--strict", "pluggen"], cwd=ROOT / "protocol", capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


def test_machine_toml_names_plugins() -> None:
    from lattice.nodes import boot
    from lattice.state import machine
    from lattice.errors import LatticeError

    m = machine.Machine(plugins=("build/plugins/liblofar_ciod.so:64K;port=9000", "/abs/x.so"))
    data = m.to_toml()
    assert data["ionode"] == {"plugins": list(m.plugins)}
    assert machine.Machine.from_toml(data, "t") == m
    assert "ionode" not in machine.Machine().to_toml()
    assert boot.plugin_options(m) == [
        "--plugin", str(machine.prefix().parent / "build/plugins/liblofar_ciod.so:64K;port=9000"),
        "--plugin", "/abs/x.so"]
    with pytest.raises(LatticeError, match="ionode.plugins"):
        machine.Machine.from_toml({**data, "ionode": {"plugins": "x.so"}}, "t")
