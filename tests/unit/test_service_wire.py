"""service/lattice/wire.py agrees with protocol/lattice/wire.h.

docs/protocol.md promises this check.  The header is read two ways: a small
parser finds every LAT_* name (#define and enum entries) and every struct's
fields, and a C program built against the header gives the values, sizeof
and offsetof as the compiler sees them.  Every number wire.py mirrors must
equal the header's, and every number of the header that the service node
speaks must be mirrored, so neither side can change without the other.
"""
from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from lattice import wire

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "protocol" / "lattice" / "wire.h"

# Python name in wire.py -> name in wire.h, where the rule "LAT_" + name does not hold
RENAMED = {"SYS_BASE": "LAT_SYS__BASE", "SYS_END": "LAT_SYS__END"}

# Header names the service node has no use for (node and function-shipping
# details): listed so that a new header name needs a decision, not an oversight.
NOT_MIRRORED = {
    "LAT_MAX_PATH", "LAT_MAX_FDS", "LAT_MAX_ARGS", "LAT_MAX_IMAGE", "LAT_AT_FDCWD",
    "LAT_ROLE_NODE", "LAT_ROLE_PROC", "LAT_ROLE_PMI",
    "LAT_NODE_JOB", "LAT_NODE_IMAGE", "LAT_NODE_START", "LAT_NODE_KILL", "LAT_NODE_SHUTDOWN",
    "LAT_NODE_OUTPUT", "LAT_NODE_EXIT", "LAT_NODE_PMI", "LAT_NODE_PMI_REPLY",
    "LAT_RDV", "LAT_RDV_MAXSEG", "LAT_DP_SHARE", "LAT_PIPE_FIRST", "LAT_PIPE_NEXT", "LAT_PIPE_DEPTH",
    "LAT_MAX_SOCKADDR", "LAT_MAX_SOCKOPT", "LAT_ERR_WAIT",
    "LAT_MBOX_SHARE", "LAT_MBOX_RING", "LAT_MBOX_SIZE", "LAT_MBOX_REQ_SLOT", "LAT_MBOX_REP_SLOT",
    "LAT_MBOX_REQ_MAX", "LAT_MBOX_REP_MAX",
}
STRUCTS_NOT_MIRRORED = {"lat_sysreq", "lat_node_job", "lat_timespec", "lat_stat", "lat_statfs",
                        "lat_node_app", "lat_pmi", "lat_rdv_seg",
                        "lat_sockname", "lat_pollfd", "lat_mbox"}

# wire.py's struct.Struct objects, by the C struct they mirror
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


def mirrored_constants() -> dict[str, int]:
    """wire.py's integer constants, by their header name."""
    return {RENAMED.get(k, f"LAT_{k}"): v for k, v in vars(wire).items()
            if k.isupper() and isinstance(v, int) and not isinstance(v, bool)}


def mirrored_strings() -> dict[str, bytes]:
    """wire.py's byte-string constants, by their header name."""
    return {f"LAT_{k}": v for k, v in vars(wire).items() if k.isupper() and isinstance(v, bytes)}


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

def test_every_mirrored_constant_equals_the_header(compiled: Compiled) -> None:
    mine = mirrored_constants()
    assert len(mine) >= 25, sorted(mine)        # MAGIC ... EXIT_LOST
    missing = sorted(set(mine) - set(compiled.values))
    assert not missing, f"wire.py has constants the header does not define: {missing}"
    wrong = {n: (v, compiled.values[n]) for n, v in mine.items() if compiled.values[n] != v}
    assert not wrong, f"wire.py value != wire.h value: {wrong}"


def test_every_header_constant_is_mirrored_or_deliberately_not(compiled: Compiled) -> None:
    mine = set(mirrored_constants())
    sys_calls = {n for n in compiled.values if n.startswith("LAT_SYS_") and not n.startswith("LAT_SYS__")}
    sys_calls |= {n for n in compiled.values if n.startswith("LAT_CTR_")}    # mirrored as CTR_NAMES
    unaccounted = set(compiled.values) - mine - sys_calls - NOT_MIRRORED
    assert not unaccounted, f"wire.h names not in wire.py (mirror them, or add to NOT_MIRRORED): {sorted(unaccounted)}"
    stale = NOT_MIRRORED - set(compiled.values)
    assert not stale, f"NOT_MIRRORED lists names wire.h no longer has: {sorted(stale)}"


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
    assert set(strings) == {"LAT_HELLO_LABEL", "LAT_ACK_LABEL"}, strings
    assert {n: v.encode() for n, v in strings.items()} == mirrored_strings()
    assert wire.HELLO_LABEL != wire.ACK_LABEL


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
    assert set(MIRRORS) == set(wire.SIZES), "wire.SIZES and this test's MIRRORS name different structs"
    unaccounted = structs - set(MIRRORS) - STRUCTS_NOT_MIRRORED
    assert not unaccounted, f"wire.h structs neither mirrored nor listed as not needed: {sorted(unaccounted)}"
    assert set(MIRRORS) <= structs and STRUCTS_NOT_MIRRORED <= structs


@pytest.mark.parametrize("cname", sorted(MIRRORS))
def test_struct_layout_matches(cname: str, header: str, compiled: Compiled) -> None:
    py = MIRRORS[cname]
    fields = header_structs(header)[cname]
    assert py.size == compiled.sizes[cname] == wire.SIZES[cname]
    # field by field: the same types in the same order...
    assert format_tokens(py.format) == c_tokens(fields, compiled.values), \
        f"{cname}: wire.py {py.format!r} vs wire.h fields {[(f.ctype, f.name, f.count) for f in fields]}"
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
