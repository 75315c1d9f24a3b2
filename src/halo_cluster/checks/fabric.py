"""Checks of a routed fabric (nodes cabled point to point: a USB4 mesh or ring), pure over
every node's report and the fabric halo plans from the nodes' links (``mesh.Fabric``):

- ``fabric.link``: every cable's interface is there, up with carrier, and has its /31;
- ``fabric.mtu``: both ends of every cable have the planned MTU;
- ``fabric.peer``: the node at the other end of each cable is the one halo.toml names (its
  end's address answers over that cable);
- ``fabric.errors``: no receive or transmit errors on a cable;
- ``fabric.identity``: every node holds its identity address;
- ``fabric.reach``: every node reaches every other's identity with frames of the cables'
  MTU, not fragmented, over a fabric cable (never a silent detour over management);
- ``fabric.forwarding``: forwarding is on where a chosen path crosses the node.

Each failure names the node, the cable and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from halo_cluster.checks import Finding, fail, ok, warn
from halo_cluster.checks.context import NodeReport
from halo_cluster.checks.fixes import c, q
from halo_cluster.facts.links import FabricView, LinkState
from halo_cluster.mesh import Fabric, Link, NodeFabric


def fabric_checks(reports: Sequence[NodeReport], fabric: Fabric) -> list[Finding]:
    reached = [r for r in reports if r.inventory is not None and r.node.name in fabric.nodes]
    unread = [r.node.name for r in reached if r.links is None]
    found = [
        *_links(reached, fabric),
        _mtu(reached, fabric),
        _peers(reached, fabric),
        *_errors(reached, fabric),
        _identity(reached, fabric),
        *_reach(reached, fabric),
        _forwarding(reached, fabric),
    ]
    if unread:
        found.append(
            warn(
                "fabric.link",
                f"the state of the cables of {', '.join(unread)} could not be read",
                fix=[f"halo doctor --node {q(unread[0])}   # again; 'halo inventory' there"],
            )
        )
    return found


_ROUTES = "   # its fabric routes"
_PLANNED = "   # the planned routes"


def _setup(node: str) -> str:
    return f"halo setup --node {q(node)} --apply"


def _state(report: NodeReport, link: Link) -> LinkState | None:
    view = report.links
    return view.links.get(link.ifname) if view is not None else None


def _links(reached: Sequence[NodeReport], fabric: Fabric) -> list[Finding]:
    """Every cable once: an end that is not there, a cable without carrier (both ends
    named: which is down, which only lost its carrier), an end without its address."""
    by_name = {r.node.name: r for r in reached}
    problems: list[Finding] = []
    for cable in fabric.cables:
        ends: list[tuple[str, Link, NodeReport, LinkState]] = []
        unread = False
        for node, ifname in (cable.a, cable.b):
            link = fabric.node(node).link(ifname)
            report = by_name.get(node)
            if link is None or report is None:
                continue
            state = _state(report, link)
            if state is None:
                unread = True  # said once for the node
            else:
                ends.append((node, link, report, state))
        if unread:
            continue
        problems += [_missing(node, link) for node, link, _, state in ends if not state.present]
        present = [(n, link, r, state) for n, link, r, state in ends if state.present]
        if len(present) < len(ends):
            continue
        if any(not state.carrier for *_, state in present):
            problems.append(_no_carrier(cable.label, present))
            continue
        problems += [
            fail(
                "fabric.link",
                f"{node} {link.ifname} (cable to {link.peer}): its address {link.address} "
                "is not set",
                fix=[_setup(node)],
            )
            for node, link, report, _ in present
            if not _has_address(report, link)
        ]
    ends_count = sum(len(part.links) for part in fabric.nodes.values())
    return problems or [ok("fabric.link", f"all {ends_count} cable ends up, with their addresses")]


def _missing(node: str, link: Link) -> Finding:
    return fail(
        "fabric.link",
        f"{node} {link.ifname} (cable to {link.peer}): no such interface",
        fix=[
            f"# plug the cable to {c(link.peer)} into {c(node)}'s port for {c(link.ifname)}; "
            "USB4 networking needs the thunderbolt_net module",
            "sudo modprobe thunderbolt_net",
        ],
    )


def _no_carrier(label: str, ends: Sequence[tuple[str, Link, NodeReport, LinkState]]) -> Finding:
    """A cable without carrier: an end taken down (its carrier unreadable) says which;
    both ends up without carrier is the cable itself. Taking an end down also removed
    the routes through it: setup puts them back."""
    evidence, fixes = [], []
    for node, link, _, state in ends:
        if state.carrier is None:
            evidence.append(f"{node} {link.ifname}: down")
            fixes.append(f"sudo ip link set dev {q(link.ifname)} up   # on {c(node)}")
            fixes.append(_setup(node) + "   # the routes that went down with it")
        else:
            evidence.append(f"{node} {link.ifname}: up, no carrier")
    if not fixes:
        fixes.append("# both ends are up: reseat or replace the cable")
    return fail("fabric.link", f"cable {label}: no carrier", *evidence, fix=fixes)


def _has_address(report: NodeReport, link: Link) -> bool:
    assert report.inventory is not None
    iface = report.inventory.interface(link.ifname)
    return iface is not None and link.address in iface.ipv4


def _mtu(reached: Sequence[NodeReport], fabric: Fabric) -> Finding:
    by_name = {r.node.name: r for r in reached}
    bad: list[str] = []
    fixes: list[str] = []
    for cable in fabric.cables:
        ends = []
        for node, ifname in (cable.a, cable.b):
            report = by_name.get(node)
            link = fabric.node(node).link(ifname)
            state = _state(report, link) if report is not None and link is not None else None
            ends.append((node, ifname, state.mtu if state is not None else None, link))
        planned = ends[0][3].mtu if ends[0][3] is not None else None
        mtus = {mtu for _, _, mtu, _ in ends if mtu is not None}
        if mtus and mtus != {planned}:
            shown = ", ".join(f"{node}:{ifname} {mtu}" for node, ifname, mtu, _ in ends)
            if len(mtus) > 1:
                bad.append(f"{shown}: frames above {min(mtus)} are dropped one way")
            else:
                bad.append(f"{shown}: both ends differ from the planned {planned}")
            fixes += [
                f"sudo ip link set dev {q(ifname)} mtu {planned}   # on {c(node)}"
                for node, ifname, mtu, _ in ends
                if mtu is not None and mtu != planned
            ]
    if bad:
        return fail(
            "fabric.mtu", f"{len(bad)} cable(s) with an MTU other than planned", *bad, fix=fixes
        )
    return ok("fabric.mtu", f"every cable's ends at MTU {_planned_mtu(fabric)}")


def _planned_mtu(fabric: Fabric) -> str:
    mtus = sorted({link.mtu for n in fabric.nodes.values() for link in n.links})
    return "/".join(str(m) for m in mtus) or "-"


def _peers(reached: Sequence[NodeReport], fabric: Fabric) -> Finding:
    """A cable whose far end does not answer while both ends are up and addressed goes
    elsewhere (its far end's address is on another cable), or the far node is not set up."""
    silent: list[str] = []
    fixes: list[str] = []
    tried = 0
    for report in reached:
        name = report.node.name
        for link in fabric.node(name).links:
            state = _state(report, link)
            if state is None or not state.carrier or not _has_address(report, link):
                continue  # fabric.link says why
            tried += 1
            if not report.link_pings.get(link.ifname, False):
                silent.append(
                    f"{name} {link.ifname}: {link.peer}'s end ({link.peer_address}, "
                    f"{link.peer_ifname}) does not answer"
                )
                fixes.append(
                    f"# is {c(name)}'s {c(link.ifname)} cabled to {c(link.peer)}'s "
                    f"{c(link.peer_ifname)} (halo.toml links)? then: {_setup(link.peer)}"
                )
    if silent:
        return fail(
            "fabric.peer",
            f"{len(silent)} cable(s) without the expected node at the other end",
            *silent,
            fix=fixes,
        )
    return ok("fabric.peer", f"the expected node answers at the other end of all {tried} cables")


def _errors(reached: Sequence[NodeReport], fabric: Fabric) -> list[Finding]:
    seen = []
    for report in reached:
        for link in fabric.node(report.node.name).links:
            state = _state(report, link)
            if state is not None and (state.rx_errors or state.tx_errors):
                seen.append(
                    f"{report.node.name} {link.ifname}: {state.rx_errors or 0} receive, "
                    f"{state.tx_errors or 0} transmit errors"
                )
    if not seen:
        return []
    return [
        warn(
            "fabric.errors",
            f"errors on {len(seen)} cable end(s): a bad cable or port",
            *seen,
            fix=["# reseat or replace the cable; USB4: a certified 40 Gb/s cable"],
        )
    ]


def _identity(reached: Sequence[NodeReport], fabric: Fabric) -> Finding:
    missing, elsewhere = [], []
    for report in reached:
        part = fabric.node(report.node.name)
        view = report.links
        if view is None:
            continue
        if view.identity_iface is None:
            missing.append(part)
        elif view.identity_iface != part.identity_iface:
            elsewhere.append(f"{part.node}: {part.identity} on {view.identity_iface}")
    if missing:
        return fail(
            "fabric.identity",
            "no identity address on " + ", ".join(p.node for p in missing),
            *(f"{p.node}: {p.identity}/32 on {p.identity_iface}" for p in missing),
            fix=[_setup(p.node) for p in missing],
        )
    if elsewhere:
        return warn(
            "fabric.identity",
            "an identity address is not on its own interface",
            *elsewhere,
            fix=["# halo setup puts it on fabric.identity_iface; remove it from the other"],
        )
    return ok("fabric.identity", "every node holds its identity address")


@dataclass
class _Trouble:
    """The paths with one kind of trouble: a line for each, and the fixes they call for."""

    lines: list[str] = field(default_factory=list)
    fixes: set[str] = field(default_factory=set)

    def add(self, line: str, fix: str) -> None:
        self.lines.append(line)
        self.fixes.add(fix)


def _reach(reached: Sequence[NodeReport], fabric: Fabric) -> list[Finding]:
    detour, failed, other = _Trouble(), _Trouble(), _Trouble()
    views = {r.node.name: r.links for r in reached}
    tried = 0
    for report in reached:
        name = report.node.name
        part = fabric.node(name)
        view = report.links
        for peer, answered in report.pings.items():
            route = part.route_to(peer)
            if route is None:
                continue
            tried += 1
            dev = view.routes.get(peer) if view is not None else None
            target = f"{name} -> {peer} ({fabric.node(peer).identity})"
            if dev is not None and dev not in part.ifnames:
                detour.add(f"{target}: over {dev}, not a fabric cable", _setup(name) + _ROUTES)
            elif not answered:
                failed.add(
                    f"{target}: no answer to frames of {part.mtu} bytes",
                    _why_silent(fabric, part, views, peer),
                )
            elif dev is not None and dev != route.dev:
                other.add(f"{target}: over {dev}, halo plans {route.dev}", _setup(name) + _PLANNED)
    troubles = (
        (fail, detour, "path(s) leave the fabric (a detour over another network)"),
        (fail, failed, f"of {tried} paths between identities fail"),
        (warn, other, "path(s) over another cable than planned"),
    )
    found = [
        severity("fabric.reach", f"{len(t.lines)} {what}", *t.lines, fix=sorted(t.fixes))
        for severity, t, what in troubles
        if t.lines
    ]
    return found or [
        ok("fabric.reach", f"all {tried} paths between identities carry full-size frames")
    ]


def _why_silent(
    fabric: Fabric, part: NodeFabric, views: Mapping[str, FabricView | None], peer: str
) -> str:
    """The likeliest fix for a path that does not answer: a node on the way that does not
    forward, else this node's route, else the cables along the path."""
    path = fabric.path(part.node, peer)
    for here, there in pairwise(path):
        route = fabric.node(here).route_to(there)
        seen = views.get(here)
        state = seen.links.get(route.dev) if seen is not None and route is not None else None
        if route is not None and state is not None and not (state.present and state.carrier):
            return f"# the cable {here}:{route.dev} to {there} is down (fabric.link)"
        link = fabric.node(here).link(route.dev) if route is not None else None
        far = views.get(there)
        far_state = far.links.get(link.peer_ifname) if far is not None and link else None
        mtus = {s.mtu for s in (state, far_state) if s is not None}
        if link is not None and mtus - {link.mtu}:
            return f"# the MTU of the cable {here}:{link.ifname} to {there} (fabric.mtu)"
    for middle in path[1:-1]:
        seen = views.get(middle)
        if seen is not None and seen.forwarding is not True:  # off, or unreadable
            return f"{_setup(middle)}   # forwarding on {c(middle)}, on the way to {c(peer)}"
    view = views.get(part.node)
    if view is not None and view.routes.get(peer) is None:
        return _setup(part.node) + "   # no route to " + c(peer)
    return f"# see fabric.link and fabric.mtu along {' -> '.join(path)}"


def _forwarding(reached: Sequence[NodeReport], fabric: Fabric) -> Finding:
    off = [
        r.node.name
        for r in reached
        if fabric.node(r.node.name).forwarding
        and r.links is not None
        and r.links.forwarding is not True
    ]
    needed = [n for n, part in fabric.nodes.items() if part.forwarding]
    if off:
        return fail(
            "fabric.forwarding",
            f"forwarding is off on {', '.join(off)}, which paths between other nodes cross",
            fix=[
                f"sudo sysctl -w net.ipv4.ip_forward=1   # on {c(n)}; {_setup(n)} keeps it"
                for n in off
            ],
        )
    if not needed:
        return ok("fabric.forwarding", f"no node forwards (a {fabric.topology}: one hop each)")
    return ok("fabric.forwarding", f"forwarding on where paths cross: {', '.join(needed)}")
