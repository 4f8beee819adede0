"""docs/architecture.md "Differences from native" and the conformance
test's KNOWN entries (tests/conformance_known.py, issue 28 item 4) agree:
every difference the test expects is a row of the table, named by the call
as the program's line names it, with an answer other than "as native" for
each kernel that differs and "as native" for a kernel that does not."""
from __future__ import annotations

from pathlib import Path

from conformance_known import KNOWN

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
COLUMNS = {"cnk": 2, "linux": 3}       # the table's column of each kernel's answer


def table() -> list[list[str]]:
    text = DOC.read_text()
    start = text.index("### Differences from native")
    end = text.index("\n### ", start + 1)
    rows = [line for line in text[start:end].splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in row.strip().strip("|").split(" | ")] for row in rows]
    assert cells[0][:4] == ["what the program does", "natively", "under cnk", "in Linux mode"], cells[0]
    return cells[2:]


def call(line: str) -> str:
    return line.partition(" = ")[0]


def test_every_known_difference_is_a_row_for_its_kernels() -> None:
    rows = table()
    # a difference by the call of its native line (or of the kernel's, where the two name it apart)
    names = {(call(k.native), call(k.got)) for kn in KNOWN.values() for k in kn}
    for kernel, column in COLUMNS.items():
        differs = {call(k.native) for k in KNOWN[kernel]}
        for name in names:
            named = [r for r in rows if any(f"`{n}`" in r[0] for n in name)]
            assert named, f"docs/architecture.md \"Differences from native\" has no row for `{name[0]}`"
            answer = named[0][column]
            if name[0] in differs:
                assert answer != "as native", f"`{name[0]}` differs under {kernel}, the table says as native"
            else:
                assert answer == "as native", f"`{name[0]}` is as native under {kernel}, the table says {answer!r}"


def test_the_runs_without_the_mailbox_expect_the_same() -> None:
    assert KNOWN["cnk-socket"] == KNOWN["cnk"] and KNOWN["linux-socket"] == KNOWN["linux"]


def test_every_row_gives_a_reason_and_where_it_is_checked() -> None:
    for r in table():
        assert len(r) == 6 and all(r), r
        assert len(r[4]) > 20, f"no reason given: {r}"
