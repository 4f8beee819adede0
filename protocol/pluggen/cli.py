"""lattice-pluggen HEADER --id N [--name NAME] [--out DIR]: writes
NAME_stubs.c (the compute-side library) and NAME_ciod.c (the dispatcher);
`file:line: message` and exit 1 on a malformed header."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pluggen.emit_disp import emit_dispatcher
from pluggen.emit_stub import emit_stubs
from pluggen.errors import PluggenError
from pluggen.parse import parse_header

ID_MAX = 0xFFFFFFFF


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lattice-pluggen", description=__doc__)
    ap.add_argument("header", type=Path, help="annotated C header")
    ap.add_argument("--id", type=int, required=True, help="plug-in id, unique in a ciod")
    ap.add_argument("--name", help="plug-in name and hook prefix (default: the header's stem)")
    ap.add_argument("--out", type=Path, default=Path("."), help="output directory")
    a = ap.parse_args(argv)
    name = a.name or a.header.stem
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        print(f"lattice-pluggen: plug-in name {name!r} must be a C identifier", file=sys.stderr)
        return 2
    if not 0 <= a.id <= ID_MAX:
        print(f"lattice-pluggen: --id must be 0..{ID_MAX}", file=sys.stderr)
        return 2
    try:
        text = a.header.read_text()
    except OSError as e:
        print(f"lattice-pluggen: {a.header}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        plugin = parse_header(text, str(a.header), name, a.id)
    except PluggenError as e:
        print(e, file=sys.stderr)
        return 1
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{name}_stubs.c").write_text(emit_stubs(plugin))
    (a.out / f"{name}_ciod.c").write_text(emit_dispatcher(plugin))
    return 0
