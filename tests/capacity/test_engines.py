"""Engines as data: layouts, the llama.cpp RPC per-token messages worked by hand, the
efficiencies derived from the field table, and the capacity planner's properties."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster.capacity import catalog, field
from halo_cluster.capacity.engines import engines, find_engine
from halo_cluster.capacity.estimate import (
    Request,
    evaluate,
    layout_rows,
    rpc_stages,
    step_seconds,
)
from halo_cluster.capacity.spec import Link, ModelSpec
from halo_cluster.errors import UsageError

MODELS = catalog.models()
STRIX = catalog.find_hardware("strix-halo-128")
ROCE, TCP = catalog.find_link("roce"), catalog.find_link("tcp")
LLAMA_CPP, VLLM = find_engine("llama.cpp"), find_engine("vllm")


def test_engines_and_unknown_engine() -> None:
    assert list(engines()) == ["vllm", "llama.cpp"]
    with pytest.raises(
        UsageError, match=r"unknown engine 'sglang'; choose one of vllm, llama\.cpp"
    ):
        find_engine("sglang")


def test_llama_cpp_layouts_single_and_rpc() -> None:
    m = MODELS["gpt-oss-120b"]
    single = layout_rows(Request(m, STRIX, ROCE, nodes=1, quant="MXFP4", engine=LLAMA_CPP))
    assert [(r.layout, r.tp, r.pp, r.engine, r.decode_ms_network) for r in single] == [
        ("single", 1, 1, "llama.cpp", 0.0)
    ]
    rpc = layout_rows(Request(m, STRIX, ROCE, nodes=3, quant="MXFP4", engine=LLAMA_CPP))
    assert [(r.layout, r.tp, r.pp) for r in rpc] == [("RPC3", 1, 3)]
    assert rpc[0].weights_gib_per_node == pytest.approx(single[0].weights_gib_per_node / 3)


def test_vllm_layouts_unchanged() -> None:
    rows = layout_rows(Request(MODELS["llama-3.1-8b"], STRIX, ROCE, nodes=4))
    assert [(r.layout, r.tp, r.pp, r.engine) for r in rows] == [
        ("TP4", 4, 1, "vllm"),
        ("TP2xPP2", 2, 2, "vllm"),
        ("PP4", 1, 4, "vllm"),
    ]


def test_rpc_messages_per_token_by_hand() -> None:
    """One remote stage of a 2-node split of Llama-3.1-8B (hidden 4096, 16 of 32 layers),
    batch 1, 128 cells of context (padded to 256 KV cells)."""
    rpc = LLAMA_CPP.rpc
    assert rpc is not None
    header = 9 + 296 + 9  # command + size, rpc_tensor, cache flag + offset
    sends = (header + 4096 * 4) + (header + 4) + (header + 256 * 2)
    graph = 9 + 12 + 8 * 30 * 16 + 296 * 40 * 16  # sent whole once per 256 steps
    recompute = 9 + 4  # replayed on the other 255
    request, reply = 9 + 296 + 16, 8 + 4096 * 4
    expected = sends + (graph + 255 * recompute) / 256 + request + reply
    assert rpc.stage_bytes(4096, 16, 1, 128) == pytest.approx(expected)
    seconds = rpc.stage_seconds(4096, 16, 1, 128, alpha_us=5.2, beta_gbps=50)
    assert seconds == pytest.approx(2 * 5.2e-6 + expected * 8 / 50e9)


def test_rpc_network_is_a_round_trip_and_a_fixed_cost_per_remote_node() -> None:
    m = MODELS["llama-3.1-8b"]
    req = Request(m, STRIX, TCP, nodes=3, quant="Q4_K_M", context=256, engine=LLAMA_CPP)
    _, network = step_seconds(req, 1, 3, 1)
    assert LLAMA_CPP.rpc is not None
    stage = LLAMA_CPP.rpc.stage_seconds(4096, 32 / 3, 1, 128, TCP.alpha_us, TCP.beta_gbps)
    fixed = LLAMA_CPP.tuning(STRIX).stage_us("tcp") * 1e-6
    assert fixed == 2.8e-3  # the median of four published one-node/two-node pairs
    assert network == pytest.approx(2 * (stage + fixed))
    # its wire time is far less than tensor parallelism's 2·L + 2 all-reduces
    tp = step_seconds(Request(m, STRIX, TCP, nodes=2, context=256), 2, 1, 1)[1]
    assert network - 2 * fixed < tp / 10
    # over RDMA the stage costs what PR #20590 measured less than over TCP
    rdma = step_seconds(replace(req, link=ROCE), 1, 3, 1)[1]
    wire = LLAMA_CPP.rpc.stage_seconds(4096, 32 / 3, 1, 128, ROCE.alpha_us, ROCE.beta_gbps)
    assert rdma == pytest.approx(2 * (wire + 0.77e-3))


def test_an_older_build_resends_the_graph_and_waits_for_more_replies() -> None:
    assert LLAMA_CPP.rpc is not None
    old = replace(LLAMA_CPP.rpc, graph_reuse=False, round_trips=2)
    graph = 9 + 12 + 8 * 30 * 16 + 296 * 40 * 16
    recompute = 9 + 4
    extra = graph - (graph + 255 * recompute) / 256
    assert old.stage_bytes(4096, 16, 1, 128) == pytest.approx(
        LLAMA_CPP.rpc.stage_bytes(4096, 16, 1, 128) + extra
    )
    assert old.stage_seconds(4096, 16, 1, 128, 70.0, 1.0) - LLAMA_CPP.rpc.stage_seconds(
        4096, 16, 1, 128, 70.0, 1.0
    ) == pytest.approx(2 * 70e-6 + extra * 8 / 1e9)


def test_a_cpu_only_head_gets_the_logits_back_from_the_last_worker() -> None:
    m = MODELS["llama-3.1-8b"]
    cpu = replace(STRIX, cpu_only=True)
    req = Request(m, cpu, TCP, nodes=3, quant="Q4_K_M", context=256, engine=LLAMA_CPP)
    first, last = rpc_stages(req, 3, 1)
    extra = (m.vocab - m.hidden) * 4 * 8 / (TCP.beta_gbps * 1e9)
    assert last - first == pytest.approx(extra)
    gpu_first, gpu_last = rpc_stages(replace(req, hardware=STRIX), 3, 1)
    assert gpu_first == gpu_last == pytest.approx(first)


@pytest.mark.parametrize("engine_id", ["llama.cpp", "vllm"])
def test_stored_efficiencies_are_derived_from_the_field_table(engine_id: str) -> None:
    tuning = find_engine(engine_id).tunings["strix-halo-128"]
    derived = field.derive(engine_id, tuning.per_layer_us, tuning.per_linear_layer_us)
    assert derived == {"dense": tuning.dense, "moe": tuning.moe}
    for eff in derived.values():
        assert 0 < eff.low <= eff.central <= eff.high <= 1


def test_hardware_without_measurements_falls_back_to_its_profile() -> None:
    spark = catalog.find_hardware("dgx-spark")
    tuning = LLAMA_CPP.tuning(spark)
    assert (tuning.dense.central, tuning.moe.high, tuning.per_layer_us) == (0.7, 0.7, 0.0)
    assert (
        tuning.dense.source
        == "hardware profile dgx-spark (no published llama.cpp measurements on it)"
    )


def test_linear_attention_layers_have_no_kv_and_cost_their_own() -> None:
    config = catalog.capacity_data("field.json")["configs"]["qwen3-next-80b-a3b"]
    m = ModelSpec(id="qwen3-next", **config)
    assert m.attention_layers == 12
    row = evaluate(Request(m, STRIX, ROCE, nodes=1, quant="Q4_K_M", engine=LLAMA_CPP), 1, 1, "x")
    plain = replace(m, full_attention_interval=0)
    other = evaluate(Request(plain, STRIX, ROCE, nodes=1, quant="Q4_K_M", engine=LLAMA_CPP), 1, 1)
    assert row.kv_gib_per_node == pytest.approx(other.kv_gib_per_node / 4)
    assert row.tokens_per_s < other.tokens_per_s


def _request(key: str, engine: str, quant: str, nodes: int, bw: float, batch: int) -> Request:
    hw = replace(STRIX, memory_bw_gbs=bw)
    return Request(
        MODELS[key], hw, ROCE, nodes=nodes, quant=quant, batch=batch, engine=find_engine(engine)
    )


@settings(max_examples=80, deadline=None)
@given(
    key=st.sampled_from(sorted(MODELS)),
    engine=st.sampled_from(["vllm", "llama.cpp"]),
    quant=st.sampled_from(["bf16", "fp8", "int4", "Q4_K_M", "Q8_0", "IQ2_XXS", "MXFP4"]),
    nodes=st.integers(1, 4),
    bw=st.floats(1, 5000),
    extra=st.floats(0.1, 5000),
    batch=st.integers(1, 64),
)
def test_more_bandwidth_never_fewer_tokens(
    key: str, engine: str, quant: str, nodes: int, bw: float, extra: float, batch: int
) -> None:
    slow = layout_rows(_request(key, engine, quant, nodes, bw, batch))
    fast = layout_rows(_request(key, engine, quant, nodes, bw + extra, batch))
    for a, b in zip(slow, fast, strict=True):
        assert b.tokens_per_s >= a.tokens_per_s - 1e-12
        assert b.tokens_per_s_batch1 >= a.tokens_per_s_batch1 - 1e-12
        assert b.tokens_per_s_low <= b.tokens_per_s <= b.tokens_per_s_high


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(sorted(MODELS)),
    engine=st.sampled_from(["vllm", "llama.cpp"]),
    quant=st.sampled_from(["bf16", "Q4_K_M", "Q2_K", "MXFP4"]),
    nodes=st.integers(1, 7),
)
def test_more_nodes_never_more_weight_per_node_for_either_engine(
    key: str, engine: str, quant: str, nodes: int
) -> None:
    fewer = layout_rows(_request(key, engine, quant, nodes, 256, 1))
    more = layout_rows(_request(key, engine, quant, nodes + 1, 256, 1))
    assert min(r.weights_gib_per_node for r in more) <= min(r.weights_gib_per_node for r in fewer)


@settings(max_examples=40, deadline=None)
@given(alpha=st.floats(0, 500), extra=st.floats(0.01, 500), nodes=st.integers(2, 6))
def test_rpc_more_latency_never_more_tokens(alpha: float, extra: float, nodes: int) -> None:
    m = MODELS["qwen3-235b-a22b"]
    fast = Link("a", "a", alpha, 25.0, "")
    slow = Link("b", "b", alpha + extra, 25.0, "")
    a = layout_rows(Request(m, STRIX, fast, nodes=nodes, quant="Q3_K_M", engine=LLAMA_CPP))[0]
    b = layout_rows(Request(m, STRIX, slow, nodes=nodes, quant="Q3_K_M", engine=LLAMA_CPP))[0]
    assert b.tokens_per_s < a.tokens_per_s
