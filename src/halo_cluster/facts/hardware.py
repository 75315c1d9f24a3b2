"""PCIe links, GPUs and device nodes."""

from __future__ import annotations

from collections.abc import Iterable

from halo_cluster.facts import parsers as p
from halo_cluster.facts.model import Devices, Gpu, PciLink
from halo_cluster.facts.root import Root, is_bdf

PCI_DIR = "sys/bus/pci/devices"
KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
NVIDIA_GPUS = "proc/driver/nvidia/gpus"


def read_pci_links(root: Root, bdfs: Iterable[str | None]) -> dict[str, PciLink]:
    links: dict[str, PciLink] = {}
    for bdf in bdfs:
        if bdf and bdf not in links:
            links[bdf] = read_pci_link(root, bdf)
    return dict(sorted(links.items()))


def read_pci_link(root: Root, bdf: str) -> PciLink:
    base = f"{PCI_DIR}/{bdf}"
    return PciLink(
        current_speed_gts=root.parse(f"{base}/current_link_speed", p.parse_pcie_speed_gts),
        current_width=root.parse(f"{base}/current_link_width", p.parse_int),
        max_speed_gts=root.parse(f"{base}/max_link_speed", p.parse_pcie_speed_gts),
        max_width=root.parse(f"{base}/max_link_width", p.parse_int),
        driver=root.link_name(f"{base}/driver"),
    )


def read_gpus(root: Root) -> tuple[Gpu, ...]:
    return (*_amd_gpus(root), *_nvidia_gpus(root))


def _amd_gpus(root: Root) -> list[Gpu]:
    """GPU nodes of the KFD topology (CPU nodes have gfx_target_version 0)."""
    gpus = []
    for node in root.listdir(KFD_NODES):
        props = root.parse(f"{KFD_NODES}/{node}/properties", p.parse_properties)
        if not props or props.get("gfx_target_version", 0) <= 0:
            continue
        bdf = _kfd_bdf(props)
        base = f"{PCI_DIR}/{bdf}" if bdf else None
        gpus.append(
            Gpu(
                vendor="amd",
                name=p.gfx_name(props["gfx_target_version"]),
                pci=bdf,
                vram_total_bytes=_amdgpu_mem(root, base, "mem_info_vram_total"),
                gtt_total_bytes=_amdgpu_mem(root, base, "mem_info_gtt_total"),
            )
        )
    return gpus


def _kfd_bdf(props: dict[str, int]) -> str | None:
    """KFD ``location_id`` is (bus << 8) | devfn; ``domain`` the PCI segment."""
    if "location_id" not in props:
        return None
    loc, domain = props["location_id"], props.get("domain", 0)
    return f"{domain:04x}:{loc >> 8:02x}:{(loc >> 3) & 0x1F:02x}.{loc & 0x7}"


def _amdgpu_mem(root: Root, base: str | None, name: str) -> int | None:
    return root.parse(f"{base}/{name}", p.parse_int) if base else None


def _nvidia_gpus(root: Root) -> list[Gpu]:
    gpus = []
    for bdf in root.listdir(NVIDIA_GPUS):
        info = root.parse(f"{NVIDIA_GPUS}/{bdf}/information", p.parse_nvidia_information) or {}
        gpus.append(
            Gpu(
                vendor="nvidia",
                name=info.get("Model"),
                pci=bdf.lower() if is_bdf(bdf.lower()) else None,
                vram_total_bytes=None,
                gtt_total_bytes=None,
            )
        )
    return gpus


def read_devices(root: Root) -> Devices:
    return Devices(
        infiniband=tuple(f"/dev/infiniband/{name}" for name in root.listdir("dev/infiniband")),
        kfd=root.exists("dev/kfd"),
        dri=tuple(
            f"/dev/dri/{name}" for name in root.listdir("dev/dri") if name.startswith("renderD")
        ),
    )
