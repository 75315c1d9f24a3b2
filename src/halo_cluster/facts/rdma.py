"""RDMA devices and ports from ``sys/class/infiniband`` (see docs/inventory.md)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from halo_cluster.facts import parsers as p
from halo_cluster.facts.model import Gid, RdmaDevice, RdmaPort
from halo_cluster.facts.root import Root, decoded_name, nearest_pci

CLASS_DIR = "sys/class/infiniband"
# Software RDMA devices have no parent device to take the driver from; their
# registered names are the only hint left (udev does not rename virtual devices).
_SOFTWARE_PREFIXES = {"rxe": "rdma_rxe", "siw": "siw"}


def read_rdma_devices(root: Root) -> tuple[RdmaDevice, ...]:
    return tuple(_read_device(root, name) for name in root.listdir(CLASS_DIR))


def _read_device(root: Root, name: str) -> RdmaDevice:
    base = f"{CLASS_DIR}/{name}"
    device_path = root.resolve(f"{base}/device")
    ports = tuple(
        _read_port(root, base, int(port), device_path)
        for port in root.listdir(f"{base}/ports")
        if p.is_uint(port)
    )
    return RdmaDevice(
        name=name,
        driver=_driver(root, base, name),
        node_type=root.parse(f"{base}/node_type", p.parse_numbered_name),
        fw_ver=root.parse(f"{base}/fw_ver", p.parse_optional_text),
        pci=nearest_pci(device_path),
        ports=ports,
    )


def _driver(root: Root, base: str, name: str) -> str | None:
    """The driver bound to the device's parent: the PCI function (mlx5_core) or an
    auxiliary device under it (irdma binds ``ice.roce.N``)."""
    driver = root.link_name(f"{base}/device/driver")
    if driver is not None:
        return driver
    if root.exists(f"{base}/parent"):  # rdma_rxe exposes the netdev it rides on
        return "rdma_rxe"
    for prefix, module in _SOFTWARE_PREFIXES.items():
        if name.startswith(prefix):
            return module
    return None


def _read_port(root: Root, base: str, port: int, device_path: str | None) -> RdmaPort:
    pbase = f"{base}/ports/{port}"
    gids = _read_gids(root, pbase)
    counters = _read_counters(root, f"{pbase}/counters")
    hw_counters = _read_counters(root, f"{pbase}/hw_counters")
    has_pma = root.exists(f"{pbase}/counters/port_xmit_data")
    xmit, rcv = byte_totals(has_pma, counters, hw_counters)
    netdev = next((gid.netdev for gid in gids if gid.netdev), None)
    return RdmaPort(
        port=port,
        state=root.parse(f"{pbase}/state", p.parse_numbered_name),
        phys_state=root.parse(f"{pbase}/phys_state", p.parse_numbered_name),
        link_layer=root.parse(f"{pbase}/link_layer", p.parse_text),
        rate_gbps=root.parse(f"{pbase}/rate", p.parse_rate_gbps),
        netdev=netdev or _function_netdev(root, device_path, port),
        gids=gids,
        xmit_bytes=xmit,
        rcv_bytes=rcv,
        counters=counters,
        hw_counters=hw_counters,
    )


def _read_gids(root: Root, pbase: str) -> tuple[Gid, ...]:
    gids: list[Gid] = []
    for entry in root.listdir(f"{pbase}/gids"):
        if not p.is_uint(entry):
            continue
        gid = root.parse(f"{pbase}/gids/{entry}", p.parse_gid)
        if gid is None or not p.gid_is_populated(gid):
            continue
        # The kernel answers EINVAL for attributes of unmapped entries and of IB ports.
        gids.append(
            Gid(
                index=int(entry),
                gid=gid,
                type=root.parse(
                    f"{pbase}/gid_attrs/types/{entry}", p.parse_optional_text, quiet=True
                ),
                netdev=root.parse(
                    f"{pbase}/gid_attrs/ndevs/{entry}", p.parse_optional_text, quiet=True
                ),
                ipv4=p.gid_ipv4(gid),
            )
        )
    return tuple(gids)


def _read_counters(root: Root, directory: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for name in root.listdir(directory):
        if name == "lifespan":  # the cache interval in ms, not a counter
            continue
        value = root.parse(f"{directory}/{name}", p.parse_counter)
        if value is not None:
            values[name] = value
    return values


def byte_totals(
    has_pma: bool, counters: Mapping[str, int], hw_counters: Mapping[str, int]
) -> tuple[int | None, int | None]:
    """Normalised (transmitted, received) byte totals of one port, the one rule that
    ``inventory`` and the exporter share. ``port_*_data`` counts 4-byte words (one per
    lane) and wins whenever the port has a PMA; irdma has no PMA counters, so its IPv4 +
    IPv6 octet counters stand in. A PMA that answers ``N/A`` leaves the totals unknown
    rather than mixing in other counters."""
    if has_pma:
        xmit = counters.get("port_xmit_data")
        rcv = counters.get("port_rcv_data")
        return (xmit * 4 if xmit is not None else None, rcv * 4 if rcv is not None else None)
    return _octets(hw_counters, "Out"), _octets(hw_counters, "In")


def _octets(hw: Mapping[str, int], direction: str) -> int | None:
    names = (f"ip4{direction}Octets", f"ip6{direction}Octets")
    if not any(name in hw for name in names):
        return None
    return sum(hw.get(name, 0) for name in names)


def _function_netdev(root: Root, device_path: str | None, port: int) -> str | None:
    """The netdev of the PCI function (or of the parent of an auxiliary device)."""
    if device_path is None:
        return None
    for directory in (device_path, posixpath.dirname(device_path)):
        names = root.listdir(f"{directory}/net")
        if not names:
            continue
        if len(names) == 1:
            return decoded_name(names[0])
        for name in names:  # several ports on one function: dev_port is 0-based
            if root.parse(f"{directory}/net/{name}/dev_port", p.parse_int) == port - 1:
                return decoded_name(name)
        return decoded_name(names[0])
    return None
