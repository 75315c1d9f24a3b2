"""transport/routed.py through plan_transport(inv, wanted, None, fabric): the plan of a node
cabled point to point (a rail per cable, the identity for what binds one address), its
renderings (counters, the label people read) and its JSON round trip."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from halo_cluster.errors import TransportError, UsageError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import Gid, Inventory
from halo_cluster.mesh import NodeFabric, build_fabric
from halo_cluster.transport import Rail, TransportPlan, plan_transport
from halo_cluster.transport.render import counters_args, perftest_device, rail_label
from tests.conftest import ROOTS

THUNDERBOLT = collect_inventory(str(ROOTS / "thunderbolt"))  # thunderbolt0, wlan0, an APU
STRIX = collect_inventory(str(ROOTS / "strix-e810"))  # E810 RoCE on enp194s0np0, an APU


def with_interface(inv: Inventory, like: str, name: str, ipv4: tuple[str, ...] = ()) -> Inventory:
    iface = inv.interface(like)
    assert iface is not None
    return replace(inv, net=(*inv.net, replace(iface, name=name, ipv4=ipv4, ipv6=())))


def without_interface(inv: Inventory, name: str) -> Inventory:
    return replace(inv, net=tuple(i for i in inv.net if i.name != name))


# node1 of a USB4 mesh of three: its two cables are interfaces of the thunderbolt root
USB4 = with_interface(THUNDERBOLT, "thunderbolt0", "thunderbolt1")
MESH = build_fabric(
    {"node1": "10.0.0.1", "node2": "10.0.0.2", "node3": "10.0.0.3"},
    {
        "node1": [("thunderbolt0", "node2"), ("thunderbolt1", "node3")],
        "node2": [("thunderbolt0", "node1"), ("thunderbolt1", "node3")],
        "node3": [("thunderbolt0", "node1"), ("thunderbolt1", "node2")],
    },
)
NODE1 = MESH.node("node1")


def two_nodes(ifname: str, other: str = "enp194s0np0") -> NodeFabric:
    return build_fabric(
        {"node1": "10.0.0.1", "node2": "10.0.0.2"},
        {"node1": [(ifname, "node2")], "node2": [(other, "node1")]},
    ).node("node1")


TCP_PLAN: dict[str, Any] = {
    "transport": "thunderbolt",
    "hca": None,
    "device": None,
    "port": None,
    "gid_index": None,
    "socket_ifname": "thunderbolt0",
    "address": "10.0.0.1",
    "apu": True,
    "rails": [
        {
            "device": None,
            "port": None,
            "gid_index": None,
            "netdev": "thunderbolt0",
            "address": "10.254.0.0",
        },
        {
            "device": None,
            "port": None,
            "gid_index": None,
            "netdev": "thunderbolt1",
            "address": "10.254.0.2",
        },
    ],
    "identity": {
        "device": None,
        "port": None,
        "gid_index": None,
        "netdev": "halo0",
        "address": "10.0.0.1",
    },
    "env": {
        "NCCL_SOCKET_IFNAME": "=thunderbolt0,thunderbolt1",
        "GLOO_SOCKET_IFNAME": "halo0",
        "VLLM_HOST_IP": "10.0.0.1",
        "NCCL_IB_DISABLE": "1",
        "NCCL_NET": "Socket",
        "NCCL_CROSS_NIC": "1",
    },
    "reasons": {
        "transport": "thunderbolt over 2 cable(s) (thunderbolt0 to node2, thunderbolt1 to "
        "node3), identity 10.0.0.1 on halo0",
        "NCCL_SOCKET_IFNAME": "exact match (=): NCCL's sockets on every cable, each reaching "
        "the peers routed over it",
        "GLOO_SOCKET_IFNAME": "Gloo binds one address: the identity 10.0.0.1, reached over "
        "any cable",
        "VLLM_HOST_IP": "vLLM and Ray advertise this node by its identity address",
        "NCCL_IB_DISABLE": "thunderbolt transport: TCP sockets only",
        "NCCL_NET": "use NCCL's socket transport explicitly",
        "NCCL_CROSS_NIC": "each cable reaches other peers: a ring may cross from one cable "
        "to another",
    },
    "warnings": [],
}


@pytest.mark.parametrize("wanted", ["auto", "thunderbolt", "ethernet"])
def test_tcp_routed_plan_complete(wanted: str) -> None:
    """Every TCP transport over USB4 cables: sockets on every cable, Gloo and vLLM on the
    identity (the label follows the interfaces, as on a switch)."""
    plan = plan_transport(USB4, wanted, None, NODE1)
    assert plan.to_dict() == TCP_PLAN
    assert plan.rails == (
        Rail(netdev="thunderbolt0", address="10.254.0.0"),
        Rail(netdev="thunderbolt1", address="10.254.0.2"),
    )
    assert plan.identity == Rail(netdev="halo0", address="10.0.0.1")
    assert (plan.address, plan.netdev, plan.is_rdma) == ("10.0.0.1", "thunderbolt0", False)


def test_the_peer_is_not_asked_for_on_a_routed_fabric() -> None:
    assert plan_transport(USB4, "auto", "192.168.100.2", NODE1) == plan_transport(
        USB4, "auto", None, NODE1
    )


def test_tcp_over_ethernet_cables() -> None:
    """A cable of an Ethernet port (no RDMA wanted): an ethernet plan."""
    plan = plan_transport(STRIX, "ethernet", None, two_nodes("enp194s0np0"))
    assert plan.transport == "ethernet"
    assert plan.env == {
        "NCCL_SOCKET_IFNAME": "=enp194s0np0",
        "GLOO_SOCKET_IFNAME": "halo0",
        "VLLM_HOST_IP": "10.0.0.1",
        "NCCL_IB_DISABLE": "1",
        "NCCL_NET": "Socket",
        "NCCL_CROSS_NIC": "1",
    }
    assert plan.warnings == ()


def test_thunderbolt_wanted_over_cables_that_are_not() -> None:
    with pytest.raises(TransportError) as caught:
        plan_transport(STRIX, "thunderbolt", None, two_nodes("enp194s0np0"))
    assert str(caught.value) == (
        "thunderbolt requested but enp194s0np0 is not a Thunderbolt network interface"
    )
    mixed = build_fabric(
        {"node1": "10.0.0.1", "node2": "10.0.0.2", "node3": "10.0.0.3"},
        {
            "node1": [("enp191s0", "node2"), ("enp194s0np0", "node3")],
            "node2": [("x0", "node1"), ("x1", "node3")],
            "node3": [("x0", "node1"), ("x1", "node2")],
        },
    ).node("node1")
    with pytest.raises(
        TransportError, match=r"^thunderbolt requested but enp191s0, enp194s0np0 is"
    ):
        plan_transport(STRIX, "thunderbolt", None, mixed)


@pytest.mark.parametrize("wanted", ["roce", "infiniband"])
def test_rdma_wanted_without_ports_on_the_cables(wanted: str) -> None:
    with pytest.raises(TransportError) as caught:
        plan_transport(USB4, wanted, None, NODE1)
    assert str(caught.value) == (
        f"{wanted} requested but thunderbolt0, thunderbolt1 has no usable {wanted} port: "
        "every cable needs one (or ask for a TCP transport)"
    )


def test_roce_wanted_with_a_port_on_one_cable_only() -> None:
    inv = with_interface(STRIX, "enp191s0", "enp195s0")
    fabric = build_fabric(
        {"node1": "10.0.0.1", "node2": "10.0.0.2", "node3": "10.0.0.3"},
        {
            "node1": [("enp194s0np0", "node2"), ("enp195s0", "node3")],
            "node2": [("p0", "node1"), ("p1", "node3")],
            "node3": [("p0", "node1"), ("p1", "node2")],
        },
    ).node("node1")
    with pytest.raises(TransportError) as caught:
        plan_transport(inv, "roce", None, fabric)
    assert str(caught.value) == (
        "roce requested but enp195s0 has no usable roce port: every cable needs one "
        "(or ask for a TCP transport)"
    )
    # auto: TCP on every cable, and why
    plan = plan_transport(inv, "auto", None, fabric)
    assert (plan.transport, plan.warnings) == (
        "ethernet",
        ("running over TCP sockets: not every cable has a usable RDMA port",),
    )
    assert plan.env["NCCL_SOCKET_IFNAME"] == "=enp194s0np0,enp195s0"


def test_a_cable_whose_interface_is_not_there() -> None:
    """The plan is still made (the doctor says fabric.link); it says which is missing."""
    plan = plan_transport(THUNDERBOLT, "auto", None, NODE1)
    assert plan.warnings == ("thunderbolt1 not present: see 'halo doctor' (fabric.link)",)
    # the cables that are there say the kind; the missing one is the doctor's to name
    assert plan.transport == "thunderbolt"
    assert plan.env["NCCL_SOCKET_IFNAME"] == "=thunderbolt0,thunderbolt1"
    wanted = plan_transport(THUNDERBOLT, "thunderbolt", None, NODE1)
    assert (wanted.transport, wanted.warnings) == ("thunderbolt", plan.warnings)


@pytest.mark.parametrize(
    ("fabric", "message"),
    [
        (
            replace(NODE1, links=(replace(NODE1.links[0], ifname="thunder bolt0"), NODE1.links[1])),
            "the cable to node2: interface 'thunder bolt0' holds '/', ':', ',' or whitespace",
        ),
        (
            replace(NODE1, identity_iface="^halo"),
            "the identity interface: interface '^halo' starts with '^' or '='",
        ),
    ],
)
def test_names_nccl_cannot_be_given_are_refused(fabric: NodeFabric, message: str) -> None:
    with pytest.raises(TransportError, match=f"^{re.escape(message)}"):
        plan_transport(USB4, "auto", None, fabric)


def test_unknown_transport_is_a_usage_error_with_a_fabric_too() -> None:
    with pytest.raises(UsageError):
        plan_transport(USB4, "tcp", None, NODE1)


ROCE_PLAN: dict[str, Any] = {
    "transport": "roce",
    "hca": "rocep194s0:1",
    "device": "rocep194s0",
    "port": 1,
    "gid_index": 1,
    "socket_ifname": "enp194s0np0",
    "address": "10.0.0.1",
    "apu": True,
    "rails": [
        {
            "device": "rocep194s0",
            "port": 1,
            "gid_index": 1,
            "netdev": "enp194s0np0",
            "address": "10.254.0.0",
        }
    ],
    "identity": {
        "device": None,
        "port": None,
        "gid_index": None,
        "netdev": "halo0",
        "address": "10.0.0.1",
    },
    "env": {
        "NCCL_SOCKET_IFNAME": "=enp194s0np0",
        "GLOO_SOCKET_IFNAME": "halo0",
        "VLLM_HOST_IP": "10.0.0.1",
        "NCCL_IB_DISABLE": "0",
        "NCCL_NET": "IB",
        "NCCL_IB_HCA": "=rocep194s0:1",
        "NCCL_IB_GID_INDEX": "1",
        "NCCL_NET_GDR_LEVEL": "0",
        "NCCL_CROSS_NIC": "1",
    },
    "reasons": {
        "transport": "roce over 1 cable(s) (enp194s0np0 to node2), identity 10.0.0.1 on halo0",
        "NCCL_SOCKET_IFNAME": "exact match (=): NCCL's sockets on every cable, each reaching "
        "the peers routed over it",
        "GLOO_SOCKET_IFNAME": "Gloo binds one address: the identity 10.0.0.1, reached over "
        "any cable",
        "VLLM_HOST_IP": "vLLM and Ray advertise this node by its identity address",
        "NCCL_IB_DISABLE": "RDMA is wanted: let NCCL use its IB/RoCE transport",
        "NCCL_NET": "fail at start-up instead of falling back to sockets silently",
        "NCCL_IB_HCA": "exact match (=): every cable's RDMA port is a rail",
        "NCCL_IB_GID_INDEX": "the RoCE v2 entry of rocep194s0/1 for 192.168.100.1 "
        "(enp194s0np0) is index 1",
        "NCCL_NET_GDR_LEVEL": "gfx1151 is an APU: no GPUDirect RDMA, RCCL stages through host "
        "memory",
        "NCCL_CROSS_NIC": "each cable reaches other peers: a ring may cross from one cable "
        "to another",
    },
    "warnings": [],
}


@pytest.mark.parametrize("wanted", ["auto", "roce"])
def test_roce_routed_plan_complete(wanted: str) -> None:
    plan = plan_transport(STRIX, wanted, None, two_nodes("enp194s0np0"))
    assert plan.to_dict() == ROCE_PLAN


def _with_gid_of_the_cable(inv: Inventory, cidrs: tuple[str, ...]) -> Inventory:
    """enp194s0np0 holding ``cidrs``, its port a RoCE v2 GID for 10.254.0.0 at index 2."""
    device = inv.rdma[0]
    port = device.ports[0]
    gid = Gid(2, "0000:0000:0000:0000:0000:ffff:0afe:0000", "RoCE v2", port.netdev, "10.254.0.0")
    rdma = (replace(device, ports=(replace(port, gids=(*port.gids, gid)),)),)
    net = tuple(replace(i, ipv4=cidrs) if i.name == "enp194s0np0" else i for i in inv.net)
    return replace(inv, rdma=rdma, net=net)


def test_roce_gid_of_the_cables_address_once_set_up() -> None:
    """After halo setup the port holds the cable's /31 only: its GID."""
    inv = _with_gid_of_the_cable(STRIX, ("10.254.0.0/31",))
    plan = plan_transport(inv, "roce", None, two_nodes("enp194s0np0"))
    assert plan.rail == Rail("rocep194s0", 1, 2, "enp194s0np0", "10.254.0.0")
    assert plan.reasons["NCCL_IB_GID_INDEX"] == (
        "the RoCE v2 entry of rocep194s0/1 for 10.254.0.0 (enp194s0np0) is index 2"
    )


def test_roce_gid_is_the_one_of_the_rails_address() -> None:
    inv = _with_gid_of_the_cable(STRIX, ("192.168.100.1/30", "10.254.0.0/31"))
    plan = plan_transport(inv, "roce", None, two_nodes("enp194s0np0"))
    assert plan.rail.address == "10.254.0.0"
    assert plan.rail.gid_index == 2  # today: 1, the GID of 192.168.100.1


def test_counters_args_of_a_routed_plan() -> None:
    plan = plan_transport(USB4, "auto", None, NODE1)
    cables = ["--link", "thunderbolt0", "--link", "thunderbolt1"]
    assert counters_args(plan) == ["counters", *cables]
    assert counters_args(plan, "192.168.1.23") == ["counters", "--mgmt", "192.168.1.23", *cables]
    # the management address is the identity: one path, not two
    assert counters_args(plan, "10.0.0.1") == ["counters", *cables]
    roce = plan_transport(STRIX, "roce", None, two_nodes("enp194s0np0"))
    assert counters_args(roce, "192.168.1.51") == [
        "counters",
        "--mgmt",
        "192.168.1.51",
        "--rdma",
        "rocep194s0:1",
        "--link",
        "enp194s0np0",
    ]


def test_rail_label_of_a_routed_plan() -> None:
    assert rail_label(plan_transport(USB4, "auto", None, NODE1)) == "thunderbolt0+thunderbolt1"
    roce = plan_transport(STRIX, "roce", None, two_nodes("enp194s0np0"))
    assert rail_label(roce) == "rocep194s0:1"
    assert perftest_device(roce) is not None
    assert perftest_device(plan_transport(USB4, "auto", None, NODE1)) is None


@pytest.mark.parametrize(
    "plan",
    [
        plan_transport(USB4, "auto", None, NODE1),
        plan_transport(STRIX, "roce", None, two_nodes("enp194s0np0")),
    ],
    ids=["tcp", "roce"],
)
def test_from_dict_round_trip_keeps_the_identity(plan: TransportPlan) -> None:
    again = TransportPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan
    assert again.identity == Rail(netdev="halo0", address="10.0.0.1")
    assert again.address == "10.0.0.1" and again.rail.address == "10.254.0.0"


def test_from_dict_without_an_identity() -> None:
    data = plan_transport(USB4, "auto", None, NODE1).to_dict()
    for identity in (None, "halo0", ["halo0"]):
        plan = TransportPlan.from_dict({**data, "identity": identity})
        assert plan.identity is None
        assert plan.address == "10.254.0.0"  # the first rail's, as on a switch
    del data["identity"]
    assert TransportPlan.from_dict(data).identity is None
