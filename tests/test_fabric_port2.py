"""A node whose fabric is port 2 of a two-port HCA (``connectx3-port2``: mlx4_0 port 1 on a
10 GbE storage network, port 2 the 40 GbE fabric, each port with its own counters): every
consumer of the plan gets port 2 — ``halo env``, the counters witness (the controller's argv
and the node reading it for real), ``bench net``'s perftest, the exporter. Before the typed
path the witness sent ``--rdma mlx4_0:2:2`` and the node read port 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.bench.net import NetBench
from halo_cluster.cli import cli
from halo_cluster.client.node import clients_from
from halo_cluster.cluster.proof import counters_call
from halo_cluster.config import Config, NodeConfig
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.monitor.exposition import parse
from halo_cluster.monitor.probes import Target
from halo_cluster.monitor.run import ExporterSpec, once, rdma_prober
from halo_cluster.node.main import main
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from halo_cluster.transport import Rail, TransportPlan, plan_transport
from halo_cluster.transport.render import PerftestDevice, counters_args, perftest_device
from halo_cluster.wire.commands import read_rdma
from tests.bench.test_net import ANSWERS, ScriptedNode
from tests.conftest import OUTPUTS, ROOTS

ROOT = ROOTS / "connectx3-port2"
PEER = "10.40.0.22"  # the other node on the fabric (port 2's network)
NODE = NodeConfig("cx3", "root@192.168.1.21", "10.40.0.21", halo="/h/halo")

PLAN = {
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
        }
    ],
    "identity": None,
    "env": {
        "NCCL_SOCKET_IFNAME": "=enp4s0d1",
        "GLOO_SOCKET_IFNAME": "enp4s0d1",
        "VLLM_HOST_IP": "10.40.0.21",
        "NCCL_IB_DISABLE": "0",
        "NCCL_NET": "IB",
        "NCCL_IB_HCA": "=mlx4_0:2",
        "NCCL_IB_GID_INDEX": "3",
    },
    "reasons": {
        "transport": "roce on mlx4_0/2 (40 Gb/s, mlx4_core)",
        "NCCL_SOCKET_IFNAME": "exact match (=): NCCL bootstrap and socket traffic on this interface only",
        "GLOO_SOCKET_IFNAME": "torch.distributed Gloo on the same interface",
        "VLLM_HOST_IP": "vLLM and Ray advertise this node by its fabric address",
        "NCCL_IB_DISABLE": "RDMA is wanted: let NCCL use its IB/RoCE transport",
        "NCCL_NET": "fail at start-up instead of falling back to sockets silently",
        "NCCL_IB_HCA": "exact match (=): mlx4_0 must not also select mlx4_00 etc.",
        "NCCL_IB_GID_INDEX": "the RoCE v2 entry of mlx4_0/2 for 10.40.0.21 (enp4s0d1) is index 3",
    },
    "warnings": [],
}


def plan() -> TransportPlan:
    return plan_transport(collect_inventory(str(ROOT)), "auto", PEER)


# -- halo env ---------------------------------------------------------------------------------


def test_halo_env_json_plans_port_2() -> None:
    result = CliRunner().invoke(cli, ["env", "--root", str(ROOT), "--peer", PEER, "--json"])
    assert (result.exit_code, json.loads(result.stdout)) == (0, PLAN)
    assert TransportPlan.from_dict(PLAN) == plan()


def test_port_1_is_chosen_only_towards_its_own_network() -> None:
    storage = plan_transport(collect_inventory(str(ROOT)), "auto", "10.10.10.5")
    assert storage.rails == (Rail("mlx4_0", 1, 3, "enp4s0", "10.10.10.21"),)
    assert storage.env["NCCL_IB_HCA"] == "=mlx4_0:1"


# -- the counters witness -----------------------------------------------------------------------

PORT_2_COUNTERS = {
    "paths": {
        "fabric": {"name": "enp4s0d1", "rx_bytes": 10_000_001, "tx_bytes": 14_000_002},
        "mgmt": {"name": "eno1", "rx_bytes": 9_876_543, "tx_bytes": 1_234_567},
        # PMA port_rcv_data / port_xmit_data of port 2, in 4-byte words
        "rdma": {"name": "mlx4_0/2", "rx_bytes": 4 * 4_444_444_444, "tx_bytes": 4 * 2_222_222_222},
    },
    "warnings": [],
}


def test_the_counters_call_names_port_2() -> None:
    assert counters_args(plan()) == ["counters", "--fabric", "10.40.0.21", "--rdma", "mlx4_0:2"]
    assert counters_call(NodeConfig("cx3", "cx3", "10.40.0.21", halo="/h/halo"), plan()) == [
        "counters",
        "--fabric",
        "10.40.0.21",
        "--rdma",
        "mlx4_0:2",
    ]
    with_mgmt = NodeConfig("cx3", "root@192.168.1.21", "10.40.0.21", halo="/h/halo")
    assert counters_call(with_mgmt, plan()) == [
        "counters",
        "--fabric",
        "10.40.0.21",
        "--mgmt",
        "192.168.1.21",
        "--rdma",
        "mlx4_0:2",
    ]


def test_the_node_reads_port_2s_counters_for_the_rendered_argv(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = counters_call(NODE, plan())
    assert argv[0] == "counters"
    code = main([*argv, "--root", str(ROOT)])
    out, err = capsys.readouterr()
    assert (code, json.loads(out), err) == (0, PORT_2_COUNTERS, "")
    port_1 = collect_inventory(str(ROOT)).rdma[0].ports[0]
    assert (port_1.port, port_1.rcv_bytes, port_1.xmit_bytes) == (
        1,
        4 * 333_333_333,
        4 * 111_111_111,
    )


@pytest.mark.parametrize(
    "value",
    ["mlx4_0", "mlx4_0:", ":2", "mlx4_0:x", "mlx4_0:0", "mlx4_0:256", "mlx4_0:-1", "mlx4_0:²"],
)
def test_a_port_that_is_not_a_number_from_1_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["counters", "--root", str(ROOT), "--rdma", value])
    out, err = capsys.readouterr()
    assert (exit_.value.code, out, err) == (
        2,
        "",
        f"halo: error: halo counters: argument --rdma: {value!r}: use DEVICE:PORT "
        "(PORT from 1 to 255)\n",
    )


def test_the_old_doubled_port_is_a_device_that_is_not_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What the previous controller sent: now named as missing, never read as port 1."""
    code = main(["counters", "--root", str(ROOT), "--rdma", "mlx4_0:2:2"])
    out, err = capsys.readouterr()
    assert (code, json.loads(out), err) == (
        0,
        {"paths": {}, "warnings": ["no RDMA port mlx4_0:2/2"]},
        "",
    )


@given(st.text(min_size=1, max_size=40), st.integers(min_value=1, max_value=255))
def test_rdma_arg_splits_at_the_last_colon(device: str, port: int) -> None:
    assert read_rdma(f"{device}:{port}") == (device, port)


@given(st.text(max_size=60))
def test_rdma_arg_is_a_port_from_1_to_255_or_a_usage_error(text: str) -> None:
    try:
        device, port = read_rdma(text)
    except ValueError as err:
        assert "\n" not in str(err)
        return
    before, _, after = text.rpartition(":")
    assert (before, int(after)) == (device, port) and device and 1 <= port <= 255


# -- bench net ----------------------------------------------------------------------------------


def test_bench_net_runs_perftest_on_port_2(tmp_path: Path) -> None:
    nodes = (NODE, NodeConfig("peer", "root@192.168.1.22", PEER, halo="/h/halo"))
    inv = collect_inventory(str(ROOT))
    plans = {"cx3": plan(), "peer": plan_transport(inv, "auto", "10.40.0.21")}
    assert perftest_device(plans["cx3"]) == PerftestDevice("mlx4_0", 2, 3)
    tools = ("ib_write_lat", "ib_write_bw")
    scripted = {n.name: ScriptedNode(n.name, tools, ANSWERS) for n in nodes}
    config = Config(tmp_path / "halo.toml", "cx3", "auto", nodes)
    clients = clients_from(config, scripted)  # type: ignore[arg-type]
    bench = NetBench(config, clients, plans, {"cx3": inv, "peer": inv}, seconds=1)
    result = bench.run([(nodes[0], nodes[1])], ["rdma"])
    assert [p["errors"] for p in result["paths"]] == [[]]
    common = ["-d", "mlx4_0", "-F"]
    lat = [*common, "-s", "2", "-n", "10000", "-p", "18600", "-i", "2", "-x", "3"]
    bw = [*common, "-s", "65536", "-n", "5000", "-p", "18601", "-i", "2", "-x", "3"]
    assert scripted["peer"].started == [
        ["ib_write_lat", *lat],
        ["ib_write_bw", *bw, "--report_gbits"],
    ]
    assert scripted["cx3"].clients == [
        ["ib_write_lat", *lat, PEER],
        ["ib_write_bw", *bw, "--report_gbits", PEER],
    ]


# -- the exporter -------------------------------------------------------------------------------


def test_the_exporters_rdma_probe_uses_port_2() -> None:
    said: list[str] = []
    targets = [Target("peer", "fabric", PEER, 9878), Target("peer", "mgmt", "192.168.1.22", 9878)]
    prober = rdma_prober(str(ROOT), targets, 60.0, said.append)
    assert (prober.device, prober.ib_port, prober.gid_index, said) == ("mlx4_0", 2, 3, [])
    recorded = (OUTPUTS / "tools" / "perftest-write-lat-roce.txt").read_text()
    prober.runner = FakeRunner().on(["ib_write_lat"], Result((), 0, recorded, ""))
    prober.probe_once()
    prober.serve_once()
    argv = ["ib_write_lat", "-d", "mlx4_0", "-F", "-s", "2", "-n", "1000", "-p", "18515"]
    assert prober.runner.calls == [
        (*argv, "-i", "2", "-x", "3", PEER),
        (*argv, "-i", "2", "-x", "3"),
    ]
    assert prober.targets[0].latency_s == 5.23e-6


def test_the_exporter_samples_each_port_under_its_own_number() -> None:
    samples = parse(once(ExporterSpec(str(ROOT), "127.0.0.1", 0, [])))
    sent = {
        port: samples[
            ("halo_rdma_port_transmit_bytes_total", (("device", "mlx4_0"), ("port", port)))
        ]
        for port in ("1", "2")
    }
    assert sent == {"1": 4 * 111_111_111, "2": 4 * 2_222_222_222}


# -- halo serve's counters witness, through scripted nodes ----------------------------------------


def test_serves_counters_witness_reads_port_2(tmp_path: Path) -> None:
    """The whole bring-up on a node whose plan is port 2: the counters it asks the node for
    are port 2's (the defect sent `--rdma mlx4_0:2:2` and the node read port 1)."""
    from halo_cluster.config import ServeConfig
    from tests.cluster.test_serve import Node, cluster, serve
    from tests.conftest import OUTPUTS

    log = (OUTPUTS / "nccl" / "rccl-roce-2rank.log").read_text()
    nodes = {"node1": Node(log, (10, 10, 30_000))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m"), {"node1": plan()})
    serve(srv, tp=1, allow_fallback=True, wait_s=5)
    asked = [s for s in nodes["node1"].scripts if " counters" in s]
    assert (
        asked
        == [
            "/h/halo counters --fabric 10.40.0.21 --mgmt 198.18.1.11 --rdma mlx4_0:2",
        ]
        * 2
    )  # before and after the probe request
