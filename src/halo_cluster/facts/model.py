"""The facts of one node as frozen dataclasses; ``Inventory.to_dict()`` is the JSON contract
documented in docs/inventory.md."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "halo.inventory/1"


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str | None
    netdev: str | None
    ipv4: str | None


@dataclass(frozen=True)
class RdmaPort:
    port: int
    state: str | None
    phys_state: str | None
    link_layer: str | None
    rate_gbps: float | None
    netdev: str | None
    gids: tuple[Gid, ...]
    xmit_bytes: int | None
    rcv_bytes: int | None
    counters: Mapping[str, int]
    hw_counters: Mapping[str, int]


@dataclass(frozen=True)
class RdmaDevice:
    name: str
    driver: str | None
    node_type: str | None
    fw_ver: str | None
    pci: str | None
    ports: tuple[RdmaPort, ...]


@dataclass(frozen=True)
class NetInterface:
    name: str
    kind: str
    mtu: int | None
    state: str | None
    speed_mbps: int | None
    driver: str | None
    pci: str | None
    ipv4: tuple[str, ...]
    ipv6: tuple[str, ...]


@dataclass(frozen=True)
class PciLink:
    current_speed_gts: float | None
    current_width: int | None
    max_speed_gts: float | None
    max_width: int | None
    driver: str | None


@dataclass(frozen=True)
class Gpu:
    vendor: str
    name: str | None
    pci: str | None
    vram_total_bytes: int | None
    gtt_total_bytes: int | None


@dataclass(frozen=True)
class Devices:
    infiniband: tuple[str, ...]
    kfd: bool
    dri: tuple[str, ...]


@dataclass(frozen=True)
class OsInfo:
    id: str | None
    version_id: str | None


@dataclass(frozen=True)
class KernelInfo:
    release: str | None
    cmdline: str | None


@dataclass(frozen=True)
class Memory:
    total_kib: int | None


@dataclass(frozen=True)
class RdmaCore:
    """rdma-core in this environment: the release (from ``libibverbs.so.1.14.<release>.0``)
    and the verbs providers installed (``libirdma-rdmav34.so`` -> ``irdma``)."""

    release: int | None
    library: str | None
    providers: tuple[str, ...]


@dataclass(frozen=True)
class Firewall:
    """Host firewall configuration: which backend is configured and which interfaces it trusts."""

    backend: str | None  # firewalld / ufw / None
    default_zone: str | None
    zones: Mapping[str, str]  # interface -> firewalld zone
    trusted_interfaces: tuple[str, ...]


@dataclass(frozen=True)
class AmdMemory:
    """Kernel limits on GPU-visible system memory (``sys/module/*/parameters``)."""

    gttsize_mib: int | None
    ttm_pages_limit: int | None


@dataclass(frozen=True)
class Inventory:
    hostname: str | None
    os: OsInfo
    kernel: KernelInfo
    memory: Memory
    memlock_bytes: int | None
    rdma: tuple[RdmaDevice, ...]
    net: tuple[NetInterface, ...]
    pci: Mapping[str, PciLink]
    gpus: tuple[Gpu, ...]
    devices: Devices
    rdma_core: RdmaCore = field(default=RdmaCore(None, None, ()))
    firewall: Firewall = field(default=Firewall(None, None, {}, ()))
    amd_memory: AmdMemory = field(default=AmdMemory(None, None))
    container: str | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **_plain(self)}

    def interface_with_address(self, address: str | None) -> NetInterface | None:
        """The interface holding the IPv4 ``address`` (None without one, or without it)."""
        if not address:
            return None
        return next((i for i in self.net if any(c.split("/")[0] == address for c in i.ipv4)), None)

    def interface(self, name: str | None) -> NetInterface | None:
        return next((iface for iface in self.net if iface.name == name), None)


@dataclass(frozen=True)
class PathCounters:
    """One path's byte counters on one node (None: not readable there)."""

    name: str  # the interface, or HCA/port
    rx_bytes: int | None
    tx_bytes: int | None

    def to_dict(self) -> dict[str, int | str | None]:
        return {"name": self.name, "rx_bytes": self.rx_bytes, "tx_bytes": self.tx_bytes}


def _plain(obj: Any) -> Any:
    """Dataclasses, tuples and mappings -> JSON-ready dicts and lists (key order kept)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {key: _plain(value) for key, value in obj.items()}
    if isinstance(obj, (tuple, list)):
        return [_plain(item) for item in obj]
    return obj


def inventory_from_dict(data: Mapping[str, Any]) -> Inventory:
    """Rebuild an Inventory from its JSON form (as sent back by a remote ``halo inventory``)."""
    return Inventory(
        hostname=data.get("hostname"),
        os=OsInfo(**data["os"]),
        kernel=KernelInfo(**data["kernel"]),
        memory=Memory(**data["memory"]),
        memlock_bytes=data.get("memlock_bytes"),
        rdma=tuple(_device_from_dict(dev) for dev in data["rdma"]),
        net=tuple(
            NetInterface(**{**iface, "ipv4": tuple(iface["ipv4"]), "ipv6": tuple(iface["ipv6"])})
            for iface in data["net"]
        ),
        pci={bdf: PciLink(**link) for bdf, link in data["pci"].items()},
        gpus=tuple(Gpu(**gpu) for gpu in data["gpus"]),
        devices=Devices(
            infiniband=tuple(data["devices"]["infiniband"]),
            kfd=data["devices"]["kfd"],
            dri=tuple(data["devices"]["dri"]),
        ),
        rdma_core=RdmaCore(
            **{**data["rdma_core"], "providers": tuple(data["rdma_core"]["providers"])}
        ),
        firewall=Firewall(
            **{
                **data["firewall"],
                "trusted_interfaces": tuple(data["firewall"]["trusted_interfaces"]),
            }
        ),
        amd_memory=AmdMemory(**data["amd_memory"]),
        container=data.get("container"),
        versions=dict(data.get("versions", {})),
        warnings=tuple(data.get("warnings", ())),
    )


def _device_from_dict(dev: Mapping[str, Any]) -> RdmaDevice:
    ports = tuple(
        RdmaPort(**{**port, "gids": tuple(Gid(**gid) for gid in port["gids"])})
        for port in dev["ports"]
    )
    return RdmaDevice(**{**dev, "ports": ports})
