"""The lab's tiny Llama itself, whatever file it is written to: its shape
(``TinyModelSpec``), the Llama conventions both writers follow (token ids, RoPE, the chat
template), its tensors by their Hugging Face names, and their seeded weights (same seed,
same values in every format).

The checkpoint (``tiny_checkpoint``) and the GGUF file (``tiny_gguf``) are written from
this; torch is imported inside ``weights``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from halo_cluster.errors import UsageError

ARCHITECTURE = "LlamaForCausalLM"
MAX_POSITIONS = 2048
ROPE_THETA = 10000.0
RMS_NORM_EPS = 1e-5
INIT_STD = 0.02
# The head sizes vLLM's CPU attention backend accepts (the narrowest of its backends).
HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# Token ids follow the Llama convention: <unk> 0, <s> 1, </s> 2; <pad> comes next.
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
UNK_ID, BOS_ID, EOS_ID, PAD_ID = range(4)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """The shape of the model; ``intermediate`` is twice ``hidden`` (TP-divisible)."""

    layers: int = 4
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 4
    vocab: int = 4096
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def intermediate(self) -> int:
        return 2 * self.hidden

    def validate(self) -> TinyModelSpec:
        """The spec itself, or UsageError naming the first impossible combination."""
        if self.hidden % self.heads:
            raise UsageError(f"--heads {self.heads} must divide --hidden {self.hidden}")
        if self.heads % self.kv_heads:
            raise UsageError(f"--kv-heads {self.kv_heads} must divide --heads {self.heads}")
        if self.head_dim not in HEAD_DIMS:
            sizes = ", ".join(map(str, HEAD_DIMS))
            raise UsageError(
                f"head size --hidden/--heads = {self.head_dim} is not one vLLM supports ({sizes})"
            )
        return self


def tensor_shapes(spec: TinyModelSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint by its Hugging Face name, sorted by name."""
    h, kv, ff = spec.hidden, spec.kv_dim, spec.intermediate
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (spec.vocab, h),
        "model.norm.weight": (h,),
        "lm_head.weight": (spec.vocab, h),
    }
    for n in range(spec.layers):
        layer = f"model.layers.{n}"
        shapes |= {
            f"{layer}.input_layernorm.weight": (h,),
            f"{layer}.post_attention_layernorm.weight": (h,),
            f"{layer}.self_attn.q_proj.weight": (h, h),
            f"{layer}.self_attn.k_proj.weight": (kv, h),
            f"{layer}.self_attn.v_proj.weight": (kv, h),
            f"{layer}.self_attn.o_proj.weight": (h, h),
            f"{layer}.mlp.gate_proj.weight": (ff, h),
            f"{layer}.mlp.up_proj.weight": (ff, h),
            f"{layer}.mlp.down_proj.weight": (h, ff),
        }
    return dict(sorted(shapes.items()))


def numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def parameter_count(spec: TinyModelSpec) -> int:
    return sum(numel(shape) for shape in tensor_shapes(spec).values())


def weights(spec: TinyModelSpec) -> Iterator[tuple[str, Any]]:
    """(name, bf16 torch tensor) of every tensor in name order: normal(0, 0.02) matrices
    and unit norms from one seeded generator (the same values for every format)."""
    import warnings

    with warnings.catch_warnings():  # torch warns at import when numpy is absent; not needed
        warnings.simplefilter("ignore")
        import torch

    generator = torch.Generator().manual_seed(spec.seed)
    for name, shape in tensor_shapes(spec).items():
        if name.endswith("norm.weight"):
            yield name, torch.ones(shape, dtype=torch.bfloat16)
        else:
            yield name, (torch.randn(shape, generator=generator) * INIT_STD).to(torch.bfloat16)
