"""The token witness in the lab with the real engine (vLLM's CPU build, its own mp executor,
TP=2 across two lab nodes, each rank opening its own node's copy of the model): one node's
greedy answers recorded as the reference, the two-node layout agreeing with it, then other
weights in node2's copy — both transport witnesses still pass, the token witness fails,
naming the layout and the first differing position, and the server is stopped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cluster.test_serve_lab import LEFTOVER, _node
from tests.conftest import halo
from tests.models_once import TinyModels

pytestmark = pytest.mark.engine
STORE_PATH = "/var/lib/halo/models/tiny"


def _serve(config: Path, cwd: Path, *more: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    done = halo(
        "serve", STORE_PATH, "--config", str(config), "--executor", "mp", "--no-supervise",
        "--json", *more, cwd=cwd, timeout=600,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_other_weights_on_one_node_fail_the_token_witness_alone(
    tmp_path: Path, lab_host: None, vllm_engine: str, tiny_models: TinyModels
) -> None:

    lab = tmp_path / "D"
    config = lab / "halo.toml"
    assert halo("lab", "up", "--nodes", "2", "--name", "tok", "--dir", str(lab)).returncode == 0
    try:
        tiny_models.copy(lab / "model")
        tiny_models.copy(lab / "other", seed=7)
        synced = halo(
            "model", "sync", str(lab / "model"), "--name", "tiny", "--config", str(config)
        )
        assert synced.returncode == 0, synced.stderr
        code, one = _serve(config, tmp_path, "--tp", "1", "--nodes", "1", "--reference", "record")
        assert code == 0 and one["tokens"]["recorded"] == "vllm tp1 on node1", one
        halo("stop", "--config", str(config), cwd=tmp_path)
        code, same = _serve(config, tmp_path, "--reference", "full")
        assert code == 0, same["problems"]
        assert (same["proven"], same["layout"]) == ("socket", "vllm tp2 on node1+node2")
        # TP=2 adds in another order than TP=1: log-probabilities move by bf16's last bit
        # (0.0078 nats measured), close calls of the random model may flip; within tolerance
        assert same["tokens"]["ok"], same["tokens"]["problems"]
        assert same["tokens"]["drift_nats"] < same["tokens"]["tolerance_nats"]
        assert len(same["tokens"]["prompts"]) == 4
        halo("stop", "--config", str(config), cwd=tmp_path)
        # node2's copy of the weights is another model's (same shapes, another seed)
        shutil.copyfile(
            lab / "other" / "model.safetensors",
            lab / "stores" / "node2" / "tiny" / "model.safetensors",
        )
        code, wrong = _serve(config, tmp_path)
        assert (code, wrong["stopped"], wrong["proven"]) == (1, True, None)
        assert wrong["engine"]["backend"] == "gloo" and wrong["traffic"]["problems"] == []
        assert wrong["tokens"]["ok"] is False and wrong["problems"] == wrong["tokens"]["problems"]
        first = wrong["problems"][0]
        assert first.startswith(
            "vllm tp2 on node1+node2: prompt 1 differs from the one-node reference "
            "(vllm tp1 on node1) at token "
        ), first
        assert _node(tmp_path, "D", "node1", LEFTOVER).strip() == ""
        assert _node(tmp_path, "D", "node2", LEFTOVER).strip() == ""
    finally:
        halo("stop", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "tok", "--dir", str(lab))
