"""The machine model: torus, psets, locations, and where a machine lives.

Compute nodes are numbered x fastest, then y, then z.  Pset i is the I/O
node i plus compute nodes [i*P, (i+1)*P) in that order; only pset sizes that
make every pset a box of the torus are allowed, so psets stay close together
in the torus as on Blue Gene/L.
"""
from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from lattice.errors import LatticeError

Coord = tuple[int, int, int]

DEFAULT_SHAPE: Coord = (2, 2, 4)
DEFAULT_PSET = 8
DEFAULT_MEMORY = 512 << 20     # as a Blue Gene/L node; 2 MiB pages for big memory (lattice.nodes.hugepages)
DEFAULT_CORES = 2           # as on Blue Gene/L: one core computes, the other communicates
MAX_CORES = 4096
PLACEMENTS = ("local", "ssh", "slurm")
HOLD_PAGES = ("auto", "block", "job")    # who holds the huge pages a job's ranks touched (lattice.nodes.hugepages)


def home() -> Path:
    return Path(os.environ.get("LATTICE_HOME") or Path.home() / ".lattice").absolute()


def prefix() -> Path:
    """Where the node programs were built (the repository's build/ by default)."""
    env = os.environ.get("LATTICE_PREFIX")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "build"


def parse_shape(text: str) -> Coord:
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text.strip())
    if not m or min(int(g) for g in m.groups()) < 1:
        raise LatticeError(f"bad shape {text!r}: expected XxYxZ with positive sizes, e.g. 2x2x4")
    return int(m[1]), int(m[2]), int(m[3])


def parse_coord(text: str) -> Coord:
    m = re.fullmatch(r"(\d+),(\d+),(\d+)", text.strip())
    if not m:
        raise LatticeError(f"bad coordinates {text!r}: expected x,y,z")
    return int(m[1]), int(m[2]), int(m[3])


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMGT]?)(i?B)?", text.strip(), re.I)
    if not m:
        raise LatticeError(f"bad memory size {text!r}: expected e.g. 512M or 1G")
    return int(m[1]) << (10 * " KMGT".index((m[2] or " ").upper()))


def shape_str(c: Coord) -> str:
    return "x".join(map(str, c))


class MachineFields(NamedTuple):
    shape: Coord = DEFAULT_SHAPE
    pset_size: int = DEFAULT_PSET
    memory: int = DEFAULT_MEMORY
    placement: str = "local"        # which hosts run the psets: local, ssh or slurm (lattice.nodes.placement)
    ssh: str = ""                   # ssh placement: the command that reaches a host ("" = plain ssh)
    fanout: int = 0                 # ssh placement: agents each agent starts (0: the default, lattice.nodes.agenttree)
    hide: tuple[str, ...] = ()
    cores: int = DEFAULT_CORES
    plugins: tuple[str, ...] = ()   # ciod --plugin specs (docs/plugins.md)
    hold_pages: str = "auto"        # one of HOLD_PAGES
    linux_trees: tuple[str, ...] = ("~",)   # a sandboxed job's default trees; "~": its owner's home (lattice.jobs.trees)
    database: str = "sqlite"        # "sqlite" (LATTICE_HOME/lattice.db) or a postgresql:// URL (lattice.state.db)
    collectives: str = "mpi"        # MPI jobs' default collectives: mpi or torus (lattice.jobs.collectives)


class Machine(MachineFields):
    """A machine description, checked when made.  A NamedTuple rather than a
    dataclass: importing dataclasses was a quarter of `lattice run`'s start-up."""
    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Machine:
        self = super().__new__(cls, *args, **kwargs)
        self.check()
        return self

    def check(self) -> None:
        X, Y, Z = self.shape
        P, n = self.pset_size, X * Y * Z
        if not 1 <= P <= 128:
            raise LatticeError(f"pset size {P} is out of range 1..128")
        if n % P:
            raise LatticeError(f"pset size {P} does not divide the {n} compute nodes of {shape_str(self.shape)}")
        if not (X % P == 0 or (P % X == 0 and Y % (P // X) == 0)
                or (P % (X * Y) == 0 and Z % (P // (X * Y)) == 0)):
            raise LatticeError(f"psets of {P} are not boxes of a {shape_str(self.shape)} torus",
                               "the pset size must divide X, or be X*j with j dividing Y, "
                               "or X*Y*k with k dividing Z")
        if not 1 << 20 <= self.memory < 1 << 63:
            raise LatticeError(f"memory per node ({self.memory} bytes) must be at least 1M and below 8E")
        if not 1 <= self.cores <= MAX_CORES:
            raise LatticeError(f"cores per node ({self.cores}) must be 1..{MAX_CORES}")
        if self.hold_pages not in HOLD_PAGES:
            raise LatticeError(f"hold-pages {self.hold_pages!r} is not one of {', '.join(HOLD_PAGES)}")
        if self.collectives not in ("mpi", "torus"):
            raise LatticeError(f"mpi.collectives {self.collectives!r} is not mpi or torus")
        if self.placement not in PLACEMENTS:
            raise LatticeError(f"placement {self.placement!r} is not one of {', '.join(PLACEMENTS)}")
        if not 0 <= self.fanout <= 4096:
            raise LatticeError(f"placement fanout {self.fanout} is not 1..4096 (0: the default)")

    def block_holds_pages(self) -> bool:
        """Does a booted block keep the huge pages its jobs touched until it is
        freed (lattice.nodes.hugepages), rather than each job giving them back?"""
        if self.hold_pages == "auto":
            from lattice.nodes import host
            return host.free_memory_reported()
        return self.hold_pages == "block"

    @property
    def nodes(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]

    @property
    def psets(self) -> int:
        return self.nodes // self.pset_size

    def coord(self, index: int) -> Coord:
        X, Y, _ = self.shape
        return index % X, (index // X) % Y, index // (X * Y)

    def index(self, c: Coord) -> int:  # type: ignore[override]  # a Machine is never searched as a tuple
        X, Y, _ = self.shape
        return c[0] + X * (c[1] + Y * c[2])

    def pset_of(self, index: int) -> int:
        return index // self.pset_size

    def pset_nodes(self, pset: int) -> range:
        return range(pset * self.pset_size, (pset + 1) * self.pset_size)

    @staticmethod
    def compute_location(index: int) -> str:
        return f"R00-M0-N00-C:J{index:02d}"

    @staticmethod
    def io_location(pset: int) -> str:
        return f"R00-M0-N00-I:J{pset:02d}"

    def box(self, corner: Coord, shape: Coord) -> Iterator[int]:
        """Node indices of a box, x fastest."""
        for z in range(corner[2], corner[2] + shape[2]):
            for y in range(corner[1], corner[1] + shape[1]):
                for x in range(corner[0], corner[0] + shape[0]):
                    yield self.index((x, y, z))

    # --- persistence -------------------------------------------------------
    def to_toml(self) -> dict[str, object]:
        return {
            "torus": {"shape": list(self.shape)},
            "pset": {"size": self.pset_size},
            "node": {"memory": self.memory, "cores": self.cores, "hold_pages": self.hold_pages},
            "placement": {"hosts": self.placement, **({"ssh": self.ssh} if self.ssh else {}),
                          **({"fanout": self.fanout} if self.fanout else {})},
            "compute": {"hide": list(self.hide)},
            **({"ionode": {"plugins": list(self.plugins)}} if self.plugins else {}),
            "linux": {"trees": list(self.linux_trees)},
            **({"database": {"url": self.database}} if self.database != "sqlite" else {}),
            **({"mpi": {"collectives": self.collectives}} if self.collectives != "mpi" else {}),
        }

    @classmethod
    def from_toml(cls, data: dict[str, object], source: str) -> Machine:
        try:
            t: dict[str, list[int]] = data["torus"]  # type: ignore[assignment]
            shape = tuple(int(v) for v in t["shape"])
            if len(shape) != 3:
                raise ValueError("torus.shape needs 3 dimensions")
            hide = data.get("compute", {}).get("hide", [])  # type: ignore[attr-defined]
            if not isinstance(hide, list):
                raise ValueError("compute.hide must be a list of paths")
            plugins = data.get("ionode", {}).get("plugins", [])  # type: ignore[attr-defined]
            if not isinstance(plugins, list) or not all(isinstance(p, str) and p for p in plugins):
                raise ValueError("ionode.plugins must be a list of PATH[:LIMIT][;CONFIG] strings")
            trees = data.get("linux", {}).get("trees", ["~"])  # type: ignore[attr-defined]
            if not isinstance(trees, list) or not all(isinstance(t, str) and (t == "~" or t.startswith("/"))
                                                      and ":" not in t for t in trees):
                raise ValueError("linux.trees must be a list of absolute paths without ':' or \"~\"")
            return cls(shape=(shape[0], shape[1], shape[2]),
                       pset_size=int(data["pset"]["size"]),  # type: ignore[index]
                       memory=int(data["node"]["memory"]),  # type: ignore[index]
                       cores=int(data["node"].get("cores", DEFAULT_CORES)),  # type: ignore[attr-defined]
                       hold_pages=str(data["node"].get("hold_pages", "auto")),  # type: ignore[attr-defined]
                       placement=str(data.get("placement", {}).get("hosts", "local")),  # type: ignore[attr-defined]
                       ssh=str(data.get("placement", {}).get("ssh", "")),  # type: ignore[attr-defined]
                       fanout=int(data.get("placement", {}).get("fanout", 0)),  # type: ignore[attr-defined]
                       hide=tuple(str(p) for p in hide), plugins=tuple(plugins), linux_trees=tuple(trees),
                       database=str(data.get("database", {}).get("url", "sqlite")),  # type: ignore[attr-defined]
                       collectives=str(data.get("mpi", {}).get("collectives", "mpi")))  # type: ignore[attr-defined]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise LatticeError(f"{source}: bad machine description: {e}") from e

    def save(self, path: Path) -> None:
        import tomli_w     # here, as hashlib below: only `lattice init` and deep homes need them
        path.write_text("# Lattice machine description (lattice init)\n" + tomli_w.dumps(self.to_toml()))


def machine_file() -> Path:
    return home() / "machine.toml"


def require() -> None:
    """Fail clearly unless $LATTICE_HOME holds a machine."""
    if not machine_file().is_file():
        raise LatticeError(f"no machine at {home()}: run `lattice init` (or set LATTICE_HOME)")


def load() -> Machine:
    require()
    path = machine_file()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise LatticeError(f"cannot read {path}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise LatticeError(f"{path}: {e}") from e
    return Machine.from_toml(data, str(path))


def socket_dir() -> Path:
    """Where the I/O nodes' sockets go: unix socket paths are limited to 107
    bytes, so a deep LATTICE_HOME gets a short directory under /tmp, which
    is made here, or found, as the caller's own, mode 0700, never through a
    link; one another user made is refused (lattice.safepath)."""
    d = home() / "run"
    if len(str(d)) + 24 <= 107:
        return d
    from lattice import safepath
    d = Path(safepath.runtime_dir(str(home())))
    safepath.private_dir(d)
    return d
