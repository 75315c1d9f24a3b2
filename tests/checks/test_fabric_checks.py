"""checks/fabric.py: the doctor's checks of a routed fabric (a USB4 mesh or ring), pure over
every node's report. Reports are built as the gather makes them: the node's inventory (the
thunderbolt fixture root, with the node's cables as its interfaces), the host's view of its
cables, and which pings answered; each fault is compared against the complete findings."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

import pytest

from halo_cluster.checks import Finding
from halo_cluster.checks.context import NodeReport
from halo_cluster.checks.fabric import fabric_checks
from halo_cluster.config import NodeConfig
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.links import FabricView, LinkState
from halo_cluster.facts.model import Inventory, NetInterface
from halo_cluster.mesh import Fabric, NodeFabric, build_fabric
from tests.conftest import ROOTS

BASE = collect_inventory(str(ROOTS / "thunderbolt"))


def _iface(name: str) -> NetInterface:
    iface = BASE.interface(name)
    assert iface is not None
    return iface


CABLE = replace(_iface("thunderbolt0"), ipv4=(), ipv6=())  # a USB4 port's interface
LO, WLAN = _iface("lo"), _iface("wlan0")  # wlan0: the management network


def cabled(kind: str, count: int) -> Fabric:
    """A mesh or ring of node1..nodeN as the lab cables it: ports thunderbolt0, 1, ..."""
    names = [f"node{i}" for i in range(1, count + 1)]
    if kind == "mesh":
        pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    else:
        pairs = [(names[i], names[(i + 1) % count]) for i in range(count)]
    ends: dict[str, list[tuple[str, str]]] = {name: [] for name in names}
    for a, b in pairs:
        for here, there in ((a, b), (b, a)):
            ends[here].append((f"thunderbolt{len(ends[here])}", there))
    return build_fabric({n: f"10.0.0.{i}" for i, n in enumerate(names, 1)}, ends)


MESH = cabled("mesh", 3)
RING = cabled("ring", 4)


def inventory(
    part: NodeFabric, missing: Collection[str] = (), bare: Collection[str] = ()
) -> Inventory:
    """The node's inventory: its cables (``missing``: not there; ``bare``: no address) and
    the management network. (The identity, a /32 without a prefix route, is on no
    interface the inventory can name: the host's view says where it is.)"""
    net = [LO, WLAN]
    for link in part.links:
        if link.ifname not in missing:
            address = () if link.ifname in bare else (link.address,)
            net.append(replace(CABLE, name=link.ifname, ipv4=address))
    return replace(BASE, hostname=part.node, net=tuple(net))


def view(fabric: Fabric, part: NodeFabric) -> FabricView:
    """What a healthy node's host script reads back."""
    routes = {}
    for peer in fabric.nodes:
        route = part.route_to(peer)
        if route is not None:
            routes[peer] = route.dev
    return FabricView(
        {link.ifname: LinkState(link.ifname, True, True, link.mtu, 0, 0) for link in part.links},
        part.forwarding,
        part.identity_iface,
        routes,
    )


def answered(fabric: Fabric, a: str, b: str, down: Collection[str], off: Collection[str]) -> bool:
    """Whether a ping from ``a`` to ``b``'s identity answers: request and reply follow the
    routes, and fail on a cable in ``down`` (``node:ifname`` of either end) or through a
    node in ``off`` (not forwarding)."""
    for src, dst in ((a, b), (b, a)):
        path = fabric.path(src, dst)
        if any(middle in off for middle in path[1:-1]):
            return False
        for here in path[:-1]:
            route = fabric.node(here).route_to(dst)
            assert route is not None
            link = fabric.node(here).link(route.dev)
            assert link is not None
            if {f"{here}:{link.ifname}", f"{link.peer}:{link.peer_ifname}"} & set(down):
                return False
    return True


def healthy(
    fabric: Fabric, down: Collection[str] = (), off: Collection[str] = ()
) -> dict[str, NodeReport]:
    """Every node's report as the gather makes it; pings that cross a cable in ``down`` or a
    node in ``off`` do not answer, nor do the far ends of the cables in ``down``."""
    reports = {}
    for name, part in fabric.nodes.items():
        reports[name] = NodeReport(
            node=NodeConfig(
                name,
                f"root@{name}.lan",
                part.identity,
                links=tuple((link.ifname, link.peer) for link in part.links),
            ),
            inventory=inventory(part),
            pings={
                peer: answered(fabric, name, peer, down, off)
                for peer in fabric.nodes
                if peer != name
            },
            links=view(fabric, part),
            link_pings={
                link.ifname: f"{name}:{link.ifname}" not in down
                and f"{link.peer}:{link.peer_ifname}" not in down
                for link in part.links
            },
        )
    return reports


def with_link(report: NodeReport, ifname: str, **changes: object) -> NodeReport:
    """``report`` with the host's view of one cable changed."""
    assert report.links is not None
    links = dict(report.links.links)
    links[ifname] = replace(links[ifname], **changes)  # type: ignore[arg-type]
    return replace(report, links=replace(report.links, links=links))


def with_view(report: NodeReport, **changes: object) -> NodeReport:
    assert report.links is not None
    return replace(report, links=replace(report.links, **changes))  # type: ignore[arg-type]


def run(fabric: Fabric, reports: dict[str, NodeReport]) -> list[Finding]:
    return fabric_checks(list(reports.values()), fabric)


def ok(check: str, summary: str) -> Finding:
    return Finding(check, "ok", summary)


def oks(
    fabric: Fabric, skip: Iterable[str] = (), ends: int | None = None, paths: int | None = None
) -> dict[str, Finding]:
    """The ok finding of each check on ``fabric``; the ones a case replaces are in ``skip``."""
    cables = len(fabric.cables)
    n = len(fabric.nodes)
    forwards = [name for name, part in fabric.nodes.items() if part.forwarding]
    found = {
        "link": ok("fabric.link", f"all {ends or 2 * cables} cable ends up, with their addresses"),
        "mtu": ok("fabric.mtu", "every cable's ends at MTU 9000"),
        "peer": ok(
            "fabric.peer",
            f"the expected node answers at the other end of all {2 * cables} cables",
        ),
        "identity": ok("fabric.identity", "every node holds its identity address"),
        "reach": ok(
            "fabric.reach",
            f"all {paths or n * (n - 1)} paths between identities carry full-size frames",
        ),
        "forwarding": ok(
            "fabric.forwarding",
            f"forwarding on where paths cross: {', '.join(forwards)}"
            if forwards
            else f"no node forwards (a {fabric.topology}: one hop each)",
        ),
    }
    return {k: v for k, v in found.items() if k not in skip}


# --- healthy -------------------------------------------------------------------------------


def test_healthy_mesh_of_three() -> None:
    assert run(MESH, healthy(MESH)) == [
        Finding("fabric.link", "ok", "all 6 cable ends up, with their addresses"),
        Finding("fabric.mtu", "ok", "every cable's ends at MTU 9000"),
        Finding("fabric.peer", "ok", "the expected node answers at the other end of all 6 cables"),
        Finding("fabric.identity", "ok", "every node holds its identity address"),
        Finding("fabric.reach", "ok", "all 6 paths between identities carry full-size frames"),
        Finding("fabric.forwarding", "ok", "no node forwards (a mesh: one hop each)"),
    ]


def test_healthy_ring_of_four() -> None:
    assert run(RING, healthy(RING)) == [
        Finding("fabric.link", "ok", "all 8 cable ends up, with their addresses"),
        Finding("fabric.mtu", "ok", "every cable's ends at MTU 9000"),
        Finding("fabric.peer", "ok", "the expected node answers at the other end of all 8 cables"),
        Finding("fabric.identity", "ok", "every node holds its identity address"),
        Finding("fabric.reach", "ok", "all 12 paths between identities carry full-size frames"),
        Finding("fabric.forwarding", "ok", "forwarding on where paths cross: node1, node2"),
    ]


def test_healthy_with_forwarding_on_everywhere_is_still_healthy() -> None:
    reports = {n: with_view(r, forwarding=True) for n, r in healthy(MESH).items()}
    assert run(MESH, reports) == list(oks(MESH).values())


def test_nodes_not_reached_or_not_in_the_fabric_are_left_out() -> None:
    reports = healthy(MESH)
    reports["node3"] = replace(reports["node3"], inventory=None, error="ssh: timed out")
    reports["other"] = replace(reports["node1"], node=NodeConfig("other", "other", "10.0.0.9"))
    found = run(MESH, reports)
    # node3's ends are not looked at; the pings of node1 and node2 to it still are
    assert found == [
        ok("fabric.link", "all 6 cable ends up, with their addresses"),
        ok("fabric.mtu", "every cable's ends at MTU 9000"),
        ok("fabric.peer", "the expected node answers at the other end of all 4 cables"),
        ok("fabric.identity", "every node holds its identity address"),
        ok("fabric.reach", "all 4 paths between identities carry full-size frames"),
        ok("fabric.forwarding", "no node forwards (a mesh: one hop each)"),
    ]


def test_a_node_whose_cables_could_not_be_read() -> None:
    reports = healthy(RING)
    reports["node3"] = replace(reports["node3"], links=None)
    assert run(RING, reports) == [
        ok("fabric.link", "all 8 cable ends up, with their addresses"),
        ok("fabric.mtu", "every cable's ends at MTU 9000"),
        ok("fabric.peer", "the expected node answers at the other end of all 6 cables"),
        ok("fabric.identity", "every node holds its identity address"),
        ok("fabric.reach", "all 12 paths between identities carry full-size frames"),
        ok("fabric.forwarding", "forwarding on where paths cross: node1, node2"),
        Finding(
            "fabric.link",
            "warn",
            "the state of the cables of node3 could not be read",
            (),
            ("halo doctor --node node3   # again; 'halo inventory' there",),
        ),
    ]


# --- faults --------------------------------------------------------------------------------


def test_a_missing_interface() -> None:
    """node2's port for the cable to node3 has no interface (the cable is out): node3's end
    has lost its carrier, and every path over that cable fails."""
    reports = healthy(RING, down={"node2:thunderbolt1"})
    node2 = reports["node2"]
    assert node2.links is not None
    links = dict(node2.links.links)
    links["thunderbolt1"] = LinkState("thunderbolt1", False)
    reports["node2"] = replace(
        node2,
        inventory=inventory(RING.node("node2"), missing={"thunderbolt1"}),
        links=replace(node2.links, links=links),
    )
    reports["node3"] = with_link(reports["node3"], "thunderbolt0", carrier=False)
    assert run(RING, reports) == [
        Finding(
            "fabric.link",
            "fail",
            "node2 thunderbolt1 (cable to node3): no such interface",
            (),
            (
                "# plug the cable to node3 into node2's port for thunderbolt1; USB4 networking "
                "needs the thunderbolt_net module",
                "sudo modprobe thunderbolt_net",
            ),
        ),
        ok("fabric.mtu", "every cable's ends at MTU 9000"),
        ok("fabric.peer", "the expected node answers at the other end of all 6 cables"),
        ok("fabric.identity", "every node holds its identity address"),
        Finding(
            "fabric.reach",
            "fail",
            "4 of 12 paths between identities fail",
            (
                "node1 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node2 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node3 -> node1 (10.0.0.1): no answer to frames of 9000 bytes",
                "node3 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",
            ),
            (
                "# the cable node2:thunderbolt1 to node3 is down (fabric.link)",
                "# the cable node3:thunderbolt0 to node2 is down (fabric.link)",
            ),
        ),
        ok("fabric.forwarding", "forwarding on where paths cross: node1, node2"),
    ]


def test_a_cable_taken_down_at_one_end() -> None:
    """node2 took its end down (carrier unreadable); node3's end is up without carrier."""
    reports = healthy(RING, down={"node2:thunderbolt1"})
    reports["node2"] = with_link(reports["node2"], "thunderbolt1", carrier=None)
    reports["node3"] = with_link(reports["node3"], "thunderbolt0", carrier=False)
    assert run(RING, reports) == [
        Finding(
            "fabric.link",
            "fail",
            "cable node2:thunderbolt1-node3:thunderbolt0: no carrier",
            ("node2 thunderbolt1: down", "node3 thunderbolt0: up, no carrier"),
            (
                "sudo ip link set dev thunderbolt1 up   # on node2",
                "halo setup --node node2 --apply   # the routes that went down with it",
            ),
        ),
        ok("fabric.mtu", "every cable's ends at MTU 9000"),
        ok("fabric.peer", "the expected node answers at the other end of all 6 cables"),
        ok("fabric.identity", "every node holds its identity address"),
        Finding(
            "fabric.reach",
            "fail",
            "4 of 12 paths between identities fail",
            (
                "node1 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node2 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node3 -> node1 (10.0.0.1): no answer to frames of 9000 bytes",
                "node3 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",
            ),
            (
                "# the cable node2:thunderbolt1 to node3 is down (fabric.link)",
                "# the cable node3:thunderbolt0 to node2 is down (fabric.link)",
            ),
        ),
        ok("fabric.forwarding", "forwarding on where paths cross: node1, node2"),
    ]


def test_a_cable_without_carrier_at_both_ends_is_the_cable() -> None:
    reports = healthy(MESH, down={"node1:thunderbolt1"})
    reports["node1"] = with_link(reports["node1"], "thunderbolt1", carrier=False)
    reports["node3"] = with_link(reports["node3"], "thunderbolt0", carrier=False)
    found = run(MESH, reports)
    assert found[0] == Finding(
        "fabric.link",
        "fail",
        "cable node1:thunderbolt1-node3:thunderbolt0: no carrier",
        ("node1 thunderbolt1: up, no carrier", "node3 thunderbolt0: up, no carrier"),
        ("# both ends are up: reseat or replace the cable",),
    )
    assert found[4] == Finding(
        "fabric.reach",
        "fail",
        "2 of 6 paths between identities fail",
        (
            "node1 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
            "node3 -> node1 (10.0.0.1): no answer to frames of 9000 bytes",
        ),
        (
            "# the cable node1:thunderbolt1 to node3 is down (fabric.link)",
            "# the cable node3:thunderbolt0 to node1 is down (fabric.link)",
        ),
    )
    assert [f.severity for f in found] == ["fail", "ok", "ok", "ok", "fail", "ok"]


def test_a_cable_end_without_its_address() -> None:
    reports = healthy(MESH, down={"node2:thunderbolt1"})
    reports["node2"] = replace(
        reports["node2"], inventory=inventory(MESH.node("node2"), bare={"thunderbolt1"})
    )
    assert run(MESH, reports) == [
        Finding(
            "fabric.link",
            "fail",
            "node2 thunderbolt1 (cable to node3): its address 10.254.0.4/31 is not set",
            (),
            ("halo setup --node node2 --apply",),
        ),
        ok("fabric.mtu", "every cable's ends at MTU 9000"),
        # node2's end is not tried (fabric.link says why); node3's does not answer
        Finding(
            "fabric.peer",
            "fail",
            "1 cable(s) without the expected node at the other end",
            ("node3 thunderbolt1: node2's end (10.254.0.4, thunderbolt1) does not answer",),
            (
                "# is node3's thunderbolt1 cabled to node2's thunderbolt1 (halo.toml links)? "
                "then: halo setup --node node2 --apply",
            ),
        ),
        ok("fabric.identity", "every node holds its identity address"),
        Finding(
            "fabric.reach",
            "fail",
            "2 of 6 paths between identities fail",
            (
                "node2 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node3 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",
            ),
            (
                "# see fabric.link and fabric.mtu along node2 -> node3",
                "# see fabric.link and fabric.mtu along node3 -> node2",
            ),
        ),
        ok("fabric.forwarding", "no node forwards (a mesh: one hop each)"),
    ]


def test_an_mtu_mismatch_at_one_end() -> None:
    """node3's end of the cable to node2 at 1500: jumbo frames over it are dropped."""
    reports = healthy(RING, down={"node3:thunderbolt0"})
    reports["node3"] = with_link(reports["node3"], "thunderbolt0", mtu=1500)
    reports = {
        n: replace(r, link_pings={i: True for i in r.link_pings}) for n, r in reports.items()
    }
    assert run(RING, reports) == [
        ok("fabric.link", "all 8 cable ends up, with their addresses"),
        Finding(
            "fabric.mtu",
            "fail",
            "1 cable(s) with an MTU other than planned",
            (
                "node2:thunderbolt1 9000, node3:thunderbolt0 1500: frames above 1500 are "
                "dropped one way",
            ),
            ("sudo ip link set dev thunderbolt0 mtu 9000   # on node3",),
        ),
        ok("fabric.peer", "the expected node answers at the other end of all 8 cables"),
        ok("fabric.identity", "every node holds its identity address"),
        Finding(
            "fabric.reach",
            "fail",
            "4 of 12 paths between identities fail",
            (
                "node1 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node2 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node3 -> node1 (10.0.0.1): no answer to frames of 9000 bytes",
                "node3 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",
            ),
            (
                "# the MTU of the cable node2:thunderbolt1 to node3 (fabric.mtu)",
                "# the MTU of the cable node3:thunderbolt0 to node2 (fabric.mtu)",
            ),
        ),
        ok("fabric.forwarding", "forwarding on where paths cross: node1, node2"),
    ]


def test_both_ends_at_the_same_wrong_mtu() -> None:
    reports = healthy(MESH)
    reports["node1"] = with_link(reports["node1"], "thunderbolt0", mtu=1500)
    reports["node2"] = with_link(reports["node2"], "thunderbolt0", mtu=1500)
    assert run(MESH, reports)[1] == Finding(
        "fabric.mtu",
        "fail",
        "1 cable(s) with an MTU other than planned",
        (
            "node1:thunderbolt0 1500, node2:thunderbolt0 1500: both ends differ from the "
            "planned 9000",
        ),
        (
            "sudo ip link set dev thunderbolt0 mtu 9000   # on node1",
            "sudo ip link set dev thunderbolt0 mtu 9000   # on node2",
        ),
    )


def test_a_swapped_cable() -> None:
    """node1's two cables are in each other's ports: no cable end answers at node1, nor
    node1's ends at node2 and node3; only node2 and node3 reach each other."""
    reports = healthy(MESH)
    reports["node1"] = replace(
        reports["node1"],
        pings={"node2": False, "node3": False},
        link_pings={"thunderbolt0": False, "thunderbolt1": False},
    )
    reports["node2"] = replace(
        reports["node2"],
        pings={"node1": False, "node3": True},
        link_pings={"thunderbolt0": False, "thunderbolt1": True},
    )
    reports["node3"] = replace(
        reports["node3"],
        pings={"node1": False, "node2": True},
        link_pings={"thunderbolt0": False, "thunderbolt1": True},
    )
    assert run(MESH, reports) == [
        ok("fabric.link", "all 6 cable ends up, with their addresses"),
        ok("fabric.mtu", "every cable's ends at MTU 9000"),
        Finding(
            "fabric.peer",
            "fail",
            "4 cable(s) without the expected node at the other end",
            (
                "node1 thunderbolt0: node2's end (10.254.0.1, thunderbolt0) does not answer",
                "node1 thunderbolt1: node3's end (10.254.0.3, thunderbolt0) does not answer",
                "node2 thunderbolt0: node1's end (10.254.0.0, thunderbolt0) does not answer",
                "node3 thunderbolt0: node1's end (10.254.0.2, thunderbolt1) does not answer",
            ),
            (
                "# is node1's thunderbolt0 cabled to node2's thunderbolt0 (halo.toml links)? "
                "then: halo setup --node node2 --apply",
                "# is node1's thunderbolt1 cabled to node3's thunderbolt0 (halo.toml links)? "
                "then: halo setup --node node3 --apply",
                "# is node2's thunderbolt0 cabled to node1's thunderbolt0 (halo.toml links)? "
                "then: halo setup --node node1 --apply",
                "# is node3's thunderbolt0 cabled to node1's thunderbolt1 (halo.toml links)? "
                "then: halo setup --node node1 --apply",
            ),
        ),
        ok("fabric.identity", "every node holds its identity address"),
        Finding(
            "fabric.reach",
            "fail",
            "4 of 6 paths between identities fail",
            (
                "node1 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",
                "node1 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node2 -> node1 (10.0.0.1): no answer to frames of 9000 bytes",
                "node3 -> node1 (10.0.0.1): no answer to frames of 9000 bytes",
            ),
            (
                "# see fabric.link and fabric.mtu along node1 -> node2",
                "# see fabric.link and fabric.mtu along node1 -> node3",
                "# see fabric.link and fabric.mtu along node2 -> node1",
                "# see fabric.link and fabric.mtu along node3 -> node1",
            ),
        ),
        ok("fabric.forwarding", "no node forwards (a mesh: one hop each)"),
    ]


def test_errors_on_cables() -> None:
    reports = healthy(RING)
    reports["node1"] = with_link(reports["node1"], "thunderbolt0", rx_errors=12)
    reports["node4"] = with_link(reports["node4"], "thunderbolt1", tx_errors=3)
    reports["node3"] = with_link(reports["node3"], "thunderbolt1", rx_errors=None)
    found = run(RING, reports)
    assert found == [
        *list(oks(RING).values())[:3],
        Finding(
            "fabric.errors",
            "warn",
            "errors on 2 cable end(s): a bad cable or port",
            (
                "node1 thunderbolt0: 12 receive, 0 transmit errors",
                "node4 thunderbolt1: 0 receive, 3 transmit errors",
            ),
            ("# reseat or replace the cable; USB4: a certified 40 Gb/s cable",),
        ),
        *list(oks(RING).values())[3:],
    ]


def test_an_identity_missing() -> None:
    """node3 lost its identity: nobody reaches it, it reaches nobody."""
    reports = healthy(MESH)
    reports["node3"] = with_view(reports["node3"], identity_iface=None)
    reports = {
        n: replace(r, pings={p: "node3" not in (n, p) for p in r.pings}) for n, r in reports.items()
    }
    assert run(MESH, reports) == [
        ok("fabric.link", "all 6 cable ends up, with their addresses"),
        ok("fabric.mtu", "every cable's ends at MTU 9000"),
        ok("fabric.peer", "the expected node answers at the other end of all 6 cables"),
        Finding(
            "fabric.identity",
            "fail",
            "no identity address on node3",
            ("node3: 10.0.0.3/32 on halo0",),
            ("halo setup --node node3 --apply",),
        ),
        Finding(
            "fabric.reach",
            "fail",
            "4 of 6 paths between identities fail",
            (
                "node1 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node2 -> node3 (10.0.0.3): no answer to frames of 9000 bytes",
                "node3 -> node1 (10.0.0.1): no answer to frames of 9000 bytes",
                "node3 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",
            ),
            (
                "# see fabric.link and fabric.mtu along node1 -> node3",
                "# see fabric.link and fabric.mtu along node2 -> node3",
                "# see fabric.link and fabric.mtu along node3 -> node1",
                "# see fabric.link and fabric.mtu along node3 -> node2",
            ),
        ),
        ok("fabric.forwarding", "no node forwards (a mesh: one hop each)"),
    ]


def test_an_identity_on_another_interface() -> None:
    reports = healthy(MESH)
    reports["node2"] = with_view(reports["node2"], identity_iface="wlan0")
    assert run(MESH, reports)[3] == Finding(
        "fabric.identity",
        "warn",
        "an identity address is not on its own interface",
        ("node2: 10.0.0.2 on wlan0",),
        ("# halo setup puts it on fabric.identity_iface; remove it from the other",),
    )


def test_a_route_over_a_non_fabric_interface_is_a_detour() -> None:
    """node1's route to node3 goes over the management network: it answers, but not over
    the fabric."""
    reports = healthy(RING)
    assert reports["node1"].links is not None
    routes = {**reports["node1"].links.routes, "node3": "wlan0"}
    reports["node1"] = with_view(reports["node1"], routes=routes)
    assert run(RING, reports) == [
        *list(oks(RING).values())[:4],
        Finding(
            "fabric.reach",
            "fail",
            "1 path(s) leave the fabric (a detour over another network)",
            ("node1 -> node3 (10.0.0.3): over wlan0, not a fabric cable",),
            ("halo setup --node node1 --apply   # its fabric routes",),
        ),
        ok("fabric.forwarding", "forwarding on where paths cross: node1, node2"),
    ]


def test_a_route_over_another_cable_than_planned() -> None:
    reports = healthy(RING)
    assert reports["node1"].links is not None
    routes = {**reports["node1"].links.routes, "node3": "thunderbolt1"}
    reports["node1"] = with_view(reports["node1"], routes=routes)
    assert run(RING, reports)[4] == Finding(
        "fabric.reach",
        "warn",
        "1 path(s) over another cable than planned",
        ("node1 -> node3 (10.0.0.3): over thunderbolt1, halo plans thunderbolt0",),
        ("halo setup --node node1 --apply   # the planned routes",),
    )


def test_no_route_at_all() -> None:
    """node4 has no route to node2 (the kernel answers none): its pings fail."""
    reports = healthy(RING)
    assert reports["node4"].links is not None
    routes = {**reports["node4"].links.routes, "node2": None}
    reports["node4"] = replace(
        with_view(reports["node4"], routes=routes),
        pings={**reports["node4"].pings, "node2": False},
    )
    assert run(RING, reports)[4] == Finding(
        "fabric.reach",
        "fail",
        "1 of 12 paths between identities fail",
        ("node4 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",),
        ("halo setup --node node4 --apply   # no route to node2",),
    )


def test_a_detour_and_a_silent_path_each_with_their_own_fix() -> None:
    """node1 reaches node3 over wlan0 while node4 has no route to node2: two findings, each
    with the fix of its own paths only."""
    reports = healthy(RING)
    assert reports["node1"].links is not None and reports["node4"].links is not None
    reports["node1"] = with_view(
        reports["node1"], routes={**reports["node1"].links.routes, "node3": "wlan0"}
    )
    reports["node4"] = replace(
        with_view(reports["node4"], routes={**reports["node4"].links.routes, "node2": None}),
        pings={**reports["node4"].pings, "node2": False},
    )
    assert run(RING, reports)[4:6] == [
        Finding(
            "fabric.reach",
            "fail",
            "1 path(s) leave the fabric (a detour over another network)",
            ("node1 -> node3 (10.0.0.3): over wlan0, not a fabric cable",),
            ("halo setup --node node1 --apply   # its fabric routes",),
        ),
        Finding(
            "fabric.reach",
            "fail",
            "1 of 12 paths between identities fail",
            ("node4 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",),
            ("halo setup --node node4 --apply   # no route to node2",),
        ),
    ]


FORWARDING_OFF = (
    "halo setup --node node1 --apply   # forwarding on node1, on the way to node2",
    "halo setup --node node1 --apply   # forwarding on node1, on the way to node4",
)
# forwarding that cannot be read is not known to be on: the same fixes as off


@pytest.mark.parametrize(("forwarding", "fixes"), [(False, FORWARDING_OFF), (None, FORWARDING_OFF)])
def test_forwarding_off_on_a_node_that_must_forward(
    forwarding: bool | None, fixes: tuple[str, ...]
) -> None:
    """node1 is in the middle of node2 <-> node4 (False: off; None: unreadable)."""
    reports = healthy(RING, off={"node1"})
    reports["node1"] = with_view(reports["node1"], forwarding=forwarding)
    found = run(RING, reports)
    assert found == [
        *list(oks(RING).values())[:4],
        Finding(
            "fabric.reach",
            "fail",
            "2 of 12 paths between identities fail",
            (
                "node2 -> node4 (10.0.0.4): no answer to frames of 9000 bytes",
                "node4 -> node2 (10.0.0.2): no answer to frames of 9000 bytes",
            ),
            fixes,
        ),
        Finding(
            "fabric.forwarding",
            "fail",
            "forwarding is off on node1, which paths between other nodes cross",
            (),
            (
                "sudo sysctl -w net.ipv4.ip_forward=1   # on node1; "
                "halo setup --node node1 --apply keeps it",
            ),
        ),
    ]


def test_forwarding_off_where_no_path_crosses_is_fine() -> None:
    reports = {n: with_view(r, forwarding=False) for n, r in healthy(MESH).items()}
    assert run(MESH, reports) == list(oks(MESH).values())


def test_every_check_runs_once_in_order() -> None:
    """The order the doctor shows them in: link, mtu, peer, (errors), identity, reach,
    forwarding, then the unread warning."""
    reports = healthy(RING)
    reports["node1"] = with_link(reports["node1"], "thunderbolt0", rx_errors=1)
    reports["node2"] = replace(reports["node2"], links=None)
    assert [f.check for f in run(RING, reports)] == [
        "fabric.link",
        "fabric.mtu",
        "fabric.peer",
        "fabric.errors",
        "fabric.identity",
        "fabric.reach",
        "fabric.forwarding",
        "fabric.link",
    ]
