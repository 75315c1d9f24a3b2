"""The capacity planner: catalog against published sizes, hand-worked formulas, properties, bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_cluster.capacity import catalog
from halo_cluster.capacity.engines import find_engine
from halo_cluster.capacity.estimate import (
    Request,
    allreduce_s,
    kv_bytes_per_token,
    layout_rows,
    recommend,
    step_seconds,
    weight_bytes,
)
from halo_cluster.capacity.hf_config import model_from_hf_config
from halo_cluster.capacity.params import experts_touched, published_active_params, total_params
from halo_cluster.capacity.spec import ModelSpec
from halo_cluster.errors import UsageError

MODELS = catalog.models()
STRIX = catalog.find_hardware("strix-halo-128")
ROCE, TCP = catalog.find_link("roce"), catalog.find_link("tcp")


def test_catalog_has_the_models_users_ask_for() -> None:
    assert len(MODELS) >= 12
    for key in (
        "llama-3.1-8b",
        "llama-3.3-70b",
        "llama-3.1-405b",
        "qwen3-32b",
        "qwen3-235b-a22b",
        "qwen3-coder-30b-a3b",
        "gpt-oss-20b",
        "gpt-oss-120b",
        "glm-4.5-air",
        "minimax-m2",
        "deepseek-v3",
    ):
        assert key in MODELS


@pytest.mark.parametrize("key", sorted(MODELS))
def test_computed_size_within_3_percent_of_published(key: str) -> None:
    model = MODELS[key]
    assert model.params_b is not None
    assert abs(total_params(model) / 1e9 - model.params_b) / model.params_b < 0.03


MOE = sorted(k for k, m in MODELS.items() if m.is_moe)


@pytest.mark.parametrize("key", MOE)
def test_active_params_within_3_percent_of_published(key: str) -> None:
    """Counted the way each vendor counts (embedding tables in or out), see the catalog."""
    model = MODELS[key]
    assert model.active_params_b is not None and model.source
    published = published_active_params(model) / 1e9
    assert abs(published - model.active_params_b) / model.active_params_b < 0.03


def test_hand_worked_llama_8b() -> None:
    m = MODELS["llama-3.1-8b"]
    # per layer: attention 2·4096·4096 + 2·4096·1024 = 41 943 040; MLP 3·4096·14336 = 176 160 768
    # 32 layers + embeddings 2·128256·4096 = 1 050 673 152
    assert total_params(m) == 32 * (41_943_040 + 176_160_768) + 1_050_673_152
    assert weight_bytes(m, "bf16") == total_params(m) * 2
    assert weight_bytes(m, "int4") == pytest.approx(
        (total_params(m) - 1_050_673_152) * 4.25 / 8 + 1_050_673_152 * 2
    )
    # KV: 32 layers · (K+V) · 8 heads · 128 · 2 bytes = 131 072 bytes per token
    assert kv_bytes_per_token(m, 1, 1) == 131_072
    assert kv_bytes_per_token(m, 2, 1) == 65_536
    assert kv_bytes_per_token(m, 16, 1) == 32 * 2 * 1 * 128 * 2  # one KV head per rank, replicated


def test_hand_worked_allreduce_and_step() -> None:
    # 2 ranks, 16 KiB: 2 steps of 5.2 µs + 1 × 16384 B × 8 / 50 Gb/s
    assert allreduce_s(16384, 2, ROCE) == pytest.approx(2 * 5.2e-6 + 16384 * 8 / 50e9)
    assert allreduce_s(16384, 1, ROCE) == 0.0
    m = MODELS["llama-3.3-70b"]
    compute, network = step_seconds(Request(m, STRIX, ROCE, context=2), 2, 1, 1)
    assert network == pytest.approx(162 * allreduce_s(8192 * 2, 2, ROCE))
    # a step reads every weight but the input embedding table (one row per token), half per
    # rank, plus the KV of the average context (1 token × 163 840 bytes per rank), at vLLM's
    # share of 256 GB/s; then vLLM's fixed cost per layer (80 layers)
    tuning = find_engine("vllm").tunings["strix-halo-128"]
    read = (weight_bytes(m, "bf16") - 128256 * 8192 * 2) / 2 + 163840 * 1
    expected = read / (256e9 * tuning.dense.central) + 80 * tuning.per_layer_us * 1e-6
    assert compute == pytest.approx(expected)


def test_the_seed_claim_70b_tp2() -> None:
    """162 all-reduces per token: ~70 µs each over TCP is > 11 ms, ~5 µs over RoCE is < 3 ms."""
    m = MODELS["llama-3.3-70b"]
    tcp = step_seconds(Request(m, STRIX, TCP), 2, 1, 1)[1] * 1e3
    roce = step_seconds(Request(m, STRIX, ROCE), 2, 1, 1)[1] * 1e3
    assert tcp > 11 * 2 and roce < 3  # ring all-reduce on 2 ranks is 2 steps of α


def test_field_sanity_70b_bf16_tp2_strix() -> None:
    rows = layout_rows(Request(MODELS["llama-3.3-70b"], STRIX, ROCE))
    tp2 = next(r for r in rows if r.layout == "TP2")
    assert tp2.fits and abs(tp2.tokens_per_s - 1.8) / 1.8 < 0.15
    assert tp2.tokens_per_s_low < tp2.tokens_per_s < tp2.tokens_per_s_high


def test_moe_batches_touch_more_experts() -> None:
    m = MODELS["qwen3-235b-a22b"]
    assert experts_touched(m, 1) == pytest.approx(8)
    assert 8 < experts_touched(m, 8) < experts_touched(m, 64) < 128
    assert experts_touched(MODELS["llama-3.1-8b"], 8) == 0


def test_does_not_fit_and_recommendation() -> None:
    rows = layout_rows(Request(MODELS["llama-3.1-405b"], STRIX, ROCE))
    assert not any(r.fits for r in rows)
    best, reason = recommend(rows)
    assert best is None and "no layout fits" in reason
    rows = layout_rows(Request(MODELS["llama-3.1-405b"], STRIX, ROCE, quant="int4", nodes=4))
    assert any(r.fits for r in rows) and recommend(rows)[0] is not None


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(sorted(MODELS)),
    nodes=st.integers(1, 7),
    quant=st.sampled_from(["bf16", "fp8", "int4"]),
)
def test_more_nodes_never_more_weight_per_node(key: str, nodes: int, quant: str) -> None:
    m = MODELS[key]
    fewer = layout_rows(Request(m, STRIX, ROCE, nodes=nodes, quant=quant))[0]
    more = layout_rows(Request(m, STRIX, ROCE, nodes=nodes + 1, quant=quant))[0]
    assert more.weights_gib_per_node <= fewer.weights_gib_per_node + 1e-9


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(sorted(MODELS)),
    alpha=st.floats(0, 500),
    extra=st.floats(0.01, 500),
    batch=st.integers(1, 64),
)
def test_more_latency_never_more_tokens(key: str, alpha: float, extra: float, batch: int) -> None:
    m = MODELS[key]
    fast = replace(ROCE, alpha_us=alpha)
    slow = replace(ROCE, alpha_us=alpha + extra)
    for a, b in zip(
        layout_rows(Request(m, STRIX, fast, batch=batch)),
        layout_rows(Request(m, STRIX, slow, batch=batch)),
        strict=True,
    ):
        assert b.tokens_per_s <= a.tokens_per_s + 1e-12


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_hf_config_reads_a_llama(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "tie_word_embeddings": False,
            "max_position_embeddings": 131072,
        },
    )
    spec = model_from_hf_config(path)
    assert total_params(spec) == total_params(MODELS["llama-3.1-8b"])
    assert spec.head_dim == 128 and spec.context_limit == 131072


def test_hf_config_reads_a_moe(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_attention_heads": 32,
            "num_hidden_layers": 48,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "vocab_size": 151936,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 768,
        },
    )
    assert total_params(model_from_hf_config(path)) == total_params(MODELS["qwen3-coder-30b-a3b"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON \\(Expecting property name"),
        ("[1, 2]", "expected a JSON object"),
        ({"hidden_size": 4096}, "missing num_hidden_layers"),
        (
            {
                "hidden_size": 4096,
                "intermediate_size": 1,
                "num_attention_heads": 32,
                "num_hidden_layers": -3,
                "vocab_size": 10,
            },
            "num_hidden_layers must be a whole number",
        ),
    ],
)
def test_bad_hf_config(tmp_path: Path, content: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        model_from_hf_config(write(tmp_path, content))


def test_links_and_measured_results(tmp_path: Path) -> None:
    assert catalog.find_link("roce").id == "roce-e810" and catalog.find_link("tcp").id == "tcp-e810"
    result = tmp_path / "collective.json"
    result.write_text(
        json.dumps(
            {"schema": "halo.bench.collective/1", "fit": {"alpha_us": 41.0, "beta_gbps": 9.5}}
        )
    )
    measured = catalog.find_link(str(result))
    assert (measured.alpha_us, measured.beta_gbps) == (41.0, 9.5)
    result.write_text("{}")
    with pytest.raises(UsageError, match=r"fit\.alpha_us"):
        catalog.find_link(str(result))
    with pytest.raises(UsageError, match="unknown link"):
        catalog.find_link("carrier-pigeon")


def test_hf_config_reads_qwen3_next_hybrid_attention(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "model_type": "qwen3_next",
            "hidden_size": 2048,
            "intermediate_size": 5120,
            "num_attention_heads": 16,
            "num_hidden_layers": 48,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "vocab_size": 151936,
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "full_attention_interval": 4,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "max_position_embeddings": 262144,
        },
    )
    spec = model_from_hf_config(path)
    field_config = catalog.capacity_data("field.json")["configs"]["qwen3-next-80b-a3b"]
    assert total_params(spec) == total_params(ModelSpec(id="f", **field_config))
    # llama-bench reports 79.67 B for Qwen3-Coder-Next
    assert abs(total_params(spec) / 1e9 - 79.67) < 0.01
    assert (spec.attention_layers, spec.shared_experts, spec.attention_output_gate) == (12, 1, True)
