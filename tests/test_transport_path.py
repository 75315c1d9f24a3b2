"""The typed fabric path (transport/path.py) and its renderers (transport/render.py): a state
file written before the rails still reads, garbage is a ParseError, and each renderer's
complete output."""

from __future__ import annotations

import json

import pytest

from halo_cluster.errors import ParseError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.transport import Rail, TransportPlan, plan_transport
from halo_cluster.transport.render import (
    EnvWhy,
    PerftestDevice,
    counters_args,
    engine_env,
    perftest_device,
    rail_label,
)
from tests.conftest import OUTPUTS, ROOTS

BEFORE_RAILS = OUTPUTS / "state" / "before-rails.state.json"  # written by the previous version


def test_a_state_file_from_before_the_rails_reads_as_todays_plans() -> None:
    nodes = json.loads(BEFORE_RAILS.read_text())["nodes"]
    read = {name: TransportPlan.from_dict(entry["plan"]) for name, entry in nodes.items()}
    assert read == {
        "strix1": plan_transport(
            collect_inventory(str(ROOTS / "strix-e810")), "auto", "192.168.100.2"
        ),
        "cx3": plan_transport(
            collect_inventory(str(ROOTS / "connectx3-port2")), "auto", "10.40.0.22"
        ),
        "plain": plan_transport(collect_inventory(str(ROOTS / "no-rdma")), "auto", None),
    }
    assert {name: (p.rails, p.apu) for name, p in read.items()} == {
        # the APU was only in NCCL_NET_GDR_LEVEL's reason then
        "strix1": ((Rail("rocep194s0", 1, 1, "enp194s0np0", "192.168.100.1"),), True),
        "cx3": ((Rail("mlx4_0", 2, 3, "enp4s0d1", "10.40.0.21"),), False),
        "plain": ((Rail(None, None, None, "eno1", "172.16.5.20"),), False),
    }


def test_the_json_keeps_the_old_keys_next_to_the_rails() -> None:
    plan = TransportPlan(
        "roce",
        (Rail("mlx4_0", 2, 3, "enp4s0d1", "10.40.0.21"), Rail("mlx4_0", 1, 3, "enp4s0", None)),
        False,
        {},
        {},
    )
    assert plan.to_dict() == {
        "transport": "roce",
        "hca": "mlx4_0:2",
        "device": "mlx4_0",
        "port": 2,
        "gid_index": 3,
        "socket_ifname": "enp4s0d1",
        "address": "10.40.0.21",
        "apu": False,
        "rails": [
            {
                "device": "mlx4_0",
                "port": 2,
                "gid_index": 3,
                "netdev": "enp4s0d1",
                "address": "10.40.0.21",
            },
            {"device": "mlx4_0", "port": 1, "gid_index": 3, "netdev": "enp4s0", "address": None},
        ],
        "identity": None,
        "env": {},
        "reasons": {},
        "warnings": [],
    }
    assert TransportPlan.from_dict(plan.to_dict()) == plan


OLD = {"transport": "roce", "gid_index": 3, "socket_ifname": "enp4s0d1", "address": None}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**OLD, "hca": "mlx4_0"}, "transport plan: hca is not DEVICE:PORT (content 'mlx4_0')"),
        ({**OLD, "hca": "mlx4_0:x"}, "transport plan: hca is not DEVICE:PORT (content 'mlx4_0:x')"),
        ({**OLD, "hca": ":1"}, "transport plan: hca is not DEVICE:PORT (content ':1')"),
        ({**OLD, "hca": 7}, "transport plan: hca is not a string (content '7')"),
        (
            {**OLD, "hca": None, "gid_index": "3"},
            "transport plan: gid_index is not an integer (content \"'3'\")",
        ),
        (
            {**OLD, "rails": [{"device": "mlx4_0", "port": True}]},
            "transport plan: port is not an integer (content 'True')",
        ),
    ],
)
def test_a_malformed_plan_is_a_parse_error(data: dict[str, object], message: str) -> None:
    with pytest.raises(ParseError) as err:
        TransportPlan.from_dict(data)
    assert str(err.value) == message


def test_a_plan_has_a_rail() -> None:
    with pytest.raises(ValueError, match="at least one rail"):
        TransportPlan("ethernet", (), False, {}, {})


# -- renderers ------------------------------------------------------------------------------------

RDMA = TransportPlan("roce", (Rail("mlx4_0", 2, 3, "enp4s0d1", "10.40.0.21"),), False, {}, {})
TCP = TransportPlan("thunderbolt", (Rail(netdev="thunderbolt0", address="10.0.1.1"),), True, {}, {})
BARE = TransportPlan("infiniband", (Rail("mlx5_0", 1, 0, None, None),), False, {}, {})


def test_counters_args() -> None:
    assert [counters_args(p) for p in (RDMA, TCP, BARE)] == [
        ["counters", "--fabric", "10.40.0.21", "--rdma", "mlx4_0:2"],
        ["counters", "--fabric", "10.0.1.1"],
        ["counters", "--rdma", "mlx5_0:1"],
    ]
    # the management address, unless it is the fabric's own
    assert counters_args(TCP, "192.168.1.9") == [
        "counters", "--fabric", "10.0.1.1", "--mgmt", "192.168.1.9",
    ]  # fmt: skip
    assert counters_args(TCP, "10.0.1.1") == ["counters", "--fabric", "10.0.1.1"]


def test_perftest_device_and_rail_label() -> None:
    assert [perftest_device(p) for p in (RDMA, TCP, BARE)] == [
        PerftestDevice("mlx4_0", 2, 3),
        None,
        PerftestDevice("mlx5_0", 1, 0),
    ]
    assert [rail_label(p) for p in (RDMA, TCP, BARE)] == ["mlx4_0:2", "thunderbolt0", "mlx5_0:1"]


def test_engine_env_of_an_rdma_rail_without_an_interface() -> None:
    env, reasons = engine_env("infiniband", BARE.rail, EnvWhy("GID 0", "software RDMA"))
    assert env == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_NET": "IB",
        "NCCL_IB_HCA": "=mlx5_0:1",
        "NCCL_IB_GID_INDEX": "0",
        "NCCL_NET_GDR_LEVEL": "0",
    }
    assert list(reasons) == list(env)
    assert (reasons["NCCL_IB_GID_INDEX"], reasons["NCCL_NET_GDR_LEVEL"]) == (
        "GID 0",
        "software RDMA",
    )
    with pytest.raises(ValueError, match="needs a device, a port and a GID index"):
        engine_env("roce", Rail("mlx4_0", None, 3), EnvWhy())
