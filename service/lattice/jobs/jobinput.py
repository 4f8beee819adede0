"""A job's standard input, as srun's --input and mpiexec give it.

`lattice run --stdin=0` (the default) gives the run's own standard input to
rank 0, `--stdin=RANK` to that rank, `--stdin=all` a copy to every rank,
`--stdin=none` to nobody (every rank reads end of file at once).  The run
reads its input while the job runs and sends it in LAT_CTL_STDIN messages
to the I/O nodes of the reading ranks, in order, never more than
LAT_STDIN_WINDOW bytes ahead of what each I/O node acknowledged
(LAT_CTL_STDIN_ACK): a job that does not read does not make the run read.
The end of the run's input is sent as LAT_STDIN_EOF (docs/protocol.md,
section 4.1).  With several I/O nodes reading, the input goes at the pace of
the slowest.
"""
from __future__ import annotations

import os
import selectors

from lattice.transport import wire
from lattice.transport.ciodclient import Ciod

NONE = "none"
ALL = "all"


def parse(value: str) -> int | None:
    """--stdin's value as the job message's reading rank: None (no input),
    wire.STDIN_ALL, or a rank; ValueError if it is none of these."""
    v = value.strip().lower()
    if v == NONE:
        return None
    if v == ALL:
        return int(wire.STDIN_ALL)
    if not v.isdigit():
        raise ValueError(f"bad --stdin {value!r}: all, none or a rank number")
    return int(v)


class Forward:
    """The run's input on its way to the I/O nodes of the reading ranks."""

    def __init__(self, job: int, fd: int, readers: list[Ciod]) -> None:
        self.job, self.fd = job, fd
        self.held = {c: 0 for c in readers}     # bytes each I/O node has not acknowledged
        self.done = not readers                 # end of input sent, or nobody left to read it
        self.polled = False                     # the descriptor is in the selector
        self.always_ready = False               # a file or /dev/null: epoll refuses them, reads never wait

    def wanted(self) -> bool:
        """Whether a read now could be sent on at once."""
        return not self.done and all(h + wire.STDIN_MAX <= wire.STDIN_WINDOW for h in self.held.values())

    def watch(self, sel: selectors.BaseSelector) -> bool:
        """Keep the input in sel while it is wanted; True if it is ready
        without waiting (a regular file or /dev/null)."""
        want = self.wanted()
        if want and not self.polled and not self.always_ready:
            try:
                sel.register(self.fd, selectors.EVENT_READ, self)
                self.polled = True
            except PermissionError:
                self.always_ready = True
            except (OSError, ValueError):
                self.end()              # no input to read (closed): end of file for the ranks
                return False
        elif not want and self.polled:
            sel.unregister(self.fd)
            self.polled = False
        return want and self.always_ready

    def pump(self) -> None:
        """Read what is there and send it on; at end of input, say so."""
        try:
            data = os.read(self.fd, int(wire.STDIN_MAX))
        except BlockingIOError:
            return
        except OSError:
            data = b""                  # a terminal hung up, a closed descriptor: end of input
        self.send(data, 0 if data else int(wire.STDIN_EOF))

    def send(self, data: bytes, flags: int) -> None:
        msg = wire.STDIN.pack(self.job, len(data), flags) + data
        for c in list(self.held):
            try:
                c.send(wire.CTL_STDIN, msg)
                self.held[c] += len(data)
            except OSError:
                self.gone(c)            # its loss shows as a closed connection
        if flags & wire.STDIN_EOF:
            self.done = True

    def end(self) -> None:
        """No more input: the readers get end of file."""
        if not self.done:
            self.send(b"", int(wire.STDIN_EOF))

    def acked(self, c: Ciod, body: bytes) -> None:
        job, nbytes, _ = wire.STDIN.unpack_from(body)
        if job == self.job and c in self.held:
            self.held[c] = max(0, self.held[c] - nbytes)

    def gone(self, c: Ciod) -> None:
        """An I/O node ended the job (or was lost): it reads no more."""
        self.held.pop(c, None)
        if not self.held:
            self.done = True

    def close(self, sel: selectors.BaseSelector) -> None:
        if self.polled:
            sel.unregister(self.fd)
            self.polled = False
