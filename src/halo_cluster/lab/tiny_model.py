"""A tiny Llama-architecture model built offline: config, random weights, tokenizer.

The lab needs a real checkpoint that vLLM and transformers load without a hub: the
same file names, tensor names and shapes as a Hugging Face ``LlamaForCausalLM``, only
small. Weights are seeded random values (same seed, byte-identical file); the
tokenizer is a byte-level BPE trained here on a built-in English corpus, so the
directory is complete with ``HF_HUB_OFFLINE=1``.

torch and tokenizers are imported inside the functions that use them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from halo_cluster.errors import HaloError, UsageError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

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
FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)

# The corpus: a few sentences and word lists; numbers give the BPE trainer enough distinct
# words to reach large vocabularies (a merge needs a pair that still occurs somewhere).


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


TEXT = """\
The cluster has two nodes linked by a fast fabric. Each node runs one part of the model.
A token is generated when every layer has done its work and the results are shared.
The river ran past the old mill, and the children watched the boats go by in the sun.
She opened the window, heard the rain on the roof and went back to her book.
Good morning! How are you today? I am fine, thank you, and I hope you are well too.
Numbers such as 3, 14, 159 and 2026 appear in tables, dates, prices and measurements.
"""
NOUNS = _words("""time year people way day man thing woman life child world school state family
student group country problem hand part place case week company system program question work
number night point home water room mother area money story fact month right study book eye job
word business issue side kind head house service friend father power hour game line end member
law car city community name team minute idea body information back parent face level office door
health person art history party result change morning reason research girl moment air teacher
force education cluster node network fabric model token river mountain garden window kitchen
letter music picture paper table engine signal memory cable switch machine server light field
forest ocean island bridge road train street market bread apple orange summer winter""")
VERBS = _words("""run walk see read write build carry send open close learn teach move start
stop watch find keep bring hold turn show play help call ask talk""")
ADJECTIVES = _words("""small large quiet bright dark old new fast slow warm cold green blue red
happy busy simple careful strong gentle early late""")


@dataclass(frozen=True)
class ModelSpec:
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

    def validate(self) -> ModelSpec:
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


def hf_config(spec: ModelSpec) -> dict[str, Any]:
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


def tensor_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
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


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def parameter_count(spec: ModelSpec) -> int:
    return sum(_numel(shape) for shape in tensor_shapes(spec).values())


def safetensors_header(shapes: dict[str, tuple[int, ...]]) -> bytes:
    """Length prefix + JSON header of a bf16 safetensors file, tensors laid out in order.

    The format: 8-byte little-endian header length, the JSON header (padded with spaces to
    a multiple of 8, as the reference writer does), then the raw tensor bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        end = offset + 2 * _numel(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def weights(spec: ModelSpec) -> Iterator[tuple[str, Any]]:
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


def write_weights(path: Path, spec: ModelSpec) -> None:
    """model.safetensors: the header, then each tensor's raw bf16 bytes."""
    import ctypes

    with path.open("wb") as out:
        out.write(safetensors_header(tensor_shapes(spec)))
        for _name, values in weights(spec):
            values = values.contiguous()
            # Raw bf16 bytes without numpy; x86 and arm64 are little-endian like the format.
            out.write(ctypes.string_at(values.data_ptr(), values.nbytes))


def corpus(vocab: int) -> Iterator[str]:
    """Deterministic English-like text, enough of it to train a BPE of ``vocab`` tokens."""
    draw = random.Random(0)
    for _ in range(8):
        yield TEXT
    for _ in range(2 * vocab):
        adjective, verb = draw.choice(ADJECTIVES), draw.choice(VERBS)
        subject, thing = draw.choice(NOUNS), draw.choice(NOUNS)
        number = draw.randint(1, 999_999)
        yield f"The {adjective} {subject} {verb}s the {thing} in {number}.\n"


def train_tokenizer(vocab: int) -> Tokenizer:
    """A byte-level BPE of exactly ``vocab`` tokens; encoding adds <s> like Llama's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(vocab), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    return tokenizer


def special_tokens_map() -> dict[str, str]:
    names = ("unk_token", "bos_token", "eos_token", "pad_token")
    return dict(zip(names, SPECIAL_TOKENS, strict=True))


def tokenizer_config() -> dict[str, Any]:
    return {
        **special_tokens_map(),
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def generation_config() -> dict[str, Any]:
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


def require_packages(formats: tuple[str, ...] = ("safetensors",)) -> None:
    """UsageError naming the extra to install when torch, tokenizers (or gguf) is missing."""
    needed = ("torch", "tokenizers", *(("gguf",) if "gguf" in formats else ()))
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"halo lab model needs {' and '.join(missing)}: pip install 'halo-cluster[lab]'"
        )


def prepare_dir(path: Path, force: bool) -> None:
    """Create ``path``; an existing non-empty directory only with ``force``."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise UsageError(f"{path} is not empty (use --force to write into it)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create {path}: {err.strerror}") from None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


@dataclass(frozen=True)
class ModelSummary:
    """What ``write_model`` wrote; ``to_dict`` is the --json schema."""

    dir: str
    spec: ModelSpec
    parameters: int
    files: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        return {
            "dir": self.dir,
            "architecture": ARCHITECTURE,
            "layers": s.layers,
            "hidden": s.hidden,
            "heads": s.heads,
            "kv_heads": s.kv_heads,
            "head_dim": s.head_dim,
            "intermediate": s.intermediate,
            "vocab": s.vocab,
            "max_position_embeddings": MAX_POSITIONS,
            "dtype": "bfloat16",
            "seed": s.seed,
            "parameters": self.parameters,
            "bytes": sum(self.files.values()),
            "files": self.files,
        }


FORMATS = ("safetensors", "gguf")


def write_model(
    path: Path, spec: ModelSpec, force: bool = False, formats: tuple[str, ...] = ("safetensors",)
) -> ModelSummary:
    """Write ``spec``'s model into ``path``: the Hugging Face checkpoint (config, weights,
    tokenizer) for vLLM and/or one GGUF file (model.gguf) for llama.cpp, same weights."""
    spec.validate()
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UsageError(f"--format: {', '.join(unknown) or 'none'} (known: {', '.join(FORMATS)})")
    require_packages(formats)
    prepare_dir(path, force)
    names: list[str] = []
    try:
        tokenizer = train_tokenizer(spec.vocab)
        if "safetensors" in formats:
            _write_json(path / "config.json", hf_config(spec))
            _write_json(path / "generation_config.json", generation_config())
            write_weights(path / "model.safetensors", spec)
            tokenizer.save(str(path / "tokenizer.json"))
            _write_json(path / "tokenizer_config.json", tokenizer_config())
            _write_json(path / "special_tokens_map.json", special_tokens_map())
            names += FILES
        if "gguf" in formats:
            from halo_cluster.lab.gguf_model import GGUF_FILE, write_gguf

            write_gguf(path / GGUF_FILE, spec, tokenizer)
            names.append(GGUF_FILE)
    except OSError as err:
        raise HaloError(f"cannot write into {path}: {err}") from None
    files = {name: os.path.getsize(path / name) for name in sorted(names)}
    return ModelSummary(str(path.resolve()), spec, parameter_count(spec), files)
