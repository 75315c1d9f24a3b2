"""Node checks of the fabric: RDMA devices, ports, GIDs, MTU, userspace, interface, PCIe, NIC."""

from __future__ import annotations

import re

from halo_cluster.checks import Finding, fail, info, ok, warn
from halo_cluster.checks import fixes as fx
from halo_cluster.checks.context import NodeContext
from halo_cluster.netnames import ifname_problem
from halo_cluster.printable import quoted
from halo_cluster.transport import SOFTWARE_RDMA_DRIVERS

IB_MTUS = (4096, 2048, 1024, 512, 256)
ROCE_HEADERS = 96  # GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4
PROVIDERS = {
    "irdma": "irdma",
    "mlx5_core": "mlx5",
    "mlx4_core": "mlx4",
    "rdma_rxe": "rxe",
    "siw": "siw",
    "bnxt_en": "bnxt_re",
    "i40e": "i40iw",
    "qede": "qedr",
    "efa": "efa",
}
IRDMA_MIN_RDMA_CORE = 62  # older providers fail with "Unknown completion" under RCCL
E810_MIN_NVM = (4, 91)
_NVM = re.compile(r"^firmware-version:\s*(\d+)\.(\d+)", re.MULTILINE)


def roce_active_mtu(netdev_mtu: int) -> int:
    """The RoCE path MTU a netdev MTU allows: the largest IB MTU <= netdev MTU - headers."""
    return next((m for m in IB_MTUS if m <= netdev_mtu - ROCE_HEADERS), 256)


def pcie_ceiling_gbps(speed_gts: float, width: int, mps_bytes: int = 128) -> float:
    """Sustained PCIe payload bandwidth: line encoding, TLP overhead (~24 bytes per packet
    of MPS bytes; 128 on consumer platforms) and ~5 % flow-control cost. Gen4 x4 ≈ 50."""
    encoding = 0.8 if speed_gts <= 5.0 else 128 / 130
    return speed_gts * width * encoding * mps_bytes / (mps_bytes + 24) * 0.95


def check_rdma_devices(ctx: NodeContext) -> Finding:
    devices = ctx.inv.rdma
    if devices:
        names = ", ".join(f"{d.name} ({d.driver or 'unknown driver'})" for d in devices)
        return ok("rdma.devices", f"{len(devices)} RDMA device(s): {names}")
    fix = [
        *fx.install(ctx.family, "rdma-core"),
        "sudo modprobe irdma   # E810; mlx5_ib for ConnectX",
    ]
    if ctx.wanted in ("roce", "infiniband"):
        return fail(
            "rdma.devices", f"{ctx.wanted} wanted but /sys/class/infiniband is empty", fix=fix
        )
    if ctx.wanted == "auto":
        return warn(
            "rdma.devices",
            "no RDMA device: traffic will use TCP (~70 µs instead of ~5 µs)",
            fix=fix,
        )
    return ok("rdma.devices", f"no RDMA device (not needed for {ctx.wanted})")


def check_port_active(ctx: NodeContext) -> Finding:
    ports = ctx.fabric_ports
    states = [f"{d.name}/{p.port}: {p.state} ({p.phys_state})" for d, p in ports]
    if any(p.state == "ACTIVE" for _, p in ports):
        return ok("rdma.port_active", "an RDMA port on the fabric is ACTIVE", *states)
    netdev = next((p.netdev for _, p in ports if p.netdev), None) or "<fabric interface>"
    return fail(
        "rdma.port_active",
        "no RDMA port on the fabric is ACTIVE",
        *states,
        fix=[*fx.link_up(ctx.family, netdev), "rdma link show"],
    )


def check_roce_gid(ctx: NodeContext) -> Finding:
    roce = [(d, p) for d, p in ctx.fabric_ports if p.link_layer == "Ethernet"]
    if not roce:
        return ok("rdma.roce_v2_gid", "InfiniBand link layer: GID 0 is used")
    iface = ctx.fabric_iface
    addresses = {c.split("/")[0] for c in iface.ipv4} if iface else set()
    if ctx.fabric_address:
        addresses = {ctx.fabric_address}
    for dev, port in roce:
        for gid in port.gids:
            if gid.type == "RoCE v2" and gid.ipv4 in addresses:
                return ok(
                    "rdma.roce_v2_gid",
                    f"{dev.name}/{port.port} has RoCE v2 GID {gid.index} for {gid.ipv4}",
                )
    shown = [
        f"{d.name}/{p.port} GID {g.index}: {g.gid} {g.type} {g.ipv4 or ''}".rstrip()
        for d, p in roce
        for g in p.gids
    ]
    target = iface.name if iface else "the fabric interface"
    return fail(
        "rdma.roce_v2_gid",
        f"no IPv4 RoCE v2 GID for the fabric address on {target}: "
        "RDMA connections cannot be addressed",
        *shown,
        fix=[f"# give {target} its static fabric address; the GID table follows it"],
    )


def check_active_mtu(ctx: NodeContext) -> Finding:
    iface = ctx.fabric_iface
    if (
        iface is None
        or iface.mtu is None
        or not any(p.link_layer == "Ethernet" for _, p in ctx.fabric_ports)
    ):
        return ok("rdma.active_mtu", "not a RoCE fabric (or MTU unknown)")
    active = roce_active_mtu(iface.mtu)
    if active >= 4096:
        return ok("rdma.active_mtu", f"RoCE path MTU 4096 ({iface.name} MTU {iface.mtu})")
    return warn(
        "rdma.active_mtu",
        f"RoCE path MTU will be {active}: {iface.name} MTU {iface.mtu} is "
        f"below {4096 + ROCE_HEADERS + 8}",
        fix=fx.set_mtu(ctx.family, iface.name),
    )


def check_software_device(ctx: NodeContext) -> Finding:
    soft = [d.name for d in ctx.inv.rdma if d.driver in SOFTWARE_RDMA_DRIVERS]
    if soft:
        return warn(
            "rdma.software_device",
            f"software RDMA ({', '.join(soft)}) is slower than kernel TCP",
            fix=[f"sudo rdma link delete {name}/1" for name in soft],
        )
    return ok("rdma.software_device", "no software RDMA device")


def check_userspace(ctx: NodeContext) -> Finding:
    core = ctx.inv.rdma_core
    packages = (
        ("rdma-core", "libibverbs-utils")
        if ctx.family == "fedora"
        else ("rdma-core", "ibverbs-providers")
    )
    if core.release is None:
        return fail(
            "rdma.userspace",
            "libibverbs (rdma-core) is not installed in this environment",
            fix=fx.install(ctx.family, *packages),
        )
    needed = {PROVIDERS[d.driver] for d in ctx.inv.rdma if d.driver in PROVIDERS}
    missing = sorted(needed - set(core.providers))
    evidence = (f"{core.library}", f"providers: {', '.join(core.providers) or 'none'}")
    if missing:
        return fail(
            "rdma.userspace",
            f"no verbs provider for {', '.join(missing)} in rdma-core v{core.release}",
            *evidence,
            fix=fx.install(ctx.family, *packages),
        )
    if "irdma" in needed and core.release < IRDMA_MIN_RDMA_CORE:
        return warn(
            "rdma.userspace",
            f"rdma-core v{core.release} is older than v{IRDMA_MIN_RDMA_CORE}: "
            "irdma completions fail under RCCL ('Unknown completion')",
            *evidence,
            fix=[
                *fx.install(ctx.family, *packages),
                "# in a container: use an image with rdma-core >= 62",
            ],
        )
    return ok(
        "rdma.userspace", f"rdma-core v{core.release} with provider(s) {', '.join(sorted(needed))}"
    )


def rdma_checks(ctx: NodeContext) -> list[Finding]:
    findings = [check_rdma_devices(ctx)]
    if ctx.inv.rdma and ctx.wants_rdma:
        findings += [
            check_port_active(ctx),
            check_roce_gid(ctx),
            check_active_mtu(ctx),
            check_software_device(ctx),
            check_userspace(ctx),
        ]
    return findings


def check_address(ctx: NodeContext) -> Finding:
    iface = ctx.fabric_iface
    if iface is not None and iface.ipv4:
        return ok("net.address", f"{iface.name} has {', '.join(iface.ipv4)}")
    port_if = (
        next((p.netdev for _, p in ctx.fabric_ports if p.netdev), None) or "<fabric interface>"
    )
    wanted = f"{ctx.fabric_address}/30" if ctx.fabric_address else "<address>/<len>"
    what = (
        f"no interface has the fabric address {ctx.fabric_address}"
        if ctx.fabric_address
        else "no fabric interface with an IPv4 address"
    )
    return fail("net.address", what, fix=fx.set_address(ctx.family, port_if, wanted))


def check_link_up(ctx: NodeContext) -> Finding:
    iface = ctx.fabric_iface
    if iface is None:
        return fail("net.link_up", "fabric interface unknown (see net.address)")
    if iface.state == "up":
        return ok("net.link_up", f"{iface.name} is up")
    return fail(
        "net.link_up", f"{iface.name} is {iface.state}", fix=fx.link_up(ctx.family, iface.name)
    )


def check_mtu_jumbo(ctx: NodeContext) -> Finding:
    iface = ctx.fabric_iface
    if iface is None or iface.mtu is None:
        return info("net.mtu_jumbo", "fabric interface MTU unknown")
    if iface.kind == "infiniband":
        return ok("net.mtu_jumbo", f"{iface.name} is IPoIB (MTU {iface.mtu}); RDMA uses the IB MTU")
    if iface.mtu >= 9000:
        return ok("net.mtu_jumbo", f"{iface.name} MTU {iface.mtu}")
    return warn(
        "net.mtu_jumbo",
        f"{iface.name} MTU {iface.mtu}: jumbo frames (9000) are off",
        fix=fx.set_mtu(ctx.family, iface.name),
    )


def check_pcie(ctx: NodeContext) -> Finding:
    bdf = ctx.fabric_iface.pci if ctx.fabric_iface else None
    link = ctx.inv.pci.get(bdf) if bdf else None
    if link is None or None in (
        link.current_speed_gts,
        link.current_width,
        link.max_speed_gts,
        link.max_width,
    ):
        return info("pcie.link_degraded", "PCIe link of the fabric NIC unknown")
    assert link.current_speed_gts and link.current_width and link.max_speed_gts and link.max_width
    now = f"{link.current_speed_gts:g} GT/s x{link.current_width}"
    full = f"{link.max_speed_gts:g} GT/s x{link.max_width}"
    ceiling = pcie_ceiling_gbps(link.current_speed_gts, link.current_width)
    if link.current_speed_gts < link.max_speed_gts:
        return warn(
            "pcie.link_degraded",
            f"{bdf} trained at {now} of {full}: ceiling ≈ {ceiling:.0f} Gb/s",
            fix=["# reseat the card or riser; check the slot's BIOS PCIe speed setting"],
        )
    if link.current_width < link.max_width:
        summary = f"{bdf} runs {now} in a x{link.max_width} card: ceiling ≈ {ceiling:.0f} Gb/s"
        if ctx.apus:
            return info("pcie.link_degraded", summary + " (the platform's x4 slot: expected)")
        return warn("pcie.link_degraded", summary, fix=["# move the NIC to a full-width slot"])
    return ok("pcie.link_degraded", f"{bdf} at full link {now} (≈ {ceiling:.0f} Gb/s)")


def check_firmware(ctx: NodeContext) -> Finding:
    iface = ctx.fabric_iface
    if iface is None or iface.driver != "ice":
        return ok("nic.firmware", "no E810 on the fabric")
    text = (ctx.ethtool or {}).get(iface.name)
    if text is None:
        return info(
            "nic.firmware", f"E810 NVM version not checked (ethtool -i {iface.name} not available)"
        )
    match = _NVM.search(text)
    if not match:
        return info(
            "nic.firmware", f"no firmware-version in ethtool -i {iface.name}", text.strip()[:200]
        )
    version = (int(match.group(1)), int(match.group(2)))
    shown = f"{version[0]}.{version[1]:02d}"
    if version < E810_MIN_NVM:
        return warn(
            "nic.firmware",
            f"E810 NVM {shown} is older than 4.91",
            fix=["# update with Intel's E810 NVM Update Utility (nvmupdate64e), then power-cycle"],
        )
    return ok("nic.firmware", f"E810 NVM {shown}")


def check_ifnames(ctx: NodeContext) -> Finding:
    """Interface names NCCL and Gloo cannot be given (not UTF-8, too long, ...): the
    transport plan refuses them rather than moving the traffic to another interface."""
    ports = {p.netdev for d in ctx.inv.rdma for p in d.ports if p.netdev}
    names = {i.name: bool(i.ipv4) for i in ctx.inv.net}
    names.update({n: True for n in ports})
    bad = [(n, ifname_problem(n), used) for n, used in names.items() if ifname_problem(n)]
    if not bad:
        return ok("net.ifname", "every interface has a name NCCL and Gloo can be given")
    shown = [f"{quoted(name)} {problem}" for name, problem, _ in bad]
    summary = f"interface {shown[0]}: NCCL and Gloo cannot be pointed at it"
    severity = fail if any(used for *_, used in bad) else warn
    return severity(
        "net.ifname",
        summary,
        *(f"also {s}" for s in shown[1:]),
        fix=[
            "# give it a plain name (at most 15 ASCII letters, digits, '-', '_', '.'): a "
            "systemd .link file ([Match] MACAddress=..., [Link] Name=fabric0) or a udev rule, "
            "then reboot"
        ],
    )


def net_checks(ctx: NodeContext) -> list[Finding]:
    return [
        check_ifnames(ctx),
        check_address(ctx),
        check_link_up(ctx),
        check_mtu_jumbo(ctx),
        check_pcie(ctx),
        check_firmware(ctx),
    ]
