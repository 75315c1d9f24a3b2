"""``collect_inventory(root)``: every fact of one node, read from files under a root."""

from __future__ import annotations

from halo_cluster.facts.hardware import read_devices, read_gpus, read_pci_links
from halo_cluster.facts.host import read_amd_memory, read_container, read_firewall, read_rdma_core
from halo_cluster.facts.model import Inventory
from halo_cluster.facts.net import read_interfaces
from halo_cluster.facts.power import read_power
from halo_cluster.facts.rdma import read_rdma_devices
from halo_cluster.facts.root import Root
from halo_cluster.facts.system import (
    read_hostname,
    read_kernel,
    read_memlock_bytes,
    read_memory,
    read_os,
)


def collect_inventory(path: str = "/", versions: bool = False) -> Inventory:
    """Read the node below ``path``. Raises UsageError only when ``path`` is not a directory;
    everything else that cannot be read ends up in ``warnings``."""
    root = Root(path)
    rdma = read_rdma_devices(root)
    net = read_interfaces(root)
    gpus = read_gpus(root)
    referenced = [dev.pci for dev in rdma] + [iface.pci for iface in net] + [g.pci for g in gpus]
    return Inventory(
        hostname=read_hostname(root),
        os=read_os(root),
        kernel=read_kernel(root),
        memory=read_memory(root),
        memlock_bytes=read_memlock_bytes(root),
        rdma=rdma,
        net=net,
        pci=read_pci_links(root, referenced),
        gpus=gpus,
        devices=read_devices(root),
        rdma_core=read_rdma_core(root),
        firewall=read_firewall(root),
        amd_memory=read_amd_memory(root),
        container=read_container(root),
        versions=software_versions() if versions else {},
        power=read_power(root),
        warnings=tuple(root.warnings),
    )


VERSIONED = ("ray", "vllm", "torch")


def software_versions(path: list[str] | None = None) -> dict[str, str | None]:
    """Versions of what runs here (not of a root): Python and the engines, from the names of
    their installed metadata directories on ``path`` (default ``sys.path``), the first one
    found winning, as Python's import does. Nothing is imported (importlib.metadata alone
    costs ~20 ms of a node command that takes ~90 ms)."""
    import platform
    import sys

    from halo_cluster import __version__

    found: dict[str, str | None] = {"python": platform.python_version(), "halo": __version__}
    for name in VERSIONED:
        found[name] = None
    wanted = {_normalized(name): name for name in VERSIONED}
    for directory in sys.path if path is None else path:
        for entry, version in _dists(directory):
            if entry in wanted:
                found[wanted.pop(entry)] = version
        if not wanted:
            break
    return found


def _normalized(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def _dists(directory: str) -> list[tuple[str, str | None]]:
    """(normalized name, version) of each ``NAME-VERSION.dist-info`` or ``.egg-info`` in
    ``directory``; a name without its version in it takes METADATA's or PKG-INFO's."""
    import os

    try:
        names = os.listdir(directory or ".")
    except OSError:  # not a directory (a zip on sys.path), gone, unreadable
        return []
    found = []
    for entry in names:
        for suffix, meta in ((".dist-info", "METADATA"), (".egg-info", "PKG-INFO")):
            if entry.endswith(suffix):
                stem = entry[: -len(suffix)]
                name, _, version = stem.partition("-")
                if not version:
                    version = _metadata_version(os.path.join(directory, entry, meta)) or ""
                found.append((_normalized(name), version.partition("-")[0] or None))
    return found


def _metadata_version(path: str) -> str | None:
    """The ``Version:`` header of a METADATA/PKG-INFO file (its first 64 KiB), or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(65536)
    except OSError:
        return None
    for line in head.splitlines():
        if line.startswith("Version:"):
            return line[len("Version:") :].strip() or None
        if not line.strip():  # the headers end at the first blank line
            break
    return None
