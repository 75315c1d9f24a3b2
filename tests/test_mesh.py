"""mesh.py: the routed fabric of nodes cabled point to point, planned from their cables.

Complete expected objects for a 3-node mesh and a 4-node ring; every error named; and
properties over random connected cablings (a random tree plus extra cables, 2..8 nodes):
routes to every identity and every far cable, each over one of the node's own links,
followed hop by hop without loops; the plan's JSON round-trips, and garbage is a
FabricError, never another exception.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster.errors import UsageError
from halo_cluster.mesh import (
    DEFAULT_IDENTITY_IFACE,
    DEFAULT_LINK_NETWORK,
    Cable,
    Fabric,
    FabricError,
    Link,
    NodeFabric,
    Route,
    build_fabric,
)

Cabling = dict[str, list[tuple[str, str]]]


def identities(count: int) -> dict[str, str]:
    return {f"node{i}": f"10.0.0.{i}" for i in range(1, count + 1)}


def cabling_of(pairs: Sequence[tuple[str, str]], names: Sequence[str]) -> Cabling:
    """Each node's cables in the order they are made, ports numbered per node
    (thunderbolt0, thunderbolt1, ...), as USB4 networking names them."""
    ends: Cabling = {name: [] for name in names}
    for a, b in pairs:
        for here, there in ((a, b), (b, a)):
            ends[here].append((f"thunderbolt{len(ends[here])}", there))
    return ends


def mesh_cabling(count: int) -> Cabling:
    names = list(identities(count))
    return cabling_of([(a, b) for i, a in enumerate(names) for b in names[i + 1 :]], names)


def ring_cabling(count: int) -> Cabling:
    names = list(identities(count))
    return cabling_of([(names[i], names[(i + 1) % count]) for i in range(count)], names)


MESH3 = build_fabric(identities(3), mesh_cabling(3))
RING4 = build_fabric(identities(4), ring_cabling(4))


# --- a mesh of three ---------------------------------------------------------------------


def test_mesh_of_three_cabling_is_the_usb4_port_order() -> None:
    assert mesh_cabling(3) == {
        "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node3")],
        "node2": [("thunderbolt0", "node1"), ("thunderbolt1", "node3")],
        "node3": [("thunderbolt0", "node1"), ("thunderbolt1", "node2")],
    }


def test_mesh_of_three_complete() -> None:
    assert MESH3.topology == "mesh"
    assert MESH3.cables == (
        Cable(("node1", "thunderbolt0"), ("node2", "thunderbolt0"), "10.254.0.0/31"),
        Cable(("node1", "thunderbolt1"), ("node3", "thunderbolt0"), "10.254.0.2/31"),
        Cable(("node2", "thunderbolt1"), ("node3", "thunderbolt1"), "10.254.0.4/31"),
    )
    assert list(MESH3.nodes) == ["node1", "node2", "node3"]
    assert MESH3.node("node1") == NodeFabric(
        node="node1",
        identity="10.0.0.1",
        identity_iface="halo0",
        links=(
            Link("thunderbolt0", "10.254.0.0/31", "node2", "10.254.0.1", "thunderbolt0", 9000),
            Link("thunderbolt1", "10.254.0.2/31", "node3", "10.254.0.3", "thunderbolt0", 9000),
        ),
        routes=(
            Route("10.0.0.2/32", "10.254.0.1", "thunderbolt0", "node2", 1),
            Route("10.0.0.3/32", "10.254.0.3", "thunderbolt1", "node3", 1),
            Route("10.254.0.4/31", "10.254.0.1", "thunderbolt0", "node2-node3", 2),
        ),
        forwarding=False,
        routing="static",
    )
    assert MESH3.node("node3") == NodeFabric(
        node="node3",
        identity="10.0.0.3",
        identity_iface="halo0",
        links=(
            Link("thunderbolt0", "10.254.0.3/31", "node1", "10.254.0.2", "thunderbolt1", 9000),
            Link("thunderbolt1", "10.254.0.5/31", "node2", "10.254.0.4", "thunderbolt1", 9000),
        ),
        routes=(
            Route("10.0.0.1/32", "10.254.0.2", "thunderbolt0", "node1", 1),
            Route("10.0.0.2/32", "10.254.0.4", "thunderbolt1", "node2", 1),
            # the cable node1-node2: both ends one hop away, the first in node order wins
            Route("10.254.0.0/31", "10.254.0.2", "thunderbolt0", "node1-node2", 2),
        ),
        forwarding=False,
        routing="static",
    )


def test_mesh_of_three_every_path_is_one_cable_and_nobody_forwards() -> None:
    for a in MESH3.nodes:
        for b in MESH3.nodes:
            assert MESH3.path(a, b) == ([a] if a == b else [a, b])
    assert [part.forwarding for part in MESH3.nodes.values()] == [False, False, False]


def test_mesh_node_to_dict_is_the_complete_json() -> None:
    assert MESH3.node("node2").to_dict() == {
        "node": "node2",
        "identity": "10.0.0.2",
        "identity_iface": "halo0",
        "links": [
            {
                "ifname": "thunderbolt0",
                "address": "10.254.0.1/31",
                "peer": "node1",
                "peer_address": "10.254.0.0",
                "peer_ifname": "thunderbolt0",
                "mtu": 9000,
            },
            {
                "ifname": "thunderbolt1",
                "address": "10.254.0.4/31",
                "peer": "node3",
                "peer_address": "10.254.0.5",
                "peer_ifname": "thunderbolt1",
                "mtu": 9000,
            },
        ],
        "routes": [
            {
                "destination": "10.0.0.1/32",
                "via": "10.254.0.0",
                "dev": "thunderbolt0",
                "to": "node1",
                "hops": 1,
            },
            {
                "destination": "10.0.0.3/32",
                "via": "10.254.0.5",
                "dev": "thunderbolt1",
                "to": "node3",
                "hops": 1,
            },
            {
                "destination": "10.254.0.2/31",
                "via": "10.254.0.0",
                "dev": "thunderbolt0",
                "to": "node1-node3",
                "hops": 2,
            },
        ],
        "forwarding": False,
        "routing": "static",
    }


def test_node_helpers() -> None:
    part = MESH3.node("node1")
    assert part.ifnames == ("thunderbolt0", "thunderbolt1")
    assert part.route_to("node3") == Route("10.0.0.3/32", "10.254.0.3", "thunderbolt1", "node3", 1)
    assert part.route_to("node1") is None  # itself
    assert part.route_to("node2-node3") is None  # a cable, not a node's identity
    assert part.link("thunderbolt1") == part.links[1]
    assert part.link("eth0") is None
    assert part.links[0].ip == "10.254.0.0"
    assert MESH3.cables[2].label == "node2:thunderbolt1-node3:thunderbolt1"


# --- a ring of four ----------------------------------------------------------------------


def test_ring_of_four_complete() -> None:
    assert ring_cabling(4) == {
        "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node4")],
        "node2": [("thunderbolt0", "node1"), ("thunderbolt1", "node3")],
        "node3": [("thunderbolt0", "node2"), ("thunderbolt1", "node4")],
        "node4": [("thunderbolt0", "node3"), ("thunderbolt1", "node1")],
    }
    assert RING4.topology == "ring"
    assert RING4.cables == (
        Cable(("node1", "thunderbolt0"), ("node2", "thunderbolt0"), "10.254.0.0/31"),
        Cable(("node1", "thunderbolt1"), ("node4", "thunderbolt1"), "10.254.0.2/31"),
        Cable(("node2", "thunderbolt1"), ("node3", "thunderbolt0"), "10.254.0.4/31"),
        Cable(("node3", "thunderbolt1"), ("node4", "thunderbolt0"), "10.254.0.6/31"),
    )
    assert RING4.node("node1") == NodeFabric(
        node="node1",
        identity="10.0.0.1",
        identity_iface="halo0",
        links=(
            Link("thunderbolt0", "10.254.0.0/31", "node2", "10.254.0.1", "thunderbolt0", 9000),
            Link("thunderbolt1", "10.254.0.2/31", "node4", "10.254.0.3", "thunderbolt1", 9000),
        ),
        routes=(
            Route("10.0.0.2/32", "10.254.0.1", "thunderbolt0", "node2", 1),
            Route("10.0.0.3/32", "10.254.0.1", "thunderbolt0", "node3", 2),
            Route("10.0.0.4/32", "10.254.0.3", "thunderbolt1", "node4", 1),
            Route("10.254.0.4/31", "10.254.0.1", "thunderbolt0", "node2-node3", 2),
            Route("10.254.0.6/31", "10.254.0.3", "thunderbolt1", "node3-node4", 2),
        ),
        forwarding=True,
        routing="static",
    )


RING4_ROUTES = {
    "node1": (
        Route("10.0.0.2/32", "10.254.0.1", "thunderbolt0", "node2", 1),
        Route("10.0.0.3/32", "10.254.0.1", "thunderbolt0", "node3", 2),
        Route("10.0.0.4/32", "10.254.0.3", "thunderbolt1", "node4", 1),
        Route("10.254.0.4/31", "10.254.0.1", "thunderbolt0", "node2-node3", 2),
        Route("10.254.0.6/31", "10.254.0.3", "thunderbolt1", "node3-node4", 2),
    ),
    "node2": (
        Route("10.0.0.1/32", "10.254.0.0", "thunderbolt0", "node1", 1),
        Route("10.0.0.3/32", "10.254.0.5", "thunderbolt1", "node3", 1),
        Route("10.0.0.4/32", "10.254.0.0", "thunderbolt0", "node4", 2),
        Route("10.254.0.2/31", "10.254.0.0", "thunderbolt0", "node1-node4", 2),
        Route("10.254.0.6/31", "10.254.0.5", "thunderbolt1", "node3-node4", 2),
    ),
    "node3": (
        Route("10.0.0.1/32", "10.254.0.4", "thunderbolt0", "node1", 2),
        Route("10.0.0.2/32", "10.254.0.4", "thunderbolt0", "node2", 1),
        Route("10.0.0.4/32", "10.254.0.7", "thunderbolt1", "node4", 1),
        Route("10.254.0.0/31", "10.254.0.4", "thunderbolt0", "node1-node2", 2),
        Route("10.254.0.2/31", "10.254.0.7", "thunderbolt1", "node1-node4", 2),
    ),
    "node4": (
        Route("10.0.0.1/32", "10.254.0.2", "thunderbolt1", "node1", 1),
        Route("10.0.0.2/32", "10.254.0.2", "thunderbolt1", "node2", 2),
        Route("10.0.0.3/32", "10.254.0.6", "thunderbolt0", "node3", 1),
        Route("10.254.0.0/31", "10.254.0.2", "thunderbolt1", "node1-node2", 2),
        Route("10.254.0.4/31", "10.254.0.6", "thunderbolt0", "node2-node3", 2),
    ),
}


def test_ring_of_four_routes_of_every_node() -> None:
    assert {name: part.routes for name, part in RING4.nodes.items()} == RING4_ROUTES


def test_ring_of_four_paths_and_forwarding() -> None:
    """Opposite corners have two equal paths: the one over the first cable in node order
    is chosen, both ways; the node in the middle of a chosen path forwards."""
    assert RING4.path("node1", "node3") == ["node1", "node2", "node3"]
    assert RING4.path("node3", "node1") == ["node3", "node2", "node1"]
    assert RING4.path("node2", "node4") == ["node2", "node1", "node4"]
    assert RING4.path("node4", "node2") == ["node4", "node1", "node2"]
    assert RING4.path("node2", "node3") == ["node2", "node3"]
    assert RING4.path("node1", "node1") == ["node1"]
    assert {n: p.forwarding for n, p in RING4.nodes.items()} == {
        "node1": True,
        "node2": True,
        "node3": False,
        "node4": False,
    }


def test_ring_of_five_far_cable_ties_go_to_the_first_end_in_node_order() -> None:
    """node1's far cable node3-node4 has both ends two hops away: towards node3."""
    ring = build_fabric(identities(5), ring_cabling(5))
    assert ring.topology == "ring"
    far = [r for r in ring.node("node1").routes if r.to == "node3-node4"]
    assert far == [Route("10.254.0.6/31", "10.254.0.1", "thunderbolt0", "node3-node4", 3)]


def middles(fabric: Fabric) -> set[str]:
    """Every node in the middle of some path between two identities."""
    return {
        here
        for a in fabric.nodes
        for b in fabric.nodes
        if a != b
        for here in fabric.path(a, b)[1:-1]
    }


@pytest.mark.parametrize(
    "fabric",
    [
        *(build_fabric(identities(n), mesh_cabling(n)) for n in range(2, 9)),
        *(build_fabric(identities(n), ring_cabling(n)) for n in (3, 4, 5, 6, 7, 8, 12, 32)),
    ],
    ids=[*(f"mesh{n}" for n in range(2, 9)), *(f"ring{n}" for n in (3, 4, 5, 6, 7, 8, 12, 32))],
)
def test_paths_are_symmetric_and_forwarding_is_exactly_the_middles(fabric: Fabric) -> None:
    for a in fabric.nodes:
        for b in fabric.nodes:
            assert fabric.path(a, b) == fabric.path(b, a)[::-1], (a, b)
    assert {n for n, part in fabric.nodes.items() if part.forwarding} == middles(fabric)


def test_shapes() -> None:
    assert [build_fabric(identities(n), mesh_cabling(n)).topology for n in range(2, 9)] == [
        "mesh"
    ] * 7
    # a triangle is a mesh before it is a ring
    assert [build_fabric(identities(n), ring_cabling(n)).topology for n in range(3, 9)] == [
        "mesh",
        *["ring"] * 5,
    ]
    ids = identities(4)
    star = cabling_of([("node1", "node2"), ("node1", "node3"), ("node1", "node4")], list(ids))
    assert build_fabric(ids, star).topology == "routed"
    # two cables between the same two nodes: not a mesh of single cables, not a ring
    twice = cabling_of([("node1", "node2"), ("node1", "node2")], ["node1", "node2"])
    assert build_fabric(identities(2), twice).topology == "routed"
    # a full mesh with one pair cabled twice
    doubled = cabling_of(
        [("node1", "node2"), ("node1", "node3"), ("node2", "node3"), ("node2", "node3")],
        ["node1", "node2", "node3"],
    )
    assert build_fabric(identities(3), doubled).topology == "routed"
    # a ring with a chord
    chord = cabling_of(
        [
            ("node1", "node2"),
            ("node2", "node3"),
            ("node3", "node4"),
            ("node4", "node1"),
            ("node1", "node3"),
        ],
        list(ids),
    )
    assert build_fabric(ids, chord).topology == "routed"


def test_the_kth_cable_between_two_nodes_pairs_the_kth_mention_on_each_side() -> None:
    fabric = build_fabric(
        identities(2),
        {
            "node1": [("tb-a", "node2"), ("tb-b", "node2")],
            "node2": [("usb1", "node1"), ("usb0", "node1")],
        },
    )
    assert fabric.cables == (
        Cable(("node1", "tb-a"), ("node2", "usb1"), "10.254.0.0/31"),
        Cable(("node1", "tb-b"), ("node2", "usb0"), "10.254.0.2/31"),
    )
    # the route to the peer goes over the first of the two cables
    assert fabric.node("node2").routes == (Route("10.0.0.1/32", "10.254.0.0", "usb1", "node1", 1),)
    assert fabric.node("node1").routes == (Route("10.0.0.2/32", "10.254.0.1", "tb-a", "node2", 1),)


def test_settings_reach_every_node() -> None:
    fabric = build_fabric(
        identities(3),
        mesh_cabling(3),
        link_network="192.168.77.0/28",
        mtu=65520,
        identity_iface="fab0",
        routing="openfabric",
    )
    assert [c.network for c in fabric.cables] == [
        "192.168.77.0/31",
        "192.168.77.2/31",
        "192.168.77.4/31",
    ]
    for part in fabric.nodes.values():
        assert (part.identity_iface, part.routing) == ("fab0", "openfabric")
        assert {link.mtu for link in part.links} == {65520}
    assert DEFAULT_LINK_NETWORK == "10.254.0.0/24" and DEFAULT_IDENTITY_IFACE == "halo0"


def test_a_31_link_network_holds_exactly_one_cable() -> None:
    fabric = build_fabric(identities(2), mesh_cabling(2), link_network="10.9.9.8/31")
    assert fabric.cables == (
        Cable(("node1", "thunderbolt0"), ("node2", "thunderbolt0"), "10.9.9.8/31"),
    )


def test_a_node_without_cables_alone_has_nothing_to_route() -> None:
    fabric = build_fabric({"solo": "10.0.0.9"}, {})
    assert fabric.cables == ()
    assert fabric.node("solo") == NodeFabric("solo", "10.0.0.9", "halo0", (), (), False)


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cabling", "kwargs", "message"),
    [
        (
            {**mesh_cabling(3), "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "zeta")]},
            {},
            "node1:thunderbolt1 is cabled to 'zeta': not another node",
        ),
        (
            {**mesh_cabling(3), "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node1")]},
            {},
            "node1:thunderbolt1 is cabled to 'node1': not another node",
        ),
        (
            {**mesh_cabling(3), "node9": [("thunderbolt0", "node1")]},
            {},
            "links of 'node9': no such node",
        ),
        (
            {**mesh_cabling(3), "node1": [("thunderbolt0", "node2"), ("thunderbolt0", "node3")]},
            {},
            "node1: an interface is named for two cables",
        ),
        (
            # one-sided: node1 names a cable to node3, node3 names none to node1
            {
                "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node3")],
                "node2": [("thunderbolt0", "node1"), ("thunderbolt1", "node3")],
                "node3": [("thunderbolt1", "node2")],
            },
            {},
            "node1 names 1 cable(s) to node3, node3 names 0 to node1: "
            "both ends of a cable must name it",
        ),
        (
            # two cables named on one side, one on the other
            {
                "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node2")],
                "node2": [("thunderbolt0", "node1"), ("thunderbolt1", "node3")],
                "node3": [("thunderbolt0", "node2")],
            },
            {},
            "node1 names 2 cable(s) to node2, node2 names 1 to node1: "
            "both ends of a cable must name it",
        ),
        (
            {"node1": [("thunderbolt0", "node2")], "node2": [("thunderbolt0", "node1")]},
            {},
            "node3 cannot be reached from node1 over the cables: "
            "every node needs a path to every other",
        ),
        (
            {
                "node2": [("thunderbolt0", "node3")],
                "node3": [("thunderbolt0", "node2")],
            },
            {},
            "node2, node3 cannot be reached from node1 over the cables: "
            "every node needs a path to every other",
        ),
        (
            mesh_cabling(3),
            {"link_network": "10.254.0.0/30"},
            "link network 10.254.0.0/30 has no /31 left for node2-node3",
        ),
        (
            mesh_cabling(3),
            {"link_network": "10.254.0.0/32"},
            "link network 10.254.0.0/32 has no /31 left for node1-node2",
        ),
        (
            mesh_cabling(3),
            {"link_network": "10.254.0.1/24"},
            "link network '10.254.0.1/24': 10.254.0.1/24 has host bits set",
        ),
        (
            mesh_cabling(3),
            {"link_network": "fd00::/64"},
            "link network 'fd00::/64': Expected 4 octets in 'fd00::'",
        ),
        (
            mesh_cabling(3),
            {"routing": "ospf"},
            "routing 'ospf': use one of static, openfabric",
        ),
    ],
    ids=[
        "unknown-peer",
        "cabled-to-itself",
        "links-of-unknown-node",
        "interface-twice",
        "one-sided-cable",
        "one-sided-second-cable",
        "one-node-unreached",
        "two-nodes-unreached",
        "link-network-exhausted",
        "link-network-32",
        "link-network-host-bits",
        "link-network-ipv6",
        "bad-routing",
    ],
)
def test_errors_name_the_cable_or_node(
    cabling: Cabling, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(FabricError) as caught:
        build_fabric(identities(3), cabling, **kwargs)
    assert str(caught.value) == message


def test_fabric_error_is_a_usage_error() -> None:
    """Bad cabling is the user's to fix (exit 2), in halo's one exception tree."""
    assert issubclass(FabricError, UsageError) and FabricError.__module__ == "halo_cluster.errors"


def test_no_nodes_is_a_fabric_error() -> None:
    with pytest.raises(FabricError):
        build_fabric({}, {})


# The shortest paths are chosen per pair, and each node routes over the first cable of its
# own chosen path: where a pair has several equal shortest paths and a node on the way has
# chosen differently for the rest of it, the request and the reply cross different cables
# (the module docstring promises the reverse path).
ASYMMETRIC_CABLING: Cabling = {
    "n0": [("tb0", "n2"), ("tb1", "n5"), ("tb2", "n1")],
    "n1": [("tb0", "n0"), ("tb1", "n6")],
    "n2": [("tb0", "n0"), ("tb1", "n3")],
    "n3": [("tb0", "n4"), ("tb1", "n2")],
    "n4": [("tb0", "n6"), ("tb1", "n3")],
    "n5": [("tb0", "n0")],
    "n6": [("tb0", "n4"), ("tb1", "n1")],
}


def test_paths_are_symmetric_where_equal_shortest_paths_compete() -> None:
    fabric = build_fabric(
        {name: f"10.0.0.{i + 1}" for i, name in enumerate(ASYMMETRIC_CABLING)},
        ASYMMETRIC_CABLING,
    )
    # today: n4 -> n5 goes n4 n3 n2 n0 n5, n5 -> n4 goes n5 n0 n1 n6 n4
    assert fabric.path("n4", "n5") == fabric.path("n5", "n4")[::-1]


# --- from_dict ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["node1", "node2", "node3"])
def test_from_dict_reads_what_to_dict_wrote(name: str) -> None:
    part = MESH3.node(name)
    assert NodeFabric.from_dict(part.to_dict()) == part
    assert NodeFabric.from_dict(json.loads(json.dumps(part.to_dict()))) == part


def test_from_dict_without_routing_is_static() -> None:
    data = RING4.node("node1").to_dict()
    del data["routing"]
    assert NodeFabric.from_dict(data) == RING4.node("node1")


def _with(path: Sequence[Any], value: Any) -> dict[str, Any]:
    """node1's JSON of the ring with the value at ``path`` replaced (a missing one: removed)."""
    data = json.loads(json.dumps(RING4.node("node1").to_dict()))
    here = data
    for key in path[:-1]:
        here = here[key]
    if value is _MISSING:
        del here[path[-1]]
    else:
        here[path[-1]] = value
    return data  # type: ignore[no-any-return]


_MISSING = object()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["node"], _MISSING),
        (["identity"], "10.0.0"),
        (["identity"], "fd00::1"),
        (["identity"], None),
        (["identity_iface"], "halo/0"),
        (["identity_iface"], ""),
        (["identity_iface"], "a" * 16),
        (["links"], None),
        (["links"], 5),
        (["links"], "thunderbolt0"),
        (["links"], {"ifname": "thunderbolt0"}),
        (["links", 0, "ifname"], "thunder bolt"),
        (["links", 0, "ifname"], "^tb0"),
        (["links", 0, "address"], "10.254.0.0/33"),
        (["links", 0, "peer_address"], "10.254.0.1/31"),
        (["links", 0, "peer_ifname"], "a,b"),
        (["links", 0, "mtu"], 100),
        (["links", 0, "mtu"], 70000),
        (["links", 0, "mtu"], "9000"),
        (["links", 0, "mtu"], True),
        (["links", 0, "mtu"], 9000.0),
        (["links", 0], []),
        (["links", 0, "peer"], _MISSING),
        (["routes"], _MISSING),
        (["routes", 0, "destination"], "node2"),
        (["routes", 0, "via"], "10.254.0.1/31"),
        (["routes", 0, "dev"], "."),
        (["routes", 0, "hops"], "one"),
        (["routes", 0, "hops"], None),
        (["routes", 0, "hops"], float("nan")),
        (["routes", 0], "10.0.0.2/32"),
        (["forwarding"], "yes"),
        (["forwarding"], 1),
        (["forwarding"], None),
        (["forwarding"], _MISSING),
        (["routing"], "ospf"),
        (["routing"], None),
    ],
)
def test_from_dict_refuses_what_to_dict_never_wrote(path: list[Any], value: Any) -> None:
    with pytest.raises(FabricError, match=r"^not a node's fabric \("):
        NodeFabric.from_dict(_with(path, value))


@pytest.mark.parametrize("data", [None, [], "{}", 7, {}, {"links": [], "routes": []}])
def test_from_dict_refuses_what_is_not_a_node_fabric(data: Any) -> None:
    with pytest.raises(FabricError):
        NodeFabric.from_dict(data)


def test_from_dict_infinite_hops_is_a_fabric_error() -> None:
    data = json.loads(
        json.dumps(RING4.node("node1").to_dict()).replace('"hops": 1', '"hops": Infinity', 1)
    )
    assert math.isinf(data["routes"][0]["hops"])
    with pytest.raises(FabricError):
        NodeFabric.from_dict(data)


# --- properties over random connected cablings ---------------------------------------------


@st.composite
def cablings(draw: st.DrawFn) -> tuple[dict[str, str], Cabling]:
    """2..8 nodes in a random cluster order: a random spanning tree plus 0..6 extra cables
    (a second cable between two cabled nodes included), ports numbered per node."""
    count = draw(st.integers(2, 8))
    names = draw(st.permutations([f"node{i}" for i in range(1, count + 1)]))
    pairs = [(names[draw(st.integers(0, i - 1))], names[i]) for i in range(1, count)]
    extra = draw(
        st.lists(
            st.tuples(st.integers(0, count - 1), st.integers(0, count - 1)).filter(
                lambda p: p[0] != p[1]
            ),
            max_size=6,
        )
    )
    pairs += [(names[a], names[b]) for a, b in extra]
    pairs = draw(st.permutations(pairs))
    order = draw(st.permutations(names))
    ids = {name: f"10.0.0.{i + 1}" for i, name in enumerate(order)}
    return ids, cabling_of(pairs, names)


def distances(fabric: Fabric, start: str) -> dict[str, int]:
    """Cables crossed from ``start`` to every node (breadth first over the cables)."""
    neighbours: dict[str, set[str]] = {name: set() for name in fabric.nodes}
    for cable in fabric.cables:
        neighbours[cable.a[0]].add(cable.b[0])
        neighbours[cable.b[0]].add(cable.a[0])
    found = {start: 0}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        for peer in sorted(neighbours[here]):
            if peer not in found:
                found[peer] = found[here] + 1
                queue.append(peer)
    return found


def next_hop(part: NodeFabric, route: Route) -> str:
    link = part.link(route.dev)
    assert link is not None
    return link.peer


def walk(fabric: Fabric, start: str, arrived: Any, route_of: Any) -> list[str]:
    """Follow each node's route (``route_of(part)``) until ``arrived(node)``; the nodes
    visited, never one twice."""
    seen = [start]
    while not arrived(seen[-1]):
        route = route_of(fabric.node(seen[-1]))
        assert route is not None, (seen, "no route")
        seen.append(next_hop(fabric.node(seen[-1]), route))
        assert len(set(seen)) == len(seen), ("loop", seen)
    return seen


def check_invariants(ids: Mapping[str, str], fabric: Fabric) -> None:
    assert list(fabric.nodes) == list(ids)
    networks = [cable.network for cable in fabric.cables]
    assert len(set(networks)) == len(networks)
    for name, part in fabric.nodes.items():
        dist = distances(fabric, name)
        assert set(dist) == set(ids)  # connected
        others = [n for n in ids if n != name]
        identity_routes = [r for r in part.routes if r.destination.endswith("/32")]
        assert [r.to for r in identity_routes] == others
        assert [r.destination for r in identity_routes] == [f"{ids[n]}/32" for n in others]
        far = [c for c in fabric.cables if name not in (c.a[0], c.b[0])]
        cable_routes = [r for r in part.routes if not r.destination.endswith("/32")]
        assert [(r.destination, r.to) for r in cable_routes] == [
            (c.network, f"{c.a[0]}-{c.b[0]}") for c in far
        ]
        # each route over one of the node's own links, to that link's far end
        for route in part.routes:
            assert any(
                link.ifname == route.dev and link.peer_address == route.via for link in part.links
            ), route
        # every link is one end of one of the fabric's cables, its address in the cable's /31
        for link in part.links:
            on = [
                c
                for c in fabric.cables
                if (name, link.ifname) in (c.a, c.b) and link.peer in (c.a[0], c.b[0])
            ]
            assert len(on) == 1
            network = ipaddress.IPv4Network(on[0].network)
            assert ipaddress.IPv4Interface(link.address).network == network
            assert ipaddress.IPv4Address(link.peer_address) in network
        # identities: the walk reaches the peer in exactly ``hops`` cables (a shortest path)
        for route in identity_routes:
            assert route.hops == dist[route.to]
            seen = walk(
                fabric, name, lambda n, to=route.to: n == to, lambda p, to=route.to: p.route_to(to)
            )
            assert len(seen) - 1 == route.hops
            assert fabric.path(name, route.to) == seen
            assert len(fabric.path(route.to, name)) == len(seen)
        # far cables: the walk reaches one of its ends in ``hops - 1`` cables (the last
        # crosses the cable itself), the nearer one
        for route, cable in zip(cable_routes, far, strict=True):
            ends = (cable.a[0], cable.b[0])
            assert route.hops == min(dist[e] for e in ends) + 1
            seen = walk(
                fabric,
                name,
                lambda n, ends=ends: n in ends,
                lambda p, net=route.destination: next(r for r in p.routes if r.destination == net),
            )
            assert len(seen) == route.hops
    assert {n for n, p in fabric.nodes.items() if p.forwarding} == middles(fabric)


@settings(max_examples=80, deadline=None)
@given(cablings(), st.sampled_from(["static", "openfabric"]))
def test_random_cablings_route_every_identity_and_cable(
    drawn: tuple[dict[str, str], Cabling], routing: str
) -> None:
    ids, cabling = drawn
    fabric = build_fabric(ids, cabling, routing=routing)
    check_invariants(ids, fabric)
    for part in fabric.nodes.values():
        assert part.routing == routing
        assert NodeFabric.from_dict(part.to_dict()) == part
        assert NodeFabric.from_dict(json.loads(json.dumps(part.to_dict()))) == part


@settings(max_examples=60, deadline=None)
@given(cablings(), st.data())
def test_random_cablings_less_one_cable_end_are_refused(
    drawn: tuple[dict[str, str], Cabling], data: st.DataObject
) -> None:
    """Take one end of one cable away: a one-sided cable, always a FabricError."""
    ids, cabling = drawn
    cabled = sorted(n for n, ends in cabling.items() if ends)
    name = data.draw(st.sampled_from(cabled))
    drop = data.draw(st.integers(0, len(cabling[name]) - 1))
    broken = {**cabling, name: [e for i, e in enumerate(cabling[name]) if i != drop]}
    with pytest.raises(FabricError, match="both ends of a cable must name it"):
        build_fabric(ids, broken)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["10.0.0.1", "10.254.0.0/31", "thunderbolt0", "static", "openfabric"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)


def _fabric_or_error(data: Any) -> None:
    try:
        part = NodeFabric.from_dict(data)
    except FabricError:
        return
    assert NodeFabric.from_dict(part.to_dict()) == part


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_from_dict_of_any_json_is_a_fabric_or_a_fabric_error(data: Any) -> None:
    _fabric_or_error(data)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(
        [
            ["node"],
            ["identity"],
            ["identity_iface"],
            ["links"],
            ["routes"],
            ["forwarding"],
            ["routing"],
            *(["links", 0, key] for key in Link.__dataclass_fields__),
            *(["routes", 1, key] for key in Route.__dataclass_fields__),
            ["links", 1],
            ["routes", 4],
        ]
    ),
    json_values,
)
def test_from_dict_of_a_plan_with_one_field_replaced(path: list[Any], value: Any) -> None:
    _fabric_or_error(_with(path, value))
