"""The plan of an RDMA transport (InfiniBand, RoCE): the rail (device, port, GID index, the
socket interface for bootstrap), whether GPUDirect RDMA is off, and why."""

from __future__ import annotations

import ipaddress

from halo_cluster.facts.model import Inventory, NetInterface, RdmaPort
from halo_cluster.transport.choose import others_warning, usable_ports, v2_ipv4_gids
from halo_cluster.transport.env import (
    apu_names,
    interface_address,
    require_name,
    socket_interface,
)
from halo_cluster.transport.path import (
    RDMA_TRANSPORTS,
    ROCE_MIN_NETDEV_MTU,
    SOFTWARE_RDMA_DRIVERS,
    Candidate,
    Rail,
    TransportPlan,
)
from halo_cluster.transport.render import EnvWhy, engine_env


def rdma_plan(inv: Inventory, cand: Candidate, peer: ipaddress.IPv4Address | None) -> TransportPlan:
    if cand.port.netdev is not None:
        require_name(cand.port.netdev, cand.label)
    warnings = other_ports(inv, cand) if peer is None else []
    iface = inv.interface(cand.port.netdev)
    if cand.kind == "infiniband":
        gid_index, address = 0, interface_address(iface, peer)
        gid_reason = "InfiniBand ports address by LID; GID 0 holds the port GUID"
    else:
        gid_index, address, gid_reason = roce_gid(cand, iface, peer, warnings)
    warnings += port_warnings(cand, iface)
    socket = socket_interface(inv, iface, peer, warnings)
    rail = Rail(
        device=cand.device.name,
        port=cand.port.port,
        gid_index=gid_index,
        netdev=socket.name if socket else None,
        address=address,
    )
    apus = apu_names(inv)
    env, reasons = engine_env(cand.kind, rail, EnvWhy(gid_reason, gdr_off(cand, apus)))
    driver = cand.device.driver or "unknown driver"
    transport_reason = f"{cand.kind} on {cand.label} ({port_rate(cand.port)}, {driver})"
    return TransportPlan(
        transport=cand.kind,
        rails=(rail,),
        apu=bool(apus),
        env=env,
        reasons={"transport": transport_reason, **reasons},
        warnings=tuple(warnings),
    )


def other_ports(inv: Inventory, cand: Candidate) -> list[str]:
    """The warning naming the other usable ports, when there are some (no peer to choose)."""
    others = [c.label for c in usable_ports(inv, cand.kind, allow_software=True) if c != cand]
    others += [
        c.label
        for kind in RDMA_TRANSPORTS
        if kind != cand.kind
        for c in usable_ports(inv, kind, allow_software=False)
    ]
    return list(others_warning(cand.label, others))


def port_warnings(cand: Candidate, iface: NetInterface | None) -> list[str]:
    warnings = []
    if cand.device.driver in SOFTWARE_RDMA_DRIVERS:
        warnings.append(
            f"{cand.label} is software RDMA ({cand.device.driver}): slower than kernel TCP; "
            "use it to test, not to serve"
        )
    if cand.kind == "roce" and iface is not None and (iface.mtu or 0) < ROCE_MIN_NETDEV_MTU:
        warnings.append(
            f"{iface.name} MTU is {iface.mtu}: RoCE will run at 1024-byte MTU; "
            "set MTU 9000 on both nodes"
        )
    return warnings


def roce_gid(
    cand: Candidate,
    iface: NetInterface | None,
    peer: ipaddress.IPv4Address | None,
    warnings: list[str],
) -> tuple[int, str, str]:
    """The IPv4 RoCE v2 entry for the interface's address (on the peer's network if known)."""
    gids = v2_ipv4_gids(cand.port)
    preferred = interface_address(iface, peer)
    own = {cidr.split("/")[0] for cidr in iface.ipv4} if iface else set()
    chosen = next((g for g in gids if g.ipv4 == preferred), None) or next(
        (g for g in gids if g.ipv4 in own), None
    )
    if chosen is None:
        chosen = gids[0]
        warnings.append(
            f"no RoCE v2 GID of {cand.label} matches an address of {cand.port.netdev}; "
            f"using index {chosen.index} ({chosen.ipv4})"
        )
    reason = (
        f"the RoCE v2 entry of {cand.label} for {chosen.ipv4} ({cand.port.netdev}) "
        f"is index {chosen.index}"
    )
    return chosen.index, str(chosen.ipv4), reason


def gdr_off(cand: Candidate, apus: list[str]) -> str | None:
    """Why GPUDirect RDMA must be off on this node (None: NCCL decides)."""
    if apus:
        return f"{apus[0]} is an APU: no GPUDirect RDMA, RCCL stages through host memory"
    if cand.device.driver in SOFTWARE_RDMA_DRIVERS:
        return "software RDMA cannot reach GPU memory"
    return None


def port_rate(port: RdmaPort) -> str:
    return "unknown rate" if port.rate_gbps is None else f"{port.rate_gbps:g} Gb/s"
