"""Byte counters of the paths a node's traffic can take: the fabric and management
interfaces (found by their addresses) and the planned RDMA port."""

from __future__ import annotations

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


def rdma_counters(root: Root, hca: str, port: int) -> PathCounters | None:
    for device in read_rdma_devices(root):
        if device.name != hca:
            continue
        for member in device.ports:
            if member.port == port:
                return PathCounters(f"{hca}/{port}", member.rcv_bytes, member.xmit_bytes)
    return None


def read_paths(
    root: Root, fabric: str | None, mgmt: str | None, rdma: tuple[str, int] | None
) -> dict[str, PathCounters]:
    """path name ("fabric", "mgmt", "rdma") -> its counters; paths not found are left out
    (and named in the root's warnings)."""
    out: dict[str, PathCounters] = {}
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
