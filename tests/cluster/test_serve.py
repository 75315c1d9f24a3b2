"""halo serve through scripted nodes: vLLM's command lines (ray and mp executors), the ranks'
placement, preflight errors naming the node, the two witnesses (vLLM's recorded Gloo lines
and NCCL's recorded logs; counters per token) and the refusal when either shows another
path than the plan, secrets only in the script environment, and stop on every node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.client.node import clients_from
from halo_cluster.cluster.handle import Cluster
from halo_cluster.cluster.state import NodeState, new_state, write_state
from halo_cluster.config import Config, NodeConfig, ServeConfig
from halo_cluster.config.section import Section
from halo_cluster.engines.request import serve_request
from halo_cluster.engines.vllm_argv import (
    Placement,
    VllmOptions,
    placement,
    preflight_script,
    serve_argv,
)
from halo_cluster.errors import LifecycleError, UsageError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.facts.model import Inventory
from halo_cluster.runner.result import Result
from halo_cluster.serving.bringup import Serving
from halo_cluster.serving.result import ServeResult
from halo_cluster.transport import Rail, TransportPlan, plan_transport
from tests.conftest import OUTPUTS, ROOTS, ping_answer

VLLM = OUTPUTS / "vllm"


def test_vllm_command_line_for_an_apu() -> None:
    serve = ServeConfig(
        model="m", host="192.168.1.51", port=8000, extra_args=("--enable-prefix-caching",)
    )
    model = "meta-llama/Llama-3.3-70B-Instruct"
    assert serve_argv(serve, VllmOptions(), model, 2, unified_memory=True) == [
        "vllm",
        "serve",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--tensor-parallel-size",
        "2",
        "--pipeline-parallel-size",
        "1",
        "--distributed-executor-backend",
        "ray",
        "--host",
        "192.168.1.51",
        "--port",
        "8000",
        "--gpu-memory-utilization",
        "0.9",
        "--enforce-eager",
        "--enable-prefix-caching",
    ]
    plain = serve_argv(ServeConfig(), VllmOptions(), "m", 2, unified_memory=False)
    assert "--enforce-eager" not in plain


def test_mp_executor_command_lines_head_and_headless_worker() -> None:
    serve = ServeConfig(max_model_len=1024, max_num_seqs=8)
    options = VllmOptions(command="/e/bin/vllm", executor="mp")
    head = serve_argv(serve, options, "/m", 2, False, (0, 2, "198.19.1.11", 29517))
    worker = serve_argv(serve, options, "/m", 2, False, (1, 2, "198.19.1.11", 29517))
    common = [
        "/e/bin/vllm",
        "serve",
        "/m",
        "--tensor-parallel-size",
        "2",
        "--pipeline-parallel-size",
        "1",
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        "2",
    ]
    tail = ["--max-model-len", "1024", "--max-num-seqs", "8"]
    assert head == [
        *common,
        "--node-rank",
        "0",
        "--master-addr",
        "198.19.1.11",
        "--master-port",
        "29517",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        *tail,
    ]
    assert worker == [
        *common,
        "--node-rank",
        "1",
        "--master-addr",
        "198.19.1.11",
        "--master-port",
        "29517",
        "--headless",
        *tail,
    ]


NODES = (
    NodeConfig("node1", "node1", "198.19.1.11", halo="/h/halo", mgmt_address="198.18.1.11", gpus=0),
    NodeConfig("node2", "node2", "198.19.1.12", halo="/h/halo", mgmt_address="198.18.1.12", gpus=0),
    NodeConfig("node3", "node3", "198.19.1.13", halo="/h/halo", mgmt_address="198.18.1.13", gpus=0),
)


def test_placement_fills_nodes_in_order_and_names_the_capacity() -> None:
    capacity = {"node1": 1, "node2": 1, "node3": 1}
    assert placement(NODES, capacity, 2, "--tp 2") == [
        Placement(NODES[0], 0, 1),
        Placement(NODES[1], 1, 1),
    ]
    assert placement(NODES, {"node1": 2, "node2": 2}, 3, "--tp 3") == [
        Placement(NODES[0], 0, 2),
        Placement(NODES[1], 1, 1),
    ]
    with pytest.raises(UsageError) as err:
        placement(NODES[:2], {"node1": 1, "node2": 1}, 3, "--tp 3")
    assert str(err.value) == (
        "--tp 3: the cluster offers 2 engine rank(s) (node1 1, node2 1); lower it or add nodes"
    )


def test_preflight_script_quotes_every_value() -> None:
    script = preflight_script("/e/bin/vllm --x", "/models/a b;rm -rf /", ("127.0.0.1", 8000))
    assert script == (
        "command -v /e/bin/vllm >/dev/null 2>&1 || exit 10\n"
        "test -f '/models/a b;rm -rf /'/config.json || exit 11\n"
        # host and port reach the inner shell as arguments, never as code
        "if timeout 2 bash -c 'exec 3<>\"/dev/tcp/$1/$2\"' _ 127.0.0.1 8000 2>/dev/null; "
        "then exit 12; fi\n"
        "exit 0\n"
    )


def counters(fabric: int, mgmt: int, rdma: int | None = None) -> str:
    paths: dict[str, Any] = {
        "fabric": {"name": "enp194s0np0", "rx_bytes": fabric, "tx_bytes": fabric},
        "mgmt": {"name": "eno1", "rx_bytes": mgmt, "tx_bytes": mgmt},
    }
    if rdma is not None:
        paths["rdma"] = {"name": "rocep194s0/1", "rx_bytes": rdma, "tx_bytes": rdma}
    return json.dumps({"paths": paths, "warnings": []})


class Node:
    """A scripted node: records scripts; a server 'runs' after its start script; its log,
    its counters (advancing by ``per_token`` bytes per token and direction on each probe)."""

    def __init__(self, log: str, per_token: tuple[int, int, int | None], **fail: int) -> None:
        self.scripts: list[str] = []
        self.running = False
        self.log = log
        self.per_token = per_token
        self.tokens = 0
        self.fail = fail  # preflight exit code, e.g. {"preflight": 11}
        self.memory = ""  # the answer to the memory check ('' as a node that tells nothing)
        self.answer = ANSWER  # its greedy answer to every prompt (serve-tokens)
        self.limits = ""  # its answer to scripts.limits_script ('' as a node that tells nothing)

    def run(self, argv, stdin=None, timeout=30.0, on_line=None):  # type: ignore[no-untyped-def]
        script = stdin or ""
        args = tuple(argv)
        self.scripts.append(script or " ".join(args))  # a command run without a script too
        if "inventory" in args:  # the facts the plans are made from where Ray plays no part
            name = next(n for n, node in CLUSTER.items() if node is self)
            inventory = lab_inventory(next(n for n in NODES if n.name == name))
            return Result(args, 0, json.dumps(inventory.to_dict()), "")
        if "(ping -c 1" in script:  # the host's pings to its peers, and ethtool
            return ping_answer(ethtool=("enp194s0np0", "driver: veth\n"))(args, script)
        if "MemAvailable" in script and "alive=" not in script:  # the memory check
            return Result(args, 0, self.memory, "")
        if "== limits" in script:  # the engine's own limits, asked once it serves
            return Result(args, 0, self.limits if self.running else "alive=0\n", "")
        if "command -v" in script:
            return Result(args, self.fail.get("preflight", 0), "", "")
        if "setsid" in script:
            self.running = True
        elif "serve-health" in script:
            return Result(args, 0 if self.running else 1, '{"models": ["m"]}', "")
        elif "serve-probe" in script:
            tokens = int(script.split("--tokens ", 1)[1].split()[0])
            for node in CLUSTER.values():
                node.tokens += tokens
            body = {"model": "m", "completion_tokens": tokens, "seconds": 1.5}
            return Result(args, 0, json.dumps(body), "")
        elif "serve-tokens" in script:
            asked = script.count("--prompt=")
            body = {"model": "m", "answers": [self.answer] * asked}
            return Result(args, 0, json.dumps(body), "")
        elif " counters" in script or "counters" in args:
            fabric, mgmt, rdma = (
                v * self.tokens if v is not None else None for v in self.per_token
            )
            return Result(args, 0, counters(fabric or 0, mgmt or 0, rdma), "")
        elif script.startswith("cat "):
            return Result(args, 0, self.log, "")
        elif script.startswith("echo "):
            return Result(args, 0, "/root/.local/state/halo/serve-lab.log\n", "")
        elif "supervise-" in script:  # no supervisor ran on these fakes
            return Result(args, 3, "", "")
        elif "kill -TERM" in script:
            was, self.running = self.running, False
            return Result(args, 0 if was else 3, "", "")
        elif "kill -0" in script:  # scripts.alive_script
            return Result(args, 0 if self.running else 1, "", "")
        return Result(args, 0, "", "")


CLUSTER: dict[str, Node] = {}
# a greedy answer as serve-tokens prints it (two tokens, each with its likeliest others)
ANSWER: dict[str, Any] = {
    "text": " 3705486",
    "steps": [
        {"token": " 3705", "id": None, "logprob": -7.14, "top": [[" 3705", -7.14], ["486", -7.26]]},
        {"token": "486", "id": None, "logprob": -7.2, "top": [["486", -7.2], [" 3705", -7.25]]},
    ],
}


def lab_inventory(node: NodeConfig) -> Inventory:
    """A lab node's facts: CPU only, no RDMA, the fabric interface on the node's address."""
    from dataclasses import replace

    inv = collect_inventory(str(ROOTS / "strix-e810"))
    net = tuple(
        replace(i, ipv4=(f"{node.fabric_address}/24",), mtu=9000)
        if i.name == "enp194s0np0"
        else replace(i, ipv4=(f"{node.mgmt_address}/24",))
        if i.name == "eno1"
        else i
        for i in inv.net
    )
    return replace(inv, hostname=node.name, net=net, rdma=(), gpus=())


def lab_plan(address: str) -> TransportPlan:
    return TransportPlan(
        "ethernet",
        (Rail(netdev="enp194s0np0", address=address),),
        False,
        {"GLOO_SOCKET_IFNAME": "enp194s0np0", "VLLM_HOST_IP": address},
        {},
    )


def cluster(
    tmp_path: Path,
    nodes: dict[str, Node],
    serve: ServeConfig,
    plans: dict[str, TransportPlan] | None = None,
    up: bool = True,
) -> Serving:
    CLUSTER.clear()
    CLUSTER.update(nodes)
    members = tuple(n for n in NODES if n.name in nodes)
    config = Config(tmp_path / "halo.toml", "lab", "ethernet", members, serve=serve)
    plans = plans or {n.name: lab_plan(n.fabric_address or "") for n in members}
    if up:
        state = new_state(config)  # as 'halo up' leaves it: Ray runs with these plans
        state.nodes = {name: NodeState(plan, 1) for name, plan in plans.items()}
        state.ray_started_at = 1.0
        write_state(config, state)
    return Serving(Cluster(config, clients_from(config, nodes)))  # type: ignore[arg-type]


def vllm_table(**keys: Any) -> dict[str, Section]:
    """A [serve.vllm] table as halo.toml would give it."""
    return {"vllm": Section(Path("halo.toml"), "vllm", keys)}


def serve(srv: Serving, **asked: Any) -> ServeResult:
    """``halo serve`` with these flags (``tp``, ``executor``, ``engine``, ...): the bring-up
    alone (the supervisor it leaves is tested in the lab: tests/cluster/test_supervise_lab.py)."""
    asked.setdefault("supervise", False)
    return srv.start(serve_request(srv.config, **asked))


def test_gloo_across_two_nodes_is_proven_by_both_witnesses(tmp_path: Path) -> None:
    log = (VLLM / "ray-tp2-head.log").read_text()
    nodes = {"node1": Node(log, (24_000, 40, None)), "node2": Node("", (24_000, 20, None))}
    srv = cluster(
        tmp_path, nodes, ServeConfig(model="/m", sections=vllm_table(command="/e/bin/vllm"))
    )
    result = serve(srv, tp=2, wait_s=5)
    assert (result.proven, result.problems, result.stopped) == ("socket", [], False)
    assert result.ranks == [
        {"rank": 0, "node": "node1", "address": "198.19.1.11"},
        {"rank": 1, "node": "node2", "address": "198.19.1.12"},
    ]
    assert result.engine["backend"] == "gloo" and result.engine["init_address"] == "198.19.1.11"
    assert result.traffic["tokens"] == 64
    assert result.traffic["nodes"]["node2"] == {
        "fabric": {
            "name": "enp194s0np0",
            "rx_bytes": 64 * 24_000,
            "tx_bytes": 64 * 24_000,
            "bytes_per_token": 48_000.0,
        },
        "mgmt": {"name": "eno1", "rx_bytes": 64 * 20, "tx_bytes": 64 * 20, "bytes_per_token": 40.0},
    }
    start = next(s for s in nodes["node1"].scripts if "setsid" in s)
    assert "--distributed-executor-backend ray" in start and "export RAY_DEDUP_LOGS=0" in start
    assert not any("setsid" in s for s in nodes["node2"].scripts)  # ray: one driver, on the head
    warm = [s for s in nodes["node1"].scripts if "serve-probe" in s]
    assert ["--tokens 4" in warm[0], "--tokens 64" in warm[1]] == [True, True]
    state = json.loads((tmp_path / ".halo" / "lab.state.json").read_text())
    assert state["serve"]["ranks"] == result.ranks and state["serve"]["proven"] == "socket"
    assert state["serve"]["nodes"] == ["node1", "node2"]


def test_traffic_on_the_management_network_is_refused(tmp_path: Path) -> None:
    log = (VLLM / "ray-tp2-head.log").read_text()
    nodes = {"node1": Node(log, (100, 24_000, None)), "node2": Node("", (100, 24_000, None))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m"))
    result = serve(srv, tp=2, wait_s=5)
    assert result.stopped and result.proven is None and not nodes["node1"].running
    assert result.problems == [
        "node1: the fabric interface carried only 200 B/token: the tensor-parallel traffic "
        "went elsewhere",
        "node2: the fabric interface carried only 200 B/token: the tensor-parallel traffic "
        "went elsewhere",
    ]


def test_mp_executor_starts_every_node_with_its_own_plan(tmp_path: Path) -> None:
    logs = [(VLLM / f"mp-tp2-node{i}.log").read_text() for i in (1, 2)]
    nodes = {"node1": Node(logs[0], (24_000, 40, None)), "node2": Node(logs[1], (24_000, 9, None))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m", sections=vllm_table(executor="mp")))
    result = serve(srv, tp=2, wait_s=5)
    assert (result.proven, result.executor) == ("socket", "mp")
    assert [r["node"] for r in result.ranks] == ["node1", "node2"]
    for name, rank in (("node1", "0"), ("node2", "1")):
        start = next(s for s in nodes[name].scripts if "setsid" in s)
        assert f"--node-rank {rank}" in start and "--master-addr 198.19.1.11" in start
        assert f"export VLLM_HOST_IP=198.19.1.1{int(rank) + 1}" in start
    assert "--headless" in next(s for s in nodes["node2"].scripts if "setsid" in s)
    assert srv.stop() and not nodes["node1"].running and not nodes["node2"].running


def test_one_node_holding_the_whole_model_has_nothing_to_prove(tmp_path: Path) -> None:
    nodes = {"node1": Node("", (0, 0, None)), "node2": Node("", (0, 0, None))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m", sections=vllm_table(executor="mp")))
    result = serve(srv, tp=1, wait_s=5)
    assert (result.proven, result.problems, result.stopped) == ("one node", [], False)
    assert result.traffic == {"tokens": 0, "nodes": {}, "problems": [], "one_node": True}
    assert nodes["node1"].running and not any("setsid" in s for s in nodes["node2"].scripts)
    assert not any("serve-probe --tokens 64" in s for s in nodes["node1"].scripts)


def test_preflight_names_the_node_and_starts_nothing(tmp_path: Path) -> None:
    nodes = {"node1": Node("", (0, 0, None)), "node2": Node("", (0, 0, None), preflight=10)}
    srv = cluster(
        tmp_path, nodes, ServeConfig(model="/m", sections=vllm_table(command="/e/bin/vllm"))
    )
    with pytest.raises(UsageError) as err:
        serve(srv, tp=2, wait_s=5)
    assert str(err.value) == (
        "node2: the engine command /e/bin/vllm is not installed there: build the engine "
        "environment ('make engine') or set [serve.vllm] command"
    )
    assert not any("setsid" in s for n in nodes.values() for s in n.scripts)
    nodes = {"node1": Node("", (0, 0, None), preflight=12), "node2": Node("", (0, 0, None))}
    with pytest.raises(UsageError, match="node1: port 8000 is already in use there"):
        serve(cluster(tmp_path, nodes, ServeConfig(model="/m")), tp=2)


def test_a_server_that_dies_while_starting_is_named_with_its_fatal_line(tmp_path: Path) -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "halo_vllm_cpu_ray.UnsupportedVllm: halo-vllm-cpu-ray was written for vLLM 0.32.0 and "
        "refuses vLLM 0.33.0: install the engine environment halo pins ('make engine')\n"
    )

    class Dies(Node):
        def run(self, argv, stdin=None, timeout=30.0, on_line=None):  # type: ignore[no-untyped-def]
            result = super().run(argv, stdin, timeout, on_line)
            if "setsid" in (stdin or ""):
                self.running = False
            return result

    nodes = {"node1": Dies(log, (0, 0, None)), "node2": Node("", (0, 0, None))}
    with pytest.raises(LifecycleError) as err:
        serve(cluster(tmp_path, nodes, ServeConfig(model="/m")), tp=2)
    assert str(err.value).startswith(
        "the server exited while starting on node1: halo_vllm_cpu_ray.UnsupportedVllm: "
        "halo-vllm-cpu-ray was written for vLLM 0.32.0 and refuses vLLM 0.33.0"
    )


def test_a_start_that_makes_no_progress_fails_with_that_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load watchdog (issue 47, item 6): the engine runs, /health never answers, and no
    node's log grows or reads anything: the start fails after stall_s, naming it and the
    head's last line, and what it started is stopped."""
    monkeypatch.setattr("halo_cluster.serving.bringup.CHECK_EVERY_S", 0.0)

    class Hangs(Node):
        def run(self, argv, stdin=None, timeout=30.0, on_line=None):  # type: ignore[no-untyped-def]
            script = stdin or ""
            if "serve-health" in script:
                return Result(tuple(argv), 1, "", "")
            if "io_bytes" in script:  # scripts.progress_script: nothing moves
                return Result(tuple(argv), 0, "alive=1\nlog_bytes=120\nio_bytes=4096\n", "")
            if script.startswith("tail -n 1 "):
                return Result(tuple(argv), 0, "Loading weights took 0.02 seconds\n", "")
            return super().run(argv, stdin, timeout, on_line)

    nodes = {"node1": Hangs("", (0, 0, None)), "node2": Hangs("", (0, 0, None))}
    with pytest.raises(LifecycleError) as err:
        serve(cluster(tmp_path, nodes, ServeConfig(model="/m", stall_s=1.5)), tp=2, wait_s=60)
    assert str(err.value) == (
        "no progress for 1.5 s while loading: no new log line and nothing read or written on "
        "any node (node1 log 120 B, storage 4096 B); the head's "
        "log ends with: Loading weights took 0.02 seconds; stopped it (a slow disk or a huge "
        "model may need more: [serve] stall_s)"
    )
    assert not any(n.running for n in nodes.values())


def strix_plan() -> TransportPlan:
    return plan_transport(collect_inventory(str(ROOTS / "strix-e810")), "auto", "192.168.100.2")


def test_rdma_planned_but_socket_logged_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The NCCL witness, on a recorded socket-fallback log (the stand-in's kind of evidence
    is only ever used for this refusal path)."""
    monkeypatch.setenv("HALO_KEY", "k3y-secret")
    log = (OUTPUTS / "nccl" / "nccl-socket-fallback.log").read_text()
    nodes = {"node1": Node(log, (0, 0, 30_000))}
    srv = cluster(
        tmp_path,
        nodes,
        ServeConfig(model="/m", api_key_env="HALO_KEY"),
        {"node1": strix_plan()},
    )
    result = serve(srv, tp=1, wait_s=5)
    assert result.stopped and result.expected == "rdma" and result.verdict["transport"] == "socket"
    assert not nodes["node1"].running
    start = next(s for s in nodes["node1"].scripts if "setsid" in s)
    assert "export VLLM_API_KEY=k3y-secret" in start and "export NCCL_DEBUG=INFO" in start
    assert "export NCCL_IB_HCA==rocep194s0:1" in start
    assert "k3y-secret" not in start.split("setsid ", 1)[1]  # never argv
    assert "k3y-secret" not in json.dumps(result.to_dict())


def test_rdma_log_and_rdma_counters_are_accepted_and_fallback_can_be_allowed(
    tmp_path: Path,
) -> None:
    good = (OUTPUTS / "nccl" / "rccl-roce-2rank.log").read_text()
    nodes = {"node1": Node(good, (10, 10, 30_000))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m"), {"node1": strix_plan()})
    result = serve(srv, tp=1, wait_s=5)
    assert not result.stopped and nodes["node1"].running and result.verdict["transport"] == "roce"
    counted = next(s for s in nodes["node1"].scripts if " counters" in s)
    assert counted == (
        "/h/halo counters --fabric 192.168.100.1 --mgmt 198.18.1.11 --rdma rocep194s0:1"
    )
    bad = (OUTPUTS / "nccl" / "nccl-socket-fallback.log").read_text()
    nodes = {"node1": Node(bad, (30_000, 10, 0))}
    srv = cluster(tmp_path / "b", nodes, ServeConfig(model="/m"), {"node1": strix_plan()})
    kept = serve(srv, tp=1, allow_fallback=True, wait_s=5)
    assert not kept.stopped and nodes["node1"].running and kept.problems


def test_an_engine_that_may_lock_8_mib_is_refused_under_rdma_naming_who_set_it(
    tmp_path: Path,
) -> None:
    """The engine's own limits (issue 47, item 1): the recorded answer of this machine's
    login session, as a systemd unit would have left them; the witnesses pass."""
    recorded = (OUTPUTS / "engine-limits" / "debian-session-v1.txt").read_text()
    good = (OUTPUTS / "nccl" / "rccl-roce-2rank.log").read_text()
    nodes = {"node1": Node(good, (10, 10, 30_000))}
    nodes["node1"].limits = recorded.replace("0::/\n", "0::/system.slice/halo-vllm.service\n")
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m"), {"node1": strix_plan()})
    result = serve(srv, tp=1, wait_s=5)
    assert result.stopped and result.verdict["transport"] == "roce" and not nodes["node1"].running
    found = result.limits["node1"].to_dict()
    assert (found["memlock_bytes"], found["owner"]) == (8388608, "system unit halo-vllm.service")
    assert result.problems == found["problems"] and len(found["problems"]) == 1
    assert "may lock only 8 MiB of memory: RDMA memory registration fails" in result.problems[0]
    assert found["fix"][0] == (
        "sudo systemctl edit halo-vllm.service   # [Service] LimitMEMLOCK=infinity"
    )
    assert found["notes"][0].endswith("may open 20000 files, fewer than the 65535 "
                                      "vLLM raises its own limit to where it may (many "
                                      "connections or shards fail with 'Too many open files')")  # fmt: skip


def test_exposed_without_a_key_is_refused(tmp_path: Path) -> None:
    nodes = {"node1": Node("", (0, 0, None))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m", host="0.0.0.0"))
    with pytest.raises(UsageError, match=r"refusing to serve on 0\.0\.0\.0 without an API key"):
        serve(srv, wait_s=5)
    assert nodes["node1"].scripts == []
    with pytest.raises(UsageError, match="no model"):
        serve(cluster(tmp_path / "c", nodes, ServeConfig()))


def test_the_ray_executor_needs_ray_even_after_a_serve_without_it(tmp_path: Path) -> None:
    """A serve without Ray keeps its plans in the state file; that is not 'halo up'."""
    nodes = {"node1": Node("", (0, 0, None)), "node2": Node("", (0, 0, None))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m"))
    state = srv.state
    assert state is not None
    state.ray_started_at = None  # as a serve of llama.cpp or the mp executor leaves it
    write_state(srv.config, state)
    with pytest.raises(LifecycleError, match=r"Ray is not up .*run 'halo up' first"):
        serve(Serving(srv.cluster), tp=2, wait_s=5)
    assert not any("setsid" in s for n in nodes.values() for s in n.scripts)


def test_the_doctors_gate_stops_a_serve_without_ray_unless_forced(tmp_path: Path) -> None:
    from dataclasses import replace

    logs = [(VLLM / f"mp-tp2-node{i}.log").read_text() for i in (1, 2)]
    nodes = {"node1": Node(logs[0], (24_000, 40, None)), "node2": Node(logs[1], (24_000, 9, None))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m", sections=vllm_table(executor="mp")))
    # nodes that should have GPUs (gpus unset) but whose facts show none: a blocking finding
    config = replace(srv.config, nodes=tuple(replace(n, gpus=None) for n in srv.config.nodes))
    clients = {name: replace(c, node=config.node(name)) for name, c in srv.cluster.clients.items()}
    gated = Serving(Cluster(config, clients))
    with pytest.raises(LifecycleError, match=r"blocking finding.*gpu\.present"):
        serve(gated, tp=2, wait_s=5)
    assert not any("setsid" in s for n in nodes.values() for s in n.scripts)
    result = serve(gated, tp=2, wait_s=5, force=True)
    assert (result.executor, result.proven) == ("mp", "socket")


def test_each_start_reads_the_state_as_it_is_then(tmp_path: Path) -> None:
    """One Serving for several commands (the demo): a 'halo up' in between is seen."""
    nodes = {"node1": Node("", (0, 0, None)), "node2": Node("", (0, 0, None))}
    srv = cluster(tmp_path, nodes, ServeConfig(model="/m"))
    up = srv.state
    assert up is not None
    down = new_state(srv.config)
    write_state(srv.config, down)  # Ray down
    with pytest.raises(LifecycleError, match="Ray is not up"):
        serve(srv, tp=2, wait_s=5)
    write_state(srv.config, up)  # 'halo up' ran meanwhile
    log = (VLLM / "ray-tp2-head.log").read_text()
    nodes["node1"].log = log
    nodes["node1"].per_token = nodes["node2"].per_token = (24_000, 40, None)
    assert serve(srv, tp=2, wait_s=5).proven == "socket"


def test_vllm_ranks_short_of_memory_are_refused_naming_the_node(tmp_path: Path) -> None:
    gib = 1024**3
    nodes = {"node1": Node("", (24_000, 40, None)), "node2": Node("", (24_000, 20, None))}
    nodes["node1"].memory = f"mem_available_kib={40 * gib // 1024}\nmodel_bytes={30 * gib}\n"
    nodes["node2"].memory = f"mem_available_kib={10 * gib // 1024}\n"
    srv = cluster(
        tmp_path, nodes, ServeConfig(model="/m", sections=vllm_table(command="/e/bin/vllm"))
    )
    with pytest.raises(UsageError) as err:
        serve(srv, tp=2, wait_s=5)
    assert str(err.value) == (
        "not enough memory: node2 has 10.00 GiB available, the model needs 15.00 GiB there "
        "(15.00 GiB of weights + 0.00 GiB of KV cache) (KV cache not counted where the node's "
        "env has no VLLM_CPU_KVCACHE_SPACE: vLLM sizes it at start and checks it itself): free "
        "memory there, lower max_model_len, spread the model over more nodes ('halo plan'), "
        "or --force"
    )
    assert not any("setsid" in s for node in nodes.values() for s in node.scripts)
