"""halo.toml of nodes cabled point to point: [fabric] and each node's ``links``. A valid
file gives the fabric halo plans (Config.mesh()); every error is one ConfigError naming the
file, the line when it can, and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from halo_cluster.config import Config, ConfigError, NodeConfig, load_config
from halo_cluster.config.model import FabricConfig
from halo_cluster.mesh import build_fabric

MESH = """\
[cluster]
name = "usb4"
transport = "thunderbolt"

[fabric]
link_network = "10.200.7.0/28"
mtu = 65520
identity_iface = "fab0"
routing = "openfabric"

[[node]]
name = "node1"
ssh = "root@192.168.1.51"
fabric_address = "10.0.0.1"
links = { thunderbolt0 = "node2", thunderbolt1 = "node3" }

[[node]]
name = "node2"
ssh = "root@192.168.1.52"
fabric_address = "10.0.0.2"
links = { thunderbolt0 = "node1", thunderbolt1 = "node3" }

[[node]]
name = "node3"
ssh = "root@192.168.1.53"
fabric_address = "10.0.0.3"
links = { thunderbolt0 = "node1", thunderbolt1 = "node2" }
"""

NODE1_LINKS = 'links = { thunderbolt0 = "node2", thunderbolt1 = "node3" }'
NODE3_LINKS = 'links = { thunderbolt0 = "node1", thunderbolt1 = "node2" }'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "halo.toml"
    path.write_text(text)
    return path


def test_a_cabled_mesh(tmp_path: Path) -> None:
    path = write(tmp_path, MESH)
    config = load_config(path)
    assert config == Config(
        path=path,
        name="usb4",
        transport="thunderbolt",
        nodes=(
            NodeConfig(
                "node1",
                "root@192.168.1.51",
                "10.0.0.1",
                links=(("thunderbolt0", "node2"), ("thunderbolt1", "node3")),
            ),
            NodeConfig(
                "node2",
                "root@192.168.1.52",
                "10.0.0.2",
                links=(("thunderbolt0", "node1"), ("thunderbolt1", "node3")),
            ),
            NodeConfig(
                "node3",
                "root@192.168.1.53",
                "10.0.0.3",
                links=(("thunderbolt0", "node1"), ("thunderbolt1", "node2")),
            ),
        ),
        fabric=FabricConfig("10.200.7.0/28", 65520, "fab0", "openfabric"),
    )
    assert config.routed
    fabric = config.mesh()
    assert fabric == build_fabric(
        {"node1": "10.0.0.1", "node2": "10.0.0.2", "node3": "10.0.0.3"},
        {
            "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node3")],
            "node2": [("thunderbolt0", "node1"), ("thunderbolt1", "node3")],
            "node3": [("thunderbolt0", "node1"), ("thunderbolt1", "node2")],
        },
        "10.200.7.0/28",
        65520,
        "fab0",
        "openfabric",
    )
    assert fabric is not None and fabric.topology == "mesh"
    assert [c.network for c in fabric.cables] == [
        "10.200.7.0/31",
        "10.200.7.2/31",
        "10.200.7.4/31",
    ]
    part = fabric.node("node2")
    assert (part.identity, part.identity_iface, part.routing) == ("10.0.0.2", "fab0", "openfabric")
    assert {link.mtu for link in part.links} == {65520}


def test_fabric_defaults(tmp_path: Path) -> None:
    text = MESH.replace(MESH[MESH.index("[fabric]") : MESH.index("[[node]]")], "")
    config = load_config(write(tmp_path, text))
    assert config.fabric == FabricConfig("10.254.0.0/24", 9000, "halo0", "static")
    fabric = config.mesh()
    assert fabric is not None
    assert fabric.node("node1").identity_iface == "halo0"
    assert fabric.cables[0].network == "10.254.0.0/31"


def test_a_ring_of_four(tmp_path: Path) -> None:
    nodes = "".join(
        f'[[node]]\nname = "node{i}"\nfabric_address = "10.0.0.{i}"\n'
        f'links = {{ thunderbolt0 = "node{i % 4 + 1}", thunderbolt1 = "node{(i - 2) % 4 + 1}" }}\n'
        for i in range(1, 5)
    )
    fabric = load_config(write(tmp_path, '[cluster]\nname = "ring"\n' + nodes)).mesh()
    assert fabric is not None and fabric.topology == "ring"
    assert {n: p.forwarding for n, p in fabric.nodes.items()} == {
        "node1": True,
        "node2": True,
        "node3": False,
        "node4": False,
    }


def test_nodes_on_a_switch_have_no_mesh(tmp_path: Path) -> None:
    text = (
        '[cluster]\nname = "sw"\n[fabric]\nmtu = 1500\n'
        '[[node]]\nname = "a"\nfabric_address = "192.168.100.1"\n'
        '[[node]]\nname = "b"\nfabric_address = "192.168.100.2"\n'
    )
    config = load_config(write(tmp_path, text))
    assert not config.routed and config.mesh() is None
    assert config.fabric.mtu == 1500  # read, and unused without cables


def test_a_single_node_with_no_cables_is_a_switch_config(tmp_path: Path) -> None:
    text = (
        '[cluster]\nname = "one"\n[[node]]\nname = "a"\nfabric_address = "10.0.0.1"\nlinks = {}\n'
    )
    config = load_config(write(tmp_path, text))
    assert config.nodes[0].links == () and config.mesh() is None


def _error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    prefix = f"{path}:"
    message = str(caught.value)
    assert message.startswith(prefix), message
    return message[len(prefix) :]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            NODE3_LINKS,
            'links = { thunderbolt1 = "node2" }',
            "15: the nodes' links: node1 names 1 cable(s) to node3, node3 names 0 to node1: "
            "both ends of a cable must name it",
        ),
        (
            NODE3_LINKS + "\n",
            "",
            " node3 has no links while other nodes are cabled",
        ),
        (
            NODE3_LINKS,
            "links = {}",
            "27: node3 has no links while other nodes are cabled",
        ),
        (
            'fabric_address = "10.0.0.2"\n',
            "",
            "20: node2: a cabled node needs fabric_address (its identity address, which halo "
            "setup puts on fabric.identity_iface)",
        ),
        (
            NODE1_LINKS,
            'links = { thunderbolt0 = "node2", thunderbolt1 = "node9" }',
            "15: the nodes' links: node1:thunderbolt1 is cabled to 'node9': not another node",
        ),
        (
            NODE1_LINKS,
            'links = { thunderbolt0 = "node2", thunderbolt1 = "node1" }',
            "15: the nodes' links: node1:thunderbolt1 is cabled to 'node1': not another node",
        ),
        (
            'link_network = "10.200.7.0/28"',
            'link_network = "10.200.7.0/31"',
            "15: the nodes' links: link network 10.200.7.0/31 has no /31 left for node1-node3",
        ),
        (
            'link_network = "10.200.7.0/28"',
            'link_network = "10.200.7.1/28"',
            "6: fabric.link_network '10.200.7.1/28': a network such as 10.254.0.0/24",
        ),
        (
            'link_network = "10.200.7.0/28"',
            'link_network = "10.200.7.0/32"',
            "6: fabric.link_network '10.200.7.0/32': a network such as 10.254.0.0/24",
        ),
        (
            'link_network = "10.200.7.0/28"',
            'link_network = "fd00::/64"',
            "6: fabric.link_network 'fd00::/64': a network such as 10.254.0.0/24",
        ),
        (
            'link_network = "10.200.7.0/28"',
            'link_network = "usb4"',
            "6: fabric.link_network 'usb4': a network such as 10.254.0.0/24",
        ),
        (
            'link_network = "10.200.7.0/28"',
            "link_network = 24",
            "6: fabric.link_network must be a string",
        ),
        ("mtu = 65520", "mtu = 1279", "7: fabric.mtu must be a whole number from 1280 to 65520"),
        ("mtu = 65520", "mtu = 65521", "7: fabric.mtu must be a whole number from 1280 to 65520"),
        ("mtu = 65520", 'mtu = "9000"', "7: fabric.mtu must be a whole number from 1280 to 65520"),
        ("mtu = 65520", "mtu = 9000.0", "7: fabric.mtu must be a whole number from 1280 to 65520"),
        ("mtu = 65520", "mtu = true", "7: fabric.mtu must be a whole number from 1280 to 65520"),
        (
            'routing = "openfabric"',
            'routing = "ospf"',
            "9: fabric.routing must be one of static, openfabric, not 'ospf'",
        ),
        (
            'routing = "openfabric"',
            "routing = 1",
            "9: fabric.routing must be a string",
        ),
        (
            'identity_iface = "fab0"',
            'identity_iface = "fab 0"',
            "8: fabric.identity_iface 'fab 0' holds '/', ':', ',' or whitespace",
        ),
        (
            'identity_iface = "fab0"',
            'identity_iface = "fabric-identity0"',
            "8: fabric.identity_iface 'fabric-identity0' is longer than 15 bytes",
        ),
        (
            'identity_iface = "fab0"',
            'identity_iface = ""',
            "8: fabric.identity_iface '' is empty",
        ),
        (
            'routing = "openfabric"',
            'routing = "openfabric"\narea = "49.0001"',
            "10: unknown field fabric.area (known: identity_iface, link_network, mtu, routing)",
        ),
        (
            NODE1_LINKS,
            'links = ["thunderbolt0", "thunderbolt1"]',
            '15: node[0].links must be a table of interface = "node", e.g. '
            '{ thunderbolt0 = "node2" }',
        ),
        (
            NODE1_LINKS,
            'links = "thunderbolt0"',
            '15: node[0].links must be a table of interface = "node", e.g. '
            '{ thunderbolt0 = "node2" }',
        ),
        (
            NODE1_LINKS,
            "links = { thunderbolt0 = 2 }",
            '15: node[0].links must be a table of interface = "node", e.g. '
            '{ thunderbolt0 = "node2" }',
        ),
        (
            NODE1_LINKS,
            'links = { thunderbolt0 = { peer = "node2" } }',
            '15: node[0].links must be a table of interface = "node", e.g. '
            '{ thunderbolt0 = "node2" }',
        ),
        (
            NODE1_LINKS,
            'links = { "thunder:bolt0" = "node2", thunderbolt1 = "node3" }',
            "15: node[0].links: interface 'thunder:bolt0' holds '/', ':', ',' or whitespace",
        ),
        (
            NODE1_LINKS,
            'links = { "^tb0" = "node2", thunderbolt1 = "node3" }',
            "15: node[0].links: interface '^tb0' starts with '^' or '=' (NCCL_SOCKET_IFNAME's "
            "own prefixes)",
        ),
    ],
)
def test_errors_name_the_problem(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in MESH
    assert _error(tmp_path, MESH.replace(old, new, 1)) == expected


def test_fabric_must_be_a_table(tmp_path: Path) -> None:
    text = "fabric = 5\n" + MESH.replace(MESH[MESH.index("[fabric]") : MESH.index("[[node]]")], "")
    assert _error(tmp_path, text) == "1: [fabric] must be a table"


def test_unknown_section_names_fabric_among_the_known(tmp_path: Path) -> None:
    assert _error(tmp_path, MESH + "[fabrics]\nmtu = 9000\n") == (
        "28: unknown section [fabrics] (known: [cluster], [ray], [serve], [models], [fabric], "
        "[gateway], [[node]])"
    )


def test_nodes_that_make_two_fabrics(tmp_path: Path) -> None:
    nodes = "".join(
        f'[[node]]\nname = "node{i}"\nfabric_address = "10.0.0.{i}"\n'
        f'links = {{ thunderbolt0 = "node{i + 1 if i % 2 else i - 1}" }}\n'
        for i in range(1, 5)
    )
    assert _error(tmp_path, '[cluster]\nname = "split"\n' + nodes) == (
        "6: the nodes' links: node3, node4 cannot be reached from node1 over the cables: "
        "every node needs a path to every other"
    )


def test_a_node_cabled_to_itself_alone(tmp_path: Path) -> None:
    text = '[cluster]\nname = "one"\n[[node]]\nname = "a"\nfabric_address = "10.0.0.1"\n'
    text += 'links = { tb0 = "a" }\n'
    assert _error(tmp_path, text) == "6: the nodes' links: a:tb0 is cabled to 'a': not another node"


def test_a_cabled_node_without_fabric_address_alone(tmp_path: Path) -> None:
    text = '[cluster]\nname = "one"\n[[node]]\nname = "a"\nlinks = { tb0 = "b" }\n'
    assert _error(tmp_path, text) == (
        "5: a: a cabled node needs fabric_address (its identity address, which halo setup "
        "puts on fabric.identity_iface)"
    )


# Cabling halo cannot build: each a ConfigError naming the clash.
def test_two_nodes_with_one_identity(tmp_path: Path) -> None:
    message = _error(
        tmp_path, MESH.replace('fabric_address = "10.0.0.2"', 'fabric_address = "10.0.0.1"')
    )
    assert message == "15: the nodes' links: node1 and node2 have the same identity 10.0.0.1"


def test_an_identity_inside_the_link_network(tmp_path: Path) -> None:
    message = _error(
        tmp_path, MESH.replace('fabric_address = "10.0.0.1"', 'fabric_address = "10.200.7.1"')
    )
    assert message == (
        "15: the nodes' links: node1: identity 10.200.7.1 is inside the link network "
        "10.200.7.0/28 (a cable's address)"
    )


def test_a_cable_named_as_the_identity_interface(tmp_path: Path) -> None:
    message = _error(
        tmp_path, MESH.replace(NODE1_LINKS, 'links = { fab0 = "node2", thunderbolt1 = "node3" }')
    )
    assert message == (
        "15: the nodes' links: node1: fab0 is a cable and the identity interface: name the "
        "identity interface otherwise ([fabric] identity_iface)"
    )
