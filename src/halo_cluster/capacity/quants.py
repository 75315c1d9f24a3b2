"""Weight formats and their real bits per weight (data file capacity/data/quants.json).

A GGUF quantisation such as Q4_K_M is not one type but llama.cpp's mix: a base type, a
larger type for part of the attn_v / attn_output / ffn_down tensors, and its own types for
the token embedding and output tensors. The bits per weight of a tensor role are the mix's
weighted bits; ggml stores weights in blocks, so a type's bits are 8 · bytes / block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from halo_cluster.capacity.catalog import capacity_data
from halo_cluster.errors import UsageError

ROLES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_down")


@dataclass(frozen=True)
class Quant:
    name: str
    family: str  # "gguf" (llama.cpp files) or "hf" (safetensors formats)
    base: str
    embedding: str
    output: str
    router: str
    source: str
    roles: dict[str, dict[str, float]] = field(default_factory=dict)
    experts: str | None = None  # one type for all routed-expert tensors (MXFP4_MOE)


@cache
def type_sizes() -> dict[str, tuple[int, int]]:
    """ggml type -> (weights per block, bytes per block)."""
    return {k: (v["block"], v["bytes"]) for k, v in capacity_data("quants.json")["types"].items()}


def type_bits(name: str) -> float:
    block, size = type_sizes()[name]
    return 8 * size / block


@cache
def quants() -> dict[str, Quant]:
    return {
        name: Quant(name=name, **entry)
        for name, entry in capacity_data("quants.json")["quants"].items()
    }


def quant_names() -> list[str]:
    return list(quants())


def find_quant(name: str) -> Quant:
    """A quant by name, in any letter case (``q4_k_m`` is Q4_K_M, ``BF16`` is bf16)."""
    table = quants()
    if name in table:
        return table[name]
    folded = {key.casefold(): value for key, value in table.items()}
    if name.casefold() in folded:
        return folded[name.casefold()]
    raise UsageError(f"unknown quantisation {name!r}; choose one of {', '.join(table)}")


def role_bits(quant: Quant, role: str, expert: bool = False) -> float:
    """Bits per weight of a tensor role ('attn_v', 'ffn_down', … or 'other') in this mix;
    ``expert``: a routed-expert tensor."""
    if expert and quant.experts:
        return type_bits(quant.experts)
    mix = quant.roles.get(role, {})
    rest = 1.0 - sum(mix.values())
    return rest * type_bits(quant.base) + sum(share * type_bits(t) for t, share in mix.items())
