"""Two deployments behind one gateway in a three-node lab, with llama.cpp's real build:
'small' as two replicas (node1, node2) and 'other' on node3, each replica served, proven and
supervised alone; the gateway (vllm-router behind halo's key gate) on node1 routes by model,
lists both (with an alias), refuses a missing, wrong or revoked key before any engine sees
it, keeps answering while a replica is killed and takes it back once its supervisor
restarted it; 'halo stop small' leaves 'other' serving; 'halo stop' and 'halo gateway stop'
leave nothing running. A vLLM deployment behind the gateway is the demo's
(tests/test_demo_lab.py): one vLLM start serves both."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import halo
from tests.models_once import TinyModels

pytestmark = pytest.mark.engine
LEFTOVER = (
    "pgrep -af 'llama-server|ggml-rpc-server|vllm::router|gateway.gate|vllm serve|EngineCore' "
    "| grep -v pgrep; echo clean"
)


def _ask(url: str, key: str | None, model: str, path: str = "/v1/completions") -> tuple[int, Any]:
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": 4}).encode()
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    method = "GET" if path == "/v1/models" else "POST"
    request = urllib.request.Request(url + path, None if method == "GET" else body, headers,
                                     method=method)  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def _until(what: str, check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        time.sleep(0.5)


def _routed(tmp: Path, lab: Path) -> dict[str, int]:
    """Requests the router on node1 sent to each replica (its own Prometheus counters): the
    engines' only way in from the gateway (the supervisors' probes go to them directly)."""
    script = "curl -s 127.0.0.1:29080/metrics | grep '^vllm_router_cb_outcomes_total'"
    done = halo("lab", "exec", "--dir", str(lab), "node1", "--", "bash", "-c", script, cwd=tmp)
    found: dict[str, int] = {}
    for line in done.stdout.splitlines():  # every outcome of every request it sent
        labels, _, value = line.rpartition(" ")
        worker = labels.split('worker="', 1)[1].split('"', 1)[0]
        found[worker] = found.get(worker, 0) + int(float(value))
    return found


def _node(tmp: Path, lab: Path, node: str, script: str) -> str:
    return halo("lab", "exec", "--dir", str(lab), node, "--", "bash", "-c", script, cwd=tmp).stdout


def test_two_deployments_replicas_keys_and_failover_behind_one_gateway(
    tmp_path: Path, lab_host: None, llama_cpp: str, tiny_models: TinyModels
) -> None:
    lab = tmp_path / "G"
    up = ("lab", "up", "--name", "gw", "--dir", str(lab), "--nodes", "3", "--installed")
    assert halo(*up).returncode == 0
    config = lab / "halo.toml"
    try:
        nodes = json.loads(halo("lab", "status", "--dir", str(lab), "--json").stdout)["nodes"]
        host = next(n["mgmt_address"] for n in nodes if n["name"] == "node1")
        mgmt = {n["name"]: n["mgmt_address"] for n in nodes}
        text = config.read_text()
        config.write_text(text + f'\n[gateway]\nhost = "{host}"\naliases = {{ fast = "small" }}\n')
        tiny_models.copy(lab / "model", "gguf")
        tiny_models.copy(lab / "other", "gguf")
        run = ("run", "--config", str(config), "--json")
        single = ("--layout", "llama.cpp single")
        small = halo(*run, str(lab / "model" / "model.gguf"), *single, "--name", "small",
                     "--replicas", "2", cwd=tmp_path, timeout=600)  # fmt: skip
        assert small.returncode == 0, small.stderr
        deployed = json.loads(small.stdout)
        assert deployed["state"] == "serving"
        assert [r["nodes"] for r in deployed["replicas"]] == [["node1"], ["node2"]]
        assert all(r["proven"] == "one node" for r in deployed["replicas"])
        other = halo(*run, str(lab / "other" / "model.gguf"), *single, "--name", "other",
                     cwd=tmp_path, timeout=600)  # fmt: skip
        assert other.returncode == 0, other.stderr
        assert [r["nodes"] for r in json.loads(other.stdout)["replicas"]] == [["node3"]]

        again = halo(*run, str(lab / "model" / "model.gguf"), *single, "--name", "small",
                     "--replicas", "2", cwd=tmp_path)  # fmt: skip
        assert json.loads(again.stdout)["reason"] == "already serving", again.stderr
        started = halo("gateway", "start", "--config", str(config), "--json", cwd=tmp_path)
        assert started.returncode == 0, started.stderr
        gateway = json.loads(started.stdout)
        url = gateway["url"]
        assert sorted(w["model_id"] for w in gateway["workers"]) == ["other", "small", "small"]
        made = halo("gateway", "key", "add", "alice", "--config", str(config), "--json")
        key = json.loads(made.stdout)["key"]
        assert key not in (lab / ".halo").read_text() if (lab / ".halo").is_file() else True

        # refused before any engine: no key, a wrong one
        before = _routed(tmp_path, lab)
        for wrong in (None, "halo-not-a-key", key + "x"):
            status, _ = _ask(url, wrong, "small")
            assert status == 401
        assert _routed(tmp_path, lab) == before

        # routed by model, an alias too; /v1/models lists both
        _until(
            "the router holds three healthy replicas",
            lambda: all(
                w["healthy"]
                for w in json.loads(
                    halo("gateway", "status", "--config", str(config), "--json").stdout
                )["workers"]
            ),
            30,
        )
        for name in ("small", "fast", "other"):
            status, answer = _ask(url, key, name)
            assert status == 200, answer
        status, listed = _ask(url, key, "", "/v1/models")
        assert status == 200
        assert {m["id"] for m in listed["data"]} == {"small", "fast", "other"}
        routed = _routed(tmp_path, lab)
        third = f"http://{mgmt['node3']}:8000"
        assert routed.get(third) == before.get(third, 0) + 1, (routed, before)
        assert sum(routed.values()) == sum(before.values()) + 3

        kept = json.loads((lab / ".halo" / "lab-gw.state.json").read_text())["deployments"]
        assert all(r["memory_gib"] for d in kept for r in d["replicas"])  # the next one counts it
        state = json.loads(halo("status", "--config", str(config), "--json").stdout)
        assert state["gateway"]["running"] is True
        assert [(d["name"], d["state"]) for d in state["deployments"]] == [
            ("small", "serving"), ("other", "serving"),
        ]  # fmt: skip
        one = json.loads(halo("status", "--config", str(config), "--name", "other",
                              "--json").stdout)  # fmt: skip
        assert [d["name"] for d in one["deployments"]] == ["other"]
        unknown = halo("status", "--config", str(config), "--name", "nope")
        assert unknown.returncode == 2 and "deployments: small, other" in unknown.stderr

        # one replica killed: requests go on on the other, then it is back by itself
        _node(tmp_path, lab, "node2", "pkill -f llama-server")
        failed = sum(_ask(url, key, "small")[0] != 200 for _ in range(20))
        assert failed <= 1
        _until("replica 1 serving again", lambda: json.loads(halo(
            "status", "--config", str(config), "--json").stdout)["deployments"][0]["state"]
            == "serving", 90)  # fmt: skip

        # one replica's log and a bench straight at a replica (with the worker key)
        log = halo("logs", "--config", str(config), "--name", "small", "--replica", "1", "-n", "50")
        assert log.returncode == 0 and "slot" in log.stdout, log.stderr  # llama-server's words
        bench = halo("bench", "serve", "--config", str(config), "--name", "other", "--json",
                     "--concurrency", "1", "--prompts", "2", "--output-len", "8", "--out",
                     str(tmp_path / "bench.json"))  # fmt: skip
        assert bench.returncode == 0, bench.stderr
        assert json.loads(bench.stdout)["levels"][0]["errors"] == 0

        # revoked: refused within 5 s
        assert halo("gateway", "key", "revoke", "alice", "--config", str(config)).returncode == 0
        revoked = time.monotonic()
        _until("the revoked key refused", lambda: _ask(url, key, "small")[0] == 401, 5)
        assert time.monotonic() - revoked <= 5
        used = json.loads(halo("gateway", "key", "list", "--config", str(config), "--json").stdout)
        assert used[0]["name"] == "alice" and used[0]["requests"] >= 23
        assert key not in json.dumps(used)

        # one deployment stopped, the other serves on
        key2 = json.loads(halo("gateway", "key", "add", "bob", "--config", str(config),
                               "--json").stdout)["key"]  # fmt: skip
        assert halo("stop", "small", "--config", str(config)).returncode == 0
        _until("bob's key taken", lambda: _ask(url, key2, "other")[0] == 200, 10)
        for node in ("node1", "node2"):
            assert _node(tmp_path, lab, node, "pgrep -c llama-server || true").strip() == "0"
        state = json.loads(halo("status", "--config", str(config), "--json").stdout)
        assert [(d["name"], d["state"]) for d in state["deployments"]] == [("other", "serving")]
    finally:
        halo("stop", "--config", str(config), cwd=tmp_path)
        halo("gateway", "stop", "--config", str(config), cwd=tmp_path)
        for node in ("node1", "node2", "node3"):
            assert _node(tmp_path, lab, node, LEFTOVER).strip() == "clean", node
        halo("lab", "down", "--name", "gw", "--dir", str(lab))
