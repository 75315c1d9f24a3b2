"""A model from a GGUF file: the header's metadata (architecture, layers, heads, experts…)
and the tensor table, whose exact byte sizes split the weights into the token embedding,
output head, dense and routed-expert groups. Only the header and tensor table are read
(the gguf package memory-maps the file; no weights are loaded).

A split model (``…-00001-of-00003.gguf``) is read from every shard found next to the first;
when some are missing, the bytes are estimated from the shape and ``general.file_type``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halo_cluster.capacity.quants import find_quant
from halo_cluster.capacity.spec import ModelSpec
from halo_cluster.capacity.weights import WeightBytes, from_quant
from halo_cluster.errors import UsageError

GGUF_MAGIC = b"GGUF"
KNOWN_VERSIONS = (2, 3)
SHARD = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
EXPERT_TENSOR = re.compile(r"\.ffn_(gate|up|down|gate_up)_exps\.")
# llama_ftype (llama.h) -> our quant names, for estimating shards that are not there
FILE_TYPES = {
    0: "bf16", 1: "fp16", 2: "Q4_0", 7: "Q8_0", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M",
    14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS",
    23: "IQ3_XXS", 30: "IQ4_XS", 32: "bf16", 38: "MXFP4",
}  # fmt: skip
LIMIT = 100_000_000  # no metadata count of a real model comes near this


@dataclass(frozen=True)
class GgufModel:
    spec: ModelSpec
    weights: WeightBytes
    shards_read: int
    shards_total: int
    note: str  # how the bytes were obtained


def _check_header(path: Path) -> None:
    try:
        with path.open("rb") as handle:
            head = handle.read(24)
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror or err}") from None
    if head[:4] != GGUF_MAGIC:
        raise UsageError(f"{path}: not a GGUF file (starts with {head[:4]!r}, not b'GGUF')")
    if len(head) < 24:
        raise UsageError(f"{path}: truncated GGUF header ({len(head)} bytes, 24 needed)")
    little, big = struct.unpack("<I", head[4:8])[0], struct.unpack(">I", head[4:8])[0]
    if little not in KNOWN_VERSIONS and big not in KNOWN_VERSIONS:
        raise UsageError(
            f"{path}: unknown GGUF version {little} (this reader knows versions 2 and 3)"
        )


def _reader(path: Path) -> Any:
    _check_header(path)
    try:
        import gguf
    except ImportError:
        raise UsageError(
            "--gguf needs the gguf package: pip install 'halo-cluster[plan]'"
        ) from None
    try:
        return gguf.GGUFReader(path, "r")
    except Exception as err:  # untrusted bytes: any failure of the parser is a bad file
        raise UsageError(f"{path}: truncated or corrupt GGUF ({err})") from None


def _value(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    if field.types and field.types[0].name == "ARRAY":
        if field.types[-1].name == "STRING":
            return len(field.data)  # only the length of a string array is ever needed
        return [int(v) for v in field.contents()]
    return field.contents()


def _int(path: Path, reader: Any, key: str, default: int | None = None) -> int:
    value = _value(reader, key)
    if value is None:
        if default is None:
            raise UsageError(f"{path}: metadata {key} is missing")
        return default
    if isinstance(value, list):  # per-layer values (e.g. head counts): the largest
        value = max(value) if value else 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= LIMIT:
        raise UsageError(f"{path}: metadata {key} must be a count, got {value!r}")
    return value


def _spec(path: Path, reader: Any, tied: bool) -> ModelSpec:
    arch = _value(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise UsageError(f"{path}: metadata general.architecture is missing")

    def count(key: str, default: int | None = None) -> int:
        return _int(path, reader, f"{arch}.{key}", default)

    layers = count("block_count") - count("nextn_predict_layers", 0)
    hidden, heads = count("embedding_length"), count("attention.head_count")
    for key, value in (
        ("block_count", layers),
        ("embedding_length", hidden),
        ("attention.head_count", heads),
    ):
        if value <= 0:
            raise UsageError(f"{path}: metadata {arch}.{key} must be > 0, got {value}")
    vocab = count("vocab_size", 0) or _int(path, reader, "tokenizer.ggml.tokens", 0)
    return ModelSpec(
        id=path.name,
        name=str(_value(reader, "general.name") or path.stem),
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
        dtype=FILE_TYPES.get(_int(path, reader, "general.file_type", 0), "bf16"),
        source=f"GGUF {path.name}",
    )


def _shards(path: Path, reader: Any) -> tuple[list[Path], int]:
    """Every shard of a split model that exists next to ``path``, and how many there are."""
    total = _int(path, reader, "split.count", 1)
    match = SHARD.match(path.name)
    if total <= 1 or match is None:
        return [path], 1
    names = [f"{match['stem']}-{no:05d}-of-{total:05d}.gguf" for no in range(1, total + 1)]
    return [path.with_name(n) for n in names if path.with_name(n).is_file()], total


def _tensor_bytes(path: Path, spec: ModelSpec, readers: list[Any]) -> WeightBytes:
    embedding = head = dense = experts = 0.0
    skip = [f"blk.{i}." for i in range(spec.layers, spec.layers + 8)]  # MTP (nextn) layers
    for reader in readers:
        for tensor in reader.tensors:
            size = float(tensor.n_bytes)
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
    reader = _reader(path)
    shards, total = _shards(path, reader)
    if len(shards) == total:
        readers = [reader, *[_reader(p) for p in shards if p != path]]
        names = {t.name for r in readers for t in r.tensors}
        spec = _spec(path, reader, tied="output.weight" not in names)
        weights = _tensor_bytes(path, spec, readers)
        note = f"exact tensor sizes from {total} file(s)"
        return GgufModel(spec, weights, total, total, note)
    spec = _spec(path, reader, tied=False)  # most split (large) models have an output head
    quant = find_quant(spec.dtype)
    weights = from_quant(spec, quant, "gguf")
    note = (
        f"{len(shards)} of {total} shards found: bytes estimated from the shape and "
        f"general.file_type ({quant.name}); put all shards next to the first, or pass --weights-gib"
    )
    return GgufModel(spec, weights, len(shards), total, note)
