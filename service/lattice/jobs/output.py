"""The ranks' stdout and stderr on their way to the run's own streams or to
the -o/-e files (lattice.jobs.outfiles).

Each rank's stream is cut at line ends, so ranks never interleave inside a
line: a line goes out whole, in one write, once its newline has come.  What
follows a rank's last newline is held, but never more than LINE_BOUND bytes:
a longer line (or binary output without newlines) goes out in pieces of at
least that size as it comes, so memory stays bounded and the cost stays
linear in the bytes.  With `--label` each line starts with "RANK: "; the
pieces of one long line carry it once, at the line's start.

Writes to one destination are not flushed one by one: the run calls
`drain()` before it waits for more, before it says anything itself, and a
write to another destination first flushes the last one, so the order in
which the ranks' bytes came is the order in which they leave.
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, BinaryIO

from lattice.transport import wire

if TYPE_CHECKING:           # -o/-e only: a run without them does not import it
    from lattice.jobs.outfiles import Routes

LINE_BOUND = 64 << 10       # bytes of one line held before it goes out in pieces


class Output:
    """Each rank's stdout and stderr, whole lines at a time."""

    def __init__(self, label: bool) -> None:
        self.label = label
        self.partial: dict[tuple[int, int], bytearray] = {}   # after a stream's last newline
        self.midline: set[tuple[int, int]] = set()            # streams inside a line cut in pieces
        self.files: Routes | None = None
        self.failed: str | None = None      # why a stream could not be written (the job then ends)
        self.failed_errno = 0
        self.dirty: tuple[int, BinaryIO] | None = None      # written, not yet flushed: (which, stream)

    def stream(self, rank: int, which: int) -> BinaryIO:
        f = self.files.stream(rank, which) if self.files is not None else None
        if f is not None:
            return f
        return sys.stdout.buffer if which == wire.STDOUT else sys.stderr.buffer

    def write(self, rank: int, which: int, data: bytes) -> None:
        """Bytes of one rank's stream: its complete lines go out now, the rest is held (up to LINE_BOUND)."""
        if not data:
            return
        key = (rank, which)
        end = data.rfind(b"\n") + 1
        held = self.partial.get(key)
        if not end:
            if held is None:
                held = self.partial[key] = bytearray()
            held += data
            if len(held) >= LINE_BOUND:
                del self.partial[key]
                self.emit(rank, which, bytes(held))
            return
        if held:
            del self.partial[key]
            held += memoryview(data)[:end]
            self.emit(rank, which, bytes(held))
        else:
            self.partial.pop(key, None)
            self.emit(rank, which, data if end == len(data) else data[:end])
        if end < len(data):
            rest = data[end:]
            if len(rest) >= LINE_BOUND:
                self.emit(rank, which, rest)
            else:
                self.partial[key] = bytearray(rest)

    def emit(self, rank: int, which: int, chunk: bytes) -> None:
        """chunk goes out as it is (labelled at each line start): it ends a line, or is a piece of a long one."""
        key = (rank, which)
        ends_line = chunk.endswith(b"\n")
        if self.label:
            prefix = f"{rank}: ".encode()
            body = chunk[:-1] if ends_line else chunk
            body = body.replace(b"\n", b"\n" + prefix)
            chunk = (b"" if key in self.midline else prefix) + body + (b"\n" if ends_line else b"")
        if ends_line:
            self.midline.discard(key)
        else:
            self.midline.add(key)
        out = self.stream(rank, which)
        if self.dirty is not None and self.dirty[1] is not out:
            self.drain()
        try:
            out.write(chunk)
            self.dirty = (which, out)
        except OSError as e:
            self.lost(which, out, e)

    def drain(self) -> None:
        """What was written goes out now (before the run waits, or speaks)."""
        if self.dirty is None:
            return
        which, out = self.dirty
        self.dirty = None
        try:
            out.flush()
        except OSError as e:
            self.lost(which, out, e)

    def lost(self, which: int, out: BinaryIO, e: OSError) -> None:
        """A stream cannot be written (a closed pipe, a full disk): what
        follows goes nowhere, and the run ends the job (Run.wait)."""
        name = "stdout" if which == wire.STDOUT else "stderr"
        if self.failed is None:
            self.failed = f"cannot write the job's {name}: {e.strerror or e}"
            self.failed_errno = e.errno or 0
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, out.fileno())     # nor will the interpreter's last flush complain
        os.close(null)
        try:
            out.flush()
        except OSError:
            pass

    def flush(self, rank: int | None = None) -> None:
        """A last line without its newline goes out as it is (a labelled one ends with one)."""
        keys = {k for k in (*self.partial, *self.midline) if rank is None or k[0] == rank}
        for key in sorted(keys):
            rest = bytes(self.partial.pop(key, b""))
            if self.label and (rest or key in self.midline):
                self.emit(*key, rest + b"\n")
            elif rest:
                self.emit(*key, rest)
            self.midline.discard(key)
        self.drain()
