"""The plan of an RDMA transport (InfiniBand, RoCE): NCCL/RCCL's HCA, GID index, GPUDirect
level and the socket interface for bootstrap."""

from __future__ import annotations

import ipaddress

from halo_cluster.facts.model import Inventory, NetInterface, RdmaPort
from halo_cluster.transport.choose import others_warning, usable_ports, v2_ipv4_gids
from halo_cluster.transport.env import base_env, interface_address, put_env, socket_interface
from halo_cluster.transport.model import (
    AMD_APU_TARGETS,
    RDMA_TRANSPORTS,
    ROCE_MIN_NETDEV_MTU,
    SOFTWARE_RDMA_DRIVERS,
    Candidate,
    TransportPlan,
)


def rdma_plan(inv: Inventory, cand: Candidate, peer: ipaddress.IPv4Address | None) -> TransportPlan:
    warnings: list[str] = []
    iface = inv.interface(cand.port.netdev)
    if peer is None:
        others = [c.label for c in usable_ports(inv, cand.kind, allow_software=True) if c != cand]
        others += [
            c.label
            for kind in RDMA_TRANSPORTS
            if kind != cand.kind
            for c in usable_ports(inv, kind, allow_software=False)
        ]
        warnings += others_warning(cand.label, others)
    if cand.kind == "infiniband":
        gid_index, address = 0, interface_address(iface, peer)
        gid_reason = "InfiniBand ports address by LID; GID 0 holds the port GUID"
    else:
        gid_index, address, gid_reason = roce_gid(cand, iface, peer, warnings)
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
    socket = socket_interface(inv, iface, peer, warnings)
    hca = f"{cand.device.name}:{cand.port.port}"
    env, reasons = base_env(socket, address)
    put_env(
        env, reasons, "NCCL_IB_DISABLE", "0", "RDMA is wanted: let NCCL use its IB/RoCE transport"
    )
    put_env(
        env,
        reasons,
        "NCCL_NET",
        "IB",
        "fail at start-up instead of falling back to sockets silently",
    )
    put_env(
        env,
        reasons,
        "NCCL_IB_HCA",
        f"={hca}",
        f"exact match (=): {cand.device.name} must not also select {cand.device.name}0 etc.",
    )
    put_env(env, reasons, "NCCL_IB_GID_INDEX", str(gid_index), gid_reason)
    set_gdr(inv, cand, env, reasons)
    driver = cand.device.driver or "unknown driver"
    transport_reason = f"{cand.kind} on {cand.label} ({port_rate(cand.port)}, {driver})"
    return TransportPlan(
        transport=cand.kind,
        hca=hca,
        gid_index=gid_index,
        socket_ifname=socket.name if socket else None,
        address=address,
        env=env,
        reasons={"transport": transport_reason, **reasons},
        warnings=tuple(warnings),
    )


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


def set_gdr(inv: Inventory, cand: Candidate, env: dict[str, str], reasons: dict[str, str]) -> None:
    apus = [gpu.name for gpu in inv.gpus if gpu.vendor == "amd" and gpu.name in AMD_APU_TARGETS]
    if apus:
        put_env(
            env,
            reasons,
            "NCCL_NET_GDR_LEVEL",
            "0",
            f"{apus[0]} is an APU: no GPUDirect RDMA, RCCL stages through host memory",
        )
    elif cand.device.driver in SOFTWARE_RDMA_DRIVERS:
        put_env(env, reasons, "NCCL_NET_GDR_LEVEL", "0", "software RDMA cannot reach GPU memory")


def port_rate(port: RdmaPort) -> str:
    return "unknown rate" if port.rate_gbps is None else f"{port.rate_gbps:g} Gb/s"
