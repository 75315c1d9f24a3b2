"""The lab's tiny model as a Hugging Face checkpoint directory, for vLLM and transformers:
the same file names, tensor names and shapes as a ``LlamaForCausalLM``, only small (config,
bf16 safetensors, the tokenizer's files), loadable with ``HF_HUB_OFFLINE=1``."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from halo_cluster.jsonout import JsonObject, JsonValue
from halo_cluster.lab.tiny_spec import (
    ARCHITECTURE,
    BOS_ID,
    CHAT_TEMPLATE,
    EOS_ID,
    INIT_STD,
    MAX_POSITIONS,
    PAD_ID,
    RMS_NORM_EPS,
    ROPE_THETA,
    SPECIAL_TOKENS,
    TinyModelSpec,
    numel,
    tensor_shapes,
    weights,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer

FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


def hf_config(spec: TinyModelSpec) -> JsonObject:
    """config.json as transformers 5 writes it for LlamaForCausalLM (+ legacy keys)."""
    return {
        "architectures": [ARCHITECTURE],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "dtype": "bfloat16",
        "eos_token_id": EOS_ID,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "hidden_size": spec.hidden,
        "initializer_range": INIT_STD,
        "intermediate_size": spec.intermediate,
        "max_position_embeddings": MAX_POSITIONS,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": spec.heads,
        "num_hidden_layers": spec.layers,
        "num_key_value_heads": spec.kv_heads,
        "pad_token_id": PAD_ID,
        "pretraining_tp": 1,
        "rms_norm_eps": RMS_NORM_EPS,
        "rope_parameters": {"rope_theta": ROPE_THETA, "rope_type": "default"},
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": spec.vocab,
    }


def safetensors_header(shapes: dict[str, tuple[int, ...]]) -> bytes:
    """Length prefix + JSON header of a bf16 safetensors file, tensors laid out in order.

    The format: 8-byte little-endian header length, the JSON header (padded with spaces to
    a multiple of 8, as the reference writer does), then the raw tensor bytes."""
    header: JsonObject = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        end = offset + 2 * numel(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write_weights(path: Path, spec: TinyModelSpec) -> None:
    """model.safetensors: the header, then each tensor's raw bf16 bytes."""
    import ctypes

    with path.open("wb") as out:
        out.write(safetensors_header(tensor_shapes(spec)))
        for _name, values in weights(spec):
            values = values.contiguous()
            # Raw bf16 bytes without numpy; x86 and arm64 are little-endian like the format.
            out.write(ctypes.string_at(values.data_ptr(), values.nbytes))


def special_tokens_map() -> dict[str, str]:
    names = ("unk_token", "bos_token", "eos_token", "pad_token")
    return dict(zip(names, SPECIAL_TOKENS, strict=True))


def tokenizer_config() -> JsonObject:
    return {
        **special_tokens_map(),
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def generation_config() -> JsonObject:
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


def _write_json(path: Path, data: JsonValue) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_checkpoint(path: Path, spec: TinyModelSpec, tokenizer: Tokenizer) -> tuple[str, ...]:
    """The checkpoint's files in the directory ``path``; their names."""
    _write_json(path / "config.json", hf_config(spec))
    _write_json(path / "generation_config.json", generation_config())
    write_weights(path / "model.safetensors", spec)
    tokenizer.save(str(path / "tokenizer.json"))
    _write_json(path / "tokenizer_config.json", tokenizer_config())
    _write_json(path / "special_tokens_map.json", special_tokens_map())
    return FILES
