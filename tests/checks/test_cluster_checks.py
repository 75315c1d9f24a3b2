"""Cluster checks through the fake runner: nodes that disagree, and one that does not answer."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

from halo_cluster.checks.cluster import check_container_hca, cluster_checks
from halo_cluster.checks.context import NodeReport
from halo_cluster.client.node import clients_from
from halo_cluster.cluster.doctor import DoctorReport, doctor_cluster
from halo_cluster.cluster.gather import HCA_MARK, HCA_SCRIPT, parse_host_hca
from halo_cluster.config import Config, NodeConfig
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import HostHca, Inventory, RdmaCore
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
    runner.on_input(["bash", "-s"], ping_answer(ping_ok, names=FABRIC))
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
# what every node's resolver answers for these names (a healthy cluster's /etc/hosts)
FABRIC = {"strix1": "192.168.100.1", "strix2": "192.168.100.2", "plain": "172.16.5.20"}


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
        "cluster.names": "ok",
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


def _in_container(inv: Inventory, host: HostHca) -> NodeReport:
    node = NodeConfig("strix1", "root@192.168.1.51", "192.168.100.1", exec_prefix=("toolbox",))
    return NodeReport(node, inv, host_hca=host)


def test_a_container_that_hides_the_hosts_hca_blocks_an_rdma_serve() -> None:
    """The inventory is the container's view (it runs through exec_prefix); the host's is
    read outside it. The host's E810 and uverbs with rdma-core v62, a container that sees
    neither: a fail with each difference and the fix; an older rdma-core alone warns."""
    host = HostHca(("rocep194s0",), ("uverbs0",), 62)
    blind = replace(
        node_inv("no-rdma"), rdma_core=RdmaCore(50, "/usr/lib64/libibverbs.so.1.14.50.0", ())
    )
    [found] = check_container_hca([_in_container(blind, host)], "auto")
    assert found.severity == "fail" and found.check == "cluster.container_hca"
    assert found.summary.startswith("strix1: the engine's container hides the host's RDMA")
    assert found.evidence == (
        "the host has rocep194s0; the container sees no RDMA device",
        "no /dev/infiniband/uverbs* in the container (1 on the host)",
    )
    assert found.fix[1] == "# with rdma-core >= v62 in the image"
    assert check_container_hca([_in_container(blind, host)], "roce")[0].severity == "fail"
    # a TCP network by choice: said, never blocking
    for tcp in ("ethernet", "thunderbolt"):
        assert check_container_hca([_in_container(blind, host)], tcp)[0].severity == "info"
    # a container that sees what the host has: nothing to say; a host without RDMA: nothing
    healthy = node_inv("strix-e810")
    same = HostHca(tuple(d.name for d in healthy.rdma), ("uverbs0",), healthy.rdma_core.release)
    assert check_container_hca([_in_container(healthy, same)], "auto") == []
    assert check_container_hca([_in_container(blind, HostHca((), (), 62))], "auto") == []
    # all there but an older rdma-core: a warning, not a refusal
    newer = replace(same, release=(healthy.rdma_core.release or 0) + 1)
    [older] = check_container_hca([_in_container(healthy, newer)], "auto")
    assert older.severity == "warn" and "is older than the host's" in older.summary
    # no rdma-core at all in the container is part of the refusal
    bare = replace(healthy, rdma_core=RdmaCore(None, None, ()))
    [missing] = check_container_hca([_in_container(bare, same)], "auto")
    assert missing.severity == "fail"
    assert missing.evidence == ("no rdma-core (libibverbs) in the container",)
    # the gate: a cluster check that fails is a blocking finding of the serve
    assert [f.check for f in cluster_checks([_in_container(blind, host)], "auto")].count(
        "cluster.container_hca"
    ) == 1


def test_the_hosts_hca_is_read_by_the_script_for_real() -> None:
    """The host script's section run on this machine (no RDMA here: no device, no uverbs;
    its libibverbs, where installed, names the release) and parsed as the gather does."""
    done = subprocess.run(["bash", "-s"], input=HCA_SCRIPT, capture_output=True, text=True,
                          timeout=30, check=True)  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[0] == HCA_MARK.strip()
    assert all(line.split(" ")[0] in ("device", "uverbs", "library") for line in lines[1:])
    parsed = parse_host_hca(done.stdout.partition(HCA_MARK)[2])
    assert parsed.devices == tuple(
        Path(p).name for p in sorted(Path("/sys/class/infiniband").glob("*"))
    )
    assert parse_host_hca(
        "device mlx5_0\nuverbs uverbs0\nlibrary libibverbs.so.1.14.62.0\njunk\n"
    ) == (HostHca(("mlx5_0",), ("uverbs0",), 62))


def test_the_doctor_names_a_foreign_process_holding_a_quarter_of_a_nodes_memory() -> None:
    """The host script's memory section, run for real here (this machine's MemTotal and its
    largest processes), then a node whose answer names a forgotten server: a warning with
    how to stop it; halo's own and Ray's processes are not named."""
    from halo_cluster.checks.cluster import check_memory_owners
    from halo_cluster.checks.memory_owners import HostMemory, MemoryOwner
    from halo_cluster.cluster.gather import MEMORY_MARK, MEMORY_SCRIPT, parse_host_memory

    said = subprocess.run(["bash", "-s"], input=MEMORY_SCRIPT, capture_output=True, text=True,
                          timeout=30, check=True).stdout  # fmt: skip
    here = parse_host_memory(said.partition(MEMORY_MARK)[2])
    assert here.total_kib and here.total_kib > 0 and here.owners  # this test's Python at least
    total = 128 * 2**20
    owners = (
        MemoryOwner(4242, 4240, 2 * 2**20, 94 * 2**20, False, "llama-server"),
        MemoryOwner(77, 77, 60 * 2**20, 0, True, "vllm"),  # halo's own
        MemoryOwner(88, 88, 40 * 2**20, 0, False, "ray::RayWorkerW"),  # perhaps halo's Ray
    )
    report = NodeReport(STRIX1, None, host_memory=HostMemory(total, owners))
    [found] = check_memory_owners([report])
    assert (found.severity, found.check) == ("warn", "cluster.memory_owners")
    assert (
        found.summary
        == "strix1: 1 process(es) halo did not start hold a quarter or more of its memory"
    )
    assert found.evidence[0].startswith("pid 4242 (llama-server) holds 96.0 GiB (75 %")
    assert found.fix == ("# kill -TERM 4242",)
    assert (
        check_memory_owners([NodeReport(STRIX1, None, host_memory=HostMemory(total, owners[1:]))])
        == []
    )
