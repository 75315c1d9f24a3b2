"""halo up / status / down through the fake runner: command lines, env per node, order,
idempotence, partial failure and rollback, and no shell injection."""

from __future__ import annotations

import json
import re
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.handle import Cluster as Handle
from halo_cluster.cluster.state import read_state
from halo_cluster.config import Config, NodeConfig
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import Inventory
from halo_cluster.ray.lifecycle import Lifecycle, LifecycleError
from halo_cluster.runner.fake import FakeRunner
from halo_cluster.runner.quote import node_script, private_dir
from halo_cluster.runner.result import Result
from halo_cluster.serving.status import cluster_status
from tests.conftest import ROOTS, ping_answer, strix_peer

VERSIONS = {
    "python": "3.12.7",
    "halo": "0.1.0",
    "ray": "2.49.1",
    "vllm": "0.11.0",
    "torch": "2.8.0",
}


def strix_pair() -> tuple[Inventory, Inventory]:
    one = replace(collect_inventory(str(ROOTS / "strix-e810")), versions=VERSIONS)
    return one, strix_peer(one)


class Cluster:
    """Fake nodes: inventories, a Ray membership that `ray start` changes, recorded scripts."""

    def __init__(self, tmp_path: Path, fail_start_on: str | None = None) -> None:
        self.alive: list[str] = []
        self.gpus: dict[str, int] = {}  # address -> GPUs registered (declared at ray start)
        self.scripts: list[tuple[str, str]] = []
        self.kept: list[tuple[str, str]] = []  # scripts that keep (or remove) ray start's
        nodes = (
            NodeConfig("strix1", "root@192.168.1.51", "192.168.100.1", halo="/opt/halo/bin/halo"),
            NodeConfig(
                "strix2",
                "root@192.168.1.52",
                "192.168.100.2",
                halo="/opt/halo/bin/halo",
                env=(("HF_HOME", "/models"),),
            ),
        )
        self.config = Config(tmp_path / "halo.toml", "strix", "auto", nodes)
        self.ray_clients: list[str] = []
        self.runners = {
            n.name: self._runner(n, inv, fail_start_on == n.name)
            for n, inv in zip(nodes, strix_pair(), strict=True)
        }

    def _runner(self, node: NodeConfig, inv: Inventory, fail: bool) -> FakeRunner:
        runner = FakeRunner()
        runner.on(["/opt/halo/bin/halo", "inventory"], Result((), 0, json.dumps(inv.to_dict()), ""))
        pings = ping_answer()
        runner.on(
            ["pgrep"], lambda _a: Result((), 0 if node.fabric_address in self.alive else 1, "", "")
        )
        runner.on(
            ["/opt/halo/bin/halo", "ray-nodes"],
            lambda _a: Result(
                (),
                0,
                json.dumps(
                    [
                        {
                            "address": a,
                            "alive": True,
                            "resources": {"CPU": 32.0, "GPU": float(self.gpus.get(a, 1))},
                        }
                        for a in self.alive
                    ]
                ),
                "",
            ),
        )
        original = runner.run

        def run(argv, stdin=None, timeout=30.0, on_line=None):  # type: ignore[no-untyped-def]
            if list(argv) == ["bash", "-s"] and "(ping -c 1" in (stdin or ""):
                return pings(tuple(argv), stdin or "")
            if list(argv) == ["bash", "-s"] and "ray-nodes" in (stdin or ""):
                self.ray_clients.append(stdin or "")
                return original(["/opt/halo/bin/halo", "ray-nodes"], None, timeout)
            if list(argv) == ["bash", "-s"] and "/ray-start-" in (stdin or ""):
                self.kept.append((node.name, stdin or ""))  # the start script kept, or removed
                return Result(tuple(argv), 0, "", "")
            if list(argv) == ["bash", "-s"]:
                self.scripts.append((node.name, stdin or ""))
                if " start " in (stdin or ""):
                    if fail:
                        return Result(tuple(argv), 1, "", "ConnectionError: GCS unreachable")
                    self.alive.append(node.fabric_address or "")
                    declared = re.search(r"--num-gpus=(\d+)", stdin or "")
                    # Ray alone does not see the iGPU: only what ray start declares counts
                    self.gpus[node.fabric_address or ""] = int(declared.group(1)) if declared else 0
                elif " stop " in (stdin or "") and node.fabric_address in self.alive:
                    self.alive.remove(node.fabric_address or "")
                return Result(tuple(argv), 0, "", "")
            return original(argv, stdin, timeout)

        runner.run = run  # type: ignore[method-assign]
        return runner

    def handle(self) -> Handle:
        return Handle(self.config, clients_from(self.config, self.runners))


def test_up_starts_head_then_worker_with_each_node_plan(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    result = Lifecycle(cluster.handle()).up()
    assert result.started == ["strix1", "strix2"] and result.nodes_alive == ["strix1", "strix2"]
    (head_node, head), (worker_node, worker) = cluster.scripts
    assert (head_node, worker_node) == ("strix1", "strix2")
    # each node keeps the script that started its Ray, for the supervisor (0600)
    assert [name for name, _ in cluster.kept] == ["strix1", "strix2"]
    for (_, kept), started in zip(cluster.kept, (head, worker), strict=True):
        assert kept.startswith("set -e\numask 077\nmkdir -p ")
        assert "/ray-start-strix.sh <<'HALO_RAY_" in kept and started in kept
    assert head.splitlines()[-1] == (
        "exec /opt/halo/bin/ray start --node-ip-address=192.168.100.1 --disable-usage-stats "
        "--head --port=6379 --include-dashboard=false --num-gpus=1"
    )
    assert worker.splitlines()[-1] == (
        "exec /opt/halo/bin/ray start --node-ip-address=192.168.100.2 "
        "--disable-usage-stats --address=192.168.100.1:6379 --num-gpus=1"
    )
    assert (
        "export VLLM_HOST_IP=192.168.100.1" in head
        and "export VLLM_HOST_IP=192.168.100.2" in worker
    )
    assert "export NCCL_IB_HCA==rocep194s0:1" in head and "export NCCL_IB_GID_INDEX=1" in worker
    assert "export RAY_memory_monitor_refresh_ms=0" in head  # unified memory APU
    assert "export HF_HOME=/models" in worker and "HF_HOME" not in head
    state = read_state(cluster.config)
    assert state and state.nodes["strix2"].plan.address == "192.168.100.2"
    # Ray's token authentication: a 0600 token next to the state, on the nodes only
    # through the scripts (a 0600 file there), never in argv or the state file
    token_file = tmp_path / ".halo" / "strix.ray-token"
    token = token_file.read_text().strip()
    assert len(token) == 64 and stat.S_IMODE(token_file.stat().st_mode) == 0o600
    for script in [head, worker, *cluster.ray_clients]:
        assert "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=" in script
        assert private_dir('"$_halo_state"') in script  # 0700, whatever the umask
        assert f'printf %s {token} > "$_halo_state/ray-' in script  # made 0600 first
        assert token not in script.splitlines()[-1]  # the exec line: argv
    assert token not in json.dumps(state.to_dict())


def test_a_node_registered_without_its_gpu_is_named(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    strix2 = replace(cluster.config.nodes[1], gpus=2)  # configured: two GPUs
    cluster.config = replace(cluster.config, nodes=(cluster.config.nodes[0], strix2))
    cluster.alive = ["192.168.100.1", "192.168.100.2"]
    cluster.gpus = {"192.168.100.1": 1, "192.168.100.2": 1}
    lifecycle = Lifecycle(cluster.handle())
    lifecycle.gpus_found = {"strix1": 1, "strix2": 1}
    with pytest.raises(LifecycleError, match=r"strix2 \(registered with 1 GPU, needs 2\)"):
        lifecycle.wait_registered(timeout_s=0.3)
    cluster.gpus["192.168.100.2"] = 2
    assert lifecycle.wait_registered(timeout_s=0.3) == ["strix1", "strix2"]


def test_up_on_a_running_cluster_changes_nothing(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    Lifecycle(cluster.handle()).up()
    cluster.scripts.clear()
    again = Lifecycle(cluster.handle()).up()
    assert again.started == [] and again.already == ["strix1", "strix2"] and cluster.scripts == []


def test_partial_cluster_starts_only_what_is_missing(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.alive = ["192.168.100.1"]
    result = Lifecycle(cluster.handle()).up()
    assert result.started == ["strix2"] and result.already == ["strix1"]


def test_failed_worker_rolls_back_the_head(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, fail_start_on="strix2")
    with pytest.raises(
        LifecycleError,
        match="ray start on strix2 failed: ConnectionError: GCS unreachable; stopped again: strix1",
    ):
        Lifecycle(cluster.handle()).up()
    assert cluster.alive == []
    assert [name for name, script in cluster.scripts] == ["strix1", "strix2", "strix1"]


def test_blocking_findings_stop_up_unless_forced(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    bad = replace(strix_pair()[1], memlock_bytes=8 << 20)
    cluster.runners["strix2"].rules[0] = (
        ("/opt/halo/bin/halo", "inventory"),
        Result((), 0, json.dumps(bad.to_dict()), ""),
    )
    with pytest.raises(LifecycleError, match=r"strix2: limits\.memlock"):
        Lifecycle(cluster.handle()).up()
    assert cluster.scripts == []
    assert Lifecycle(cluster.handle()).up(force=True).started == ["strix1", "strix2"]


def test_status_and_down_with_an_unreachable_node(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    lifecycle = Lifecycle(cluster.handle())
    lifecycle.up()
    status = cluster_status(cluster.handle())
    assert [(n["name"], n["ray"], n["transport"]) for n in status["nodes"]] == [
        ("strix1", True, "roce"),
        ("strix2", True, "roce"),
    ]
    cluster.runners["strix2"].run = lambda argv, stdin=None, timeout=30.0, on_line=None: Result(  # type: ignore[method-assign]
        tuple(argv), 255, "", "ssh: connect to host 192.168.1.52 port 22: No route to host"
    )
    outcome = lifecycle.down()
    assert outcome == {
        "strix2": "failed: ssh: connect to host 192.168.1.52 port 22: No route to host",
        "strix1": "stopped",
    }


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"HALO_T_[A-Z0-9_]{0,12}", fullmatch=True),
        st.text(
            st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
        ),
        max_size=4,
    ),
    st.lists(
        st.text(
            st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_node_script_never_injects(env: dict[str, str], argv: list[str]) -> None:
    """Whatever names, values and arguments contain, bash sees them as data."""
    script = node_script(env, ["printf", "%s\\0", *argv])
    script = script.replace("exec printf", "printf") + "env -0\n"
    out = subprocess.run(
        ["bash", "-s"], input=script.encode(), capture_output=True, check=True, timeout=10
    ).stdout
    parts = out.split(b"\0")
    assert [p.decode() for p in parts[: len(argv)]] == argv
    seen = dict(p.decode().split("=", 1) for p in parts[len(argv) :] if b"=" in p)
    for name, value in env.items():
        assert seen[name] == value


def test_a_state_file_halo_cannot_read_stops_up_before_ray_and_not_down(tmp_path: Path) -> None:
    from halo_cluster.cluster.state import state_path
    from halo_cluster.errors import StateError

    cluster = Cluster(tmp_path)
    path = state_path(cluster.config)
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": "halo.state/0"}')
    with pytest.raises(StateError, match=r"its schema is 'halo\.state/0'"):
        Lifecycle(cluster.handle()).up()
    assert cluster.scripts == [] and cluster.alive == []  # no ray start anywhere
    cluster.alive = ["192.168.100.1", "192.168.100.2"]
    said: list[str] = []
    handle = cluster.handle()
    handle = type(handle)(handle.config, handle.clients, said.append)
    assert Lifecycle(handle).down() == {"strix2": "stopped", "strix1": "stopped"}
    assert any("left the state file as it is" in line for line in said)
    assert path.read_text() == '{"schema": "halo.state/0"}'
