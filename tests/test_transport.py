"""Transport plans for every fixture root and transport; errors; shell round trips."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from halo_cluster.cli.transport import render_env
from halo_cluster.errors import TransportError, UsageError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import Inventory
from halo_cluster.transport import Rail, TransportPlan, plan_transport
from tests.conftest import ROOTS, SCENARIOS


def inv(scenario: str) -> Inventory:
    return collect_inventory(str(ROOTS / scenario))


def test_strix_e810_auto_is_roce_gid_1_with_apu_gdr_off() -> None:
    plan = plan_transport(inv("strix-e810"), "auto", "192.168.100.2")
    assert plan.to_dict() == {
        "transport": "roce",
        "hca": "rocep194s0:1",
        "device": "rocep194s0",
        "port": 1,
        "gid_index": 1,
        "socket_ifname": "enp194s0np0",
        "address": "192.168.100.1",
        "apu": True,
        "rails": [
            {
                "device": "rocep194s0",
                "port": 1,
                "gid_index": 1,
                "netdev": "enp194s0np0",
                "address": "192.168.100.1",
            }
        ],
        "identity": None,
        "env": {
            "NCCL_SOCKET_IFNAME": "=enp194s0np0",
            "GLOO_SOCKET_IFNAME": "enp194s0np0",
            "VLLM_HOST_IP": "192.168.100.1",
            "NCCL_IB_DISABLE": "0",
            "NCCL_NET": "IB",
            "NCCL_IB_HCA": "=rocep194s0:1",
            "NCCL_IB_GID_INDEX": "1",
            "NCCL_NET_GDR_LEVEL": "0",
        },
        "reasons": plan.reasons,
        "warnings": [],
    }
    assert set(plan.reasons) == {"transport", *plan.env}
    assert "gfx1151" in plan.reasons["NCCL_NET_GDR_LEVEL"]


def test_connectx_prefix_trap_and_index_3() -> None:
    node = inv("connectx-roce")
    plan = plan_transport(node, "auto", "10.200.1.20")
    assert plan.rail == Rail("mlx5_10", 1, 3, "ens5f0np0", "10.200.1.10")
    assert plan.env["NCCL_IB_HCA"] == "=mlx5_10:1"
    assert "NCCL_NET_GDR_LEVEL" not in plan.env
    plan = plan_transport(node, "roce", "192.168.50.11")
    assert plan.rail == Rail("mlx5_0", 1, 3, "ens1f0np0", "192.168.50.10")
    assert plan.env["NCCL_IB_HCA"] == "=mlx5_0:1"


def test_several_active_ports_without_peer_warn_and_pick_by_name() -> None:
    plan = plan_transport(inv("connectx-roce"))
    assert (plan.device, plan.port) == ("mlx5_0", 1)
    assert any("mlx5_10/1" in w and "--peer" in w for w in plan.warnings)


def test_down_port_is_skipped_in_auto_and_named_when_requested() -> None:
    node = inv("port-down")
    assert (plan_transport(node).device, plan_transport(node).port) == ("irdma1", 1)
    with pytest.raises(
        TransportError, match=r"no usable port \(irdma1/1\) reaches peer 10.22.115.1"
    ):
        plan_transport(node, "roce", "10.22.115.1")
    down_only = Inventory(**{**node.__dict__, "rdma": node.rdma[:1]})
    with pytest.raises(TransportError, match="roce requested but port irdma0/1 is DOWN"):
        plan_transport(down_only, "roce")


def test_infiniband() -> None:
    plan = plan_transport(inv("infiniband"), "infiniband")
    assert (plan.transport, plan.rail) == (
        "infiniband",
        Rail("mlx5_0", 1, 0, "ib0", "10.10.0.1"),
    )
    with pytest.raises(TransportError, match="no RDMA port with Ethernet"):
        plan_transport(inv("infiniband"), "roce")


def test_rxe_is_never_auto_but_allowed_when_asked() -> None:
    node = inv("rxe-virtio")
    auto = plan_transport(node)
    assert auto.transport == "ethernet" and auto.env["NCCL_IB_DISABLE"] == "1"
    assert any("rxe0/1 is software RDMA" in w for w in auto.warnings)
    asked = plan_transport(node, "roce")
    assert (asked.transport, asked.device, asked.port, asked.gid_index) == ("roce", "rxe0", 1, 1)
    assert any("software RDMA" in w for w in asked.warnings)
    assert asked.env["NCCL_NET_GDR_LEVEL"] == "0"


def test_thunderbolt() -> None:
    node = inv("thunderbolt")
    plan = plan_transport(node, "auto", "10.0.1.2")
    assert (plan.transport, plan.rails, plan.apu) == (
        "thunderbolt",
        (Rail(netdev="thunderbolt0", address="10.0.1.1"),),
        True,  # a Strix Halo over TCP is an APU all the same
    )
    assert plan_transport(node, "thunderbolt").netdev == "thunderbolt0"
    assert plan_transport(node, "ethernet", "192.168.1.40").netdev == "wlan0"
    with pytest.raises(TransportError, match="no Thunderbolt network interface"):
        plan_transport(inv("no-rdma"), "thunderbolt")


def test_misconfigured_mtu_is_a_warning() -> None:
    plan = plan_transport(inv("strix-e810-misconfigured"))
    assert plan.transport == "roce"
    assert any("MTU is 1500" in w for w in plan.warnings)


def test_no_rdma_node_and_peer_off_net() -> None:
    plan = plan_transport(inv("no-rdma"), "auto", "10.9.9.9")
    assert (plan.transport, plan.netdev, plan.apu) == ("ethernet", "eno1", False)
    assert any("routed" in w for w in plan.warnings)
    with pytest.raises(TransportError, match="no RDMA port with InfiniBand"):
        plan_transport(inv("no-rdma"), "infiniband")


def test_bad_arguments() -> None:
    with pytest.raises(UsageError):
        plan_transport(inv("no-rdma"), "carrier-pigeon")
    with pytest.raises(UsageError, match="IPv4"):
        plan_transport(inv("no-rdma"), "auto", "node2")


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("wanted", ["auto", "infiniband", "roce", "ethernet", "thunderbolt"])
def test_every_root_and_transport_plans_or_explains(scenario: str, wanted: str) -> None:
    try:
        plan = plan_transport(inv(scenario), wanted)
    except TransportError as err:
        assert wanted != "auto" and str(err)
        return
    if plan.is_rdma:
        assert plan.env["NCCL_IB_HCA"].startswith("=") and plan.gid_index is not None
    else:
        assert plan.env["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in plan.env


HOSTILE = {
    "A_QUOTE": 'it\'s "quoted"',
    "A_SUBST": "$(touch pwned) `touch pwned2` ${HOME}",
    "A_NEWLINE": "line1\nline2",
    "A_SEMICOLON": "x; touch pwned3 && echo",
    "A_BACKSLASH": "back\\slash\\",
    "A_EMPTY": "",
    "A_UNICODE": "µs → ✓",
}


def test_shell_output_round_trips_through_bash(tmp_path: Path) -> None:
    plan = TransportPlan(
        "ethernet",
        (Rail(netdev="eth0"),),
        False,
        HOSTILE,
        {k: "why\n$(touch pwned4)" for k in HOSTILE},
    )
    script = render_env(plan, "shell", explain=True)
    result = subprocess.run(
        ["bash", "-c", 'eval "$1"; env -0', "_", script],
        capture_output=True,
        cwd=tmp_path,
        check=True,
    )
    env = dict(item.split("=", 1) for item in result.stdout.decode().split("\0") if "=" in item)
    assert {k: env[k] for k in HOSTILE} == HOSTILE
    assert list(tmp_path.iterdir()) == []  # nothing was executed


def test_dotenv_output_round_trips_through_bash_source(tmp_path: Path) -> None:
    safe = {k: v for k, v in HOSTILE.items() if "\n" not in v}
    plan = TransportPlan("ethernet", (Rail(netdev="eth0"),), False, safe, {})
    (tmp_path / "halo.env").write_text(render_env(plan, "dotenv", explain=False))
    result = subprocess.run(
        ["bash", "-c", "set -a; . ./halo.env; env -0"],
        capture_output=True,
        cwd=tmp_path,
        check=True,
    )
    env = dict(item.split("=", 1) for item in result.stdout.decode().split("\0") if "=" in item)
    assert {k: env[k] for k in safe} == safe
    assert sorted(p.name for p in tmp_path.iterdir()) == ["halo.env"]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("wanted", ["auto", "infiniband", "roce", "ethernet", "thunderbolt"])
def test_a_plan_survives_the_state_file(scenario: str, wanted: str) -> None:
    import json

    try:
        plan = plan_transport(inv(scenario), wanted, None)
    except TransportError:
        return
    again = TransportPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan
