"""A compute node's network namespace set up from inside the agent, without a process per node.

`ip -batch` makes every namespace and link of a block in one process, but it cannot address a
link inside another namespace (there is no per-line `-n`), and `ip -n NS` per node would start
a process per node.  So the agent enters each node's namespace itself (setns(2) on its own
thread), opens a route netlink socket there (a socket stays in the namespace it was made in),
goes back, and sends the node's four requests in one message: loopback up, the link up, its
address, its default route.  Only what a node needs is spoken here; anything else goes
through `ip`.
"""
from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import struct
from contextlib import contextmanager
from typing import Iterator

CLONE_NEWNET = 0x40000000
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
NLMSG_ERROR = 2
RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE = 16, 20, 24
IFF_UP = 0x1
IFLA_IFNAME = 3
IFA_ADDRESS, IFA_LOCAL, IFA_BROADCAST = 1, 2, 4
RTA_GATEWAY = 5
RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST = 254, 3, 0, 1

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


@contextmanager
def inside(path: str) -> Iterator[None]:
    """This thread in the network namespace bound at path, then back where it was."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        there = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(there)
        finally:
            os.close(there)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def _attr(kind: int, data: bytes) -> bytes:
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + b"\0" * (-n % 4)


def _msg(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, NLM_F_REQUEST | NLM_F_ACK | flags, seq, 0) + body


def link_up(seq: int, name: str) -> bytes:
    body = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, IFF_UP, IFF_UP) + _attr(IFLA_IFNAME, name.encode() + b"\0")
    return _msg(RTM_NEWLINK, 0, seq, body)


def add_address(seq: int, index: int, iface: ipaddress.IPv4Interface) -> bytes:
    a = iface.ip.packed
    body = (struct.pack("=BBBBI", socket.AF_INET, iface.network.prefixlen, 0, RT_SCOPE_UNIVERSE, index)
            + _attr(IFA_LOCAL, a) + _attr(IFA_ADDRESS, a)
            + _attr(IFA_BROADCAST, iface.network.broadcast_address.packed))
    return _msg(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, seq, body)


def add_default(seq: int, gateway: ipaddress.IPv4Address) -> bytes:
    body = (struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE,
                        RTN_UNICAST, 0) + _attr(RTA_GATEWAY, gateway.packed))
    return _msg(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, seq, body)


def _acks(sock: socket.socket, want: int) -> None:
    """Read want acknowledgements; the first refusal raised as OSError."""
    got = 0
    while got < want:
        data = sock.recv(65536)
        off = 0
        while off + 16 <= len(data):
            length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, off)
            if kind == NLMSG_ERROR:
                got += 1
                err = -struct.unpack_from("=i", data, off + 16)[0]
                if err:
                    raise OSError(err, f"netlink request {seq}: {os.strerror(err)}")
            off += (length + 3) & ~3
            if length < 16:
                break


def configure_node(netns: str, ifname: str, address: ipaddress.IPv4Interface,
                   gateway: ipaddress.IPv4Address) -> None:
    """In the namespace bound at netns: lo and ifname up, ifname's address, a default route via gateway."""
    with inside(netns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
        try:
            index = socket.if_nametoindex(ifname)
        except OSError:
            sock.close()
            raise
    with sock:
        sock.bind((0, 0))
        msgs = [link_up(1, "lo"), link_up(2, ifname), add_address(3, index, address), add_default(4, gateway)]
        sock.sendall(b"".join(msgs))
        _acks(sock, len(msgs))
