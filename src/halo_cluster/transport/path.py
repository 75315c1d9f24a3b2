"""The typed fabric path of one node: its rails (RDMA device, port, GID index, IP interface,
address), whether its GPUs are APUs, and the environment rendered from them; plus the
constants every part of the transport shares.

Consumers read the typed fields (``plan.device``, ``plan.port``, ``plan.netdev``) and render
what their tool needs with ``transport/render.py``; nothing parses ``"dev:port"`` back, except
``TransportPlan.from_dict`` reading a state file written before the rails existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from halo_cluster.errors import ParseError
from halo_cluster.facts.model import RdmaDevice, RdmaPort
from halo_cluster.jsonout import JsonObject

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
class Rail:
    """One link of a node into the fabric. RDMA rails have a device, its port (from 1) and
    the GID index; every rail has the IP interface its socket traffic (NCCL bootstrap, Gloo)
    uses and this node's address there, when known."""

    device: str | None = None
    port: int | None = None
    gid_index: int | None = None
    netdev: str | None = None
    address: str | None = None

    @property
    def hca(self) -> str | None:
        """``dev:port`` as NCCL and the JSON write it (None without an RDMA port). A rendering
        for people and for NCCL: never parse it back, read ``device`` and ``port``."""
        if self.device is None or self.port is None:
            return None
        return f"{self.device}:{self.port}"

    def to_dict(self) -> JsonObject:
        return {
            "device": self.device,
            "port": self.port,
            "gid_index": self.gid_index,
            "netdev": self.netdev,
            "address": self.address,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rail:
        return cls(
            device=_text(data, "device"),
            port=_number(data, "port"),
            gid_index=_number(data, "gid_index"),
            netdev=_text(data, "netdev"),
            address=_text(data, "address"),
        )


@dataclass(frozen=True)
class TransportPlan:
    """What one node uses to reach the others. ``rails[0]`` is the primary rail (one today;
    the tuple is there for several ports, NICs or USB4 links per node). ``apu``: the node's
    GPU is an AMD APU (unified memory), decided from its GPUs."""

    transport: str  # infiniband / roce / ethernet / thunderbolt
    rails: tuple[Rail, ...]
    apu: bool
    env: Mapping[str, str]
    reasons: Mapping[str, str]
    warnings: tuple[str, ...] = field(default=())
    # a routed fabric (nodes cabled point to point): the node's identity interface and
    # address, which what binds one address uses; the rails are then its cables
    identity: Rail | None = None

    def __post_init__(self) -> None:
        if not self.rails:
            raise ValueError("a transport plan has at least one rail")

    @property
    def is_rdma(self) -> bool:
        return self.transport in RDMA_TRANSPORTS

    @property
    def rail(self) -> Rail:
        """The primary rail."""
        return self.rails[0]

    @property
    def device(self) -> str | None:
        return self.rail.device

    @property
    def port(self) -> int | None:
        return self.rail.port

    @property
    def gid_index(self) -> int | None:
        return self.rail.gid_index

    @property
    def netdev(self) -> str | None:
        return self.rail.netdev

    @property
    def address(self) -> str | None:
        """The address this node is reached at: its identity on a routed fabric."""
        if self.identity is not None:
            return self.identity.address
        return self.rail.address

    def to_dict(self) -> JsonObject:
        """The stable JSON: the primary rail's fields at the top (``hca`` and
        ``socket_ifname`` as before the rails existed), then every rail."""
        return {
            "transport": self.transport,
            "hca": self.rail.hca,
            "device": self.device,
            "port": self.port,
            "gid_index": self.gid_index,
            "socket_ifname": self.netdev,
            "address": self.address,
            "apu": self.apu,
            "rails": [rail.to_dict() for rail in self.rails],
            "identity": self.identity.to_dict() if self.identity is not None else None,
            "env": dict(self.env),
            "reasons": dict(self.reasons),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransportPlan:
        """The plan ``to_dict`` wrote (the cluster state file keeps every node's), or the
        older shape without ``rails``/``apu`` (only ``hca``, ``socket_ifname``)."""
        reasons = dict(data.get("reasons", {}))
        rails = data.get("rails")
        apu = data.get("apu")
        identity = data.get("identity")
        return cls(
            transport=str(data["transport"]),
            rails=tuple(Rail.from_dict(r) for r in rails) if rails else (legacy_rail(data),),
            # before ``apu`` existed, serve read the APU from NCCL_NET_GDR_LEVEL's reason
            apu=apu if isinstance(apu, bool) else "APU" in reasons.get("NCCL_NET_GDR_LEVEL", ""),
            env=dict(data.get("env", {})),
            reasons=reasons,
            warnings=tuple(data.get("warnings", ())),
            identity=Rail.from_dict(identity) if isinstance(identity, Mapping) else None,
        )


def legacy_rail(data: Mapping[str, Any]) -> Rail:
    """The one rail of a plan written before the rails: ``hca`` is ``dev:port`` (the port is
    after the last colon), ``socket_ifname`` the IP interface."""
    device, port = None, None
    hca = _text(data, "hca")
    if hca is not None:
        device, colon, number = hca.rpartition(":")
        port = int(number) if number.isascii() and number.isdigit() and len(number) <= 3 else 0
        if not (colon and device and 1 <= port <= 255):
            raise ParseError("transport plan: hca is not DEVICE:PORT", hca)
    return Rail(
        device=device,
        port=port,
        gid_index=_number(data, "gid_index"),
        netdev=_text(data, "socket_ifname"),
        address=_text(data, "address"),
    )


def _text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    raise ParseError(f"transport plan: {key} is not a string", repr(value))


def _number(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ParseError(f"transport plan: {key} is not an integer", repr(value))


@dataclass(frozen=True)
class Candidate:
    device: RdmaDevice
    port: RdmaPort
    kind: str  # infiniband / roce

    @property
    def label(self) -> str:
        return f"{self.device.name}/{self.port.port}"
