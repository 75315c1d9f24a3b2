"""Model, hardware and link profiles (data files in halo_cluster/data), and any model read
from a local Hugging Face ``config.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from halo_cluster.errors import UsageError


@dataclass(frozen=True)
class ModelSpec:
    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    experts: int = 0
    active_experts: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP in a MoE model
    q_lora_rank: int = 0  # multi-head latent attention (DeepSeek)
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    params_b: float | None = None
    active_params_b: float | None = None
    dtype: str = "bf16"
    context_limit: int | None = None

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


@dataclass(frozen=True)
class Hardware:
    id: str
    name: str
    memory_gib: float
    usable_memory_gib: float
    memory_bw_gbs: float
    decode_efficiency: float
    unified: bool
    source: str


@dataclass(frozen=True)
class Link:
    id: str
    name: str
    alpha_us: float
    beta_gbps: float
    source: str


def _data(name: str) -> dict[str, Any]:
    text = resources.files("halo_cluster.data").joinpath(name).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def models() -> dict[str, ModelSpec]:
    return {
        key: ModelSpec(id=key, **value) for key, value in _data("models.json")["models"].items()
    }


def hardware_profiles() -> dict[str, Hardware]:
    return {
        key: Hardware(id=key, **value) for key, value in _data("hardware.json")["hardware"].items()
    }


def links() -> dict[str, Link]:
    return {key: Link(id=key, **value) for key, value in _data("links.json")["links"].items()}


def find_model(model_id: str) -> ModelSpec:
    catalog = models()
    if model_id not in catalog:
        raise UsageError(
            f"unknown model {model_id!r}: 'halo plan --list' shows the catalog ids; any other "
            "model by its Hugging Face config.json (halo plan --hf-config FILE, halo bench tp FILE)"
        )
    return catalog[model_id]


def find_hardware(hw_id: str) -> Hardware:
    profiles = hardware_profiles()
    if hw_id not in profiles:
        raise UsageError(f"unknown hardware {hw_id!r}; choose one of {', '.join(profiles)}")
    return profiles[hw_id]


def find_link(link_id: str) -> Link:
    """A link profile id or alias, or a ``halo bench collective`` result file (its α/β fit)."""
    path = Path(link_id)
    if link_id.endswith(".json") and path.is_file():
        return link_from_result(path)
    data = _data("links.json")
    resolved = data["aliases"].get(link_id, link_id)
    catalog = links()
    if resolved not in catalog:
        raise UsageError(
            f"unknown link {link_id!r}; choose one of {', '.join([*catalog, *data['aliases']])} "
            "or a bench collective result .json"
        )
    return catalog[resolved]


def link_from_result(path: Path) -> Link:
    """``{"schema": "halo.bench.collective/1", "fit": {"alpha_us": …, "beta_gbps": …}}``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fit = data["fit"]
        alpha, beta = float(fit["alpha_us"]), float(fit["beta_gbps"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(
            f"{path}: not a bench collective result with fit.alpha_us / fit.beta_gbps ({err})"
        ) from None
    if alpha < 0 or beta <= 0:
        raise UsageError(f"{path}: fit must have alpha_us >= 0 and beta_gbps > 0")
    return Link(f"measured:{path.name}", f"measured ({path.name})", alpha, beta, str(path))


# Hugging Face config keys -> ours (first key present wins)
HF_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "intermediate": ("intermediate_size", "ffn_hidden_size"),
    "vocab": ("vocab_size",),
    "tied_embeddings": ("tie_word_embeddings",),
    "experts": ("num_experts", "num_local_experts", "n_routed_experts"),
    "active_experts": ("num_experts_per_tok", "experts_per_token", "moe_topk"),
    "expert_intermediate": ("moe_intermediate_size",),
    "shared_experts": ("n_shared_experts",),
    "dense_layers": ("first_k_dense_replace",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "context_limit": ("max_position_embeddings", "n_positions"),
}
REQUIRED = ("layers", "hidden", "heads", "intermediate", "vocab")


def model_from_hf_config(path: Path) -> ModelSpec:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise UsageError(f"{path} is not JSON: {err}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a JSON object (a Hugging Face config.json)")
    config = (
        {**raw.get("text_config", {}), **raw} if isinstance(raw.get("text_config"), dict) else raw
    )
    values: dict[str, Any] = {}
    for ours, keys in HF_KEYS.items():
        for key in keys:
            if config.get(key) is not None:
                values[ours] = config[key]
                break
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        names = ", ".join(HF_KEYS[k][0] for k in missing)
        raise UsageError(f"{path}: missing {names}: is this a decoder model's config.json?")
    ints = {f.name for f in fields(ModelSpec) if f.type in ("int", int)}
    for key, value in values.items():
        if key in ints and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise UsageError(
                f"{path}: {HF_KEYS[key][0]} must be a whole number >= 0, got {value!r}"
            )
    values.setdefault("kv_heads", values["heads"])
    values.setdefault("head_dim", values["hidden"] // values["heads"])
    if values.get("experts") and not values.get("expert_intermediate"):
        values["expert_intermediate"] = values["intermediate"]
    values["tied_embeddings"] = bool(values.get("tied_embeddings", False))
    return ModelSpec(
        id=path.parent.name or path.stem, name=str(config.get("_name_or_path", path)), **values
    )
