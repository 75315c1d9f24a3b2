"""Counter sampling: immutable timestamped snapshots of every counter the inventory knows,
read through cached file descriptors (``pread`` at offset 0, no open/close per read).

Series are keyed by (metric name, labels). The file list is discovered from the inventory;
a device whose directory vanished (hot-unplug) drops its series and counts an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from halo_cluster.errors import ParseError
from halo_cluster.facts import parsers as p
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.root import Root

Labels = tuple[tuple[str, str], ...]
Key = tuple[str, Labels]
NET_STATS = (
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
)
NET_METRIC = {
    "rx_bytes": "halo_net_receive_bytes_total",
    "tx_bytes": "halo_net_transmit_bytes_total",
    "rx_packets": "halo_net_receive_packets_total",
    "tx_packets": "halo_net_transmit_packets_total",
    "rx_errors": "halo_net_receive_errors_total",
    "tx_errors": "halo_net_transmit_errors_total",
    "rx_dropped": "halo_net_receive_drop_total",
    "tx_dropped": "halo_net_transmit_drop_total",
}
_DOWN_STATES = ("down", "lowerlayerdown", "notpresent", "dormant")
PORT_STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}


@dataclass(frozen=True)
class Snapshot:
    time_s: float  # monotonic
    values: Mapping[Key, float]
    errors: int = 0  # files that could not be read in this sample
    vanished: tuple[str, ...] = field(default=())  # devices gone since the previous sample


@dataclass
class _Source:
    """One file: where, what it becomes, how to parse it."""

    rel: str
    key: Key
    kind: str  # counter / gauge / state / operstate / words (PMA data, ×4)
    group: str  # the device directory whose disappearance drops this source
    fd: int = -1
    byte_key: Key | None = None  # the normalised byte total this counter adds to


class Sampler:
    def __init__(self, root_path: str = "/") -> None:
        self.root = Root(root_path)
        self.sources: list[_Source] = []
        self.static: dict[Key, float] = {}
        self.scrape_errors = 0
        self.discover()

    # -- discovery ------------------------------------------------------------------------
    def discover(self) -> None:
        self.close()
        inv = collect_inventory(self.root.path)
        sources: list[_Source] = []
        static: dict[Key, float] = {}
        for dev in inv.rdma:
            group = f"sys/class/infiniband/{dev.name}"
            for port in dev.ports:
                base = f"{group}/ports/{port.port}"
                labels: Labels = (("device", dev.name), ("port", str(port.port)))
                sources.append(
                    _Source(f"{base}/state", ("halo_rdma_port_state", labels), "state", group)
                )
                if port.rate_gbps is not None:
                    static[("halo_rdma_port_rate_bytes_per_second", labels)] = (
                        port.rate_gbps * 1e9 / 8
                    )
                for name in port.counters:
                    kind = "words" if name in ("port_xmit_data", "port_rcv_data") else "counter"
                    sources.append(
                        _Source(
                            f"{base}/counters/{name}",
                            ("halo_rdma_port_counter_total", (*labels, ("counter", name))),
                            kind,
                            group,
                        )
                    )
                for name in port.hw_counters:
                    sources.append(
                        _Source(
                            f"{base}/hw_counters/{name}",
                            ("halo_rdma_hw_counter_total", (*labels, ("counter", name))),
                            "counter",
                            group,
                        )
                    )
        for iface in inv.net:
            group = f"sys/class/net/{iface.name}"
            labels = (("interface", iface.name),)
            for stat in NET_STATS:
                sources.append(
                    _Source(
                        f"{group}/statistics/{stat}", (NET_METRIC[stat], labels), "counter", group
                    )
                )
            sources.append(
                _Source(f"{group}/operstate", ("halo_net_up", labels), "operstate", group)
            )
            sources.append(_Source(f"{group}/mtu", ("halo_net_mtu_bytes", labels), "gauge", group))
            if iface.speed_mbps is not None:
                static[("halo_net_speed_bytes_per_second", labels)] = iface.speed_mbps * 1e6 / 8
        for bdf in inv.pci:
            group = f"sys/bus/pci/devices/{bdf}"
            labels = (("pci", bdf),)
            sources.append(
                _Source(
                    f"{group}/current_link_width", ("halo_pcie_link_width", labels), "gauge", group
                )
            )
        for gpu in inv.gpus:
            if gpu.vendor == "amd" and gpu.pci:
                group = f"sys/bus/pci/devices/{gpu.pci}"
                labels = (("gpu", gpu.pci), ("name", gpu.name or ""))
                for name, metric in (
                    ("mem_info_gtt_used", "halo_gpu_gtt_used_bytes"),
                    ("mem_info_vram_used", "halo_gpu_vram_used_bytes"),
                ):
                    sources.append(_Source(f"{group}/{name}", (metric, labels), "gauge", group))
        for source in sources:
            source.byte_key = _byte_key(source)
            try:
                source.fd = os.open(self.root.host_path(source.rel), os.O_RDONLY)
            except OSError:
                source.fd = -1
        self.sources = [s for s in sources if s.fd >= 0]
        self.static = static

    def close(self) -> None:
        for source in self.sources:
            if source.fd >= 0:
                os.close(source.fd)
                source.fd = -1
        self.sources = []

    # -- sampling -------------------------------------------------------------------------
    def sample(self) -> Snapshot:
        gone = self._vanished_groups()
        if gone:
            self._drop(gone)
        values: dict[Key, float] = dict(self.static)
        errors = 0
        bytes_totals: dict[Key, float] = {}
        for source in self.sources:
            try:
                raw = os.pread(source.fd, 256, 0)
                value = _fast_value(source.kind, raw)
            except (OSError, ParseError):
                errors += 1
                continue
            if value is None:
                continue
            values[source.key] = value
            if source.byte_key is not None:
                bytes_totals[source.byte_key] = bytes_totals.get(source.byte_key, 0.0) + value
        values.update(bytes_totals)
        self.scrape_errors += errors + len(gone)
        values[("halo_scrape_errors_total", ())] = float(self.scrape_errors)
        return Snapshot(time.monotonic(), values, errors, tuple(sorted(gone)))

    def _vanished_groups(self) -> set[str]:
        groups = {s.group for s in self.sources}
        return {g for g in groups if not os.path.exists(self.root.host_path(g))}

    def _drop(self, groups: set[str]) -> None:
        for source in self.sources:
            if source.group in groups:
                os.close(source.fd)
                source.fd = -1
        self.sources = [s for s in self.sources if s.fd >= 0]
        self.static = {k: v for k, v in self.static.items() if not _belongs(k, groups)}


def _belongs(key: Key, groups: set[str]) -> bool:
    labels = dict(key[1])
    names = {g.rsplit("/", 1)[-1] for g in groups}
    return labels.get("device") in names or labels.get("interface") in names


def _fast_value(kind: str, raw: bytes) -> float | None:
    """Most files hold a bare integer: int() takes the bytes as they are (the per-second hot
    path); anything else goes through the parsers."""
    if kind in ("counter", "gauge", "words"):
        try:
            number = int(raw)
        except ValueError:
            return _value(kind, raw.decode("utf-8", "replace"))
        if number < 0 and kind != "gauge":
            raise ParseError("negative counter", raw.decode("utf-8", "replace"))
        return float(number * 4 if kind == "words" else number)
    return _value(kind, raw.decode("utf-8", "replace"))


def _value(kind: str, text: str) -> float | None:
    if kind == "state":
        return float(PORT_STATES.get(p.parse_numbered_name(text), 0))
    if kind == "operstate":
        # "unknown" is what loopback and many virtual drivers report while working
        return 0.0 if p.parse_text(text) in _DOWN_STATES else 1.0
    if kind == "gauge":
        return float(p.parse_int(text))
    counter = p.parse_counter(text)
    if counter is None:
        return None
    return float(counter * 4 if kind == "words" else counter)


# Normalised RDMA byte totals: PMA data words ×4, or irdma's IPv4 + IPv6 octets.
_BYTE_SOURCES = {
    "port_xmit_data": "halo_rdma_port_transmit_bytes_total",
    "port_rcv_data": "halo_rdma_port_receive_bytes_total",
    "ip4OutOctets": "halo_rdma_port_transmit_bytes_total",
    "ip6OutOctets": "halo_rdma_port_transmit_bytes_total",
    "ip4InOctets": "halo_rdma_port_receive_bytes_total",
    "ip6InOctets": "halo_rdma_port_receive_bytes_total",
}


def _byte_key(source: _Source) -> Key | None:
    labels = dict(source.key[1])
    name = labels.get("counter")
    if name not in _BYTE_SOURCES:
        return None
    is_pma = source.key[0] == "halo_rdma_port_counter_total"
    if is_pma != name.startswith("port_"):
        return None
    return (_BYTE_SOURCES[name], (("device", labels["device"]), ("port", labels["port"])))
