"""``halo inventory``: every fact of one node, read from files under a root."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from halo_cluster.cli.output import dash, safe, styled, table
from halo_cluster.jsonout import emit_json

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from halo_cluster.facts.model import Inventory, RdmaPort


@click.command()
@click.option(
    "--root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Read the node's files below DIR (a fixture root, a chroot, a mounted image).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the inventory as JSON (docs/inventory.md)."
)
@click.option(
    "--versions",
    is_flag=True,
    help="Add the versions of Python, halo, Ray, vLLM and torch installed here (for the doctor).",
)
def inventory(root: str, as_json: bool, versions: bool) -> int:
    """Show every fact of one node: RDMA devices, ports and GIDs, interfaces and addresses,
    PCIe links, kernel settings, limits and GPUs. Reads files only; no tool is needed."""
    from halo_cluster.cli.output import console
    from halo_cluster.facts.inventory import collect_inventory

    inv = collect_inventory(root, versions=versions)
    if as_json:
        emit_json(inv.to_dict())
    else:
        render_inventory(console(), inv, f"Node {inv.hostname or '?'} (root {root})")
    return 0


def render_inventory(out: Console, inv: Inventory, title: str) -> None:
    out.rule(f"[bold]{safe(title)}")
    summary = table("System", "fact", "value")
    summary.add_row("host", dash(inv.hostname))
    summary.add_row("os", f"{dash(inv.os.id)} {dash(inv.os.version_id)}")
    summary.add_row("kernel", dash(inv.kernel.release))
    summary.add_row("cmdline", dash(inv.kernel.cmdline))
    total = inv.memory.total_kib
    summary.add_row("memory", f"{total / 2**20:.1f} GiB" if total else "-")
    memlock = inv.memlock_bytes
    summary.add_row("memlock", "unlimited" if memlock is None else f"{memlock} bytes")
    out.print(summary)
    _render_rdma(out, inv)
    _render_net(out, inv)
    _render_hardware(out, inv)
    for warning in inv.warnings:
        out.print(f"[yellow]warning:[/] {safe(warning)}", markup=True)


def _render_rdma(out: Console, inv: Inventory) -> None:
    if not inv.rdma:
        out.print("RDMA: no devices in /sys/class/infiniband")
        return
    grid = table(
        "RDMA ports",
        "device",
        "driver",
        "port",
        "state",
        "phys",
        "layer",
        "rate",
        "netdev",
        "RoCE v2 IPv4 GIDs",
        "tx/rx bytes",
    )
    for dev in inv.rdma:
        for port in dev.ports:
            grid.add_row(
                dev.name,
                dash(dev.driver),
                str(port.port),
                _state(port.state),
                dash(port.phys_state),
                dash(port.link_layer),
                _rate(port.rate_gbps),
                dash(port.netdev),
                _v2_gids(port),
                f"{dash(port.xmit_bytes)} / {dash(port.rcv_bytes)}",
            )
    out.print(grid)


def _state(state: str | None) -> Text:
    if state == "ACTIVE":
        return styled("[green]ACTIVE[/]")
    return styled(f"[red]{safe(dash(state))}[/]")


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:g} Gb/s"


def _v2_gids(port: RdmaPort) -> str:
    shown = [f"[{gid.index}] {gid.ipv4}" for gid in port.gids if gid.ipv4 and gid.type == "RoCE v2"]
    return ", ".join(shown) or "-"


def _render_net(out: Console, inv: Inventory) -> None:
    grid = table(
        "Interfaces", "name", "kind", "state", "mtu", "speed", "driver", "pci", "addresses"
    )
    for iface in inv.net:
        speed = "-" if iface.speed_mbps is None else f"{iface.speed_mbps / 1000:g} Gb/s"
        grid.add_row(
            iface.name,
            iface.kind,
            dash(iface.state),
            dash(iface.mtu),
            speed,
            dash(iface.driver),
            dash(iface.pci),
            "\n".join(iface.ipv4 + iface.ipv6) or "-",
        )
    out.print(grid)


def _render_hardware(out: Console, inv: Inventory) -> None:
    if inv.pci:
        grid = table("PCIe links", "device", "driver", "current", "max")
        for bdf, link in inv.pci.items():
            current = f"{dash(link.current_speed_gts)} GT/s x{dash(link.current_width)}"
            maximum = f"{dash(link.max_speed_gts)} GT/s x{dash(link.max_width)}"
            degraded = (link.current_width or 0) < (link.max_width or 0) or (
                link.current_speed_gts or 0
            ) < (link.max_speed_gts or 0)
            grid.add_row(
                bdf,
                dash(link.driver),
                styled(f"[yellow]{safe(current)}[/]") if degraded else current,
                maximum,
            )
        out.print(grid)
    gpus = table("GPUs", "vendor", "name", "pci", "VRAM", "GTT")
    for gpu in inv.gpus:
        gpus.add_row(
            gpu.vendor,
            dash(gpu.name),
            dash(gpu.pci),
            _gib(gpu.vram_total_bytes),
            _gib(gpu.gtt_total_bytes),
        )
    out.print(gpus if inv.gpus else "GPUs: none found (KFD topology, /proc/driver/nvidia)")
    _render_power(out, inv)
    dev = inv.devices
    out.print(
        safe(
            f"Device nodes: infiniband {', '.join(dev.infiniband) or 'none'}; "
            f"kfd {'yes' if dev.kfd else 'no'}; dri {', '.join(dev.dri) or 'none'}"
        )
    )


def _render_power(out: Console, inv: Inventory) -> None:
    if not inv.power:
        out.print("Power: no source (amdgpu hwmon, RAPL powercap): energy per token cannot be "
                  "measured on this node")  # fmt: skip
        return
    grid = table("Power", "source", "tool", "domain", "reading")
    for reading in inv.power:
        value = f"{reading.value:.2f} {reading.unit}"
        if reading.kind == "energy":  # a counter (facts.model.COUNTER)
            wraps = f", wraps at {reading.wrap_j:.0f} J" if reading.wrap_j else ""
            value += f" (counter{wraps})"
        grid.add_row(safe(reading.source), reading.tool, safe(reading.domain), value)
    out.print(grid)


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.1f} GiB"
