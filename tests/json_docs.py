"""The JSON schemas docs/cli.md documents ("JSON output"), read from its
tables, and a check that a document has exactly the documented keys with
the documented types: the tests hold the docs and the code to each other."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def schemas() -> dict[str, dict[str, str]]:
    """{"lattice.jobs/1": {"schema": "string", "jobs[].id": "int", ...}}"""
    text = DOC.read_text()
    section = text[text.index("\n## JSON output\n"):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    out: dict[str, dict[str, str]] = {}
    name = None
    for line in section.splitlines():
        m = re.match(r"#### `(lattice\.[a-z.]+/\d+)`", line)
        if m:
            name = m[1]
            out[name] = {}
            continue
        m = re.match(r"\| `([a-z_.\[\]]+)` \| ([a-z ]+) \|", line)
        if m and name:
            out[name][m[1]] = m[2].strip()
    return out


def type_ok(value: Any, kind: str) -> bool:
    if kind.endswith(" or null"):
        return value is None or type_ok(value, kind[:-len(" or null")])
    if kind.startswith("list of "):
        return isinstance(value, list) and all(type_ok(v, kind[len("list of "):]) for v in value)
    return {"string": lambda v: isinstance(v, str), "time": lambda v: isinstance(v, str) and bool(TIME.fullmatch(v)),
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool), "bool": lambda v: isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "list": lambda v: isinstance(v, list), "object": lambda v: isinstance(v, dict),
            "map": lambda v: isinstance(v, dict)}[kind](value)


def paths(doc: Any, documented: dict[str, str], at: str = "") -> dict[str, list[Any]]:
    """Every key path of doc (`X[].k` for key k of the items of list X) with
    its values; a map's keys are data, not paths."""
    out: dict[str, list[Any]] = {}
    if isinstance(doc, dict) and not documented.get(at, "").startswith("map"):
        for k, v in doc.items():
            p = f"{at}.{k}" if at else k
            out.setdefault(p, []).append(v)
            for q, vs in paths(v, documented, p).items():
                out.setdefault(q, []).extend(vs)
    elif isinstance(doc, list) and documented.get(at, "").startswith("list") and "list of" not in documented[at]:
        for item in doc:
            for q, vs in paths(item, documented, at + "[]").items():
                out.setdefault(q, []).extend(vs)
    return out


def check(doc: Any, complete: bool = True) -> str:
    """Assert doc has the documented keys of its schema, each value of the
    documented type; complete: every documented key is present (the state
    fills every list).  Returns the schema name."""
    name = doc["schema"]
    documented = schemas()[name]
    found = paths(doc, documented)
    extra = set(found) - set(documented)
    assert not extra, f"{name}: keys not in docs/cli.md: {sorted(extra)}"
    if complete:
        missing = set(documented) - set(found)
        assert not missing, f"{name}: documented keys missing: {sorted(missing)}"
    for p, values in found.items():
        bad = [v for v in values if not type_ok(v, documented[p])]
        assert not bad, f"{name}: {p} is documented as {documented[p]}, got {bad[:3]}"
    return str(name)
