"""halo serve in the lab with the real engine (vLLM's CPU build from the engine environment,
TP=2 across two lab nodes), one lab for one engine's whole story: the token witness's
reference recorded on one node, vLLM's own executor agreeing with it, its supervisor through
a killed rank, a wedge and a crash loop, then other weights in node2's copy failing the token
witness alone (both transport witnesses still passing); then Ray, bench serve with tokens
from usage, status naming the ranks, the supervisor restarting the killed API server, status
naming a lost node and the supervisor bringing Ray and the server back once it boots again,
stop leaving nothing, secrets kept out of argv, logs and state. The refusal path uses the
forged stand-in engine (a recorded-style RCCL log), never the demo."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.examples import EXAMPLES
from tests.cluster.test_supervise_lab import Lab, restarted
from tests.conftest import HALO, halo
from tests.models_once import TinyModels

SECRET = "s3cr3t-key-never-in-argv"
LEFTOVER = "pgrep -af 'vllm serve|VLLM::|RayWorker|ray::IDLE' | grep -v pgrep; ls -A /dev/shm"
KILL_RANK = 'kill -KILL "$(cat "$HOME/.local/state/halo/serve-lab-eng.pid")"'  # on its node


def _node(tmp: Path, lab: str, node: str, script: str) -> str:
    done = halo("lab", "exec", "--dir", str(tmp / lab), node, "--", "bash", "-c", script, cwd=tmp)
    return done.stdout


def _configure(config: Path) -> None:
    """The API key from the environment, and the supervisor's quick rounds."""
    text = config.read_text()
    text = text.replace("[serve]\n", '[serve]\napi_key_env = "HALO_TEST_KEY"\n', 1)
    supervise = "\n[serve.supervise]\ninterval_s = 2\ndeadline_s = 60\ncrash_restarts = 4\n"
    config.write_text(text + supervise)


@pytest.mark.engine
def test_real_engine_tp2_across_lab_nodes(
    tmp_path: Path, lab_host: None, vllm_engine: str, tiny_models: TinyModels
) -> None:
    lab = tmp_path / "D"
    config = lab / "halo.toml"
    env = {"HALO_TEST_KEY": SECRET}
    assert halo("lab", "up", "--nodes", "2", "--name", "eng", "--dir", str(lab)).returncode == 0
    try:
        tiny_models.copy(lab / "model")
        tiny_models.copy(lab / "other", seed=7)  # the same shapes, another model's weights
        _configure(config)
        # the model into each node's own store; every rank then opens its node's copy
        synced = halo(
            "model", "sync", str(lab / "model"), "--name", "tiny", "--config", str(config)
        )
        assert synced.returncode == 0, synced.stderr
        # a fresh lab, no 'halo up': vLLM's own executor needs no Ray, its plans come from
        # the nodes' facts. First the token witness's reference, greedy answers on one node
        code, one = _serve_mp(config, tmp_path, env, "--tp", "1", "--nodes", "1",
                              "--reference", "record", "--no-supervise")  # fmt: skip
        assert code == 0 and one["tokens"]["recorded"] == "vllm tp1 on node1", one
        halo("stop", "--config", str(config), cwd=tmp_path)
        code, mp = _serve_mp(config, tmp_path, env, "--reference", "full")
        assert code == 0, mp["problems"]
        assert mp["model"] == "/var/lib/halo/models/tiny"
        assert (mp["executor"], mp["proven"], mp["problems"]) == ("mp", "socket", [])
        assert mp["layout"] == "vllm tp2 on node1+node2"
        assert [r["node"] for r in mp["ranks"]] == ["node1", "node2"]
        # TP=2 adds in another order than TP=1: log-probabilities move by bf16's last bit
        # (0.0078 nats measured), close calls of the random model may flip; within tolerance
        assert mp["tokens"]["ok"], mp["tokens"]["problems"]
        assert mp["tokens"]["drift_nats"] < mp["tokens"]["tolerance_nats"]
        assert len(mp["tokens"]["prompts"]) == 4
        # each rank's own limits, read from its process (sockets: nothing to refuse)
        assert sorted(mp["limits"]) == ["node1", "node2"]
        assert all(v["pid"] > 0 and v["problems"] == [] for v in mp["limits"].values())
        assert not any(n["ray"] for n in _status(config, env)["nodes"])
        healthy = halo("status", "--config", str(config), env=env)
        assert healthy.returncode == 0 and "vLLM, mp executor" in healthy.stdout, healthy.stdout
        _mp_faults(Lab(tmp_path, "eng", lab, env))
        assert halo("stop", "--config", str(config), cwd=tmp_path).returncode == 0
        # node2's copy of the weights is another model's: the token witness alone fails (by
        # its path: by its name, the store would refuse a copy changed since it was synced)
        shutil.copyfile(
            lab / "other" / "model.safetensors",
            lab / "stores" / "node2" / "tiny" / "model.safetensors",
        )
        code, wrong = _serve_mp(config, tmp_path, env, "--no-supervise", model=mp["model"])
        assert (code, wrong["stopped"], wrong["proven"]) == (1, True, None)
        assert wrong["engine"]["backend"] == "gloo" and wrong["traffic"]["problems"] == []
        assert wrong["tokens"]["ok"] is False and wrong["problems"] == wrong["tokens"]["problems"]
        assert wrong["problems"][0].startswith(
            "vllm tp2 on node1+node2: prompt 1 differs from the one-node reference "
            "(vllm tp1 on node1) at token "
        ), wrong["problems"][0]
        for node in ("node1", "node2"):
            assert _node(tmp_path, "D", node, LEFTOVER).strip() == "", node
        # then Ray, and vLLM's ranks as Ray actors
        assert halo("up", "--config", str(config), cwd=tmp_path).returncode == 0
        served = halo(
            "serve", str(lab / "model"), "--tp", "2", "--config", str(config), "--json",
            cwd=tmp_path, env=env, timeout=600,
        )  # fmt: skip
        assert served.returncode == 0, served.stderr
        result = json.loads(served.stdout)
        assert (result["proven"], result["problems"], result["stopped"]) == ("socket", [], False)
        assert result["engine"]["backend"] == "gloo" and result["engine"]["complete"]
        fabric = {n["name"]: n["fabric_address"] for n in _lab_nodes(tmp_path, lab)}
        assert result["engine"]["init_address"] == fabric["node1"]
        assert result["ranks"] == [
            {"rank": 0, "node": "node1", "address": fabric["node1"]},
            {"rank": 1, "node": "node2", "address": fabric["node2"]},
        ]
        for node in ("node1", "node2"):
            paths = result["traffic"]["nodes"][node]
            assert paths["fabric"]["name"] == "enp194s0np0" and paths["mgmt"]["name"] == "eno1"
            # kilobytes per token on the fabric (the all-reduces), next to nothing on mgmt
            assert paths["fabric"]["bytes_per_token"] > 4096 > paths["mgmt"]["bytes_per_token"]
        assert result["ready_s"] < 300 and result["supervisor"]["state"] == "serving"
        bench = halo(
            "bench", "serve", "--config", str(config), "--concurrency", "1,4",
            "--prompts", "8", "--json", "--out", str(tmp_path / "serve.json"),
            cwd=tmp_path, env=env, timeout=600,
        )  # fmt: skip
        assert bench.returncode == 0, bench.stderr
        levels = json.loads(bench.stdout)["levels"]
        assert [lv["errors"] for lv in levels] == [0, 0]
        assert all(lv.get("tokens_from") == "usage" and lv["output_tokens"] > 0 for lv in levels)
        # lab nodes have no power source: said per node, and no number
        assert all(
            lv["energy"]["joules_per_token"] is None
            and [n["problem"] for n in lv["energy"]["nodes"]] == ["no power source"] * 2
            for lv in levels
        )
        proof = json.loads(bench.stdout)["serve_proof"]  # stored with the bench result
        assert proof["proven"] == "socket" and proof["backend"] == "gloo"
        assert proof["bytes_per_token"]["node2"]["fabric"] > 4096
        # the secret is in none of: our output, the state file, the server's argv, its log
        assert SECRET not in served.stdout + served.stderr + bench.stdout
        assert all(SECRET not in p.read_text() for p in (lab / ".halo").glob("*.json"))
        argv = _node(tmp_path, "D", "node1", "pgrep -af 'vllm serve'")
        assert "vllm serve" in argv and SECRET not in argv
        logs = halo("logs", "--config", str(config), "-n", "100000", cwd=tmp_path).stdout
        assert "backend=gloo" in logs and SECRET not in logs
        status = json.loads(halo("status", "--config", str(config), "--json", env=env).stdout)
        assert status["serve"]["healthy"] and len(status["serve"]["ranks"]) == 2
        # the API server killed on the head: the supervisor starts the ranks again and proves
        # them again (both witnesses) with nobody asking
        supervised = Lab(tmp_path, "eng", lab, env)
        supervised.until(lambda s: bool(s.get("last_probe")), "a first probe")
        supervised.exec("node1", KILL_RANK)
        found = restarted(supervised, 1)
        assert found["proof_log"]["problems"] == [] and found["proof"]["problems"] == []
        # a node dies while serving: status names it without waiting out its health request
        # (halo gives that 15 s; the rest is startup and SSH on a live node, seconds)
        assert halo("lab", "kill", "--dir", str(lab), "node2").returncode == 0
        start = time.monotonic()
        lost = halo("status", "--config", str(config), "--json", env=env, timeout=60)
        assert time.monotonic() - start < 15
        serve = json.loads(lost.stdout)["serve"]
        assert not serve["healthy"] and serve["lost"] == ["node2"] and "node2" in serve["detail"]
        degraded = supervised.until(lambda s: s["state"] == "degraded", "degraded")
        assert degraded["cause"].startswith("lost node2")
        # node2 boots again: Ray there started again by the supervisor, then the server
        assert halo("lab", "heal", "--dir", str(lab), "node2").returncode == 0
        restarted(supervised, 2)
        said = halo("logs", "--supervisor", "--config", str(config), cwd=tmp_path).stdout
        assert "starting Ray on node2 again" in said and SECRET not in said
        status = _status(config, env)
        assert status["serve"]["healthy"] and all(n["ray"] for n in status["nodes"])
        stopped = halo("stop", "--config", str(config), cwd=tmp_path)
        assert stopped.returncode == 0 and "server stopped" in stopped.stdout, stopped.stdout
        for node in ("node1", "node2"):
            assert _node(tmp_path, "D", node, LEFTOVER).strip() == "", node
    finally:
        halo("stop", "--config", str(config), cwd=tmp_path)
        halo("down", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "eng", "--dir", str(lab))


def _mp_faults(lab: Lab) -> None:
    """The supervisor of the mp executor's TP=2 through three faults in turn, on one start of
    the engine: a rank killed on node2 restarts every rank; the head's API server stopped (a
    wedge) is found by generation and restarted; then every start fails (node1's copy of
    the model is gone) and it gives up after K = 4 attempts, the two restarts that worked
    counted. Each restart proves the witnesses again, the token witness's answers too.
    node1's copy is put back."""
    lab.until(lambda s: bool(s.get("last_probe")), "a first probe")
    lab.exec("node2", KILL_RANK)
    found = restarted(lab, 1)
    assert lab.causes("restarting") == ["the engine's process exited on node2"]
    assert found["proof_log"]["problems"] == [] and found["proof"]["problems"] == []
    assert lab.status()["serve"]["healthy"]
    lab.exec("node1", KILL_RANK.replace("-KILL", "-STOP"))
    found = restarted(lab, 2)
    assert lab.causes("restarting")[1].startswith("wedged: no token within 60 s"), found
    assert found["proof_log"]["problems"] == [] and found["proof"]["problems"] == []
    store = lab.dir / "stores" / "node1" / "tiny"
    store.rename(store.with_name("tiny.away"))
    try:
        lab.exec("node1", KILL_RANK)
        failed = lab.until(lambda s: s["state"] == "failed", "failed")
    finally:
        store.with_name("tiny.away").rename(store)
    assert failed["cause"].startswith("crash loop: 4 restarts within 600 s did not keep it up")
    # both restarts are in the window too: K = 4 attempts in all, the last two failed
    assert (failed["attempts"], failed["restarts"]) == (4, 2)
    for node in ("node1", "node2"):
        assert "vllm serve" not in lab.exec(node, "pgrep -a -f '[v]llm serve' || true"), node


def _serve_mp(
    config: Path, cwd: Path, env: dict[str, str], *more: str, model: str = "tiny"
) -> tuple[int, dict[str, Any]]:
    """halo serve over vLLM's own executor of the synced model (by its name in the stores,
    or a path): its exit code and JSON."""
    done = halo(
        "serve", model, "--config", str(config), "--executor", "mp", "--json", *more,
        cwd=cwd, env=env, timeout=600,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, data


def _status(config: Path, env: dict[str, str]) -> dict[str, Any]:
    done = halo("status", "--config", str(config), "--json", env=env, timeout=60)
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _lab_nodes(tmp: Path, lab: Path) -> list[dict[str, str]]:
    status = halo("lab", "status", "--dir", str(lab), "--json", cwd=tmp)
    nodes: list[dict[str, str]] = json.loads(status.stdout)["nodes"]
    return nodes


@pytest.mark.engine
def test_bad_input_names_the_node_and_starts_nothing(
    tmp_path: Path, lab_host: None, vllm_engine: str, tiny_models: TinyModels
) -> None:
    lab = tmp_path / "B"
    config = lab / "halo.toml"
    assert halo("lab", "up", "--name", "b", "--dir", str(lab)).returncode == 0
    try:
        assert halo("up", "--config", str(config), cwd=tmp_path).returncode == 0
        missing = halo("serve", str(lab / "nothing"), "--config", str(config), cwd=tmp_path)
        assert missing.returncode == 2
        assert missing.stderr.strip().endswith(
            f"halo: error: node1: the model {lab / 'nothing'} is not there (no config.json): "
            "put it at the same path on every node, or serve a shared path"
        )
        tiny_models.copy(lab / "model")
        too_many = halo("serve", str(lab / "model"), "--tp", "3", "--config", str(config))
        assert too_many.returncode == 2 and "--tp 3: the cluster offers 2 engine rank(s)" in (
            too_many.stderr
        )
        # up to 60 s for a loaded machine's Python to listen; it ends as soon as it does
        listening = "for i in $(seq 600); do ss -ltn | grep -q ':8000 ' && break; sleep 0.1; done"
        _node(tmp_path, "B", "node1", "setsid python3 -m http.server 8000 --bind 127.0.0.1 "
              f">/dev/null 2>&1 < /dev/null & {listening}")  # fmt: skip
        busy = halo("serve", str(lab / "model"), "--config", str(config), cwd=tmp_path)
        assert busy.returncode == 2 and "node1: port 8000 is already in use there" in busy.stderr
        assert "vllm serve" not in _node(tmp_path, "B", "node1", "pgrep -af 'vllm serve'")
        # Ctrl-C while serve waits for /health: exit 130, and what it started is stopped
        argv = [HALO, "serve", str(lab / "model"), "--config", str(config), "--port", "8001"]
        waiting = subprocess.Popen(argv, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        assert waiting.stderr is not None
        said = []  # halo says when it waits for /health: the server was started
        for line in waiting.stderr:
            said.append(line)
            if "waiting for /health" in line:
                break
        assert said and "waiting for /health" in said[-1], "".join(said)
        assert "vllm serve" in _node(tmp_path, "B", "node1", "pgrep -af 'vllm serve'")
        waiting.send_signal(signal.SIGINT)
        # it stops what it started on every node first (each stop bounded by halo's own 60-s
        # script timeout, the nodes at once): this bound only turns a hang into a failure
        _out, err = waiting.communicate(timeout=180)
        assert waiting.returncode == 130, err
        for node in ("node1", "node2"):
            assert _node(tmp_path, "B", node, LEFTOVER).strip() == "", node
    finally:
        halo("down", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "b", "--dir", str(lab))


@pytest.mark.lab
def test_forged_rccl_log_is_refused_and_stopped(tmp_path: Path, lab_host: None) -> None:
    """The refusal path: the stand-in engine forges an RCCL RoCE log while the lab plans
    sockets (and its requests move nothing on the fabric): halo stops it and exits 1."""
    lab = tmp_path / "R"
    config = lab / "halo.toml"
    # no engine: Ray from the halo installed on the nodes
    up = (
        "lab",
        "up",
        "--name",
        "r",
        "--dir",
        str(lab),
        "--no-engine",
        "--no-llama-cpp",
        "--installed",
    )
    assert halo(*up).returncode == 0
    try:
        forged = f"python3 {EXAMPLES / 'standin_vllm.py'}"
        with config.open("a") as handle:
            handle.write(
                f'\n[serve]\nmodel = "standin-8b"\n'
                'extra_args = ["--standin-transport", "roce"]\n'
                f'\n[serve.vllm]\ncommand = "{forged}"\n'
            )
        assert halo("up", "--config", str(config), cwd=tmp_path).returncode == 0
        refused = halo("serve", "--config", str(config), "--json", "--wait", "60", cwd=tmp_path)
        assert refused.returncode == 1, refused.stderr
        data = json.loads(refused.stdout)
        assert data["stopped"] and data["verdict"]["transport"] == "roce" and data["proven"] is None
        assert "NCCL's log shows roce, the plan asked for socket" in data["problems"]
        assert "no server was running" in halo("stop", "--config", str(config)).stdout
    finally:
        halo("down", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "r", "--dir", str(lab))
