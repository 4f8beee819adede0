"""The service node's view of the wire (lattice.transport.wire_h, generated from
protocol/lattice/wire.h at build time, and lattice.transport.wire built on it) agrees
with the header as a C compiler sees it.

docs/protocol.md promises this check.  The header is read two ways: a small
parser here (independent of the generator) finds every LAT_* name (#define
and enum entries) and every struct's fields, and a C program built against
the header gives the values, sizeof and offsetof as the compiler sees them.
Every number and layout of the header must be in wire_h with the compiler's
value, and wire_h must hold nothing else, so neither side can drift.
"""
from __future__ import annotations

import re
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lattice.transport import wire, wire_h

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "protocol" / "lattice" / "wire.h"

# wire.py's names for the structs the service node packs, by the C struct
MIRRORS: dict[str, struct.Struct] = {
    "lat_hdr": wire.HDR, "lat_hello": wire.HELLO_MSG, "lat_hello_ack": wire.HELLO_ACK,
    "lat_challenge": wire.CHALLENGE_MSG, "lat_hello_proc": wire.HELLO_PROC,
    "lat_sysret": wire.SYSRET, "lat_ctl_status": wire.CTL_STATUS_MSG, "lat_job": wire.JOB,
    "lat_kill": wire.KILL, "lat_output": wire.OUTPUT, "lat_exit": wire.EXIT, "lat_job_end": wire.JOB_END,
    "lat_job_ext": wire.JOB_EXT, "lat_slot": wire.SLOT, "lat_cpus": wire.CPUS, "lat_fence": wire.FENCE, "lat_abort": wire.ABORT,
    "lat_datapath": wire.DATAPATH, "lat_counters_ext": wire.COUNTERS_EXT,
}

C_TYPES = {"uint8_t": "B", "int8_t": "b", "uint16_t": "H", "int16_t": "h", "uint32_t": "I", "int32_t": "i",
           "uint64_t": "Q", "int64_t": "q"}


@dataclass(frozen=True)
class Field:
    ctype: str
    name: str
    count: str | None       # array length expression, or None


def strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))


@pytest.fixture(scope="module")
def header() -> str:
    return strip_comments(HEADER.read_text())


def header_names(text: str) -> list[str]:
    """Every LAT_* number: #defines and enum entries, in order of appearance
    (string #defines are header_strings)."""
    names = re.findall(r"^\s*#\s*define\s+(LAT_\w+)\s+[^\s\"]", text, flags=re.M)
    for body in re.findall(r"\benum\s+\w+\s*\{(.*?)\}", text, flags=re.S):
        names += re.findall(r"\b(LAT_\w+)\s*(?:=[^,]*)?(?:,|$)", body.strip())
    return names


def header_strings(text: str) -> dict[str, str]:
    """Every LAT_* string #define (the handshake's labels)."""
    return dict(re.findall(r'^\s*#\s*define\s+(LAT_\w+)\s+"([^"\\]*)"\s*$', text, flags=re.M))


def header_structs(text: str) -> dict[str, list[Field]]:
    out: dict[str, list[Field]] = {}
    for name, body in re.findall(r"\bstruct\s+(lat_\w+)\s*\{(.*?)\}\s*;", text, flags=re.S):
        fields: list[Field] = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            m = re.fullmatch(r"(\w+) (.+)", decl)
            assert m, f"cannot parse field {decl!r} of struct {name}"
            for item in m[2].split(","):
                fm = re.fullmatch(r"\s*(\w+)\s*(?:\[\s*([^\]]+?)\s*\])?\s*", item)
                assert fm, f"cannot parse field {item!r} of struct {name}"
                fields.append(Field(m[1], fm[1], fm[2]))
        out[name] = fields
    return out


@dataclass
class Compiled:
    values: dict[str, int]
    sizes: dict[str, int]
    offsets: dict[tuple[str, str], int]


@pytest.fixture(scope="module")
def compiled(header: str, tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    """Values, sizes and offsets as a C compiler computes them from wire.h."""
    names = header_names(header)
    structs = header_structs(header)
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <lattice/wire.h>", "int main(void) {"]
    for n in names:
        lines.append(f'    printf("value %s %lld\\n", "{n}", (long long)({n}));')
    for s, fields in structs.items():
        lines.append(f'    printf("size %s %zu\\n", "{s}", sizeof(struct {s}));')
        for f in fields:
            lines.append(f'    printf("offset %s.%s %zu\\n", "{s}", "{f.name}", offsetof(struct {s}, {f.name}));')
    lines += ["    return 0;", "}"]
    d = tmp_path_factory.mktemp("wire")
    (d / "probe.c").write_text("\n".join(lines) + "\n")
    cc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(ROOT / "protocol"),
                         "-o", str(d / "probe"), str(d / "probe.c")], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    out = subprocess.run([str(d / "probe")], capture_output=True, text=True, check=True).stdout
    c = Compiled({}, {}, {})
    for line in out.splitlines():
        kind, key, num = line.split()
        if kind == "value":
            c.values[key] = int(num)
        elif kind == "size":
            c.sizes[key] = int(num)
        else:
            sname, fname = key.split(".")
            c.offsets[(sname, fname)] = int(num)
    return c


def generated_constants() -> dict[str, int]:
    """wire_h's integer constants, by their header name."""
    return {f"LAT_{k}": v for k, v in vars(wire_h).items()
            if k.isupper() and isinstance(v, int) and not isinstance(v, bool)}


def generated_strings() -> dict[str, bytes]:
    """wire_h's byte-string constants, by their header name."""
    return {f"LAT_{k}": v for k, v in vars(wire_h).items() if k.isupper() and isinstance(v, bytes)}


def format_tokens(fmt: str) -> list[str]:
    """A little-endian struct format as one token per field ('32s' stays one token)."""
    assert fmt.startswith("<"), f"{fmt!r}: wire formats must be little-endian with no padding ('<')"
    tokens: list[str] = []
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", fmt[1:]):
        if code == "s":
            tokens.append(f"{count or 1}s")
        else:
            tokens += [code] * int(count or 1)
    assert "".join(re.findall(r"\d*[a-zA-Z?]", fmt[1:])) == fmt[1:], f"unexpected characters in {fmt!r}"
    return tokens


def c_tokens(fields: list[Field], values: dict[str, int]) -> list[str]:
    """The struct format a C struct's fields call for, one token per field element."""
    tokens: list[str] = []
    for f in fields:
        assert f.ctype in C_TYPES, f"unexpected field type {f.ctype} ({f.name})"
        n = 1 if f.count is None else int(f.count) if f.count.isdigit() else values[f.count]
        if f.ctype == "uint8_t" and f.count is not None:
            tokens.append(f"{n}s")
        else:
            tokens += [C_TYPES[f.ctype]] * n
    return tokens


# --- the parser itself ------------------------------------------------------

def test_parser_finds_the_header(header: str, compiled: Compiled) -> None:
    names = header_names(header)
    # a sample of each kind the header declares, so a parser that finds nothing cannot pass
    for n in ("LAT_MAGIC", "LAT_MAX_PAYLOAD", "LAT_HELLO", "LAT_CTL_JOB_END", "LAT_SYS__END",
              "LAT_ROLE_CONTROL", "LAT_STDERR", "LAT_EXIT_LOST", "LAT_AT_FDCWD"):
        assert n in names
    assert len(names) == len(set(names)), "a name parsed twice"
    structs = header_structs(header)
    assert {"lat_hdr", "lat_job", "lat_stat"} <= set(structs)
    # the parsed field lists agree with the compiler: offsets rise in declaration
    # order and the last field ends exactly at sizeof (the header has no padding)
    for s, fields in structs.items():
        offs = [compiled.offsets[(s, f.name)] for f in fields]
        assert offs == sorted(offs) and offs[0] == 0, s
        assert struct.calcsize("<" + "".join(c_tokens(fields, compiled.values))) == compiled.sizes[s], s


# --- constants --------------------------------------------------------------

def test_every_header_constant_is_generated_with_its_value(compiled: Compiled) -> None:
    mine = generated_constants()
    assert len(compiled.values) >= 150 and "LAT_HF_RDV" in compiled.values, sorted(compiled.values)
    missing = sorted(set(compiled.values) - set(mine))
    assert not missing, f"wire.h names missing from wire_h (make py-wire): {missing}"
    extra = sorted(set(mine) - set(compiled.values))
    assert not extra, f"wire_h has constants the header does not define: {extra}"
    wrong = {n: (v, compiled.values[n]) for n, v in mine.items() if compiled.values[n] != v}
    assert not wrong, f"wire_h value != wire.h value: {wrong}"


def test_generated_module_is_current(tmp_path: Path) -> None:
    """service/lattice/transport/wire_h.py is what the generator makes of today's wire.h
    (a header changed without `make` fails here, not on the wire)."""
    out = tmp_path / "wire_h.py"
    subprocess.run([sys.executable, "-m", "pluggen.pywire", str(HEADER), str(out)], check=True,
                   env={"PYTHONPATH": str(ROOT / "protocol")})
    assert out.read_text() == Path(wire_h.__file__).read_text(), "wire_h.py is stale: run make py-wire"


def test_header_flags_and_transport_maps() -> None:
    """The flags ride in their own header byte; the maps cover only shipped calls."""
    assert wire_h.FIELDS["lat_hdr"] == ("magic", "version", "flags", "type", "len", "seq")
    assert wire.HDR.unpack(wire.header(wire.SYS_BASE + 2, 32, 7, wire.HF_RDV)) == \
        (wire.MAGIC, wire.VERSION, wire.HF_RDV, wire.SYS_BASE + 2, 32, 7)
    assert wire.HF_ALL == wire.HF_RDV | wire.HF_PIPE_FIRST | wire.HF_PIPE_NEXT < 0x100
    ncalls = wire.SYS_END - wire.SYS_BASE
    for m in (wire.MBOX_MAP, wire.BULK_MAP):
        assert 0 < m < 1 << ncalls
    # the calls that may wait never travel in the mailbox (its waits never block)
    waiting = [n for n in wire.SYS_NAMES if n in ("socket", "connect", "bind", "sendmsg", "recvmsg", "shutdown",
                                                  "setsockopt", "getsockopt", "getsockname", "getpeername",
                                                  "poll", "send_rdv", "recv_rdv", "lock", "flock")]
    assert len(waiting) == 15
    for n in waiting:
        assert not wire.MBOX_MAP >> wire.SYS_NAMES.index(n) & 1, f"{n} in the mailbox"
    assert wire.MBOX_MAP >> wire.SYS_NAMES.index("symlinkat") & 1


def test_sys_names_are_the_header_calls_in_wire_order(header: str, compiled: Compiled) -> None:
    calls = sorted((v, n) for n, v in compiled.values.items()
                   if n.startswith("LAT_SYS_") and not n.startswith("LAT_SYS__"))
    base, end = compiled.values["LAT_SYS__BASE"], compiled.values["LAT_SYS__END"]
    assert [v for v, _ in calls] == list(range(base, end)), "call numbers must be contiguous from LAT_SYS__BASE"
    assert tuple(n.removeprefix("LAT_SYS_").lower() for _, n in calls) == wire.SYS_NAMES
    assert (wire.SYS_BASE, wire.SYS_END) == (base, end)
    # LAT_CTL_COUNTERS replies with one u64 per call: SYS_NAMES labels them in order
    assert len(wire.SYS_NAMES) == end - base == len(set(wire.SYS_NAMES))


def test_counter_names_are_the_header_enum(compiled: Compiled) -> None:
    ctr = sorted((v, n) for n, v in compiled.values.items() if n.startswith("LAT_CTR_") and n != "LAT_CTR__END")
    assert tuple(n.removeprefix("LAT_CTR_").lower() for _, n in ctr) == wire.CTR_NAMES
    assert [v for v, _ in ctr] == list(range(len(wire.CTR_NAMES)))


def test_limits_are_consistent() -> None:
    assert wire.MAX_PAYLOAD > wire.MAX_IO + wire.SYSRET.size + wire.HDR.size
    assert wire.HELLO_MSG.unpack(bytes(wire.HELLO_MSG.size))[3:] == (bytes(wire.NONCE_BYTES), bytes(wire.MAC_BYTES))
    assert wire.HELLO_FIELDS.size + wire.NONCE_BYTES + wire.MAC_BYTES == wire.HELLO_MSG.size
    assert wire.ACK_FIELDS.size + wire.MAC_BYTES == wire.HELLO_ACK.size


def test_handshake_labels_equal_the_header(header: str) -> None:
    strings = header_strings(header)
    assert set(strings) == {"LAT_HELLO_LABEL", "LAT_ACK_LABEL", "LAT_SEAL_LABEL"}, strings
    assert {n: v.encode() for n, v in strings.items()} == generated_strings()
    assert len({wire.HELLO_LABEL, wire.ACK_LABEL, wire.SEAL_LABEL}) == 3


MAC_PROBE = r"""
#include <stdio.h>
#include <lattice/hello_mac.h>
static void hex(const uint8_t *p) { for (int i = 0; i < 32; i++) printf("%02x", p[i]); printf("\n"); }
int main(void) {
    uint8_t key[32], sn[32], out[32];
    struct lat_hello h = { .role = 3, .node = 0x10002, .job = 0x123456789ull };
    struct lat_hello_proc hp = { .pid = 4242, .flags = 3 };
    struct lat_hello_ack a = { .err = 0, .max_io = 1u << 20, .pset = 5, .pset_size = 8 };
    struct lat_datapath dp = { 1u << 20, 65536, 3, 1u << 22 };
    for (int i = 0; i < 32; i++) { key[i] = (uint8_t)i; sn[i] = (uint8_t)(100 + i); h.nonce[i] = (uint8_t)(200 - i); }
    int rc = lat_hello_mac(key, sn, &h, NULL, out);
    hex(out);
    rc |= lat_hello_mac(key, sn, &h, &hp, out);
    hex(out);
    rc |= lat_ack_proof(key, sn, h.nonce, &a, NULL, out);
    hex(out);
    rc |= lat_ack_proof(key, sn, h.nonce, &a, &dp, out);
    hex(out);
    return rc ? 1 : 0;
}
"""


def test_handshake_macs_agree_with_hello_mac_h(tmp_path: Path) -> None:
    """wire.py's hello_mac/ack_proof compute what lattice/hello_mac.h (ciod, cnode) computes."""
    (tmp_path / "mac.c").write_text(MAC_PROBE)
    cc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-I", str(ROOT / "protocol"), "-o",
                         str(tmp_path / "mac"), str(tmp_path / "mac.c"), "-lcrypto"], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    got = subprocess.run([str(tmp_path / "mac")], capture_output=True, text=True, check=True).stdout.split()
    key, sn, cn = bytes(range(32)), bytes(range(100, 132)), bytes(200 - i for i in range(32))
    proc = wire.HELLO_PROC.pack(4242, 3)
    fields = wire.ACK_FIELDS.pack(0, 1 << 20, 5, 8)
    dp = wire.DATAPATH.pack(1 << 20, 65536, 3, 1 << 22)
    assert got == [wire.hello_mac(key, sn, cn, 3, 0x10002, 0x123456789).hex(),
                   wire.hello_mac(key, sn, cn, 3, 0x10002, 0x123456789, proc).hex(),
                   wire.ack_proof(key, sn, cn, fields).hex(),
                   wire.ack_proof(key, sn, cn, fields, dp).hex()]
    assert len(set(got)) == 4


# --- struct layouts ----------------------------------------------------------

def test_struct_lists_are_complete(header: str) -> None:
    structs = set(header_structs(header))
    assert structs == set(wire_h.STRUCTS) == set(wire_h.FIELDS) == set(wire.SIZES)
    assert set(MIRRORS) <= structs
    for cname, py in MIRRORS.items():
        assert py is wire_h.STRUCTS[cname], f"wire.py's name for {cname} is not the generated layout"


@pytest.mark.parametrize("cname", sorted(header_structs(strip_comments(HEADER.read_text()))))
def test_struct_layout_matches(cname: str, header: str, compiled: Compiled) -> None:
    py = wire_h.STRUCTS[cname]
    fields = header_structs(header)[cname]
    assert py.size == compiled.sizes[cname] == wire.SIZES[cname]
    assert wire_h.FIELDS[cname] == tuple(f.name for f in fields)
    # field by field: the same types in the same order...
    assert format_tokens(py.format) == c_tokens(fields, compiled.values), \
        f"{cname}: wire_h {py.format!r} vs wire.h fields {[(f.ctype, f.name, f.count) for f in fields]}"
    # ... at the offsets the compiler chose
    before: list[str] = []
    for f in fields:
        assert struct.calcsize("<" + "".join(before)) == compiled.offsets[(cname, f.name)], f"{cname}.{f.name}"
        before += c_tokens([f], compiled.values)


def test_job_payload_follows_the_documented_layout() -> None:
    """struct lat_job, i32 rank[pset_size], u32 groups[ngroups], then NUL-terminated
    exe, cwd, argv..., env... (docs/protocol.md section 4)."""
    ranks, groups = [4, -1, 5], [10, 20]
    p = wire.job_payload(7, 1000, 100, groups, ranks, 12, "/bin/x", "/w", ["x", "-v"], ["A=1"])
    head = wire.JOB.unpack_from(p)
    assert head == (7, 1000, 100, len(groups), 2, 1, 12, len(ranks), 0)
    off = wire.JOB.size
    assert list(struct.unpack_from(f"<{len(ranks)}i", p, off)) == ranks
    off += 4 * len(ranks)
    assert list(struct.unpack_from(f"<{len(groups)}I", p, off)) == groups
    off += 4 * len(groups)
    assert p[off:].split(b"\0") == [b"/bin/x", b"/w", b"x", b"-v", b"A=1", b""]
