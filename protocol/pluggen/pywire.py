"""The service node's view of lattice/wire.h, generated from it at build time
(`make py-wire`, docs/protocol.md section 1):

    python3 -m pluggen.pywire protocol/lattice/wire.h service/lattice/transport/wire_h.py

Every LAT_* number (#define or enumerator) becomes a constant without its
LAT_ prefix, every LAT_* string #define a bytes constant, every struct lat_*
a little-endian struct.Struct in STRUCTS (with its field names in FIELDS),
and every enum's names, in order, a tuple in ENUMS.  The header promises no
implicit padding; a struct whose fields do not sit at their natural
alignment is an error here.  tests/unit/test_service_wire.py compares the
result with what a C compiler makes of the header.
"""
from __future__ import annotations

import ast
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

# C field type -> (struct code, size)
C_TYPES = {"uint8_t": ("B", 1), "int8_t": ("b", 1), "uint16_t": ("H", 2), "int16_t": ("h", 2),
           "uint32_t": ("I", 4), "int32_t": ("i", 4), "uint64_t": ("Q", 8), "int64_t": ("q", 8)}


class WireHError(Exception):
    pass


@dataclass
class Struct:
    name: str
    fields: list[tuple[str, str, str | None]]   # (C type, name, count expression or None)
    fmt: str = ""


@dataclass
class Header:
    values: dict[str, int]          # every LAT_* number, in order of appearance
    strings: dict[str, bytes]
    structs: dict[str, Struct]
    enums: dict[str, list[str]]


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))


def _eval(expr: str, values: dict[str, int]) -> int:
    """A C integer constant expression of numbers, LAT_* names and + - * << >> | & ~."""
    py = re.sub(r"\b(0[xX][0-9A-Fa-f]+|\d+)[uUlL]+\b", r"\1", expr.strip())

    def ev(n: ast.expr) -> int:
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and n.id in values:
            return values[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.Invert, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else ~v if isinstance(n.op, ast.Invert) else v
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.BitOr: a | b, ast.BitAnd: a & b}
            if type(n.op) in ops:
                return ops[type(n.op)]
            if isinstance(n.op, ast.LShift):
                return a << b
            if isinstance(n.op, ast.RShift):
                return a >> b
        raise WireHError(f"cannot evaluate {expr.strip()!r}")
    try:
        return ev(ast.parse(py, mode="eval").body)
    except SyntaxError:
        raise WireHError(f"cannot evaluate {expr.strip()!r}") from None


def _layout(s: Struct, values: dict[str, int]) -> str:
    fmt, off = "<", 0
    for ctype, name, count in s.fields:
        if ctype not in C_TYPES:
            raise WireHError(f"struct {s.name}.{name}: type {ctype} has no fixed width")
        code, size = C_TYPES[ctype]
        if off % size:
            raise WireHError(f"struct {s.name}.{name}: at offset {off}, not aligned (implicit padding)")
        n = 1 if count is None else _eval(count, values)
        fmt += f"{n}s" if ctype == "uint8_t" and count is not None else code if n == 1 else f"{n}{code}"
        off += n * size
    if off % max(C_TYPES[t][1] for t, _, _ in s.fields):
        raise WireHError(f"struct {s.name}: {off} bytes, tail padding")
    return fmt


def parse(text: str) -> Header:
    code = _strip_comments(text)
    h = Header({}, {}, {}, {})
    # #defines and enums, in order of appearance (an expression may use an earlier name)
    items = re.finditer(r"^\s*#\s*define\s+(LAT_\w+)\s+(.+?)\s*$|\benum\s+(\w+)\s*\{(.*?)\}", code, flags=re.M | re.S)
    for m in items:
        if m[1]:
            if m[2].startswith('"'):
                h.strings[m[1]] = m[2].strip('"').encode()
            else:
                h.values[m[1]] = _eval(m[2], h.values)
            continue
        names, nxt = [], 0
        for entry in (e.strip() for e in m[4].split(",")):
            if not entry:
                continue
            name, _, expr = (x.strip() for x in entry.partition("="))
            nxt = _eval(expr, h.values) if expr else nxt
            h.values[name] = nxt
            names.append(name)
            nxt += 1
        h.enums[m[3]] = names
    for name, body in re.findall(r"\bstruct\s+(lat_\w+)\s*\{(.*?)\}\s*;", code, flags=re.S):
        fields: list[tuple[str, str, str | None]] = []
        for decl in (" ".join(d.split()) for d in body.split(";")):
            if not decl:
                continue
            ctype, _, rest = decl.partition(" ")
            for item in rest.split(","):
                fm = re.fullmatch(r"\s*(\w+)\s*(?:\[\s*([^\]]+?)\s*\])?\s*", item)
                if not fm:
                    raise WireHError(f"struct {name}: cannot parse field {item!r}")
                fields.append((ctype, fm[1], fm[2]))
        s = Struct(name, fields)
        s.fmt = _layout(s, h.values)
        h.structs[name] = s
    return h


def _py_name(c_name: str) -> str:
    return c_name.removeprefix("LAT_")


def emit(h: Header, source: str) -> str:
    out = [f'"""The wire protocol\'s numbers and layouts, generated from {source}',
           'by `python3 -m pluggen.pywire` at build time (make py-wire).  Do not edit:',
           'change the header.  service/lattice/transport/wire.py builds on it."""',
           "from __future__ import annotations", "", "import struct", ""]
    names = [_py_name(n) for n in h.values] + [_py_name(n) for n in h.strings]
    out += [f"{_py_name(n)} = {v:#x}" if v >= 256 else f"{_py_name(n)} = {v}" for n, v in h.values.items()]
    out += [f"{_py_name(n)} = {v!r}" for n, v in h.strings.items()]
    out += ["", "# every struct lat_*: little-endian, no padding (wire.h's _Static_asserts)",
            "STRUCTS: dict[str, struct.Struct] = {"]
    out += [f'    "{s.name}": struct.Struct("{s.fmt}"),' for s in h.structs.values()]
    out += ["}", "FIELDS: dict[str, tuple[str, ...]] = {"]
    out += [f'    "{s.name}": ({", ".join(repr(f[1]) for f in s.fields)},),' for s in h.structs.values()]
    out += ["}", "# each enum's names, in order (without LAT_)", "ENUMS: dict[str, tuple[str, ...]] = {"]
    for e, ns in h.enums.items():
        out.append(f'    "{e}": (')
        out += textwrap.wrap(" ".join(f"{_py_name(n)!r}," for n in ns), 100, initial_indent=" " * 8,
                             subsequent_indent=" " * 8)
        out.append("    ),")
    out += ["}", "", "__all__ = ["]
    out += textwrap.wrap(" ".join(f"{n!r}," for n in [*names, "STRUCTS", "FIELDS", "ENUMS"]), 100,
                         initial_indent="    ", subsequent_indent="    ")
    out += ["]", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python3 -m pluggen.pywire WIRE_H OUT_PY", file=sys.stderr)
        return 2
    src, dst = Path(args[0]), Path(args[1])
    try:
        text = emit(parse(src.read_text()), f"protocol/lattice/{src.name}")
    except (OSError, WireHError) as e:
        print(f"pluggen.pywire: {src}: {e}", file=sys.stderr)
        return 1
    if not dst.exists() or dst.read_text() != text:
        dst.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
