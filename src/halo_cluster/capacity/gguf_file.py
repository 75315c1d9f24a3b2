"""A model from a GGUF file: the header's metadata (architecture, layers, heads, experts…)
and the tensor table, whose exact byte sizes split the weights into the token embedding,
output head, dense and routed-expert groups. Only the header and tensor table are read, with
the bounds of modelstore/gguf_header.py (no weights are loaded, no long array is kept); the gguf
package gives each tensor type's block size and bytes.

A split model (``…-00001-of-00003.gguf``) is read from every shard found next to the first;
when some are missing, the bytes are estimated from the shape and ``general.file_type``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halo_cluster.capacity.quants import find_quant
from halo_cluster.capacity.spec import ModelSpec
from halo_cluster.capacity.weights import WeightBytes, from_quant
from halo_cluster.errors import UsageError
from halo_cluster.modelstore.gguf_header import (
    MAX_BLOCKS,
    STRING,
    Header,
    Skipped,
    read_header,
    shown,
)

SHARD = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
EXPERT_TENSOR = re.compile(r"\.ffn_(gate|up|down|gate_up)_exps\.")
# llama_ftype (llama.h) -> our quant names, for estimating shards that are not there
FILE_TYPES = {
    0: "bf16", 1: "fp16", 2: "Q4_0", 7: "Q8_0", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M",
    14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS",
    23: "IQ3_XXS", 30: "IQ4_XS", 32: "bf16", 38: "MXFP4",
}  # fmt: skip
LIMIT = 100_000_000  # no metadata count of a real model comes near this
MAX_SHARDS = 1000


@dataclass(frozen=True)
class GgufModel:
    spec: ModelSpec
    weights: WeightBytes
    shards_read: int
    shards_total: int
    note: str  # how the bytes were obtained


def _quant_sizes() -> dict[int, tuple[int, int]]:
    """ggml type -> (elements per block, bytes per block), from the gguf package."""
    try:
        import gguf
    except ImportError:
        raise UsageError(
            "--gguf needs the gguf package: pip install 'halo-cluster[plan]'"
        ) from None
    return {
        int(kind): (int(block), int(size)) for kind, (block, size) in gguf.GGML_QUANT_SIZES.items()
    }


def _value(header: Header, key: str) -> Any:
    value = header.metadata.get(key)
    if isinstance(value, Skipped):  # too long to keep: its length, when that is what counts
        return value.length if value.kind == STRING else value
    if isinstance(value, list) and value and isinstance(value[0], str):
        return len(value)  # only the length of a string array is ever needed
    return value


def _int(path: Path, header: Header, key: str, default: int | None = None) -> int:
    value = _value(header, key)
    if value is None:
        if default is None:
            raise UsageError(f"{path}: metadata {shown(key)[1:-1]} is missing")
        return default
    if isinstance(value, list) and value and all(_is_count(v) for v in value):
        value = max(value)  # per-layer values (e.g. head counts): the largest
    if not _is_count(value):
        raise UsageError(f"{path}: metadata {shown(key)[1:-1]} must be a count, got {shown(value)}")
    count: int = value
    return count


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= LIMIT


def _spec(path: Path, header: Header, tied: bool) -> ModelSpec:
    arch = _value(header, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise UsageError(f"{path}: metadata general.architecture is missing")

    def count(key: str, default: int | None = None) -> int:
        return _int(path, header, f"{arch}.{key}", default)

    blocks = count("block_count")
    if blocks > MAX_BLOCKS:
        raise UsageError(
            f"{path}: metadata {shown(arch)[1:-1]}.block_count = {blocks} is not a model's"
            f" (at most {MAX_BLOCKS})"
        )
    layers = blocks - count("nextn_predict_layers", 0)
    hidden, heads = count("embedding_length"), count("attention.head_count")
    for key, value in (
        ("block_count", layers),
        ("embedding_length", hidden),
        ("attention.head_count", heads),
    ):
        if value <= 0:
            raise UsageError(f"{path}: metadata {shown(arch)[1:-1]}.{key} must be > 0, got {value}")
    vocab = count("vocab_size", 0) or _int(path, header, "tokenizer.ggml.tokens", 0)
    name = _value(header, "general.name")
    return ModelSpec(
        id=path.name,
        name=name[:200] if isinstance(name, str) and name else path.stem,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=count("attention.head_count_kv", heads) or heads,
        head_dim=count("attention.key_length", 0) or hidden // heads,
        intermediate=count("feed_forward_length", 0),
        vocab=vocab,
        tied_embeddings=tied,
        experts=count("expert_count", 0),
        active_experts=count("expert_used_count", 0),
        expert_intermediate=count("expert_feed_forward_length", 0),
        shared_experts=count("expert_shared_count", 0),
        dense_layers=count("leading_dense_block_count", 0),
        kv_lora_rank=count("attention.kv_lora_rank", 0),
        qk_rope_head_dim=count("rope.dimension_count", 0)
        if count("attention.kv_lora_rank", 0)
        else 0,
        full_attention_interval=count("full_attention_interval", 0),
        context_limit=count("context_length", 0) or None,
        dtype=FILE_TYPES.get(_int(path, header, "general.file_type", 0), "bf16"),
        source=f"GGUF {path.name}",
    )


def _shards(path: Path, header: Header) -> tuple[list[Path], int]:
    """Every shard of a split model that exists next to ``path``, and how many there are."""
    total = _int(path, header, "split.count", 1)
    match = SHARD.match(path.name)
    if total <= 1 or match is None:
        return [path], 1
    if total > MAX_SHARDS:
        raise UsageError(f"{path}: metadata split.count = {total} is not a model's")
    names = [f"{match['stem']}-{no:05d}-of-{total:05d}.gguf" for no in range(1, total + 1)]
    return [path.with_name(n) for n in names if path.with_name(n).is_file()], total


def _sizes(path: Path, header: Header, quants: dict[int, tuple[int, int]]) -> list[float]:
    """Each tensor's bytes; one line when a type is unknown, a shape does not fill whole
    blocks, or the data would end past the end of the file (a truncated file)."""
    sizes = []
    for tensor in header.tensors:
        if tensor.kind not in quants:
            raise UsageError(
                f"{path}: tensor {shown(tensor.name)} has an unknown type {tensor.kind}"
            )
        block, block_bytes = quants[tensor.kind]
        elements = math.prod(tensor.shape)
        if elements % block:
            raise UsageError(
                f"{path}: corrupt GGUF tensor table (tensor {shown(tensor.name)} of shape"
                f" {list(tensor.shape)} is not whole blocks of {block})"
            )
        size = elements // block * block_bytes
        if header.data_start + tensor.offset + size > header.size:
            raise UsageError(
                f"{path}: truncated GGUF file (tensor {shown(tensor.name)} ends past its end)"
            )
        sizes.append(float(size))
    return sizes


def _tensor_bytes(
    path: Path, spec: ModelSpec, tables: list[tuple[Header, list[float]]]
) -> WeightBytes:
    embedding = head = dense = experts = 0.0
    skip = [f"blk.{i}." for i in range(spec.layers, spec.layers + 8)]  # MTP (nextn) layers
    for header, sizes in tables:
        for tensor, size in zip(header.tensors, sizes, strict=True):
            if tensor.name == "token_embd.weight":
                embedding += size
            elif tensor.name == "output.weight":
                head += size
            elif any(tensor.name.startswith(s) for s in skip):
                continue  # only speculative decoding reads them
            elif EXPERT_TENSOR.search(tensor.name):
                experts += size
            else:
                dense += size
    if embedding + head + dense + experts <= 0:
        raise UsageError(f"{path}: the tensor table lists no weights")
    return WeightBytes(embedding, head, dense, experts, spec.experts, spec.tied_embeddings, "gguf")


def read_gguf(path: Path) -> GgufModel:
    header = read_header(path)
    shards, total = _shards(path, header)
    if len(shards) == total:
        files = [path, *[p for p in shards if p != path]]
        headers = [header, *[read_header(p) for p in files[1:]]]
        quants = _quant_sizes()
        tables = [(h, _sizes(p, h, quants)) for p, h in zip(files, headers, strict=True)]
        names = {t.name for h in headers for t in h.tensors}
        spec = _spec(path, header, tied="output.weight" not in names)
        weights = _tensor_bytes(path, spec, tables)
        note = f"exact tensor sizes from {total} file(s)"
        return GgufModel(spec, weights, total, total, note)
    spec = _spec(path, header, tied=False)  # most split (large) models have an output head
    quant = find_quant(spec.dtype)
    weights = from_quant(spec, quant, "gguf")
    note = (
        f"{len(shards)} of {total} shards found: bytes estimated from the shape and "
        f"general.file_type ({quant.name}); put all shards next to the first, or pass --weights-gib"
    )
    return GgufModel(spec, weights, len(shards), total, note)
