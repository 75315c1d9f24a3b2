"""Choosing among a node's RDMA ports and interfaces: which are usable, which reach the
peer, which is fastest, and why none is."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from halo_cluster.errors import TransportError, UsageError
from halo_cluster.facts.model import Gid, Inventory, NetInterface, RdmaPort
from halo_cluster.transport.path import SOFTWARE_RDMA_DRIVERS, Candidate


def peer_address(peer: str | None) -> ipaddress.IPv4Address | None:
    if peer is None:
        return None
    try:
        return ipaddress.IPv4Address(peer)
    except ValueError:
        raise UsageError(f"--peer must be an IPv4 address, got {peer!r}") from None


def rdma_candidates(inv: Inventory, kind: str) -> list[Candidate]:
    layer = "InfiniBand" if kind == "infiniband" else "Ethernet"
    return [
        Candidate(dev, port, kind)
        for dev in inv.rdma
        for port in dev.ports
        if port.link_layer == layer
    ]


def usable_ports(inv: Inventory, kind: str, allow_software: bool) -> list[Candidate]:
    found = []
    for cand in rdma_candidates(inv, kind):
        if cand.port.state != "ACTIVE":
            continue
        if not allow_software and cand.device.driver in SOFTWARE_RDMA_DRIVERS:
            continue
        if kind == "roce" and not v2_ipv4_gids(cand.port):
            continue
        found.append(cand)
    return found


def pick_rdma(inv: Inventory, kind: str, peer: ipaddress.IPv4Address | None) -> Candidate:
    every = rdma_candidates(inv, kind)
    if not every:
        layer = "InfiniBand" if kind == "infiniband" else "Ethernet (RoCE)"
        raise TransportError(
            f"{kind} requested but this node has no RDMA port with {layer} link layer"
        )
    usable = usable_ports(inv, kind, allow_software=True)
    if not usable:
        raise TransportError(f"{kind} requested but {why_unusable(every)}")
    if peer is not None:
        reaching = [c for c in usable if reaches(inv, c, peer)]
        if not reaching:
            names = ", ".join(c.label for c in usable)
            raise TransportError(
                f"{kind} requested but no usable port ({names}) reaches peer {peer}"
            )
        usable = reaching
    return fastest(usable)


def why_unusable(candidates: Sequence[Candidate]) -> str:
    reasons = []
    for cand in candidates:
        if cand.port.state != "ACTIVE":
            reasons.append(f"port {cand.label} is {cand.port.state or 'in an unknown state'}")
        else:
            reasons.append(
                f"port {cand.label} has no RoCE v2 GID with an IPv4 address "
                f"(is an address configured on {cand.port.netdev or 'its interface'}?)"
            )
    return "; ".join(reasons)


def fastest(candidates: Sequence[Candidate]) -> Candidate:
    return min(candidates, key=lambda c: (-(c.port.rate_gbps or 0.0), c.label))


def reaches(inv: Inventory, cand: Candidate, peer: ipaddress.IPv4Address) -> bool:
    iface = inv.interface(cand.port.netdev)
    return iface is not None and network_address(iface, peer) is not None


def network_address(iface: NetInterface, peer: ipaddress.IPv4Address) -> str | None:
    """This interface's address on the connected network that contains ``peer``."""
    for cidr in iface.ipv4:
        network = ipaddress.IPv4Interface(cidr)
        if peer in network.network:
            return str(network.ip)
    return None


def v2_ipv4_gids(port: RdmaPort) -> list[Gid]:
    return [gid for gid in port.gids if gid.type == "RoCE v2" and gid.ipv4]


def others_warning(chosen: str, others: Sequence[str]) -> tuple[str, ...]:
    if not others:
        return ()
    return (
        f"several usable ports; chose {chosen} (fastest, then by name) over {', '.join(others)}; "
        "pass --peer to choose the one that reaches the other node",
    )
