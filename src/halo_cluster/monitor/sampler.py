"""Counter sampling: immutable timestamped snapshots of every counter the inventory knows.

Series are keyed by (metric name, labels). The file list is discovered from the inventory
and checked again every ``rescan_s`` (cheaply: the device and interface names and where
their links point); a device that vanished (hot-unplug, driver reload) drops its series and
counts an error, and one that appears or comes back is discovered with its series.

A long-lived exporter must not run out of descriptors: up to ``fd_budget`` files stay open
and are read with ``pread`` at offset 0 (the per-second hot path); the others are opened,
read and closed each sample. Every open is non-blocking and every read at most 256 bytes,
so a FIFO or device put in place of a counter is an error, never a hang.

A file kept open is the file as it was opened: one replaced by rename (or deleted and
written anew) would keep its old value. So each sample looks at every directory holding
open files (one stat each: a rename or a new file moves its mtime); where one changed, its
open files are compared with their names by inode, and reopened when they differ.

Power sources (``facts.power``: amdgpu's hwmon, RAPL through powercap) are files like the
others: a gauge in microwatts becomes watts; an energy counter in microjoules becomes a
running total of joules that never goes down (see ``EnergyTotal``), kept across discoveries.
"""

from __future__ import annotations

import errno
import math
import os
import resource
import stat
import time
from dataclasses import dataclass, field

from halo_cluster.errors import HaloError, ParseError
from halo_cluster.facts import parsers as p
from halo_cluster.facts.energy import counter_increase
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import COUNTER, GAUGE, Inventory
from halo_cluster.facts.power import HWMON, POWERCAP, parse_micro
from halo_cluster.facts.rdma import byte_totals
from halo_cluster.facts.root import Root
from halo_cluster.monitor.snapshot import Key, Labels, Snapshot

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
RDMA_DIR, NET_DIR, DRM_DIR = "sys/class/infiniband", "sys/class/net", "sys/class/drm"
TX_BYTES, RX_BYTES = "halo_rdma_port_transmit_bytes_total", "halo_rdma_port_receive_bytes_total"
WATTS, JOULES = "halo_node_power_watts", "halo_node_energy_joules_total"
POWER_DIRS = {"amdgpu": HWMON, "rapl": POWERCAP}  # a reading's tool -> where its source lives
MICRO_KINDS = frozenset(("microwatts", "microjoules"))
RESCAN_S = 10.0
SETTLED_NS = 2_000_000_000  # a directory changed this recently may change again unseen
READ_BYTES = 256  # a counter file holds one number
MAX_COUNTER = 2**64 - 1
MAX_CACHED_FDS = 4096
# errors that say the file (or its device) is gone, not that its content is bad
_GONE = {errno.ENOENT, errno.ENODEV, errno.ENXIO, errno.ESTALE, errno.ENOTDIR}
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def default_fd_budget() -> int:
    """Files kept open: half the descriptors this process may have, less a reserve for
    sockets (scrapes, probes) and the interpreter, and never more than MAX_CACHED_FDS."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CACHED_FDS
    return max(0, min(MAX_CACHED_FDS, soft // 2 - 64))


@dataclass
class _Source:
    """One file: where, what it becomes, how to parse it."""

    rel: str
    key: Key
    kind: str  # counter / gauge / state / operstate / words (PMA data, ×4) / micro{watts,joules}
    group: str  # the device directory whose disappearance drops this source
    host: str = ""  # the host path, its links resolved inside the root at discovery
    fd: int = -1  # kept open (within the budget), else -1: opened for each read
    port: Labels = ()  # the RDMA port whose byte totals this counter feeds
    family: str = ""  # with ``port``: "counters" (PMA) or "hw_counters"
    counter: str = ""  # with ``port``: the counter's file name
    wrap_j: float | None = None  # microjoules: where the counter wraps, when the source says


class EnergyTotal:
    """Joules an energy counter has counted, as a total that never goes down: each reading
    adds its increase over the one before (``facts.energy.counter_increase``: a decrease is
    one wrap where the range is known). A decrease of unknown range adds nothing: the total
    goes on from the new reading, and ``add`` says so (the sampler counts it as an error).
    The first reading is the total as the source counts it."""

    __slots__ = ("last_j", "total_j")

    def __init__(self, first_j: float) -> None:
        self.last_j = self.total_j = first_j

    def add(self, reading_j: float, wrap_j: float | None) -> bool:
        """Take a new reading; False where it went down and its range is unknown."""
        step = counter_increase(self.last_j, reading_j, wrap_j)
        self.last_j = reading_j
        if step is None:
            return False
        self.total_j += step
        return True


@dataclass
class _Port:
    """The raw counters of one RDMA port in this sample, for the shared byte-total rule."""

    has_pma: bool
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)


class Sampler:
    def __init__(
        self, root_path: str = "/", rescan_s: float = RESCAN_S, fd_budget: int | None = None
    ) -> None:
        self.root = Root(root_path)
        self.rescan_s = rescan_s
        self.fd_budget = default_fd_budget() if fd_budget is None else fd_budget
        self.sources: list[_Source] = []
        self.entries: dict[str, str] = {}  # group -> its entry's host path (for vanishing)
        self.static: dict[Key, float] = {}
        self.ports: dict[Labels, bool] = {}  # RDMA port -> has a PMA (counters/port_xmit_data)
        self.scrape_errors = 0
        self.energy_restarts = 0  # energy counters that went down with no known range
        self.energy: dict[Key, EnergyTotal] = {}  # kept across discoveries: never goes down
        self.discoveries = 0
        self._signature: object = None
        self._dirs: dict[str, list[_Source]] = {}  # directory -> its files kept open
        self._dir_seen: dict[str, tuple[int, int, bool]] = {}  # inode, mtime, recent
        self._dirty = False  # a file went missing: look again at the next rescan
        self._next_scan = 0.0
        self.discover()

    # -- discovery ------------------------------------------------------------------------
    def discover(self) -> None:
        """Every counter file of the node, from a fresh inventory."""
        signature = self.signature()
        inv = collect_inventory(self.root.path)
        sources, static, ports = _sources_of(inv, Root(self.root.path))
        self.close()
        resolved: dict[str, str | None] = {}

        def host(rel: str) -> str | None:
            directory, _, name = rel.rpartition("/")
            if directory not in resolved:  # links are resolved once per directory
                resolved[directory] = _jailed_dir(self.root, directory)
            base = resolved[directory]
            return None if base is None else os.path.join(base, name)

        kept: list[_Source] = []
        entries: dict[str, str] = {}
        for source in sources:
            path, entry = host(source.rel), entries.get(source.group) or host(source.group)
            if path is None or entry is None:
                continue
            source.host, entries[source.group] = path, entry
            if len(kept) < self.fd_budget:
                source.fd = _open(path)
                if source.fd < 0:
                    continue  # missing, or not a regular file: not a counter of this node
            elif not _is_regular(path):
                continue
            kept.append(source)
        self.sources, self.entries, self.static, self.ports = kept, entries, static, ports
        self._index_dirs()
        self._signature, self._dirty = signature, False
        self._next_scan = time.monotonic() + self.rescan_s
        self.discoveries += 1

    def signature(self) -> object:
        """What discovery depends on, read cheaply: RDMA devices with their ports,
        interfaces with their ifindex (a re-created interface gets a new one), DRM cards,
        hwmon devices and powercap zones, and where every RDMA and interface link points."""
        root = Root(self.root.path)  # a fresh one: its warnings are not kept
        rdma = tuple(
            (
                name,
                root.resolve(f"{RDMA_DIR}/{name}"),
                tuple(root.listdir(f"{RDMA_DIR}/{name}/ports")),
            )
            for name in root.listdir(RDMA_DIR)
        )
        net = tuple(
            (name, root.resolve(f"{NET_DIR}/{name}"), root.read(f"{NET_DIR}/{name}/ifindex"))
            for name in root.listdir(NET_DIR)
        )
        power = tuple(root.listdir(HWMON)), tuple(root.listdir(POWERCAP))
        return rdma, net, tuple(root.listdir(DRM_DIR)), power

    def rescan(self) -> bool:
        """Discover again when the node changed (or a file went missing); True when it did."""
        self._next_scan = time.monotonic() + self.rescan_s
        if not self._dirty and self.signature() == self._signature:
            return False
        try:
            self.discover()
        except (HaloError, OSError):
            self.scrape_errors += 1  # the root itself is unreadable: keep what we have
            return False
        return True

    def close(self) -> None:
        for source in self.sources:
            if source.fd >= 0:
                os.close(source.fd)
                source.fd = -1
        self.sources = []
        self._index_dirs()

    def _index_dirs(self) -> None:
        self._dirs, self._dir_seen = {}, {}
        for source in self.sources:
            if source.fd >= 0:
                self._dirs.setdefault(os.path.dirname(source.host), []).append(source)

    def _follow_renames(self) -> None:
        """Reopen the open files whose name now means another file (see the module's
        docstring); one stat per directory when nothing changed."""
        now_ns = time.time_ns()
        for directory, sources in self._dirs.items():
            try:
                st = os.stat(directory)
            except OSError:
                continue  # gone: its reads say so
            seen = self._dir_seen.get(directory)
            if seen is not None and seen[:2] == (st.st_ino, st.st_mtime_ns) and not seen[2]:
                continue
            recent = st.st_mtime_ns > now_ns - SETTLED_NS
            self._dir_seen[directory] = (st.st_ino, st.st_mtime_ns, recent)
            for source in sources:
                if source.fd >= 0 and not _same_file(source.fd, source.host):
                    os.close(source.fd)
                    source.fd = _open(source.host)  # -1: opened for each read from now on

    def open_files(self) -> int:
        return sum(1 for s in self.sources if s.fd >= 0)

    # -- sampling -------------------------------------------------------------------------
    def sample(self) -> Snapshot:
        gone = self._vanished_groups()
        if gone:
            self._drop(gone)
        if time.monotonic() >= self._next_scan:
            self.rescan()
        self._follow_renames()
        values: dict[Key, float] = dict(self.static)
        ports = {labels: _Port(has_pma) for labels, has_pma in self.ports.items()}
        errors = 0
        for source in self.sources:
            try:
                number = _number(source.kind, self._read(source))
            except (OSError, ParseError):
                errors += 1
                continue
            if number is None:
                continue
            if source.kind in MICRO_KINDS:
                if not self._power(source, number, values):
                    errors += 1
                continue
            if source.port:
                port = ports[source.port]
                family = port.counters if source.family == "counters" else port.hw_counters
                family[source.counter] = int(number)
            values[source.key] = float(number * 4 if source.kind == "words" else number)
        for labels, port in ports.items():
            xmit, rcv = byte_totals(port.has_pma, port.counters, port.hw_counters)
            if xmit is not None:
                values[(TX_BYTES, labels)] = float(xmit)
            if rcv is not None:
                values[(RX_BYTES, labels)] = float(rcv)
        self.scrape_errors += errors + len(gone)
        values[("halo_scrape_errors_total", ())] = float(self.scrape_errors)
        return Snapshot(time.monotonic(), values, errors, tuple(sorted(gone)))

    def _power(self, source: _Source, micro: int | float, values: dict[Key, float]) -> bool:
        """A power source's series: watts, or the running total of joules (False where the
        counter went down with no known range)."""
        if source.kind == "microwatts":
            values[source.key] = micro / 1e6
            return True
        joules = micro / 1e6
        total = self.energy.get(source.key)
        kept = True
        if total is None:
            total = self.energy[source.key] = EnergyTotal(joules)
        elif not total.add(joules, source.wrap_j):
            self.energy_restarts += 1
            kept = False
        values[source.key] = total.total_j
        return kept

    def _read(self, source: _Source) -> bytes:
        if source.fd >= 0:
            try:
                return os.pread(source.fd, READ_BYTES, 0)
            except OSError as err:
                if err.errno not in _GONE:
                    raise
                os.close(source.fd)  # the device was reset: its old attribute is dead
                source.fd = _open(source.host)
                if source.fd >= 0:
                    return os.pread(source.fd, READ_BYTES, 0)
                self._dirty = True
                raise
        try:
            fd = os.open(source.host, _OPEN_FLAGS)
        except OSError as err:
            if err.errno in _GONE:
                self._dirty = True
            raise
        try:
            return os.read(fd, READ_BYTES)
        finally:
            os.close(fd)

    def _vanished_groups(self) -> set[str]:
        """Device entries no longer in their class directory (one lstat each, of the entry
        itself: its link is not followed)."""
        groups = {s.group for s in self.sources}
        return {g for g in groups if not os.path.lexists(self.entries[g])}

    def _drop(self, groups: set[str]) -> None:
        for source in self.sources:
            if source.group in groups and source.fd >= 0:
                os.close(source.fd)
                source.fd = -1
        self.sources = [s for s in self.sources if s.group not in groups]
        self._index_dirs()
        names = {g.rsplit("/", 1)[-1] for g in groups}
        self.static = {k: v for k, v in self.static.items() if not _belongs(k, names)}
        self.ports = {k: v for k, v in self.ports.items() if dict(k)["device"] not in names}
        self._dirty = True


def _sources_of(
    inv: Inventory, root: Root
) -> tuple[list[_Source], dict[Key, float], dict[Labels, bool]]:
    """The sources, constant series and RDMA ports of an inventory."""
    sources: list[_Source] = []
    static: dict[Key, float] = {}
    ports: dict[Labels, bool] = {}
    for dev in inv.rdma:
        group = f"{RDMA_DIR}/{dev.name}"
        for port in dev.ports:
            base = f"{group}/ports/{port.port}"
            labels: Labels = (("device", dev.name), ("port", str(port.port)))
            ports[labels] = root.exists(f"{base}/counters/port_xmit_data")
            sources.append(
                _Source(f"{base}/state", ("halo_rdma_port_state", labels), "state", group)
            )
            # a rate that is no finite number (400 digits read as inf) is no rate at all,
            # as the inventory shows it (null): no series, rather than +Inf
            if port.rate_gbps is not None and math.isfinite(port.rate_gbps):
                static[("halo_rdma_port_rate_bytes_per_second", labels)] = port.rate_gbps * 1e9 / 8
            for family, names, metric in (
                ("counters", port.counters, "halo_rdma_port_counter_total"),
                ("hw_counters", port.hw_counters, "halo_rdma_hw_counter_total"),
            ):
                for name in names:
                    words = family == "counters" and name in ("port_xmit_data", "port_rcv_data")
                    sources.append(
                        _Source(
                            f"{base}/{family}/{name}",
                            (metric, (*labels, ("counter", name))),
                            "words" if words else "counter",
                            group,
                            port=labels,
                            family=family,
                            counter=name,
                        )
                    )
    for iface in inv.net:
        group = f"{NET_DIR}/{iface.name}"
        labels = (("interface", iface.name),)
        for name in NET_STATS:
            sources.append(
                _Source(f"{group}/statistics/{name}", (NET_METRIC[name], labels), "counter", group)
            )
        sources.append(_Source(f"{group}/operstate", ("halo_net_up", labels), "operstate", group))
        sources.append(_Source(f"{group}/mtu", ("halo_net_mtu_bytes", labels), "gauge", group))
        if iface.speed_mbps is not None:
            static[("halo_net_speed_bytes_per_second", labels)] = iface.speed_mbps * 1e6 / 8
    for bdf in inv.pci:
        group = f"sys/bus/pci/devices/{bdf}"
        sources.append(
            _Source(
                f"{group}/current_link_width",
                ("halo_pcie_link_width", (("pci", bdf),)),
                "gauge",
                group,
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
    sources += _power_sources(inv)
    return sources, static, ports


def _power_sources(inv: Inventory) -> list[_Source]:
    """The power sources the inventory read, as files: a reading's source is its hwmon
    device or powercap zone and attribute (``hwmon3/power1_average``,
    ``intel-rapl:0/energy_uj``). A source that is no file (amd-smi's) is not sampled."""
    sources = []
    for reading in inv.power:
        base = POWER_DIRS.get(reading.tool)
        if base is None or reading.kind not in (GAUGE, COUNTER):
            continue
        device = reading.source.split("/", 1)[0]
        labels: Labels = (("source", reading.source), ("domain", reading.domain))
        rel, group = f"{base}/{reading.source}", f"{base}/{device}"
        if reading.kind == GAUGE:
            sources.append(_Source(rel, (WATTS, labels), "microwatts", group))
        else:
            sources.append(
                _Source(rel, (JOULES, labels), "microjoules", group, wrap_j=reading.wrap_j)
            )
    return sources


def _jailed_dir(root: Root, rel: str) -> str | None:
    """The host path of a directory below the root, its links resolved inside the root."""
    resolved = root.resolve(rel)
    if resolved is None or resolved.startswith(".."):
        return None
    return os.path.join(root.path, resolved)


def _open(host: str) -> int:
    """A descriptor for a regular file, or -1 (then it is opened for each read, and a
    file that is missing or not regular is counted as an error there)."""
    try:
        fd = os.open(host, _OPEN_FLAGS)
    except OSError:
        return -1
    if not _regular(fd):
        os.close(fd)
        return -1
    return fd


def _same_file(fd: int, host: str) -> bool:
    """Whether the name still means the file the descriptor has open."""
    try:
        named, held = os.lstat(host), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _is_regular(host: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(host).st_mode)
    except OSError:
        return False


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _belongs(key: Key, names: set[str]) -> bool:
    labels = dict(key[1])
    return labels.get("device") in names or labels.get("interface") in names


def _number(kind: str, raw: bytes) -> int | float | None:
    """Most files hold a bare integer: int() takes the bytes as they are (the per-second hot
    path); anything else goes through the parsers. A counter is 0 to 2^64 - 1."""
    if kind in ("counter", "gauge", "words", "microwatts", "microjoules"):
        try:
            number = int(raw)
        except ValueError:
            return _value(kind, raw.decode("utf-8", "replace"))
        if kind != "gauge" and not 0 <= number <= MAX_COUNTER:
            raise ParseError("not a 64-bit counter", raw.decode("utf-8", "replace"))
        return number
    return _value(kind, raw.decode("utf-8", "replace"))


def _value(kind: str, text: str) -> int | float | None:
    if kind in MICRO_KINDS:
        micro = parse_micro(text)
        if micro > MAX_COUNTER:
            raise ParseError("not a 64-bit counter", text)
        return micro
    if kind == "state":
        return float(PORT_STATES.get(p.parse_numbered_name(text), 0))
    if kind == "operstate":
        # "unknown" is what loopback and many virtual drivers report while working
        return 0.0 if p.parse_text(text) in _DOWN_STATES else 1.0
    if kind == "gauge":
        return p.parse_int(text)
    counter = p.parse_counter(text)
    if counter is not None and counter > MAX_COUNTER:
        raise ParseError("not a 64-bit counter", text)
    return counter
