"""halo lab model --format gguf|both: one GGUF file llama.cpp loads, with the same weights as
the safetensors checkpoint (Q and K in GGML's rotary order), the same vocabulary as a gpt2
BPE with the "default" pre-tokenizer, and llama metadata read back by the gguf reader."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from halo_cluster.lab.tiny_gguf import GGUF_FILE, gguf_name, rope_permute
from halo_cluster.lab.tiny_model import write_model
from halo_cluster.lab.tiny_spec import EOS_ID, TinyModelSpec

SMALL = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, vocab=512)


def test_tensor_names_as_llama_cpp_loads_them() -> None:
    assert [
        gguf_name(n)
        for n in (
            "model.embed_tokens.weight",
            "model.norm.weight",
            "lm_head.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.11.mlp.down_proj.weight",
            "model.layers.3.post_attention_layernorm.weight",
        )
    ] == [
        "token_embd.weight",
        "output_norm.weight",
        "output.weight",
        "blk.0.attn_q.weight",
        "blk.11.ffn_down.weight",
        "blk.3.ffn_norm.weight",
    ]
    for bad in ("model.layers.x.mlp.up_proj.weight", "model.layers.0.mlp.other", "other"):
        with pytest.raises(ValueError):
            gguf_name(bad)


def test_rope_permute_interleaves_each_heads_halves() -> None:
    rows = np.arange(8, dtype=np.float32).reshape(8, 1)  # 2 heads of 4 rows
    assert rope_permute(rows, heads=2).ravel().tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "m"
    write_model(path, SMALL, formats=("safetensors", "gguf"))
    return path


def test_gguf_reads_back_with_llama_metadata_and_vocabulary(both: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(both / GGUF_FILE)

    def value(key: str) -> object:
        field = reader.fields[key]
        return field.contents()

    assert value("general.architecture") == "llama"
    assert [
        value(f"llama.{k}")
        for k in (
            "block_count",
            "embedding_length",
            "feed_forward_length",
            "attention.head_count",
            "attention.head_count_kv",
            "rope.dimension_count",
        )
    ] == [2, 64, 128, 2, 1, 32]
    assert value("tokenizer.ggml.model") == "gpt2" and value("tokenizer.ggml.pre") == "default"
    tokens = value("tokenizer.ggml.tokens")
    vocab = json.loads((both / "tokenizer.json").read_text())["model"]["vocab"]
    assert isinstance(tokens, list) and len(tokens) == 512
    assert all(tokens[i] == t for t, i in vocab.items())
    assert value("tokenizer.ggml.eos_token_id") == EOS_ID
    names = {t.name: t for t in reader.tensors}
    assert len(names) == 3 + 9 * SMALL.layers
    assert names["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert names["token_embd.weight"].tensor_type == gguf.GGMLQuantizationType.F16


def _bf16(path: Path, name: str) -> np.ndarray:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    entry = json.loads(data[8 : 8 + length])[name]
    start, end = (8 + length + o for o in entry["data_offsets"])
    raw = np.frombuffer(data[start:end], dtype=np.uint16).astype(np.uint32) << 16
    return raw.view(np.float32).reshape(entry["shape"])


def test_same_weights_as_the_checkpoint(both: Path) -> None:
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(both / GGUF_FILE).tensors}
    st = both / "model.safetensors"
    for hf, ours, heads in (
        ("model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight", SMALL.heads),
        ("model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight", SMALL.kv_heads),
        ("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", None),
    ):
        expected = _bf16(st, hf)
        if heads:
            expected = rope_permute(expected, heads)
        got = np.asarray(tensors[ours].data, dtype=np.float32).reshape(expected.shape)
        assert np.allclose(got, expected, rtol=1e-3, atol=1e-6), hf


def test_command_writes_both_and_refuses_nothing_else(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "halo_cluster", "lab", "model", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    only = run(str(tmp_path / "g"), "--format", "gguf", "--json", "--layers", "1")
    assert only.returncode == 0, only.stderr
    assert list(json.loads(only.stdout)["files"]) == [GGUF_FILE]
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == [GGUF_FILE]
    bad = run(str(tmp_path / "h"), "--format", "onnx")
    assert bad.returncode == 2 and "onnx" in bad.stderr
