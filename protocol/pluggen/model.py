"""What the generator knows about a plug-in: functions, their parameters and
the checked meaning of each annotation (docs/plugins.md "Annotations")."""
from __future__ import annotations

from dataclasses import dataclass, field

DIRECTIONS = ("in", "out", "inout")
KINDS = ("obj", "ptr", "str", "arr", "arr2d")
FLAGS = ("nullok", "zerocopy", "userbuf")
INTEGER_WORDS = {
    "char", "short", "int", "long", "signed", "unsigned", "size_t", "ssize_t", "off_t",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
    "intptr_t", "uintptr_t", "const", "volatile",
}


@dataclass
class CType:
    base: list[str]          # specifier tokens, e.g. ["const", "double"]
    depth: int               # pointer levels

    def text(self, strip_const: bool = False) -> str:
        words = [w for w in self.base if not (strip_const and w in ("const", "volatile"))]
        return " ".join(words) + (" " + "*" * self.depth if self.depth else "")

    def deref(self, levels: int = 1) -> CType:
        return CType(self.base, self.depth - levels)

    def is_void(self) -> bool:
        return self.depth == 0 and [w for w in self.base if w not in ("const", "volatile")] == ["void"]

    def is_integer(self) -> bool:
        return self.depth == 0 and all(w in INTEGER_WORDS for w in self.base)

    def size_expr(self) -> str:
        """sizeof of one object of this type (void counts as a byte)."""
        return "1" if self.is_void() else f"sizeof({self.text()})"


@dataclass
class Param:
    name: str
    ctype: CType
    line: int
    direction: str = "in"
    kind: str = "obj"
    size: int | None = None      # index of the argument holding the length (rows for arr2d)
    size2: int | None = None     # arr2d: index of the argument holding the row length
    flags: set[str] = field(default_factory=set)
    wire: dict[str, str] = field(default_factory=dict)   # wire mode options (pluggen.wire)

    @property
    def nullok(self) -> bool:
        return "nullok" in self.flags

    @property
    def zerocopy(self) -> bool:
        return "zerocopy" in self.flags

    @property
    def userbuf(self) -> bool:
        return "userbuf" in self.flags

    @property
    def sends(self) -> bool:
        return self.direction in ("in", "inout")

    @property
    def returns(self) -> bool:
        return self.direction in ("out", "inout")

    def elem(self) -> CType:
        """Element type of ptr/arr (T of T *) and arr2d (T of T **)."""
        return self.ctype.deref(2 if self.kind == "arr2d" else 1)


@dataclass
class Function:
    name: str
    ret: CType
    params: list[Param]
    line: int
    number: int
    msg: int | None = None       # wire mode: the message type (msg=N before the prototype)
    msg_opts: set[str] = field(default_factory=set)   # wire mode: msg=N:OPT options (mbox)


@dataclass
class Plugin:
    name: str
    id: int
    header: str
    functions: list[Function]

    @property
    def uses_userbuf(self) -> bool:
        return any(p.userbuf for f in self.functions for p in f.params)
