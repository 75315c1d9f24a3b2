"""The transport plan: each node's typed fabric path (its rails: device, port, GID, netdev,
address), made by a pure function from that node's facts (+ the peer's address and the
wanted transport), and rendered for every consumer (NCCL/RCCL, Gloo, the counters, perftest).

Plans are per node: HCA names and GID indexes differ between nodes, so every node
computes its own (never "auto" decided on the head and pushed to the workers).

The parts: transport/path.py (the typed path: TransportPlan and its Rails, constants),
transport/choose.py (ports and interfaces), transport/rdma.py and transport/tcp.py (the two
kinds of plan on a switch), transport/routed.py (a node cabled point to point: a rail per
cable, and its identity), transport/env.py (what they share), transport/render.py (one renderer per
consumer: the NCCL/RCCL/Gloo environment, the counters command's path arguments, perftest's
device, port and GID).
"""

from __future__ import annotations

from halo_cluster.errors import UsageError
from halo_cluster.facts.model import Inventory
from halo_cluster.mesh import NodeFabric
from halo_cluster.transport.choose import fastest, peer_address, pick_rdma, reaches, usable_ports
from halo_cluster.transport.path import (
    AMD_APU_TARGETS,
    RDMA_TRANSPORTS,
    ROCE_MIN_NETDEV_MTU,
    SOFTWARE_RDMA_DRIVERS,
    WANTED,
    Rail,
    TransportPlan,
)
from halo_cluster.transport.rdma import rdma_plan
from halo_cluster.transport.routed import routed_plan
from halo_cluster.transport.tcp import tcp_plan

__all__ = [
    "AMD_APU_TARGETS",
    "RDMA_TRANSPORTS",
    "ROCE_MIN_NETDEV_MTU",
    "SOFTWARE_RDMA_DRIVERS",
    "WANTED",
    "Rail",
    "TransportPlan",
    "plan_transport",
]


def plan_transport(
    inv: Inventory, wanted: str = "auto", peer: str | None = None, fabric: NodeFabric | None = None
) -> TransportPlan:
    """Choose the transport, port, GID and interface for this node; raise TransportError
    when ``wanted`` cannot work here (never a silent downgrade). ``fabric``: the node's part
    of a routed fabric (its cables and identity), which decides instead of ``peer``."""
    if wanted not in WANTED:
        raise UsageError(f"unknown transport {wanted!r}; choose one of {', '.join(WANTED)}")
    if fabric is not None:
        return routed_plan(inv, wanted, fabric)
    peer_ip = peer_address(peer)
    if wanted in RDMA_TRANSPORTS:
        return rdma_plan(inv, pick_rdma(inv, wanted, peer_ip), peer_ip)
    if wanted == "auto":
        for kind in RDMA_TRANSPORTS:
            candidates = usable_ports(inv, kind, allow_software=False)
            if peer_ip is not None:
                candidates = [c for c in candidates if reaches(inv, c, peer_ip)]
            if candidates:
                return rdma_plan(inv, fastest(candidates), peer_ip)
    return tcp_plan(inv, wanted, peer_ip)
