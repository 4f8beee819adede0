"""Prototypes and their annotations out of a header's tokens.

The accepted subset is regular: top-level declarations end with `;`;
those with a parameter list are prototypes `TYPE NAME(PARAM, ...)` whose
parameters are `TYPE NAME /* annotation */`; struct, enum and typedef
definitions are skipped (the generated C includes the header for them).
"""
from __future__ import annotations

from pluggen.errors import PluggenError
from pluggen.lexer import Token, tokenize
from pluggen.model import DIRECTIONS, FLAGS, KINDS, CType, Function, Param, Plugin

# wire mode only (docs/plugins.md "Wire mode"): key=value options and flags
WIRE_KEYS = ("a", "min", "max", "clamp", "len")
WIRE_FLAGS = ("fd", "vec")

SKIP_STARTS = ("typedef", "struct", "union", "enum", "static")


def _statements(toks: list[Token], file: str) -> list[list[Token]]:
    """Top-level statements (braces nest), comments included."""
    out: list[list[Token]] = []
    cur: list[Token] = []
    depth = 0
    for t in toks:
        cur.append(t)
        if t.kind == "punct" and t.text == "{":
            depth += 1
        elif t.kind == "punct" and t.text == "}":
            depth -= 1
        elif t.kind == "punct" and t.text == ";" and depth == 0:
            out.append(cur)
            cur = []
    if [t for t in cur if t.kind != "comment"]:
        raise PluggenError(file, cur[0].line, "declaration without ';'")
    return out


def _ctype(words: list[Token], file: str) -> tuple[CType, str]:
    """TYPE NAME -> (type, name); `words` has no comments."""
    if not words or words[-1].kind != "id":
        raise PluggenError(file, words[0].line if words else 0, "expected a declaration ending in a name")
    name = words[-1].text
    base, depth = [], 0
    for t in words[:-1]:
        if t.kind == "punct" and t.text == "*":
            depth += 1
        elif t.kind == "id" and depth == 0:
            base.append(t.text)
        elif t.kind == "id" and t.text in ("const", "restrict", "__restrict", "volatile"):
            continue    # qualifiers of the pointer itself do not change the wire
        else:
            raise PluggenError(file, t.line, f"cannot handle {t.text!r} in the declaration of {name} "
                               "(use a typedef for function pointers and arrays)")
    if not base:
        raise PluggenError(file, words[-1].line, f"{name} has no type")
    return CType(base, depth), name


def _annotation(p: Param, text: str, file: str, wire: bool = False) -> None:
    parts = [s.strip() for s in text.split(":")]
    if len(parts) < 2:
        raise PluggenError(file, p.line, f"{p.name}: annotation {text!r} needs direction:kind "
                           "(e.g. in:obj, out:arr:size=+1)")
    p.direction, p.kind = parts[0], parts[1]
    if p.direction not in DIRECTIONS:
        raise PluggenError(file, p.line, f"{p.name}: direction {p.direction!r} is not one of {', '.join(DIRECTIONS)}")
    if p.kind not in KINDS:
        raise PluggenError(file, p.line, f"{p.name}: kind {p.kind!r} is not one of {', '.join(KINDS)}")
    for opt in parts[2:]:
        if opt.startswith(("size=", "size2=")):
            key, val = opt.split("=", 1)
            if not val or val[0] not in "+-" or not val[1:].isdigit() or int(val) == 0:
                raise PluggenError(file, p.line, f"{p.name}: {key}= wants a signed, non-zero "
                                   f"argument offset such as +1 or -2, not {val!r}")
            if getattr(p, key) is not None:
                raise PluggenError(file, p.line, f"{p.name}: {key}= given twice")
            setattr(p, key, int(val))
        elif wire and opt.split("=", 1)[0] in WIRE_KEYS + WIRE_FLAGS:
            key, _, val = opt.partition("=")
            if key in p.wire:
                raise PluggenError(file, p.line, f"{p.name}: {key} given twice")
            if key in WIRE_KEYS and not val.strip():
                raise PluggenError(file, p.line, f"{p.name}: {key}= needs a value")
            p.wire[key] = val.strip()
        elif opt in FLAGS:
            if opt in p.flags:
                raise PluggenError(file, p.line, f"{p.name}: {opt} given twice")
            p.flags.add(opt)
        else:
            extra = f", {', '.join(k + '=' for k in WIRE_KEYS)}, {', '.join(WIRE_FLAGS)}" if wire else ""
            raise PluggenError(file, p.line, f"{p.name}: unknown annotation {opt!r} "
                               f"(known: size=±N, size2=±N, {', '.join(FLAGS)}{extra})")


def _check(f: Function, file: str, wire: bool = False) -> None:
    n = len(f.params)
    for i, p in enumerate(f.params):
        where = f"{f.name}: {p.name}"

        def bad(msg: str) -> PluggenError:
            return PluggenError(file, p.line, f"{where}: {msg}")

        # relative offsets become absolute argument indices
        for key in ("size", "size2"):
            off = getattr(p, key)
            if off is not None:
                j = i + off
                if not 0 <= j < n:
                    raise bad(f"{key}={off:+d} points outside the argument list")
                setattr(p, key, j)
        if p.kind == "obj":
            if p.direction != "in":
                raise bad("obj is passed by value, so it can only be 'in' (use ptr for results)")
            if p.ctype.depth:
                raise bad("obj takes a value; a pointer needs ptr, str, arr or arr2d")
        elif p.kind == "ptr":
            if p.ctype.depth != 1 or p.elem().is_void():
                raise bad("ptr needs a pointer to one object of a complete type")
        elif p.kind == "str":
            if p.direction != "in":
                raise bad("str can only be 'in' (return text in an out:arr of char)")
            if p.ctype.depth != 1 or [w for w in p.ctype.base if w != "const"] != ["char"]:
                raise bad("str needs a char *")
        elif p.kind == "arr":
            if p.ctype.depth != 1:
                raise bad("arr needs a pointer to the array's first element")
            if p.size is None and not (wire and "len" in p.wire):
                raise bad("arr needs size=±N naming the argument that holds its length"
                          + (" (or len=N)" if wire else ""))
        elif p.kind == "arr2d":
            if p.ctype.depth != 2 or p.elem().is_void():
                raise bad("arr2d needs T ** (an array of row pointers)")
            if p.size is None or p.size2 is None:
                raise bad("arr2d needs size=±N (rows) and size2=±N (elements per row)")
        if p.size2 is not None and p.kind != "arr2d":
            raise bad("size2= belongs to arr2d only")
        if p.size is not None and p.kind not in ("arr", "arr2d"):
            raise bad("size= belongs to arr and arr2d only")
        if p.zerocopy and p.kind != "arr":
            raise bad("zerocopy applies to arr only")
        if p.userbuf and not (p.zerocopy and p.direction == "out"):
            raise bad("userbuf needs out:arr:zerocopy (the plug-in provides the I/O node buffer)")
        if p.nullok and p.kind not in ("ptr", "str", "arr", "arr2d"):
            raise bad("nullok applies to pointers (ptr, str, arr, arr2d)")
        for key in ("size", "size2"):
            j = getattr(p, key)
            if j is None:
                continue
            s = f.params[j]
            if j == i:
                raise bad(f"{key}= points at the array itself")
            ok = (s.kind == "obj" and s.ctype.is_integer()) or \
                 (s.kind == "ptr" and s.direction in ("in", "inout") and s.elem().is_integer())
            if not ok:
                raise bad(f"{key}= names {s.name}, which must be an integer in:obj or in/inout:ptr")
            if s.kind == "ptr" and s.direction == "inout" and key == "size2":
                raise bad("size2= must name a value the call cannot change")
    if f.ret.depth:
        raise PluggenError(file, f.line, f"{f.name}: returns a pointer, which means nothing on "
                           "the compute node (return results through out arguments)")


MSG_OPTIONS = {"mbox"}      # wire mode: what msg=N:OPT may add (docs/plugins.md "Wire mode")


def _msg(stmt: list[Token], name: str, file: str, line: int) -> tuple[int, set[str]]:
    """Wire mode: the msg=N[:OPT...] comment just before a prototype."""
    lead = []
    for t in stmt:
        if t.kind != "comment":
            break
        lead.append(t)
    found = [t for t in lead if t.text.startswith("msg=")]
    if len(found) != 1:
        raise PluggenError(file, line, f"{name}: " + ("no message number (write /* msg=0x0300 */ "
                           "before the prototype)" if not found else "more than one msg= comment"))
    num, *opts = found[0].text.split()[0][4:].split(":")
    try:
        value = int(num, 0)
    except ValueError:
        raise PluggenError(file, found[0].line, f"{name}: msg={num!r} is not a number") from None
    if not 0 < value < 0x8000:
        raise PluggenError(file, found[0].line, f"{name}: msg={num} is outside 1..0x7fff (0x8000 marks replies)")
    unknown = [o for o in opts if o not in MSG_OPTIONS]
    if unknown:
        raise PluggenError(file, found[0].line, f"{name}: msg=...:{unknown[0]}: unknown option "
                           f"(known: {', '.join(sorted(MSG_OPTIONS))})")
    return value, set(opts)


def _prototype(stmt: list[Token], file: str, number: int, wire: bool = False) -> Function:
    code = [t for t in stmt if t.kind != "comment"]
    lp = next(i for i, t in enumerate(code) if t.text == "(")
    if not code[-1].text == ";" or code[-2].text != ")":
        raise PluggenError(file, code[0].line, "a prototype must end with ');' (no definitions, no attributes)")
    ret, name = _ctype([t for t in code[:lp] if t.text != "extern"], file)
    f = Function(name, ret, [], code[0].line, number)
    if wire:
        f.msg, f.msg_opts = _msg(stmt, name, file, f.line)
    # parameters: split the tokens between the outer parentheses at top-level commas
    inner = stmt[stmt.index(next(t for t in stmt if t.text == "(")) + 1:]
    groups: list[list[Token]] = [[]]
    depth = 0
    for t in inner:
        if t.kind == "punct" and t.text == "(":
            depth += 1
        elif t.kind == "punct" and t.text == ")":
            if depth == 0:
                break
            depth -= 1
        elif t.kind == "punct" and t.text == "," and depth == 0:
            groups.append([])
            continue
        groups[-1].append(t)
    # an annotation written just after the comma belongs to the argument before it
    for k in range(1, len(groups)):
        while groups[k] and groups[k][0].kind == "comment" and groups[k][0].line == \
                next((t.line for t in reversed(groups[k - 1]) if t.kind != "comment"), -1):
            groups[k - 1].append(groups[k].pop(0))
    words = [[t for t in g if t.kind != "comment"] for g in groups]
    if len(groups) == 1 and (not words[0] or [t.text for t in words[0]] == ["void"]):
        return f
    for g, w in zip(groups, words):
        if not w:
            raise PluggenError(file, f.line, f"{name}: empty parameter")
        if w[0].text == "...":
            raise PluggenError(file, w[0].line, f"{name}: variable arguments cannot be forwarded")
        ctype, pname = _ctype(w, file)
        p = Param(pname, ctype, w[-1].line)
        notes = [t for t in g if t.kind == "comment"]
        if len(notes) != 1:
            raise PluggenError(file, p.line, f"{name}: {pname}: " + (
                "no annotation (write e.g. /* in:obj */ after the name)" if not notes
                else "more than one annotation comment"))
        _annotation(p, notes[0].text, file, wire)
        f.params.append(p)
    _check(f, file, wire)
    return f


def parse_header(text: str, file: str, name: str, plugin_id: int, wire: bool = False) -> Plugin:
    funcs: list[Function] = []
    seen: dict[str, int] = {}
    for stmt in _statements(tokenize(text, file), file):
        code = [t for t in stmt if t.kind != "comment"]
        if len(code) <= 1:
            continue
        if code[0].text in SKIP_STARTS or code[0].text == "extern" and code[1].text == '"C"':
            if code[0].text != "struct" or not any(t.text == "(" for t in code) or any(t.text == "{" for t in code):
                continue
        if not any(t.text == "(" for t in code):
            continue    # a variable or a forward declaration: nothing to forward
        f = _prototype(stmt, file, len(funcs), wire)
        if f.name in seen:
            raise PluggenError(file, f.line, f"{f.name} declared twice (first at line {seen[f.name]})")
        seen[f.name] = f.line
        funcs.append(f)
    if not funcs:
        raise PluggenError(file, 1, "no annotated prototypes found")
    return Plugin(name, plugin_id, file, funcs)
