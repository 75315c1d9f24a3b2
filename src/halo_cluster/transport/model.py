"""The transport plan's value types and the constants every part of the planner shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from halo_cluster.facts.model import RdmaDevice, RdmaPort

WANTED = ("auto", "infiniband", "roce", "ethernet", "thunderbolt")
RDMA_TRANSPORTS = ("infiniband", "roce")
SOFTWARE_RDMA_DRIVERS = frozenset({"rdma_rxe", "rxe", "siw"})
# AMD APUs: the GPU's memory is host memory behind the IOMMU, so a NIC cannot DMA into it
# through GPUDirect RDMA; RCCL must stage through host buffers.
AMD_APU_TARGETS = frozenset(
    {"gfx1151", "gfx1150", "gfx1152", "gfx1103", "gfx1037", "gfx1036", "gfx1035", "gfx90c"}
)
ROCE_MIN_NETDEV_MTU = 4200  # 4096-byte RoCE MTU needs netdev MTU >= 4096 + headers


@dataclass(frozen=True)
class TransportPlan:
    transport: str
    hca: str | None
    gid_index: int | None
    socket_ifname: str | None
    address: str | None
    env: Mapping[str, str]
    reasons: Mapping[str, str]
    warnings: tuple[str, ...] = field(default=())

    @property
    def is_rdma(self) -> bool:
        return self.transport in RDMA_TRANSPORTS

    def to_dict(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "hca": self.hca,
            "gid_index": self.gid_index,
            "socket_ifname": self.socket_ifname,
            "address": self.address,
            "env": dict(self.env),
            "reasons": dict(self.reasons),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransportPlan:
        """The plan ``to_dict`` wrote (the cluster state file keeps every node's)."""
        return cls(**{**data, "warnings": tuple(data.get("warnings", ()))})


@dataclass(frozen=True)
class Candidate:
    device: RdmaDevice
    port: RdmaPort
    kind: str  # infiniband / roce

    @property
    def label(self) -> str:
        return f"{self.device.name}/{self.port.port}"
