"""The lab's tiny Llama as one GGUF file, for llama.cpp: the same weights as the
safetensors checkpoint (same spec, same seed) and the same byte-level BPE vocabulary.

Written with the ``gguf`` package: llama-architecture metadata, the tokenizer as a
``gpt2`` BPE with the ``default`` pre-tokenizer (llama.cpp refuses an unknown hash of a
locally trained one, so it is declared rather than detected), F16 matrices and F32 norms,
tensor names as llama.cpp's loader expects them. Q and K are permuted the way llama.cpp's
own converter does, so both engines compute the same function.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.lab.tiny_spec import (
    BOS_ID,
    CHAT_TEMPLATE,
    EOS_ID,
    MAX_POSITIONS,
    PAD_ID,
    RMS_NORM_EPS,
    ROPE_THETA,
    SPECIAL_TOKENS,
    UNK_ID,
    TinyModelSpec,
    weights,
)

if TYPE_CHECKING:
    import numpy as np
    from tokenizers import Tokenizer

GGUF_FILE = "model.gguf"
FILE_TYPE_MOSTLY_F16 = 1  # llama_ftype: every matrix F16, 1-D tensors F32
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3

# Hugging Face tensor name (after "model.layers.N.") -> llama.cpp's, and the globals.
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def gguf_name(hf_name: str) -> str:
    """llama.cpp's name for a checkpoint tensor; ValueError for one it has no name for."""
    if hf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[hf_name]
    parts = hf_name.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in LAYER_NAMES:
        return f"blk.{int(parts[2])}.{LAYER_NAMES[parts[3]]}"
    raise ValueError(f"no llama.cpp name for tensor {hf_name}")


def rope_permute(matrix: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a Q or K projection from Hugging Face's half-split rotary order to GGML's
    interleaved pairs: within each head, row i of the first half and row i of the second
    half become rows 2i and 2i+1."""
    rows = matrix.shape[0]
    half = rows // heads // 2
    return matrix.reshape(heads, 2, half, *matrix.shape[1:]).swapaxes(1, 2).reshape(matrix.shape)


def vocabulary(tokenizer: Tokenizer) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, their types, merges as "a b") from a trained byte-level BPE."""
    model = json.loads(tokenizer.to_str())["model"]
    by_id = sorted(model["vocab"].items(), key=lambda item: item[1])
    if [i for _t, i in by_id] != list(range(len(by_id))):
        raise ValueError("the tokenizer's ids are not contiguous")
    tokens = [token for token, _i in by_id]
    types = [TOKEN_CONTROL if t in SPECIAL_TOKENS else TOKEN_NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges


def gguf_tensors(spec: TinyModelSpec) -> Iterator[tuple[str, Any]]:
    """(llama.cpp name, numpy array) of every tensor: matrices F16, norms F32."""
    import numpy as np

    for name, values in weights(spec):
        array = values.float().numpy()
        if name.endswith("q_proj.weight"):
            array = rope_permute(array, spec.heads)
        elif name.endswith("k_proj.weight"):
            array = rope_permute(array, spec.kv_heads)
        dtype = np.float32 if array.ndim == 1 else np.float16
        yield gguf_name(name), np.ascontiguousarray(array.astype(dtype))


def write_gguf(path: Path, spec: TinyModelSpec, tokenizer: Tokenizer) -> None:
    """One GGUF file of ``spec``'s model and ``tokenizer``'s vocabulary at ``path``."""
    import gguf

    tokens, types, merges = vocabulary(tokenizer)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("halo lab tiny llama")
    writer.add_context_length(MAX_POSITIONS)
    writer.add_embedding_length(spec.hidden)
    writer.add_block_count(spec.layers)
    writer.add_feed_forward_length(spec.intermediate)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_vocab_size(spec.vocab)
    writer.add_file_type(FILE_TYPE_MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(UNK_ID)
    writer.add_pad_token_id(PAD_ID)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, array in gguf_tensors(spec):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
