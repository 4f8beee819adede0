"""lattice-pluggen --wire: the function shipping generated from
protocol/lattice/fwd_posix.h (docs/plugins.md "Wire mode").

Every call of the header has a decoder entry in ciod and a compute-side
stub, the numbers agree with wire.h's committed block and with wire.py,
the generated files in build/ are the generator's current output, and bad
annotations are refused with file and line.  What the generated decoder
refuses on the wire is tested against a real ciod in test_ciod.py
(test_generated_decoder_*); every e2e test runs the stubs under cnk and in
Linux mode.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lattice.transport import wire

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "protocol" / "lattice" / "fwd_posix.h"
WIRE_H = ROOT / "protocol" / "lattice" / "wire.h"
sys.path.insert(0, str(ROOT / "protocol"))

from pluggen import emit_wire  # noqa: E402
from pluggen.parse import parse_header  # noqa: E402
from pluggen.wiremodel import Call, wire_calls  # noqa: E402


def pluggen(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "protocol"))
    return subprocess.run([sys.executable, "-m", "pluggen", *args], env=env, capture_output=True,
                          text=True, cwd=cwd)


@pytest.fixture(scope="module")
def calls() -> list[Call]:
    return wire_calls(parse_header(HEADER.read_text(), str(HEADER), "fwd_posix", 0, wire=True))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    p = pluggen("--wire", str(HEADER), "--out", str(out))
    assert p.returncode == 0, p.stderr
    return out


def test_every_call_has_a_decoder_entry_an_implementation_and_a_stub(calls: list[Call], generated: Path) -> None:
    dec = (generated / "fwd_posix_ciod.c").read_text()
    srv = (generated / "fwd_posix_srv.h").read_text()
    stubs = (generated / "fwd_posix_stubs.c").read_text()
    assert len(calls) == 51
    for c in calls:
        assert f"[LAT_SYS_{c.name} - LAT_SYS__BASE] = fwd_dec_{c.fn}," in dec, c.name
        assert re.search(rf"^int srv_{c.fn}\(struct proc \*p, struct call \*k", srv, re.M), c.name
        assert re.search(rf"^FWD_API int64_t fwd_{c.fn}\(", stubs, re.M), c.name
        assert f"FWD_TRANSPORT(LAT_SYS_{c.name}," in stubs, c.name
    # the zero-copy data calls also go to a rendezvous implementation
    assert sorted(c.fn for c in calls if c.zerocopy is not None) == ["pread", "pwrite", "read", "write"]
    # the calls with a vec array also have a vectored stub, declared in the generated header
    vec = sorted(c.fn for c in calls if c.vec is not None)
    assert vec == ["pread", "pwrite", "read", "recvmsg", "sendmsg", "write"]
    stubs_h = (generated / "fwd_posix_stubs.h").read_text()
    for fn in vec:
        assert re.search(rf"^FWD_API int64_t fwd_{fn}_v\(.*const struct iovec \*buf_iov, int buf_cnt", stubs, re.M), fn
        assert re.search(rf"^int64_t fwd_{fn}_v\(", stubs_h, re.M), fn
    # WRITE's length is the payload's (a=none): the vectored stub has none
    assert "int64_t fwd_write_v(int fd, const struct iovec *buf_iov, int buf_cnt);" in stubs_h
    # the built programs hold them: ciod's implementations, cnk's and libcnclient's stubs
    syms = subprocess.run(["nm", str(ROOT / "build/bin/ciod")], capture_output=True, text=True).stdout
    assert all(f" srv_{c.fn}\n" in syms for c in calls)
    for prog in ("build/bin/cnk", "build/lib/libcnclient.so"):
        syms = subprocess.run(["nm", str(ROOT / prog)], capture_output=True, text=True).stdout
        missing = [c.fn for c in calls if f" fwd_{c.fn}\n" not in syms]
        missing += [f"{c.fn}_v" for c in calls if c.vec is not None and f" fwd_{c.fn}_v\n" not in syms]
        assert not missing, (prog, missing)
    dyn = subprocess.run(["nm", "-D", "--defined-only", str(ROOT / "build/lib/libcnclient.so")],
                         capture_output=True, text=True).stdout
    assert " fwd_" not in dyn, "the stubs are hidden, not exported to programs"


def test_numbers_agree_with_wire_h_and_wire_py(calls: list[Call]) -> None:
    text = re.sub(r"/\*.*?\*/", " ", WIRE_H.read_text(), flags=re.S)
    in_wire_h = {n: int(v, 0) for n, v in re.findall(r"\b(LAT_SYS_\w+)\s*=\s*(0x[0-9A-Fa-f]+)", text)}
    for c in calls:
        assert in_wire_h[f"LAT_SYS_{c.name}"] == c.msg
    assert in_wire_h["LAT_SYS__BASE"] == calls[0].msg == wire.SYS_BASE
    assert in_wire_h["LAT_SYS__END"] == calls[-1].msg + 1 == wire.SYS_END
    assert tuple(c.fn for c in calls) == wire.SYS_NAMES


def test_committed_and_built_outputs_are_current(calls: list[Call], generated: Path) -> None:
    text = WIRE_H.read_text()
    assert emit_wire.update_wire_h(text, calls) == text, "wire.h is stale: run `make wire-h`"
    for name in ("fwd_posix_ciod.c", "fwd_posix_srv.h", "fwd_posix_stubs.c", "fwd_posix_stubs.h"):
        built = ROOT / "build" / "gen" / name
        assert built.read_text() == (generated / name).read_text(), f"build/gen/{name} is stale: run make"


def test_wire_h_rewrite_touches_only_the_block(calls: list[Call], tmp_path: Path) -> None:
    stale = re.sub(r"(LAT_SYS_CLOSE\s*=\s*)0x0301", r"\g<1>0x0399", WIRE_H.read_text())
    stale = re.sub(r"(#define LAT_MBOX_MAP )0x\w+", r"\g<1>0x1ull", stale)
    f = tmp_path / "wire.h"
    f.write_text(stale + "/* after */\n")
    p = pluggen("--wire", str(HEADER), "--out", str(tmp_path / "o"), "--wire-h", str(f))
    assert p.returncode == 0, p.stderr
    assert f.read_text() == WIRE_H.read_text() + "/* after */\n"
    f.write_text("enum x { A };\n")
    p = pluggen("--wire", str(HEADER), "--out", str(tmp_path / "o"), "--wire-h", str(f))
    assert p.returncode == 1 and "no generated LAT_SYS block" in p.stderr
    f.write_text(re.sub(r"/\* BEGIN generated transport.*?END generated \*/\n", "", WIRE_H.read_text(), flags=re.S))
    p = pluggen("--wire", str(HEADER), "--out", str(tmp_path / "o"), "--wire-h", str(f))
    assert p.returncode == 1 and "no generated transport block" in p.stderr


TRANSPORT_PROBE = r"""
#include <stdio.h>
#include <lattice/wire.h>
int main(void) {
    for (unsigned t = 0; t < 0x10000; t++)
        for (unsigned f = 0; f < 0x100; f++)
            if (lat_mbox_ok(t, f) || (f && lat_hdr_flags_ok(t, f)))
                printf("%u %u %d %d\n", t, f, lat_mbox_ok(t, f), lat_hdr_flags_ok(t, f));
    return 0;
}
"""


def test_transport_rules_come_from_the_annotations(calls: list[Call], tmp_path: Path) -> None:
    """lat_mbox_ok and lat_hdr_flags_ok (what cnk, libcnclient and ciod ask)
    allow exactly what fwd_posix.h declares: the mailbox for plain requests
    of calls marked mbox, one LAT_HF_* for calls with a zerocopy array."""
    (tmp_path / "t.c").write_text(TRANSPORT_PROBE)
    cc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-O1", "-I", str(ROOT / "protocol"), "-o",
                         str(tmp_path / "t"), str(tmp_path / "t.c")], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True).stdout
    got = {(int(t), int(f)): (int(m), int(ok)) for t, f, m, ok in (line.split() for line in out.splitlines())}
    want = {(c.msg, 0): (1, 1) for c in calls if c.mbox}
    want |= {(c.msg, f): (0, 1) for c in calls if c.zerocopy is not None
             for f in (wire.HF_RDV, wire.HF_PIPE_FIRST, wire.HF_PIPE_NEXT)}
    assert got == want
    mbox = {c.fn for c in calls if c.mbox}
    assert "openat" in mbox and "pwrite" in mbox and not mbox & {"socket", "recvmsg", "poll", "send_rdv"}


GOOD = """\
#include <stdint.h>
/* msg=0x0300 */
int64_t fwd_open(int dirfd /* in:obj */, const char *path /* in:str */);
"""

# (the header's body after GOOD's first prototype, the line of the error, what the message says)
BAD = [
    ("int64_t fwd_x(int fd /* in:obj:fd */);\n", 4, "no message number"),
    ("/* msg=0x0302 */\nint64_t fwd_x(int fd /* in:obj */);\n", 5, "must follow fwd_open's 0x0300"),
    ("/* msg=zz */\nint64_t fwd_x(int fd /* in:obj */);\n", 4, "is not a number"),
    ("/* msg=0x0301 */\nint64_t x(int fd /* in:obj */);\n", 5, "fwd_NAME"),
    ("/* msg=0x0301 */\nint fwd_x(int fd /* in:obj */);\n", 5, "returns int64_t"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int64_t fd /* in:obj:fd */);\n", 5, "fd needs an int"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int fd /* in:obj:fd=3 */);\n", 5, "fd takes no value"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int fd /* in:obj:a=7 */);\n", 5, "a= is a slot 0..3"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int a /* in:obj */, int b /* in:obj:a=0 */);\n", 5, "slot a0 is taken"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int a /* in:obj */, int b /* in:obj */, int c /* in:obj */,\n"
     "    int d /* in:obj */, int e /* in:obj */);\n", 6, "more than 4 arguments"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int n /* in:obj:a=none */);\n", 5, "a=none is for the length of an in array"),
    ("/* msg=0x0301 */\nint64_t fwd_x(const void *b /* in:arr:size=+1 */, uint64_t n /* in:obj:a=none */,\n"
     "    const char *p /* in:str */);\n", 5, "must be the last data"),
    ("/* msg=0x0301 */\nint64_t fwd_x(double d /* in:obj */);\n", 5, "an argument in a0..a3 is one of"),
    ("/* msg=0x0301 */\nint64_t fwd_x(const char *p /* in:str:max=3 */);\n", 5, "belong to in:obj integers"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int *p /* in:ptr */);\n", 5, "ptr is out only"),
    ("/* msg=0x0301 */\nint64_t fwd_x(char **m /* in:arr2d:size=+1:size2=+2 */, int r /* in:obj */,\n"
     "    int c /* in:obj */);\n", 5, "arr2d does not travel"),
    ("/* msg=0x0301 */\nint64_t fwd_x(const char *p /* in:str:nullok */);\n", 5, "no NULL pointers"),
    ("/* msg=0x0301 */\nint64_t fwd_x(void *b /* out:arr:len=4 */, int *o /* out:ptr */);\n", 5,
     "must be the last reply data"),
    ("/* msg=0x0301:fast */\nint64_t fwd_x(int fd /* in:obj */);\n", 4, "msg=...:fast: unknown option"),
    ("/* msg=0x0301 */\nint64_t fwd_x(void *b /* out:arr:len=4:size=+1 */, int n /* in:obj */);\n", 5,
     "len= is the fixed length"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int fd /* in:obj:bogus */);\n", 5, "unknown annotation 'bogus'"),
    ("/* msg=0x0301 */\nint64_t fwd_x(void *b /* out:arr */);\n", 5, "(or len=N)"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int *b /* out:arr:size=+1:vec */, int n /* in:obj */);\n", 5,
     "vec is for a byte array"),
    ("/* msg=0x0301 */\nint64_t fwd_x(int n /* in:obj:vec */);\n", 5, "vec is for a byte array"),
    ("/* msg=0x0301 */\nint64_t fwd_x(void *a /* out:arr:size=+2:vec */, void *b /* out:arr:size=+1:vec */,\n"
     "    int n /* in:obj */);\n", 5, "one vec array per call"),
]


@pytest.mark.parametrize("body,line,msg", BAD, ids=[m for _, _, m in BAD])
def test_bad_wire_annotations_give_file_and_line(tmp_path: Path, body: str, line: int, msg: str) -> None:
    h = tmp_path / "bad.h"
    h.write_text(GOOD + body)
    p = pluggen("--wire", str(h), "--out", str(tmp_path / "out"))
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stderr.startswith(f"{h}:{line}: "), p.stderr
    assert msg in p.stderr, p.stderr
    assert not (tmp_path / "out").exists(), "nothing is written for a bad header"


def test_the_good_header_generates_code_that_compiles_freestanding(tmp_path: Path) -> None:
    """The stubs of a small header build with cnk's flags (no libc) against a transport."""
    h = tmp_path / "lattice" / "small.h"
    h.parent.mkdir()
    h.write_text(GOOD.replace("#include <stdint.h>", "#include <stdint.h>\n#include <lattice/wire.h>"))
    p = pluggen("--wire", str(h), "--name", "small", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    side = tmp_path / "side.c"
    side.write_text('#include <stddef.h>\n#include <stdint.h>\n#include <linux/errno.h>\n#include <linux/uio.h>\n'
                    'size_t strlen(const char *s);\n'
                    'long t(uint16_t, const int64_t *, const struct iovec *, int, const struct iovec *, int, size_t *);\n'
                    '#define LAT_SYS_OPEN 0x0300\n'
                    '#define FWD_API\n#define FWD_FAIL(e) (-(int64_t)(e))\n#define FWD_TRANSPORT t\n'
                    '#include "small_stubs.c"\n')
    cc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-ffreestanding", "-fno-builtin",
                         "-I", str(ROOT / "protocol"), "-I", str(tmp_path), "-c", "-o", str(tmp_path / "s.o"),
                         str(side)], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
