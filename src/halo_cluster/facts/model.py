"""The facts of one node as frozen dataclasses; ``Inventory.to_dict()`` is the JSON contract
documented in docs/inventory.md."""

from __future__ import annotations

import dataclasses
import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from halo_cluster.jsonout import JsonObject

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
class HostHca:
    """What the host of a node whose commands run in a container (``exec_prefix``) has of
    RDMA, read outside it: its RDMA devices (sysfs names), its ``/dev/infiniband/uverbs*``
    and its rdma-core release (None: no libibverbs found there)."""

    devices: tuple[str, ...]
    uverbs: tuple[str, ...]
    release: int | None


@dataclass(frozen=True)
class Firewall:
    """Host firewall configuration: which backend is configured and which interfaces it trusts."""

    backend: str | None  # firewalld / ufw / None
    default_zone: str | None
    zones: Mapping[str, str]  # interface -> firewalld zone
    trusted_interfaces: tuple[str, ...]


@dataclass(frozen=True)
class AmdMemory:
    """Kernel limits on GPU-visible system memory (``sys/module/*/parameters``), as the
    running kernel holds them: ``ttm_pages_limit`` caps what TTM (so ROCm) may map, in 4 KiB
    pages; ``ttm_page_pool_size`` is how many freed pages TTM keeps for reuse (the kernel
    writes its computed default back when none was given)."""

    gttsize_mib: int | None
    ttm_pages_limit: int | None
    ttm_page_pool_size: int | None = None


GAUGE, COUNTER = "power", "energy"  # a power source: watts now, or joules since a start


@dataclass(frozen=True)
class PowerReading:
    """One source's value: watts (``kind`` power) or joules (``kind`` energy, a counter
    that wraps at ``wrap_j`` when the source says where)."""

    source: str  # "hwmon3/power1_average", "intel-rapl:0/energy_uj", "amd-smi gpu 0"
    tool: str  # "amdgpu", "rapl", "amd-smi"
    domain: str  # what it measures: "gpu" (amdgpu's SoC/GPU rail), "package-0", "psys"
    kind: str  # GAUGE or COUNTER
    value: float
    wrap_j: float | None = None

    def to_dict(self) -> JsonObject:
        return {"source": self.source, "tool": self.tool, "domain": self.domain,
                "kind": self.kind, "value": self.value, "wrap_j": self.wrap_j}  # fmt: skip

    @property
    def unit(self) -> str:
        return "W" if self.kind == GAUGE else "J"


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
    power: tuple[PowerReading, ...] = field(default=())  # facts.power: each source, read once
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> JsonObject:
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
    """Rebuild an Inventory from its JSON form (as sent back by a remote ``halo inventory``):
    every field of the type its dataclass declares, an interface's addresses CIDRs. Anything
    else is one ValueError naming the field (``net[0].mtu is 'abc', not an integer``), so a
    node that sends it is one unreadable inventory, not a crash in a check. Keys it does not
    know (a newer node's) are left out."""
    inventory: Inventory = _build(Inventory, data, "")
    for index, iface in enumerate(inventory.net):
        for family, kind in (("ipv4", ipaddress.IPv4Interface), ("ipv6", ipaddress.IPv6Interface)):
            for n, address in enumerate(getattr(iface, family)):
                try:
                    kind(address)
                except ValueError:
                    where = f"net[{index}].{family}[{n}]"
                    raise ValueError(
                        f"{where} is {_shown(address)}, not an address/prefix"
                    ) from None
    return inventory


def _build(cls: Any, data: Any, where: str) -> Any:
    """The dataclass ``cls`` from ``data``, each field typed by its annotation (a string:
    this module's annotations are not evaluated, Python 3.9 on nodes)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where or 'the inventory'} is {_shown(data)}, not an object")
    values = {}
    for item in dataclasses.fields(cls):
        place = f"{where}.{item.name}" if where else item.name
        if item.name in data:
            values[item.name] = _typed(str(item.type), data[item.name], place)
        elif item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
            raise ValueError(f"{place} is missing")
    return cls(**values)


def _typed(annotation: str, value: Any, where: str) -> Any:
    """``value`` as the type ``annotation`` names: int, float, str, bool, None, ``X | Y``,
    ``tuple[X, ...]``, ``Mapping[str, X]``, or a dataclass of this module."""
    arms = _split(annotation, "|")
    if len(arms) > 1:
        if value is None and "None" in arms:
            return None
        given = [arm for arm in arms if arm != "None"]
        if len(given) == 1:
            return _typed(given[0], value, where)
        raise TypeError(f"no reader for {annotation}")  # not in this module
    name, _, inner = annotation.partition("[")
    if inner:
        args = _split(inner[:-1], ",")
        if name == "tuple" and args[1:] == ["..."]:
            if not isinstance(value, list):
                raise ValueError(f"{where} is {_shown(value)}, not a list")
            return tuple(_typed(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if name == "Mapping" and args[0] == "str":
            if not isinstance(value, dict):
                raise ValueError(f"{where} is {_shown(value)}, not an object")
            return {k: _typed(args[1], v, f"{where}[{_shown(k)}]") for k, v in value.items()}
        raise TypeError(f"no reader for {annotation}")
    if name in _SCALARS:
        ok, what = _SCALARS[name]
        if not ok(value):
            raise ValueError(f"{where} is {_shown(value)}, not {what}")
        return value
    return _build(globals()[name], value, where)


_SCALARS: dict[str, tuple[Any, str]] = {
    "int": (lambda v: type(v) is int and v.bit_length() <= 64, "an integer"),
    "float": (
        lambda v: (
            (type(v) is int and v.bit_length() <= 64) or (type(v) is float and math.isfinite(v))
        ),
        "a number",
    ),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "None": (lambda v: v is None, "null"),
}


def _split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def _shown(value: Any) -> str:
    """``value`` in an error line: a container by its kind, anything else escaped and short."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    if isinstance(value, int) and value.bit_length() > 64:
        return "a number of more than 64 bits"
    text = ascii(value)
    return text if len(text) <= 40 else text[:37] + "..."
