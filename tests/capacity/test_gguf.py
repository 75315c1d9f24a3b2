"""The GGUF reader on small files written with the gguf package itself: a dense model, a MoE
model, a split model (all shards, and the first shard alone), and broken files."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from halo_cluster.capacity.gguf_file import GgufModel, read_gguf
from halo_cluster.capacity.quants import find_quant
from halo_cluster.capacity.spec import ModelSpec
from halo_cluster.capacity.weights import WeightBytes, from_quant
from halo_cluster.errors import UsageError
from halo_cluster.modelstore.gguf_header import read_header

Q8_0, Q4_K = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_K


def raw(rows: int, blocks: int, block_bytes: int, experts: int = 0) -> np.ndarray:
    """Quantised tensor data: ``blocks`` blocks per row (the gguf writer takes the bytes)."""
    shape = (experts, rows, blocks * block_bytes) if experts else (rows, blocks * block_bytes)
    return np.zeros(shape, dtype=np.uint8)


def write(
    path: Path, arch: str, meta: dict[str, int], tensors: dict[str, tuple], **opts: int
) -> None:
    writer = gguf.GGUFWriter(path, arch, **opts)
    writer.add_name("tiny")
    for key, value in meta.items():
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_file_type(15)  # Q4_K_M
    for name, (data, dtype) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


DENSE_META = {
    "block_count": 2,
    "embedding_length": 256,
    "attention.head_count": 4,
    "attention.head_count_kv": 2,
    "feed_forward_length": 512,
    "context_length": 4096,
    "vocab_size": 100,
}


def dense_tensors() -> dict[str, tuple]:
    tensors: dict[str, tuple] = {
        "token_embd.weight": (np.zeros((100, 256), dtype=np.float16), None),
        "output.weight": (raw(100, 8, 34), Q8_0),  # 100 × 256 in Q8_0: 8 blocks of 34 bytes
    }
    for i in range(2):
        tensors[f"blk.{i}.attn_q.weight"] = (raw(256, 1, 144), Q4_K)
        tensors[f"blk.{i}.ffn_down.weight"] = (raw(256, 2, 144), Q4_K)
        tensors[f"blk.{i}.attn_norm.weight"] = (np.zeros(256, dtype=np.float32), None)
    return tensors


def test_dense(tmp_path: Path) -> None:
    path = tmp_path / "dense.gguf"
    write(path, "llama", DENSE_META, dense_tensors())
    assert read_gguf(path) == GgufModel(
        spec=ModelSpec(
            id="dense.gguf",
            name="tiny",
            layers=2,
            hidden=256,
            heads=4,
            kv_heads=2,
            head_dim=64,
            intermediate=512,
            vocab=100,
            dtype="Q4_K_M",
            context_limit=4096,
            source="GGUF dense.gguf",
        ),
        weights=WeightBytes(
            embedding=100 * 256 * 2,
            head=100 * 8 * 34,
            dense=2 * (256 * 144 + 256 * 2 * 144 + 256 * 4),
            experts=0.0,
            expert_count=0,
            tied=False,
            source="gguf",
        ),
        shards_read=1,
        shards_total=1,
        note="exact tensor sizes from 1 file(s)",
    )


def test_moe_splits_expert_from_dense_bytes(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"
    meta = {
        **DENSE_META,
        "expert_count": 8,
        "expert_used_count": 2,
        "expert_feed_forward_length": 256,
    }
    tensors = {
        "token_embd.weight": (np.zeros((100, 256), dtype=np.float16), None),  # tied: no output
        "blk.0.attn_q.weight": (raw(256, 1, 144), Q4_K),
        "blk.0.ffn_gate_inp.weight": (np.zeros((8, 256), dtype=np.float32), None),
        "blk.0.ffn_gate_exps.weight": (raw(256, 1, 144, experts=8), Q4_K),
        "blk.0.ffn_up_exps.weight": (raw(256, 1, 144, experts=8), Q4_K),
        "blk.0.ffn_down_exps.weight": (raw(256, 1, 210, experts=8), gguf.GGMLQuantizationType.Q6_K),
        # a multi-token-prediction layer past block_count - nextn_predict_layers: not read
        "blk.2.ffn_up_exps.weight": (raw(256, 1, 144, experts=8), Q4_K),
    }
    write(path, "qwen3moe", {**meta, "block_count": 3, "nextn_predict_layers": 1}, tensors)
    model = read_gguf(path)
    assert model.spec.is_moe and model.spec.layers == 2 and model.spec.tied_embeddings
    assert (model.spec.experts, model.spec.active_experts, model.spec.expert_intermediate) == (
        8,
        2,
        256,
    )
    assert model.weights == WeightBytes(
        embedding=100 * 256 * 2,
        head=0.0,
        dense=256 * 144 + 8 * 256 * 4,
        experts=8 * 256 * (144 + 144 + 210),
        expert_count=8,
        tied=True,
        source="gguf",
    )
    # a step reads the tied table as the head, the dense weights and 2 of 8 experts
    assert model.weights.read(2) == 100 * 256 * 2 + 256 * 144 + 8 * 256 * 4 + 2 * 256 * 498


def test_split_model_read_from_every_shard(tmp_path: Path) -> None:
    path = tmp_path / "split.gguf"
    write(path, "llama", DENSE_META, dense_tensors(), split_max_tensors=3, small_first_shard=True)
    shards = sorted(p.name for p in tmp_path.iterdir())
    assert shards == [f"split-0000{i}-of-00004.gguf" for i in range(1, 5)]
    model = read_gguf(tmp_path / shards[0])
    whole = tmp_path / "whole.gguf"
    write(whole, "llama", DENSE_META, dense_tensors())
    expected = read_gguf(whole)
    assert model == replace(
        expected,
        spec=replace(expected.spec, id=shards[0], source=f"GGUF {shards[0]}"),
        shards_read=4,
        shards_total=4,
        note="exact tensor sizes from 4 file(s)",
    )


def test_first_shard_alone_estimates_from_the_file_type(tmp_path: Path) -> None:
    path = tmp_path / "split.gguf"
    write(path, "llama", DENSE_META, dense_tensors(), split_max_tensors=3, small_first_shard=True)
    for shard in tmp_path.glob("split-0000[234]-*.gguf"):
        shard.unlink()
    model = read_gguf(tmp_path / "split-00001-of-00004.gguf")
    assert (model.shards_read, model.shards_total) == (1, 4)
    assert model.weights == from_quant(model.spec, find_quant("Q4_K_M"), "gguf")
    assert "1 of 4 shards found" in model.note and "general.file_type (Q4_K_M)" in model.note


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "truncated GGUF header"),
        (b"PK\x03\x04 a zip file", "not a GGUF file"),
        (b"GGUF\x03\x00", "truncated GGUF header"),
        (b"GGUF" + struct.pack("<I", 7) + bytes(16), "unknown GGUF version 7"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message) as err:
        read_gguf(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    write(path, "llama", DENSE_META, dense_tensors())
    data = path.read_bytes()
    header = read_header(tmp_path / "cut.gguf")
    last = max(header.tensors, key=lambda t: t.offset).name
    got = {}
    for cut in (60, header.data_start - 1, len(data) // 2, len(data) - 10):
        path.write_bytes(data[:cut])
        with pytest.raises(UsageError) as err:
            read_gguf(path)
        got[cut] = str(err.value).removeprefix(f"{path}: ")
    assert (got[60], got[len(data) - 10]) == (
        "truncated GGUF header",  # in the metadata
        f"truncated GGUF file (tensor {last!r} ends past its end)",  # in the last tensor's data
    )
    for cut in (header.data_start - 1, len(data) // 2):  # before the data, in the data
        assert got[cut].startswith("truncated GGUF file (tensor '"), got[cut]


def test_zero_heads_and_missing_metadata(tmp_path: Path) -> None:
    path = tmp_path / "zero.gguf"
    write(path, "llama", {**DENSE_META, "attention.head_count": 0}, dense_tensors())
    with pytest.raises(
        UsageError, match=r"zero\.gguf: metadata llama\.attention\.head_count must be > 0"
    ):
        read_gguf(path)
    meta = {k: v for k, v in DENSE_META.items() if k != "embedding_length"}
    write(path, "llama", meta, dense_tensors())
    with pytest.raises(UsageError, match=r"metadata llama\.embedding_length is missing"):
        read_gguf(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        read_gguf(tmp_path / "nothing.gguf")
