"""What a node check looks at: the node's inventory plus what the cluster config says of it."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from halo_cluster.checks.fixes import family
from halo_cluster.checks.memory_owners import HostMemory
from halo_cluster.config import NodeConfig
from halo_cluster.errors import HaloError
from halo_cluster.facts.links import FabricView
from halo_cluster.facts.model import (
    Gpu,
    HostHca,
    Inventory,
    NetInterface,
    RdmaDevice,
    RdmaPort,
)
from halo_cluster.transport import AMD_APU_TARGETS, RDMA_TRANSPORTS, plan_transport

if TYPE_CHECKING:
    from halo_cluster.nodecode import Problem


@dataclass(frozen=True)
class NodeReport:
    """What gathering one node brought back: its inventory (None with the error when it
    could not be read), which peers its fabric address pinged, and ``ethtool -i``."""

    node: NodeConfig
    inventory: Inventory | None
    error: str | None = None
    pings: Mapping[str, bool] = field(default_factory=dict)  # peer node name -> reached
    ethtool: Mapping[str, str] | None = None
    python: Problem | None = None  # why halo's node code cannot run there (inventory is None)
    code_sent: bool = False  # halo's node code was sent to it (not yet cached there)
    # on a routed fabric: the host's view of the node's cables (None: unread), and whether
    # the far end of each cable answered (interface -> answered); ``pings`` then are jumbo
    # pings to every peer's identity
    links: FabricView | None = None
    link_pings: Mapping[str, bool] = field(default_factory=dict)
    # what each peer's name resolves to on the node's host (its first IPv4 address; None:
    # not at all); empty where it was not asked
    names: Mapping[str, str | None] = field(default_factory=dict)
    # a node with an exec_prefix: its host's RDMA, read outside the container (None: not
    # read, or no container)
    host_hca: HostHca | None = None
    host_memory: HostMemory | None = None  # the host's memory and its largest owners


@dataclass(frozen=True)
class NodeContext:
    inv: Inventory
    wanted: str = "auto"
    fabric_address: str | None = None
    gpus: bool = True
    # interface -> `ethtool -i` output; None when ethtool could not be run
    ethtool: Mapping[str, str] | None = None
    # on a routed fabric: the node's cables (interfaces), the first of which the node checks
    # look at as its fabric interface (the fabric checks look at every one)
    links: tuple[str, ...] = ()

    @classmethod
    def of(cls, report: NodeReport, wanted: str) -> NodeContext:
        """The context of a gathered node (its inventory read): on a routed fabric its
        identity is on no cable, so its first cable stands for its fabric interface."""
        assert report.inventory is not None
        node = report.node
        return cls(
            report.inventory,
            wanted,
            None if node.links else node.fabric_address,
            gpus=node.gpus != 0,
            ethtool=report.ethtool,
            links=tuple(ifname for ifname, _ in node.links),
        )

    @cached_property
    def family(self) -> str:
        return family(self.inv.os.id)

    @property
    def wants_rdma(self) -> bool:
        return self.wanted in RDMA_TRANSPORTS or (self.wanted == "auto" and bool(self.inv.rdma))

    @cached_property
    def fabric_iface(self) -> NetInterface | None:
        """The interface holding the configured fabric address, else (a routed fabric) the
        node's first cable, else the one the transport plan of this node would use."""
        if self.links:
            return self.inv.interface(self.links[0])
        if self.fabric_address:
            address = ipaddress.IPv4Address(self.fabric_address)
            for iface in self.inv.net:
                if any(ipaddress.IPv4Interface(c).ip == address for c in iface.ipv4):
                    return iface
            return None
        try:
            return self.inv.interface(plan_transport(self.inv, self.wanted).netdev)
        except HaloError:
            return None

    @cached_property
    def fabric_ports(self) -> list[tuple[RdmaDevice, RdmaPort]]:
        """RDMA ports on the fabric interface; every port when that is unknown."""
        every = [(dev, port) for dev in self.inv.rdma for port in dev.ports]
        iface = self.fabric_iface
        on_fabric = [(d, p) for d, p in every if iface is not None and p.netdev == iface.name]
        return on_fabric or every

    @cached_property
    def apus(self) -> list[Gpu]:
        return [g for g in self.inv.gpus if g.vendor == "amd" and g.name in AMD_APU_TARGETS]
