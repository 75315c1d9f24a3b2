"""What ``halo bench net`` measures (pure): the node pairs, the legs of each pair per path
(management Ethernet, fabric TCP, fabric RDMA) or why a path cannot be measured, and the
line rate and PCIe ceiling a measured bandwidth is compared with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from halo_cluster.checks.network import pcie_ceiling_gbps
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import UsageError
from halo_cluster.facts.model import Inventory, NetInterface
from halo_cluster.mesh import Fabric


@dataclass(frozen=True)
class Leg:
    """One path between two nodes: the client runs on ``node`` against ``peer``."""

    node: NodeConfig
    peer: NodeConfig
    path: str
    source: str
    target: str
    # a routed fabric: the cables crossed (fabric: 1 or more; link: 1) and the cable's label
    hops: int | None = None
    cable: str | None = None


def legs(
    a: NodeConfig, b: NodeConfig, paths: Sequence[str], fabric: Fabric | None = None
) -> tuple[list[Leg], list[dict[str, str]]]:
    """The legs to measure and, for each path that cannot be, the reason. On a routed
    fabric the fabric path runs between the identities (one hop or more), and each cable
    between the two nodes is a ``link`` leg of its own (its two ends' addresses)."""
    chosen, skipped = [], []
    for path in paths:
        if path == "link":
            chosen += cable_legs(a, b, fabric)
            continue
        if path == "mgmt":
            source, target = a.mgmt_address or a.host, b.mgmt_address or b.host
        else:
            source, target = a.fabric_address or "", b.fabric_address or ""
        if not (source and target):
            skipped.append(
                {"pair": f"{a.name},{b.name}", "path": path, "reason": "no fabric_address"}
            )
            continue
        if path == "fabric" and source == (a.mgmt_address or a.host) and "mgmt" in paths:
            # one network only: the fabric path is the management path
            skipped.append(
                {
                    "pair": f"{a.name},{b.name}",
                    "path": path,
                    "reason": "the fabric address is the management address",
                }
            )
            continue
        hops = None
        if fabric is not None and path == "fabric":
            route = fabric.node(a.name).route_to(b.name)
            hops = route.hops if route is not None else None
        chosen.append(Leg(a, b, path, source, target, hops))
    return chosen, skipped


def cable_legs(a: NodeConfig, b: NodeConfig, fabric: Fabric | None) -> list[Leg]:
    """One leg per cable between ``a`` and ``b`` (none on a switch, or between nodes that
    are not cabled to each other)."""
    if fabric is None:
        return []
    return [
        Leg(
            a,
            b,
            "link",
            link.ip,
            link.peer_address,
            1,
            f"{a.name}:{link.ifname}-{b.name}:{link.peer_ifname}",
        )
        for link in fabric.node(a.name).links
        if link.peer == b.name
    ]


def pairs_of(config: Config, pair: str | None) -> list[tuple[NodeConfig, NodeConfig]]:
    by_name = {n.name: n for n in config.nodes}
    if pair:
        names = [p.strip() for p in pair.split(",")]
        if len(names) != 2 or names[0] == names[1]:
            raise UsageError(f"--pair {pair!r}: give two different node names, like node1,node2")
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise UsageError(
                f"--pair: no node {unknown[0]!r} in {config.path} (nodes: {', '.join(by_name)})"
            )
        return [(by_name[names[0]], by_name[names[1]])]
    if len(config.nodes) < 2:
        raise UsageError("bench net needs two nodes in the cluster config")
    nodes = list(config.nodes)
    return [(nodes[i], nodes[j]) for i in range(len(nodes)) for j in range(i + 1, len(nodes))]


def interface_for(inv: Inventory | None, address: str) -> NetInterface | None:
    return inv.interface_with_address(address) if inv is not None else None


def link_limits(inv: Inventory | None, address: str) -> tuple[float | None, float | None]:
    """(line rate Gb/s, PCIe ceiling Gb/s) of the interface holding ``address``."""
    iface = interface_for(inv, address)
    if iface is None:
        return None, None
    line = iface.speed_mbps / 1000 if iface.speed_mbps and iface.speed_mbps > 0 else None
    link = inv.pci.get(iface.pci) if (inv is not None and iface.pci) else None
    ceiling = None
    if link is not None and link.current_speed_gts and link.current_width:
        ceiling = pcie_ceiling_gbps(link.current_speed_gts, link.current_width)
    return line, ceiling


def pct(value: float | None, limit: float | None) -> float | None:
    return round(100 * value / limit, 1) if value is not None and limit else None
