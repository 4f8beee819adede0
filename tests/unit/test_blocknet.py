"""The block network's names, addresses, allocations and the ip/nft text it sends (lattice.nodes.blocknet),
and its book (a temporary directory; no namespace is made here: tests/e2e/test_t0830_blocknet.py)."""
from __future__ import annotations

import ipaddress
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lattice.nodes import blocknet, rtnl
from lattice.nodes.blocknet import Plan

NET = ipaddress.IPv4Network


def plan(nodes: list[int], net: str = "10.64.2.0/23") -> Plan:
    return Plan("0123456789ab", "R00", NET(net), tuple(nodes), Path("/run/lattice/shm"))


def test_names_derive_from_the_container_hash_and_fit_a_link_name() -> None:
    assert blocknet.hash_of("lattice/R00-0123456789ab") == "0123456789ab"
    assert blocknet.hash_of("lattice/my-block-0123456789ab") == "0123456789ab"
    p = plan([4, 5])
    assert p.router == "lat-0123456789ab"
    assert p.node_ns(5) == "lat-0123456789ab-n5"
    assert p.table == "lattice_0123456789ab"
    assert len(p.uplink) <= 15 and p.uplink == "lu0123456789ab"        # IFNAMSIZ - 1


@pytest.mark.parametrize("nodes, prefix, bridges", [(1, 23, 1), (8, 23, 1), (128, 23, 1), (253, 23, 1),
                                                    (254, 22, 1), (1000, 21, 1), (1001, 20, 2), (2500, 19, 3),
                                                    (8192, 17, 9)])
def test_the_subnet_holds_gateway_nodes_and_broadcast(nodes: int, prefix: int, bridges: int) -> None:
    """A bridge takes at most 1023 ports: past PORTS nodes a part has several, a /22 each."""
    assert blocknet.prefix_for(nodes) == prefix
    p = plan(list(range(nodes)), f"10.64.0.0/{prefix}")
    assert p.bridges == bridges
    addrs = [p.address(k) for k in range(nodes)]
    assert len({a.ip for a in addrs}) == nodes
    for k, a in zip(range(nodes), addrs):
        lan = p.lan(p.bridge_of(k))
        assert a.network == lan and lan.subnet_of(p.subnet)
        assert a.ip not in (lan.network_address, lan.broadcast_address, p.gateway(p.bridge_of(k)).ip)
    assert sum(1 for k in range(nodes) if p.bridge_of(k) == 0) == min(nodes, blocknet.PORTS)
    host_end, router_end = p.link
    assert host_end.network == router_end.network and host_end.network.prefixlen == 30
    assert not host_end.network.overlaps(p.subnet) and host_end.network.subnet_of(p.net)


def test_the_sandbox_object_names_the_nodes_namespace_and_the_blocks_shm() -> None:
    p = plan([4, 5])
    assert p.sandbox(5) == {"netns": "/run/netns/lat-0123456789ab-n5", "shm": "/run/lattice/shm/0123456789ab",
                            "ipcns": "/run/lattice/ipc/0123456789ab", "pidns": "/run/lattice/pid/0123456789ab",
                            "ifname": "eth0", "address": "10.64.2.3/24", "gateway": "10.64.2.1"}


def test_allocation_skips_what_is_taken_and_says_when_the_pool_is_full() -> None:
    pool = NET("10.64.0.0/21")
    assert blocknet.allocate(23, [], pool) == NET("10.64.0.0/23")
    assert blocknet.allocate(23, [NET("10.64.0.0/23"), NET("10.64.3.7/32")], pool) == NET("10.64.4.0/23")
    assert blocknet.allocate(22, [NET("10.64.1.0/24")], pool) == NET("10.64.4.0/22")
    with pytest.raises(ValueError, match="no free /22 left"):
        blocknet.allocate(22, [NET("10.64.0.0/22"), NET("10.64.4.0/24")], pool)
    with pytest.raises(ValueError, match="too small"):
        blocknet.allocate(20, [], pool)


def test_one_ip_batch_per_namespace_makes_every_link() -> None:
    p = plan([0, 1, 2])
    host = blocknet.host_batch(p).splitlines()
    assert [line for line in host if line.startswith("netns add")] == [
        "netns add lat-0123456789ab", "netns add lat-0123456789ab-n0", "netns add lat-0123456789ab-n1",
        "netns add lat-0123456789ab-n2"]
    assert "link add n1 netns lat-0123456789ab type veth peer name eth0 netns lat-0123456789ab-n1" in host
    assert "link add lu0123456789ab type veth peer name up0 netns lat-0123456789ab" in host
    assert "route add 10.64.2.0/24 via 10.64.3.2 dev lu0123456789ab" in host
    router = blocknet.router_batch(p).splitlines()
    assert "addr add 10.64.2.1/24 dev br0" in router
    assert [line for line in router if "master" in line] == [f"link set n{k} master br0 up" for k in range(3)]
    assert router[-1] == "route add default via 10.64.3.1 dev up0"
    assert blocknet.teardown_batch("0123456789ab", ["lat-0123456789ab-n0", "lat-0123456789ab"], True).splitlines() \
        == ["link del lu0123456789ab", "netns del lat-0123456789ab-n0", "netns del lat-0123456789ab"]


def test_the_host_table_refuses_the_host_and_every_block_and_masquerades_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LATTICE_BLOCKNET_POOL", raising=False)
    text = blocknet.host_rules(plan([0]), [NET("192.0.2.7/32"), NET("10.64.9.0/24")])
    assert "table inet lattice_0123456789ab {" in text
    assert 'iifname "lu0123456789ab" reject with icmpx type admin-prohibited' in text     # input: any local address
    # the pool swallows a denied network inside it (nft refuses overlapping elements)
    assert 'iifname "lu0123456789ab" ip daddr { 10.64.0.0/10, 192.0.2.7/32 } reject' in text
    assert 'oifname "lu0123456789ab" reject with icmpx type admin-prohibited' in text     # nothing starts in
    # only what the block's own uplink brings: not another host's packets of the same subnet that a
    # bridge of this host carries through its hooks (br_netfilter; the testbed's hosts)
    assert 'iifname "lu0123456789ab" ip saddr 10.64.2.0/24 oifname != "lu0123456789ab" masquerade' in text


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft") is None, reason="nft -c needs root")
def test_nft_accepts_both_tables() -> None:
    for text in (blocknet.host_rules(plan([0, 1]), [NET("192.0.2.7/32")]), blocknet.router_rules()):
        p = subprocess.run(["nft", "-c", "-f", "-"], input=text, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr + text


def test_a_netlink_request_is_what_the_kernel_expects() -> None:
    msg = rtnl.add_address(3, 2, ipaddress.IPv4Interface("10.64.0.2/24"))
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", msg)
    assert (length, kind, seq) == (len(msg), rtnl.RTM_NEWADDR, 3)
    assert flags & rtnl.NLM_F_ACK and flags & rtnl.NLM_F_CREATE
    assert len(msg) % 4 == 0 and bytes([10, 64, 0, 2]) in msg and bytes([10, 64, 0, 255]) in msg


def test_a_warning_says_why_there_is_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LATTICE_BLOCKNET", "off")
    said: list[tuple[str, bool]] = []
    assert blocknet.boot("R00", "lattice/R00-0123456789ab", [0, 1], ["local"],
                         lambda m, tried: said.append((m, tried))) is None
    assert said == [("block R00: no block network or shared /dev/shm on this host (LATTICE_BLOCKNET=off); "
                     "sandboxed jobs get a network of loopback only and a /dev/shm of their own", False)]


def test_without_capabilities_the_reason_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LATTICE_BLOCKNET", raising=False)
    monkeypatch.setattr(blocknet, "_capabilities", lambda: 1 << blocknet.CAP_SYS_ADMIN)
    assert blocknet.unable() == "the agent lacks CAP_NET_ADMIN (run as root)"
    monkeypatch.setattr(blocknet, "_capabilities", lambda: 0)
    assert blocknet.unable() == "the agent lacks CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root)"


def test_the_book_is_private_and_a_dead_agents_entry_is_swept(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "run-lattice"
    removed: list[str] = []
    monkeypatch.setattr(blocknet, "remove", lambda h, shm, tables=None, routes=None: removed.append(h) or [])
    monkeypatch.setattr(blocknet, "_tables", lambda: set())
    here = blocknet._netns_id()
    monkeypatch.setattr(blocknet, "_live_netns", lambda: {str(here), str(here + 1)})
    gone = subprocess.Popen(["true"])
    gone.wait()
    with blocknet.locked(home) as book:
        book["blocks"]["aaaaaaaaaaaa"] = {"net": "10.64.0.0/23", "netns": here, "pid": gone.pid, "start": 1}
        book["blocks"]["bbbbbbbbbbbb"] = {"net": "10.64.2.0/23", "netns": here, "pid": os.getpid(),
                                          "start": blocknet.procs.ticks(os.getpid())}
        book["blocks"]["cccccccccccc"] = {"net": "10.64.4.0/23", "netns": here + 1, "pid": gone.pid, "start": 1}
    assert (home.stat().st_mode & 0o777) == 0o700
    assert ((home / "blocknet.json").stat().st_mode & 0o777) == 0o600
    assert blocknet.sweep_dead(home) == []
    # the dead agent's block here is torn down; a live one's stays, as does one of another live namespace
    assert removed == ["aaaaaaaaaaaa"]
    with blocknet.locked(home) as book:
        assert sorted(book["blocks"]) == ["bbbbbbbbbbbb", "cccccccccccc"]
    with pytest.raises(RuntimeError, match="belongs to a running agent"):
        blocknet.sweep_dead(home, also="bbbbbbbbbbbb")


def test_a_dead_agents_block_in_a_namespace_that_is_gone_is_swept_from_anywhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A testbed host taken down with a block on it: its uplink and table went with its namespace;
    the block's own namespaces and tmpfs are removed by the next sweep in any namespace."""
    home = tmp_path / "run-lattice"
    removed: list[tuple[str, object]] = []
    monkeypatch.setattr(blocknet, "remove",
                        lambda h, shm, tables=None, routes=None: removed.append((h, tables)) or [])
    here = blocknet._netns_id()
    gone = subprocess.Popen(["true"])
    gone.wait()
    with blocknet.locked(home) as book:
        book["blocks"]["dddddddddddd"] = {"net": "10.64.0.0/23", "netns": 1, "pid": gone.pid, "start": 1}
        book["blocks"]["eeeeeeeeeeee"] = {"net": "10.64.2.0/23", "netns": here, "pid": os.getpid(),
                                          "start": blocknet.procs.ticks(os.getpid())}
        book["forwarding"]["1"] = "0"
    assert blocknet.sweep_dead(home) == []
    assert removed == [("dddddddddddd", set())]       # no table to look for: it was in that namespace
    with blocknet.locked(home) as book:
        assert list(book["blocks"]) == ["eeeeeeeeeeee"] and book["forwarding"] == {}


def test_the_site_network_is_the_hosts_own_unless_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocknet, "_connected", lambda: [NET("192.0.2.0/24")])
    monkeypatch.delenv("LATTICE_BLOCKNET_DENY", raising=False)
    assert blocknet.deny_for(["local"]) == [NET("192.0.2.0/24")]
    monkeypatch.setenv("LATTICE_BLOCKNET_DENY", "none")
    assert blocknet.deny_for(["local"]) == []
    monkeypatch.setenv("LATTICE_BLOCKNET_DENY", "172.16.0.0/12, 198.51.100.7")
    assert blocknet.deny_for(["local", "localhost"]) == [NET("172.16.0.0/12"), NET("198.51.100.7/32"),
                                                         NET("127.0.0.1/32")]
    monkeypatch.setenv("LATTICE_BLOCKNET_DENY", "10.0.0.0/33")
    with pytest.raises(ValueError, match="bad LATTICE_BLOCKNET_DENY '10.0.0.0/33'"):
        blocknet.deny_for(["local"])


def test_the_parts_on_other_hosts_are_routed_and_let_through_before_the_pools_reject() -> None:
    p = plan([0, 1])
    routes, host, router = blocknet.peer_texts(p, {NET("10.64.4.0/24"): "10.213.15.2",
                                                   NET("10.64.6.0/24"): "10.213.15.3"})
    assert routes.splitlines() == ["route add 10.64.4.0/24 via 10.213.15.2", "route add 10.64.6.0/24 via 10.213.15.3"]
    assert host.splitlines() == [
        'insert rule inet lattice_0123456789ab forward iifname "lu0123456789ab" ip daddr '
        '{ 10.64.4.0/24, 10.64.6.0/24 } accept',
        'insert rule inet lattice_0123456789ab forward ip saddr { 10.64.4.0/24, 10.64.6.0/24 } '
        'oifname "lu0123456789ab" accept',
        "insert rule inet lattice_0123456789ab postrouting ip saddr 10.64.2.0/24 ip daddr "
        "{ 10.64.4.0/24, 10.64.6.0/24 } accept"]
    assert router == ('insert rule inet lattice forward iifname "up0" oifname "br*" ip saddr '
                      '{ 10.64.4.0/24, 10.64.6.0/24 } accept\n')


def test_the_agent_hears_the_parts_subnets_on_its_channel() -> None:
    from lattice.nodes.agent import Channel
    r, w = os.pipe()
    try:
        ch = Channel(r, True, 60.0)
        os.write(w, b'boot\npeers {"h1": "10.64.0.0/24", "h2": "10.64.2.0/24"}\n')
        ch.poll()
        assert ch.peers == {"h1": "10.64.0.0/24", "h2": "10.64.2.0/24"} and not ch.committed
        os.write(w, b"peers [not an object\ncommit\n")
        ch.poll()
        assert ch.peers == {} and ch.committed          # a bad line routes nothing; the boot goes on
    finally:
        os.close(r)
        os.close(w)


def test_a_killed_agents_block_with_a_job_still_in_it_is_left_for_its_free(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "run-lattice"
    removed: list[str] = []
    monkeypatch.setattr(blocknet, "remove", lambda h, shm, tables=None, routes=None: removed.append(h) or [])
    monkeypatch.setattr(blocknet, "_tables", lambda: set())
    monkeypatch.setattr(blocknet, "_process_netns", lambda: {"111"})
    monkeypatch.setattr(blocknet, "_netns_inodes", lambda h: {"111"} if h == "ffffffffffff" else {"222"})
    here = blocknet._netns_id()
    gone = subprocess.Popen(["true"])
    gone.wait()
    with blocknet.locked(home) as book:
        for h in ("ffffffffffff", "999999999999"):
            book["blocks"][h] = {"net": "10.64.0.0/23", "netns": here, "pid": gone.pid, "start": 1}
    assert blocknet.sweep_dead(home) == []
    assert removed == ["999999999999"]
    with blocknet.locked(home) as book:
        assert list(book["blocks"]) == ["ffffffffffff"]


def test_the_arp_table_is_sized_for_the_blocks_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One ARP table serves every namespace (1024 entries by default): a 64-node block's MPI job
    needs 64 * 64 of it, else its connects fail with "No route to host" (t0605's 128 ranks).  The
    limits grow by the blocks' need over the host's own values, and go back when the last block goes."""
    neigh = tmp_path / "neigh"
    neigh.mkdir()
    (neigh / "gc_thresh2").write_text("512\n")
    (neigh / "gc_thresh3").write_text("1024\n")
    monkeypatch.setattr(blocknet, "NEIGH", neigh)
    monkeypatch.setattr(blocknet, "_forwarding", lambda value=None: "1")
    here = blocknet._netns_id()
    book: dict[str, Any] = {"blocks": {}, "forwarding": {}}
    book["blocks"]["aaaaaaaaaaaa"] = {"netns": here, "nodes": 64}
    assert blocknet._neigh_fit(book) == []
    assert (neigh / "gc_thresh3").read_text() == f"{1024 + 64 * 65}\n"
    assert (neigh / "gc_thresh2").read_text() == f"{512 + 64 * 65}\n"
    book["blocks"]["bbbbbbbbbbbb"] = {"netns": here, "nodes": 2}
    assert blocknet._neigh_fit(book) == []
    assert (neigh / "gc_thresh3").read_text() == f"{1024 + 64 * 65 + 6}\n"
    assert blocknet._release(book, "aaaaaaaaaaaa") == []
    assert (neigh / "gc_thresh3").read_text() == f"{1024 + 6}\n"
    assert blocknet._release(book, "bbbbbbbbbbbb") == []
    assert (neigh / "gc_thresh3").read_text() == "1024\n" and (neigh / "gc_thresh2").read_text() == "512\n"
    assert "neigh" not in book
    (neigh / "gc_thresh3").write_text("many\n")     # one it cannot read: one line, not a traceback
    book["blocks"]["cccccccccccc"] = {"netns": here, "nodes": 4}
    assert [p.split(" (")[0] for p in blocknet._neigh_fit(book)] == \
        ["cannot size the host's ARP table for the blocks' nodes"]
    (neigh / "gc_thresh3").unlink()     # a host that is a network namespace (a container): the kernel's
    assert blocknet._neigh_fit(book) == [] and (neigh / "gc_thresh2").read_text() == "512\n"   # not ours
