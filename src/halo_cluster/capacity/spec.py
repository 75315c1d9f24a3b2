"""The capacity planner's value types: a model's shape, a node's hardware, a link between nodes."""

from __future__ import annotations

from dataclasses import dataclass

from halo_cluster.errors import UsageError

# How a vendor counts the "active parameters" it publishes for a mixture-of-experts model.
# The counts differ only in the embedding tables, so each catalog entry says which one its
# published figure uses (checked in tests against that figure).
ACTIVE_COUNTS = ("all", "no_input_embedding", "no_embeddings")


@dataclass(frozen=True)
class ModelSpec:
    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    experts: int = 0
    active_experts: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    shared_expert_intermediate: int = 0  # 0: the same as expert_intermediate
    dense_layers: int = 0  # leading layers with a dense MLP in a MoE model
    q_lora_rank: int = 0  # multi-head latent attention (DeepSeek)
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # hybrid linear attention (Qwen3-Next): one full-attention layer every N, the rest are
    # gated delta-net layers with their own key/value heads and no KV cache
    full_attention_interval: int = 0
    linear_k_heads: int = 0
    linear_v_heads: int = 0
    linear_head_dim: int = 0
    attention_output_gate: bool = False  # the query projection also produces a gate
    params_b: float | None = None
    active_params_b: float | None = None
    active_counts: str = "all"
    dtype: str = "bf16"
    context_limit: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if self.is_moe and self.active_experts > self.experts:
            raise UsageError(
                f"model {self.id}: {self.active_experts} experts per token but "
                f"{self.experts} experts: check its expert counts"
            )

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_layers(self) -> int:
        """Layers with softmax attention (and so a KV cache)."""
        if self.full_attention_interval > 0:
            return self.layers // self.full_attention_interval
        return self.layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0


@dataclass(frozen=True)
class Hardware:
    id: str
    name: str
    memory_gib: float
    usable_memory_gib: float
    memory_bw_gbs: float
    decode_efficiency: float
    unified: bool
    source: str
    # nodes that share this many cores (the lab: every node is a namespace of one machine);
    # 0: every node has its own processor
    shared_cores: int = 0
    # no GPU: llama.cpp's head then offloads the last layers and the output to its workers
    cpu_only: bool = False
    # per engine, the figures halo measured on this machine (a profile from 'halo lab
    # profile'): engine id -> the Tuning fields, as the engine data files write them
    measured: tuple[tuple[str, object], ...] = ()
    # what one node draws while it decodes (W), for tokens per joule, and where it is from
    typical_watts: float | None = None
    watts_source: str = ""


STACKS = ("tcp", "rdma")  # how bytes cross a link: the kernel's TCP, or RDMA verbs


@dataclass(frozen=True)
class Link:
    id: str
    name: str
    alpha_us: float  # one-way latency of a small message
    beta_gbps: float  # sustained bandwidth
    source: str
    stack: str = "tcp"
