"""halo serve through the fake runner: the vLLM command line, the refusal when RDMA was
planned and the log shows sockets, 0.0.0.0 without a key, secrets only in the script env."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halo_cluster.cluster.lifecycle import Lifecycle, UpResult, write_state
from halo_cluster.cluster.serve import Server, serve_argv
from halo_cluster.config import Config, NodeConfig, ServeConfig
from halo_cluster.errors import UsageError
from halo_cluster.facts.inventory import collect_inventory
from halo_cluster.runner import Result
from halo_cluster.transport import plan_transport
from tests.conftest import OUTPUTS, ROOTS


def test_vllm_command_line_for_an_apu() -> None:
    serve = ServeConfig(
        model="m", host="192.168.1.51", port=8000, extra_args=("--max-num-seqs", "8")
    )
    assert serve_argv(serve, "meta-llama/Llama-3.3-70B-Instruct", 2, unified_memory=True) == [
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
        "--max-num-seqs",
        "8",
    ]
    assert "--enforce-eager" not in serve_argv(ServeConfig(), "m", 2, unified_memory=False)


class Head:
    """A fake head node: scripts recorded, a server 'running' after start, a recorded log."""

    def __init__(self, log: str) -> None:
        self.scripts: list[str] = []
        self.running = False
        self.log = log

    def run(self, argv, stdin=None, timeout=30.0, on_line=None):  # type: ignore[no-untyped-def]
        script = stdin or ""
        self.scripts.append(script)
        if "setsid" in script:
            self.running = True
        elif "serve-health" in script:
            return Result(tuple(argv), 0 if self.running else 1, "{}", "")
        elif script.startswith("cat "):
            return Result(tuple(argv), 0, self.log, "")
        elif "kill -TERM" in script:
            was, self.running = self.running, False
            return Result(tuple(argv), 0 if was else 3, "", "")
        return Result(tuple(argv), 0, "", "")


def server(tmp_path: Path, log: str, serve: ServeConfig) -> tuple[Server, Head]:
    node = NodeConfig("strix1", "root@192.168.1.51", "192.168.100.1", halo="/opt/halo/bin/halo")
    config = Config(tmp_path / "halo.toml", "strix", "auto", (node,), serve=serve)
    plan = plan_transport(collect_inventory(str(ROOTS / "strix-e810")), "auto", "192.168.100.2")
    write_state(config, UpResult(started=["strix1"], plans={"strix1": plan}))
    head = Head(log)
    return Server(Lifecycle(config, {"strix1": head})), head  # type: ignore[dict-item]


def test_rdma_planned_but_socket_logged_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HALO_KEY", "k3y-secret")
    log = (OUTPUTS / "nccl" / "nccl-socket-fallback.log").read_text()
    srv, head = server(tmp_path, log, ServeConfig(model="m", api_key_env="HALO_KEY"))
    result = srv.start(None, None, None, None, allow_fallback=False, insecure=False, wait_s=5)
    assert result.stopped and result.expected == "rdma" and result.verdict["transport"] == "socket"
    assert not head.running
    start = next(s for s in head.scripts if "setsid" in s)
    assert "export VLLM_API_KEY=k3y-secret" in start and "export NCCL_DEBUG=INFO" in start
    assert "export NCCL_IB_HCA==rocep194s0:1" in start
    command = start.split("setsid ", 1)[1]
    assert "k3y-secret" not in command  # never argv
    assert "k3y-secret" not in json.dumps(result.__dict__)


def test_rdma_log_is_accepted_and_fallback_can_be_allowed(tmp_path: Path) -> None:
    good = (OUTPUTS / "nccl" / "rccl-roce-2rank.log").read_text()
    srv, head = server(tmp_path, good, ServeConfig(model="m"))
    result = srv.start(None, None, None, None, allow_fallback=False, insecure=False, wait_s=5)
    assert not result.stopped and head.running and result.verdict["transport"] == "roce"
    bad = (OUTPUTS / "nccl" / "nccl-socket-fallback.log").read_text()
    srv, head = server(tmp_path / "b", bad, ServeConfig(model="m"))
    kept = srv.start(None, None, None, None, allow_fallback=True, insecure=False, wait_s=5)
    assert not kept.stopped and head.running


def test_exposed_without_a_key_is_refused(tmp_path: Path) -> None:
    srv, head = server(tmp_path, "", ServeConfig(model="m", host="0.0.0.0"))
    with pytest.raises(UsageError, match=r"refusing to serve on 0\.0\.0\.0 without an API key"):
        srv.start(None, None, None, None, allow_fallback=False, insecure=False, wait_s=5)
    assert head.scripts == []
    with pytest.raises(UsageError, match="no model"):
        server(tmp_path / "c", "", ServeConfig())[0].start(None, None, None, None, False, False, 5)
