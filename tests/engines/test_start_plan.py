"""Engines' start plans: vLLM TP2 (mp executor) and llama.cpp RPC2 against golden JSON, and
the one executor against the steps the supervisor replays (the same scripts, in order)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from halo_cluster.engines import process
from halo_cluster.engines.start import StartPlan, start_steps
from tests.cluster import test_llama_serve as llama
from tests.cluster import test_serve as vllm
from tests.conftest import FIXTURES

GOLDEN = FIXTURES / "expected" / "start"
VLLM_LOGS = vllm.VLLM


def served(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, nodes: dict[str, Any], serve: Any, **asked: Any
) -> tuple[StartPlan, Any]:
    """Serve on scripted nodes; the plan the bring-up ran."""
    plans: list[StartPlan] = []
    run = process.run_plan

    def spy(clients: Any, plan: StartPlan, *rest: Any) -> None:
        plans.append(plan)
        run(clients, plan, *rest)

    monkeypatch.setattr(process, "run_plan", spy)
    srv = vllm.cluster(tmp_path, nodes, serve, up=False)
    result = vllm.serve(srv, wait_s=5, **asked)
    assert result.problems == [] and len(plans) == 1
    return plans[0], srv


def golden(name: str, plan: StartPlan) -> None:
    path = GOLDEN / f"{name}.json"
    got = json.loads(json.dumps(plan.to_dict()))
    if os.environ.get("HALO_WRITE_GOLDEN"):  # regenerate: read the diff before committing
        path.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(path.read_text())


def replayed(plan: StartPlan, nodes: dict[str, Any], head: str) -> None:
    """Each node ran the plan's steps, in the plan's order (what a restart runs again)."""
    steps = start_steps(plan, "lab", head)
    for name, node in nodes.items():
        mine = [s.stdin for s in steps if s.node == name]
        ran = [s for s in node.scripts if s in mine]
        assert ran == mine


def test_vllm_tp2_mp_start_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    logs = [(VLLM_LOGS / f"mp-tp2-node{i}.log").read_text() for i in (1, 2)]
    nodes = {
        "node1": vllm.Node(logs[0], (24_000, 40, None)),
        "node2": vllm.Node(logs[1], (24_000, 9, None)),
    }
    serve = vllm.ServeConfig(model="/m", sections=vllm.vllm_table(executor="mp"))
    plan, _srv = served(monkeypatch, tmp_path, nodes, serve, tp=2)
    golden("vllm-tp2-mp", plan)
    replayed(plan, nodes, "node1")


def test_llama_cpp_rpc2_start_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HALO_TEST_KEY", "k-secret")
    nodes = llama.two_nodes((12_000, 30))
    plan, _srv = served(monkeypatch, tmp_path, nodes, llama.SERVE, model=llama.GGUF)
    golden("llama-cpp-rpc2", plan)
    replayed(plan, nodes, "node1")
    assert "k-secret" not in json.dumps(plan.to_dict()) + repr(plan)
    head = plan.stages[-1][0]
    assert dict(head.env)["LLAMA_API_KEY"] == "k-secret"  # only in the start script's env
