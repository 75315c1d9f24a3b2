"""The plan of a TCP transport (Ethernet, Thunderbolt networking): sockets on the
interface that reaches the peer, and why RDMA is not used."""

from __future__ import annotations

import ipaddress

from halo_cluster.errors import TransportError
from halo_cluster.facts.model import Inventory
from halo_cluster.printable import quoted
from halo_cluster.transport.choose import (
    network_address,
    others_warning,
    rdma_candidates,
    usable_ports,
    why_unusable,
)
from halo_cluster.transport.env import (
    apu_names,
    badly_named,
    interface_address,
    ip_interfaces,
    require_name,
)
from halo_cluster.transport.path import RDMA_TRANSPORTS, SOFTWARE_RDMA_DRIVERS, Rail, TransportPlan
from halo_cluster.transport.render import EnvWhy, engine_env


def tcp_plan(inv: Inventory, wanted: str, peer: ipaddress.IPv4Address | None) -> TransportPlan:
    warnings: list[str] = []
    # Physical interfaces first; virtual ones (bonds, veths, bridges) only when they are all
    # there is, or when they are the ones on the peer's network.
    every = ip_interfaces(inv, include_virtual=True)
    candidates = ip_interfaces(inv) or every
    if wanted == "thunderbolt":
        candidates = [i for i in candidates if i.kind == "thunderbolt"]
        if not candidates:
            raise TransportError(
                "thunderbolt requested but no Thunderbolt network interface is up "
                "with an IPv4 address"
            )
    bad = badly_named(inv)
    if peer is not None:
        pool = candidates if wanted == "thunderbolt" else every
        reaching = [i for i in pool if network_address(i, peer)]
        if not reaching:  # the one on the peer's network may be there under a bad name
            for iface in bad:
                if network_address(iface, peer):
                    require_name(iface.name, f"the interface on peer {peer}'s network")
        if not reaching:
            if wanted == "thunderbolt":
                raise TransportError(
                    f"thunderbolt requested but no Thunderbolt interface reaches peer {peer}"
                )
            warnings.append(
                f"no interface is on the same network as peer {peer}; traffic will be routed"
            )
        candidates = reaching or candidates
    if not candidates:
        for iface in bad:  # the one there is has a name no engine can be given: say so
            require_name(iface.name, "the only interface with an IPv4 address")
        raise TransportError(
            "no network interface is up with an IPv4 address: nothing to carry traffic"
        )
    if bad:
        shown = ", ".join(quoted(i.name) for i in bad)
        warnings.append(f"skipped {shown}: not a name NCCL and Gloo can be given (see doctor)")
    # Fastest first; Wi-Fi only when nothing wired is there; then by name.
    ordered = sorted(candidates, key=lambda i: (i.kind == "wireless", -(i.speed_mbps or 0), i.name))
    iface = ordered[0]
    if peer is None and len(ordered) > 1:
        warnings.extend(others_warning(iface.name, [i.name for i in ordered[1:]]))
    transport = "thunderbolt" if iface.kind == "thunderbolt" else "ethernet"
    if wanted == "auto" and inv.rdma:
        warnings.append(f"running over TCP sockets although RDMA devices exist: {why_no_rdma(inv)}")
    rail = Rail(netdev=iface.name, address=interface_address(iface, peer))
    env, reasons = engine_env(transport, rail, EnvWhy())
    return TransportPlan(
        transport=transport,
        rails=(rail,),
        apu=bool(apu_names(inv)),
        env=env,
        reasons={"transport": f"TCP over {iface.name} ({iface.kind})", **reasons},
        warnings=tuple(warnings),
    )


def why_no_rdma(inv: Inventory) -> str:
    reasons = []
    for kind in RDMA_TRANSPORTS:
        usable = usable_ports(inv, kind, allow_software=False)
        for cand in rdma_candidates(inv, kind):
            if cand.device.driver in SOFTWARE_RDMA_DRIVERS and cand.port.state == "ACTIVE":
                reasons.append(
                    f"{cand.label} is software RDMA, slower than TCP "
                    "(ask --transport roce to use it anyway)"
                )
            elif cand in usable:
                reasons.append(f"{cand.label} does not reach the peer")
            else:
                reasons.append(why_unusable([cand]))
    return "; ".join(reasons) or "no port with a known link layer"
