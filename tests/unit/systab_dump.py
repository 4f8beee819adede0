"""Dump cnk's system-call table (compute/cnk/systab.c) as text, one line per
number: `nr name class handler args`.  The table is compiled as cnk compiles
it; every handler it references is replaced by a stub, so the dump names
the handler by its symbol.  tests/unit/test_syscalls_def.py compares the
dump with tests/unit/syscalls/cnk_systab.golden, made from the hand-written
table that lattice/syscalls.def replaced:

    python3 tests/unit/systab_dump.py compute/cnk/systab.c > tests/unit/syscalls/cnk_systab.golden
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ("local", "shipped", "unsupported")
CNK_CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-ffreestanding", "-fno-stack-protector", "-fno-builtin",
              "-fPIE", "-fvisibility=hidden", "-O2", "-mgeneral-regs-only",
              f"-I{ROOT / 'compute/cnk'}", f"-I{ROOT / 'protocol'}", f"-I{ROOT / 'compute/include'}",
              f"-I{ROOT / 'compute/shipc'}", f"-I{ROOT / 'build/gen'}"]

MAIN = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
struct ent { const char *name; uint8_t cls; void *fn; const char *args; };  /* struct cnk_sysent */
extern const struct ent cnk_systab[512];
struct sym { const char *name; void *fn; };
extern const struct sym stubs[];
int main(void)
{
    for (int nr = 0; nr < 512; nr++) {
        const struct ent *e = &cnk_systab[nr];
        if (!e->name && !e->fn && !e->args && !e->cls)
            continue;
        const char *fn = e->fn ? "?" : "-";
        for (const struct sym *s = stubs; s->name; s++)
            if (s->fn == e->fn)
                fn = s->name;
        printf("%d %s %u %s %s\n", nr, e->name ? e->name : "-", e->cls, fn, e->args ? e->args : "-");
    }
    return 0;
}
"""


def dump(systab_c: Path) -> str:
    """The table systab_c builds, as text (classes by name)."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        subprocess.run(["gcc", *CNK_CFLAGS, "-c", "-o", t / "systab.o", systab_c], check=True)
        nm = subprocess.run(["nm", "-u", t / "systab.o"], check=True, capture_output=True, text=True).stdout
        handlers = sorted(line.split()[-1] for line in nm.splitlines() if line.strip())
        stubs = "".join(f"long {h}(void *c) {{ return (long)c + {i}; }}\n" for i, h in enumerate(handlers))
        stubs += "struct sym { const char *name; void *fn; };\nconst struct sym stubs[] = {\n"
        stubs += "".join(f'    {{ "{h}", (void *){h} }},\n' for h in handlers) + "    { 0, 0 }\n};\n"
        (t / "stubs.c").write_text(stubs)
        (t / "main.c").write_text(MAIN)
        subprocess.run(["gcc", "-O0", "-o", t / "dump", t / "main.c", t / "stubs.c", t / "systab.o"], check=True)
        out = subprocess.run([t / "dump"], check=True, capture_output=True, text=True).stdout
    lines = []
    for line in out.splitlines():
        nr, name, cls, fn, args = line.split(" ", 4)
        lines.append(f"{nr} {name} {CLASSES[int(cls)]} {fn} {args}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(dump(Path(sys.argv[1])))
