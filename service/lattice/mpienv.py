"""The environment an Open MPI program needs to start under Lattice's PMI.

Open MPI 4.1 (Debian's 4.1.4) has no PMI-1 wire client of its own, but its
`pmix/flux` component bootstraps through any PMI-1 client library it
dlopens from FLUX_PMI_LIBRARY_PATH, once FLUX_JOB_ID is set.  Lattice's
own library (compute/libpmi, built to build/lib/libpmi.so) speaks the PMI-1
wire protocol over the PMI_FD every rank gets from its cnode.  docs/openmpi.md
says why each variable is there.

An Open MPI program is recognised by its ELF dynamic section: it needs
libmpi.so.40 (or Open MPI's libopen-rte/libopen-pal, or its Fortran
bindings).  Everything else gets no extra environment.
"""
from __future__ import annotations

import struct
from pathlib import Path

from .errors import LatticeError
from .machine import prefix

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ = 0, 1, 5, 10
MAX_DYNAMIC = 1 << 20           # bytes of dynamic section or string table we are willing to read


def _is_open_mpi_lib(name: str) -> bool:
    return (name == "libmpi.so.40" or name.startswith(("libopen-rte.so", "libopen-pal.so"))
            or (name.startswith("libmpi_") and name.endswith(".so.40")))


def needed_libraries(path: str | Path) -> list[str]:
    """DT_NEEDED names of an ELF file; [] for a static or non-ELF file.

    Reads only the program headers, the dynamic segment and its string
    table (through the PT_LOAD segments), so stripped files work too.
    Raises ValueError for a truncated or inconsistent ELF file.
    """
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            return []
        wide, end = ident[4] == 2, "<" if ident[5] == 1 else ">"

        def read(off: int, size: int) -> bytes:
            f.seek(off)
            data = f.read(size)
            if len(data) != size:
                raise ValueError(f"{path}: truncated ELF file (wanted {size} bytes at {off})")
            return data

        if wide:
            phoff, = struct.unpack(end + "Q", read(32, 8))
            phentsize, phnum = struct.unpack(end + "HH", read(54, 4))
            ph_fmt, dyn_fmt = end + "IIQQQQQQ", end + "qQ"
        else:
            phoff, = struct.unpack(end + "I", read(28, 4))
            phentsize, phnum = struct.unpack(end + "HH", read(42, 4))
            ph_fmt, dyn_fmt = end + "IIIIIIII", end + "iI"
        if phnum and phentsize < struct.calcsize(ph_fmt):
            raise ValueError(f"{path}: program header entries of {phentsize} bytes are too small")

        loads: list[tuple[int, int, int]] = []      # (vaddr, filesz, offset)
        dynamic: tuple[int, int] | None = None      # (offset, filesz)
        for i in range(phnum):
            raw = read(phoff + i * phentsize, struct.calcsize(ph_fmt))
            if wide:
                ptype, _flags, off, vaddr, _pa, filesz, _memsz, _align = struct.unpack(ph_fmt, raw)
            else:
                ptype, off, vaddr, _pa, filesz, _memsz, _flags, _align = struct.unpack(ph_fmt, raw)
            if ptype == PT_LOAD:
                loads.append((vaddr, filesz, off))
            elif ptype == PT_DYNAMIC:
                dynamic = (off, filesz)
        if dynamic is None:
            return []
        if dynamic[1] > MAX_DYNAMIC:
            raise ValueError(f"{path}: dynamic segment of {dynamic[1]} bytes is implausibly large")

        entry = struct.calcsize(dyn_fmt)
        needed: list[int] = []
        strtab = strsz = None
        data = read(*dynamic)
        for i in range(len(data) // entry):
            tag, val = struct.unpack_from(dyn_fmt, data, i * entry)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                needed.append(val)
            elif tag == DT_STRTAB:
                strtab = val
            elif tag == DT_STRSZ:
                strsz = val
        if not needed:
            return []
        if strtab is None or strsz is None or strsz > MAX_DYNAMIC:
            raise ValueError(f"{path}: DT_NEEDED entries without a usable string table")
        # DT_STRTAB is an address: find the file offset through the segment holding it.
        for vaddr, filesz, off in loads:
            if vaddr <= strtab and strtab + strsz <= vaddr + filesz:
                strings = read(off + strtab - vaddr, strsz)
                break
        else:
            raise ValueError(f"{path}: the dynamic string table is outside every loaded segment")
        names = []
        for n in needed:
            stop = strings.find(b"\0", n)
            if n >= strsz or stop < 0:
                raise ValueError(f"{path}: DT_NEEDED name at {n} is outside the string table")
            names.append(strings[n:stop].decode("utf-8", "replace"))
        return names


def is_open_mpi(exe: str | Path) -> bool:
    """Whether exe is dynamically linked against Open MPI (False if unreadable or not ELF)."""
    try:
        return any(_is_open_mpi_lib(n) for n in needed_libraries(exe))
    except (OSError, ValueError):
        return False


def _job_id() -> int:
    """A fresh Open MPI job id.  pmix/flux takes FLUX_JOB_ID (decimal) as the
    job's 32-bit jobid, which names its session directory and shared-memory
    files, so two jobs running at once must not share one.  ORTE reads the
    high 16 bits as the job family and local job 0 as its daemons: use a
    random family and local job 1."""
    import secrets         # here: only Open MPI programs need it
    return (1 + secrets.randbelow(0x7FFF)) << 16 | 1


def mpi_env(exe: str) -> dict[str, str]:
    """Environment for exe to bootstrap through Lattice's PMI: Open MPI's
    pmix/flux component over build/lib/libpmi.so, for an Open MPI program;
    {} for any other program."""
    if not is_open_mpi(exe):
        return {}
    lib = prefix() / "lib" / "libpmi.so"
    if not lib.is_file():
        raise LatticeError(f"{exe} is an Open MPI program, but Lattice's PMI-1 library {lib} is missing",
                           "build it with `make libpmi` in the repository")
    return {
        "FLUX_JOB_ID": str(_job_id()),          # selects pmix/flux; the job's Open MPI jobid
        "FLUX_PMI_LIBRARY_PATH": str(lib),      # the PMI-1 library pmix/flux dlopens
        "OMPI_MCA_pmix": "flux",                # no fallback to another PMIx client
        "OMPI_MCA_ess": "pmi",                  # direct launch: no singleton, no orted
        "OMPI_MCA_pml": "ob1",                  # the BTLs below, not UCX
        # Compute nodes share one host name and /dev/shm, so vader's segment
        # names (host, jobid, local rank) collide across nodes in vn mode.
        "OMPI_MCA_btl": "self,tcp",
    }
