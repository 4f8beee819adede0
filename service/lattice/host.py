"""What the service node assumes about the hosts that run compute nodes.

Every per-host fact (host names, /dev/shm, /proc) is read here, so that
running compute nodes on more than one host changes this module only.
"""
from __future__ import annotations

import socket
from pathlib import Path

from lattice.machine import Machine

# --- which host runs which compute node; the host's shared-memory directory ---

SHM_DIR = Path("/dev/shm")      # memory every process of a host can map (POSIX shm, tmpfs)


def node_host(m: Machine, node: int) -> str:
    """The host that runs compute node `node`: today this one, for every node.
    Ranks on one host share memory whichever compute node runs them."""
    if not 0 <= node < m.nodes:
        raise ValueError(f"compute node {node} is not in this machine of {m.nodes} nodes")
    return socket.gethostname()


def process_start(pid: int) -> int | None:
    """When process pid started (clock ticks since boot, /proc/PID/stat field
    22), or None if there is no such process: with the pid, it names one
    process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])
