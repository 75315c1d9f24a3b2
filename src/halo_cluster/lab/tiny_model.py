"""``halo lab model``: the lab's tiny Llama written offline in the formats asked for, the
Hugging Face checkpoint (``tiny_checkpoint``, for vLLM) and/or one GGUF file (``tiny_gguf``,
for llama.cpp), same weights and vocabulary; and what was written, as ``--json`` shows it.

torch, tokenizers and gguf are imported inside the functions that use them.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from halo_cluster.errors import HaloError, UsageError
from halo_cluster.jsonout import JsonObject
from halo_cluster.lab.tiny_checkpoint import write_checkpoint
from halo_cluster.lab.tiny_gguf import GGUF_FILE, write_gguf
from halo_cluster.lab.tiny_spec import ARCHITECTURE, MAX_POSITIONS, TinyModelSpec, parameter_count
from halo_cluster.lab.tiny_tokenizer import train_tokenizer


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


@dataclass(frozen=True)
class ModelSummary:
    """What ``write_model`` wrote; ``to_dict`` is the --json schema."""

    dir: str
    spec: TinyModelSpec
    parameters: int
    files: dict[str, int]

    def to_dict(self) -> JsonObject:
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
    path: Path,
    spec: TinyModelSpec,
    force: bool = False,
    formats: tuple[str, ...] = ("safetensors",),
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
            names += write_checkpoint(path, spec, tokenizer)
        if "gguf" in formats:
            write_gguf(path / GGUF_FILE, spec, tokenizer)
            names.append(GGUF_FILE)
    except OSError as err:
        raise HaloError(f"cannot write into {path}: {err}") from None
    files = {name: os.path.getsize(path / name) for name in sorted(names)}
    return ModelSummary(str(path.resolve()), spec, parameter_count(spec), files)
