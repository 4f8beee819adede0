"""Wire mode: what a prototype of an annotated POSIX header means on the
function-shipping wire (struct lat_sysreq a0..a3 + packed data, reply
struct lat_sysret + data), checked with file:line errors
(docs/plugins.md "Wire mode", docs/protocol.md section 6)."""
from __future__ import annotations

from dataclasses import dataclass

from pluggen.errors import PluggenError
from pluggen.model import Function, Param, Plugin

PREFIX = "fwd_"
SLOTS = 4
MAP_BITS = 64           # wire.h's LAT_MBOX_MAP and LAT_BULK_MAP: one bit per call

# integer types an a0..a3 slot may carry: (C type of the value, how it is checked)
#   int:  a 32-bit int given sign- or zero-extended (ciod's arg_int: EINVAL else)
#   u32:  0..UINT32_MAX;  i64, u64: the slot as it is
SLOT_TYPES = {
    "int": "int", "int32_t": "int",
    "unsigned": "u32", "unsigned int": "u32", "uint32_t": "u32",
    "int64_t": "i64", "long": "i64",
    "uint64_t": "u64", "size_t": "u64",
}


@dataclass
class Call:
    f: Function
    msg: int                        # the message type
    name: str                       # OPENAT
    slot: dict[int, int]            # param index -> a0..a3
    data: list[int]                 # request data params, in order
    reply: list[int]                # reply data params, in order
    rest: int | None                # the a=none size param (its array takes the rest)
    zerocopy: int | None            # the data array that may go rendezvous (header flags LAT_HF_*)
    mbox: bool                      # msg=N:mbox: may travel in the mailbox

    @property
    def fn(self) -> str:
        return self.f.name[len(PREFIX):]

    def param(self, i: int) -> Param:
        return self.f.params[i]

    @property
    def vec(self) -> int | None:
        """The byte array that the _v stub takes as iovecs."""
        return next((i for i, p in enumerate(self.f.params) if "vec" in p.wire), None)

    def sized_by(self, j: int) -> Param | None:
        """The array whose length param j holds."""
        return next((p for p in self.f.params if p.kind == "arr" and p.size == j), None)


def slot_type(p: Param) -> str:
    return SLOT_TYPES.get(" ".join(w for w in p.ctype.base if w != "const"), "")


def _call(f: Function, file: str) -> Call:
    def bad(p: Param | None, msg: str) -> PluggenError:
        return PluggenError(file, p.line if p else f.line, f"{f.name}: {p.name + ': ' if p else ''}{msg}")

    if not f.name.startswith(PREFIX) or len(f.name) == len(PREFIX):
        raise bad(None, f"a shipped call's name is {PREFIX}NAME (the message is LAT_SYS_NAME)")
    if f.ret.text() != "int64_t":
        raise bad(None, "returns int64_t: the reply's ret")
    if f.msg is None:
        raise bad(None, "no message number (msg=N)")
    c = Call(f, f.msg, f.name[len(PREFIX):].upper(), {}, [], [], None, None, "mbox" in f.msg_opts)
    nxt = 0
    for i, p in enumerate(f.params):
        w = p.wire
        for flag in ("fd", "vec"):
            if flag in w and w[flag]:
                raise bad(p, f"{flag} takes no value")
        if "vec" in w and not (p.kind == "arr" and p.elem().is_void() and p.size is not None):
            raise bad(p, "vec is for a byte array (void *) with size=")
        if p.nullok or p.userbuf:
            raise bad(p, "the wire has no NULL pointers or plug-in buffers (nullok, userbuf)")
        if p.kind == "arr2d":
            raise bad(p, "arr2d does not travel on the shipping wire")
        if p.kind != "obj" and set(w) - {"len", "vec"}:
            raise bad(p, f"{', '.join(sorted(set(w) - {'len', 'vec'}))} belong to in:obj integers")
        if "len" in w and (p.kind != "arr" or p.size is not None):
            raise bad(p, "len= is the fixed length of an arr without size=")
        if p.kind == "obj":
            if not slot_type(p):
                raise bad(p, f"an argument in a0..a3 is one of {', '.join(SLOT_TYPES)}")
            if "fd" in w and slot_type(p) != "int":
                raise bad(p, "fd needs an int")
            if w.get("a") == "none":
                arr = c.sized_by(i)
                if arr is None or not arr.sends:
                    raise bad(p, "a=none is for the length of an in array (it takes the rest of the payload)")
                if c.rest is not None:
                    raise bad(p, "only one a=none per call")
                c.rest = i
                continue
            s = nxt
            if "a" in w:
                if not w["a"].isdigit() or int(w["a"]) >= SLOTS:
                    raise bad(p, f"a= is a slot 0..{SLOTS - 1} or none, not {w['a']!r}")
                s = int(w["a"])
            if s >= SLOTS:
                raise bad(p, f"more than {SLOTS} arguments for a0..a3")
            if s in c.slot.values():
                raise bad(p, f"slot a{s} is taken")
            c.slot[i] = s
            nxt = s + 1
        elif p.kind == "ptr":
            if p.direction != "out":
                raise bad(p, "ptr is out only on the wire (an in object is an in:arr:len=1)")
            c.reply.append(i)
        elif p.kind == "str":
            c.data.append(i)
        elif p.kind == "arr":
            if p.size is not None and f.params[p.size].kind != "obj":
                raise bad(p, "size= names an in:obj integer on the wire")
            if p.sends:
                c.data.append(i)
            if p.returns:
                c.reply.append(i)
            if "vec" in w and any("vec" in q.wire for q in f.params[:i]):
                raise bad(p, "one vec array per call")
            if p.zerocopy:
                if c.zerocopy is not None:
                    raise bad(p, "one zerocopy array per call")
                if p.size is None:
                    raise bad(p, "a zerocopy array has its length in an argument (size=)")
                c.zerocopy = i
    if c.rest is not None:
        arr = c.sized_by(c.rest)
        last = c.data[-1] if c.data else None
        if last is None or f.params[last] is not arr:
            raise bad(arr, "the array sized by a=none takes the rest of the payload: it must be the last data")
    for k, i in enumerate(c.reply):
        p = f.params[i]
        if p.direction == "inout" and len(c.reply) > 1:
            raise bad(p, "an inout array comes back in place: it must be the only reply data")
        if p.kind == "arr" and p.direction == "out" and k != len(c.reply) - 1:
            raise bad(p, "an out array carries ret elements: it must be the last reply data")
    return c


def wire_calls(plugin: Plugin) -> list[Call]:
    """Every prototype as a shipped call; numbers unique, ascending and contiguous."""
    calls = [_call(f, plugin.header) for f in plugin.functions]
    for prev, c in zip(calls, calls[1:]):
        if c.msg != prev.msg + 1:
            raise PluggenError(plugin.header, c.f.line,
                               f"{c.f.name}: msg=0x{c.msg:04X} must follow {prev.f.name}'s "
                               f"0x{prev.msg:04X} (numbers are contiguous: counters are indexed by them)")
    if len(calls) > MAP_BITS:
        raise PluggenError(plugin.header, calls[MAP_BITS].f.line,
                           f"more than {MAP_BITS} shipped calls: wire.h's LAT_MBOX_MAP and LAT_BULK_MAP have one bit each")
    return calls
