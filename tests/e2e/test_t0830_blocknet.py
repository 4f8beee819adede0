"""IP through the I/O node (issue 25, item 3; lattice.nodes.blocknet): a booted block's compute nodes
each have a network namespace on the block's bridge in its router ("I/O node") namespace.

Proved with `ip netns exec` into the namespace each personality's "sandbox" object names (so it
holds whatever runs a job there): nodes of a block reach each other; a node reaches "the world"
(a test namespace behind a veth of the host, as an outside server: this machine has no general
internet), masqueraded by the host; it reaches no address of the host (a socket bound to 0.0.0.0
there, on each of the host's addresses) nor another booted block's node nor its own router.
Afterwards `lattice free`, an interrupted boot and `lattice free` after the agent was killed
outright each leave no namespace, link, nft table, tmpfs or book entry of the block.  A job in the
node sandbox (`lattice run --kernel linux`) has the same reach; a network that cannot be made is
one warning and the block boots; across the testbed's hosts each part has its own subnet and the
parts route to each other, still reaching no host.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, LATTICE, Machine, make_machine, processes, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"),
                                reason="needs root, ip and nft: namespaces, links, a firewall")

BOOK = Path("/run/lattice")
WORLD_NS = f"t0830-world-{os.getpid()}"
WORLD_LINK = f"t0830w{os.getpid() % 100000}"
WORLD_HOST, WORLD_LINK_ADDR = "198.18.0.1", "198.18.0.2"   # the host's link to it (RFC 2544's range: nobody's)
WORLD = "203.0.113.1"                                       # a server beyond that link, routed (TEST-NET-3)

SERVER = """
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
s.settimeout(300)           # a hang guard
print("listening", flush=True)
c, peer = s.accept()
c.sendall(b"hi")
print(peer[0], flush=True)
"""

CONNECT = """
import errno, socket, sys
s = socket.socket()
s.settimeout(60)            # a hang guard: a refusal comes back at once (ICMP admin-prohibited)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected", s.recv(8).decode())
except socket.timeout:
    print("timeout")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e)))
"""


def netns_exec(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def connect(ns: str, host: str, port: int) -> str:
    p = subprocess.run(netns_exec(ns, sys.executable, "-c", CONNECT, host, str(port)), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def serve(ns: str, host: str, port: int) -> subprocess.Popen[str]:
    """A one-connection server in ns, once it listens."""
    p = subprocess.Popen(netns_exec(ns, sys.executable, "-c", SERVER, host, str(port)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "listening\n", p.communicate()
    return p


def sandbox(m: Machine, block: str) -> dict[int, dict[str, str]]:
    """Each compute node's "sandbox" object, by node index."""
    out = {}
    for f in sorted((m.home / "blocks" / block).glob("node-*.json")):
        pers = json.loads(f.read_text())
        out[int(f.stem.split("-")[1])] = pers["sandbox"]
    return out


def block_hash(m: Machine, block: str) -> str:
    from lattice.nodes import container
    return container.name(block, m.home / "blocks" / block).rsplit("-", 1)[1]


def left_of(h: str, host: str | None = None) -> dict[str, int]:
    """How many of each kind of thing of block hash h this host has: namespaces, links in the host's
    namespace, nft tables, tmpfs mounts, the IPC and pid namespaces bound on files, the pid
    namespace's init (its unshare, which names the file and ends with it), book entries (host: a
    testbed host's namespace, else this one's)."""
    inside = ["ip", "netns", "exec", host] if host else []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split("\n")
    links = subprocess.run([*inside, "ip", "-o", "link"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    tables = subprocess.run([*inside, "nft", "list", "tables"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    try:
        book = json.loads((BOOK / "blocknet.json").read_text()).get("blocks", {})
    except (OSError, ValueError):
        book = {}
    return {"netns": sum(1 for n in netns if n.split(" ")[0] == f"lat-{h}" or n.startswith(f"lat-{h}-n")),
            "links": sum(1 for line in links if f" lu{h}" in line),
            "tables": sum(1 for t in tables if t.strip() == f"table inet lattice_{h}"),
            "mounts": sum(1 for line in mounts if f"/shm/{h} " in line),
            "nsfiles": sum(1 for line in mounts if f"/ipc/{h} " in line or f"/pid/{h} " in line),
            "init": sum(1 for _, argv in processes() if any(a.endswith(f"/pid/{h}".encode()) for a in argv)),
            "book": int(h in book)}


NOTHING = {"netns": 0, "links": 0, "tables": 0, "mounts": 0, "nsfiles": 0, "init": 0, "book": 0}
UP = {"netns": 3, "links": 1, "tables": 1, "mounts": 1, "nsfiles": 2, "init": 1, "book": 1}


def host_addresses() -> list[str]:
    """Every IPv4 address of the host's namespace but loopback's (the node's 127.0.0.1 is its own)."""
    out = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=True).stdout)
    return [a["local"] for i in out for a in i.get("addr_info", []) if not a["local"].startswith("127.")]


@pytest.fixture(scope="module")
def world() -> Iterator[str]:
    """An outside server's namespace, reached from the host over a veth (the host has a route)."""
    subprocess.run(["ip", "netns", "del", WORLD_NS], capture_output=True)
    subprocess.run(["ip", "route", "del", f"{WORLD}/32"], capture_output=True)
    subprocess.run(["ip", "-batch", "-"], check=True, text=True, input=f"""netns add {WORLD_NS}
link add {WORLD_LINK} type veth peer name eth0 netns {WORLD_NS}
addr add {WORLD_HOST}/30 dev {WORLD_LINK}
link set {WORLD_LINK} up
""")
    subprocess.run(["ip", "-n", WORLD_NS, "-batch", "-"], check=True, text=True, input=f"""link set lo up
addr add {WORLD_LINK_ADDR}/30 dev eth0
addr add {WORLD}/32 dev lo
link set eth0 up
""")
    # the world is beyond a gateway, as on a real site: the host's own LAN is not the world (blocknet.deny_for)
    subprocess.run(["ip", "route", "add", f"{WORLD}/32", "via", WORLD_LINK_ADDR], check=True)
    yield WORLD_NS
    subprocess.run(["ip", "route", "del", f"{WORLD}/32"], capture_output=True)
    subprocess.run(["ip", "link", "del", WORLD_LINK], capture_output=True)
    subprocess.run(["ip", "netns", "del", WORLD_NS], capture_output=True)


@pytest.fixture(scope="module")
def two(built: Path, tmp_path_factory: pytest.TempPathFactory, world: str) -> Iterator[Machine]:
    """A 1x1x4 machine in psets of 2 with blocks A and B (two nodes each), both booted (after the
    world's link is up: the host's networks are read at boot)."""
    m = make_machine(tmp_path_factory.mktemp("blocknet"), "--shape", "1x1x4", "--pset-size", "2",
                     "--memory", "256M")
    for b in ("A", "B"):
        m.run("block", "create", b, "--shape", "1x1x2")
        m.run("boot", b)
    yield m
    for b in ("A", "B"):
        m.run("free", b, check=False)
    shutil.rmtree(m.work, ignore_errors=True)


def test_each_node_gets_its_own_namespace_address_and_the_blocks_shm(two: Machine) -> None:
    a, b = sandbox(two, "A"), sandbox(two, "B")
    assert len(a) == 2 and len(b) == 2
    for s in (*a.values(), *b.values()):
        assert Path(s["netns"]).exists() and s["ifname"] == "eth0"
        inside = subprocess.run(netns_exec(Path(s["netns"]).name, "ip", "-o", "-4", "addr"), capture_output=True,
                                text=True, check=True).stdout
        assert f"eth0    inet {s['address']}" in inside and "lo    inet 127.0.0.1/8" in inside, inside
        route = subprocess.run(["ip", "-n", Path(s["netns"]).name, "route", "show", "default"], capture_output=True,
                               text=True, check=True).stdout
        assert route.startswith(f"default via {s['gateway']} dev eth0"), route
    # one subnet per block, one /dev/shm per block: a tmpfs of mode 1777
    assert len({s["gateway"] for s in a.values()}) == 1 and len({s["shm"] for s in a.values()}) == 1
    assert a[0]["gateway"] != b[2]["gateway"] and a[0]["shm"] != b[2]["shm"]
    for s in (a[0], b[2]):
        assert os.stat(s["shm"]).st_mode & 0o7777 == 0o1777
        assert os.statvfs(s["shm"]).f_blocks * os.statvfs(s["shm"]).f_frsize == \
            os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize
    assert left_of(block_hash(two, "A")) == UP
    # the book, its lock and the tmpfs's parent are root's alone: no other user plants, reads or holds them
    for path, mode in ((BOOK, 0o700), (BOOK / "blocknet.json", 0o600), (BOOK / "blocknet.lock", 0o600),
                       (BOOK / "shm", 0o700)):
        st = path.stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (0, mode), path


def test_nodes_of_a_block_reach_each_other(two: Machine) -> None:
    a = sandbox(two, "A")
    n0, n1 = (Path(a[k]["netns"]).name for k in (0, 1))
    server = serve(n1, "0.0.0.0", 7100)
    assert connect(n0, a[1]["address"].split("/")[0], 7100) == "connected hi"
    out, _ = server.communicate(timeout=120)
    assert out.strip() == a[0]["address"].split("/")[0]      # straight over the bridge: no NAT in between


def test_a_node_reaches_the_world_masqueraded_by_its_host(two: Machine, world: str) -> None:
    n0 = Path(sandbox(two, "A")[0]["netns"]).name
    server = serve(world, WORLD, 7101)
    assert connect(n0, WORLD, 7101) == "connected hi"
    out, _ = server.communicate(timeout=120)
    assert out.strip() == WORLD_HOST


def test_a_node_reaches_nothing_on_the_hosts_own_networks(two: Machine, world: str) -> None:
    """The host's LAN is the site's (other hosts, their daemons, the service node): the world's end of
    the host's link to it is on such a network; the world's server beyond it is not."""
    n0 = Path(sandbox(two, "A")[0]["netns"]).name
    server = serve(world, "0.0.0.0", 7104)
    try:
        assert connect(n0, WORLD_LINK_ADDR, 7104) == "EHOSTUNREACH"
    finally:
        server.kill()
        server.communicate()


def test_a_node_reaches_no_address_of_the_host(two: Machine, world: str) -> None:
    """A socket bound to 0.0.0.0 in the host's namespace (as ciod's TCP port, sshd, PostgreSQL are),
    tried on each of the host's addresses: the uplinks', the world link's, eth0's."""
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    n0 = Path(sandbox(two, "A")[0]["netns"]).name
    addresses = host_addresses()
    assert WORLD_HOST in addresses and len(addresses) >= 4, addresses     # eth0, the world link, two uplinks
    try:
        got = {addr: connect(n0, addr, port) for addr in addresses}
        assert set(got.values()) == {"EHOSTUNREACH"}, got
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def test_a_node_reaches_neither_another_blocks_node_nor_its_own_router(two: Machine) -> None:
    a, b = sandbox(two, "A"), sandbox(two, "B")
    server = serve(Path(b[2]["netns"]).name, "0.0.0.0", 7102)
    try:
        n0 = Path(a[0]["netns"]).name
        assert connect(n0, b[2]["address"].split("/")[0], 7102) == "EHOSTUNREACH"
        assert connect(n0, b[2]["gateway"], 7102) == "EHOSTUNREACH"
        assert connect(n0, a[0]["gateway"], 7102) == "EHOSTUNREACH"      # the I/O node serves nothing
        # the other way too: B's node cannot reach A's
        back = serve(n0, "0.0.0.0", 7103)
        try:
            assert connect(Path(b[2]["netns"]).name, a[0]["address"].split("/")[0], 7103) == "EHOSTUNREACH"
        finally:
            back.kill()
            back.communicate()
    finally:
        server.kill()
        server.communicate()


JOB = """
import errno, socket, sys
for host, port in zip(sys.argv[1::2], sys.argv[2::2]):
    s = socket.socket()
    s.settimeout(60)
    try:
        s.connect((host, int(port)))
        print(host, "connected", s.recv(8).decode())
    except socket.timeout:
        print(host, "timeout")
    except OSError as e:
        print(host, errno.errorcode.get(e.errno, str(e)))
"""


def test_a_sandboxed_jobs_socket_reaches_the_world_not_the_host(two: Machine, world: str) -> None:
    """A job in the node sandbox (`--kernel linux`, its default) runs in the namespace the agent
    made: its sockets reach the outside server, not a socket listening on the host's addresses."""
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    server = serve(world, "0.0.0.0", 7106)
    eth0 = next(a for a in host_addresses() if a != WORLD_HOST and not a.startswith("10.64."))
    try:
        r = two.run("run", "-v", "--block", "A", "-n", "1", "--kernel", "linux", "/usr/bin/python3", "-c", JOB,
                    WORLD, "7106", eth0, str(port), WORLD_HOST, str(port))
        assert "kernel linux/sandbox" in r.stderr, r.stderr
        assert r.stdout.splitlines() == [f"{WORLD} connected hi", f"{eth0} EHOSTUNREACH",
                                         f"{WORLD_HOST} EHOSTUNREACH"], r.stdout
        out, _ = server.communicate(timeout=120)
        assert out.strip() == WORLD_HOST            # masqueraded by the host
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
        if server.poll() is None:
            server.kill()
            server.communicate()


def test_free_leaves_nothing_of_the_block(two: Machine) -> None:
    hashes = {b: block_hash(two, b) for b in ("A", "B")}
    for b in ("A", "B"):
        assert left_of(hashes[b]) != NOTHING
        two.run("free", b)
        assert left_of(hashes[b]) == NOTHING, b
    # booted again: the same names, a network again
    two.run("boot", "A")
    assert left_of(hashes["A"])["netns"] == 3


def test_free_after_the_agent_was_killed_outright_leaves_nothing(two: Machine) -> None:
    h = block_hash(two, "A")
    if left_of(h)["netns"] == 0:
        two.run("boot", "A")
    agent = json.loads((BOOK / "blocknet.json").read_text())["blocks"][h]["pid"]
    os.kill(agent, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{agent}").exists() or
             Path(f"/proc/{agent}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 120)
    assert left_of(h)["netns"] == 3          # nobody took it down yet
    r = two.run("free", "A")
    assert "warning" not in r.stderr, r.stderr
    assert left_of(h) == NOTHING


def test_a_network_that_cannot_be_made_is_one_warning_and_the_block_boots(built: Path, tmp_path: Path) -> None:
    """A bad setting (LATTICE_BLOCKNET_DENY) in the booter's environment reaches the agent: one line,
    a RAS event, a line in the boot's log, no "sandbox" object, nothing half made; the block boots."""
    m = make_machine(tmp_path, "--shape", "1x1x2", "--pset-size", "2", "--memory", "256M")
    m.env["LATTICE_BLOCKNET_DENY"] = "10.0.0.0/33"
    m.run("block", "create", "W", "--shape", "1x1x2")
    h = block_hash(m, "W")
    try:
        r = m.run("boot", "W")
        line = ("block W: no block network or shared /dev/shm on this host (bad LATTICE_BLOCKNET_DENY '10.0.0.0/33': "
                "'33' is not a valid netmask); sandboxed jobs get a network of loopback only and a /dev/shm of "
                "their own")
        assert r.stderr == f"lattice: warning: host local: {line}\n", r.stderr
        assert f"host local: {line}" in m.run("ras").stdout
        log = [json.loads(x) for x in (m.home / "blocks" / "W" / "log" / "agent.log").read_text().splitlines()]
        assert [x["message"] for x in log if x["event"] == "warning"] == [line]
        assert all("sandbox" not in p for p in m.personalities("W"))
        assert left_of(h) == NOTHING
        # the preload client still runs jobs on it
        assert m.run("run", "--block", "W", "-n", "1", "--kernel", "linux", "--no-sandbox",
                     "/bin/echo", "up").stdout == "up\n"
    finally:
        m.run("free", "W", check=False)
        shutil.rmtree(m.work, ignore_errors=True)


@pytest.fixture
def stuck_prefix(built: Path, tmp_path: Path) -> Path:
    """A build prefix whose compute node 1 stops before it starts: the boot cannot complete."""
    d = tmp_path / "prefix"
    (d / "bin").mkdir(parents=True)
    for p in ("ciod", "cnk", "lattice-pidns-init"):
        (d / "bin" / p).symlink_to(BUILD / "bin" / p)
    (d / "lib").symlink_to(BUILD / "lib")
    script = d / "bin" / "cnode"
    script.write_text("#!/bin/sh\ncase \"$*\" in *node-1.json*) kill -STOP $$ ;; esac\n"
                      f'exec {BUILD / "bin" / "cnode"} "$@"\n')
    script.chmod(0o755)
    return d


def test_an_interrupted_boot_leaves_nothing(two: Machine, stuck_prefix: Path) -> None:
    h = block_hash(two, "A")
    two.run("free", "A", check=False)
    env = dict(two.env, LATTICE_PREFIX=str(stuck_prefix), LATTICE_BOOT_STALL="600", LATTICE_WARM="0")
    p = subprocess.Popen([*LATTICE, "boot", "A"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        # the network is made before the compute nodes start; node 1 then stops itself
        wait_for(lambda: left_of(h)["mounts"] == 1 and any(
            b"node-1.json" in b" ".join(argv) and f"{two.home}/blocks/A/".encode() in b" ".join(argv)
            for _, argv in processes()) or p.poll() is not None, 120)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 128 + signal.SIGINT, err
    assert left_of(h) == NOTHING


# ---- across hosts: the testbed (scripts/testbed.sh), a block's psets on four hosts ----

def parts_of(block_hashes: set[str]) -> dict[str, list[str]]:
    """The node namespaces of each block part (by hash) under /run/netns."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split("\n")
    out: dict[str, list[str]] = {h: [] for h in block_hashes}
    for n in (line.split(" ")[0] for line in names):
        for h in block_hashes:
            if n.startswith(f"lat-{h}-n"):
                out[h].append(n)
    return out


def eth0_address(ns: str) -> str:
    words = subprocess.run(["ip", "-n", ns, "-o", "-4", "addr", "show", "dev", "eth0"], capture_output=True,
                           text=True, check=True).stdout.split()
    return words[words.index("inet") + 1].split("/")[0]


def test_across_hosts_each_part_has_its_own_subnet_and_reaches_no_host_of_the_block(built: Path,
                                                                                     tmp_path: Path) -> None:
    """A block over the testbed's four hosts (ssh placement, a pset a host): each host's part has its
    own router and subnet, made in that host's namespace; a node reaches neither its own host nor
    another host of the block (whose ciod listens on TCP there), but reaches the block's nodes on
    another host, routed between the parts with their own addresses; `lattice free` leaves nothing
    on any host, routes included."""
    from testbed import cluster_up
    with cluster_up(4) as tb:
        m = make_machine(tmp_path, "--shape", "2x2x2", "--pset-size", "2", "--placement", "ssh",
                         "--hostfile", tb.env["LATTICE_TESTBED_HOSTFILE"],
                         "--ssh-command", tb.env["LATTICE_TESTBED_SSH"])
        m.env.update({k: v for k, v in tb.env.items() if k.startswith(("SLURM_CONF", "LATTICE_TESTBED"))})
        m.run("block", "create", "all", "--shape", "2x2x2")
        boot = m.run("boot", "all")
        assert "warning" not in boot.stderr, boot.stderr          # every part routed to the others
        try:
            host_ns = {hn: os.stat(f"/run/netns/{hn}").st_ino for hn in tb.hosts}
            book = json.loads((BOOK / "blocknet.json").read_text())["blocks"]
            by_host = {hn: h for h, e in book.items() for hn, ino in host_ns.items()
                       if e.get("block") == "all" and e["netns"] == ino}
            assert sorted(by_host) == tb.hosts, book                  # one part per host, in its namespace
            assert len({book[h]["net"] for h in by_host.values()}) == 4   # four subnets
            parts = parts_of(set(by_host.values()))
            assert all(len(v) == 2 for v in parts.values()), parts
            for hn, h in by_host.items():
                assert left_of(h, hn) == UP, hn
                routes = tb.in_host(hn, "ip", "-o", "-4", "route").stdout      # one to each other part
                for o in by_host.values():
                    subnet = next(ipaddress.ip_network(book[o]["net"]).subnets(prefixlen_diff=1))
                    across = [r for r in routes.splitlines() if r.startswith(f"{subnet} via ") and " dev eth0" in r]
                    assert len(across) == (o != h), (hn, routes)
            n_h1 = parts[by_host["h1"]][0]
            addresses = {h: tb.in_host(h, "ip", "-o", "-4", "addr", "show", "dev", "eth0").stdout.split()
                         for h in tb.hosts}
            addr = {h: w[w.index("inet") + 1].split("/")[0] for h, w in addresses.items()}
            for h in ("h1", "h2"):        # a socket bound to 0.0.0.0 in that host, as its ciod's TCP port is
                listener = subprocess.Popen(netns_exec(h, sys.executable, "-c", SERVER, "0.0.0.0", "7110"),
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
                    assert connect(n_h1, addr[h], 7110) == "EHOSTUNREACH", h
                finally:
                    listener.kill()
                    listener.communicate()
            # the block's nodes on another host: routed between the hosts' parts, not masqueraded
            n_h2 = parts[by_host["h2"]][0]
            peer = serve(n_h2, "0.0.0.0", 7111)
            got = connect(n_h1, eth0_address(n_h2), 7111)
            if got != "connected hi":                    # what the hosts and routers had then, to say why
                state = {ns: tb.in_host(ns, "sh", "-c", "ip -o -4 route; ip -o -4 addr; nft list ruleset").stdout
                         for ns in ("h1", "h2")}
                state.update({r: subprocess.run(netns_exec(r, "sh", "-c", "ip -o -4 route; nft list ruleset"),
                                                capture_output=True, text=True).stdout
                              for r in (f"lat-{by_host['h1']}", f"lat-{by_host['h2']}")})
                state["the kernel's ARP table (one for every namespace)"] = (
                    Path("/proc/net/stat/arp_cache").read_text()
                    + "gc_thresh3 " + Path("/proc/sys/net/ipv4/neigh/default/gc_thresh3").read_text())
                peer.kill()
                raise AssertionError(f"{got}: {n_h1} -> {n_h2}\n" + "\n".join(f"== {k}\n{v}" for k, v in state.items()))
            out, _ = peer.communicate(timeout=120)
            assert out.strip() == eth0_address(n_h1)
        finally:
            m.run("free", "all", check=False)
            shutil.rmtree(m.work, ignore_errors=True)
        for hn, h in by_host.items():     # another host's agent tears its part down once its daemons end
            wait_for(lambda: left_of(h, hn) == NOTHING, 120)
            routes = tb.in_host(hn, "ip", "-o", "-4", "route").stdout
            assert "10.64." not in routes, (hn, routes)
