"""halo tune and halo run in the lab with both real engines (llama.cpp's build and vLLM's
CPU build), 2 nodes: every layout asked for (and each engine's one-node layout, which
records the reference) served, proven by the three witnesses and measured beside the
planner's prediction; halo run serving the winner, then, run again, only checking it; stop
and down leaving nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.test_serve_lab import LEFTOVER, _node
from tests.conftest import halo
from tests.models_once import TinyModels

pytestmark = pytest.mark.engine


def test_tune_then_run_the_winner(
    tmp_path: Path, lab_host: None, vllm_engine: str, llama_cpp: str, tiny_models: TinyModels
) -> None:
    lab = tmp_path / "D"
    config = lab / "halo.toml"
    assert halo("lab", "up", "--nodes", "2", "--name", "tun", "--dir", str(lab)).returncode == 0
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}  # its own results (and no lab profile)
    try:
        tiny_models.copy(lab / "model", "both")
        tuned = halo(
            "tune", str(lab / "model"), "--config", str(config), "--layouts",
            "llama.cpp RPC2,vllm TP2", "--concurrency", "1", "--prompts", "4", "--json",
            cwd=tmp_path, env=env, timeout=1200,
        )  # fmt: skip
        assert tuned.returncode == 0, tuned.stderr[-2000:]
        doc = json.loads(tuned.stdout)
        assert doc["schema"] == "halo.tune/1" and "incomplete" not in doc
        rows = {row["layout"]["name"]: row for row in doc["rows"]}
        assert list(rows) == ["llama.cpp single", "vllm TP1", "llama.cpp RPC2", "vllm TP2"]
        for name, row in rows.items():
            assert row["error"] is None, (name, row["error"], row.get("engine_error"))
            assert row["measured"]["1"]["tokens_per_s"] > 0 and row["measured"]["1"]["errors"] == 0
        # lab nodes have no power source: every layout says so, and no number
        assert all(
            row["measured"]["1"]["energy"]["joules_per_token"] is None
            and {n["problem"] for n in row["measured"]["1"]["energy"]["nodes"]}
            == {"no power source"}
            for row in rows.values()
        )
        assert rows["llama.cpp single"]["tokens"] == {"recorded": "llama.cpp on node1"}
        assert rows["vllm TP1"]["tokens"] == {"recorded": "vllm tp1 on node1"}
        assert rows["llama.cpp RPC2"]["tokens"]["ok"] and rows["vllm TP2"]["tokens"]["ok"]
        assert rows["vllm TP2"]["proven"] == rows["llama.cpp RPC2"]["proven"] == "socket"
        # no lab profile was measured here: the planner says so instead of a number
        assert all(row["predicted_tokens_per_s"] is None for row in rows.values())
        assert any("halo lab profile" in note for note in doc["planner"]["notes"])
        winner = doc["winner"]["layout"]
        assert winner in rows and Path(json.loads(tuned.stdout)["saved"]).is_file()
        ran = halo(
            "run", str(lab / "model"), "--config", str(config), "--json",
            cwd=tmp_path, env=env, timeout=900,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr[-2000:]
        first = json.loads(ran.stdout)
        assert (first["layout"], first["already_running"]) == (winner, False)
        assert first["reason"].startswith("the winner of halo tune (tune-")
        assert first["measured_tokens_per_s"] > 0 and first["serve"]["problems"] == []
        assert first["energy"]["joules_per_token"] is None  # no power source here: no number
        assert {n["problem"] for n in first["energy"]["nodes"]} == {"no power source"}
        again = json.loads(
            halo("run", str(lab / "model"), "--config", str(config), "--json",
                 cwd=tmp_path, env=env, timeout=300).stdout
        )  # fmt: skip
        assert (again["already_running"], again["url"]) == (True, first["url"])
        stopped = halo("stop", "--config", str(config), cwd=tmp_path)
        assert stopped.stdout.strip() == "server stopped", stopped.stdout
        for node in ("node1", "node2"):
            assert _node(tmp_path, "D", node, LEFTOVER).strip() == ""
    finally:
        halo("stop", "--config", str(config), cwd=tmp_path)
        halo("lab", "down", "--name", "tun", "--dir", str(lab))
