"""``collect_inventory(root)``: every fact of one node, read from files under a root."""

from __future__ import annotations

from halo_cluster.facts.hardware import read_devices, read_gpus, read_pci_links
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


def collect_inventory(path: str = "/") -> Inventory:
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
        warnings=tuple(root.warnings),
    )
