"""The cluster state file: typed, versioned (halo.state/2), read once and written whole;
a file of another schema, or garbage, is one line that says what to do."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from halo_cluster.cluster.state import (
    ClusterState,
    NodeState,
    ServedState,
    named_deployment,
    read_state,
    state_path,
    write_state,
)
from halo_cluster.config import Config, NodeConfig
from halo_cluster.errors import StateError, UsageError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.transport import plan_transport
from tests.conftest import ROOTS, halo

NODES = (
    NodeConfig("a", "root@198.18.250.1", "192.168.100.1"),
    NodeConfig("b", "root@198.18.250.2", "192.168.100.2"),
)


def config(tmp_path: Path) -> Config:
    path = tmp_path / "halo.toml"
    path.write_text(
        '[cluster]\nname = "s"\n'
        + "".join(
            f'\n[[node]]\nname = "{n.name}"\nssh = "{n.ssh}"\nfabric_address = "{n.fabric_address}"\n'
            for n in NODES
        )
    )
    return Config(path, "s", "auto", NODES)


def test_a_state_reads_back_as_it_was_written(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    roce = plan_transport(collect_inventory(str(ROOTS / "strix-e810")), "roce", "192.168.100.2")
    tcp = plan_transport(collect_inventory(str(ROOTS / "no-rdma")), "ethernet")
    served = ServedState(
        nodes=["a", "b"],
        engine="llama.cpp",
        model="/m/model.gguf",
        executor="llama.cpp-rpc",
        ranks=[{"rank": 0, "node": "b", "address": "192.168.100.2:50052"}],
        proven="socket",
        bytes_per_token={"a": {"fabric": 24_000.0, "mgmt": 12.0}},
        started_at=2.0,
    )
    state = ClusterState(
        "s", "a", "192.168.100.1", {"a": NodeState(roce, 1), "b": NodeState(tcp, 2)}, 1.0, served
    )
    write_state(cfg, state)
    assert read_state(cfg) == state
    assert json.loads(state_path(cfg).read_text())["schema"] == "halo.state/2"


def test_no_state_is_none(tmp_path: Path) -> None:
    assert read_state(config(tmp_path)) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"schema": "halo.state/0", "cluster": "s"}', "its schema is 'halo.state/0'"),
        ('{"cluster": "s", "nodes": {}}', "its schema is None"),
        ("{not json", "Expecting property name enclosed in double quotes"),
        ("[1, 2]", "not a JSON object"),
        ('{"schema": "halo.state/2", "head": "a"}', "missing or wrong field 'cluster'"),
        (
            '{"schema": "halo.state/2", "cluster": "s", "head": "a", "nodes": {"a": {"plan": 3}}}',
            "missing or wrong field",
        ),
    ],
)
def test_a_foreign_or_broken_state_is_one_line(tmp_path: Path, text: str, reason: str) -> None:
    cfg = config(tmp_path)
    state_path(cfg).parent.mkdir()
    state_path(cfg).write_text(text)
    with pytest.raises(StateError) as err:
        read_state(cfg)
    message = str(err.value)
    assert message.startswith(f"{state_path(cfg)}: not a halo.state/2 state file halo can read")
    assert reason in message and "\n" not in message
    assert message.endswith("remove it, then run 'halo up' (or 'halo serve') again")


def test_status_on_a_foreign_state_is_one_line_exit_2(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    state_path(cfg).parent.mkdir()
    state_path(cfg).write_text('{"schema": "other/9"}')
    done = halo("status", "--config", str(cfg.path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "its schema is 'other/9'" in done.stderr


@pytest.mark.parametrize(
    ("serve", "reason"),
    [
        ({"nodes": None}, "serve.nodes is None"),
        ({"nodes": ["a"], "engine": ["vllm"]}, "serve.engine is ['vllm']"),
        ({"nodes": ["a"], "host": "-x"}, "serve.host is '-x'"),
        ({"nodes": ["a"], "port": "8000"}, "serve.port is '8000'"),
        ({"nodes": [1]}, "serve.nodes is [1]"),
    ],
)
def test_a_served_record_of_the_wrong_kind_is_one_line(
    tmp_path: Path, serve: dict[str, object], reason: str
) -> None:
    cfg = config(tmp_path)
    state_path(cfg).parent.mkdir()
    data = {"schema": "halo.state/2", "cluster": "s", "head": "a", "nodes": {}, "serve": serve}
    state_path(cfg).write_text(json.dumps(data))
    with pytest.raises(StateError, match=re.escape(reason)):
        read_state(cfg)


def test_a_plan_halo_cannot_read_or_a_deep_file_is_one_line(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    state_path(cfg).parent.mkdir()
    plan = {"transport": "roce", "hca": "mlx5_0", "gid_index": 1, "env": {}, "reasons": {}}
    data = {"schema": "halo.state/2", "cluster": "s", "head": "a", "nodes": {"a": {"plan": plan}}}
    for text in (json.dumps(data), "[" * 100_000 + "]" * 100_000):
        state_path(cfg).write_text(text)
        with pytest.raises(StateError) as err:
            read_state(cfg)
        assert "\n" not in str(err.value) and str(state_path(cfg)) in str(err.value)


def test_deployments_round_trip_and_an_old_state_is_carried_over(tmp_path: Path) -> None:
    from halo_cluster.cluster.deployments import Deployment, Replica

    cfg = config(tmp_path)
    small = Deployment(
        "small", "tiny", "llama.cpp", "rpc1",
        (Replica(0, ("a",), 8000), Replica(1, ("b",), 8000)), "/m/tiny.gguf", 5.0, ("fast",),
    )  # fmt: skip
    state = ClusterState("s", "a", "192.168.100.1", deployments=[small])
    write_state(cfg, state)
    assert read_state(cfg) == state
    assert read_state(cfg).deployment("small") == small  # type: ignore[union-attr]
    assert named_deployment(state, "small") == small
    for held, known in ((state, "small"), (None, "none")):
        with pytest.raises(
            UsageError, match=rf"no deployment named 'big' \(deployments: {known}\)"
        ):
            named_deployment(held, "big")
    old = {"schema": "halo.state/1", "cluster": "s", "head": "a", "nodes": {}}
    state_path(cfg).write_text(json.dumps(old))
    carried = read_state(cfg)
    assert carried is not None and carried.deployments == [] and carried.cluster == "s"


@pytest.mark.parametrize(
    ("deployments", "reason"),
    [
        ({"name": "x"}, "deployments is {'name': 'x'}"),
        ([{"name": "a.b", "model": "m", "engine": "vllm", "layout": "tp1"}], "deployment.name"),
        ([{"name": "a", "model": "m", "engine": "vllm", "layout": "tp1"}], "deployment.replicas"),
        (
            [{"name": "a", "model": "m", "engine": "vllm", "layout": "tp1",
              "replicas": [{"index": 0, "nodes": ["a"], "port": 70000}]}],
            "replica.port is 70000",
        ),
        (
            [{"name": "a", "model": "m", "engine": "vllm", "layout": "tp1",
              "replicas": [{"index": 0, "nodes": ["a"], "port": 1}]}] * 2,
            "deployment 'a' appears twice",
        ),
    ],
)  # fmt: skip
def test_a_deployment_of_the_wrong_kind_is_one_line(
    tmp_path: Path, deployments: object, reason: str
) -> None:
    cfg = config(tmp_path)
    state_path(cfg).parent.mkdir()
    data = {"schema": "halo.state/2", "cluster": "s", "head": "a", "deployments": deployments}
    state_path(cfg).write_text(json.dumps(data))
    with pytest.raises(StateError, match=re.escape(reason)):
        read_state(cfg)


def test_top_watches_the_nodes_of_one_deployment_by_its_name(tmp_path: Path) -> None:
    """halo top --name: the exporters of the nodes the deployment's replicas run on."""
    from halo_cluster.cli.monitor import top_targets
    from halo_cluster.cluster.deployments import Deployment, Replica

    cfg = config(tmp_path)
    small = Deployment("small", "tiny", "llama.cpp", "rpc1", (Replica(0, ("b",), 8000),))
    write_state(cfg, ClusterState("s", "a", "192.168.100.1", deployments=[small]))
    every = top_targets(str(cfg.path), None, 9877)
    assert every == ["198.18.250.1:9877", "198.18.250.2:9877"]
    assert top_targets(str(cfg.path), None, 9877, "small") == ["198.18.250.2:9877"]
    with pytest.raises(UsageError, match=r"no deployment named 'big' \(deployments: small\)"):
        top_targets(str(cfg.path), None, 9877, "big")
    with pytest.raises(UsageError, match="--name picks nodes from the cluster config"):
        top_targets(None, "h:1", 9877, "small")
