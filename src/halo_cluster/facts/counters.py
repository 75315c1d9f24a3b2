"""Byte counters of the paths a node's traffic can take: the fabric and management
interfaces (found by their addresses) and the planned RDMA port."""

from __future__ import annotations

from collections.abc import Sequence

from halo_cluster.facts import parsers as p
from halo_cluster.facts.model import PathCounters
from halo_cluster.facts.net import CLASS_DIR, read_interfaces
from halo_cluster.facts.rdma import read_rdma_devices
from halo_cluster.facts.root import Root


def interface_of(root: Root, address: str) -> str | None:
    """The interface that holds ``address`` (IPv4), or None."""
    for iface in read_interfaces(root):
        if address in (a.split("/", 1)[0] for a in iface.ipv4):
            return iface.name
    return None


def interface_counters(root: Root, name: str) -> PathCounters:
    base = f"{CLASS_DIR}/{name}/statistics"
    return PathCounters(
        name,
        root.parse(f"{base}/rx_bytes", p.parse_int),
        root.parse(f"{base}/tx_bytes", p.parse_int),
    )


def links_counters(root: Root, links: Sequence[str]) -> PathCounters:
    """The bytes of several interfaces added up (None when one cannot be read: a sum
    without one of its parts would be a lie)."""
    parts = [interface_counters(root, name) for name in links]
    rx = [p.rx_bytes for p in parts]
    tx = [p.tx_bytes for p in parts]
    return PathCounters(
        "+".join(links),
        None if None in rx else sum(r for r in rx if r is not None),
        None if None in tx else sum(t for t in tx if t is not None),
    )


def rdma_counters(root: Root, hca: str, port: int) -> PathCounters | None:
    for device in read_rdma_devices(root):
        if device.name != hca:
            continue
        for member in device.ports:
            if member.port == port:
                return PathCounters(f"{hca}/{port}", member.rcv_bytes, member.xmit_bytes)
    return None


def read_paths(
    root: Root,
    fabric: str | None,
    mgmt: str | None,
    rdma: tuple[str, int] | None,
    links: Sequence[str] = (),
) -> dict[str, PathCounters]:
    """path name ("fabric", "mgmt", "rdma") -> its counters; paths not found are left out
    (and named in the root's warnings). ``links``: a routed fabric's cables, whose bytes
    add up to the fabric path (named ``a+b``)."""
    out: dict[str, PathCounters] = {}
    if links:
        out["fabric"] = links_counters(root, links)
    for path, address in (("fabric", fabric), ("mgmt", mgmt)):
        if address is None:
            continue
        name = interface_of(root, address)
        if name is None:
            root.warn(f"no interface holds {address} ({path})")
            continue
        out[path] = interface_counters(root, name)
    if rdma is not None:
        found = rdma_counters(root, *rdma)
        if found is None:
            root.warn(f"no RDMA port {rdma[0]}/{rdma[1]}")
        else:
            out["rdma"] = found
    return out
