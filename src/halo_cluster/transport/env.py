"""What every plan shares: the IP interfaces, the address to advertise, the socket interface,
and whether the node's GPUs are APUs. (The environment is rendered from the typed path by
``transport/render.py``.)"""

from __future__ import annotations

import ipaddress

from halo_cluster.errors import TransportError
from halo_cluster.facts.model import Inventory, NetInterface
from halo_cluster.netnames import ifname_problem
from halo_cluster.printable import quoted
from halo_cluster.transport.choose import network_address
from halo_cluster.transport.path import AMD_APU_TARGETS


def ip_interfaces(inv: Inventory, include_virtual: bool = False) -> list[NetInterface]:
    """Interfaces that can carry IP traffic now: not down, with an IPv4 address, and a name
    NCCL and Gloo can be given; physical ones only unless ``include_virtual``."""
    skipped = ("loopback",) if include_virtual else ("loopback", "virtual")
    return [
        i
        for i in inv.net
        if i.kind not in skipped and i.ipv4 and i.state != "down" and not ifname_problem(i.name)
    ]


def badly_named(inv: Inventory) -> list[NetInterface]:
    """Interfaces with an IPv4 address whose names NCCL and Gloo cannot be given."""
    return [i for i in inv.net if i.ipv4 and i.kind != "loopback" and ifname_problem(i.name)]


def require_name(name: str, what: str) -> None:
    """A TransportError when ``name`` cannot be given to NCCL and Gloo: never another
    interface in its place, silently."""
    problem = ifname_problem(name)
    if problem is not None:
        raise TransportError(
            f"{what}: interface {quoted(name)} {problem}, so NCCL and Gloo cannot be pointed "
            "at it: give it a plain name (a systemd .link file or a udev rule renames it)"
        )


def interface_address(iface: NetInterface | None, peer: ipaddress.IPv4Address | None) -> str | None:
    if iface is None or not iface.ipv4:
        return None
    if peer is not None:
        on_net = network_address(iface, peer)
        if on_net:
            return on_net
    return iface.ipv4[0].split("/")[0]


def socket_interface(
    inv: Inventory,
    iface: NetInterface | None,
    peer: ipaddress.IPv4Address | None,
    warnings: list[str],
) -> NetInterface | None:
    """NCCL's bootstrap and Gloo need an IP interface: the RDMA port's own when it has an
    address (IPoIB for InfiniBand), else the one that reaches the peer."""
    if iface is not None and iface.ipv4:
        return iface
    others = ip_interfaces(inv) or ip_interfaces(inv, include_virtual=True)
    if peer is not None:
        reaching = [i for i in ip_interfaces(inv, include_virtual=True) if network_address(i, peer)]
        others = reaching or others
    chosen = others[0] if others else None
    port_if = iface.name if iface else "the RDMA port"
    warnings.append(
        f"{port_if} has no IPv4 address; "
        f"bootstrap traffic uses {chosen.name if chosen else 'no interface'}"
    )
    return chosen


def apu_names(inv: Inventory) -> list[str]:
    """The node's AMD APU GPUs (gfx targets): unified memory, no GPUDirect RDMA."""
    return [gpu.name for gpu in inv.gpus if gpu.vendor == "amd" and gpu.name in AMD_APU_TARGETS]
