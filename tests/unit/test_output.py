"""The ranks' output in `lattice run` (lattice.jobs.output.Output, issue 27).

Before, a stream's bytes after its last newline were held whole and joined
again with every chunk (a rank writing binary output without newlines cost
quadratic time and held all of it), and each chunk was flushed on its own.
Now what is held is bounded (LINE_BOUND), a longer line goes out in pieces
labelled once at its start, and writes are flushed once per batch (drain),
in the order the ranks' bytes came.
"""
from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import BinaryIO, cast

from lattice.jobs.job import Output
from lattice.jobs.outfiles import Routes
from lattice.transport import wire
from lattice.transport.ciodclient import Ciod


class Sink(io.RawIOBase):
    """A raw stream that records each write (name, bytes) in a shared log."""

    def __init__(self, name: str, log: list[tuple[str, bytes]]) -> None:
        self.name, self.log = name, log

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:       # type: ignore[override]
        self.log.append((self.name, bytes(b)))
        return len(b)


class Counted(io.BufferedWriter):
    """A buffered stream that counts its flushes."""
    flushes = 0

    def flush(self) -> None:
        Counted.flushes += 1
        super().flush()


def routed(label: bool, streams: dict[tuple[int, int], BinaryIO]) -> Output:
    o = Output(label)
    o.files = Routes()
    o.files.route.update(streams)
    return o


def written(log: list[tuple[str, bytes]], name: str | None = None) -> bytes:
    return b"".join(b for n, b in log if name is None or n == name)


def test_output_without_newlines_is_held_bounded_and_goes_out_as_it_comes() -> None:
    from lattice.jobs.output import LINE_BOUND
    log: list[tuple[str, bytes]] = []
    out = io.BufferedWriter(Sink("out", log))
    o = routed(False, {(0, wire.STDOUT): cast(BinaryIO, out)})
    data = bytes(random.Random(1).choices(b"abcdef\0\xff", k=1 << 20))      # no newline
    for i in range(0, len(data), 4096):
        o.write(0, wire.STDOUT, data[i:i + 4096])
        o.drain()
        assert i + 4096 - len(written(log)) < LINE_BOUND + 4096      # never more than the bound held
    o.flush()
    assert written(log) == data


def test_a_long_labelled_line_is_labelled_once_at_its_start() -> None:
    log: list[tuple[str, bytes]] = []
    out = io.BufferedWriter(Sink("out", log))
    o = routed(True, {(3, wire.STDOUT): cast(BinaryIO, out)})
    for _ in range(50):
        o.write(3, wire.STDOUT, b"a" * 4000)
    o.drain()
    assert written(log).startswith(b"3: " + b"a" * 65536)       # out before its newline came
    o.write(3, wire.STDOUT, b"a\nb\nc")
    o.flush()
    assert written(log) == b"3: " + b"a" * 200001 + b"\n3: b\n3: c\n"


def test_lines_stay_whole_in_order_and_are_flushed_per_batch_not_per_chunk() -> None:
    """Two ranks' stdout and stderr into two streams of one log: every line
    whole and labelled, each rank's lines in order, the streams' bytes in
    the order they came, and one flush per drain rather than per write."""
    log: list[tuple[str, bytes]] = []
    out, err = Counted(Sink("out", log)), Counted(Sink("err", log))
    o = routed(True, {(r, w): cast(BinaryIO, out if w == wire.STDOUT else err)
                      for r in (0, 1) for w in (wire.STDOUT, wire.STDERR)})
    rng = random.Random(2)
    sent: dict[tuple[int, int], list[bytes]] = {}
    pending = {(r, w): b"".join(b"r%d w%d line %05d %s\n" % (r, w, n, b"x" * rng.randrange(200)) for n in range(500))
               for r in (0, 1) for w in (wire.STDOUT, wire.STDERR)}
    Counted.flushes = 0
    writes, switches, last = 0, 0, -1
    while any(pending.values()):
        key = rng.choice([k for k, v in pending.items() if v])
        for _ in range(rng.randrange(1, 20)):      # a run of chunks of one rank's stream
            n = rng.randrange(1, 3000)
            chunk, pending[key] = pending[key][:n], pending[key][n:]
            sent.setdefault(key, []).append(chunk)
            o.write(*key, chunk)
            writes += 1
        switches += key[1] != last
        last = key[1]
    o.flush()
    # a flush when the destination changes (the order kept) and one at the end: not one a write
    assert Counted.flushes <= switches + 1 < writes // 4, (Counted.flushes, switches, writes)
    for name, which in (("out", wire.STDOUT), ("err", wire.STDERR)):
        lines = written(log, name).splitlines(keepends=True)
        for r in (0, 1):
            mine = [ln[len(b"%d: " % r):] for ln in lines if ln.startswith(b"%d: " % r)]
            assert b"".join(mine) == b"".join(sent[(r, which)])
        assert all(ln.startswith((b"0: r0 w%d" % which, b"1: r1 w%d" % which)) for ln in lines)



class Reader:
    """An I/O node's CONTROL connection as jobinput.Forward sees it: what it was sent."""

    def __init__(self) -> None:
        self.got = bytearray()
        self.messages = 0

    def send(self, typ: int, payload: bytes) -> int:
        assert typ == wire.CTL_STDIN and len(payload) - wire.STDIN.size <= 64 << 10
        self.got += payload[wire.STDIN.size:]
        self.messages += 1
        return self.messages


def test_the_run_keeps_a_mib_of_input_on_its_way_to_each_io_node(tmp_path: Path) -> None:
    """stdin goes ahead of the acknowledgements by a MiB per I/O node (it was
    128 KiB: a round trip per 128 KiB held cnk's input to ~18 MB/s), in
    messages of at most 64 KiB, no further; on as acknowledgements come."""
    from lattice.jobs import jobinput
    data = random.Random(3).randbytes(3 << 20)
    (tmp_path / "in").write_bytes(data)
    fd = os.open(tmp_path / "in", os.O_RDONLY)
    try:
        reader = Reader()
        fwd = jobinput.Forward(9, fd, [cast(Ciod, reader)])
        while fwd.wanted():
            fwd.pump()
        assert (1 << 20) - (64 << 10) < len(reader.got) <= 1 << 20
        fwd.acked(cast(Ciod, reader), wire.STDIN.pack(9, len(reader.got), 0))
        while fwd.wanted():
            fwd.pump()
        assert (2 << 20) - (64 << 10) < len(reader.got) <= 2 << 20
        assert bytes(reader.got) == data[:len(reader.got)]
    finally:
        os.close(fd)
