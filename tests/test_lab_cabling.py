"""lab/state.py's cabling of a mesh or ring lab: every cable once with consistent ends,
interfaces named as USB4 networking names them, the same pairing halo's fabric plan makes,
and the lab's state round-tripping through its JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from halo_cluster.errors import UsageError
from halo_cluster.lab.lab import check_topology
from halo_cluster.lab.state import (
    LINK_IF,
    MAX_MESH_NODES,
    MAX_NODES,
    LabNode,
    LabState,
    cables,
    lab_cabling,
    new_lab_state,
)
from halo_cluster.mesh import build_fabric

MESH_SIZES = range(2, MAX_MESH_NODES + 1)
RING_SIZES = range(3, MAX_NODES + 1)


def names(count: int) -> list[str]:
    return [f"node{i}" for i in range(1, count + 1)]


def state(topology: str, count: int, name: str = "t") -> LabState:
    return new_lab_state(name, Path("/tmp/halo-lab-t"), count, 9000, 7, topology=topology)


def test_ring_of_four_exactly() -> None:
    assert lab_cabling("ring", 4) == {
        "node1": (("thunderbolt0", "node2"), ("thunderbolt1", "node4")),
        "node2": (("thunderbolt0", "node1"), ("thunderbolt1", "node3")),
        "node3": (("thunderbolt0", "node2"), ("thunderbolt1", "node4")),
        "node4": (("thunderbolt0", "node3"), ("thunderbolt1", "node1")),
    }


def test_mesh_of_three_exactly() -> None:
    assert lab_cabling("mesh", 3) == {
        "node1": (("thunderbolt0", "node2"), ("thunderbolt1", "node3")),
        "node2": (("thunderbolt0", "node1"), ("thunderbolt1", "node3")),
        "node3": (("thunderbolt0", "node1"), ("thunderbolt1", "node2")),
    }


def test_a_switch_has_no_cables() -> None:
    assert lab_cabling("switch", 4) == {}
    lab = state("switch", 4)
    assert all(node.links == () for node in lab.nodes)
    assert cables(lab) == []
    assert not lab.routed


@pytest.mark.parametrize("count", MESH_SIZES)
def test_mesh_cables_every_pair_once(count: int) -> None:
    cabling = lab_cabling("mesh", count)
    assert list(cabling) == names(count)
    for name, ends in cabling.items():
        assert [ifname for ifname, _ in ends] == [f"{LINK_IF}{k}" for k in range(count - 1)]
        assert sorted(peer for _, peer in ends) == sorted(n for n in names(count) if n != name)


@pytest.mark.parametrize("count", RING_SIZES)
def test_ring_cables_each_node_to_its_two_neighbours(count: int) -> None:
    cabling = lab_cabling("ring", count)
    ring = names(count)
    for i, name in enumerate(ring):
        ends = cabling[name]
        assert [ifname for ifname, _ in ends] == ["thunderbolt0", "thunderbolt1"]
        assert {peer for _, peer in ends} == {ring[i - 1], ring[(i + 1) % count]}


def _check_cables(lab: LabState, expected: int) -> None:
    found = cables(lab)
    assert len(found) == expected
    pairs = [frozenset((a.name, b.name)) for (a, _), (b, _) in found]
    assert len(set(pairs)) == len(pairs)  # each cable once (no pair cabled twice here)
    ends = [(a.name, ai) for (a, ai), _ in found] + [(b.name, bi) for _, (b, bi) in found]
    # every end of every node is on exactly one cable, and names the node at the other end
    assert sorted(ends) == sorted((n.name, ifname) for n in lab.nodes for ifname, _ in n.links)
    for (a, a_if), (b, b_if) in found:
        assert (a_if, b.name) in a.links and (b_if, a.name) in b.links
        assert a.name != b.name
        assert lab.nodes.index(a) < lab.nodes.index(b)  # made from the first in node order


@pytest.mark.parametrize("count", MESH_SIZES)
def test_mesh_cables_in_a_lab(count: int) -> None:
    _check_cables(state("mesh", count), count * (count - 1) // 2)


@pytest.mark.parametrize("count", RING_SIZES)
def test_ring_cables_in_a_lab(count: int) -> None:
    _check_cables(state("ring", count), count)


@pytest.mark.parametrize(
    ("topology", "count"),
    [*(("mesh", n) for n in MESH_SIZES), *(("ring", n) for n in (3, 4, 5, 8, 16, 32))],
)
def test_the_labs_cables_are_the_ones_halo_plans(topology: str, count: int) -> None:
    """The veth pairs the lab makes and the cables halo.toml's links give halo (in the
    lab's own link network: room for the largest mesh and ring)."""
    lab = state(topology, count)
    fabric = build_fabric(
        {n.name: n.fabric_address for n in lab.nodes},
        {n.name: list(n.links) for n in lab.nodes},
        lab.link_network,
    )
    planned = sorted((c.a, c.b) for c in fabric.cables)
    made = sorted(((a.name, ai), (b.name, bi)) for (a, ai), (b, bi) in cables(lab))
    assert planned == made
    assert fabric.topology == ("mesh" if topology == "mesh" or count == 3 else "ring")


def test_a_second_cable_between_two_nodes_pairs_in_order() -> None:
    """cables() pairs the k-th mention on each side, as the fabric plan does."""
    base = state("switch", 2)
    one, two = base.nodes
    lab = replace(
        base,
        topology="mesh",
        nodes=(
            replace(one, links=(("thunderbolt0", "node2"), ("thunderbolt1", "node2"))),
            replace(two, links=(("thunderbolt1", "node1"), ("thunderbolt0", "node1"))),
        ),
    )
    assert [((a.name, ai), (b.name, bi)) for (a, ai), (b, bi) in cables(lab)] == [
        (("node1", "thunderbolt0"), ("node2", "thunderbolt1")),
        (("node1", "thunderbolt1"), ("node2", "thunderbolt0")),
    ]


def test_new_lab_state_of_a_ring() -> None:
    lab = state("ring", 3, name="usb")
    assert lab.topology == "ring" and lab.routed
    assert lab.link_network == "198.19.7.128/25"
    assert lab.nodes[2] == LabNode(
        name="node3",
        netns="halo-usb-node3",
        mgmt_address="198.18.7.13",
        fabric_address="198.19.7.13",
        host_mgmt_veth="hvusb3m",
        host_fabric_veth="hvusb3f",
        init_pid=None,
        links=(("thunderbolt0", "node2"), ("thunderbolt1", "node1")),
    )
    # every interface name within the kernel's 15 bytes
    assert all(len(ifname) <= 15 for node in lab.nodes for ifname, _ in node.links)


@pytest.mark.parametrize(
    ("topology", "count"), [("switch", 2), ("mesh", 2), ("mesh", 8), ("ring", 3), ("ring", 32)]
)
def test_lab_state_round_trips_through_its_json(topology: str, count: int) -> None:
    lab = state(topology, count)
    data = json.loads(json.dumps(lab.to_dict()))
    assert LabState.from_dict(data) == lab
    assert data["topology"] == topology
    assert data["nodes"][0]["links"] == [list(end) for end in lab.nodes[0].links]


def test_a_state_file_from_before_the_cables_reads_as_a_switch() -> None:
    data = json.loads(json.dumps(state("switch", 2).to_dict()))
    del data["topology"]
    for node in data["nodes"]:
        del node["links"]
    lab = LabState.from_dict(data)
    assert lab == state("switch", 2)
    assert lab.topology == "switch" and all(n.links == () for n in lab.nodes)


@pytest.mark.parametrize(
    ("topology", "count", "message"),
    [
        ("ring", 2, "a ring needs at least 3 nodes (2 nodes: --topology mesh, one cable)"),
        (
            "mesh",
            9,
            "a mesh of 9 nodes needs 36 cables: at most 8 nodes (use --topology ring or switch "
            "for more)",
        ),
        ("star", 3, "--topology 'star': use one of switch, mesh, ring"),
    ],
)
def test_topologies_the_lab_refuses(topology: str, count: int, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_topology(topology, count)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("topology", "count"), [("ring", 3), ("ring", 32), ("mesh", 2), ("mesh", 8), ("switch", 1)]
)
def test_topologies_the_lab_takes(topology: str, count: int) -> None:
    check_topology(topology, count)
