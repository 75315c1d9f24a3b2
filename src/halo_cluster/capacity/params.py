"""Parameter counts of a model shape, split the way quantisers treat them: per tensor role
(llama.cpp gives attn_v, attn_output and ffn_down more bits in its mixes), dense versus
routed-expert weights, and the embedding tables."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.capacity.spec import ModelSpec

LINEAR_CONV_KERNEL = 4  # Qwen3-Next's gated delta-net short convolution (linear_conv_kernel_dim)


@dataclass(frozen=True)
class ParamCounts:
    embedding: int  # input table + output head (once when tied)
    attention: int  # all layers
    dense_mlp: int  # all dense MLPs (dense models, or the leading dense layers of MoE models)
    expert: int  # one routed expert of one layer
    moe_layers: int
    shared: int  # shared experts + routers, all MoE layers

    def total_with(self, experts_per_layer: float) -> float:
        return (
            self.embedding
            + self.attention
            + self.dense_mlp
            + self.shared
            + self.expert * self.moe_layers * experts_per_layer
        )


def _mla_attention(m: ModelSpec) -> int:
    rope, nope = m.qk_rope_head_dim, m.qk_nope_head_dim
    if m.q_lora_rank:
        q = m.hidden * m.q_lora_rank + m.q_lora_rank * m.heads * (nope + rope)
    else:
        q = m.hidden * m.heads * (nope + rope)
    kv = m.hidden * (m.kv_lora_rank + rope) + m.kv_lora_rank * m.heads * (nope + m.v_head_dim)
    return q + kv + m.heads * m.v_head_dim * m.hidden


def attention_roles(m: ModelSpec) -> dict[str, int]:
    """Attention weights of all layers by role: attn_q, attn_k, attn_v, attn_output, and
    'other' (MLA's low-rank projections, gated delta-net layers)."""
    if m.is_mla:
        return {"other": _mla_attention(m) * m.layers}
    full = m.attention_layers
    q = m.hidden * m.heads * m.head_dim * (2 if m.attention_output_gate else 1)
    kv = m.hidden * m.kv_heads * m.head_dim
    roles = {
        "attn_q": q * full,
        "attn_k": kv * full,
        "attn_v": kv * full,
        "attn_output": m.heads * m.head_dim * m.hidden * full,
    }
    linear = m.layers - full
    if linear:
        key = m.linear_k_heads * m.linear_head_dim
        value = m.linear_v_heads * m.linear_head_dim
        per_layer = (
            m.hidden * (2 * key + 2 * value)  # q, k, v and the output gate z
            + m.hidden * 2 * m.linear_v_heads  # beta and the decay rate a
            + (2 * key + value) * LINEAR_CONV_KERNEL
            + value * m.hidden  # out projection
        )
        roles["other"] = per_layer * linear
    return roles


def param_counts(m: ModelSpec) -> ParamCounts:
    embedding = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    dense_layers = m.dense_layers if m.is_moe else m.layers
    expert = 3 * m.hidden * m.expert_intermediate
    shared_width = m.shared_expert_intermediate or m.expert_intermediate
    shared = m.moe_layers * (m.shared_experts * 3 * m.hidden * shared_width + m.hidden * m.experts)
    return ParamCounts(
        embedding,
        sum(attention_roles(m).values()),
        dense_layers * 3 * m.hidden * m.intermediate,
        expert,
        m.moe_layers,
        shared,
    )


def total_params(m: ModelSpec) -> float:
    return param_counts(m).total_with(m.experts)


def active_params(m: ModelSpec) -> float:
    """Parameters a token uses, embeddings included (``halo plan --list`` shows this)."""
    return param_counts(m).total_with(m.active_experts)


def published_active_params(m: ModelSpec) -> float:
    """Active parameters counted the way the model's vendor counts its published figure."""
    input_table = 0 if m.tied_embeddings else m.vocab * m.hidden
    if m.active_counts == "no_input_embedding":
        return active_params(m) - input_table
    if m.active_counts == "no_embeddings":
        return active_params(m) - param_counts(m).embedding
    return active_params(m)


def experts_touched(m: ModelSpec, batch: int) -> float:
    """Expected distinct experts per layer a batch of tokens routes to (uniform routing)."""
    if not m.is_moe:
        return 0.0
    return m.experts * (1 - (1 - m.active_experts / m.experts) ** batch)
