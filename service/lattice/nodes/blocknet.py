"""IP through the I/O node, and the block's /dev/shm, on one host (docs/architecture.md,
"IP through the I/O node"; docs/security.md, "Nodes reach the world, not the host").

At boot the host agent gives its part of the block:

- a *router* network namespace `lat-<hash>` (the I/O node's; <hash> is the block's container
  hash, lattice.nodes.container.name): a bridge `br0` holding the gateway address (`br1`... for each
  further PORTS nodes: a bridge takes at most 1023 ports), an uplink veth pair
  (`up0` inside, `lu<hash>` in the host's namespace), IPv4 forwarding on;
- per compute node a namespace `lat-<hash>-n<k>` with loopback up and one veth, `eth0`, whose
  other end is a port of the bridge; its address and a default route via the gateway;
- a private subnet from POOL (10.64.0.0/10) that no other block on the host has, written down in
  BOOK under a lock, as the huge page book (lattice.nodes.hugepages) is;
- nft tables: in the host's namespace `inet lattice_<hash>` (nodes may not reach any address of the
  host, any block's subnet, the networks the host is on or the block's other hosts; the subnet is
  masqueraded out; nothing starts a connection into the block), in the router's `inet lattice`
  (it serves nothing; it forwards IPv4 out and only replies in);
- a tmpfs for /dev/shm under BOOK/shm/<hash> (mode 1777, the size of the host's /dev/shm);
- a System V IPC namespace bound on BOOK/ipc/<hash> and a pid namespace bound on BOOK/pid/<hash>,
  whose pid 1 (lattice-pidns-init, under `unshare --fork`) lives as long as the network: the
  block's nodes on this host share them, so MPI's shared-memory and single-copy transports work
  between nodes (a node's own pid namespace hid its ranks' pids from the others').

Each cnode's personality gets `"sandbox": {netns, shm, ipcns, pidns, ifname, address, gateway}`;
cnode puts the job's processes in those namespaces and bind-mounts the directory on their /dev/shm.  A block
with parts on several hosts gets routes between them (`Net.peer`, when the booter sends the
parts' subnets before "commit").

All of a block's namespaces and links are made by one `ip -batch` in the host's namespace and one
in the router's; each node's address and route are set from this process over netlink
(lattice.nodes.rtnl): the processes started do not grow with the nodes.

The host's ARP table limits are raised for the blocks' nodes (_neigh_fit).  The host's own
net.ipv4.ip_forward is set to 1 while a block is up in its namespace (the
uplinks are routed out) and given back its old value when the last one goes.  `down` removes
everything; a block whose agent was killed outright is swept by the next boot on the host (and by
`lattice free`): the book names its agent (pid and start time), and an entry whose agent is gone
is torn down.
"""
from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from lattice import procs

POOL = "10.64.0.0/10"           # block subnets come from here (LATTICE_BLOCKNET_POOL)
BRIDGES, UPLINK, IFNAME = "br*", "up0", "eth0"   # the router's bridges br0, br1...: nft's wildcard for them
MIN_HOST_BITS = 8               # a block's subnet is at least a /24
PORTS = 1000                    # nodes a bridge: the kernel takes at most 1023 ports (BR_MAX_PORTS)
PORTS_BITS = 10                 # a bridge's subnet when a part has several: a /22
NETNS_DIR = Path("/run/netns")
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21
TOOL_WAIT = 60.0                # a failure guard on ip and nft: seconds without using cpu
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2

Net4 = ipaddress.IPv4Network
Addr4 = ipaddress.IPv4Address
Iface4 = ipaddress.IPv4Interface


def book_dir() -> Path:
    """Host-wide, as the namespaces are: root's /run/lattice (LATTICE_BLOCKNET_BOOK)."""
    return Path(os.environ.get("LATTICE_BLOCKNET_BOOK", "/run/lattice"))


def pool() -> Net4:
    return ipaddress.IPv4Network(os.environ.get("LATTICE_BLOCKNET_POOL", POOL))


def hash_of(container: str) -> str:
    """The block's hash on this host: the tail of its container name (lattice/BLOCK-HASH)."""
    return container.rsplit("-", 1)[-1]


@dataclass(frozen=True)
class Plan:
    """One block's network on one host: names and addresses, no state."""
    hash: str
    block: str
    net: Net4                   # the allocation: the nodes' subnet, then the uplink's /30
    nodes: tuple[int, ...]      # compute node indexes on this host
    shm_root: Path

    @property
    def router(self) -> str:
        return f"lat-{self.hash}"

    def node_ns(self, k: int) -> str:
        return f"lat-{self.hash}-n{k}"

    @property
    def uplink(self) -> str:
        return f"lu{self.hash}"     # 14 characters: a link name has at most 15

    @property
    def table(self) -> str:
        return f"lattice_{self.hash}"

    @property
    def subnet(self) -> Net4:
        """The nodes' network: every bridge's subnet is in it."""
        return next(self.net.subnets(prefixlen_diff=1))

    @property
    def bridges(self) -> int:
        return max(1, -(-len(self.nodes) // PORTS))

    def lan(self, b: int) -> Net4:
        """Bridge b's subnet: the whole nodes' network, or its b-th /22 when there are several."""
        if self.bridges == 1:
            return self.subnet
        return ipaddress.IPv4Network(f"{self.subnet[b << PORTS_BITS]}/{32 - PORTS_BITS}")

    def gateway(self, b: int) -> Iface4:
        """The router's address on bridge b: its nodes' gateway."""
        lan = self.lan(b)
        return ipaddress.IPv4Interface(f"{lan[1]}/{lan.prefixlen}")

    def bridge_of(self, k: int) -> int:
        return self.nodes.index(k) // PORTS

    def address(self, k: int) -> Iface4:
        b, i = divmod(self.nodes.index(k), PORTS)
        lan = self.lan(b)
        return ipaddress.IPv4Interface(f"{lan[2 + i]}/{lan.prefixlen}")

    @property
    def link(self) -> tuple[Iface4, Iface4]:
        """The uplink's /30: the host's end, the router's end."""
        base = list(self.net.subnets(prefixlen_diff=1))[1].network_address
        net = ipaddress.IPv4Network(f"{base}/30")
        return ipaddress.IPv4Interface(f"{net[1]}/30"), ipaddress.IPv4Interface(f"{net[2]}/30")

    @property
    def shm(self) -> Path:
        return self.shm_root / self.hash

    @property
    def ipcns(self) -> Path:
        """The block's IPC namespace on this host, bind-mounted on a file (ipc_path)."""
        return ipc_path(self.hash, self.shm_root)

    @property
    def pidns(self) -> Path:
        """The block's pid namespace on this host, bind-mounted on a file (pid_path)."""
        return pid_path(self.hash, self.shm_root)

    def sandbox(self, k: int) -> dict[str, str]:
        """The personality's "sandbox" object for compute node k."""
        return {"netns": str(NETNS_DIR / self.node_ns(k)), "shm": str(self.shm), "ipcns": str(self.ipcns),
                "pidns": str(self.pidns), "ifname": IFNAME,
                "address": str(self.address(k)), "gateway": str(self.gateway(self.bridge_of(k)).ip)}


def prefix_for(nodes: int) -> int:
    """The allocation's prefix for so many nodes: the nodes' subnet holds network, gateway, the
    nodes and broadcast, at least a /24, or a /22 for each bridge of PORTS nodes when there are
    more; the allocation is twice that (the uplink's /30 in the rest)."""
    bridges = max(1, -(-nodes // PORTS))
    bits = max(MIN_HOST_BITS, (nodes + 3 - 1).bit_length()) if bridges == 1 else \
        PORTS_BITS + (bridges - 1).bit_length()
    return 32 - bits - 1


def allocate(prefix: int, taken: list[Net4], within: Net4) -> Net4:
    """The first network of that prefix in within that overlaps none taken."""
    if prefix < within.prefixlen:
        raise ValueError(f"the block network pool {within} is too small for a /{prefix}")
    for cand in within.subnets(new_prefix=prefix):
        if not any(cand.overlaps(t) for t in taken):
            return cand
    raise ValueError(f"the block network pool {within} has no free /{prefix} left "
                     f"({len(taken)} in use: LATTICE_BLOCKNET_POOL)")


# ---- what is sent to ip and nft ----

def host_batch(p: Plan) -> str:
    """`ip -batch` in the host's namespace: every namespace and link of the block, the uplink up."""
    host_end, router_end = p.link
    lines = [f"netns add {p.router}", *(f"netns add {p.node_ns(k)}" for k in p.nodes),
             f"link add {p.uplink} type veth peer name {UPLINK} netns {p.router}",
             *(f"link add br{b} netns {p.router} type bridge" for b in range(p.bridges)),
             *(f"link add n{k} netns {p.router} type veth peer name {IFNAME} netns {p.node_ns(k)}" for k in p.nodes),
             f"addr add {host_end} dev {p.uplink}", f"link set {p.uplink} up",
             f"route add {p.subnet} via {router_end.ip} dev {p.uplink}"]
    return "\n".join(lines) + "\n"


def router_batch(p: Plan) -> str:
    """`ip -batch` in the router's namespace: the bridges with their ports and gateway addresses,
    the uplink, a default route to the host."""
    host_end, router_end = p.link
    lines = ["link set lo up",
             *(f"addr add {p.gateway(b)} dev br{b}\nlink set br{b} up" for b in range(p.bridges)),
             *(f"link set n{k} master br{p.bridge_of(k)} up" for k in p.nodes),
             f"addr add {router_end} dev {UPLINK}", f"link set {UPLINK} up",
             f"route add default via {host_end.ip} dev {UPLINK}"]
    return "\n".join(lines) + "\n"


def _set(nets: list[Net4]) -> str:
    return "{ " + ", ".join(str(n) for n in ipaddress.collapse_addresses(nets)) + " }"


REJECT = "reject with icmpx type admin-prohibited"     # the node's connect fails at once: EHOSTUNREACH


def host_rules(p: Plan, deny: list[Net4]) -> str:
    """The host's table for the block (nft -f): a node reaches no address of the host (input:
    every local address, whatever the interface), no block's subnet and nothing in deny
    (forward); what comes up its uplink from its subnet is masqueraded out (only that: with
    br_netfilter loaded, as Docker loads it, a host's bridges carry other hosts' packets through
    these hooks, and a testbed host's part of a block may have this block's subnet); only
    replies come in."""
    up = p.uplink
    return f"""table inet {p.table} {{
	chain input {{
		type filter hook input priority filter - 5; policy accept;
		iifname "{up}" ct state established,related accept
		iifname "{up}" {REJECT}
	}}
	chain forward {{
		type filter hook forward priority filter - 5; policy accept;
		iifname "{up}" ip daddr {_set([pool(), *deny])} {REJECT}
		iifname "{up}" meta nfproto ipv4 accept
		iifname "{up}" drop
		oifname "{up}" ct state established,related accept
		oifname "{up}" {REJECT}
	}}
	chain postrouting {{
		type nat hook postrouting priority srcnat; policy accept;
		iifname "{up}" ip saddr {p.subnet} oifname != "{up}" masquerade
	}}
}}
"""


def router_rules() -> str:
    """The router's table (nft -f, in its namespace): it serves nothing; nodes talk to each
    other over their bridge (and through the router between bridges), IPv4 goes out the uplink,
    only replies come back in."""
    return f"""table inet lattice {{
	chain input {{
		type filter hook input priority filter; policy drop;
		iif "lo" accept
		ct state established,related accept
		meta l4proto icmp accept
		{REJECT}
	}}
	chain forward {{
		type filter hook forward priority filter; policy drop;
		iifname "{BRIDGES}" oifname "{BRIDGES}" accept
		iifname "{BRIDGES}" oifname "{UPLINK}" meta nfproto ipv4 accept
		iifname "{UPLINK}" oifname "{BRIDGES}" ct state established,related accept
	}}
}}
"""


def teardown_batch(hash_: str, namespaces: list[str], uplink: bool) -> str:
    """`ip -force -batch`: the uplink (its peer goes with it) and the block's namespaces (their
    links go with them)."""
    lines = [f"link del lu{hash_}"] if uplink else []
    lines += [f"netns del {n}" for n in namespaces]
    return "\n".join(lines) + "\n" if lines else ""


def peer_texts(p: Plan, peers: dict[Net4, str]) -> tuple[str, str, str]:
    """The block's parts on other hosts (their subnet -> their host's address) made reachable:
    (`ip -batch` in the host's namespace: a route to each; nft for the host's table: forwarded
    to and from them, not masqueraded; nft for the router's: let their connections in).  Inserted
    at the chains' heads, before the pool's reject."""
    nets = _set(list(peers))
    up = p.uplink
    routes = "".join(f"route add {net} via {addr}\n" for net, addr in sorted(peers.items()))
    host = (f'insert rule inet {p.table} forward iifname "{up}" ip daddr {nets} accept\n'
            f'insert rule inet {p.table} forward ip saddr {nets} oifname "{up}" accept\n'
            f"insert rule inet {p.table} postrouting ip saddr {p.subnet} ip daddr {nets} accept\n")
    router = f'insert rule inet lattice forward iifname "{UPLINK}" oifname "{BRIDGES}" ip saddr {nets} accept\n'
    return routes, host, router


# ---- running them ----

progress: Callable[[int], None] | None = None     # told the tools' cpu ticks as they work (the host agent)


def _ticks(pid: int) -> int:
    """pid's user + system cpu ticks so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        return 0


def _waiting(pid: int) -> str:
    """Where pid waits, for the error that gives up on it: its state and kernel wait channel."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip() or "-"
    except (OSError, IndexError):
        return ""
    return f" (state {state}, waiting in {wchan})"


def _run(argv: list[str], text: str) -> None:
    """argv with text on its standard input.  A failure guard that follows
    progress: the tool is given up on after TOOL_WAIT s in which it used no
    cpu, not after a fixed total (a block of 8,192 nodes on a loaded host
    takes ip minutes); each second it worked is told to `progress`."""
    import tempfile
    try:
        with tempfile.TemporaryFile() as batch:     # a file, not a pipe: nothing of ours to keep feeding
            batch.write(text.encode())
            batch.seek(0)
            p = subprocess.Popen(argv, stdin=batch, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise RuntimeError(f"{' '.join(argv)}: {e}") from e
    worked, moved = 0, time.monotonic()
    while True:
        try:
            _, err = p.communicate(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            ticks = _ticks(p.pid)
            if ticks != worked:
                worked, moved = ticks, time.monotonic()
                if progress is not None:
                    progress(ticks)
            elif time.monotonic() - moved > TOOL_WAIT:
                where = _waiting(p.pid)
                p.kill()
                p.communicate()
                raise RuntimeError(f"{' '.join(argv)}: no progress for {TOOL_WAIT:g} s{where}") from None
    if p.returncode:
        why = " ".join(err.split())[:400] or f"exit status {p.returncode}"
        raise RuntimeError(f"{' '.join(argv)}: {why}")


def _capabilities() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def unable() -> str | None:
    """Why this agent cannot make a block network here, or None if it can."""
    if os.environ.get("LATTICE_BLOCKNET", "on") == "off":
        return "LATTICE_BLOCKNET=off"
    caps = _capabilities()
    missing = [n for n, bit in (("CAP_NET_ADMIN", CAP_NET_ADMIN), ("CAP_SYS_ADMIN", CAP_SYS_ADMIN))
               if not caps >> bit & 1]
    if missing:
        return f"the agent lacks {' and '.join(missing)} (run as root)"
    tools = [t for t in ("ip", "nft") if shutil.which(t) is None]
    if tools:
        return f"{' and '.join(tools)} not found (Debian packages iproute2, nftables)"
    return None


def _netns_id() -> int:
    """This process's network namespace (the host's, as far as this agent is concerned)."""
    return os.stat("/proc/self/ns/net").st_ino


def _forwarding(value: str | None = None) -> str:
    path = Path("/proc/sys/net/ipv4/ip_forward")
    if value is not None:
        path.write_text(value + "\n")
    return path.read_text().strip()


NEIGH = Path("/proc/sys/net/ipv4/neigh/default")    # the ARP table's limits: one table for all namespaces


def _neigh_fit(book: dict[str, Any]) -> list[str]:
    """The host's ARP table sized for the blocks in the book: the kernel keeps one table for every
    network namespace, 1024 entries at most by default, and a block of n nodes that all talk to
    each other (MPI) fills n * n of it; past the limit a node's connect fails with "No route to
    host".  gc_thresh2 and 3 are raised by that much over their values before the first block
    (kept in the book, written back when the last block goes).  In a network namespace other than
    the kernel's first (a container as host, the testbed's hosts) they are not there: the table is
    the kernel's and sized from its first namespace.  Problems, one line each."""
    if not (NEIGH / "gc_thresh3").exists():
        return []
    need = sum(int(e.get("nodes", 0)) ** 2 + int(e.get("nodes", 0)) for e in book["blocks"].values())
    old = book.get("neigh")
    try:
        if need == 0:
            if old is not None:
                for name, value in old.items():
                    (NEIGH / name).write_text(f"{value}\n")
                book.pop("neigh")
            return []
        if old is None:
            old = book["neigh"] = {n: int((NEIGH / n).read_text()) for n in ("gc_thresh2", "gc_thresh3")}
        for name, value in old.items():
            (NEIGH / name).write_text(f"{value + need}\n")
    except (OSError, ValueError) as e:
        return [f"cannot size the host's ARP table for the blocks' nodes ({NEIGH}): {e}; a job whose ranks "
                f"talk to many nodes may fail to connect (No route to host)"]
    return []


def _route_table() -> list[tuple[str, Net4, bool]]:
    """This namespace's IPv4 main table from /proc/net/route: (interface, network, via a gateway)
    for each route but the default ones."""
    out: list[tuple[str, Net4, bool]] = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        f = line.split()
        try:
            dest, mask = (socket.inet_ntoa(int(x, 16).to_bytes(4, "little")) for x in (f[1], f[7]))
            net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
            gateway = int(f[2], 16) != 0
        except (IndexError, ValueError, OSError):
            continue
        if net.prefixlen:
            out.append((f[0], net, gateway))
    return out


def _routes() -> list[Net4]:
    """The IPv4 routes of this namespace's main table (their networks), but the default."""
    return [net for _, net, _ in _route_table()]


def _shm_size() -> int:
    """The host's /dev/shm's size (a block gets as much), else half the memory."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_blocks:
            return st.f_blocks * st.f_frsize
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2


_libc = ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(path: Path, size: int) -> None:
    opts = f"mode=1777,size={size}".encode()
    if _libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
        e = ctypes.get_errno()
        raise RuntimeError(f"cannot mount a tmpfs on {path}: {os.strerror(e)}")


def _mounted(path: Path) -> bool:
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    want = str(path)
    return any(line.split()[4] == want for line in text.splitlines() if len(line.split()) > 4)


def ipc_path(hash_: str, shm_root: Path) -> Path:
    """Where block hash_'s IPC namespace is kept: beside the shared memory directories, in root's
    private directory.  One for the block's nodes on this host, so UCX's and MPI's shared-memory
    transports, which require their peers in their own IPC namespace, work between nodes."""
    return shm_root.parent / "ipc" / hash_


def _make_ipcns(path: Path) -> None:
    """A new IPC namespace kept on path (util-linux unshare binds it there)."""
    from lattice import safepath
    os.close(safepath.open_private_dir(path.parent, path.parent.parent))
    path.touch(mode=0o600, exist_ok=True)
    _run(["unshare", f"--ipc={path}", "true"], "")


def pid_path(hash_: str, shm_root: Path) -> Path:
    """Where block hash_'s pid namespace is kept, beside its IPC namespace.  One for the block's
    nodes on this host (one job at a time runs on a block: lattice.state.busy), so a rank reaches
    another node's rank by its pid, as single-copy transfers between processes (UCX's cma, Open
    MPI's vader: process_vm_readv) need."""
    return shm_root.parent / "pid" / hash_


def _make_pidns(path: Path, init: Path) -> subprocess.Popen[bytes]:
    """A new pid namespace kept on path, its pid 1 init (compute/pidns/init.c) running until
    _end_pidns: the process of util-linux's unshare that waits for it."""
    from lattice import safepath
    os.close(safepath.open_private_dir(path.parent, path.parent.parent))
    path.touch(mode=0o600, exist_ok=True)
    try:        # its own session: a signal to the agent's terminal does not reach it
        p = subprocess.Popen(["unshare", f"--pid={path}", "--fork", "--kill-child", str(init)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    except OSError as e:
        raise RuntimeError(f"cannot start the block's pid namespace: {e}") from e
    assert p.stdout is not None and p.stderr is not None
    ready = p.stdout.readline()     # the init's line; "" if unshare or the init failed
    p.stdout.close()
    if ready != b"ready\n":
        p.kill()
        err = p.stderr.read().decode(errors="replace")
        p.wait()
        p.stderr.close()
        raise RuntimeError(f"cannot start the block's pid namespace: {' '.join(err.split())[:400] or 'no reason given'}")
    p.stderr.close()
    return p


def _end_pidns(path: Path) -> None:
    """The pid 1 of the namespace bound on path killed (SIGKILL, the one signal it takes from the
    host), and with it every process left in the namespace."""
    try:
        ino = os.stat(path).st_ino
    except OSError:
        return
    for d in _names(Path("/proc")):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}/ns/pid").st_ino != ino:
                continue
            status = Path(f"/proc/{d}/status").read_text()
        except OSError:
            continue
        nspid = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), [])
        if nspid[-1:] == ["1"]:
            try:
                os.kill(int(d), signal.SIGKILL)
            except OSError:
                pass


def _unmount(path: Path) -> str | None:
    """path unmounted (lazily: a process still holding a file keeps its memory until it lets go)
    and removed (a directory, or the file a namespace was bound on); a problem as a line."""
    while _mounted(path):
        if _libc.umount2(str(path).encode(), MNT_DETACH) != 0:
            e = ctypes.get_errno()
            return f"cannot unmount {path}: {os.strerror(e)}"
    try:
        path.rmdir() if path.is_dir() else path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        return f"cannot remove {path}: {e.strerror}"
    return None


# ---- the book ----

def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fd, 0o600)
        fh.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


@contextmanager
def locked(home: Path) -> Iterator[dict[str, Any]]:
    """The book ({"blocks": {hash: entry}, "forwarding": {netns id: old value}}), exclusively,
    in a 0700 directory of root's that no other user can plant (lattice.safepath); SIGINT and
    SIGTERM held back while it is changed."""
    from lattice import safepath
    from lattice.errors import LatticeError
    base = home.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    try:
        d = safepath.open_private_dir(home, base)
    except LatticeError as e:
        raise RuntimeError(e.message) from e
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        lock = os.open("blocknet.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = home / "blocknet.json"
            book = _read(path)
            book.setdefault("blocks", {})
            book.setdefault("forwarding", {})
            try:
                yield book
            finally:
                _write(path, book)
        finally:
            os.close(lock)
    finally:
        os.close(d)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _alive(entry: dict[str, Any]) -> bool:
    pid, start = entry.get("pid"), entry.get("start")
    return isinstance(pid, int) and start is not None and procs.ticks(pid) == start


def _namespaces(hash_: str) -> list[str]:
    """The namespaces of the block under /run/netns: its nodes', then its router's."""
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return []
    nodes = sorted(n for n in names if n.startswith(f"lat-{hash_}-n"))
    return nodes + ([f"lat-{hash_}"] if f"lat-{hash_}" in names else [])


def _has_link(name: str) -> bool:
    """A link of that name in this thread's network namespace (/sys/class/net may show another's:
    a testbed host's agent runs in its namespace without a /sys of its own)."""
    try:
        socket.if_nametoindex(name)
        return True
    except OSError:
        return False


def _tables() -> set[str]:
    try:
        p = subprocess.run(["nft", "list", "tables", "inet"], capture_output=True, text=True, timeout=TOOL_WAIT)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {line.split()[-1] for line in p.stdout.splitlines() if line.startswith("table inet ")}


def remove(hash_: str, shm_root: Path, tables: set[str] | None = None,
           routes: list[str] | None = None) -> list[str]:
    """Everything of the block hash_ on this host gone, whatever is left of it: its nft table,
    routes to its parts on other hosts, uplink, namespaces, tmpfs.  Problems, one line each."""
    problems = []
    table = f"lattice_{hash_}"
    if table in (_tables() if tables is None else tables):
        try:
            _run(["nft", "-f", "-"], f"delete table inet {table}\n")
        except RuntimeError as e:
            problems.append(str(e))
    batch = "".join(f"route del {r}\n" for r in routes or []) + \
        teardown_batch(hash_, _namespaces(hash_), _has_link(f"lu{hash_}"))
    if batch:
        try:
            _run(["ip", "-force", "-batch", "-"], batch)
        except RuntimeError as e:
            problems.append(str(e))
    _end_pidns(pid_path(hash_, shm_root))
    for why in (_unmount(shm_root / hash_), _unmount(ipc_path(hash_, shm_root)),
                _unmount(pid_path(hash_, shm_root))):
        if why:
            problems.append(why)
    return problems


def _left(hash_: str, shm_root: Path) -> bool:
    """Is anything of block hash_ here though the book does not name it?  (Its entry is written
    before anything is made, so a table alone is never left; nft is not asked, it is slow.)"""
    return bool(_namespaces(hash_)) or _has_link(f"lu{hash_}") or _mounted(shm_root / hash_) or \
        ipc_path(hash_, shm_root).exists() or pid_path(hash_, shm_root).exists()


def _release(book: dict[str, Any], hash_: str) -> list[str]:
    """hash_'s entry out of the book; the host's forwarding given back its old value when it was
    the last block in this namespace."""
    entry = book["blocks"].pop(hash_, None)
    problems = _neigh_fit(book)
    here = str(_netns_id())
    if entry is None or str(entry.get("netns")) != here:
        return problems
    if any(str(e.get("netns")) == here for e in book["blocks"].values()):
        return problems
    old = book["forwarding"].pop(here, None)
    if old is not None:
        try:
            _forwarding(str(old))
        except OSError as e:
            return problems + [f"cannot set net.ipv4.ip_forward back to {old}: {e.strerror}"]
    return problems


def sweep_dead(home: Path | None = None, also: str | None = None) -> list[str]:
    """Tear down every block in this namespace whose agent is gone (killed outright), and the
    leftovers of block `also` (this boot's, from an earlier boot).  Problems, one line each."""
    home = home or book_dir()
    if not (home / "blocknet.json").exists() and also is None:
        return []
    problems: list[str] = []
    here = str(_netns_id())
    with locked(home) as book:
        dead = [h for h, e in book["blocks"].items() if str(e.get("netns")) == here and not _alive(e)]
        if also is not None and also not in dead and (also in book["blocks"] or _left(also, home / "shm")):
            e = book["blocks"].get(also)
            if e is not None and _alive(e):
                raise RuntimeError(f"the block network lat-{also} belongs to a running agent (pid {e.get('pid')})")
            dead.append(also)
        if dead:            # a job still running in a namespace of it keeps it (it ends with its block's free)
            used = _process_netns()
            busy = [h for h in dead if used & _netns_inodes(h)]
            problems += [f"the block network lat-{h} of a killed agent still has processes in it: left for now"
                         for h in busy if h == also]
            dead = [h for h in dead if h not in busy]
        tables = _tables() if dead else set()
        for h in dead:
            routes = book["blocks"].get(h, {}).get("routes")
            problems += remove(h, home / "shm", tables, routes if isinstance(routes, list) else None)
            problems += _release(book, h)
        # a dead agent's block in a host namespace that is itself gone (a testbed host taken down):
        # its uplink and table went with it; its namespaces and tmpfs are the machine's
        orphans = [h for h, e in book["blocks"].items() if str(e.get("netns")) != here and not _alive(e)]
        if orphans:
            live = _live_netns()
            for h in orphans:
                ns = str(book["blocks"][h].get("netns"))
                if ns not in live:
                    problems += remove(h, home / "shm", set())
                    book["blocks"].pop(h)
                    if not any(str(e.get("netns")) == ns for e in book["blocks"].values()):
                        book["forwarding"].pop(ns, None)
            problems += _neigh_fit(book)
    return problems


def _process_netns() -> set[str]:
    """The network namespaces some process is in."""
    out: set[str] = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                out.add(str(os.stat(f"/proc/{d}/ns/net").st_ino))
            except OSError:
                pass
    return out


def _netns_inodes(hash_: str) -> set[str]:
    out: set[str] = set()
    for n in _namespaces(hash_):
        try:
            out.add(str(os.stat(NETNS_DIR / n).st_ino))
        except OSError:
            pass
    return out


def _live_netns() -> set[str]:
    """The network namespaces that exist: any process's, any bound under /run/netns."""
    out = _process_netns()
    for n in _names(NETNS_DIR):
        try:
            out.add(str(os.stat(NETNS_DIR / n).st_ino))
        except OSError:
            pass
    return out


def _names(d: Path) -> list[str]:
    try:
        return os.listdir(d)
    except OSError:
        return []


# ---- up and down ----

class Net:
    """A block's network and /dev/shm on this host, while it is up."""

    def __init__(self, plan: Plan, home: Path) -> None:
        self.plan, self.home = plan, home
        self.seconds = 0.0
        self.routes: list[str] = []         # to the block's parts on other hosts ("NET via ADDR")
        self.warnings: list[str] = []       # what went wrong but leaves the network usable
        self.init: subprocess.Popen[bytes] | None = None    # the pid namespace's (its unshare), reaped at down

    def sandbox(self, k: int) -> dict[str, str]:
        return self.plan.sandbox(k)

    def peer(self, parts: dict[str, str], me: str) -> list[str]:
        """Route to the block's parts on the other hosts ({host: its part's subnet}, this host
        named me among them) and let their traffic through; problems, one line each."""
        peers: dict[Net4, str] = {}
        problems = []
        for host, net in parts.items():
            if host == me:
                continue
            try:
                addr = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
                peers[ipaddress.IPv4Network(net)] = str(addr)
            except (OSError, ValueError, IndexError) as e:
                problems.append(f"no route to the block's nodes on {host}: {e}")
        try:
            with locked(self.home) as book:
                here = str(_netns_id())        # a testbed's hosts share the book: only this one's count
                ours = [ipaddress.IPv4Network(e["net"]) for e in book["blocks"].values()
                        if "net" in e and str(e.get("netns")) == here]
                for clash in [n for n in peers if any(n.overlaps(o) for o in ours + _routes())]:
                    problems.append(f"no route to the block's nodes at {peers.pop(clash)}: their subnet {clash} "
                                    f"is one this host uses (LATTICE_BLOCKNET_POOL: give each host its own)")
                entry = book["blocks"].get(self.plan.hash)
                if entry is not None and peers:      # swept with the block if its agent is killed
                    entry["routes"] = [f"{n} via {a}" for n, a in sorted(peers.items())]
        except (OSError, RuntimeError) as e:
            return problems + [f"cannot update the block network book: {e}"]
        if not peers:
            return problems
        self.routes = [f"{n} via {a}" for n, a in sorted(peers.items())]
        routes, host_rules_, router_rules_ = peer_texts(self.plan, peers)
        try:
            _run(["ip", "-batch", "-"], routes)
            _run(["nft", "-f", "-"], host_rules_)
            from lattice.nodes import rtnl
            with rtnl.inside(str(NETNS_DIR / self.plan.router)):
                _run(["nft", "-f", "-"], router_rules_)
        except (OSError, RuntimeError) as e:
            problems.append(f"cannot route to the block's nodes on the other hosts: {e}")
        return problems

    def down(self) -> list[str]:
        """Everything removed, the allocation given back; problems, one line each."""
        problems = remove(self.plan.hash, self.home / "shm", routes=self.routes)
        if self.init is not None:       # killed with its init (--kill-child's reverse: it ends when the init does)
            try:
                self.init.wait(timeout=TOOL_WAIT)
            except subprocess.TimeoutExpired:
                self.init.kill()
                self.init.wait()
            self.init = None
        try:
            with locked(self.home) as book:
                problems += _release(book, self.plan.hash)
        except (OSError, RuntimeError) as e:
            problems.append(f"cannot update the block network book: {e}")
        return problems


def deny_for(hosts: list[str]) -> list[Net4]:
    """What no node may reach besides the pool: the site's own network, and the addresses of the
    block's hosts (their ciods' TCP ports) wherever they are.  The site's network is
    LATTICE_BLOCKNET_DENY (comma-separated networks, or "none"); unset, the networks this host is
    directly connected to (its LAN: the other hosts, their daemons, the service node), so a node
    reaches the world only beyond a gateway."""
    out: list[Net4] = []
    words = os.environ.get("LATTICE_BLOCKNET_DENY")
    if words is None:
        out += _connected()
    elif words.strip() != "none":
        for word in filter(None, (w.strip() for w in words.split(","))):
            try:
                out.append(ipaddress.IPv4Network(word, strict=False))
            except ValueError as e:
                raise ValueError(f"bad LATTICE_BLOCKNET_DENY {word!r}: {e}") from None
    for h in hosts:
        if h == "local":
            continue
        try:
            infos = socket.getaddrinfo(h, None, socket.AF_INET)
        except OSError:
            continue
        out += sorted({ipaddress.IPv4Network(f"{i[4][0]}/32") for i in infos})     # one a socket type
    return out


def _connected() -> list[Net4]:
    """The networks of this namespace's links (routes without a gateway), but the blocks' own."""
    return [net for dev, net, gateway in _route_table()
            if not gateway and dev != "lo" and not dev.startswith("lu") and not net.overlaps(pool())]


def up(block: str, container: str, nodes: list[int], hosts: list[str], home: Path | None = None,
       init: Path | None = None) -> Net:
    """Make the block's network, /dev/shm and namespaces on this host (see the module's doc), the
    pid namespace's pid 1 being init (default: the installed lattice-pidns-init); RuntimeError
    with one line if it cannot (nothing is left behind then)."""
    home = home or book_dir()
    h = hash_of(container)
    t0 = time.monotonic()
    deny = deny_for(hosts)          # names resolved before the lock is taken
    sweep_dead(home, also=h)
    with locked(home) as book:
        taken = [ipaddress.IPv4Network(e["net"]) for e in book["blocks"].values() if "net" in e]
        net = allocate(prefix_for(len(nodes)), taken + _routes(), pool())
        book["blocks"][h] = {"block": block, "net": str(net), "netns": _netns_id(), "pid": os.getpid(),
                             "start": procs.ticks(os.getpid()), "nodes": len(nodes)}
        problems = _neigh_fit(book)
        here = str(_netns_id())
        if here not in book["forwarding"]:
            old = _forwarding()
            if old != "1":
                book["forwarding"][here] = old
                _forwarding("1")
    plan = Plan(h, block, net, tuple(sorted(nodes)), home / "shm")
    n = Net(plan, home)
    n.warnings = problems
    try:
        n.init = build(plan, deny, init or default_init())
    except (OSError, RuntimeError, ValueError) as e:
        n.down()
        raise RuntimeError(f"cannot make the block network: {e}") from e
    n.seconds = time.monotonic() - t0
    return n


def default_init() -> Path:
    from lattice.state.machine import prefix
    return prefix() / "bin" / "lattice-pidns-init"


def build(p: Plan, deny: list[Net4], init: Path) -> subprocess.Popen[bytes]:
    from lattice.nodes import rtnl
    _run(["nft", "-f", "-"], host_rules(p, deny))        # the firewall before any link exists
    _run(["ip", "-batch", "-"], host_batch(p))
    with rtnl.inside(str(NETNS_DIR / p.router)):        # children and /proc/sys/net: the router's
        _forwarding("1")
        _run(["nft", "-f", "-"], router_rules())
    _run(["ip", "-n", p.router, "-batch", "-"], router_batch(p))
    for i, k in enumerate(p.nodes):
        rtnl.configure_node(str(NETNS_DIR / p.node_ns(k)), IFNAME, p.address(k), p.gateway(p.bridge_of(k)).ip)
        if progress is not None and i % 256 == 255:
            progress(i)
    from lattice import safepath
    d = safepath.open_private_dir(p.shm_root, p.shm_root.parent)
    os.close(d)
    p.shm.mkdir(mode=0o700, exist_ok=True)
    _mount_tmpfs(p.shm, _shm_size())
    _make_ipcns(p.ipcns)
    return _make_pidns(p.pidns, init)


def boot(block: str, container: str, nodes: list[int], hosts: list[str],
         warn: Callable[[str, bool], None], init: Path | None = None) -> Net | None:
    """The agent's call: the network, or None after one warning line saying why not (and whether
    it was tried and failed, which the booter also tells the user, rather than not possible here)."""
    why = unable()
    tried = why is None
    if why is None:
        try:
            n = up(block, container, nodes, hosts, init=init)
            for w in n.warnings:
                warn(f"block {block}: {w}", True)      # said by the booter and kept as RAS
            return n
        except (OSError, RuntimeError, ValueError) as e:
            why = str(e)
    warn(f"block {block}: no block network or shared /dev/shm on this host ({why}); sandboxed jobs get a "
         f"network of loopback only and a /dev/shm of their own", tried)
    return None


def sweep_after_free() -> None:
    """`lattice free`'s call, once the block's daemons and agents are gone: what an agent killed
    outright left on this host is torn down (one warning line per problem)."""
    import sys
    if unable() is not None or not (book_dir() / "blocknet.json").exists():
        return
    try:
        problems = sweep_dead()
    except (OSError, RuntimeError) as e:
        problems = [f"cannot sweep the block networks: {e}"]
    for p in problems:
        print(f"lattice: warning: {p}", file=sys.stderr, flush=True)
