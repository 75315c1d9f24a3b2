"""halo serve --engine llama.cpp through scripted nodes: what runs where (rpc-server bound to
the worker's fabric address and held on TCP, llama-server with the workers and the key only
in its environment), the verdict from the recorded lab logs and the counters, the state it
leaves, and the refusals that start nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from halo_cluster.cluster.handle import Cluster
from halo_cluster.config import ServeConfig
from halo_cluster.config.section import Section
from halo_cluster.errors import UsageError
from halo_cluster.runner.result import Result
from halo_cluster.serving.bringup import Serving
from tests.cluster.test_serve import NODES, Node, cluster, serve
from tests.conftest import OUTPUTS

LOGS = OUTPUTS / "llama.cpp"
GGUF = "/m/model.gguf"
SERVE = ServeConfig(
    engine="llama.cpp",
    api_key_env="HALO_TEST_KEY",
    sections={"llama_cpp": Section(Path("halo.toml"), "llama_cpp", {"build": "/l"})},
)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALO_TEST_KEY", "k-secret")


class LlamaNode(Node):
    """A scripted node that also answers 'halo gguf-layers' (a model of 4 blocks)."""

    def run(self, argv, stdin=None, timeout=30.0, on_line=None):  # type: ignore[no-untyped-def]
        if "gguf-layers" in (stdin or "") or "gguf-layers" in argv:
            self.scripts.append(stdin or "")
            return Result(tuple(argv), 0, "4\n", "")
        return super().run(argv, stdin, timeout, on_line)


def two_nodes(per_token: tuple[int, int]) -> dict[str, Node]:
    fabric, mgmt = per_token
    return {
        "node1": LlamaNode((LOGS / "llama-server-rpc.log").read_text(), (fabric, mgmt, None)),
        "node2": LlamaNode((LOGS / "rpc-server-node2.log").read_text(), (fabric, mgmt, None)),
    }


def test_layers_over_rpc_proven_by_the_logs_and_the_counters(tmp_path: Path) -> None:
    """On a cluster where 'halo up' never ran (no state, no Ray): the plans come from the
    nodes' facts."""
    nodes = two_nodes((12_000, 30))
    srv = cluster(tmp_path, nodes, SERVE, up=False)
    result = serve(srv, model=GGUF, wait_s=5)
    assert (result.proven, result.problems, result.stopped) == ("socket", [], False)
    assert result.ranks == [{"rank": 0, "node": "node2", "address": "198.19.1.12:50052"}]
    assert (result.engine["transport"], result.engine["offloaded_layers"]) == ("tcp", 2)
    worker = next(s for s in nodes["node2"].scripts if "setsid" in s)
    assert "export GGML_RPC_NO_RDMA=1" in worker
    assert "setsid /l/bin/ggml-rpc-server -H 198.19.1.12 -p 50052 -c >" in worker
    assert "export LLAMA_CACHE=/var/lib/halo/models/.rpc-cache" in worker
    head = next(s for s in nodes["node1"].scripts if "setsid" in s)
    assert "--rpc 198.19.1.12:50052 --n-gpu-layers 2 --tensor-split 1" in head
    assert "export LLAMA_API_KEY=k-secret" in head
    assert "k-secret" not in head.split("setsid", 1)[1]  # the key is never in argv
    state = json.loads((tmp_path / ".halo" / "lab.state.json").read_text())
    assert (state["serve"]["engine"], state["serve"]["nodes"]) == ("llama.cpp", ["node1", "node2"])
    assert "k-secret" not in json.dumps(state) + json.dumps(result.to_dict())
    assert srv.stop()
    state = json.loads((tmp_path / ".halo" / "lab.state.json").read_text())
    assert "serve" not in state  # stopped: status shows no server


def test_traffic_on_management_stops_the_server(tmp_path: Path) -> None:
    nodes = two_nodes((100, 24_000))
    srv = cluster(tmp_path, nodes, SERVE)
    result = serve(srv, model=GGUF, wait_s=5)
    assert result.stopped and result.proven is None
    assert not nodes["node1"].running and not nodes["node2"].running
    assert any("fabric interface carried only" in p for p in result.problems)


@pytest.mark.parametrize(
    ("model", "members", "message"),
    [
        ("model.gguf", ("node1", "node2"), r"model\.gguf: give the GGUF file's absolute path"),
        (GGUF, ("node1", "node2"), r"--nodes 3: the cluster has 2 node\(s\) \(node1, node2\)"),
    ],
)
def test_refusals_start_nothing(
    tmp_path: Path, model: str, members: tuple[str, ...], message: str
) -> None:
    nodes = {name: node for name, node in two_nodes((1, 1)).items() if name in members}
    srv = cluster(tmp_path, nodes, SERVE)
    with pytest.raises(UsageError, match=message):
        serve(srv, model=model, wait_s=5, nodes=None if model != GGUF else 3)
    assert not any("setsid" in s for n in nodes.values() for s in n.scripts)


def test_one_node_runs_llama_server_alone(tmp_path: Path) -> None:
    """--nodes 1: the head's llama-server holds every layer, no rpc-server anywhere; one
    node has no fabric to prove."""
    nodes = two_nodes((0, 0))
    srv = cluster(tmp_path, nodes, SERVE)
    result = serve(srv, model=GGUF, wait_s=5, nodes=1)
    assert (result.proven, result.problems, result.stopped) == ("one node", [], False)
    assert result.layout == "llama.cpp on node1"
    head = next(s for s in nodes["node1"].scripts if "setsid" in s)
    assert "--n-gpu-layers 0" in head and "--rpc" not in head
    assert not any("setsid" in s for s in nodes["node2"].scripts)


def test_a_worker_without_its_own_fabric_address_is_refused(tmp_path: Path) -> None:
    import dataclasses

    nodes = two_nodes((1, 1))
    srv = cluster(tmp_path, nodes, SERVE)
    bare = dataclasses.replace(NODES[1], fabric_address=None)
    config = dataclasses.replace(srv.config, nodes=(NODES[0], bare))
    clients = {
        n: dataclasses.replace(c, node=config.node(n)) for n, c in srv.cluster.clients.items()
    }
    srv = Serving(Cluster(config, clients))
    with pytest.raises(UsageError, match="node2: rpc-server has no authentication"):
        serve(srv, model=GGUF, wait_s=5)
    assert not any("setsid" in s for n in nodes.values() for s in n.scripts)


def test_a_worker_with_another_build_is_refused(tmp_path: Path) -> None:
    nodes = two_nodes((1, 1))

    def preflight(node: Node, identity: str):  # type: ignore[no-untyped-def]
        original = node.run

        def run(argv, stdin=None, timeout=30.0, on_line=None):  # type: ignore[no-untyped-def]
            if "command -v" in (stdin or ""):
                node.scripts.append(stdin or "")
                return Result(tuple(argv), 0, f"build {identity * 64}\nrdma no\n", "")
            return original(argv, stdin, timeout, on_line)

        node.run = run  # type: ignore[method-assign]

    preflight(nodes["node1"], "a")
    preflight(nodes["node2"], "b")
    srv = cluster(tmp_path, nodes, SERVE)
    with pytest.raises(UsageError, match=r"node2: its llama\.cpp build differs from node1's"):
        serve(srv, model=GGUF, wait_s=5)
    assert not any("setsid" in s for n in nodes.values() for s in n.scripts)


def test_vllm_options_are_refused_with_llama_cpp(tmp_path: Path) -> None:
    srv = cluster(tmp_path, two_nodes((1, 1)), SERVE)
    with pytest.raises(UsageError, match=r"--tp, --pp and --executor are vLLM.s"):
        serve(srv, model=GGUF, tp=2, wait_s=5)


GIB = 1024**3


def _memory(available_gib: float, model_gib: float | None = None) -> str:
    lines = [
        f"mem_total_kib={64 * 1024 * 1024}",
        f"mem_available_kib={int(available_gib * GIB) // 1024}",
    ]
    if model_gib is not None:
        lines.append(f"model_bytes={int(model_gib * GIB)}")
    return "\n".join(lines) + "\n"


def test_a_node_short_of_memory_is_refused_before_anything_starts(tmp_path: Path) -> None:
    nodes = two_nodes((12_000, 30))
    # a 6 GiB model of 4 blocks: the head keeps 3 of 5 layers (3.6 GiB), node2 2 (2.4 GiB)
    nodes["node1"].memory = _memory(20.0, model_gib=6.0)
    nodes["node2"].memory = _memory(1.5)
    srv = cluster(tmp_path, nodes, SERVE, up=False)
    with pytest.raises(UsageError) as err:
        serve(srv, model=GGUF, wait_s=5)
    assert str(err.value) == (
        "not enough memory: node2 has 1.50 GiB available, the model needs 2.40 GiB there "
        "(2.40 GiB of weights + 0.00 GiB of KV cache) (KV cache not counted: the model's header "
        "is read on node1): free memory there, lower max_model_len, spread the model over "
        "more nodes ('halo plan'), or --force"
    )
    assert not any("setsid" in s for node in nodes.values() for s in node.scripts)
    # the size is read where the file is, and only there
    assert any("du -sbL -- /m/model.gguf" in s for s in nodes["node1"].scripts)
    assert not any("du -sbL" in s for s in nodes["node2"].scripts)


def test_force_serves_a_node_short_of_memory_and_says_so(tmp_path: Path) -> None:
    nodes = two_nodes((12_000, 30))
    nodes["node1"].memory = _memory(20.0, model_gib=6.0)
    nodes["node2"].memory = _memory(1.5)
    said: list[str] = []
    plain = cluster(tmp_path, nodes, SERVE, up=False)
    srv = Serving(replace(plain.cluster, progress=said.append))
    result = serve(srv, model=GGUF, wait_s=5, force=True)
    assert result.proven == "socket"
    assert any(
        s.startswith("--force: serving anyway: not enough memory: node2 has 1.50") for s in said
    )
