"""Cluster checks through the fake runner: nodes that disagree, and one that does not answer."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.doctor import DoctorReport, doctor_cluster
from halo_cluster.config import Config, NodeConfig
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import Inventory
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.result import Result
from halo_cluster.runner.ssh import SSHRunner
from tests.conftest import ROOTS, ping_answer, strix_peer

VERSIONS = {
    "python": "3.12.7",
    "halo": "0.1.0",
    "ray": "2.49.1",
    "vllm": "0.11.0",
    "torch": "2.8.0",
}


def node_inv(scenario: str, **versions: str) -> Inventory:
    return replace(collect_inventory(str(ROOTS / scenario)), versions={**VERSIONS, **versions})


def fake(inv: Inventory | None, ping_ok: bool = True, error: str = "") -> FakeRunner:
    runner = FakeRunner()
    if inv is None:
        return runner.on([], Result((), 255, "", error))
    runner.on(["halo", "inventory"], Result((), 0, json.dumps(inv.to_dict()), ""))
    runner.on_input(["bash", "-s"], ping_answer(ping_ok))
    return runner


def config(*nodes: NodeConfig, transport: str = "auto") -> Config:
    return Config(Path("halo.toml"), "test", transport, tuple(nodes))


def doctor(
    cfg: Config, runners: dict[str, FakeRunner], names: list[str] | None = None
) -> DoctorReport:
    """The doctor over clients of these connections (the client adds each exec_prefix)."""
    return doctor_cluster(cfg, clients_from(cfg, runners), names)


STRIX1 = NodeConfig("strix1", "root@192.168.1.51", "192.168.100.1")
STRIX2 = NodeConfig("strix2", "root@192.168.1.52", "192.168.100.2")


def by_check(findings: list) -> dict[str, list]:  # type: ignore[type-arg]
    out: dict[str, list] = {}  # type: ignore[type-arg]
    for f in findings:
        out.setdefault(f.check, []).append(f)
    return out


def test_two_healthy_nodes() -> None:
    healthy = node_inv("strix-e810")
    peer = strix_peer(healthy)
    report = doctor(config(STRIX1, STRIX2), {"strix1": fake(healthy), "strix2": fake(peer)})
    sev = {f.check: f.severity for f in report.cluster}
    assert sev == {
        "cluster.reachable": "ok",
        "cluster.fabric_ping": "ok",
        "cluster.same_subnet": "ok",
        "cluster.mtu_match": "ok",
        "cluster.transport_match": "ok",
        "cluster.versions_match": "ok",
        "cluster.ssh_path": "ok",
    }
    assert report.exit_code(strict=False) == 0
    assert set(report.nodes) == {"strix1", "strix2"}


def test_three_nodes_that_disagree() -> None:
    good = node_inv("strix-e810")
    bad = node_inv("strix-e810-misconfigured", ray="2.48.0")  # MTU 1500, older Ray, rdma-core 50
    tcp = node_inv("no-rdma", vllm="0.10.2")
    nodes = (STRIX1, STRIX2, NodeConfig("plain", "plain", "172.16.5.20"))
    report = doctor(
        config(*nodes),
        {"strix1": fake(good), "strix2": fake(bad, ping_ok=False), "plain": fake(tcp)},
    )
    found = by_check(report.cluster)
    assert found["cluster.mtu_match"][0].severity == "fail"
    assert "strix1: 9000" in found["cluster.mtu_match"][0].evidence
    assert found["cluster.same_subnet"][0].severity == "fail"
    assert found["cluster.transport_match"][0].severity == "fail"
    assert found["cluster.fabric_ping"][0].severity == "fail"
    versions = {f.severity: f for f in found["cluster.versions_match"]}
    assert "ray: strix1=2.48.0" not in versions["fail"].evidence
    assert any(e.startswith("ray:") and "strix2=2.48.0" in e for e in versions["fail"].evidence)
    assert any(e.startswith("vllm:") for e in versions["fail"].evidence)
    assert any(e.startswith("rdma-core:") for e in versions["warn"].evidence)
    assert report.exit_code(strict=False) == 1


def test_unreachable_node_is_a_finding_and_the_rest_is_checked() -> None:
    report = doctor(
        config(STRIX1, STRIX2),
        {
            "strix1": fake(node_inv("strix-e810")),
            "strix2": fake(
                None, error="ssh: connect to host 192.168.1.52 port 22: Connection timed out"
            ),
        },
    )
    reach = [f for f in report.cluster if f.check == "cluster.reachable"]
    assert [(f.severity, f.summary) for f in reach] == [("fail", "strix2 did not answer")]
    assert "Connection timed out" in reach[0].evidence[0]
    assert report.nodes["strix1"] and report.nodes["strix2"] == []
    assert report.to_dict()["summary"]["fail"] >= 1


def test_node_selection_exec_prefix_and_ssh_path() -> None:
    node = NodeConfig(
        "strix1", "192.168.100.1", "192.168.100.1", ("toolbox", "run", "-c", "vllm", "--"), "halo"
    )
    runner = FakeRunner().on(
        ["toolbox"], Result((), 0, json.dumps(node_inv("strix-e810").to_dict()), "")
    )
    report = doctor(config(node, STRIX2), {"strix1": runner, "strix2": FakeRunner()}, ["strix1"])
    inventory = ("toolbox", "run", "-c", "vllm", "--", "halo", "inventory", "--json", "--versions")
    # the inventory inside the node's prefix; its host's pings and ethtool outside it
    assert sorted(runner.calls) == sorted([inventory, ("bash", "-s")])
    assert [f.severity for f in report.cluster if f.check == "cluster.ssh_path"] == ["info"]


def test_garbage_inventory_is_unreachable_with_reason() -> None:
    runner = FakeRunner().on(["halo"], Result((), 0, "Welcome to my shell banner\n{", ""))
    report = doctor(config(STRIX1), {"strix1": runner})
    assert (
        report.cluster[0].severity == "fail"
        and "unreadable inventory" in report.cluster[0].evidence[0]
    )


def test_ssh_argv_quotes_every_word() -> None:
    runner = SSHRunner("root@node; rm -rf /", Path("cfg"), 7)
    argv = runner.ssh_argv(["halo", "inventory", "--root", "/tmp/a b;$(x)"])
    assert argv == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=7",
        "-F",
        "cfg",
        "--",  # the target can never be read as an option
        "root@node; rm -rf /",
        "halo inventory --root '/tmp/a b;$(x)'",
    ]
