"""The layouts halo tune runs (halo_cluster.recipes.layouts): names both ways, the
candidates of a cluster, what serve is given for each."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.errors import UsageError
from halo_cluster.recipes.layouts import Layout, candidates, parse_layout


def test_four_nodes_of_a_model_with_eight_heads() -> None:
    names = [layout.name for layout in candidates(4, heads=8)]
    assert names == [
        "llama.cpp single", "vllm TP1",
        "llama.cpp RPC2", "vllm TP2", "vllm PP2",
        "llama.cpp RPC3", "vllm PP3",  # TP3 does not divide 8 heads
        "llama.cpp RPC4", "vllm TP4", "vllm TP2xPP2", "vllm PP4",
    ]  # fmt: skip


def test_one_engine_only() -> None:
    assert [x.name for x in candidates(2, ("llama.cpp",))] == ["llama.cpp single", "llama.cpp RPC2"]


def test_what_serve_is_given() -> None:
    assert Layout("llama.cpp", 3).serve_args() == {"engine": "llama.cpp", "nodes": 3}
    assert Layout("vllm", 4, 2, 2).serve_args() == {
        "engine": "vllm",
        "executor": "mp",
        "nodes": 4,
        "tp": 2,
        "pp": 2,
    }
    assert Layout("vllm", 4, 2, 2).planner == "TP2xPP2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vllm TP8", r"layout vllm TP8 needs 8 node\(s\); the cluster has 4"),
        ("llama.cpp TP2", "llama.cpp runs single or RPCn"),
        ("vllm RPC2", "vLLM runs TPn, PPn or TPnxPPm"),
        ("sglang TP2", "give one like 'vllm TP2'"),
        ("vllm TP0", r"needs 0 node\(s\)"),
    ],
)
def test_refused_names(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_layout(text, 4)


@given(nodes=st.integers(1, 8), heads=st.sampled_from([None, 1, 8, 12, 64]))
def test_every_candidate_reads_back_from_its_name(nodes: int, heads: int | None) -> None:
    for layout in candidates(nodes, heads=heads):
        assert parse_layout(layout.name, nodes) == layout
        assert layout.tp * layout.pp == layout.nodes or layout.engine == "llama.cpp"
