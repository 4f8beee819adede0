"""lattice-pluggen HEADER --id N [--name NAME] [--out DIR]: writes
NAME_stubs.c (the compute-side library) and NAME_ciod.c (the dispatcher);
`file:line: message` and exit 1 on a malformed header.

lattice-pluggen --wire HEADER [--out DIR] [--wire-h WIRE_H]: the function
shipping (docs/plugins.md "Wire mode"): NAME_ciod.c (ciod's decoder),
NAME_srv.h (its implementations' prototypes), NAME_stubs.c and NAME_stubs.h
(the compute side's stubs, and the vectored ones' prototypes); with
--wire-h, rewrites that file's generated LAT_SYS block."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pluggen import emit_wire
from pluggen.emit_disp import emit_dispatcher
from pluggen.emit_stub import emit_stubs
from pluggen.errors import PluggenError
from pluggen.parse import parse_header
from pluggen.wiremodel import wire_calls

ID_MAX = 0xFFFFFFFF


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lattice-pluggen", description=__doc__)
    ap.add_argument("header", type=Path, help="annotated C header")
    ap.add_argument("--id", type=int, help="plug-in id, unique in a ciod (required without --wire)")
    ap.add_argument("--wire", action="store_true", help="the header is the shipped POSIX calls")
    ap.add_argument("--wire-h", type=Path, help="--wire: rewrite this wire.h's generated LAT_SYS block")
    ap.add_argument("--name", help="plug-in name and hook prefix (default: the header's stem)")
    ap.add_argument("--out", type=Path, default=Path("."), help="output directory")
    a = ap.parse_args(argv)
    name = a.name or a.header.stem
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        print(f"lattice-pluggen: plug-in name {name!r} must be a C identifier", file=sys.stderr)
        return 2
    if a.wire:
        return _wire(a.header, name, a.out, a.wire_h)
    if a.id is None:
        ap.error("--id is required (or --wire)")
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


def _wire(header: Path, name: str, out: Path, wire_h: Path | None) -> int:
    try:
        text = header.read_text()
        old = wire_h.read_text() if wire_h else ""
    except OSError as e:
        print(f"lattice-pluggen: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        calls = wire_calls(parse_header(text, str(header), name, 0, wire=True))
    except PluggenError as e:
        print(e, file=sys.stderr)
        return 1
    if wire_h:
        try:
            new = emit_wire.update_wire_h(old, calls)
        except ValueError as e:
            print(f"lattice-pluggen: {wire_h}: {e}", file=sys.stderr)
            return 1
        if new != old:
            wire_h.write_text(new)
    out.mkdir(parents=True, exist_ok=True)
    shown = f"lattice/{header.name}"
    (out / f"{name}_ciod.c").write_text(emit_wire.emit_decoder(calls, shown))
    (out / f"{name}_srv.h").write_text(emit_wire.srv_header(calls, shown))
    (out / f"{name}_stubs.c").write_text(emit_wire.emit_stubs(calls, shown, name))
    (out / f"{name}_stubs.h").write_text(emit_wire.emit_stubs_h(calls, shown))
    return 0
