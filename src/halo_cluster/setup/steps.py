"""The setup steps: from a node's facts and its filesystem root (read, never written) to
steps, each saying whether it is done, the exact actions that would do it, and whether a
reboot follows. Applying them is ``setup.apply``."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.checks import Finding
from halo_cluster.checks import fixes as fx
from halo_cluster.checks.context import NodeContext
from halo_cluster.checks.network import check_firmware
from halo_cluster.checks.platform import (
    check_firewall,
    check_memlock,
    gtt_args,
    recommended_gtt_mib,
)
from halo_cluster.errors import UsageError
from halo_cluster.facts.model import Inventory
from halo_cluster.facts.root import Root
from halo_cluster.mesh import NodeFabric
from halo_cluster.netnames import (
    NODE_NAME,
    ifname_problem,
    interface_address_problem,
    node_address_problem,
)
from halo_cluster.printable import quoted
from halo_cluster.setup.fabric import fabric_steps
from halo_cluster.setup.grub import changed_lines, edit_grub, grub_args
from halo_cluster.setup.names import names_step
from halo_cluster.setup.step import Action, Step

MEMLOCK_FILE = "etc/security/limits.d/90-halo-memlock.conf"
MEMLOCK_TEXT = (
    "# written by halo setup: RDMA registers (locks) large buffers\n* soft memlock unlimited\n"
    "* hard memlock unlimited\nroot soft memlock unlimited\nroot hard memlock unlimited\n"
)
# binary (under usr/bin) -> package, per family
TOOLS = {
    "fedora": {
        "ibv_devinfo": "libibverbs-utils",
        "ib_write_bw": "perftest",
        "iperf3": "iperf3",
        "qperf": "qperf",
        "rdma": "iproute",
    },
    "debian": {
        "ibv_devinfo": "ibverbs-utils",
        "ib_write_bw": "perftest",
        "iperf3": "iperf3",
        "qperf": "qperf",
        "sockperf": "sockperf",
        "rdma": "iproute2",
    },
}


@dataclass(frozen=True)
class SetupOptions:
    distro: str = "auto"  # auto / fedora / ubuntu / debian
    fabric_iface: str | None = None
    address: str | None = None  # CIDR
    mtu: int = 9000
    home: str = "root"  # root-relative home of the user whose SSH key is checked
    # this node's part of a routed fabric (cables, identity, routes): its steps replace the
    # one fabric interface's
    fabric: NodeFabric | None = None
    # every node's name in halo.toml and its fabric address: the names step (/etc/hosts)
    names: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        """The interface and the address go into commands and files (netplan's YAML): one
        line before any step is planned when either is not one."""
        if self.fabric_iface is not None and ifname_problem(self.fabric_iface):
            why = ifname_problem(self.fabric_iface)
            raise UsageError(f"--fabric-iface {quoted(self.fabric_iface)} {why}")
        if self.address is not None and interface_address_problem(self.address):
            why = interface_address_problem(self.address)
            raise UsageError(f"--address {quoted(self.address)} {why}")
        for name, address in self.names:
            if not NODE_NAME.fullmatch(name) or node_address_problem(address):
                why = node_address_problem(address) or "has a name that is not a node's"
                raise UsageError(f"--name {quoted(f'{name}={address}')} {why}")


def family_of(inv: Inventory, opts: SetupOptions) -> str:
    if opts.distro == "auto":
        return fx.family(inv.os.id)
    return "fedora" if opts.distro == "fedora" else "debian"


def setup_steps(root: Root, inv: Inventory, opts: SetupOptions) -> list[Step]:
    fam = family_of(inv, opts)
    ctx = NodeContext(inv)
    iface = opts.fabric_iface or (ctx.fabric_iface.name if ctx.fabric_iface else None)
    if opts.fabric is not None:
        network = fabric_steps(root, inv, opts.fabric)
        iface = opts.fabric.links[0].ifname if opts.fabric.links else iface
    else:
        network = [_network(root, inv, fam, iface, opts)]
    return [
        _packages(root, inv, fam),
        _firmware(ctx),
        *network,
        _firewall(ctx, fam, iface),
        _kernel(root, inv, fam),
        _memlock(root, ctx),
        _ssh_key(root, opts),
        *([names_step(root, dict(opts.names))] if opts.names else []),
    ]


def _done(finding: Finding) -> bool:
    return finding.severity in ("ok", "info")


def _packages(root: Root, inv: Inventory, fam: str) -> Step:
    tools = TOOLS.get(fam, TOOLS["debian"])
    missing = sorted(
        {
            pkg
            for binary, pkg in tools.items()
            if not root.exists(f"usr/bin/{binary}") and not root.exists(f"usr/sbin/{binary}")
        }
    )
    if inv.rdma_core.release is None:
        missing = ["rdma-core", *missing]
    manager = ["dnf", "install", "-y"] if fam == "fedora" else ["apt-get", "install", "-y"]
    return Step(
        "packages",
        "RDMA userspace and benchmark tools",
        not missing,
        (Action(tuple(manager + missing)),) if missing else (),
        note=", ".join(missing),
    )


def _firmware(ctx: NodeContext) -> Step:
    finding = check_firmware(ctx)
    return Step(
        "nic_firmware",
        "NIC firmware (checked, never flashed)",
        finding.severity != "warn",
        check="nic.firmware",
        note=finding.summary + (" — " + finding.fix[0] if finding.fix else ""),
    )


def _network(
    root: Root, inv: Inventory, fam: str, iface_name: str | None, opts: SetupOptions
) -> Step:
    title = f"fabric address and MTU {opts.mtu}"
    iface = inv.interface(iface_name)
    if iface is None:
        return Step("network", title, False, note="no fabric interface: pass --fabric-iface")
    address = opts.address or (iface.ipv4[0] if iface.ipv4 else None)
    if address is None:
        return Step(
            "network", title, False, note=f"{iface.name} has no address: pass --address CIDR"
        )
    has_address = address.split("/")[0] in {c.split("/")[0] for c in iface.ipv4}
    done = has_address and (iface.mtu or 0) >= opts.mtu
    name = iface.name
    actions: tuple[Action, ...]
    if root.is_dir("run/NetworkManager"):
        con = f"halo-{name}"
        actions = (
            Action(
                (
                    "nmcli",
                    "connection",
                    "add",
                    "type",
                    "ethernet",
                    "ifname",
                    name,
                    "con-name",
                    con,
                    "ipv4.method",
                    "manual",
                    "ipv4.addresses",
                    address,
                    "802-3-ethernet.mtu",
                    str(opts.mtu),
                )
            ),
            Action(("nmcli", "connection", "up", con)),
        )
        how = "NetworkManager"
    elif root.is_dir("etc/netplan"):
        yaml = (
            f"# written by halo setup\nnetwork:\n  version: 2\n  ethernets:\n    {name}:\n"
            f"      addresses: [{address}]\n      mtu: {opts.mtu}\n"
        )
        actions = (
            Action(path=f"etc/netplan/60-halo-{name}.yaml", content=yaml),
            Action(("netplan", "apply")),
        )
        how = "netplan"
    else:
        actions = (
            () if has_address else (Action(("ip", "addr", "add", address, "dev", name)),)
        ) + (Action(("ip", "link", "set", "dev", name, "mtu", str(opts.mtu))),)
        how = "ip (not persistent across reboots: no NetworkManager or netplan found)"
    return Step(
        "network",
        f"{title} on {name} ({address})",
        done,
        actions if not done else (),
        check="net.mtu_jumbo",
        note=f"via {how}",
    )


def _firewall(ctx: NodeContext, fam: str, iface: str | None) -> Step:
    finding = check_firewall(ctx)
    actions = (
        ()
        if _done(finding) or iface is None
        else tuple(
            Action(tuple(argv))
            for argv in fx.trust_interface_argv(fam, ctx.inv.firewall.backend, iface)
        )
    )
    return Step(
        "firewall",
        "trust the fabric interface",
        _done(finding),
        actions,
        check="firewall.trusted",
        note=finding.summary,
    )


def kernel_args(inv: Inventory) -> tuple[list[str], list[str]]:
    """Arguments to add (GTT sized from this node's memory on APUs) and to remove."""
    add = ["iommu=pt", "pcie_aspm=off"]
    apus = NodeContext(inv).apus
    if apus and inv.memory.total_kib:
        gtt = recommended_gtt_mib(inv.memory.total_kib, apus[0].vram_total_bytes or 0)
        add += [f"amdgpu.gttsize={gtt}", f"ttm.pages_limit={gtt * 256}"]
        if "ttm.page_pool_size" in gtt_args((inv.kernel.cmdline or "").split()):
            add.append(f"ttm.page_pool_size={gtt * 256}")  # one that is set follows the limit
    return add, ["amd_iommu=off"]


def _kernel(root: Root, inv: Inventory, fam: str) -> Step:
    add, remove = kernel_args(inv)
    running = (inv.kernel.cmdline or "").split()

    def satisfied(args: list[str]) -> bool:
        return all(a in args for a in add) and not any(a in args for a in remove)

    title = "kernel command line: " + " ".join(add)
    if satisfied(running):
        return Step("kernel", title, True, check="kernel.iommu")
    if fam == "fedora":
        entries = [
            root.read(f"boot/loader/entries/{n}") or "" for n in root.listdir("boot/loader/entries")
        ]
        options = [
            line.split()[1:]
            for text in entries
            for line in text.splitlines()
            if line.startswith("options")
        ]
        configured = bool(options) and all(satisfied(o) for o in options)
        present = running + [a for o in options for a in o]
        names = {x.split("=", 1)[0] for x in add}
        drop = sorted(
            {a for a in present if a in remove or (a.split("=", 1)[0] in names and a not in add)}
        )
        args = ["grubby", "--update-kernel=ALL", f"--args={' '.join(add)}"]
        if drop:
            args.append(f"--remove-args={' '.join(drop)}")
        actions: tuple[Action, ...] = (Action(tuple(args)),)
    else:
        text = root.read("etc/default/grub")
        if text is None:
            return Step(
                "kernel",
                title,
                False,
                reboot=True,
                check="kernel.iommu",
                note="no /etc/default/grub: add the arguments with this system's boot loader tool",
            )
        configured = satisfied(grub_args(text))
        edited = edit_grub(text, add, remove)
        actions = (
            Action(path="etc/default/grub", content=edited, shown=changed_lines(text, edited)),
            Action(("update-grub",)),
        )
    note = "configured; reboot to take effect" if configured else "reboot after applying"
    return Step(
        "kernel",
        title,
        configured,
        () if configured else actions,
        reboot=True,
        check="kernel.iommu",
        note=note,
    )


def _memlock(root: Root, ctx: NodeContext) -> Step:
    """The guide sets unlimited memlock on every node (RDMA registers large buffers), whatever
    the doctor's severity for the transport in use."""
    finding = check_memlock(ctx)
    unlimited = ctx.inv.memlock_bytes is None
    configured = root.read(MEMLOCK_FILE) == MEMLOCK_TEXT
    done = unlimited or configured
    note = "" if unlimited else ("configured; log in again" if configured else finding.summary)
    return Step(
        "memlock",
        "unlimited locked memory",
        done,
        () if done else (Action(path=MEMLOCK_FILE, content=MEMLOCK_TEXT),),
        check="limits.memlock",
        note=note,
    )


def _ssh_key(root: Root, opts: SetupOptions) -> Step:
    key = f"{opts.home}/.ssh/id_ed25519"
    done = root.exists(key)
    return Step(
        "ssh_key",
        "SSH key for passwordless login between nodes",
        done,
        () if done else (Action(("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"/{key}")),),
        note="then: ssh-copy-id <each other node>; 'halo doctor' checks cluster.reachable",
    )
