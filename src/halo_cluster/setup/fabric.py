"""The setup steps of a routed fabric (nodes cabled point to point: a USB4 mesh or ring),
for one node's part of it (``mesh.NodeFabric``): every cable's /31 and MTU, the identity
address on its own interface, the routes to every other node and cable, and forwarding where
a path crosses this node. Pure, like the other steps: the node's facts in, each step's state
and the exact commands out; applied in this order (a route needs its link's address and the
identity it is sourced from).

Done is read back from the node itself: addresses from /proc/net/fib_trie and the prefix
routes, routes from /proc/net/route, forwarding from /proc/sys/net/ipv4/ip_forward.
"""

from __future__ import annotations

import ipaddress

from halo_cluster.facts import parsers as p
from halo_cluster.facts.model import Inventory
from halo_cluster.facts.root import Root
from halo_cluster.mesh import NodeFabric
from halo_cluster.setup.grub import changed_lines
from halo_cluster.setup.step import Action, Step

FORWARD_FILE = "etc/sysctl.d/90-halo-forward.conf"
FORWARD_TEXT = "# written by halo setup: this node forwards between its fabric links\n" + (
    "net.ipv4.ip_forward = 1\n"
)
FRR_FILE = "etc/frr/frr.conf"
FRR_DAEMONS = "etc/frr/daemons"
FABRIC_STEP_IDS = ("fabric_links", "fabric_identity", "fabric_routes", "fabric_forwarding")
NOT_PERSISTENT = "via ip: not kept across a reboot (run halo setup --apply again after one)"


def fabric_steps(root: Root, inv: Inventory, fabric: NodeFabric) -> list[Step]:
    return [
        _links(inv, fabric),
        _identity(root, inv, fabric),
        _routes(root, fabric),
        _forwarding(root, fabric),
    ]


def _links(inv: Inventory, fabric: NodeFabric) -> Step:
    actions: list[Action] = []
    missing = []
    for link in fabric.links:
        iface = inv.interface(link.ifname)
        if iface is None:
            missing.append(f"{link.ifname} (to {link.peer})")
            continue
        if (iface.mtu or 0) != link.mtu or iface.state == "down":
            actions.append(
                Action(("ip", "link", "set", "dev", link.ifname, "mtu", str(link.mtu), "up"))
            )
        if link.address not in iface.ipv4:
            actions.append(Action(("ip", "addr", "replace", link.address, "dev", link.ifname)))
    shown = ", ".join(f"{link.ifname} {link.address} to {link.peer}" for link in fabric.links)
    if missing:
        note = (
            f"no interface {', '.join(missing)}: is the cable plugged in (and thunderbolt-net "
            "loaded)? 'halo inventory' lists the interfaces"
        )
    else:
        note = NOT_PERSISTENT if actions else ""
    return Step(
        "fabric_links",
        f"cables: {shown}, MTU {fabric.links[0].mtu if fabric.links else '-'}",
        not missing and not actions,
        tuple(actions) if not missing else (),
        check="fabric.link",
        note=note,
    )


def _identity(root: Root, inv: Inventory, fabric: NodeFabric) -> Step:
    local = set(root.parse("proc/net/fib_trie", p.parse_fib_trie_local, quiet=True) or [])
    iface = inv.interface(fabric.identity_iface)
    name = fabric.identity_iface
    # held by another interface with a prefix (a switch NIC's old fabric address): moved
    # (a /32 elsewhere has no prefix route: /proc cannot tell where it is)
    other = inv.interface_with_address(fabric.identity)
    elsewhere = other is not None and other.name != name
    done = fabric.identity in local and iface is not None and not elsewhere
    kind = "dummy" if _has_dummy(root, inv) else "bridge"
    actions: list[Action] = []
    if other is not None and elsewhere:
        held = next(c for c in other.ipv4 if c.split("/")[0] == fabric.identity)
        actions.append(Action(("ip", "addr", "del", held, "dev", other.name)))
        local.discard(fabric.identity)
    if iface is None:
        actions.append(Action(("ip", "link", "add", name, "type", kind)))
    if iface is None or iface.state == "down":
        actions.append(Action(("ip", "link", "set", "dev", name, "up")))
    if fabric.identity not in local:
        actions.append(Action(("ip", "addr", "replace", f"{fabric.identity}/32", "dev", name)))
    why = (
        ""
        if kind == "dummy" or iface is not None
        else "; this kernel has no dummy interfaces: a bridge without ports holds it"
    )
    if other is not None and elsewhere:
        why += f"; {fabric.identity} is on {other.name} now: moved to {name}"
    return Step(
        "fabric_identity",
        f"identity {fabric.identity}/32 on {name}",
        done,
        () if done else tuple(actions),
        check="fabric.identity",
        note=("" if done else NOT_PERSISTENT) + why,
    )


def _has_dummy(root: Root, inv: Inventory) -> bool:
    """Whether ``ip link add ... type dummy`` works here: the module loaded, built in, or
    on disk for the running kernel."""
    if root.exists("sys/module/dummy"):
        return True
    release = inv.kernel.release
    if not release:
        return False
    for listing in ("modules.builtin", "modules.dep"):
        text = root.read(f"lib/modules/{release}/{listing}", quiet=True) or ""
        if "/dummy.ko" in text:
            return True
    return False


def missing_routes(root: Root, fabric: NodeFabric) -> list[str]:
    """The fabric's routes this node lacks (or has through another gateway or interface),
    as ``DEST via GW dev IF``."""
    rows = root.parse("proc/net/route", p.parse_route, quiet=True) or []
    have = {(str(r.network), r.gateway, r.iface) for r in rows}
    lacking = []
    for route in fabric.routes:
        network = str(ipaddress.IPv4Network(route.destination, strict=False))
        if (network, route.via, route.dev) not in have:
            lacking.append(f"{route.destination} via {route.via} dev {route.dev}")
    return lacking


def _routes(root: Root, fabric: NodeFabric) -> Step:
    if fabric.routing == "openfabric":
        return _openfabric(root, fabric)
    lacking = missing_routes(root, fabric)
    title = f"routes to {len(fabric.routes)} identities and cables (static)"
    if not lacking:
        return Step("fabric_routes", title, True, check="fabric.reach")
    actions = tuple(
        Action(
            (
                "ip",
                "route",
                "replace",
                route.destination,
                "via",
                route.via,
                "dev",
                route.dev,
                "src",
                fabric.identity,
            )
        )
        for route in fabric.routes
        if f"{route.destination} via {route.via} dev {route.dev}" in lacking
    )
    return Step(
        "fabric_routes",
        title,
        False,
        actions,
        check="fabric.reach",
        note=f"{len(lacking)} missing; {NOT_PERSISTENT}",
    )


def _openfabric(root: Root, fabric: NodeFabric) -> Step:
    """FRR's openfabric learns the routes: the step is done when FRR is configured for it
    (its routes are the doctor's to check, once FRR has converged: FRR may choose other
    paths of equal length than halo's plan, which is fine). /etc/frr/daemons is edited,
    not replaced: other daemons the host runs stay on."""
    wanted = frr_config(fabric)
    daemons = root.read(FRR_DAEMONS, quiet=True)
    edited = enable_fabricd(daemons)
    done = root.read(FRR_FILE, quiet=True) == wanted and edited == daemons
    lacking = missing_routes(root, fabric)
    learned = f"{len(fabric.routes) - len(lacking)} of {len(fabric.routes)} routes learned"
    if done:
        return Step(
            "fabric_routes",
            f"routes by FRR's openfabric ({learned})",
            True,
            check="fabric.reach",
            note="" if not lacking else "halo doctor checks every path once FRR has converged",
        )
    actions = [Action(path=FRR_FILE, content=wanted)]
    if edited != daemons:
        shown = changed_lines(daemons, edited) if daemons is not None else ""
        actions.append(Action(path=FRR_DAEMONS, content=edited, shown=shown))
    actions.append(Action(("systemctl", "restart", "frr")))
    return Step(
        "fabric_routes",
        f"routes by FRR's openfabric ({learned})",
        False,
        tuple(actions),
        check="fabric.reach",
        note="needs the frr package; halo doctor checks every path once FRR has converged",
    )


def enable_fabricd(text: str | None) -> str:
    """/etc/frr/daemons with ``fabricd=yes`` (and zebra, which installs the routes): the
    lines that say otherwise changed, missing ones added, everything else kept."""
    if text is None:
        return FRR_DAEMONS_TEXT
    lines = text.splitlines()
    for daemon in ("zebra", "fabricd"):
        found = [i for i, line in enumerate(lines) if line.strip().startswith(f"{daemon}=")]
        for i in found:
            lines[i] = f"{daemon}=yes"
        if not found:
            lines.append(f"{daemon}=yes")
    return "\n".join(lines) + "\n"


def _forwarding(root: Root, fabric: NodeFabric) -> Step:
    title = "forwarding between the fabric links"
    value = (root.read("proc/sys/net/ipv4/ip_forward", quiet=True) or "").strip()
    if not fabric.forwarding:
        return Step(
            "fabric_forwarding", title, True, check="fabric.forwarding",
            note="not needed: no chosen path crosses this node",
        )  # fmt: skip
    done = value == "1"
    actions = (
        Action(("sysctl", "-q", "-w", "net.ipv4.ip_forward=1")),
        Action(path=FORWARD_FILE, content=FORWARD_TEXT),
    )
    return Step(
        "fabric_forwarding",
        title,
        done,
        () if done else actions,
        check="fabric.forwarding",
        note="" if done else "paths between other nodes cross this one",
    )


FRR_DAEMONS_TEXT = (
    "# written by halo setup: zebra and fabricd (openfabric) for the routed fabric\n"
    "zebra=yes\nfabricd=yes\nvtysh_enable=yes\n"
    'zebra_options="  -A 127.0.0.1 -s 90000000"\nfabricd_options="-A 127.0.0.1"\n'
)


def frr_config(fabric: NodeFabric, area: str = "49.0000") -> str:
    """FRR's openfabric for this node: the identity and every cable in one fabric; the
    NET's system id from the identity address (12 digits, unique per node)."""
    digits = "".join(f"{int(octet):03d}" for octet in fabric.identity.split("."))
    net = f"{area}.{digits[0:4]}.{digits[4:8]}.{digits[8:12]}.00"
    lines = [
        "# written by halo setup: the routed fabric (openfabric)",
        "frr defaults traditional",
        f"hostname {fabric.node}",
        "log syslog informational",
        "!",
        f"interface {fabric.identity_iface}",
        " ip router openfabric 1",
        " openfabric passive",
        "!",
    ]
    for link in fabric.links:
        lines += [f"interface {link.ifname}", " ip router openfabric 1", "!"]
    lines += ["router openfabric 1", f" net {net}", "!", ""]
    return "\n".join(lines)
