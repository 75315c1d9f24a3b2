"""llama.cpp over RPC, the pure parts: the programs' command lines, the layer split, the
transport choice, the preflight script (run by bash against real files), and the verdict
from llama-server's and rpc-server's own lines (recorded in the lab) checked against the plan."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.config import ServeConfig
from halo_cluster.engines.llama_cpp_argv import (
    LlamaCppOptions,
    build_has_rdma,
    build_identity,
    llama_server_argv,
    offload_layers,
    preflight_script,
    rpc_env,
    rpc_server_argv,
    rpc_transport,
)
from halo_cluster.witness.llama_log import (
    LlamaVerdict,
    RpcWorkerLog,
    check_rpc,
    parse_llama_logs,
    parse_worker_log,
)
from tests.conftest import OUTPUTS

LOGS = OUTPUTS / "llama.cpp"
HEAD_LOG = LOGS / "llama-server-rpc.log"
WORKER_LOG = LOGS / "rpc-server-node2.log"
ENDPOINT = "198.19.1.12:50052"


def test_rpc_server_binds_the_fabric_address_never_every_interface() -> None:
    options = LlamaCppOptions(build="/opt/llama/", rpc_port=50099, threads=1)
    assert rpc_server_argv(options, "198.19.1.12") == [
        "/opt/llama/bin/ggml-rpc-server", "-H", "198.19.1.12", "-p", "50099", "-c", "-t", "1",
    ]  # fmt: skip
    assert rpc_server_argv(LlamaCppOptions(), "10.0.0.2") == [
        "ggml-rpc-server", "-H", "10.0.0.2", "-p", "50052", "-c",
    ]  # fmt: skip
    assert rpc_server_argv(LlamaCppOptions(), "10.0.0.2", cache=False)[-1] == "50052"
    assert "-c" not in rpc_server_argv(LlamaCppOptions(cache_gib=0), "10.0.0.2")  # no quota: off
    for everywhere in ("0.0.0.0", "::", ""):
        with pytest.raises(ValueError, match="fabric address"):
            rpc_server_argv(options, everywhere)


def test_llama_server_command_line_splits_layers_over_the_workers() -> None:
    serve = ServeConfig(
        host="127.0.0.1", port=8000, max_model_len=1024, max_num_seqs=8,
        extra_args=("--flash-attn", "off"),
    )  # fmt: skip
    options = LlamaCppOptions(build="/l", threads=1)
    endpoints = ["198.19.1.12:50052", "198.19.1.13:50052"]
    assert llama_server_argv(serve, options, "/m/model.gguf", endpoints, layers=4) == [
        "/l/bin/llama-server", "--model", "/m/model.gguf", "--host", "127.0.0.1",
        "--port", "8000", "--no-ui", "--log-verbosity", "4",
        "--rpc", "198.19.1.12:50052,198.19.1.13:50052",
        "--n-gpu-layers", "3", "--tensor-split", "1,1",
        "--parallel", "8", "--ctx-size", "8192", "--threads", "1",
        "--flash-attn", "off",
    ]  # fmt: skip
    alone = llama_server_argv(ServeConfig(), LlamaCppOptions(), "/m.gguf", [], layers=4)
    assert alone[alone.index("--n-gpu-layers") + 1] == "0" and "--rpc" not in alone


@pytest.mark.parametrize(
    ("layers", "workers", "offloaded"),
    [(4, 1, 2), (4, 0, 0), (4, 3, 4), (80, 1, 40), (79, 1, 40), (61, 3, 46), (1, 7, 2)],
)
def test_offload_gives_each_node_about_one_share(layers: int, workers: int, offloaded: int) -> None:
    assert offload_layers(layers, workers) == offloaded


@given(st.integers(1, 400), st.integers(0, 16))
def test_offload_never_exceeds_the_layers_and_leaves_the_head_a_share(
    layers: int, workers: int
) -> None:
    offloaded = offload_layers(layers, workers)
    total = layers + 1  # the output layer counts as one
    assert 0 <= offloaded <= total
    if workers:
        assert abs(offloaded - total * workers / (workers + 1)) <= 0.5


def test_transport_follows_the_plan_and_the_build() -> None:
    assert [rpc_transport(p, b) for p, b in [(True, True), (True, False), (False, True)]] == [
        "rdma",
        "tcp",
        "tcp",
    ]
    assert rpc_env("rdma") == {}
    assert rpc_env("tcp") == {"GGML_RPC_NO_RDMA": "1"}  # an RDMA build held on TCP


def _preflight(
    tmp: Path, program: str, model: str | None, port: tuple[str, int] | None = None
) -> subprocess.CompletedProcess[str]:
    script = preflight_script(program, model, port)
    return subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True)


def test_preflight_names_each_problem_by_its_code(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("llama-server", "ggml-rpc-server"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    server = str(bin_dir / "llama-server")
    good = tmp_path / "m.gguf"
    good.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 32)
    not_gguf = tmp_path / "m.safetensors"
    not_gguf.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    short = tmp_path / "short.gguf"
    short.write_bytes(b"GGUF\x03")
    ok = _preflight(tmp_path, server, str(good))
    digest = subprocess.run(
        ["sha256sum", str(bin_dir / "ggml-rpc-server")], capture_output=True, text=True
    ).stdout.split()[0]
    assert ok.returncode == 0 and build_identity(ok.stdout) == digest
    assert not build_has_rdma(ok.stdout)  # a build that never calls libibverbs
    (bin_dir / "ggml-rpc-server").write_text("#!/bin/sh\n# ibv_create_qp\n")
    assert build_has_rdma(_preflight(tmp_path, server, str(good)).stdout)
    codes = [
        _preflight(tmp_path, str(tmp_path / "nowhere/llama-server"), str(good)).returncode,
        _preflight(tmp_path, server, str(tmp_path / "missing.gguf")).returncode,
        _preflight(tmp_path, server, str(not_gguf)).returncode,
        _preflight(tmp_path, server, str(short)).returncode,
    ]
    assert codes == [10, 11, 13, 14]
    with socket.socket() as busy:  # a port in use: 12; the same port free again: 0
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert _preflight(tmp_path, server, str(good), ("127.0.0.1", port)).returncode == 12
    assert _preflight(tmp_path, server, str(good), ("127.0.0.1", port)).returncode == 0
    assert build_identity("no build line\n") is None


def test_build_identity_is_the_pin_when_halo_built_it(tmp_path: Path) -> None:
    """Two builds of one pin (two machines: other bytes) are one identity; another pin is not."""
    identities = []
    for name, pin, body in (("a", "0.3.36", "x"), ("b", "0.3.36", "y"), ("c", "0.3.35", "x")):
        (tmp_path / name / "bin").mkdir(parents=True)
        for exe in ("llama-server", "ggml-rpc-server"):
            (tmp_path / name / "bin" / exe).write_text(f"#!/bin/sh\n# {body}\n")
            (tmp_path / name / "bin" / exe).chmod(0o755)
        record = {"source": f"llama-cpp-python=={pin}", "build_s": len(body)}
        (tmp_path / name / "build.json").write_text(json.dumps(record, indent=2))
        done = _preflight(tmp_path, str(tmp_path / name / "bin" / "llama-server"), None)
        identities.append(build_identity(done.stdout))
    assert identities[0] == identities[1] != identities[2] and None not in identities


def test_preflight_quotes_a_hostile_model_path(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    model = f"/x$(touch {marker});`touch {marker}`.gguf"
    result = _preflight(tmp_path, "true", model)
    assert result.returncode == 11 and not marker.exists()


def test_recorded_logs_give_the_complete_verdict() -> None:
    verdict = parse_llama_logs(
        HEAD_LOG.read_text().splitlines(),
        [("node2:serve.log", WORKER_LOG.read_text().splitlines())],
    )
    worker = verdict.workers[0]
    assert verdict.devices == (("RPC0", ENDPOINT),)
    assert (verdict.offloaded, verdict.layers) == (2, 5)
    assert (worker.version, worker.endpoint, worker.transport, worker.rdma_activated) == (
        "7.0.0",
        ENDPOINT,
        "TCP (RDMA auto-negotiate enabled)",
        0,
    )
    assert worker.clients >= 1
    assert check_rpc(verdict, {"node2:serve.log": (ENDPOINT, "tcp")}, offload=2) == []


def test_check_rpc_names_every_way_the_model_went_elsewhere() -> None:
    worker = RpcWorkerLog("node2:serve.log", "7.0.0", "198.18.1.12:50052", "TCP", 0, 1)
    verdict = LlamaVerdict((("RPC0", "10.9.9.9:50052"),), 1, 5, (worker,))
    assert check_rpc(
        verdict,
        {"node2:serve.log": (ENDPOINT, "tcp"), "node3:serve.log": ("198.19.1.13:50052", "rdma")},
        2,
    ) == [
        "llama-server's log shows no device at 198.19.1.12:50052 (node2)",
        "node2: rpc-server listens on 198.18.1.12:50052, the plan's fabric endpoint is "
        "198.19.1.12:50052",
        "node2: rpc-server accepted no connection from the head",
        "node2: the RPC connection switched to RDMA although TCP was planned",
        "llama-server's log shows no device at 198.19.1.13:50052 (node3)",
        "node3: rpc-server's log does not say where it listens",
        "llama-server used a device at 10.9.9.9:50052, which is no planned worker",
        "llama-server offloaded 1 layers to the workers, 2 asked",
    ]


def test_rdma_planned_but_the_connection_stayed_on_tcp() -> None:
    worker = parse_worker_log("node2:serve.log", WORKER_LOG.read_text().splitlines())
    verdict = LlamaVerdict((("RPC0", ENDPOINT),), 2, 5, (worker,))
    assert check_rpc(verdict, {"node2:serve.log": (ENDPOINT, "rdma")}, 2) == [
        "node2: RDMA was planned but the RPC connection stayed on TCP"
    ]
    activated = parse_worker_log(
        "w", [*WORKER_LOG.read_text().splitlines(), "RDMA activated: qpn=1->2 mtu=4096 rx_depth=24"]
    )
    assert activated.rdma_activated == 1


@given(st.lists(st.text(max_size=120), max_size=40))
def test_the_parsers_take_any_text(lines: list[str]) -> None:
    verdict = parse_llama_logs(lines, [("w", lines)])
    assert isinstance(verdict.to_dict(), dict)
    assert verdict.workers[0].clients <= len(lines)
