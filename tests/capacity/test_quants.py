"""Weight formats: the type table against ggml's own block sizes, the llama.cpp mixes against
the file sizes llama-quantize publishes, and the bytes a step reads."""

from __future__ import annotations

import gguf
import pytest

from halo_cluster.capacity import catalog
from halo_cluster.capacity.quants import find_quant, quant_names, role_bits, type_bits, type_sizes
from halo_cluster.capacity.weights import GIB, WeightBytes, from_quant, scaled_to_file
from halo_cluster.errors import UsageError

MODELS = catalog.models()
LLAMA3_8B = MODELS["llama-3.1-8b"]  # the same shape as Llama-3-8B
# llama.cpp tools/quantize/quantize.cpp QUANT_OPTIONS: file size of Llama-3-8B in GiB
PUBLISHED_LLAMA3_8B_GIB = {
    "Q8_0": 7.96,
    "Q6_K": 6.14,
    "Q5_K_M": 5.33,
    "Q5_K_S": 5.21,
    "Q4_K_M": 4.58,
    "Q4_K_S": 4.37,
    "Q4_0": 4.34,
    "Q3_K_M": 3.74,
    "Q3_K_S": 3.41,
    "Q2_K": 2.96,
}
# the nominal bits per weight quantize.cpp lists for the IQ types and MXFP4
NOMINAL_BPW = {"IQ4_XS": 4.25, "IQ3_XXS": 3.06, "IQ2_XXS": 2.06, "MXFP4": 4.25}


@pytest.mark.parametrize("name", sorted(type_sizes()))
def test_type_sizes_are_ggmls(name: str) -> None:
    if name not in gguf.GGMLQuantizationType.__members__:
        assert name in {"FP8", "INT8", "INT4_G128", "INT8_G128"}  # safetensors formats
        return
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
    assert type_sizes()[name] == (block, size)


def test_bits_per_weight_table() -> None:
    assert {name: type_bits(name) for name in ("Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q3_K")} == {
        "Q8_0": 8.5,
        "Q6_K": 6.5625,
        "Q5_K": 5.5,
        "Q4_K": 4.5,
        "Q3_K": 3.4375,
    }
    assert {name: type_bits(name) for name in ("Q2_K", "IQ4_XS", "IQ3_XXS", "IQ2_XXS")} == {
        "Q2_K": 2.625,
        "IQ4_XS": 4.25,
        "IQ3_XXS": 3.0625,
        "IQ2_XXS": 2.0625,
    }
    assert type_bits("MXFP4") == 4.25 and type_bits("INT4_G128") == 4.25


def test_every_quant_the_issue_names_is_accepted() -> None:
    for name in (
        *PUBLISHED_LLAMA3_8B_GIB,
        *("IQ4_XS", "IQ3_XXS", "IQ2_XXS", "MXFP4"),
        *("bf16", "fp16", "fp8", "int8", "int4", "awq", "gptq"),
    ):
        assert name in quant_names()
    assert find_quant("q4_k_m").name == "Q4_K_M" and find_quant("AWQ").name == "awq"
    with pytest.raises(UsageError, match="unknown quantisation 'Q9_X'"):
        find_quant("Q9_X")


@pytest.mark.parametrize("name", quant_names())
def test_mix_shares_are_shares(name: str) -> None:
    quant = find_quant(name)
    for role, mix in quant.roles.items():
        assert 0 < sum(mix.values()) <= 1, role
        assert all(t in type_sizes() for t in mix)
    assert {quant.base, quant.embedding, quant.output, quant.router} <= set(type_sizes())


@pytest.mark.parametrize(("name", "gib"), sorted(PUBLISHED_LLAMA3_8B_GIB.items()))
def test_mixes_reproduce_llama_quantize_sizes(name: str, gib: float) -> None:
    modelled = from_quant(LLAMA3_8B, find_quant(name)).total / GIB
    assert abs(modelled - gib) / gib < 0.01


@pytest.mark.parametrize(("name", "bpw"), sorted(NOMINAL_BPW.items()))
def test_iq_and_mxfp4_base_bits_match_their_nominal_bpw(name: str, bpw: float) -> None:
    quant = find_quant(name)
    assert abs(type_bits(quant.experts or quant.base) - bpw) < 0.01


def test_role_bits_of_a_mix() -> None:
    q4km = find_quant("Q4_K_M")
    # half of the attn_v / ffn_down tensors Q6_K, the rest Q4_K
    assert role_bits(q4km, "ffn_down") == pytest.approx(0.5 * 6.5625 + 0.5 * 4.5)
    assert role_bits(q4km, "attn_q") == 4.5 and role_bits(q4km, "other") == 4.5
    mxfp4 = find_quant("MXFP4")
    assert role_bits(mxfp4, "ffn_down", expert=True) == 4.25
    assert role_bits(mxfp4, "ffn_down") == 8.5


def test_gpt_oss_keeps_attention_and_embeddings_in_bf16() -> None:
    m = MODELS["gpt-oss-120b"]
    weights = from_quant(m, find_quant("mxfp4"))
    table = 201088 * 2880
    attention = 36 * (2 * 2880 * 64 * 64 + 2 * 2880 * 8 * 64)
    routers = 36 * 2880 * 128
    experts = 36 * 128 * 3 * 2880 * 2880
    assert weights == WeightBytes(
        embedding=table * 2,
        head=table * 2,
        dense=(attention + routers) * 2,
        experts=experts * 4.25 / 8,
        expert_count=128,
        tied=False,
        source="quant",
    )
    # a token routes to 4 of 128 experts and reads one row of the embedding table
    assert weights.read(4) == pytest.approx(
        table * 2 + (attention + routers) * 2 + experts * 4.25 / 8 / 32
    )


def test_active_bytes_of_ggml_orgs_gpt_oss_file() -> None:
    """ggml-org/gpt-oss-120b-GGUF (MXFP4_MOE) is 59.02 GiB in llama-bench."""
    weights = from_quant(MODELS["gpt-oss-120b"], find_quant("MXFP4"))
    assert abs(weights.total / GIB - 59.02) / 59.02 < 0.01


def test_weights_gib_rescales_the_experts_of_a_moe_and_everything_of_a_dense_model() -> None:
    moe = from_quant(MODELS["qwen3-235b-a22b"], find_quant("Q3_K_M"))
    file = scaled_to_file(moe, 96.99 * GIB)
    assert file.total == pytest.approx(96.99 * GIB)
    assert (file.dense, file.head, file.embedding) == (moe.dense, moe.head, moe.embedding)
    assert file.source == "weights-gib"
    dense = from_quant(MODELS["llama-3.3-70b"], find_quant("Q8_0"))
    file = scaled_to_file(dense, 75.65 * GIB)
    assert file.total == pytest.approx(75.65 * GIB)
    assert file.dense / dense.dense == pytest.approx(file.head / dense.head)
