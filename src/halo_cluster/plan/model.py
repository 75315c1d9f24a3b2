"""Memory and decode-time model (pure arithmetic; see docs/plan.md).

Decode is memory-bound on these machines: a step reads every weight it uses once (shared by
the whole batch) plus the KV cache of every sequence. Tensor parallelism splits those reads
across ranks but adds 2·L + 2 all-reduces of batch × hidden activations per step; pipeline
parallelism does not split a token's reads but only passes activations between stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from halo_cluster.plan.catalog import Hardware, Link, ModelSpec

GIB = 2**30
BITS = {"bf16": 16.0, "fp16": 16.0, "fp8": 8.0, "int8": 8.0, "int4": 4.25, "mxfp4": 4.25, "q4": 4.5}
ACTIVATION_BYTES = 2  # activations and all-reduce payloads stay in bf16
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
ACTIVATION_HEADROOM_GIB = 3.0  # per rank: activations, CUDA/HIP graphs off, runtime buffers


@dataclass(frozen=True)
class ParamCounts:
    embedding: int
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


def param_counts(m: ModelSpec) -> ParamCounts:
    if m.is_mla:
        q = (
            m.hidden * m.q_lora_rank
            + m.q_lora_rank * m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
            if m.q_lora_rank
            else m.hidden * m.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        )
        kv = m.hidden * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * m.heads * (
            m.qk_nope_head_dim + m.v_head_dim
        )
        attention = q + kv + m.heads * m.v_head_dim * m.hidden
    else:
        attention = 2 * m.hidden * m.heads * m.head_dim + 2 * m.hidden * m.kv_heads * m.head_dim
    embedding = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    moe_layers = m.layers - m.dense_layers if m.is_moe else 0
    dense_layers = m.dense_layers if m.is_moe else m.layers
    expert = 3 * m.hidden * m.expert_intermediate
    shared = moe_layers * (m.shared_experts * expert + m.hidden * m.experts)
    return ParamCounts(
        embedding,
        attention * m.layers,
        dense_layers * 3 * m.hidden * m.intermediate,
        expert,
        moe_layers,
        shared,
    )


def total_params(m: ModelSpec) -> float:
    return param_counts(m).total_with(m.experts)


def active_params(m: ModelSpec) -> float:
    return param_counts(m).total_with(m.active_experts)


def experts_touched(m: ModelSpec, batch: int) -> float:
    """Expected distinct experts per layer a batch of tokens routes to (uniform routing)."""
    if not m.is_moe:
        return 0.0
    return m.experts * (1 - (1 - m.active_experts / m.experts) ** batch)


def weight_bytes(m: ModelSpec, quant: str, experts_per_layer: float | None = None) -> float:
    """Bytes of weights (all experts unless ``experts_per_layer``); embeddings stay bf16."""
    counts = param_counts(m)
    per = m.experts if experts_per_layer is None else experts_per_layer
    body = counts.total_with(per) - counts.embedding
    return body * BITS[quant] / 8 + counts.embedding * 2


def kv_bytes_per_token(m: ModelSpec, tp: int, pp: int, kv_dtype: str = "bf16") -> float:
    """KV cache of one token on one rank. KV heads split over TP down to one head per rank
    (then replicated); MLA's compressed latent is replicated on every TP rank."""
    layers = m.layers / pp
    if m.is_mla:
        return layers * (m.kv_lora_rank + m.qk_rope_head_dim) * KV_BYTES[kv_dtype]
    heads = max(1.0, m.kv_heads / tp)
    return layers * 2 * heads * m.head_dim * KV_BYTES[kv_dtype]


def allreduce_s(size_bytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce: 2(n−1) steps of α plus 2(n−1)/n of the data over β."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps * link.alpha_us * 1e-6 + steps / ranks * size_bytes * 8 / (link.beta_gbps * 1e9)


def p2p_s(size_bytes: float, link: Link) -> float:
    return link.alpha_us * 1e-6 + size_bytes * 8 / (link.beta_gbps * 1e9)


def tp_collectives_per_token(m: ModelSpec) -> int:
    """Two all-reduces per layer (after attention, after the MLP) plus embedding and logits."""
    return 2 * m.layers + 2


@dataclass(frozen=True)
class Request:
    model: ModelSpec
    hardware: Hardware
    link: Link
    nodes: int = 2
    gpus_per_node: int = 1
    quant: str = "bf16"
    context: int = 8192
    batch: int = 1
    gpu_memory_utilization: float = 0.9
    kv_dtype: str = "bf16"


@dataclass(frozen=True)
class Row:
    layout: str
    tp: int
    pp: int
    link: str
    fits: bool
    weights_gib_per_node: float
    kv_gib_per_node: float
    max_context: int
    decode_ms_compute: float
    decode_ms_network: float
    tokens_per_s: float
    network_share: float
    tokens_per_s_batch1: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def layouts(ranks: int) -> list[tuple[int, int]]:
    return [(tp, ranks // tp) for tp in range(ranks, 0, -1) if ranks % tp == 0]


def evaluate(req: Request, tp: int, pp: int) -> Row:
    m, hw = req.model, req.hardware
    ranks_per_node = req.gpus_per_node
    weights_rank = weight_bytes(m, req.quant) / (tp * pp)
    usable = (
        min(hw.usable_memory_gib, hw.memory_gib) * GIB * req.gpu_memory_utilization / ranks_per_node
    )
    kv_budget = usable - weights_rank - ACTIVATION_HEADROOM_GIB * GIB
    kv_token = kv_bytes_per_token(m, tp, pp, req.kv_dtype)
    max_context = int(max(0.0, kv_budget) / kv_token / req.batch) if kv_token else 0
    if m.context_limit:
        max_context = min(max_context, m.context_limit) if kv_budget > 0 else 0
    fits = kv_budget > 0 and max_context >= req.context
    kv_gib = kv_token * req.context * req.batch * ranks_per_node / GIB
    compute, network = step_seconds(req, tp, pp, req.batch)
    compute1, network1 = step_seconds(req, tp, pp, 1)
    step = compute + network
    return Row(
        layout=f"TP{tp}" if pp == 1 else f"PP{pp}" if tp == 1 else f"TP{tp}xPP{pp}",
        tp=tp,
        pp=pp,
        link=req.link.id,
        fits=fits,
        weights_gib_per_node=weights_rank * ranks_per_node / GIB,
        kv_gib_per_node=kv_gib,
        max_context=max_context,
        decode_ms_compute=compute * 1e3,
        decode_ms_network=network * 1e3,
        tokens_per_s=req.batch / step,
        network_share=network / step,
        tokens_per_s_batch1=1 / (compute1 + network1),
    )


def step_seconds(req: Request, tp: int, pp: int, batch: int) -> tuple[float, float]:
    """(memory-bound compute, network) seconds of one decode step for ``batch`` sequences."""
    m, hw = req.model, req.hardware
    bandwidth = hw.memory_bw_gbs * 1e9 * hw.decode_efficiency
    read = (
        weight_bytes(m, req.quant, experts_touched(m, batch)) / tp
    )  # stages run one after another
    read += (
        kv_bytes_per_token(m, tp, pp, req.kv_dtype) * pp * req.context / 2 * batch
    )  # average context
    compute = read / bandwidth
    payload = batch * m.hidden * ACTIVATION_BYTES
    network = 0.0
    if tp > req.gpus_per_node:  # TP group spans nodes
        network += tp_collectives_per_token(m) * allreduce_s(payload, tp, req.link)
    cross_stage = min(pp - 1, req.nodes - 1) if tp <= req.gpus_per_node else pp - 1
    network += cross_stage * p2p_s(payload, req.link)
    return compute, network


def plan_rows(req: Request) -> list[Row]:
    return [evaluate(req, tp, pp) for tp, pp in layouts(req.nodes * req.gpus_per_node)]


def recommend(rows: list[Row]) -> tuple[Row | None, str]:
    fitting = [r for r in rows if r.fits]
    if not fitting:
        best = max(rows, key=lambda r: r.max_context) if rows else None
        return None, "no layout fits: quantise further, shorten the context or add nodes" + (
            f" (closest: {best.layout}, max context {best.max_context})" if best else ""
        )
    best = max(fitting, key=lambda r: r.tokens_per_s)
    return best, (
        f"{best.layout} over {best.link}: {best.tokens_per_s:.1f} tok/s, network "
        f"{best.network_share:.1%} of each step, max context {best.max_context}"
    )
