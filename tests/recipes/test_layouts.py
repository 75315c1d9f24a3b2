"""The layouts halo tune runs (halo_cluster.recipes.layouts): names both ways, the
candidates of a cluster, what serve is given for each."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from halo_cluster.engines import llama_cpp_layouts, vllm_layouts
from halo_cluster.errors import UsageError
from halo_cluster.recipes.layouts import candidates, parse_layout


def test_four_nodes_of_a_model_with_eight_heads() -> None:
    names = [layout.name for layout in candidates(4, heads=8)]
    assert names == [
        "vllm TP1", "llama.cpp single",
        "vllm TP2", "vllm PP2", "llama.cpp RPC2",
        "vllm PP3", "llama.cpp RPC3",  # TP3 does not divide 8 heads
        "vllm TP4", "vllm TP2xPP2", "vllm PP4", "llama.cpp RPC4",
    ]  # fmt: skip


def test_one_engine_only() -> None:
    assert [x.name for x in candidates(2, ("llama.cpp",))] == ["llama.cpp single", "llama.cpp RPC2"]


def test_what_serve_is_given() -> None:
    assert llama_cpp_layouts.layout(3).serve_args() == {"engine": "llama.cpp", "nodes": 3}
    assert vllm_layouts.layout(4, 2, 2).serve_args() == {
        "engine": "vllm",
        "executor": "mp",
        "nodes": 4,
        "tp": 2,
        "pp": 2,
    }
    assert vllm_layouts.layout(4, 2, 2).planner == "TP2xPP2"


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


def test_a_registered_engine_brings_its_own_layouts() -> None:
    """The test-only relay engine (one module, one registry line) appears in the layouts
    'halo tune' runs and reads back by name, with nothing changed outside its module."""
    from halo_cluster import engine_registry
    from halo_cluster.recipes.tune import ordered

    engine_registry.register("relay", "tests.engines.relay_engine")
    try:
        names = [x.name for x in candidates(3, ("relay", "llama.cpp"))]
        assert names == [
            "llama.cpp single",
            "llama.cpp RPC2",
            "relay HOP2",
            "llama.cpp RPC3",
            "relay HOP3",
        ]
        hop = parse_layout("relay hop3", 3)
        assert hop.serve_args() == {"engine": "relay", "nodes": 3}
        assert [x.name for x in ordered([hop])] == ["relay HOP3"]  # no one-node layout
        with pytest.raises(UsageError, match="the relay runs HOPn"):
            parse_layout("relay TP2", 3)
    finally:
        engine_registry.unregister("relay")
