"""``collect_inventory(root)``: every fact of one node, read from files under a root."""

from __future__ import annotations

from halo_cluster.facts.hardware import read_devices, read_gpus, read_pci_links
from halo_cluster.facts.host import read_amd_memory, read_container, read_firewall, read_rdma_core
from halo_cluster.facts.model import Inventory
from halo_cluster.facts.net import read_interfaces
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
        warnings=tuple(root.warnings),
    )


VERSIONED = ("ray", "vllm", "torch")


def software_versions() -> dict[str, str | None]:
    """Versions of what runs here (not of a root): Python and the engines, from package
    metadata only, so that nothing heavy is imported."""
    import importlib.metadata
    import platform

    from halo_cluster import __version__

    found: dict[str, str | None] = {"python": platform.python_version(), "halo": __version__}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found
