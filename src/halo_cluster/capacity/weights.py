"""The bytes of a model's weights, grouped by how a decode step reads them.

- the token embedding table: one row per token is read, so it costs memory, not bandwidth;
- the output head (the embedding table itself when tied): read every step;
- dense weights (attention, dense MLPs, shared experts, routers): read every step;
- routed experts: a step reads only the experts its tokens route to.

The bytes come from the catalog shape and a weight format, from a model file's size
(``--weights-gib``) or exactly from a GGUF file's tensor table (``--gguf``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from halo_cluster.capacity.params import attention_roles, param_counts
from halo_cluster.capacity.quants import Quant, role_bits, type_bits
from halo_cluster.capacity.spec import ModelSpec

GIB = 2**30


@dataclass(frozen=True)
class WeightBytes:
    embedding: float  # the token embedding table (the head too when tied)
    head: float  # an untied output head
    dense: float
    experts: float  # all routed experts of all MoE layers
    expert_count: int  # routed experts per MoE layer
    tied: bool
    source: str  # "catalog" | "quant" | "weights-gib" | "gguf"

    @property
    def total(self) -> float:
        return self.embedding + self.head + self.dense + self.experts

    def read(self, experts_touched: float) -> float:
        """Bytes one decode step reads: head, dense weights, the experts it routes to."""
        head = self.embedding if self.tied else self.head
        share = experts_touched / self.expert_count if self.expert_count else 0.0
        return head + self.dense + self.experts * share


def _mlp_bytes(params: float, quant: Quant, expert: bool) -> float:
    """gate and up are 2/3 of a SwiGLU MLP, down the other third (llama.cpp's ffn_down)."""
    return (
        params * 2 / 3 * role_bits(quant, "other", expert)
        + params / 3 * role_bits(quant, "ffn_down", expert)
    ) / 8


def from_quant(m: ModelSpec, quant: Quant, source: str = "quant") -> WeightBytes:
    counts = param_counts(m)
    table = m.vocab * m.hidden
    # a tied table is quantised with the output's type (llama-quant.cpp)
    embedding = table * type_bits(quant.output if m.tied_embeddings else quant.embedding) / 8
    head = 0.0 if m.tied_embeddings else table * type_bits(quant.output) / 8
    attention = sum(p * role_bits(quant, role) / 8 for role, p in attention_roles(m).items())
    routers = m.moe_layers * m.hidden * m.experts
    shared = counts.shared - routers
    dense = (
        attention
        + _mlp_bytes(counts.dense_mlp, quant, expert=False)
        + _mlp_bytes(shared, quant, expert=False)
        + routers * type_bits(quant.router) / 8
    )
    experts = _mlp_bytes(counts.expert * counts.moe_layers * m.experts, quant, expert=True)
    return WeightBytes(embedding, head, dense, experts, m.experts, m.tied_embeddings, source)


def scaled_to_file(weights: WeightBytes, file_bytes: float) -> WeightBytes:
    """The same model at a file size of ``file_bytes`` (a dynamic quant such as UD-Q3_K_XL,
    whose bits vary per tensor). Dynamic MoE quants spend their extra or missing bits on the
    experts, which hold almost all the bytes, so only the experts are rescaled when that
    can match the size; otherwise every group is."""
    fixed = weights.total - weights.experts
    if weights.experts > 0 and file_bytes > fixed:
        factor = (file_bytes - fixed) / weights.experts
        return replace(weights, experts=weights.experts * factor, source="weights-gib")
    factor = file_bytes / weights.total
    return WeightBytes(
        weights.embedding * factor,
        weights.head * factor,
        weights.dense * factor,
        weights.experts * factor,
        weights.expert_count,
        weights.tied,
        "weights-gib",
    )
