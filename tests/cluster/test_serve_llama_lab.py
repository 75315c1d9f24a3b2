"""halo serve --engine llama.cpp in the lab with the real build (ggml-rpc-server on node2's
fabric address, llama-server on node1): the two witnesses, bench serve with tokens from
usage, status naming a worker whose rpc-server died, stop leaving nothing, the API key kept
out of argv and logs; and the bad inputs (a GGUF missing, not GGUF or truncated, a port in
use, a worker without the build or with another build), each one line naming the node."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import halo
from tests.models_once import TinyModels

pytestmark = pytest.mark.engine
SECRET = "llama-key-never-in-argv"
# prints "clean" only when nothing is left (a failed exec prints nothing and fails the test)
LEFTOVER = "pgrep -af 'llama-server|ggml-rpc-server' | grep -v pgrep; echo clean"


def _node(tmp: Path, lab: Path, node: str, script: str) -> str:
    done = halo("lab", "exec", "--dir", str(lab), node, "--", "bash", "-c", script, cwd=tmp)
    return done.stdout


def _lab(tmp: Path, name: str) -> tuple[Path, Path]:
    lab = tmp / name
    assert halo("lab", "up", "--name", name.lower(), "--dir", str(lab)).returncode == 0
    return lab, lab / "halo.toml"


def _serve(tmp: Path, config: Path, model: Path, *extra: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return halo(
        "serve", str(model), "--engine", "llama.cpp", "--config", str(config), *extra,
        cwd=tmp, env=env, timeout=300,
    )  # fmt: skip


def test_layers_over_rpc_across_lab_nodes(
    tmp_path: Path, lab_host: None, llama_cpp: str, tiny_models: TinyModels
) -> None:
    lab, config = _lab(tmp_path, "L")
    env = {"HALO_TEST_KEY": SECRET}
    try:
        text = config.read_text()
        text = text.replace("[serve]\n", '[serve]\napi_key_env = "HALO_TEST_KEY"\n', 1)
        # node2's RPC tensor cache over its quota (1 MiB): the least recently used file goes
        config.write_text(
            text.replace("[serve.llama_cpp]\n", "[serve.llama_cpp]\ncache_gib = 0.001\n")
        )
        _node(tmp_path, lab, "node2", "mkdir -p /var/lib/halo/models/.rpc-cache/rpc && cd $_ && "
              "head -c 2M /dev/zero > stale && touch -d 2020-01-01 stale && head -c 4k /dev/zero > kept")  # fmt: skip
        tiny_models.copy(lab / "model", "gguf")
        # no 'halo up': llama.cpp uses no Ray, its plans come from the nodes' facts. Not
        # supervised: the test kills rpc-server below to see status name the lost node, and a
        # supervisor would race it, bringing the group back before status asks
        served = _serve(
            tmp_path, config, lab / "model" / "model.gguf", "--json", "--no-supervise", env=env
        )
        assert served.returncode == 0, served.stderr
        listed = json.loads(halo("model", "ls", "--config", str(config), "--json").stdout)
        cache = listed["rpc_cache"]["node2"]  # 'stale' gone, 'kept' (used since) kept
        assert 4096 <= cache["bytes"] < 1 << 20 and listed["rpc_cache"]["node1"]["files"] == 0
        result = json.loads(served.stdout)
        status = json.loads(halo("lab", "status", "--dir", str(lab), "--json").stdout)
        fabric = {n["name"]: n["fabric_address"] for n in status["nodes"]}
        endpoint = f"{fabric['node2']}:50052"
        assert (result["proven"], result["problems"], result["stopped"]) == ("socket", [], False)
        engine = result["engine"]
        assert (engine["engine"], engine["transport"]) == ("llama.cpp", "tcp")
        assert (engine["offloaded_layers"], engine["head_layers"]) == (2, 3)
        assert engine["rpc"]["devices"] == [{"name": "RPC0", "endpoint": endpoint}]
        worker = engine["rpc"]["workers"][0]
        assert (worker["endpoint"], worker["rdma_activated"]) == (endpoint, 0)
        assert worker["clients"] >= 1
        assert result["ranks"] == [{"rank": 0, "node": "node2", "address": endpoint}]
        for node in ("node1", "node2"):
            paths = result["traffic"]["nodes"][node]
            # the activations cross on the fabric, next to nothing on management
            assert paths["fabric"]["bytes_per_token"] > 4096 > paths["mgmt"]["bytes_per_token"]
        # rpc-server listens on the fabric address only
        listening = _node(tmp_path, lab, "node2", "ss -ltnH 'sport = :50052' | awk '{print $4}'")
        assert listening.split() == [endpoint]
        bench = halo(
            "bench", "serve", "--config", str(config), "--concurrency", "1,2", "--prompts", "4",
            "--input-len", "32", "--output-len", "16", "--json",
            "--out", str(tmp_path / "serve.json"), cwd=tmp_path, env=env, timeout=300,
        )  # fmt: skip
        assert bench.returncode == 0, bench.stderr
        data = json.loads(bench.stdout)
        assert [lv["errors"] for lv in data["levels"]] == [0, 0]
        assert data["tokens_from"] == "usage" and data["workload"]["prompt_fit"] == "tokenize"
        assert data["serve_proof"]["engine"] == "llama.cpp"
        argv = _node(tmp_path, lab, "node1", "pgrep -af llama-server")
        assert "llama-server" in argv and SECRET not in argv
        logs = halo("logs", "--config", str(config), "-n", "100000", cwd=tmp_path).stdout
        assert "using device RPC0" in logs and SECRET not in logs
        shown = halo("status", "--config", str(config), "--json", env=env)
        healthy = json.loads(shown.stdout)
        assert healthy["serve"]["healthy"] and healthy["serve"]["engine"] == "llama.cpp"
        assert shown.returncode == 0  # served without Ray: the server's health decides
        assert not any(n["ray"] for n in healthy["nodes"])
        # the worker's rpc-server dies mid-serve: status names node2 without waiting out its
        # health request (halo gives that 15 s; the rest is startup and SSH, seconds)
        _node(tmp_path, lab, "node2", "pkill -KILL -f ggml-rpc-server")
        start = time.monotonic()
        lost = json.loads(halo("status", "--config", str(config), "--json", env=env).stdout)
        assert time.monotonic() - start < 15
        assert not lost["serve"]["healthy"] and lost["serve"]["lost"] == ["node2"]
        assert "server stopped" in halo("stop", "--config", str(config), cwd=tmp_path).stdout
        for node in ("node1", "node2"):
            assert _node(tmp_path, lab, node, LEFTOVER).strip() == "clean", node
    finally:
        halo("stop", "--config", str(config), cwd=tmp_path)
        halo("down", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "l", "--dir", str(lab))


def test_bad_input_is_one_line_naming_the_node(
    tmp_path: Path, lab_host: None, llama_cpp: str, tiny_models: TinyModels
) -> None:
    lab, config = _lab(tmp_path, "M")
    try:
        tiny_models.copy(lab / "model", "both")
        gguf = lab / "model" / "model.gguf"
        short = lab / "model" / "short.gguf"
        short.write_bytes(gguf.read_bytes()[:12])
        half = lab / "model" / "half.gguf"  # a whole header, its tensors cut off
        half.write_bytes(gguf.read_bytes()[: gguf.stat().st_size // 2])
        cases = [
            (half, f"node1: {half}: truncated GGUF file (tensor "),
            (lab / "nothing.gguf", f"node1: the model {lab / 'nothing.gguf'} is not there"),
            (lab / "model" / "model.safetensors", "is not a GGUF file"),
            (short, "is a truncated GGUF file"),
        ]
        for model, message in cases:
            bad = _serve(tmp_path, config, model)
            assert _node(tmp_path, lab, "node1", LEFTOVER).strip() == "clean"
            assert bad.returncode == 2 and message in bad.stderr, bad.stderr
            assert len(bad.stderr.strip().splitlines()) <= 3, bad.stderr  # progress + one line
        # a port in use on the worker's fabric address
        fabric2 = json.loads(halo("lab", "status", "--dir", str(lab), "--json").stdout)["nodes"][1][
            "fabric_address"
        ]
        # up to 60 s for a loaded machine's Python to listen; it ends as soon as it does
        listening = "for i in $(seq 600); do ss -ltn | grep -q ':50052 ' && break; sleep 0.1; done"
        _node(tmp_path, lab, "node2", f"setsid python3 -m http.server 50052 --bind {fabric2} "
              f">/dev/null 2>&1 < /dev/null & {listening}")  # fmt: skip
        busy = _serve(tmp_path, config, gguf)
        assert busy.returncode == 2 and "node2: port 50052 is already in use there" in busy.stderr
        _node(tmp_path, lab, "node2", "pkill -f 'http.server 50052'")
        # the build only on node1 (in its private /tmp), then a different build on node2
        build = os.path.realpath(llama_cpp)  # the lab's halo.toml names the real directory
        _node(tmp_path, lab, "node1", f"cp -r {build} /tmp/llama")
        config.write_text(config.read_text().replace(f'build = "{build}"', 'build = "/tmp/llama"'))
        missing = _serve(tmp_path, config, gguf)
        assert (
            missing.returncode == 2
            and "node2: /tmp/llama/bin/ggml-rpc-server is not installed" in missing.stderr
        )
        _node(
            tmp_path,
            lab,
            "node2",
            # another pin on node2: its build record names it
            f"cp -r {build} /tmp/llama && sed -i 's/==0[.]/==9./' /tmp/llama/build.json",
        )
        differs = _serve(tmp_path, config, gguf)
        assert (
            differs.returncode == 2
            and "node2: its llama.cpp build differs from node1's" in differs.stderr
        )
        for node in ("node1", "node2"):
            assert _node(tmp_path, lab, node, LEFTOVER).strip() == "clean", node
    finally:
        halo("stop", "--config", str(config), cwd=tmp_path)
        halo("down", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "m", "--dir", str(lab))
