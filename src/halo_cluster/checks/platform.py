"""Node checks of the platform: kernel command line, AMD APU memory, GPUs, device nodes,
limits and firewall."""

from __future__ import annotations

from halo_cluster.checks import Finding, fail, info, ok, warn
from halo_cluster.checks import fixes as fx
from halo_cluster.checks.context import NodeContext
from halo_cluster.checks.network import net_checks, rdma_checks
from halo_cluster.facts.model import AmdMemory
from halo_cluster.supervision import count

GIB = 2**30
MIB = 2**20
GTT_HEADROOM_MIB = 4096  # left to the OS when the iGPU may take the rest
CARVEOUT_MAX_BYTES = 2 * GIB
POWER_PATHS = ("/sys/class/hwmon/", "/sys/class/powercap/")  # where facts.power reads


def _cmdline(ctx: NodeContext) -> list[str]:
    return (ctx.inv.kernel.cmdline or "").split()


def check_iommu(ctx: NodeContext) -> Finding:
    args = _cmdline(ctx)
    if "amd_iommu=off" in args:
        return warn(
            "kernel.iommu",
            "amd_iommu=off: older advice; RCCL expects iommu=pt (the IOMMU on, "
            "in passthrough) and warns without it",
            fix=fx.kernel_args(ctx.family, ["iommu=pt"], ["amd_iommu=off"]),
        )
    if "iommu=pt" not in args:
        return warn(
            "kernel.iommu",
            "iommu=pt missing: DMA is translated, RDMA and RCCL slow down",
            fix=fx.kernel_args(ctx.family, ["iommu=pt"], []),
        )
    return ok("kernel.iommu", "iommu=pt")


def check_aspm(ctx: NodeContext) -> Finding:
    if "pcie_aspm=off" in _cmdline(ctx):
        return ok("kernel.pcie_aspm", "pcie_aspm=off")
    return info(
        "kernel.pcie_aspm",
        "PCIe power saving (ASPM) may add latency to the fabric NIC",
        fix=fx.kernel_args(ctx.family, ["pcie_aspm=off"], []),
    )


def recommended_gtt_mib(total_kib: int, carveout_bytes: int) -> int:
    """GTT for an APU: installed memory (MemTotal + carve-out, rounded up to 8 GiB) less
    headroom for the OS. 128 GB gives 126976 MiB, the reference setup's figure."""
    installed_mib = (total_kib * 1024 + carveout_bytes) / MIB
    rounded = -(-int(installed_mib) // 8192) * 8192
    return rounded - GTT_HEADROOM_MIB


GTT_ARGS = ("amdgpu.gttsize", "ttm.pages_limit", "ttm.page_pool_size")
PAGES_PER_MIB = MIB // 4096


def gtt_args(cmdline: list[str]) -> dict[str, int | None]:
    """The GTT and TTM settings on a kernel command line: each one's last value (the one
    the kernel keeps), None where it is not a whole number; absent ones left out."""
    found: dict[str, int | None] = {}
    for arg in cmdline:
        name, _, value = arg.partition("=")
        if name in GTT_ARGS:
            found[name] = count(value)
    return found


def gtt_disagreement(args: dict[str, int | None]) -> str | None:
    """Why the command line's GTT and TTM settings disagree with each other (one line), or
    None. ``amdgpu.gttsize`` is in MiB, the TTM ones in 4 KiB pages."""
    for name, value in args.items():
        if value is None:
            return f"{name} on the kernel command line is not a whole number"
    gtt, limit = args.get("amdgpu.gttsize"), args.get("ttm.pages_limit")
    pool = args.get("ttm.page_pool_size")
    if gtt is not None and limit is not None and abs(gtt * PAGES_PER_MIB - limit) > limit // 100:
        return (
            f"amdgpu.gttsize={gtt} ({gtt / 1024:.0f} GiB) and ttm.pages_limit={limit} "
            f"({limit / PAGES_PER_MIB / 1024:.0f} GiB) disagree: ROCm gets the smaller"
        )
    if pool is not None and limit is not None and pool != limit:
        return (
            f"ttm.page_pool_size={pool} differs from ttm.pages_limit={limit}: set both to "
            "the same number of pages"
        )
    return None


def gtt_not_applied(args: dict[str, int | None], running: AmdMemory) -> str | None:
    """Which command-line setting the running kernel holds otherwise (one line), or None: a
    modprobe.d file or an initramfs built before the change overrides it, or it waits for a
    reboot."""
    for name, held in (
        ("amdgpu.gttsize", running.gttsize_mib),
        ("ttm.pages_limit", running.ttm_pages_limit),
        ("ttm.page_pool_size", running.ttm_page_pool_size),
    ):
        wanted = args.get(name)
        if wanted is not None and held is not None and wanted != held:
            return (
                f"the running kernel holds {name}={held}, the command line asks {wanted}: "
                "a modprobe.d file or an old initramfs overrides it, or it waits for a reboot"
            )
    return None


def check_gtt(ctx: NodeContext) -> Finding:
    apu = ctx.apus[0]
    total = ctx.inv.memory.total_kib
    if total is None or apu.gtt_total_bytes is None:
        return info("amd.gtt_size", "GTT size or memory size unknown")
    want_mib = recommended_gtt_mib(total, apu.vram_total_bytes or 0)
    pages = want_mib * PAGES_PER_MIB
    gtt_mib = apu.gtt_total_bytes // MIB
    running = ctx.inv.amd_memory
    limit = running.ttm_pages_limit
    evidence = [f"GTT {gtt_mib} MiB, memory {total // 1024} MiB, ttm.pages_limit {limit}"]
    if running.ttm_page_pool_size:
        evidence.append(f"ttm.page_pool_size {running.ttm_page_pool_size}")
    args = gtt_args(_cmdline(ctx))
    add = [f"amdgpu.gttsize={want_mib}", f"ttm.pages_limit={pages}"]
    if "ttm.page_pool_size" in args:  # kept, and made the same as the limit
        add.append(f"ttm.page_pool_size={pages}")
    fix = fx.kernel_args(
        ctx.family, add, [a for a in _cmdline(ctx) if a.partition("=")[0] in GTT_ARGS]
    )
    if gtt_mib < want_mib * 0.95:
        return warn(
            "amd.gtt_size",
            f"GTT is {gtt_mib / 1024:.0f} GiB; {want_mib / 1024:.0f} GiB would let "
            "the iGPU use the memory this node has",
            *evidence,
            fix=fix,
        )
    disagree = gtt_disagreement(args)
    if disagree:
        return warn("amd.gtt_size", disagree, *evidence, fix=fix)
    not_applied = gtt_not_applied(args, running)
    if not_applied:
        return warn("amd.gtt_size", not_applied, *evidence, fix=fx.module_overrides(ctx.family))
    if limit is not None and limit * 4096 < apu.gtt_total_bytes:
        return warn(
            "amd.gtt_size",
            f"ttm.pages_limit {limit} caps usable GTT at {limit * 4096 / GIB:.0f} GiB",
            *evidence,
            fix=fix,
        )
    return ok("amd.gtt_size", f"GTT {gtt_mib / 1024:.0f} GiB", *evidence)


def check_carveout(ctx: NodeContext) -> Finding:
    vram = ctx.apus[0].vram_total_bytes
    if vram is None:
        return info("amd.vram_carveout", "carve-out unknown")
    if vram > CARVEOUT_MAX_BYTES:
        return warn(
            "amd.vram_carveout",
            f"BIOS reserves {vram / GIB:.0f} GiB for the iGPU: that memory is "
            "lost to the OS and to GTT",
            fix=[
                "# BIOS setup: iGPU memory / UMA frame buffer size -> "
                "minimum (512 MB); the GPU uses GTT instead"
            ],
        )
    return ok("amd.vram_carveout", f"carve-out {vram // MIB} MiB")


def check_gpu_present(ctx: NodeContext) -> Finding:
    if ctx.inv.gpus:
        names = ", ".join(f"{g.vendor} {g.name}" for g in ctx.inv.gpus)
        return ok("gpu.present", names)
    return fail(
        "gpu.present",
        "no GPU found (KFD topology, NVIDIA driver)",
        fix=[
            "# install the amdgpu/ROCm or NVIDIA driver; CPU-only nodes: set gpus = 0 in halo.toml"
        ],
    )


def check_gpu_access(ctx: NodeContext) -> Finding:
    dev = ctx.inv.devices
    amd = any(g.vendor == "amd" for g in ctx.inv.gpus)
    missing = ([] if dev.kfd or not amd else ["/dev/kfd"]) + (
        [] if dev.dri else ["/dev/dri/renderD*"]
    )
    if not missing:
        return ok("dev.gpu_access", "GPU device nodes present")
    fix = (
        [
            "# recreate the container with --device /dev/kfd --device /dev/dri "
            "--group-add keep-groups"
        ]
        if ctx.inv.container
        else ['sudo usermod -aG render,video "$USER"', "# then log in again"]
    )
    return fail("dev.gpu_access", f"missing {', '.join(missing)}", fix=fix)


def check_dev_infiniband(ctx: NodeContext) -> Finding:
    uverbs = [p for p in ctx.inv.devices.infiniband if "uverbs" in p]
    if uverbs:
        return ok("dev.infiniband", ", ".join(ctx.inv.devices.infiniband))
    fix = (
        ["# recreate the container with --device /dev/infiniband"]
        if ctx.inv.container
        else ["sudo modprobe ib_uverbs", "# in a container: --device /dev/infiniband"]
    )
    return fail(
        "dev.infiniband",
        "RDMA devices in sysfs but no /dev/infiniband/uverbs*: NCCL/RCCL will "
        "fall back to TCP sockets",
        fix=fix,
    )


def check_memlock(ctx: NodeContext) -> Finding:
    limit = ctx.inv.memlock_bytes
    if limit is None:
        return ok("limits.memlock", "memlock unlimited")
    if not ctx.wants_rdma:
        return info(
            "limits.memlock",
            f"memlock limited to {limit} bytes: fine for TCP, fatal for RDMA",
            fix=fx.memlock_unlimited(),
        )
    return fail(
        "limits.memlock",
        f"memlock limited to {limit} bytes: RDMA memory registration fails under load",
        fix=fx.memlock_unlimited(),
    )


def check_firewall(ctx: NodeContext) -> Finding:
    fw, iface = ctx.inv.firewall, ctx.fabric_iface
    if fw.backend is None:
        return ok("firewall.trusted", "no host firewall configured")
    if iface is None:
        return info("firewall.trusted", f"{fw.backend} configured; fabric interface unknown")
    if iface.name in fw.trusted_interfaces:
        return ok("firewall.trusted", f"{iface.name} is trusted by {fw.backend}")
    zone = fw.zones.get(iface.name, fw.default_zone)
    where = f" (zone {zone})" if fw.backend == "firewalld" else ""
    return warn(
        "firewall.trusted",
        f"{fw.backend} does not trust {iface.name}{where}: Ray and NCCL use random high ports",
        fix=fx.trust_interface(ctx.family, fw.backend, iface.name),
    )


def check_power(ctx: NodeContext) -> Finding:
    """Whether energy per token can be measured here: the power sources read, or why not
    (none, or one the kernel would not let halo read: RAPL's counter is often root's)."""
    unreadable = [w for w in ctx.inv.warnings if w.startswith(POWER_PATHS)]
    if unreadable:
        return warn(
            "power.sources",
            f"{len(unreadable)} power reading(s) unreadable: energy per token may go unmeasured",
            *unreadable,
            fix=["# RAPL's energy_uj is readable by root alone: run halo's node commands as "
                 "root, or give your user read access to it with a udev rule"],
        )  # fmt: skip
    if not ctx.inv.power:
        return info("power.sources", "no power source (amdgpu hwmon, RAPL): energy per token "
                    "is not measured on this node")  # fmt: skip
    names = ", ".join(f"{r.tool} {r.domain} {r.kind}" for r in ctx.inv.power)
    return ok("power.sources", names)


def platform_checks(ctx: NodeContext) -> list[Finding]:
    findings = []
    if ctx.inv.rdma or ctx.apus:
        findings += [check_iommu(ctx), check_aspm(ctx)]
    if ctx.gpus:
        findings += [check_gpu_present(ctx), check_gpu_access(ctx)]
        if ctx.apus:
            findings += [check_gtt(ctx), check_carveout(ctx)]
    if ctx.inv.rdma:
        findings.append(check_dev_infiniband(ctx))
    findings += [check_memlock(ctx), check_firewall(ctx), check_power(ctx)]
    return findings


def node_checks(ctx: NodeContext) -> list[Finding]:
    """Every check of one node."""
    return [*rdma_checks(ctx), *net_checks(ctx), *platform_checks(ctx)]
