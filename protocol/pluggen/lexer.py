"""Tokens of a C header with line numbers; comments kept (they carry the
annotations), preprocessor lines dropped (the header is compiled as it is by
the generated code, so the generator needs only its prototypes)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from pluggen.errors import PluggenError


@dataclass(frozen=True)
class Token:
    kind: str    # "id", "num", "punct", "comment", "str"
    text: str
    line: int


_TOKEN = re.compile(r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>[0-9][0-9A-Za-z_.]*)
  | (?P<punct>\.\.\.|[{}()\[\];,*=<>+\-/&|^!~?:.%])
  | (?P<space>[ \t\r\f\v]+|\n)
""", re.S | re.X)


def _strip_preprocessor(text: str) -> str:
    """Blank out # lines (with continuations), keeping line numbers."""
    out, cont = [], False
    for line in text.split("\n"):
        if cont or line.lstrip().startswith("#"):
            cont = line.endswith("\\")
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def tokenize(text: str, file: str) -> list[Token]:
    text = _strip_preprocessor(text)
    toks: list[Token] = []
    pos, line = 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise PluggenError(file, line, f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        if kind != "space":
            body = m.group()
            if kind == "comment":
                body = body[2:-2] if body.startswith("/*") else body[2:]
            toks.append(Token(kind, body.strip(), line))
        line += m.group().count("\n")
        pos = m.end()
    return toks
